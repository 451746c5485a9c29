/// Evaluates one user's history at an instant: group status, entitlements, revocations and
/// offer eligibility (DESIGN "Domain rules" 1-11). Pure: no I/O, no clock; time is a parameter.
///
/// ```swift
/// let evaluation = SubscriptionEvaluator.evaluate(
///   history: transactions, renewals: renewals, catalog: catalog, policy: .default, at: nowMs)
/// let answers = evaluation.eligibility(for: ["com.app.monthly", "com.app.yearly"])
/// ```
public enum SubscriptionEvaluator {
  /// Evaluates a user's history at `time` (milliseconds since the epoch).
  ///
  /// - Parameters:
  ///   - history: every transaction stored for the user in one app and environment, in any order,
  ///     duplicates allowed: they are merged by `transactionId`, newest data winning
  ///     (``Transaction/supersedes(_:)``).
  ///   - renewals: the renewal infos, in any order; merged by `originalTransactionId`.
  ///   - catalog: the app's products: type and group of each transaction (rule 2).
  ///   - policy: the app's eligibility policy (rule 10).
  ///   - time: the instant. Intervals are half-open (`start <= time < end`): a subscription whose
  ///     `expiresDate == time` has expired. Transactions purchased after `time` and revocations
  ///     dated after it have not happened yet.
  /// - Returns: the evaluation; ask it for eligibility with
  ///   ``SubscriptionEvaluation/eligibility(for:)-(String)``.
  public static func evaluate(
    history: [Transaction], renewals: [RenewalInfo], catalog: Catalog,
    policy: EligibilityPolicy = .default, at time: Int64
  ) -> SubscriptionEvaluation {
    var engine = Engine(catalog: catalog, policy: policy, time: time)
    engine.load(history)
    engine.aggregate()
    engine.applyRenewals(renewals)
    return engine.finish()
  }
}

/// The evaluation of one user's history at one instant.
public struct SubscriptionEvaluation: Sendable, Hashable {
  /// The instant evaluated.
  public let time: Int64
  /// One status per catalog group (in catalog order, `NEVER_SUBSCRIBED` included), then one per
  /// other group seen in the history (sorted by id).
  public let groups: [GroupStatus]
  /// What the user may use at ``time``, sorted by product id then transaction id.
  public let entitlements: [Entitlement]
  /// Revocations that happened by ``time`` (refunds, Family Sharing removals, upgrades), sorted by
  /// date then transaction id. Transactions of products evaluation ignores are not included.
  public let revocations: [Revocation]

  let facts: [GroupFacts]
  let appFacts: AppFacts
  let catalog: Catalog
  let policy: EligibilityPolicy

  /// The status of one group, if it is in the catalog or the history.
  public func status(ofGroup subscriptionGroupId: String) -> GroupStatus? {
    groups.first { $0.subscriptionGroupId == subscriptionGroupId }
  }

  /// Intro and promotional eligibility for several products, in the order asked.
  public func eligibility(for productIds: [String]) -> [ProductEligibility] {
    var result: [ProductEligibility] = []
    result.reserveCapacity(productIds.count)
    for productId in productIds { result.append(eligibility(for: productId)) }
    return result
  }

  /// Intro (rule 8) and promotional (rule 9) eligibility for one product, under the policy
  /// (rule 10). Checks, first match wins:
  /// - both offers: `UNKNOWN_PRODUCT` (not in the catalog), `NOT_A_SUBSCRIPTION` (not
  ///   auto-renewable);
  /// - intro: `NO_INTRO_OFFER`, `INTRO_ALREADY_USED`, `ACTIVE_SUBSCRIPTION` / `IN_GRACE_PERIOD` /
  ///   `IN_BILLING_RETRY`, `REFUNDED_IN_GROUP` (if `refundsBlockIntro`), a lapsed subscriber
  ///   (`LAPSED_NO_INTRO_USED`, eligible, or `LAPSED_SUBSCRIBER`, not eligible, when
  ///   `lapsedSubscribersGetIntro` is off), else `NEW_CUSTOMER`;
  /// - promotional: `EXISTING_SUBSCRIBER` (active, grace or retry), `LAPSED_SUBSCRIBER` (any
  ///   auto-renewable transaction), else `NEVER_SUBSCRIBED`, in the product's group or, with
  ///   `promoScope` `APP`, in any group.
  public func eligibility(for productId: String) -> ProductEligibility {
    guard let position = catalog.index[productId] else {
      let unknown = OfferEligibility(eligible: false, reason: .unknownProduct)
      return ProductEligibility(
        productId: productId, subscriptionGroupId: nil, introductory: unknown,
        promotional: unknown)
    }
    let product = catalog.products[position]
    let groupIndex = catalog.groupIndexOfProduct[position]
    guard product.type == .autoRenewable, groupIndex >= 0 else {
      let none = OfferEligibility(eligible: false, reason: .notASubscription)
      return ProductEligibility(
        productId: productId, subscriptionGroupId: product.subscriptionGroupId,
        introductory: none, promotional: none)
    }
    let group = facts[groupIndex]
    return ProductEligibility(
      productId: productId, subscriptionGroupId: group.id,
      introductory: introductory(product: product, group: group),
      promotional: promotional(group: group))
  }

