import SubscriptionDomain
import SubscriptionStorage
import Testing

/// Rules 13 and 14 of docs/architecture.md in the Store contract: copies merge by Apple's clock,
/// whatever their arrival order; renewal-info snapshots remove what they lack.
extension StoreContract {
  /// a revocation is never lost: a copy without it replaces it only when newer on Apple's clock
  static func revocationWins(_ store: any Store) async throws {
    try await Fixture.seed(store)
    func dated(_ t: Transaction, _ asOf: Int64?) -> Transaction {
      var t = t
      t.asOfDate = asOf
      return t
    }
    let storeKit = Fixture.transaction("1", purchase: 10, expires: 100, signed: 20)
    let refundedReceipt = dated(Fixture.transaction("1", purchase: 10, expires: 100, revoked: 25), 30)
    // Both orders: the receipt with the refund is newer than the StoreKit 2 copy and wins.
    for (n, order) in [[storeKit, refundedReceipt], [refundedReceipt, storeKit]].enumerated() {
      let user = Fixture.user("order\(n)")
      for copy in order { _ = try await store.ingest([UserPurchases(user: user, transactions: [copy])], atMs: Fixture.now) }
      #expect(try await store.history(of: user).transactions == [refundedReceipt])
    }
    let user = Fixture.user("order0")
    // A tie on the clock, and a copy of unknown time, leave the revocation.
    let tie = Fixture.transaction("1", purchase: 10, expires: 100, signed: 30)
    let undated = Fixture.transaction("1", purchase: 10, expires: 100)
    let s = try await store.ingest([UserPurchases(user: user, transactions: [tie, undated])], atMs: Fixture.now)
    #expect(s.transactionsWritten == 0)
    #expect(try await store.history(of: user).transactions == [refundedReceipt])
    // A strictly newer copy without the revocation reverses the refund (REFUND_REVERSED)...
    let reversed = Fixture.transaction("1", purchase: 10, expires: 100, signed: 31)
    #expect(try await store.ingest([UserPurchases(user: user, transactions: [reversed])], atMs: Fixture.now).transactionsWritten == 1)
    #expect(try await store.history(of: user).transactions == [reversed])
    // ...and a newer copy that says the same is stored (its time matters) but not counted.
    let later = dated(Fixture.transaction("1", purchase: 10, expires: 100), 40)
    #expect(try await store.ingest([UserPurchases(user: user, transactions: [later])], atMs: Fixture.now).transactionsWritten == 0)
    #expect(try await store.history(of: user).transactions == [later])
    // Now the refund of time 30 is older than what is stored: it stays reversed.
    _ = try await store.ingest([UserPurchases(user: user, transactions: [refundedReceipt])], atMs: Fixture.now)
    #expect(try await store.history(of: user).transactions == [later])
    // A revocation of unknown time is never undone.
    let undatedRefund = Fixture.transaction("1", purchase: 10, expires: 100, revoked: 50)
    _ = try await store.ingest([UserPurchases(user: user, transactions: [undatedRefund])], atMs: Fixture.now)
    _ = try await store.ingest([
      UserPurchases(user: user, transactions: [Fixture.transaction("1", purchase: 10, expires: 100, signed: 900)])
    ], atMs: Fixture.now)
    #expect(try await store.history(of: user).transactions == [undatedRefund])
  }

