import SubscriptionDomain
import SubscriptionStorage

/// A deterministic random generator (SplitMix64), so every generated case can be replayed by seed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
  private var state: UInt64

  /// A generator starting from `seed`.
  public init(seed: UInt64) { state = seed }

  /// The next 64 random bits.
  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// Generated purchase lifecycles and the copies Apple's sources give of them, for the rule-14
/// property: any permutation of the same copies leaves the same history
/// (docs/architecture.md rules 13, 14).
///
/// A lifecycle has one to three subscriptions (own or family-shared, in two groups) with renewals,
/// an upgrade to another product of the group, refunds and reversed refunds, and renewal infos
/// that enter billing grace and disappear when the customer cancels during grace. It is observed
/// at random instants on Apple's clock by five sources, each giving its own kind of copy:
/// - a verifyReceipt body: every transaction and a renewal-info snapshot, dated `request_date_ms`;
/// - a V1 notification: the same, classified by notification type, dated by the latest instant it
///   records (`Transaction.latestRecordedDate`);
/// - StoreKit 2: one signed transaction;
/// - a V2 notification: one signed transaction and its signed renewal info;
/// - the Server API: every signed transaction and a snapshot of the signed renewal infos.
/// Instants are drawn from a few days so that different sources often tie on the clock.
public struct CopyPermutationCase: Sendable, CustomStringConvertible {
  /// The seed the case was generated from.
  public let seed: UInt64
  /// The copies, one update per observation, in observation order (the user is a placeholder).
  public let updates: [UserPurchases]
  /// When to evaluate: after every event of the lifecycle.
  public let evaluationTime: Int64

  /// The catalog the products belong to.
  public static let catalog = Catalog(products: [
    Product(productId: "basic.monthly", type: .autoRenewable, subscriptionGroupId: "g1", hasIntroductoryOffer: true),
    Product(productId: "premium.monthly", type: .autoRenewable, subscriptionGroupId: "g1", hasIntroductoryOffer: true),
    Product(productId: "family.monthly", type: .autoRenewable, subscriptionGroupId: "g2"),
  ])

  private static let day: Int64 = 86_400_000
  private static let start: Int64 = 1_704_067_200_000  // 2024-01-01

  /// One transaction of the lifecycle and the events that change it on Apple's clock.
  private struct Lifecycle {
    var transaction: Transaction
    /// When Apple learned of the transaction (its purchase).
    var knownFrom: Int64
    /// (revocation date, reversal time or nil) of each refund, in time order.
    var refund: (at: Int64, reversedAt: Int64?)?
    /// When an upgrade ended it, if one did.
    var upgradedAt: Int64?

    /// The transaction as Apple knows it at `t`, or nil before its purchase.
    func state(at t: Int64) -> Transaction? {
      guard t >= knownFrom else { return nil }
      var copy = transaction
      if let upgradedAt, t >= upgradedAt {
        copy.isUpgraded = true
        copy.revocationDate = upgradedAt
      }
      if let refund, t >= refund.at, refund.reversedAt.map({ t < $0 }) ?? true {
        copy.revocationDate = refund.at
        copy.revocationReason = .other
      }
      return copy
    }
  }

  /// One subscription's renewal info over time: present from `from`, in grace from `graceFrom`,
  /// gone from `goneAt`.
  private struct Renewal {
    var info: RenewalInfo
    var from: Int64
    var graceFrom: Int64?
    var goneAt: Int64?

    func state(at t: Int64) -> RenewalInfo? {
      guard t >= from, goneAt.map({ t < $0 }) ?? true else { return nil }
      var copy = info
      if let graceFrom, t >= graceFrom {
        copy.isInBillingRetryPeriod = true
        copy.gracePeriodExpiresDate = graceFrom + 16 * CopyPermutationCase.day
      }
      return copy
    }
  }