  private func introductory(product: Product, group: GroupFacts) -> OfferEligibility {
    if !product.hasIntroductoryOffer {
      return OfferEligibility(eligible: false, reason: .noIntroOffer)
    }
    if let evidence = group.introEvidence {
      return OfferEligibility(
        eligible: false, reason: .introAlreadyUsed, evidenceTransactionId: evidence)
    }
    switch group.state {
    case .active:
      return OfferEligibility(
        eligible: false, reason: .activeSubscription, evidenceTransactionId: group.stateEvidence)
    case .gracePeriod:
      return OfferEligibility(
        eligible: false, reason: .inGracePeriod, evidenceTransactionId: group.stateEvidence)
    case .billingRetry:
      return OfferEligibility(
        eligible: false, reason: .inBillingRetry, evidenceTransactionId: group.stateEvidence)
    case .expired, .revoked, .neverSubscribed: break
    }
    if policy.refundsBlockIntro, let evidence = group.refundEvidence {
      return OfferEligibility(
        eligible: false, reason: .refundedInGroup, evidenceTransactionId: evidence)
    }
    if let newest = group.newestTransactionId {
      return policy.lapsedSubscribersGetIntro
        ? OfferEligibility(eligible: true, reason: .lapsedNoIntroUsed, evidenceTransactionId: newest)
        : OfferEligibility(eligible: false, reason: .lapsedSubscriber, evidenceTransactionId: newest)
    }
    return OfferEligibility(eligible: true, reason: .newCustomer)
  }

  private func promotional(group: GroupFacts) -> OfferEligibility {
    let existing: String?
    let newest: String?
    let current: Bool
    switch policy.promoScope {
    case .group:
      current = group.state == .active || group.state == .gracePeriod
        || group.state == .billingRetry
      existing = group.stateEvidence
      newest = group.newestTransactionId
    case .app:
      current = appFacts.hasCurrentSubscription
      existing = appFacts.currentEvidence
      newest = appFacts.newestTransactionId
    }
    if current {
      return OfferEligibility(
        eligible: true, reason: .existingSubscriber, evidenceTransactionId: existing)
    }
    if let newest {
      return OfferEligibility(
        eligible: true, reason: .lapsedSubscriber, evidenceTransactionId: newest)
    }
    return OfferEligibility(eligible: false, reason: .neverSubscribed)
  }

  /// This user's contribution to an app report at ``time`` (see ``ReportCounts``).
  public var reportCounts: ReportCounts {
    var counts = ReportCounts()
    var current = false
    var lapsed = false
    for group in groups {
      switch group.state {
      case .active:
        counts.active = 1
        current = true
        if group.inTrial { counts.inTrial = 1 }
        if group.inIntroOffer { counts.inIntroOffer = 1 }
      case .gracePeriod:
        counts.inGracePeriod = 1
        current = true
      case .billingRetry:
        counts.inBillingRetry = 1
        current = true
      case .expired, .revoked: lapsed = true
      case .neverSubscribed: break
      }
    }
    if lapsed && !current { counts.expired = 1 }
    for revocation in revocations {
      switch revocation.kind {
      case .refund: counts.refunded = 1
      case .familyRemoval: counts.familyAccessRevoked = 1
      case .upgrade: break
      }
    }
    if entitlements.contains(where: { $0.ownership == .familyShared }) {
      counts.familySharedBeneficiaries = 1
    }
    return counts
  }
}

