// The states of a timeline's groups at every instant, from one walk over its data in time order
// (see EventDerivation.swift). A group's status (SubscriptionEvaluator's rule 5 with rules 12, 16
// and 18) only changes at an instant the data names: a purchase, a period's end, a revocation, an
// upgrade, a grace period's end, billing retry's 60 days after a period, a renewal info starting or
// ceasing to describe the present. The walk visits those instants once, in order, keeping what
// evaluation aggregates (the covering transactions, the newest ones, each subscription's lapsed
// transaction) up to date as purchases come in, and records each group's status where it changes.
// A query is then a binary search. `GroupStatesTests` checks every recorded status against
// ``SubscriptionEvaluator`` at and around each instant.

/// A group's status over an interval: what the evaluator's ``GroupStatus`` tells there, by position.
struct TimelineStatus: Equatable {
  var state: SubscriptionState
  /// The transaction that decides the state (position in the timeline's transactions), or -1.
  var deciding: Int
  /// The renewal info of a grace period or billing retry (``Timeline/renewal(_:)``), or -1.
  var renewal: Int
}

/// Per group of a timeline: its status from each instant on (`starts` ascending, the first `.min`);
/// `nil` while a group outside the catalog has no purchase yet (evaluation does not know it then).
struct GroupStates {
  var starts: [Int64] = []
  var statuses: [TimelineStatus?] = []

  func status(at t: Int64) -> TimelineStatus? {
    // The last start <= t (the first start is .min).
    var low = 0
    var high = starts.count
    while high - low > 1 {
      let mid = (low + high) / 2
      if starts[mid] <= t { low = mid } else { high = mid }
    }
    return statuses[low]
  }
}

extension Timeline {
  /// The walk: each group's statuses, by group id.
  static func groupStates(
    transactions: [Transaction], kinds: [PurchaseKind], renewals: [RenewalInfo], fallbackRenewals: [RenewalInfo],
    latestPurchase: [String: Int64], fallbackLatestPurchase: [String: Int64],
    nextPurchaseInSubscription: [Int64], catalog: Catalog
  ) -> [String: GroupStates] {
    var walk = StatesWalk(
      transactions: transactions, kinds: kinds, renewals: renewals + fallbackRenewals,
      fallbackCount: fallbackRenewals.count, latestPurchase: latestPurchase,
      fallbackLatestPurchase: fallbackLatestPurchase, nextPurchaseInSubscription: nextPurchaseInSubscription,
      catalog: catalog)
    return walk.run()
  }
}

/// The walk's working state (one per ``Timeline/groupStates(transactions:kinds:renewals:fallbackRenewals:latestPurchase:fallbackLatestPurchase:nextPurchaseInSubscription:catalog:)``).
private struct StatesWalk {
  let transactions: [Transaction]
  let catalog: Catalog
  /// After's renewal infos, then `fallbackCount` of before's (see ``Timeline/renewalInfo(of:at:)``).
  let renewals: [RenewalInfo]
  let fallbackCount: Int
  /// Per renewal info: the latest purchase of its subscription in the data it belongs to (after's,
  /// or before's for a fallback), and in after's (``RenewalInfo/describes(_:subscriptionLatestPurchase:)``).
  var ownLatest: [Int64?] = []
  var afterLatest: [Int64?] = []
  /// Per renewal info: its catalog group (placed by product when its subscription has no
  /// transaction yet), or -1.
  var productGroup: [Int] = []
  /// Per renewal info: its subscription's index in `lapsed`.
  var subscriptionOf: [Int] = []

