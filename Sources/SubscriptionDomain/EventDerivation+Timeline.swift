// The timeline of one user's data (see EventDerivation.swift): the occurrences it holds and the
// states around them, evaluated by ``SubscriptionEvaluator`` (its rules are not repeated here).

/// One event of a timeline before it is given an id and a detection time.
struct Occurrence {
  var cause: EventCause
  var type: SubscriptionEventType
  /// When the event becomes known by time alone; `.min` for events caused by data.
  var dueMs: Int64
  var occurredMs: Int64
  var groupId: String?
  var productId: String?
  /// The position in the timeline's transactions of the one that caused it (purchase,
  /// revocation, reversal): its id, price and offer.
  var transaction: Int?
  var originalTransactionId: String?
  var stateBefore: SubscriptionState?
  var stateAfter: SubscriptionState?
  var expirationReason: String?
  var previousProductId: String?
  var isPurchase = false
}

/// How events treat a transaction's product: the catalog's type and group, else the transaction's
/// own (an unknown product with a group is an auto-renewable of it, as evaluation treats it).
enum PurchaseKind: Equatable {
  case autoRenewable(groupId: String)
  case nonRenewing
  case oneTime
  case ignored
}

struct Timeline {
  let catalog: Catalog
  /// Merged, ordered by purchase date then transaction id.
  let transactions: [Transaction]
  let renewals: [RenewalInfo]
  /// `before`'s renewal infos during a write: they still describe the instants before `after`'s
  /// new transactions of their subscription.
  let fallbackRenewals: [RenewalInfo]
  let kinds: [PurchaseKind]
  /// Per original transaction id: positions in ``transactions`` (purchase order).
  let positionsByOriginal: [String: [Int]]
  let latestPurchase: [String: Int64]
  let fallbackLatestPurchase: [String: Int64]
  /// Per transaction: the auto-renewable of its subscription bought before it (the one a purchase
  /// continues), or -1.
  let previousInSubscription: [Int]
  /// Per group with data: its statuses over time (``status(_:at:)``).
  let states: [String: GroupStates]

  init(history: PurchaseHistory, fallback: PurchaseHistory?, catalog: Catalog) {
    self.catalog = catalog
    let transactions =
      history.transactionsAreMerged
      ? Timeline.inPurchaseOrder(history.transactions) : Transaction.merged(history.transactions)
    self.transactions = transactions
    renewals = RenewalInfo.merged(history.renewals)
    fallbackRenewals = fallback.map { RenewalInfo.merged($0.renewals) } ?? []
    kinds = transactions.map { Timeline.kind(of: $0, catalog: catalog) }
    var positions: [String: [Int]] = [:]
    var latest: [String: Int64] = [:]
    for i in transactions.indices {
      let (otx, bought) = (transactions[i].originalTransactionId, transactions[i].purchaseDate)
      positions[otx, default: []].append(i)
      latest[otx] = max(latest[otx] ?? .min, bought)
    }
    positionsByOriginal = positions
    latestPurchase = latest
    var fallbackLatest: [String: Int64] = [:]
    if let before = fallback?.transactions {
      for k in before.indices {
        let (otx, bought) = (before[k].originalTransactionId, before[k].purchaseDate)
        fallbackLatest[otx] = max(fallbackLatest[otx] ?? .min, bought)
      }
    }
    fallbackLatestPurchase = fallbackLatest
    // Per transaction: the next later purchase of its subscription (`.max` when none): a
    // transaction marked upgraded was upgraded then, unless its revocation date says when.
    var nextPurchase = [Int64](repeating: .max, count: transactions.count)
    var previous = [Int](repeating: -1, count: transactions.count)
    for list in positions.values {
      var last = -1
      for j in list {
        previous[j] = last
        if case .autoRenewable = kinds[j] { last = j }
      }
      var later = Int64.max
      var k = list.count - 1
      // `list` is in purchase order: walk back, transactions bought at the same instant share it.
      while k >= 0 {
        var first = k
        while first > 0 && transactions[list[first - 1]].purchaseDate == transactions[list[k]].purchaseDate {
          first -= 1
        }
        for j in first...k { nextPurchase[list[j]] = later }
        later = transactions[list[k]].purchaseDate
        k = first - 1
      }
    }
    previousInSubscription = previous
    states = Timeline.groupStates(
      transactions: transactions, kinds: kinds, renewals: renewals, fallbackRenewals: fallbackRenewals,
      latestPurchase: latest, fallbackLatestPurchase: fallbackLatest, nextPurchaseInSubscription: nextPurchase,
      catalog: catalog)
  }