/// What eligibility needs to know about one group.
struct GroupFacts: Sendable, Hashable {
  var id: String
  var state: SubscriptionState = .neverSubscribed
  /// The transaction that decided the state.
  var stateEvidence: String?
  /// The newest transaction of the group (any state).
  var newestTransactionId: String?
  /// The earliest transaction of the group that used an intro offer.
  var introEvidence: String?
  /// The earliest refund in the group (by ``time``).
  var refundEvidence: String?
}

/// What app-scoped promotional eligibility needs.
struct AppFacts: Sendable, Hashable {
  var hasCurrentSubscription = false
  var currentEvidence: String?
  var newestTransactionId: String?
}

/// The evaluation's working state: flat arrays indexed by position, no string-keyed maps beyond
/// the deduplication and catalog lookups.
private struct Engine {
  enum Kind: UInt8 { case ignored, autoRenewable, nonRenewing, nonConsumable, consumable, free }

  struct GroupAccumulator {
    var newest = -1
    var newestNonUpgraded = -1
    var covering = -1
    var intro = -1
    var refund = -1
    var grace = -1  // renewal index
    var graceLapsed = -1
    var retry = -1  // renewal index
    var retryLapsed = -1
  }

  let catalog: Catalog
  let policy: EligibilityPolicy
  let time: Int64

  var transactions: [Transaction] = []
  var kinds: [Kind] = []
  var groupOf: [Int] = []
  var productOf: [Int] = []
  var groupIds: [String]
  var groups: [GroupAccumulator] = []
  var renewals: [RenewalInfo] = []

  init(catalog: Catalog, policy: EligibilityPolicy, time: Int64) {
    self.catalog = catalog
    self.policy = policy
    self.time = time
    self.groupIds = catalog.subscriptionGroupIds
  }

  // MARK: Loading (rules 1, 2, 11)

  mutating func load(_ history: [Transaction]) {
    // Deduplicate by transaction id, newest data winning.
    var position: [String: Int] = [:]
    position.reserveCapacity(history.count)
    transactions.reserveCapacity(history.count)
    for transaction in history {
      if let existing = position[transaction.transactionId] {
        if transaction.supersedes(transactions[existing]) { transactions[existing] = transaction }
      } else {
        position[transaction.transactionId] = transactions.count
        transactions.append(transaction)
      }
    }
    // Classify (rule 2); groups seen only in the history are numbered after the catalog's.
    let base = groupIds.count
    kinds.reserveCapacity(transactions.count)
    groupOf.reserveCapacity(transactions.count)
    productOf.reserveCapacity(transactions.count)
    for transaction in transactions {
      guard transaction.purchaseDate <= time else {
        // Not purchased yet at `time`.
        kinds.append(.ignored); groupOf.append(-1); productOf.append(-1)
        continue
      }
      if let product = catalog.index[transaction.productId] {
        productOf.append(product)
        let type = catalog.products[product].type
        switch type {
        case .autoRenewable:
          kinds.append(.autoRenewable)
          groupOf.append(catalog.groupIndexOfProduct[product])
        case .nonRenewing: kinds.append(.nonRenewing); groupOf.append(-1)
        case .nonConsumable: kinds.append(.nonConsumable); groupOf.append(-1)
        case .consumable: kinds.append(.consumable); groupOf.append(-1)
        case .freeSubscription: kinds.append(.free); groupOf.append(-1)
        }
      } else if let group = transaction.subscriptionGroupIdentifier, !group.isEmpty {
        productOf.append(-1)
        kinds.append(.autoRenewable)
        if let existing = groupIds.firstIndex(of: group) {
          groupOf.append(existing)
        } else {
          groupOf.append(groupIds.count)
          groupIds.append(group)
        }
      } else {
        // Unknown product without a group: kept in history, ignored by evaluation.
        kinds.append(.ignored); groupOf.append(-1); productOf.append(-1)
      }
    }
    // Number the history-only groups in id order, so the output does not depend on input order.
    if groupIds.count - base > 1 {
      let extras = groupIds[base...].enumerated().sorted { $0.element < $1.element }
      var remap = [Int](repeating: 0, count: extras.count)
      for (newOffset, entry) in extras.enumerated() { remap[entry.offset] = base + newOffset }
      groupIds.replaceSubrange(base..., with: extras.map(\.element))
      for i in groupOf.indices where groupOf[i] >= base { groupOf[i] = remap[groupOf[i] - base] }
    }
    groups = [GroupAccumulator](repeating: GroupAccumulator(), count: groupIds.count)
  }