  var groupIds: [String] = []
  var catalogGroup: [Bool] = []
  /// Per transaction, what the walk reads (plain values: no copy of a transaction's strings).
  var purchase: [Int64] = []
  /// The period's end (`.min` when absent), as evaluation reads it.
  var expires: [Int64] = []
  /// The revocation date, `.max` when absent.
  var revocation: [Int64] = []
  var familyShared: [Bool] = []
  /// Per transaction: its group index (auto-renewables), else -1.
  var groupOf: [Int] = []
  /// Per transaction: from when it counts as upgraded (`.max`: never): a transaction marked
  /// upgraded was not upgraded yet before its revocation date, else the next purchase of its
  /// subscription (the evaluator never lets a transaction marked upgraded cover, rule 12).
  var upgradedFrom: [Int64] = []
  /// Per transaction: the end of the interval it covers from its purchase (rules 3, 12).
  var coverEnd: [Int64] = []
  /// Per transaction: the purchase of the next strictly later auto-renewable of its subscription,
  /// which ends its period (evaluation's `endSupersededPeriods`); `.max`: none.
  var nextAutoRenewable: [Int64] = []
  /// Per transaction: the index of its subscription in `lapsed`, or -1 when no renewal info is about it.
  var tracked: [Int] = []

  /// Per group: its auto-renewables bought so far (purchase order) and those that may still cover.
  var bought: [[Int]] = []
  var open: [[Int]] = []
  /// Per subscription with a renewal info: its newest auto-renewable bought so far, or -1.
  var lapsed: [Int] = []

  init(
    transactions: [Transaction], kinds: [PurchaseKind], renewals: [RenewalInfo], fallbackCount: Int,
    latestPurchase: [String: Int64], fallbackLatestPurchase: [String: Int64],
    nextPurchaseInSubscription: [Int64], catalog: Catalog
  ) {
    self.transactions = transactions
    self.catalog = catalog
    self.renewals = renewals
    self.fallbackCount = fallbackCount
    var groupIndex: [String: Int] = [:]
    func index(_ group: String, catalog inCatalog: Bool) -> Int {
      if let existing = groupIndex[group] { return existing }
      groupIndex[group] = groupIds.count
      groupIds.append(group)
      catalogGroup.append(inCatalog)
      return groupIds.count - 1
    }
    let catalogGroups = Set(catalog.subscriptionGroupIds)
    groupOf = kinds.map {
      if case .autoRenewable(let group) = $0 { return index(group, catalog: catalogGroups.contains(group)) }
      return -1
    }
    var subscriptions: [String: Int] = [:]
    let afterCount = renewals.count - fallbackCount
    for (k, r) in renewals.enumerated() {
      let latest = latestPurchase[r.originalTransactionId]
      afterLatest.append(latest)
      ownLatest.append(k < afterCount ? latest : fallbackLatestPurchase[r.originalTransactionId])
      if let position = catalog.position(of: r.productId), catalog.products[position].type == .autoRenewable {
        productGroup.append(index(catalog.subscriptionGroupIds[catalog.groupIndexOfProduct[position]], catalog: true))
      } else {
        productGroup.append(-1)
      }
      if let existing = subscriptions[r.originalTransactionId] {
        subscriptionOf.append(existing)
      } else {
        subscriptions[r.originalTransactionId] = lapsed.count
        subscriptionOf.append(lapsed.count)
        lapsed.append(-1)
      }
    }
    bought = Array(repeating: [], count: groupIds.count)
    open = Array(repeating: [], count: groupIds.count)
    // Per transaction: the next strictly later auto-renewable purchase of its subscription.
    nextAutoRenewable = Array(repeating: .max, count: transactions.count)
    var laterBySubscription: [String: (purchase: Int64, next: Int64)] = [:]
    for i in transactions.indices.reversed() where groupOf[i] >= 0 {
      let bought = transactions[i].purchaseDate
      let seen = laterBySubscription[transactions[i].originalTransactionId]
      // Transactions bought at the same instant share the next later one.
      let next = seen.map { $0.purchase > bought ? $0.purchase : $0.next } ?? .max
      nextAutoRenewable[i] = next
      laterBySubscription[transactions[i].originalTransactionId] = (bought, next)
    }
    let count = transactions.count
    tracked.reserveCapacity(count)
    purchase.reserveCapacity(count)
    expires.reserveCapacity(count)
    revocation.reserveCapacity(count)
    familyShared.reserveCapacity(count)
    upgradedFrom.reserveCapacity(count)
    coverEnd.reserveCapacity(count)
    for i in transactions.indices {
      tracked.append(subscriptions.isEmpty ? -1 : subscriptions[transactions[i].originalTransactionId] ?? -1)
      purchase.append(transactions[i].purchaseDate)
      expires.append(transactions[i].expiresDate ?? .min)
      revocation.append(transactions[i].revocationDate ?? .max)
      familyShared.append(transactions[i].rawInAppOwnershipType == OwnershipType.familyShared.rawValue)
      let upgrade = nextPurchaseInSubscription[i] == .max ? nil : nextPurchaseInSubscription[i]
      upgradedFrom.append(transactions[i].isUpgraded ? (transactions[i].revocationDate ?? upgrade ?? .min) : .max)
      coverEnd.append(min(expires[i], nextAutoRenewable[i], revocation[i], upgradedFrom[i]))
    }
  }

