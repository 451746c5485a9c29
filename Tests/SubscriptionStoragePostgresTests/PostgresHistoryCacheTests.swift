import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// The PostgreSQL store's history cache (`docs/evaluation-cache.md`): within an instance, each kind
/// of write is seen by the next read.
@Suite("PostgreSQL history cache")
struct PostgresHistoryCacheTests {
  /// Reads the user until its history is cached (its second miss fills it), checking each answer.
  static func warm(_ store: PostgresStore, _ user: UserKey, expect ids: [String]) async throws {
    for _ in 0..<3 { #expect(try await store.history(of: user).transactions.map(\.transactionId) == ids) }
  }

  @Test("the second miss fills, the third read is a hit; each kind of write is seen by the next read")
  func writesInvalidate() async throws {
    try await withPostgresStore(historyCacheBytes: 32 << 20) { store in
      try await Fixture.seed(store)
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      try await Self.warm(store, user, expect: ["t1"])
      let stats = store.historyCache.statistics
      #expect(stats.hits == 1 && stats.misses == 2 && stats.fills == 1 && stats.entries == 1 && stats.bytes > 0)

      // An ingest.
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      try await Self.warm(store, user, expect: ["t1", "t2"])
      // A notification (applied), read through the batch read, with a user not stored and a repeat.
      let applied = try await store.applyNotification(
        appId: "a1", notificationId: "n1", receivedMs: 10,
        updates: [UserPurchases(user: user, renewalInfos: [Fixture.renewal("t1", signed: 5)])])
      #expect(applied != nil)
      let batch = try await store.histories(appId: "a1", environment: .production, userIds: ["u1", "nobody", "u1"])
      #expect(batch.map(\.renewalInfos.count) == [1, 0, 1])
      #expect(batch.map(\.user.userId) == ["u1", "nobody", "u1"])
      #expect(batch[0].transactions.map(\.transactionId) == ["t1", "t2"])
      try await Self.warm(store, user, expect: ["t1", "t2"])
      #expect(store.historyCache.history(of: user)?.renewalInfos.count == 1)
      // An erasure.
      _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
      #expect(try await store.history(of: user).transactions.isEmpty)
      #expect(store.historyCache.statistics.invalidations >= 4)
      #expect(store.historyCacheMetrics().contains("substatus_history_cache_hits_total "))
    }
  }

  @Test("turned off (the default), every read goes to the database and nothing is held")
  func off() async throws {
    try await withPostgresStore { store in
      try await Fixture.seed(store)
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      for _ in 0..<3 { _ = try await store.history(of: user) }
      #expect(store.historyCache.statistics == .init(hits: 0, misses: 0, fills: 0, invalidations: 0, entries: 0, bytes: 0))
    }
  }
}