  // MARK: Ordering helpers (total orders: the transaction id breaks every tie)

  /// `a` is newer than `b`: later purchase, then later expiry, then larger id.
  func isNewer(_ a: Int, than b: Int) -> Bool {
    let x = transactions[a]
    let y = transactions[b]
    if x.purchaseDate != y.purchaseDate { return x.purchaseDate > y.purchaseDate }
    let ex = x.expiresDate ?? .min
    let ey = y.expiresDate ?? .min
    if ex != ey { return ex > ey }
    return x.transactionId > y.transactionId
  }

  /// `a` is earlier than `b`: earlier purchase, then smaller id.
  func isEarlier(_ a: Int, than b: Int) -> Bool {
    let x = transactions[a]
    let y = transactions[b]
    if x.purchaseDate != y.purchaseDate { return x.purchaseDate < y.purchaseDate }
    return x.transactionId < y.transactionId
  }

  /// `a` is the better covering transaction: later expiry, then purchased over family-shared,
  /// then later purchase, then smaller id.
  func isBetterCover(_ a: Int, than b: Int) -> Bool {
    let x = transactions[a]
    let y = transactions[b]
    let ex = x.expiresDate ?? .min
    let ey = y.expiresDate ?? .min
    if ex != ey { return ex > ey }
    let ox = x.ownership
    let oy = y.ownership
    if ox != oy { return ox == .purchased }
    if x.purchaseDate != y.purchaseDate { return x.purchaseDate > y.purchaseDate }
    return x.transactionId < y.transactionId
  }

  func isRefund(_ index: Int) -> Bool {
    let transaction = transactions[index]
    guard transaction.isRevoked(at: time) else { return false }
    return RevocationKind(classifying: transaction) == .refund
  }

  // MARK: Auto-renewable aggregation (rules 3, 4, 5, 8)

  mutating func aggregate() {
    for i in transactions.indices where kinds[i] == .autoRenewable {
      let g = groupOf[i]
      var acc = groups[g]
      let transaction = transactions[i]
      if acc.newest < 0 || isNewer(i, than: acc.newest) { acc.newest = i }
      if !transaction.isUpgraded
        && (acc.newestNonUpgraded < 0 || isNewer(i, than: acc.newestNonUpgraded))
      {
        acc.newestNonUpgraded = i
      }
      if let expires = transaction.expiresDate, time < expires, !transaction.isRevoked(at: time),
        acc.covering < 0 || isBetterCover(i, than: acc.covering)
      {
        acc.covering = i
      }
      if transaction.usesIntroductoryOffer && (acc.intro < 0 || isEarlier(i, than: acc.intro)) {
        acc.intro = i
      }
      if isRefund(i) && (acc.refund < 0 || isEarlier(i, than: acc.refund)) { acc.refund = i }
      groups[g] = acc
    }
  }

  // MARK: Renewal infos (rule 5: grace, billing retry)

  /// The newest transaction of a subscription (its original transaction id) in the history.
  func lapsedTransaction(originalTransactionId: String) -> Int {
    var best = -1
    for i in transactions.indices
    where kinds[i] == .autoRenewable && transactions[i].originalTransactionId == originalTransactionId
    {
      if best < 0 || isNewer(i, than: best) { best = i }
    }
    return best
  }

  mutating func applyRenewals(_ input: [RenewalInfo]) {
    renewals = input.count <= 1 ? input : RenewalInfo.merged(input)
    for r in renewals.indices {
      let renewal = renewals[r]
      let lapsed = lapsedTransaction(originalTransactionId: renewal.originalTransactionId)
      let g: Int
      if lapsed >= 0 {
        g = groupOf[lapsed]
      } else if let product = catalog.index[renewal.productId],
        catalog.groupIndexOfProduct[product] >= 0
      {
        g = catalog.groupIndexOfProduct[product]
      } else {
        continue  // a renewal of a group this evaluation cannot place
      }
      var acc = groups[g]
      if let grace = renewal.gracePeriodExpiresDate, time < grace,
        lapsed < 0 || !transactions[lapsed].isRevoked(at: time)
      {
        if acc.grace < 0 || isBetterGrace(r, than: acc.grace) {
          acc.grace = r
          acc.graceLapsed = lapsed
        }
      }
      if renewal.isInBillingRetryPeriod {
        if acc.retry < 0 || renewal.originalTransactionId < renewals[acc.retry].originalTransactionId
        {
          acc.retry = r
          acc.retryLapsed = lapsed
        }
      }
      groups[g] = acc
    }
  }