  /// `transactions` sorted by ``Transaction/inPurchaseOrder(_:_:)`` (stable), as
  /// `sorted(by:)` sorts them; positions are sorted and each transaction moved once (sorting the
  /// array itself moves its elements, a dozen strings each, many times), and a store's rows already
  /// in that order are taken as they are.
  static func inPurchaseOrder(_ transactions: [Transaction]) -> [Transaction] {
    // Ids are compared only on equal dates.
    func before(_ a: Int, _ b: Int) -> Bool {
      let (dateA, dateB) = (transactions[a].purchaseDate, transactions[b].purchaseDate)
      return dateA != dateB ? dateA < dateB : transactions[a].transactionId < transactions[b].transactionId
    }
    if transactions.indices.dropFirst().allSatisfy({ !before($0, $0 - 1) }) { return transactions }
    return transactions.indices.sorted(by: before).map { transactions[$0] }
  }

  static func kind(of t: Transaction, catalog: Catalog) -> PurchaseKind {
    if let position = catalog.position(of: t.productId) {
      switch catalog.products[position].type {
      case .autoRenewable:
        return .autoRenewable(groupId: catalog.subscriptionGroupIds[catalog.groupIndexOfProduct[position]])
      case .nonRenewing: return .nonRenewing
      case .consumable, .nonConsumable: return .oneTime
      case .freeSubscription: return .ignored
      }
    }
    if let group = t.subscriptionGroupIdentifier, !group.isEmpty { return .autoRenewable(groupId: group) }
    switch t.type {
    case .nonRenewing?: return .nonRenewing
    case .consumable?, .nonConsumable?: return .oneTime
    default: return .ignored
    }
  }

  func groupId(_ i: Int) -> String? {
    if case .autoRenewable(let group) = kinds[i] { return group }
    return nil
  }

  /// The group of a subscription: its transactions', else its renewal product's in the catalog.
  func groupId(originalTransactionId: String, productId: String) -> String? {
    for i in positionsByOriginal[originalTransactionId] ?? [] {
      if let group = groupId(i) { return group }
    }
    if let position = catalog.position(of: productId), catalog.products[position].type == .autoRenewable {
      return catalog.subscriptionGroupIds[catalog.groupIndexOfProduct[position]]
    }
    return nil
  }

  // MARK: States

  /// The renewal info of `originalTransactionId` that describes instant `t`: after's while no later
  /// transaction of its subscription exists; `before`'s during a write for the instants before
  /// `after`'s new ones.
  func renewalInfo(of originalTransactionId: String?, at t: Int64) -> RenewalInfo? {
    guard let originalTransactionId else { return nil }
    if RenewalInfo.describes(t, subscriptionLatestPurchase: latestPurchase[originalTransactionId]) {
      return renewals.first { $0.originalTransactionId == originalTransactionId }
    }
    guard RenewalInfo.describes(t, subscriptionLatestPurchase: fallbackLatestPurchase[originalTransactionId]) else {
      return nil
    }
    return fallbackRenewals.first { $0.originalTransactionId == originalTransactionId }
  }