  /// The instants at which some group's status may change, ascending, starting with `.min`.
  func instants() -> [Int64] {
    var result: [Int64] = [.min]
    result.reserveCapacity(3 * transactions.count + 2 * renewals.count + 1)
    for i in transactions.indices {
      result.append(purchase[i])
      if revocation[i] != .max { result.append(revocation[i]) }
      guard groupOf[i] >= 0 else { continue }
      if let end = transactions[i].expiresDate {
        result.append(end)
        let retryEnd = end.addingReportingOverflow(SubscriptionEvaluator.billingRetryLimit + 1)
        if !retryEnd.overflow { result.append(retryEnd.partialValue) }
      }
      if upgradedFrom[i] != .max { result.append(upgradedFrom[i]) }
    }
    for (k, r) in renewals.enumerated() {
      if let grace = r.gracePeriodExpiresDate { result.append(grace) }
      for latest in [ownLatest[k], afterLatest[k]] { if let latest { result.append(latest) } }
    }
    result.sort()
    var unique: [Int64] = []
    unique.reserveCapacity(result.count)
    for t in result where unique.last != t { unique.append(t) }
    return unique
  }

  mutating func run() -> [String: GroupStates] {
    var states = [GroupStates](repeating: GroupStates(), count: groupIds.count)
    var next = 0  // the next transaction to buy (transactions are in purchase order)
    for t in instants() {
      while next < purchase.count && purchase[next] <= t {
        buy(next)
        next += 1
      }
      for g in groupIds.indices {
        let status = status(g, at: t)
        if states[g].statuses.isEmpty || states[g].statuses[states[g].statuses.count - 1] != status {
          states[g].starts.append(t)
          states[g].statuses.append(status)
        }
      }
    }
    var result: [String: GroupStates] = [:]
    for g in groupIds.indices { result[groupIds[g]] = states[g] }
    return result
  }

  private mutating func buy(_ i: Int) {
    let g = groupOf[i]
    guard g >= 0 else { return }
    bought[g].append(i)
    if coverEnd[i] > purchase[i] { open[g].append(i) }
    // A subscription's newest transaction: no later one of it is bought yet, so its period is its own.
    let s = tracked[i]
    if s >= 0 && (lapsed[s] < 0 || isNewer(i, than: lapsed[s], at: purchase[i])) { lapsed[s] = i }
  }

  // MARK: Evaluation's orders (SubscriptionEvaluator's Engine), by position

  /// The period's end at `t` (evaluation's `Fact.expires`): the transaction's own, or earlier the
  /// purchase of a later auto-renewable of its subscription bought by `t`.
  private func expires(_ i: Int, at t: Int64) -> Int64 {
    nextAutoRenewable[i] <= t ? min(expires[i], nextAutoRenewable[i]) : expires[i]
  }

  /// Evaluation's `isNewer`: later purchase, then later period end, then larger id.
  private func isNewer(_ a: Int, than b: Int, at t: Int64) -> Bool {
    if purchase[a] != purchase[b] { return purchase[a] > purchase[b] }
    let (ea, eb) = (expires(a, at: t), expires(b, at: t))
    if ea != eb { return ea > eb }
    return transactions[a].transactionId > transactions[b].transactionId
  }

  /// Evaluation's `isBetterCover`: later expiry, then purchased over family-shared, then later
  /// purchase, then smaller id (covering transactions' periods are their own).
  private func isBetterCover(_ a: Int, than b: Int) -> Bool {
    if expires[a] != expires[b] { return expires[a] > expires[b] }
    if familyShared[a] != familyShared[b] { return !familyShared[a] }
    if purchase[a] != purchase[b] { return purchase[a] > purchase[b] }
    return transactions[a].transactionId < transactions[b].transactionId
  }

