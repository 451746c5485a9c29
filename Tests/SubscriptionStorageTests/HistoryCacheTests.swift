import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// The SQLite store's history cache (`docs/evaluation-cache.md`): hits skip the database, every
/// write is seen by the next read, a read racing a write never caches the older history, and the
/// size stays within its budget. (The store contract suite also runs against a store whose cache
/// is tiny, so that entries are evicted all the time: `StoreKind.sqliteTinyHistoryCache`.)
@Suite("SQLite history cache")
struct HistoryCacheTests {
  static func withSQLite<T>(
    historyCacheBytes: Int = 32 << 20, _ body: (SQLiteStore) async throws -> T
  ) async throws -> T {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(
        path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 2,
        historyCacheBytes: historyCacheBytes))
    defer { store.close() }
    try await Fixture.seed(store)
    return try await body(store)
  }

  @Test("a second read is a hit; each kind of write is seen by the next read")
  func writesInvalidate() async throws {
    try await Self.withSQLite { store in
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t1"])
      #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t1"])
      var stats = store.historyCache.statistics
      #expect(stats.hits == 1 && stats.misses == 1 && stats.entries == 1 && stats.bytes > 0)

      // An ingest.
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t1", "t2"])
      // A notification (applied), read through the batch read.
      let applied = try await store.applyNotification(
        appId: "a1", notificationId: "n1", receivedMs: 10,
        updates: [UserPurchases(user: user, renewalInfos: [Fixture.renewal("t1", signed: 5)])])
      #expect(applied != nil)
      let batch = try await store.histories(appId: "a1", environment: .production, userIds: ["u1", "nobody", "u1"])
      #expect(batch.map(\.renewalInfos.count) == [1, 0, 1])
      #expect(batch[0].transactions.map(\.transactionId) == ["t1", "t2"])
      // An erasure.
      _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
      #expect(try await store.history(of: user).transactions.isEmpty)
      stats = store.historyCache.statistics
      #expect(stats.invalidations >= 4)
    }
  }

  @Test("a history read before a write is not cached after the write's invalidation")
  func racingFillIsRefused() async throws {
    try await Self.withSQLite { store in
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      let cache = store.historyCache
      // A reader took the generation and read the old history; then a write committed and
      // invalidated; then the reader tries to fill.
      let generation = cache.generation(of: user)
      let old = UserHistory(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      cache.fill(user, old, bytes: 100, generation: generation)
      #expect(cache.history(of: user) == nil)
      #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t1", "t2"])
      // Without a write in between, the fill is kept.
      let user2 = Fixture.user("u2")
      let g2 = cache.generation(of: user2)
      cache.fill(user2, UserHistory(user: user2), bytes: 100, generation: g2)
      #expect(cache.history(of: user2) == UserHistory(user: user2))
    }
  }

  @Test("the cache stays within its budget and keeps the recently used")
  func bounded() {
    let budget = 64 << 10
    let cache = HistoryCache(capacityBytes: budget)
    let users = (0..<2_000).map { Fixture.user("user-\($0)") }
    for user in users {
      let generation = cache.generation(of: user)
      cache.fill(user, UserHistory(user: user), bytes: 300, generation: generation)
      _ = cache.history(of: users[0])  // used all along: stays
    }
    let stats = cache.statistics
    #expect(stats.bytes <= budget)
    #expect(stats.entries > 0 && stats.entries < users.count)
    #expect(cache.history(of: users[0]) != nil)
    #expect(cache.history(of: users[1]) == nil)
    // A history larger than a generation's share is never kept.
    let big = Fixture.user("big")
    cache.fill(big, UserHistory(user: big), bytes: budget, generation: cache.generation(of: big))
    #expect(cache.history(of: big) == nil)
  }

  @Test("turned off (0 bytes), every read goes to the database and nothing is held")
  func off() async throws {
    try await Self.withSQLite(historyCacheBytes: 0) { store in
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      _ = try await store.history(of: user)
      _ = try await store.history(of: user)
      #expect(store.historyCache.statistics == .init(hits: 0, misses: 0, invalidations: 0, entries: 0, bytes: 0))
      #expect(store.historyCacheMetrics().contains("substatus_history_cache_hits_total 0"))
    }
  }
}