  /// A group's status at `t` as ``SubscriptionEvaluator`` tells it of the data as it stood then (the
  /// renewal infos that describe `t`; a transaction upgraded later not marked upgraded yet: the
  /// evaluator never lets a transaction marked upgraded cover, rule 12, before the upgrade it did).
  /// `nil` for a group evaluation does not know at `t`.
  func status(_ group: String, at t: Int64) -> TimelineStatus? {
    guard let states = states[group] else {
      return catalog.subscriptionGroupIds.contains(group)
        ? TimelineStatus(state: .neverSubscribed, deciding: -1, renewal: -1) : nil
    }
    return states.status(at: t)
  }

  func state(_ group: String?, at t: Int64) -> SubscriptionState? {
    guard let group else { return nil }
    return status(group, at: t)?.state ?? .neverSubscribed
  }

  /// The renewal info a status names (``TimelineStatus/renewal``).
  func renewal(_ k: Int) -> RenewalInfo {
    k < renewals.count ? renewals[k] : fallbackRenewals[k - renewals.count]
  }

  func transactionId(_ s: TimelineStatus) -> String? {
    s.deciding >= 0 ? transactions[s.deciding].transactionId : nil
  }

  func productId(_ s: TimelineStatus) -> String? {
    s.deciding >= 0 ? transactions[s.deciding].productId : s.renewal >= 0 ? renewal(s.renewal).productId : nil
  }

  func originalTransactionId(_ s: TimelineStatus) -> String? {
    s.deciding >= 0
      ? transactions[s.deciding].originalTransactionId
      : s.renewal >= 0 ? renewal(s.renewal).originalTransactionId : nil
  }

  func expiresDate(_ s: TimelineStatus) -> Int64? {
    s.deciding >= 0 ? transactions[s.deciding].expiresDate : nil
  }

  // MARK: Occurrences

  /// The timeline's occurrences: with `includeData`, one per purchase and revocation (their
  /// states filled in by ``complete(_:)``); and the changes by time alone due by `dueThrough`
  /// (with `dueAfter`, those due after it at least: instants that cannot give one are skipped).
  func occurrences(
    dueThrough: Int64, dueAfter: Int64 = .min, includeData: Bool = true, skipping known: Set<EventCause> = []
  ) -> [Occurrence] {
    var result: [Occurrence] = []
    if includeData {
      for i in transactions.indices { appendDataOccurrences(of: i, skipping: known, to: &result) }
    }
    appendTimeOccurrences(from: Self.earliestInstant(dueAfter: dueAfter), dueThrough: dueThrough, to: &result)
    return result
  }

  /// The instant after which changes by time alone due after `dueAfter` happen: a change at `t`
  /// is due at `t`, or for an undecided lapse or billing retry's end at most 60 days and 1 ms
  /// later. ``occurrences(dueThrough:dueAfter:includeData:skipping:)`` reads the states at
  /// and after it only.
  static func earliestInstant(dueAfter: Int64) -> Int64 {
    let (earliest, overflow) = dueAfter.subtractingReportingOverflow(SubscriptionEvaluator.billingRetryLimit + 1)
    return overflow ? .min : earliest
  }

  /// Whether the fallback's renewal infos tell nothing from `earliest` on, so the timeline's
  /// changes by time alone there are those of one without a fallback: each describes only the
  /// instants before the latest purchase of its subscription in the history
  /// (``renewalInfo(of:at:)``), and its grace end is no candidate instant after `earliest`.
  func fallbackIsSilent(after earliest: Int64) -> Bool {
    fallbackRenewals.allSatisfy {
      (latestPurchase[$0.originalTransactionId] ?? .min) <= earliest && ($0.gracePeriodExpiresDate ?? .min) <= earliest
    }
  }