  /// a winning copy without a price keeps the price another copy carried (StoreKit 2, then verifyReceipt)
  static func mergedPrice(_ store: any Store) async throws {
    try await Fixture.seed(store)
    /// The StoreKit 2 copy (with Apple's price), the newer verifyReceipt copy (without one) and
    /// what a store keeps of both, of transaction `id`.
    func copies(_ id: String, receiptAsOf: Int64 = 30) -> (signed: Transaction, receipt: Transaction, kept: Transaction) {
      var signed = Fixture.transaction(id, purchase: 10, expires: 100, signed: 20)
      signed.price = 9_990
      signed.currency = "EUR"
      var receipt = Fixture.transaction(id, purchase: 10, expires: 100, revoked: 25)
      receipt.asOfDate = receiptAsOf
      var kept = receipt
      kept.price = 9_990
      kept.currency = "EUR"
      return (signed, receipt, kept)
    }
    // SHARE, then TRANSFER (the stores' paths without and with purchase sharing's ledger).
    for (round, sharing) in [PurchaseSharing.share, .transfer].enumerated() {
      _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: sharing))
      // The newer verifyReceipt copy wins in every order, in separate writes or in one; the price
      // of the signed copy stays, whichever arrived first.
      for n in 0..<4 {
        let id = "\(round)-\(n)"
        let (signed, receipt, kept) = copies(id)
        let writes = [[[signed], [receipt]], [[receipt], [signed]], [[signed, receipt]], [[receipt, signed]]][n]
        let user = Fixture.user("user\(id)")
        for batch in writes {
          _ = try await store.ingest([UserPurchases(user: user, transactions: batch)], atMs: Fixture.now)
        }
        #expect(try await store.history(of: user).transactions == [kept], "order \(n), \(sharing)")
        // A still newer copy without a price does not lose it either.
        let later = copies(id, receiptAsOf: 40)
        _ = try await store.ingest([UserPurchases(user: user, transactions: [later.receipt])], atMs: Fixture.now)
        #expect(try await store.history(of: user).transactions == [later.kept], "order \(n), \(sharing)")
      }
    }
  }

  /// field by field: a newer copy without a revocation type, app account token or price keeps the
  /// older copy's (V2 REFUND, then V1 REFUND and a receipt)
  static func mergedFields(_ store: any Store) async throws {
    try await Fixture.seed(store)
    /// Transaction `id` refunded at 25: the V2 REFUND's signed copy (with everything), the V1
    /// REFUND's (newer, none of the three), a verifyReceipt body's (newer still, none either),
    /// and what a store keeps of them.
    func copies(_ id: String) -> (v2: Transaction, v1: Transaction, receipt: Transaction, kept: Transaction) {
      var v2 = Fixture.transaction(id, purchase: 10, expires: 100, signed: 26, revoked: 25)
      v2.notificationType = "REFUND"
      v2.revocationType = .familyRevoke
      v2.appAccountToken = "0e1c7a4e-3f55-4a61-9a2b-5d1f3c2b7e90"
      v2.price = 4_990
      v2.currency = "USD"
      var v1 = Fixture.transaction(id, purchase: 10, expires: 100, revoked: 25)
      v1.notificationType = "REFUND"
      v1.asOfDate = 27
      var receipt = Fixture.transaction(id, purchase: 10, expires: 100, revoked: 25)
      receipt.asOfDate = 30
      var kept = receipt
      kept.revocationType = .familyRevoke
      kept.appAccountToken = v2.appAccountToken
      kept.price = 4_990
      kept.currency = "USD"
      return (v2, v1, receipt, kept)
    }
    for (round, sharing) in [PurchaseSharing.share, .transfer].enumerated() {
      _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: sharing))
      // Every order, as separate ingests, a notification's commit, or one ingest.
      for (n, order) in permutations([0, 1, 2]).enumerated() {
        let id = "\(round)-\(n)"
        let c = copies(id)
        let user = Fixture.user("fields\(id)")
        let all = [c.v2, c.v1, c.receipt]
        for (k, i) in order.enumerated() {
          let update = UserPurchases(user: user, transactions: [all[i]])
          if all[i].notificationType != nil {
            _ = try await store.applyNotification(appId: "a1", notificationId: "\(id)-\(k)", receivedMs: Fixture.now, updates: [update])
          } else {
            _ = try await store.ingest([update], atMs: Fixture.now)
          }
        }
        let stored = try await store.history(of: user).transactions
        #expect(stored == [c.kept], "order \(order), \(sharing)")
        #expect(stored.first?.revocationType == .familyRevoke, "order \(order), \(sharing)")
        // The three in one ingest (other transaction ids: under TRANSFER, a write that is not a
        // submission never takes a transaction another user holds).
        let one = copies("\(id)-once")
        let once = Fixture.user("fields-once\(id)")
        _ = try await store.ingest(
          [UserPurchases(user: once, transactions: order.map { [one.v2, one.v1, one.receipt][$0] })], atMs: Fixture.now)
        #expect(try await store.history(of: once).transactions == [one.kept], "one ingest, order \(order), \(sharing)")
      }
    }
  }

  /// a renewal-info snapshot removes what it lacks unless newer, and the removal is remembered
  static func renewalInfoSnapshot(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let user = Fixture.user("u1")
    func dated(_ r: RenewalInfo, _ asOf: Int64) -> RenewalInfo {
      var r = r
      r.asOfDate = asOf
      return r
    }
    let t1 = Fixture.transaction("1", purchase: 10, expires: 100)
    let t2 = Fixture.transaction("2", purchase: 10, expires: 100)
    let consumable = Transaction(transactionId: "3", productId: "coins", purchaseDate: 10)
    let grace1 = dated(Fixture.renewal("1", retry: true), 110)
    let renewal2 = dated(Fixture.renewal("2"), 110)
    let first = try await store.ingest([
      UserPurchases(
        user: user, transactions: [t1, t2, consumable], renewalInfos: [grace1, renewal2],
        renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: [t1, t2, consumable], asOfDate: 110))
    ], atMs: Fixture.now)
    #expect(first.renewalInfosWritten == 2)
    // A newer body lacks subscription 1's renewal info: it is removed, in the same commit.
    let newer = dated(Fixture.renewal("2"), 120)
    let second = try await store.ingest([
      UserPurchases(
        user: user, transactions: [t1, t2], renewalInfos: [newer],
        renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: [t1, t2], asOfDate: 120))
    ], atMs: Fixture.now)
    #expect(second.renewalInfosWritten == 1)  // the removal; renewal 2 only got newer
    #expect(try await store.history(of: user).renewalInfos == [newer])
    // The removal is remembered: the older renewal info arriving late does not come back, by
    // itself or in an older snapshot; a removal of nothing stored is not counted.
    let late = try await store.ingest([
      UserPurchases(
        user: user, transactions: [t1], renewalInfos: [grace1],
        renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: [t1], asOfDate: 110)),
      UserPurchases(user: user, renewalInfos: [dated(Fixture.renewal("1"), 115)]),
    ], atMs: Fixture.now)
    #expect(late.renewalInfosWritten == 0)
    #expect(try await store.history(of: user).renewalInfos == [newer])
    // An older snapshot never removes what a newer copy holds.
    _ = try await store.ingest([
      UserPurchases(user: user, transactions: [t2], renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: [t2], asOfDate: 119))
    ], atMs: Fixture.now)
    #expect(try await store.history(of: user).renewalInfos == [newer])
    // A signed renewal info newer than the removal brings subscription 1 back; one signed renewal
    // info replaces only its own.
    let resubscribed = Fixture.renewal("1", signed: 130)
    #expect(try await store.ingest([UserPurchases(user: user, renewalInfos: [resubscribed])], atMs: Fixture.now).renewalInfosWritten == 1)
    #expect(try await store.history(of: user).renewalInfos == [resubscribed, newer])
    // A snapshot only touches its own original transactions: other users and ids are left alone.
    let other = Fixture.user("u2")
    _ = try await store.ingest([UserPurchases(user: other, transactions: [t1], renewalInfos: [dated(Fixture.renewal("1"), 100)])], atMs: Fixture.now)
    _ = try await store.ingest([
      UserPurchases(user: user, transactions: [t1, t2], renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: [t1], asOfDate: 140))
    ], atMs: Fixture.now)
    #expect(try await store.history(of: user).renewalInfos == [newer])
    #expect(try await store.history(of: other).renewalInfos.count == 1)
    // The snapshot is validated with the rest of the batch.
    await expectStoreError(.invalidArgument) {
      _ = try await store.ingest([
        UserPurchases(user: user, renewalInfoSnapshot: RenewalInfoSnapshot(originalTransactionIds: [""], asOfDate: 1))
      ], atMs: Fixture.now)
    }
  }

  /// How many generated cases and orders the permutation property runs per store.
  static let permutationCases = 40
  static let permutationOrders = 3

  /// any permutation of generated copies from five sources stores one history and one evaluation
  static func copyPermutations(_ store: any Store) async throws {
    try await Fixture.seed(store)
    for seed in 0..<UInt64(permutationCases) {
      let generated = CopyPermutationCase(seed: seed)
      let expected = CopyPermutationCase.merged(generated.updates)
      let expectedEvaluation = generated.evaluate(expected.transactions, expected.renewalInfos)
      for (n, order) in generated.permutations(permutationOrders).enumerated() {
        // Each order by its own user, in ingests of one to three copies.
        let user = Fixture.user("s\(seed)-p\(n)")
        var g = SeededGenerator(seed: seed &* 31 &+ UInt64(n))
        var rest = order[...]
        while !rest.isEmpty {
          let chunk = rest.prefix(Int.random(in: 1...3, using: &g))
          rest = rest.dropFirst(chunk.count)
          var batch = Array(chunk)
          for i in batch.indices { batch[i].user = user }
          if Bool.random(using: &g) {
            _ = try await store.ingest(batch, atMs: Fixture.now)
          } else {
            _ = try await store.applyNotification(
              appId: "a1", notificationId: "\(user.userId)-\(rest.count)", receivedMs: 1, updates: batch)
          }
        }
        let history = try await store.history(of: user)
        #expect(history.transactions == expected.transactions, "\(generated), order \(n)")
        #expect(history.renewalInfos == expected.renewalInfos, "\(generated), order \(n)")
        #expect(
          generated.evaluate(history.transactions, history.renewalInfos) == expectedEvaluation, "\(generated), order \(n)")
      }
    }
  }
}

/// Every order of `items` (small arrays only).
private func permutations<T>(_ items: [T]) -> [[T]] {
  if items.count <= 1 { return [items] }
  var result: [[T]] = []
  for (i, item) in items.enumerated() {
    var rest = items
    rest.remove(at: i)
    for tail in permutations(rest) { result.append([item] + tail) }
  }
  return result
}