  func isBetterGrace(_ a: Int, than b: Int) -> Bool {
    let x = renewals[a].gracePeriodExpiresDate ?? .min
    let y = renewals[b].gracePeriodExpiresDate ?? .min
    if x != y { return x > y }
    return renewals[a].originalTransactionId < renewals[b].originalTransactionId
  }

  func renewal(for originalTransactionId: String?) -> RenewalInfo? {
    guard let originalTransactionId else { return nil }
    for renewal in renewals where renewal.originalTransactionId == originalTransactionId {
      return renewal
    }
    return nil
  }

  // MARK: Results

  func finish() -> SubscriptionEvaluation {
    var statuses: [GroupStatus] = []
    statuses.reserveCapacity(groupIds.count)
    var facts: [GroupFacts] = []
    facts.reserveCapacity(groupIds.count)
    var entitlements: [Entitlement] = []
    var appFacts = AppFacts()
    var appNewest = -1

    for g in groupIds.indices {
      let acc = groups[g]
      let id = groupIds[g]
      var status = GroupStatus(subscriptionGroupId: id, state: .neverSubscribed)
      var deciding = -1
      var decidingRenewal: RenewalInfo? = nil
      if acc.covering >= 0 {
        status.state = .active
        deciding = acc.covering
      } else if acc.grace >= 0 {
        status.state = .gracePeriod
        decidingRenewal = renewals[acc.grace]
        deciding = acc.graceLapsed >= 0 ? acc.graceLapsed : acc.newestNonUpgraded
        status.gracePeriodExpiresDate = decidingRenewal?.gracePeriodExpiresDate
        status.billingIssue = true
      } else if acc.retry >= 0 {
        status.state = .billingRetry
        decidingRenewal = renewals[acc.retry]
        deciding = acc.retryLapsed >= 0 ? acc.retryLapsed : acc.newestNonUpgraded
        status.gracePeriodExpiresDate = decidingRenewal?.gracePeriodExpiresDate
        status.billingIssue = true
      } else if acc.newest >= 0 {
        deciding = acc.newestNonUpgraded >= 0 ? acc.newestNonUpgraded : acc.newest
        status.state = transactions[deciding].isRevoked(at: time) ? .revoked : .expired
      }
      if deciding >= 0 {
        let transaction = transactions[deciding]
        status.productId = transaction.productId
        status.transactionId = transaction.transactionId
        status.originalTransactionId = transaction.originalTransactionId
        status.expiresDate = transaction.expiresDate
        status.ownership = transaction.ownership
        if status.state == .active {
          status.inTrial = transaction.isFreeTrial
          status.inIntroOffer = transaction.usesIntroductoryOffer && !transaction.isFreeTrial
        }
      } else if let decidingRenewal {
        // Grace or retry known only from a renewal info: report its subscription.
        status.productId = decidingRenewal.productId
        status.originalTransactionId = decidingRenewal.originalTransactionId
      }
      if let renewal = decidingRenewal ?? renewal(for: status.originalTransactionId) {
        status.autoRenewEnabled = renewal.willAutoRenew
        status.autoRenewProductId = renewal.autoRenewProductId ?? renewal.productId
      }
      statuses.append(status)

      // Entitlement (rule 6).
      let entitled: Bool
      let entitlementExpires: Int64?
      switch status.state {
      case .active: entitled = true; entitlementExpires = status.expiresDate
      case .gracePeriod: entitled = true; entitlementExpires = status.gracePeriodExpiresDate
      case .billingRetry: entitled = policy.billingRetryEntitled; entitlementExpires = nil
      case .expired, .revoked, .neverSubscribed: entitled = false; entitlementExpires = nil
      }
      if entitled, let productId = status.productId {
        entitlements.append(
          Entitlement(
            productId: productId, type: .autoRenewable, expiresDate: entitlementExpires,
            ownership: status.ownership ?? .purchased,
            transactionId: status.transactionId ?? status.originalTransactionId ?? "",
            subscriptionGroupId: id))
      }

      // Facts for eligibility (rules 8, 9).
      var fact = GroupFacts(id: id, state: status.state)
      fact.stateEvidence = status.transactionId
      if acc.newest >= 0 { fact.newestTransactionId = transactions[acc.newest].transactionId }
      if acc.intro >= 0 { fact.introEvidence = transactions[acc.intro].transactionId }
      if acc.refund >= 0 { fact.refundEvidence = transactions[acc.refund].transactionId }
      facts.append(fact)
      if !appFacts.hasCurrentSubscription
        && (status.state == .active || status.state == .gracePeriod
          || status.state == .billingRetry)
      {
        appFacts.hasCurrentSubscription = true
        appFacts.currentEvidence = status.transactionId
      }
      if acc.newest >= 0 && (appNewest < 0 || isNewer(acc.newest, than: appNewest)) {
        appNewest = acc.newest
      }
    }
    if appNewest >= 0 { appFacts.newestTransactionId = transactions[appNewest].transactionId }

    appendOtherEntitlements(to: &entitlements)
    if entitlements.count > 1 {
      entitlements.sort {
        $0.productId != $1.productId
          ? $0.productId < $1.productId : $0.transactionId < $1.transactionId
      }
    }

    return SubscriptionEvaluation(
      time: time, groups: statuses, entitlements: entitlements, revocations: revocations(),
      facts: facts, appFacts: appFacts, catalog: catalog, policy: policy)
  }