  /// The newest of group `g`'s transactions bought by `t` (not upgraded by then, with
  /// `nonUpgraded`), or -1. Only the latest purchase instant's transactions can be it.
  private func newest(_ g: Int, at t: Int64, nonUpgraded: Bool) -> Int {
    var best = -1
    for i in bought[g].reversed() {
      if best >= 0 && purchase[i] < purchase[best] { break }
      if nonUpgraded && t >= upgradedFrom[i] { continue }
      if best < 0 || isNewer(i, than: best, at: t) { best = i }
    }
    return best
  }

  /// Rule 18 for a renewal info whose subscription lapsed with `lapsed`.
  private func retryEnded(_ lapsed: Int, at t: Int64) -> Bool {
    guard lapsed >= 0, expires[lapsed] != .min else { return false }
    let cutoff = t.subtractingReportingOverflow(SubscriptionEvaluator.billingRetryLimit)
    return !cutoff.overflow && expires[lapsed] < cutoff.partialValue
  }

  // MARK: Rule 5

  /// Whether renewal info `k` describes `t`: after's by the rule; before's (during a write) for
  /// the instants before `after`'s new transactions of its subscription.
  private func describes(_ k: Int, _ t: Int64) -> Bool {
    let own = RenewalInfo.describes(t, subscriptionLatestPurchase: ownLatest[k])
    return k < renewals.count - fallbackCount
      ? own : own && !RenewalInfo.describes(t, subscriptionLatestPurchase: afterLatest[k])
  }

  private mutating func status(_ g: Int, at t: Int64) -> TimelineStatus? {
    open[g].removeAll { coverEnd[$0] <= t }
    var cover = -1
    for i in open[g] where cover < 0 || isBetterCover(i, than: cover) { cover = i }
    if cover >= 0 { return TimelineStatus(state: .active, deciding: cover, renewal: -1) }
    var grace = -1
    var graceLapsed = -1
    var retry = -1
    var retryLapsed = -1
    for (k, r) in renewals.enumerated() where describes(k, t) {
      // Evaluation places a renewal info by its newest transaction, else by its product.
      let lapsed = self.lapsed[subscriptionOf[k]]
      guard (lapsed >= 0 ? groupOf[lapsed] : productGroup[k]) == g else { continue }
      if let end = r.gracePeriodExpiresDate, t < end,
        lapsed < 0 || revocation[lapsed] > t,
        grace < 0 || end > renewals[grace].gracePeriodExpiresDate!
          || (end == renewals[grace].gracePeriodExpiresDate! && r.originalTransactionId < renewals[grace].originalTransactionId)
      {
        grace = k
        graceLapsed = lapsed
      }
      if r.isInBillingRetryPeriod && !retryEnded(lapsed, at: t),
        retry < 0 || r.originalTransactionId < renewals[retry].originalTransactionId
      {
        retry = k
        retryLapsed = lapsed
      }
    }
    if grace >= 0 {
      return TimelineStatus(
        state: .gracePeriod, deciding: graceLapsed >= 0 ? graceLapsed : newest(g, at: t, nonUpgraded: true),
        renewal: grace)
    }
    if retry >= 0 {
      return TimelineStatus(
        state: .billingRetry, deciding: retryLapsed >= 0 ? retryLapsed : newest(g, at: t, nonUpgraded: true),
        renewal: retry)
    }
    let newest = newest(g, at: t, nonUpgraded: false)
    guard newest >= 0 else {
      return catalogGroup[g] ? TimelineStatus(state: .neverSubscribed, deciding: -1, renewal: -1) : nil
    }
    let nonUpgraded = self.newest(g, at: t, nonUpgraded: true)
    let deciding = nonUpgraded >= 0 ? nonUpgraded : newest
    let revoked = revocation[deciding] <= t
    return TimelineStatus(state: revoked ? .revoked : .expired, deciding: deciding, renewal: -1)
  }
}
