import SubscriptionDomain
import SubscriptionStorage
import Testing

// Purchase sharing TRANSFER_IF_NO_ACTIVE and the sandbox override (docs/architecture.md "Access
// model"), on the fixture of StoreContract+PurchaseSharing.swift: the shared subscription's
// periods are [100, 200) and [200, 300).

extension StoreContract {
  /// purchase sharing TRANSFER_IF_NO_ACTIVE: the latest submitter takes it only when no owner is entitled by it at that instant; otherwise refused as KEEP_FIRST
  static func purchaseSharingTransferIfNoActive(_ store: any Store) async throws {
    try await SharingFixture.seed(store, .transferIfNoActive)
    #expect(try await store.app(id: "a1").ownershipTracked)
    let shared = SharingFixture.shared
    func owners() async throws -> [String] {
      try await store.users(appId: "a1", environment: .production, originalTransactionId: shared)
    }
    for (first, second) in restoreOrders {
      _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
      #expect(try await store.ingest([SharingFixture.restore(first, at: 150)], atMs: Fixture.now).refused.isEmpty)
      // At 250 the first is entitled by it (the period [200, 300) covers 250): refused, as KEEP_FIRST.
      let active = try await store.ingest(
        [SharingFixture.restore(second, at: 250, own: "otx-own-\(second)")], atMs: Fixture.now)
      #expect(active.refused == [OwnershipRefusal(user: Fixture.user(second), originalTransactionId: shared)])
      #expect(active.transfers.isEmpty && active.transactionsWritten == 1)
      #expect(try await owners() == [first])
      // The submitted data counts too: a renewal [300, 400) that only the second's submission
      // carries keeps the first entitled at 350.
      var renewed = SharingFixture.restore(second, at: 350)
      renewed.transactions.append(Fixture.transaction("\(shared)-3", original: shared, purchase: 300, expires: 400))
      #expect(try await store.ingest([renewed], atMs: Fixture.now).refused.count == 1)
      // At 500 nothing of it entitles anybody: it transfers, kept with its time like TRANSFER.
      let moved = try await store.ingest([SharingFixture.restore(second, at: 500)], atMs: Fixture.now)
      #expect(moved.refused.isEmpty)
      #expect(moved.transfers == [SharingFixture.transfer(first, second, at: 500)])
      #expect(try await owners() == [second])
      #expect(
        try await store.ownershipGaps(appId: "a1", environment: .production, userIds: [first, second]) == [
          first: [SharingFixture.gap(from: 500)], second: [SharingFixture.gap(until: 500)],
        ])
      // And back at 600, when the second is not entitled either.
      let back = try await store.ingest([SharingFixture.restore(first, at: 600)], atMs: Fixture.now)
      #expect(back.transfers == [SharingFixture.transfer(second, first, at: 600)])
      #expect(try await owners() == [first])
    }
    // A refund ends the entitlement: a refunded purchase moves even within its period.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
    var refunded = SharingFixture.restore("u1", at: 150)
    refunded.transactions[1].revocationDate = 220
    _ = try await store.ingest([refunded], atMs: Fixture.now)
    #expect(try await store.ingest([SharingFixture.restore("u2", at: 250)], atMs: Fixture.now).transfers.count == 1)
    #expect(try await owners() == ["u2"])
  }

  /// purchase sharing: the sandbox override applies to sandbox data only (production transfers while sandbox shares); unset, the sandbox follows production
  static func purchaseSharingSandbox(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let policy = EligibilityPolicy(purchaseSharing: .transfer, purchaseSharingSandbox: .share)
    #expect(try await store.setPolicy(appId: "a1", policy: policy).ownershipTracked)
    #expect(try await store.app(id: "a1").policy.purchaseSharingSandbox == .share)
    func restore(_ userId: String, _ environment: Environment, at ms: Int64) -> UserPurchases {
      var update = SharingFixture.restore(userId, at: ms)
      update.user = Fixture.user(userId, environment: environment)
      for i in update.transactions.indices { update.transactions[i].rawEnvironment = environment.rawValue }
      for i in update.renewalInfos.indices { update.renewalInfos[i].rawEnvironment = environment.rawValue }
      return update
    }
    func owners(_ environment: Environment) async throws -> [String] {
      try await store.users(appId: "a1", environment: environment, originalTransactionId: SharingFixture.shared)
    }
    for environment in Environment.allCases {
      _ = try await store.ingest([restore("u1", environment, at: 1_000)], atMs: Fixture.now)
      let second = try await store.ingest([restore("u2", environment, at: 2_000)], atMs: Fixture.now)
      #expect(second.transfers.count == (environment == .production ? 1 : 0))
    }
    #expect(try await owners(.production) == ["u2"])
    #expect(try await owners(.sandbox) == ["u1", "u2"])
    #expect(try await store.ownershipGaps(appId: "a1", environment: .sandbox, userIds: ["u1", "u2"]).isEmpty)
    // Without the override the sandbox transfers too; KEEP_FIRST there refuses a third tester.
    _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .transfer))
    #expect(try await store.app(id: "a1").policy.purchaseSharingSandbox == nil)
    let third = try await store.ingest([restore("u3", .sandbox, at: 3_000)], atMs: Fixture.now)
    #expect(third.transfers.map(\.previousUserId) == ["u1", "u2"])
    #expect(try await owners(.sandbox) == ["u3"])
    _ = try await store.setPolicy(
      appId: "a1", policy: EligibilityPolicy(purchaseSharing: .share, purchaseSharingSandbox: .keepFirst))
    #expect(try await store.ingest([restore("u4", .sandbox, at: 4_000)], atMs: Fixture.now).refused.count == 1)
    #expect(try await store.ingest([restore("u4", .production, at: 4_000)], atMs: Fixture.now).refused.isEmpty)
    #expect(try await owners(.production) == ["u2", "u4"])
  }
}