  /// Non-renewing terms, non-consumables and free subscriptions (rule 6).
  func appendOtherEntitlements(to entitlements: inout [Entitlement]) {
    var nonRenewing: [Int] = []
    // product index -> the earliest non-revoked transaction (non-consumable, free subscription)
    var owned: [(product: Int, transaction: Int)] = []
    for i in transactions.indices {
      switch kinds[i] {
      case .nonRenewing:
        if !transactions[i].isRevoked(at: time) { nonRenewing.append(i) }
      case .nonConsumable, .free:
        guard !transactions[i].isRevoked(at: time) else { continue }
        if let slot = owned.firstIndex(where: { $0.product == productOf[i] }) {
          if isEarlier(i, than: owned[slot].transaction) { owned[slot].transaction = i }
        } else {
          owned.append((productOf[i], i))
        }
      case .ignored, .autoRenewable, .consumable: continue
      }
    }
    for (product, i) in owned {
      let transaction = transactions[i]
      entitlements.append(
        Entitlement(
          productId: transaction.productId, type: catalog.products[product].type, expiresDate: nil,
          ownership: transaction.ownership, transactionId: transaction.transactionId,
          subscriptionGroupId: catalog.products[product].subscriptionGroupId))
    }
    guard !nonRenewing.isEmpty else { return }
    // Terms chain per product: each starts at max(purchase, end of the previous term).
    nonRenewing.sort {
      productOf[$0] != productOf[$1] ? productOf[$0] < productOf[$1] : isEarlier($0, than: $1)
    }
    var start = 0
    while start < nonRenewing.count {
      let product = productOf[nonRenewing[start]]
      var end = start
      while end < nonRenewing.count && productOf[nonRenewing[end]] == product { end += 1 }
      if let duration = catalog.products[product].duration {
        var termEnd = Int64.min
        var covering = -1
        for k in start..<end {
          let i = nonRenewing[k]
          let termStart = max(transactions[i].purchaseDate, termEnd)
          termEnd = duration.added(to: termStart)
          if termStart <= time && time < termEnd { covering = i }
        }
        if covering >= 0 {
          let transaction = transactions[covering]
          entitlements.append(
            Entitlement(
              productId: transaction.productId, type: .nonRenewing, expiresDate: termEnd,
              ownership: transaction.ownership, transactionId: transaction.transactionId,
              subscriptionGroupId: catalog.products[product].subscriptionGroupId))
        }
      }
      start = end
    }
  }

  /// Revocations by `time` of every transaction evaluation classifies (rule 7).
  func revocations() -> [Revocation] {
    var result: [Revocation] = []
    for i in transactions.indices where kinds[i] != .ignored {
      let transaction = transactions[i]
      guard let date = transaction.revocationDate, date <= time,
        let kind = RevocationKind(classifying: transaction)
      else { continue }
      result.append(
        Revocation(
          transactionId: transaction.transactionId,
          originalTransactionId: transaction.originalTransactionId,
          productId: transaction.productId, revocationDate: date, kind: kind,
          ownership: transaction.ownership))
    }
    if result.count > 1 {
      result.sort {
        $0.revocationDate != $1.revocationDate
          ? $0.revocationDate < $1.revocationDate : $0.transactionId < $1.transactionId
      }
    }
    return result
  }
}