  private func appendDataOccurrences(of i: Int, skipping known: Set<EventCause>, to result: inout [Occurrence]) {
    let id = transactions[i].transactionId
    let purchaseKnown = known.contains(.purchase(transactionId: id))
    let revocationKnown = transactions[i].revocationDate.map {
      known.contains(.revocation(transactionId: id, revocationMs: $0))
    } ?? true
    if purchaseKnown && revocationKnown { return }
    let t = transactions[i]
    let type: SubscriptionEventType
    switch kinds[i] {
    case .ignored: return
    case .oneTime: type = .oneTimePurchased
    case .nonRenewing: type = .nonRenewingPurchased
    case .autoRenewable: type = .subscriptionStarted  // classified by complete(_:)
    }
    var purchase = Occurrence(
      cause: .purchase(transactionId: t.transactionId), type: type, dueMs: .min, occurredMs: t.purchaseDate,
      groupId: groupId(i), productId: t.productId, transaction: i, originalTransactionId: t.originalTransactionId)
    purchase.isPurchase = true
    result.append(purchase)
    if let revocationDate = t.revocationDate, let kind = RevocationKind(classifying: t), kind != .upgrade {
      result.append(
        Occurrence(
          cause: .revocation(transactionId: t.transactionId, revocationMs: revocationDate),
          type: kind == .refund ? .refunded : .familyAccessRevoked, dueMs: .min, occurredMs: revocationDate,
          groupId: groupId(i), productId: t.productId, transaction: i, originalTransactionId: t.originalTransactionId))
    }
  }

  /// Fills in the states of a purchase or revocation and classifies a subscription purchase.
  func complete(_ o: inout Occurrence) {
    guard case .purchase = o.cause else {
      if case .revocation = o.cause, let group = o.groupId {
        o.stateBefore = state(group, at: o.occurredMs &- 1)
        o.stateAfter = state(group, at: o.occurredMs)
      }
      return
    }
    guard let group = o.groupId, let position = o.transaction else { return }
    let t = transactions[position]
    let before = state(group, at: t.purchaseDate &- 1) ?? .neverSubscribed
    o.stateBefore = before
    o.stateAfter = state(group, at: t.purchaseDate)
    // The subscription's previous transaction (same original transaction id, bought earlier).
    guard previousInSubscription[position] >= 0 else {
      o.type = before == .expired || before == .revoked ? .resubscribed : .subscriptionStarted
      return
    }
    let previous = transactions[previousInSubscription[position]]
    let revokedBefore =
      previous.revocationDate.map { $0 <= t.purchaseDate && RevocationKind(classifying: previous) != .upgrade }
      ?? false
    let gap = previous.expiresDate.map { t.purchaseDate > $0 } ?? false
    if before == .gracePeriod || before == .billingRetry {
      o.type = .billingRecovered
    } else if revokedBefore || (gap && !awaitingRenewal(previous, at: t.purchaseDate &- 1)) {
      o.type = .resubscribed
    } else if previous.productId != t.productId {
      o.type = .productChanged
      o.previousProductId = previous.productId
    } else if previous.isFreeTrial && !t.isFreeTrial {
      o.type = .trialConverted
    } else {
      o.type = .renewed
    }
  }

  /// Whether `lapsed`'s subscription was awaiting Apple's renewal decision at `t`: its renewal info
  /// then said it auto-renews, without an expiration intent, and billing retry's 60 days after the
  /// period had not passed. A purchase after such a gap continues the subscription.
  func awaitingRenewal(_ lapsed: Transaction, at t: Int64) -> Bool {
    guard let info = renewalInfo(of: lapsed.originalTransactionId, at: t), info.willAutoRenew,
      info.rawExpirationIntent == nil, let end = lapsed.expiresDate
    else { return false }
    return t - end <= SubscriptionEvaluator.billingRetryLimit
  }

  /// The instants a group's state may change by time alone, per group: its periods' ends and its
  /// renewal infos' grace ends (billing retry's end is added once a lapse into it is found).
  private func timeCandidates() -> [String: Set<Int64>] {
    var candidates: [String: Set<Int64>] = [:]
    for i in transactions.indices {
      guard let group = groupId(i), let end = transactions[i].expiresDate else { continue }
      candidates[group, default: []].insert(end)
    }
    for r in renewals + fallbackRenewals {
      guard let grace = r.gracePeriodExpiresDate,
        let group = groupId(originalTransactionId: r.originalTransactionId, productId: r.productId)
      else { continue }
      candidates[group, default: []].insert(grace)
    }
    return candidates
  }