  /// Generates the case of `seed`.
  public init(seed: UInt64) {
    self.seed = seed
    var g = SeededGenerator(seed: seed)
    let day = Self.day
    var lifecycles: [Lifecycle] = []
    var renewals: [Renewal] = []
    var lastEvent = Self.start
    for s in 0..<Int.random(in: 1...3, using: &g) {
      let otid = "\(seed)-\(s)"
      let family = s == 2 || Bool.random(using: &g) && s > 0
      let group = family ? "g2" : "g1"
      var product = family ? "family.monthly" : "basic.monthly"
      var purchase = Self.start + Int64(s) * 3 * day + Int64.random(in: 0...day, using: &g)
      let periods = Int.random(in: 1...4, using: &g)
      for p in 0..<periods {
        let expires = purchase + 30 * day
        var t = Transaction(
          transactionId: "\(otid)-\(p)", originalTransactionId: otid, productId: product,
          subscriptionGroupIdentifier: group, purchaseDate: purchase, expiresDate: expires,
          isTrialPeriod: p == 0 && !family && Bool.random(using: &g),
          inAppOwnershipType: family ? .familyShared : .purchased, environment: .production)
        t.webOrderLineItemId = "w\(otid)-\(p)"
        var lifecycle = Lifecycle(transaction: t, knownFrom: purchase)
        if Int.random(in: 0..<4, using: &g) == 0 {
          let at = purchase + Int64.random(in: 1...20, using: &g) * day / 2
          let reversed = Bool.random(using: &g) ? at + Int64.random(in: 1...6, using: &g) * day / 2 : nil
          lifecycle.refund = (at, reversed)
          lastEvent = max(lastEvent, reversed ?? at)
        }
        // An upgrade ends the last period early; the new product's period starts at once.
        if p == periods - 1, !family, product == "basic.monthly", Int.random(in: 0..<3, using: &g) == 0 {
          let at = purchase + Int64.random(in: 2...25, using: &g) * day
          lifecycle.upgradedAt = at
          lifecycles.append(lifecycle)
          product = "premium.monthly"
          let upgrade = Transaction(
            transactionId: "\(otid)-u", originalTransactionId: otid, productId: product,
            subscriptionGroupIdentifier: group, purchaseDate: at, expiresDate: at + 30 * day,
            inAppOwnershipType: .purchased, environment: .production)
          lifecycles.append(Lifecycle(transaction: upgrade, knownFrom: at))
          purchase = at + 30 * day
          lastEvent = max(lastEvent, at)
          break
        }
        lifecycles.append(lifecycle)
        purchase = expires
      }
      // The renewal info: billing grace after the last period, sometimes cancelled during grace.
      var renewal = Renewal(
        info: RenewalInfo(
          originalTransactionId: otid, productId: product, autoRenewProductId: product, autoRenewStatus: .on,
          environment: .production),
        from: Self.start + Int64(s) * 3 * day)
      if Bool.random(using: &g) {
        renewal.graceFrom = purchase
        if Bool.random(using: &g) { renewal.goneAt = purchase + Int64.random(in: 1...10, using: &g) * day }
        lastEvent = max(lastEvent, renewal.goneAt ?? purchase)
      }
      lastEvent = max(lastEvent, purchase)
      renewals.append(renewal)
    }
    // Observations: a few instants (often equal) between the start and after the last event.
    let span = (lastEvent - Self.start) / day + 3
    var updates: [UserPurchases] = []
    let placeholder = UserKey(appId: "-", environment: .production, userId: "-")
    for _ in 0..<Int.random(in: 4...9, using: &g) {
      let t = Self.start + Int64.random(in: 0...span, using: &g) * day + (Bool.random(using: &g) ? day / 2 : 0)
      let transactions = lifecycles.compactMap { $0.state(at: t) }
      let infos = renewals.compactMap { $0.state(at: t) }
      guard !transactions.isEmpty else { continue }
      let covered = renewals.filter { r in transactions.contains { $0.originalTransactionId == r.info.originalTransactionId } }
      let knownInfos = infos.filter { i in covered.contains { $0.info.originalTransactionId == i.originalTransactionId } }
      switch Int.random(in: 0..<6, using: &g) {
      case 0:  // verifyReceipt body
        updates.append(
          UserPurchases(
            user: placeholder, transactions: transactions.map { Self.dated($0, t) },
            renewalInfos: knownInfos.map { Self.dated($0, t) },
            renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: transactions, asOfDate: t)))
      case 1:  // V1 notification: as of the latest instant it records; revoked ones carry its type
        let asOf = Transaction.latestRecordedDate(in: transactions)
        let classified = transactions.map { tx -> Transaction in
          var copy = tx
          copy.asOfDate = asOf
          if copy.revocationDate != nil { copy.notificationType = copy.isUpgraded ? "CANCEL" : "REFUND" }
          return copy
        }
        updates.append(
          UserPurchases(
            user: placeholder, transactions: classified,
            renewalInfos: knownInfos.map { var r = $0; r.asOfDate = asOf; return r },
            renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: transactions, asOfDate: asOf)))
      case 2:  // StoreKit 2: one signed transaction
        let one = transactions[Int.random(in: 0..<transactions.count, using: &g)]
        updates.append(UserPurchases(user: placeholder, transactions: [Self.signed(one, t)]))
      case 3:  // V2 notification: one transaction and its renewal info
        let one = transactions[Int.random(in: 0..<transactions.count, using: &g)]
        var copy = Self.signed(one, t)
        if copy.revocationDate != nil {
          copy.notificationType = copy.isUpgraded ? "DID_CHANGE_RENEWAL_PREF" : "REFUND"
          if !copy.isUpgraded {
            copy.revocationType = copy.ownership == .familyShared ? .familyRevoke : .refundFull
          }
        }
        let info = knownInfos.first { $0.originalTransactionId == one.originalTransactionId }
        updates.append(
          UserPurchases(user: placeholder, transactions: [copy], renewalInfos: info.map { [Self.signed($0, t)] } ?? []))
      case 4:  // App Store Server API: history and statuses
        updates.append(
          UserPurchases(
            user: placeholder, transactions: transactions.map { Self.signed($0, t) },
            renewalInfos: knownInfos.map { Self.signed($0, t) },
            renewalInfoSnapshot: RenewalInfoSnapshot(
              originalTransactionIds: covered.map(\.info.originalTransactionId), asOfDate: t)))
      default:  // an undated copy (an import without a time): it must never undo a revocation
        let one = transactions[Int.random(in: 0..<transactions.count, using: &g)]
        updates.append(UserPurchases(user: placeholder, transactions: [one]))
      }
    }
    self.updates = updates
    evaluationTime = lastEvent + 2 * day
  }

  private static func dated(_ t: Transaction, _ at: Int64) -> Transaction {
    var copy = t
    copy.asOfDate = at
    return copy
  }

  private static func dated(_ r: RenewalInfo, _ at: Int64) -> RenewalInfo {
    var copy = r
    copy.asOfDate = at
    return copy
  }

  private static func signed(_ t: Transaction, _ at: Int64) -> Transaction {
    var copy = t
    copy.signedDate = at
    return copy
  }

  private static func signed(_ r: RenewalInfo, _ at: Int64) -> RenewalInfo {
    var copy = r
    copy.signedDate = at
    return copy
  }

  /// `count` orders of the updates: the generated one, its reverse, then random shuffles.
  public func permutations(_ count: Int) -> [[UserPurchases]] {
    var g = SeededGenerator(seed: seed ^ 0x5EED)
    var result = [updates, updates.reversed()]
    while result.count < count { result.append(updates.shuffled(using: &g)) }
    return Array(result.prefix(count))
  }

  /// The history the domain's merge makes of `updates` in their order: what every store must
  /// store, whatever the order.
  public static func merged(_ updates: [UserPurchases]) -> (transactions: [Transaction], renewalInfos: [RenewalInfo]) {
    let transactions = Transaction.merged(updates.flatMap(\.transactions))
    let renewals = RenewalInfoVersion.merged(updates.flatMap(\.renewalInfoVersions)).compactMap(\.renewalInfo)
    return (transactions, renewals)
  }

  /// What a user with this history is told at ``evaluationTime``.
  public func evaluate(_ transactions: [Transaction], _ renewalInfos: [RenewalInfo]) -> SubscriptionEvaluation {
    SubscriptionEvaluator.evaluate(
      history: transactions, renewals: renewalInfos, catalog: Self.catalog, at: evaluationTime)
  }

  /// Per transaction id, whether rule 14 says the stored copy is revoked, computed from the copies'
  /// clocks alone: yes when a revoked copy has no known time, or when the newest revoked copy is
  /// at least as new as every dated copy without a revocation.
  public func expectedRevoked() -> [String: Bool] {
    var newestRevoked: [String: Int64] = [:]
    var newestUnrevoked: [String: Int64] = [:]
    for t in updates.flatMap(\.transactions) {
      let clock = t.signedDate ?? t.asOfDate
      if t.revocationDate != nil {
        newestRevoked[t.transactionId] = max(newestRevoked[t.transactionId] ?? .min, clock ?? .max)
      } else {
        newestUnrevoked[t.transactionId] = max(newestUnrevoked[t.transactionId] ?? .min, clock ?? .min)
      }
    }
    var result: [String: Bool] = [:]
    for id in Set(newestRevoked.keys).union(newestUnrevoked.keys) {
      guard let revoked = newestRevoked[id] else {
        result[id] = false
        continue
      }
      result[id] = revoked >= (newestUnrevoked[id] ?? .min)
    }
    return result
  }

  /// A summary for failure messages.
  public var description: String {
    "seed \(seed): \(updates.count) copies of \(Set(updates.flatMap(\.transactions).map(\.transactionId)).count) transactions"
  }
}
