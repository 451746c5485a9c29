import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The App Store Server API part of the Store contract (sync state, reconciliation leases).
extension StoreContract {
  /// Server API sync state: save, read, replace per user; unknown app and bad input refused
  static func historySyncState(_ store: any Store) async throws {
    let first = TransactionHistorySyncState(
      user: Fixture.user("u1"), transactionId: "2000000001", revision: "rev-1", lastSyncMs: 100)
    await expectStoreError(.notFound) { try await store.saveTransactionHistorySync(first) }
    try await Fixture.seed(store)
    #expect(try await store.transactionHistorySync(of: Fixture.user("u1")) == nil)
    try await store.saveTransactionHistorySync(first)
    #expect(try await store.transactionHistorySync(of: Fixture.user("u1")) == first)
    // One per user and environment: a later sync replaces it; a nil revision is kept as nil.
    let later = TransactionHistorySyncState(
      user: Fixture.user("u1"), transactionId: "2000000009", revision: nil, lastSyncMs: 200)
    try await store.saveTransactionHistorySync(later)
    #expect(try await store.transactionHistorySync(of: Fixture.user("u1")) == later)
    #expect(try await store.transactionHistorySync(of: Fixture.user("u1", environment: .sandbox)) == nil)
    #expect(try await store.transactionHistorySync(of: Fixture.user("u2")) == nil)
    await expectStoreError(.invalidArgument) {
      try await store.saveTransactionHistorySync(
        TransactionHistorySyncState(user: Fixture.user("u2"), transactionId: "", revision: nil, lastSyncMs: 1))
    }
    await expectStoreError(.invalidArgument) {
      try await store.saveTransactionHistorySync(
        TransactionHistorySyncState(user: Fixture.user(""), transactionId: "1", revision: nil, lastSyncMs: 1))
    }
  }

  /// reconciliation leases: one owner at a time, taken over after expiry, completion records the time
  static func reconciliationLease(_ store: any Store) async throws {
    await expectStoreError(.notFound) {
      _ = try await store.claimReconciliation(appId: "a1", environment: .production, owner: "i1", atMs: 0, leaseUntilMs: 10)
    }
    try await Fixture.seed(store)
    await expectStoreError(.invalidArgument) {
      _ = try await store.claimReconciliation(appId: "a1", environment: .production, owner: "", atMs: 0, leaseUntilMs: 10)
    }
    await expectStoreError(.invalidArgument) {
      _ = try await store.claimReconciliation(appId: "a1", environment: .production, owner: "i1", atMs: 10, leaseUntilMs: 10)
    }
    // The first claim wins and knows no previous reconciliation.
    let claim = try await store.claimReconciliation(
      appId: "a1", environment: .production, owner: "i1", atMs: 100, leaseUntilMs: 200)
    #expect(claim == ReconciliationClaim(appId: "a1", environment: .production, reconciledThroughMs: nil))
    // Another owner is refused while the lease holds; the holder may renew; the sandbox is separate.
    #expect(try await store.claimReconciliation(appId: "a1", environment: .production, owner: "i2", atMs: 150, leaseUntilMs: 250) == nil)
    #expect(try await store.claimReconciliation(appId: "a1", environment: .production, owner: "i1", atMs: 150, leaseUntilMs: 300) != nil)
    #expect(try await store.claimReconciliation(appId: "a1", environment: .sandbox, owner: "i2", atMs: 150, leaseUntilMs: 250) != nil)
    #expect(try await store.claimReconciliation(appId: "a1", environment: .production, owner: "i2", atMs: 299, leaseUntilMs: 400) == nil)
    // Completing records the time and frees the claim; only the holder may complete.
    await expectStoreError(.notFound) {
      try await store.completeReconciliation(appId: "a1", environment: .production, owner: "i2", reconciledThroughMs: 1)
    }
    try await store.completeReconciliation(appId: "a1", environment: .production, owner: "i1", reconciledThroughMs: 140)
    await expectStoreError(.notFound) {
      try await store.completeReconciliation(appId: "a1", environment: .production, owner: "i1", reconciledThroughMs: 150)
    }
    let next = try await store.claimReconciliation(
      appId: "a1", environment: .production, owner: "i2", atMs: 160, leaseUntilMs: 260)
    #expect(next?.reconciledThroughMs == 140)
    // An expired lease is taken over; the old holder can no longer complete; nil keeps the time.
    let takeover = try await store.claimReconciliation(
      appId: "a1", environment: .production, owner: "i3", atMs: 260, leaseUntilMs: 360)
    #expect(takeover?.reconciledThroughMs == 140)
    await expectStoreError(.notFound) {
      try await store.completeReconciliation(appId: "a1", environment: .production, owner: "i2", reconciledThroughMs: 999)
    }
    try await store.completeReconciliation(appId: "a1", environment: .production, owner: "i3", reconciledThroughMs: nil)
    let last = try await store.claimReconciliation(
      appId: "a1", environment: .production, owner: "i1", atMs: 300, leaseUntilMs: 400)
    #expect(last?.reconciledThroughMs == 140)
    // Instances claiming at the same instant: exactly one wins.
    try await store.createApp(Fixture.app("a0"))
    let winners = try await withThrowingTaskGroup(of: Bool.self) { group in
      for n in 0..<8 {
        group.addTask {
          try await store.claimReconciliation(
            appId: "a0", environment: .production, owner: "racer-\(n)", atMs: 1000, leaseUntilMs: 2000) != nil
        }
      }
      return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
    }
    #expect(winners == 1)
  }
}