  private func appendTimeOccurrences(from earliest: Int64, dueThrough: Int64, to result: inout [Occurrence]) {
    for (group, instants) in timeCandidates().sorted(by: { $0.key < $1.key }) {
      var pending = instants.sorted()
      var retryEnds = Set<Int64>()
      var k = 0
      while k < pending.count {
        let t = pending[k]
        k += 1
        guard t <= dueThrough, t > earliest, t > .min,
          let now = status(group, at: t), now.state != .active,
          let then = status(group, at: t - 1), then.state != now.state
        else { continue }
        let lapsed = transactionId(now) ?? transactionId(then) ?? originalTransactionId(now) ?? "at:\(t)"
        var o = Occurrence(
          cause: .expired(groupId: group, lapsedTransactionId: lapsed), type: .expired, dueMs: t, occurredMs: t,
          groupId: group, productId: productId(now) ?? productId(then),
          originalTransactionId: originalTransactionId(now) ?? originalTransactionId(then), stateBefore: then.state,
          stateAfter: now.state)
        let info = renewalInfo(of: o.originalTransactionId, at: t)
        switch (then.state, now.state) {
        case (.active, .gracePeriod), (.active, .billingRetry):
          o.cause = .billingIssue(groupId: group, lapsedTransactionId: lapsed)
          o.type = .billingIssue
          result.append(o)
          // Billing retry ends 60 days after the period (rule 18): a candidate of its own.
          let end = (expiresDate(now) ?? t).addingReportingOverflow(SubscriptionEvaluator.billingRetryLimit + 1)
          if !end.overflow && retryEnds.insert(end.partialValue).inserted {
            pending.insert(end.partialValue, at: pending[k...].firstIndex { $0 > end.partialValue } ?? pending.count)
          }
        case (.active, .expired), (.active, .revoked):
          // Apple decides a renewal that auto-renews: until it says (a renewal, a billing issue, an
          // expiration intent) the lapse is settled only when retrying would have ended.
          let undecided = info.map { $0.willAutoRenew && $0.rawExpirationIntent == nil } ?? false
          if undecided {
            let settled = t.addingReportingOverflow(SubscriptionEvaluator.billingRetryLimit)
            o.dueMs = settled.overflow ? .max : settled.partialValue
          } else {
            o.expirationReason = Self.expirationReason(info, fallback: info.map { _ in "voluntary" })
          }
          if o.dueMs <= dueThrough { result.append(o) }
        case (.gracePeriod, .billingRetry):
          o.cause = .gracePeriodExpired(groupId: group, lapsedTransactionId: lapsed)
          o.type = .gracePeriodExpired
          result.append(o)
        case (.gracePeriod, .expired), (.gracePeriod, .revoked):
          var grace = o
          grace.cause = .gracePeriodExpired(groupId: group, lapsedTransactionId: lapsed)
          grace.type = .gracePeriodExpired
          result.append(grace)
          o.expirationReason = Self.expirationReason(info, fallback: "billing_error")
          result.append(o)
        case (.billingRetry, .expired), (.billingRetry, .revoked):
          o.expirationReason = Self.expirationReason(info, fallback: "billing_error")
          result.append(o)
        default:
          continue
        }
      }
    }
  }

  /// Apple's expiration intent in the API's words; `fallback` when the renewal info has none.
  static func expirationReason(_ renewal: RenewalInfo?, fallback: String?) -> String? {
    switch renewal?.expirationIntent {
    case .customerCancelled?: "voluntary"
    case .billingError?: "billing_error"
    case .didNotConsentToPriceIncrease?: "price_increase"
    case .productNotAvailable?: "product_unavailable"
    case .other?: "other"
    case nil: renewal?.rawExpirationIntent != nil ? "other" : fallback
    }
  }
}
