/// Evaluates one user's history at an instant: group status, entitlements, revocations and
/// offer eligibility (docs/architecture.md "Domain rules"). Pure: no I/O, no clock; time is a
/// parameter.
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
  ///   - renewals: the renewal infos, in any order; merged by `originalTransactionId`. A renewal
  ///     info belongs to the group of its subscription's transactions (or, without any, of its
  ///     product). It describes what followed its subscription's last transaction: it is ignored
  ///     at instants before that transaction's purchase (``RenewalInfo/describes(_:subscriptionLatestPurchase:)``:
  ///     at a past `as_of` neither its grace, billing retry nor auto-renew status applies), and a
  ///     grace period does not apply to a revoked lapsed transaction.
  ///   - catalog: the app's products: type and group of each transaction (rule 2).
  ///   - policy: the app's eligibility policy (rule 10).
  ///   - time: the instant. Intervals are half-open (`start <= time < end`): a subscription whose
  ///     `expiresDate == time` has expired. Transactions purchased after `time` and revocations
  ///     dated after it have not happened yet. A transaction marked upgraded never covers, and a
  ///     later purchase of the same original transaction ends an earlier period at its purchase
  ///     date (rule 12); every covering transaction entitles its product (rule 16); billing retry
  ///     ends ``billingRetryLimit`` after the last period (rule 18).
  /// - Returns: the evaluation; ask it for eligibility with
  ///   ``SubscriptionEvaluation/eligibility(for:)-(String)``.
  public static func evaluate(
    history: [Transaction], renewals: [RenewalInfo], catalog: Catalog,
    policy: EligibilityPolicy = .default, at time: Int64
  ) -> SubscriptionEvaluation {
    var engine = Engine(catalog: catalog, policy: policy, time: time, history: history)
    return engine.run(renewals: renewals)
  }

  /// Evaluates like ``evaluate(history:renewals:catalog:policy:at:)`` and also tells until when
  /// the evaluation holds: the first instant after `time` at which time alone could change any
  /// part of it (a purchase, an expiry, a revocation, a grace end, a billing-retry cutoff, a
  /// non-renewing term bound, the instant a renewal info starts to describe its subscription).
  /// At every instant `t` with `time <= t < validUntil` the same inputs evaluate to the same
  /// groups, entitlements, revocations and eligibility facts (only ``SubscriptionEvaluation/time``
  /// differs). `nil`: time alone never changes it.
  ///
  /// The instants are recorded by the evaluation itself, at each comparison it makes with `time`,
  /// so none can be forgotten.
  public static func evaluateWithValidity(
    history: [Transaction], renewals: [RenewalInfo], catalog: Catalog,
    policy: EligibilityPolicy = .default, at time: Int64
  ) -> (evaluation: SubscriptionEvaluation, validUntil: Int64?) {
    var engine = Engine(catalog: catalog, policy: policy, time: time, history: history)
    let evaluation = engine.run(renewals: renewals)
    return (evaluation, engine.horizon == .max ? nil : engine.horizon)
  }

  /// How long Apple retries a failed renewal: 60 days, in milliseconds. A group whose last period
  /// ended longer ago than this is not in billing retry, whatever its renewal info says (rule 18).
  public static let billingRetryLimit: Int64 = 60 * 86_400_000
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
  /// The intro, promotional and win-back answers of every product, worked out from `facts` once.
  let answers: EligibilityAnswers

  init(
    time: Int64, groups: [GroupStatus], entitlements: [Entitlement], revocations: [Revocation],
    facts: [GroupFacts], appFacts: AppFacts, catalog: Catalog, policy: EligibilityPolicy
  ) {
    self.time = time
    self.groups = groups
    self.entitlements = entitlements
    self.revocations = revocations
    self.facts = facts
    self.appFacts = appFacts
    self.catalog = catalog
    self.policy = policy
    answers = EligibilityAnswers(facts: facts, appFacts: appFacts, catalog: catalog, policy: policy)
  }

  /// The eligibility answers alone (what ``eligibility(for:)-(String)`` answers), for a caller
  /// that answers eligibility from an evaluation or from a stored summary
  /// (``UserSummary/Encoded/eligibility(catalog:policy:fingerprint:at:)``) alike.
  public var eligibilityAnswers: EligibilityAnswers { answers }

  /// The status of one group, if it is in the catalog or the history.
  public func status(ofGroup subscriptionGroupId: String) -> GroupStatus? {
    groups.first { $0.subscriptionGroupId == subscriptionGroupId }
  }

  /// Intro and promotional eligibility for several products, in the order asked.
  public func eligibility(for productIds: [String]) -> [ProductEligibility] {
    answers.eligibility(for: productIds)
  }

  /// Intro, promotional and win-back eligibility for one product
  /// (``EligibilityAnswers/eligibility(for:)-(String)``).
  public func eligibility(for productId: String) -> ProductEligibility {
    answers.eligibility(for: productId)
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
    if entitlements.contains(where: { $0.ownership == .assigned }) {
      counts.assignedBeneficiaries = 1
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
  /// The renewal info that answers win-back offers (rule 19).
  var winBack: WinBackSource?
}

/// What app-scoped promotional eligibility needs.
struct AppFacts: Sendable, Hashable {
  var hasCurrentSubscription = false
  var currentEvidence: String?
  var newestTransactionId: String?
}

/// The evaluation's working state: flat arrays of plain facts indexed by position; strings are
/// read from the caller's transactions only where an answer needs them or to break a tie.
struct Engine {
  enum Kind: UInt8 { case ignored, autoRenewable, nonRenewing, nonConsumable, consumable, free }

  /// What evaluation needs of one (deduplicated) transaction, without strings.
  struct Fact {
    var purchase: Int64
    /// The period's end: `expiresDate` (.min when absent), or earlier the purchase of a later
    /// transaction of the same subscription (rule 12, ``endSupersededPeriods()``).
    var expires: Int64
    var revocation: Int64  // .max when absent
    var group: Int32
    var product: Int32
    var kind: Kind
    var upgraded: Bool
    var usesIntro: Bool
    var freeTrial: Bool
    var familyShared: Bool
    var assigned = false  // rule 23: entitles like a purchase, reported apart
    /// The ownership reported for this transaction.
    var ownership: OwnershipType { familyShared ? .familyShared : assigned ? .assigned : .purchased }
    var refund: Bool  // revoked (at any date) and classified as a refund

    @inline(__always) func isRevoked(at time: Int64) -> Bool { revocation <= time }
    /// A non-upgraded transaction (rule 12) whose period holds `time`, not revoked by then.
    @inline(__always) func covers(_ time: Int64) -> Bool {
      !upgraded && purchase <= time && time < expires && time < revocation
    }
  }

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
    var winBack = -1  // renewal index (rule 19)
    var winBackLapsed = -1
  }

  let catalog: Catalog
  let policy: EligibilityPolicy
  let time: Int64
  let history: [Transaction]

  /// For each fact, the position of its (winning) record in `history`.
  var source: [Int] = []
  var facts: [Fact] = []
  var groupIds: [String]
  var groups: [GroupAccumulator] = []
  var renewals: [RenewalInfo] = []
  /// Every auto-renewable transaction that covers `time`, in fact order (rule 16).
  var covering: [Int] = []
  /// The earliest instant after `time` that a comparison with `time` has involved so far: before
  /// it, every such comparison answers as it did at `time` (``note(_:)``). `.max`: none.
  var horizon: Int64 = .max

  init(catalog: Catalog, policy: EligibilityPolicy, time: Int64, history: [Transaction]) {
    self.catalog = catalog
    self.policy = policy
    self.time = time
    self.history = history
    self.groupIds = catalog.subscriptionGroupIds
  }

  @inline(__always) func transactionId(_ fact: Int) -> String { history[source[fact]].transactionId }

  /// Records an instant that evaluation compares with `time`: if it is later than `time`, the
  /// comparison may answer differently from then on, so the evaluation holds at most until then.
  /// Called at every comparison with `time` (``SubscriptionEvaluator/evaluateWithValidity(history:renewals:catalog:policy:at:)``).
  @inline(__always) mutating func note(_ instant: Int64) {
    if instant > time && instant < horizon { horizon = instant }
  }

  /// The whole evaluation.
  mutating func run(renewals: [RenewalInfo]) -> SubscriptionEvaluation {
    load()
    endSupersededPeriods()
    aggregate()
    applyRenewals(renewals)
    return finish()
  }

  // MARK: Loading (rules 1, 2, 11)

  mutating func load() {
    // Deduplicate by transaction id, newest data winning (Transaction.supersedes).
    let history = self.history
    source.reserveCapacity(history.count)
    var table = StringTable(capacity: history.count)
    for position in history.indices {
      let id = history[position].transactionId
      let existing = table.insert(id, position: source.count) { history[source[$0]].transactionId }
      if let existing {
        if history[position].supersedes(history[source[existing]]) { source[existing] = position }
      } else {
        source.append(position)
      }
    }
    // Classify (rule 2); groups seen only in the history are numbered after the catalog's.
    let base = groupIds.count
    facts.reserveCapacity(source.count)
    var lastProduct = -1
    history.withUnsafeBufferPointer { buffer in
      for position in source {
        var fact = Fact(
          purchase: buffer[position].purchaseDate, expires: buffer[position].expiresDate ?? .min,
          revocation: buffer[position].revocationDate ?? .max, group: -1, product: -1,
          kind: .ignored, upgraded: buffer[position].isUpgraded,
          usesIntro: buffer[position].usesIntroductoryOffer, freeTrial: buffer[position].isFreeTrial,
          familyShared: buffer[position].ownership == .familyShared, refund: false)
        fact.assigned = buffer[position].ownership == .assigned
        if fact.revocation != .max {
          fact.refund = RevocationKind(classifying: buffer[position]) == .refund
        }
        guard fact.purchase <= time else {
          note(fact.purchase)
          facts.append(fact)  // not purchased yet at `time`: ignored
          continue
        }
        let product: Int?
        if lastProduct >= 0 && catalog.products[lastProduct].productId == buffer[position].productId {
          product = lastProduct  // renewals repeat the product: skip the lookup
        } else {
          product = catalog.position(of: buffer[position].productId)
        }
        if let product {
          lastProduct = product
          fact.product = Int32(truncatingIfNeeded: product)
          switch catalog.products[product].type {
          case .autoRenewable:
            fact.kind = .autoRenewable
            fact.group = Int32(truncatingIfNeeded: catalog.groupIndexOfProduct[product])
          case .nonRenewing: fact.kind = .nonRenewing
          case .nonConsumable: fact.kind = .nonConsumable
          case .consumable: fact.kind = .consumable
          case .freeSubscription: fact.kind = .free
          }
        } else if let group = buffer[position].subscriptionGroupIdentifier, !group.isEmpty {
          fact.kind = .autoRenewable
          if let existing = groupIds.firstIndex(of: group) {
            fact.group = Int32(truncatingIfNeeded: existing)
          } else {
            fact.group = Int32(truncatingIfNeeded: groupIds.count)
            groupIds.append(group)
          }
        }
        // Otherwise: an unknown product without a group, kept in history, ignored by evaluation.
        facts.append(fact)
      }
    }
    // Number the history-only groups in id order, so the output does not depend on input order.
    if groupIds.count - base > 1 {
      let extras = groupIds[base...].enumerated().sorted { $0.element < $1.element }
      var remap = [Int32](repeating: 0, count: extras.count)
      for (newOffset, entry) in extras.enumerated() {
        remap[entry.offset] = Int32(truncatingIfNeeded: base + newOffset)
      }
      groupIds.replaceSubrange(base..., with: extras.map(\.element))
      for i in facts.indices where facts[i].group >= base {
        facts[i].group = remap[Int(facts[i].group) - base]
      }
    }
    groups = [GroupAccumulator](repeating: GroupAccumulator(), count: groupIds.count)
  }

  // MARK: Upgrades (rule 12)

  /// Within one original transaction id, a transaction purchased later ends every earlier
  /// transaction's period at its purchase date: an upgrade takes effect at once, and Apple may
  /// never re-send the upgraded transaction. Renewals, downgrades and crossgrades start where the
  /// old period ends, so their periods are unchanged. Only auto-renewables purchased by `time`
  /// take part (the others were classified `.ignored` or are not subscriptions).
  mutating func endSupersededPeriods() {
    let history = self.history
    let source = self.source
    var subscriptions = StringTable(capacity: facts.count)
    var firstFact: [Int] = []  // per subscription: one of its facts, to read its id
    var keys: [(subscription: Int32, purchase: Int64, fact: Int32)] = []
    for i in facts.indices where facts[i].kind == .autoRenewable {
      let id = history[source[i]].originalTransactionId
      let subscription: Int
      if let existing = subscriptions.insert(id, position: firstFact.count, keyAt: {
        history[source[firstFact[$0]]].originalTransactionId
      }) {
        subscription = existing
      } else {
        subscription = firstFact.count
        firstFact.append(i)
      }
      keys.append((Int32(truncatingIfNeeded: subscription), facts[i].purchase, Int32(truncatingIfNeeded: i)))
    }
    guard firstFact.count < keys.count else { return }  // one transaction per subscription
    keys.sort { $0.subscription != $1.subscription ? $0.subscription < $1.subscription : $0.purchase < $1.purchase }
    // Walk each subscription from its newest purchase back: `later` is the purchase date of the
    // nearest strictly later transaction; transactions purchased at the same instant share it.
    var end = keys.count
    while end > 0 {
      var later = Int64.max
      var j = end - 1
      let subscription = keys[j].subscription
      while j >= 0 && keys[j].subscription == subscription {
        var first = j
        while first > 0 && keys[first - 1].subscription == subscription
          && keys[first - 1].purchase == keys[j].purchase
        {
          first -= 1
        }
        for k in first...j where later < facts[Int(keys[k].fact)].expires {
          facts[Int(keys[k].fact)].expires = later
        }
        later = keys[j].purchase
        j = first - 1
      }
      end = j + 1
    }
  }

  // MARK: Ordering helpers (total orders: the transaction id breaks every tie)

  /// `a` is newer than `b`: later purchase, then later expiry, then larger id.
  func isNewer(_ a: Int, than b: Int) -> Bool {
    if facts[a].purchase != facts[b].purchase { return facts[a].purchase > facts[b].purchase }
    if facts[a].expires != facts[b].expires { return facts[a].expires > facts[b].expires }
    return transactionId(a) > transactionId(b)
  }

  /// `a` is earlier than `b`: earlier purchase, then smaller id.
  func isEarlier(_ a: Int, than b: Int) -> Bool {
    if facts[a].purchase != facts[b].purchase { return facts[a].purchase < facts[b].purchase }
    return transactionId(a) < transactionId(b)
  }

  /// `a` is the better covering transaction: later expiry, then purchased over family-shared,
  /// then later purchase, then smaller id.
  func isBetterCover(_ a: Int, than b: Int) -> Bool {
    if facts[a].expires != facts[b].expires { return facts[a].expires > facts[b].expires }
    if facts[a].familyShared != facts[b].familyShared { return !facts[a].familyShared }
    if facts[a].purchase != facts[b].purchase { return facts[a].purchase > facts[b].purchase }
    return transactionId(a) < transactionId(b)
  }

  // MARK: Auto-renewable aggregation (rules 3, 4, 5, 8)

  mutating func aggregate() {
    for i in facts.indices where facts[i].kind == .autoRenewable {
      let g = Int(facts[i].group)
      var acc = groups[g]
      let fact = facts[i]
      // `covers` and `isRevoked` compare these with `time` (the purchase is by `time` already);
      // so do the grace, retry and state checks on this fact later.
      note(fact.expires)
      note(fact.revocation)
      if acc.newest < 0 || isNewer(i, than: acc.newest) { acc.newest = i }
      if !fact.upgraded && (acc.newestNonUpgraded < 0 || isNewer(i, than: acc.newestNonUpgraded)) {
        acc.newestNonUpgraded = i
      }
      if fact.covers(time) {
        covering.append(i)
        if acc.covering < 0 || isBetterCover(i, than: acc.covering) { acc.covering = i }
      }
      if fact.usesIntro && (acc.intro < 0 || isEarlier(i, than: acc.intro)) { acc.intro = i }
      if fact.refund && fact.isRevoked(at: time) && (acc.refund < 0 || isEarlier(i, than: acc.refund))
      {
        acc.refund = i
      }
      groups[g] = acc
    }
  }

  // MARK: Renewal infos (rule 5: grace, billing retry)

  /// The newest transaction of a subscription (its original transaction id) purchased by `time`
  /// (-1 when there is none), and the latest purchase of any of its transactions (`nil`: none).
  func lapsedTransaction(originalTransactionId: String) -> (lapsed: Int, latestPurchase: Int64?) {
    var best = -1
    var latest: Int64?
    for i in facts.indices
    where history[source[i]].originalTransactionId == originalTransactionId {
      latest = max(latest ?? facts[i].purchase, facts[i].purchase)
      if facts[i].kind == .autoRenewable && (best < 0 || isNewer(i, than: best)) { best = i }
    }
    return (best, latest)
  }

  mutating func applyRenewals(_ input: [RenewalInfo]) {
    let merged = input.count <= 1 ? input : RenewalInfo.merged(input)
    // Only the renewal infos that describe `time`, each with the newest transaction of its
    // subscription, found before mutating anything.
    renewals = []
    var lapsedOf: [Int] = []
    for r in merged {
      let (lapsed, latest) = lapsedTransaction(originalTransactionId: r.originalTransactionId)
      if let latest { note(latest) }
      guard RenewalInfo.describes(time, subscriptionLatestPurchase: latest) else { continue }
      renewals.append(r)
      lapsedOf.append(lapsed)
    }
    for r in renewals.indices {
      let lapsed = lapsedOf[r]
      let g: Int
      if lapsed >= 0 {
        g = Int(facts[lapsed].group)
      } else if let product = catalog.position(of: renewals[r].productId),
        catalog.groupIndexOfProduct[product] >= 0
      {
        // A renewal info without transactions: placed by its product.
        g = catalog.groupIndexOfProduct[product]
      } else {
        continue  // a group this evaluation cannot place
      }
      var acc = groups[g]
      considerForWinBack(r, lapsed: lapsed, in: &acc)
      if let grace = renewals[r].gracePeriodExpiresDate { note(grace) }
      if let grace = renewals[r].gracePeriodExpiresDate, time < grace,
        lapsed < 0 || !facts[lapsed].isRevoked(at: time)
      {
        if acc.grace < 0 || isBetterGrace(r, than: acc.grace) {
          acc.grace = r
          acc.graceLapsed = lapsed
        }
      }
      if renewals[r].isInBillingRetryPeriod {
        // `retryEnded` holds from the first instant more than the limit after the period's end.
        if lapsed >= 0, facts[lapsed].expires != .min {
          let (cutoff, overflow) = facts[lapsed].expires.addingReportingOverflow(
            SubscriptionEvaluator.billingRetryLimit &+ 1)
          if !overflow { note(cutoff) }
        }
      }
      if renewals[r].isInBillingRetryPeriod && !retryEnded(lapsed: lapsed) {
        if acc.retry < 0
          || renewals[r].originalTransactionId < renewals[acc.retry].originalTransactionId
        {
          acc.retry = r
          acc.retryLapsed = lapsed
        }
      }
      groups[g] = acc
    }
  }

  /// Rule 18: Apple retries a failed renewal for at most ``SubscriptionEvaluator/billingRetryLimit``;
  /// a subscription whose last period ended longer ago than that is no longer in billing retry,
  /// whatever the stored flag says. Without a known period end the flag is believed.
  func retryEnded(lapsed: Int) -> Bool {
    guard lapsed >= 0, facts[lapsed].expires != .min else { return false }
    let (cutoff, overflow) = time.subtractingReportingOverflow(SubscriptionEvaluator.billingRetryLimit)
    return !overflow && facts[lapsed].expires < cutoff
  }

  func isBetterGrace(_ a: Int, than b: Int) -> Bool {
    let x = renewals[a].gracePeriodExpiresDate ?? .min
    let y = renewals[b].gracePeriodExpiresDate ?? .min
    if x != y { return x > y }
    return renewals[a].originalTransactionId < renewals[b].originalTransactionId
  }

  func renewalIndex(for originalTransactionId: String?) -> Int? {
    guard let originalTransactionId else { return nil }
    for r in renewals.indices where renewals[r].originalTransactionId == originalTransactionId {
      return r
    }
    return nil
  }

  // MARK: Results

  mutating func finish() -> SubscriptionEvaluation {
    var statuses: [GroupStatus] = []
    statuses.reserveCapacity(groupIds.count)
    var groupFacts: [GroupFacts] = []
    groupFacts.reserveCapacity(groupIds.count)
    var entitlements: [Entitlement] = []
    var appFacts = AppFacts()
    var appNewest = -1

    for g in groupIds.indices {
      let acc = groups[g]
      let id = groupIds[g]
      var status = GroupStatus(subscriptionGroupId: id, state: .neverSubscribed)
      var deciding = -1
      var decidingRenewal = -1
      if acc.covering >= 0 {
        status.state = .active
        deciding = acc.covering
      } else if acc.grace >= 0 {
        status.state = .gracePeriod
        decidingRenewal = acc.grace
        deciding = acc.graceLapsed >= 0 ? acc.graceLapsed : acc.newestNonUpgraded
        status.gracePeriodExpiresDate = renewals[acc.grace].gracePeriodExpiresDate
        status.billingIssue = true
      } else if acc.retry >= 0 {
        status.state = .billingRetry
        decidingRenewal = acc.retry
        deciding = acc.retryLapsed >= 0 ? acc.retryLapsed : acc.newestNonUpgraded
        status.gracePeriodExpiresDate = renewals[acc.retry].gracePeriodExpiresDate
        status.billingIssue = true
      } else if acc.newest >= 0 {
        deciding = acc.newestNonUpgraded >= 0 ? acc.newestNonUpgraded : acc.newest
        status.state = facts[deciding].isRevoked(at: time) ? .revoked : .expired
      }
      if deciding >= 0 {
        let position = source[deciding]
        status.productId = history[position].productId
        status.transactionId = history[position].transactionId
        status.originalTransactionId = history[position].originalTransactionId
        status.expiresDate = history[position].expiresDate
        status.ownership = facts[deciding].ownership
        if status.state == .active {
          status.inTrial = facts[deciding].freeTrial
          status.inIntroOffer = facts[deciding].usesIntro && !facts[deciding].freeTrial
        }
      } else if decidingRenewal >= 0 {
        // Grace or retry known only from a renewal info: report its subscription.
        status.productId = renewals[decidingRenewal].productId
        status.originalTransactionId = renewals[decidingRenewal].originalTransactionId
      }
      if decidingRenewal < 0, let r = renewalIndex(for: status.originalTransactionId) {
        decidingRenewal = r
      }
      if decidingRenewal >= 0 {
        status.autoRenewEnabled = renewals[decidingRenewal].willAutoRenew
        status.autoRenewProductId =
          renewals[decidingRenewal].autoRenewProductId ?? renewals[decidingRenewal].productId
      }
      if deciding >= 0 {
        // Rule 22: the plan and commitment of the deciding transaction (nothing to read for the
        // subscriptions billed up front that carry neither).
        let transaction = history[source[deciding]]
        status.billingPlan = transaction.billingPlanType
        if transaction.commitment != nil {
          status.commitment = CommitmentStatus(
            transaction: transaction, renewal: decidingRenewal >= 0 ? renewals[decidingRenewal] : nil)
        }
      }

      // Entitlement (rules 6, 16): every covering transaction when active; otherwise the lapsed
      // transaction in grace (until the grace ends), or in billing retry when the policy says so.
      if status.state == .active {
        appendCoveringEntitlements(group: g, to: &entitlements)
      } else if status.state == .gracePeriod
        || (status.state == .billingRetry && policy.billingRetryEntitled),
        let productId = status.productId
      {
        entitlements.append(
          Entitlement(
            productId: productId, type: .autoRenewable,
            expiresDate: status.state == .gracePeriod ? status.gracePeriodExpiresDate : nil,
            ownership: status.ownership ?? .purchased,
            transactionId: status.transactionId ?? status.originalTransactionId ?? "",
            subscriptionGroupId: id))
      }

      // Facts for eligibility (rules 8, 9).
      var fact = GroupFacts(id: id, state: status.state)
      fact.stateEvidence = status.transactionId
      if acc.newest >= 0 { fact.newestTransactionId = transactionId(acc.newest) }
      if acc.intro >= 0 { fact.introEvidence = transactionId(acc.intro) }
      if acc.refund >= 0 { fact.refundEvidence = transactionId(acc.refund) }
      fact.winBack = winBackSource(acc)
      groupFacts.append(fact)
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
      statuses.append(status)
    }
    if appNewest >= 0 { appFacts.newestTransactionId = transactionId(appNewest) }

    appendOtherEntitlements(to: &entitlements)
    if entitlements.count > 1 {
      entitlements.sort {
        $0.productId != $1.productId
          ? $0.productId < $1.productId : $0.transactionId < $1.transactionId
      }
    }

    return SubscriptionEvaluation(
      time: time, groups: statuses, entitlements: entitlements, revocations: revocations(),
      facts: groupFacts, appFacts: appFacts, catalog: catalog, policy: policy)
  }

  /// Rule 16: every transaction of group `g` that covers `time` entitles its product (an own and a
  /// family-shared subscription in one group entitle both); per product, the best covering
  /// transaction (``isBetterCover(_:than:)``) grants it.
  func appendCoveringEntitlements(group g: Int, to entitlements: inout [Entitlement]) {
    var best: [Int] = []  // one covering fact per product
    for i in covering where Int(facts[i].group) == g {
      let productId = history[source[i]].productId
      if let slot = best.firstIndex(where: { history[source[$0]].productId == productId }) {
        if isBetterCover(i, than: best[slot]) { best[slot] = i }
      } else {
        best.append(i)
      }
    }
    for i in best {
      let transaction = history[source[i]]
      entitlements.append(
        Entitlement(
          productId: transaction.productId, type: .autoRenewable, expiresDate: transaction.expiresDate,
          ownership: facts[i].ownership,
          transactionId: transaction.transactionId, subscriptionGroupId: groupIds[g]))
    }
  }

  /// Non-renewing terms, non-consumables and free subscriptions (rule 6).
  mutating func appendOtherEntitlements(to entitlements: inout [Entitlement]) {
    // (product, fact) pairs; sorted, they give per-product chains in purchase order.
    var nonRenewing: [(product: Int32, purchase: Int64, fact: Int)] = []
    // product -> the earliest non-revoked transaction (non-consumable, free subscription)
    var owned: [(product: Int32, fact: Int)] = []
    for i in facts.indices {
      if facts[i].kind != .ignored { note(facts[i].revocation) }
      switch facts[i].kind {
      case .nonRenewing:
        if !facts[i].isRevoked(at: time) {
          nonRenewing.append((facts[i].product, facts[i].purchase, i))
        }
      case .nonConsumable, .free:
        guard !facts[i].isRevoked(at: time) else { continue }
        if let slot = owned.firstIndex(where: { $0.product == facts[i].product }) {
          if isEarlier(i, than: owned[slot].fact) { owned[slot].fact = i }
        } else {
          owned.append((facts[i].product, i))
        }
      case .ignored, .autoRenewable, .consumable: continue
      }
    }
    for (product, i) in owned {
      let position = source[i]
      entitlements.append(
        Entitlement(
          productId: history[position].productId, type: catalog.products[Int(product)].type,
          expiresDate: nil, ownership: facts[i].ownership,
          transactionId: history[position].transactionId,
          subscriptionGroupId: catalog.products[Int(product)].subscriptionGroupId))
    }
    guard !nonRenewing.isEmpty else { return }
    // Terms chain per product: each starts at max(purchase, end of the previous term).
    if nonRenewing.count > 1 {
      let history = self.history
      let source = self.source
      nonRenewing.sort { a, b in
        if a.product != b.product { return a.product < b.product }
        if a.purchase != b.purchase { return a.purchase < b.purchase }
        return history[source[a.fact]].transactionId < history[source[b.fact]].transactionId
      }
    }
    var start = 0
    while start < nonRenewing.count {
      let product = nonRenewing[start].product
      var end = start
      while end < nonRenewing.count && nonRenewing[end].product == product { end += 1 }
      if let duration = catalog.products[Int(product)].duration {
        var termEnd = Int64.min
        var covering = -1
        for k in start..<end {
          let termStart = max(nonRenewing[k].purchase, termEnd)
          termEnd = duration.added(to: termStart)
          note(termStart)
          note(termEnd)
          if termStart <= time && time < termEnd { covering = nonRenewing[k].fact }
        }
        if covering >= 0 {
          let position = source[covering]
          entitlements.append(
            Entitlement(
              productId: history[position].productId, type: .nonRenewing, expiresDate: termEnd,
              ownership: facts[covering].ownership,
              transactionId: history[position].transactionId,
              subscriptionGroupId: catalog.products[Int(product)].subscriptionGroupId))
        }
      }
      start = end
    }
  }

  /// Revocations by `time` of every transaction evaluation classifies (rule 7).
  mutating func revocations() -> [Revocation] {
    var result: [Revocation] = []
    for i in facts.indices where facts[i].kind != .ignored {
      note(facts[i].revocation)
    }
    for i in facts.indices where facts[i].kind != .ignored && facts[i].isRevoked(at: time) {
      let t = history[source[i]]
      guard let kind = RevocationKind(classifying: t) else { continue }
      result.append(
        Revocation(
          transactionId: t.transactionId, originalTransactionId: t.originalTransactionId,
          productId: t.productId, revocationDate: facts[i].revocation, kind: kind,
          ownership: facts[i].ownership))
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
