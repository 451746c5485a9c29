import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// The SQLite store's history cache (`docs/evaluation-cache.md`): a user's history is kept on its
/// second miss, hits skip the database, every write is seen by the next read, a read racing a write
/// never caches the older history, a miss without locality keeps nothing, and the size stays
/// within its budget. (The store contract suite also runs against a store whose cache
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

  /// Reads the user until its history is cached (its second miss fills it), checking each answer.
  static func warm(_ store: SQLiteStore, _ user: UserKey, expect ids: [String]) async throws {
    for _ in 0..<3 { #expect(try await store.history(of: user).transactions.map(\.transactionId) == ids) }
  }

  @Test("the second miss fills, the third read is a hit; each kind of write is seen by the next read")
  func writesInvalidate() async throws {
    try await Self.withSQLite { store in
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      try await Self.warm(store, user, expect: ["t1"])
      var stats = store.historyCache.statistics
      #expect(stats.hits == 1 && stats.misses == 2 && stats.fills == 1 && stats.entries == 1 && stats.bytes > 0)

      // An ingest.
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      try await Self.warm(store, user, expect: ["t1", "t2"])
      #expect(store.historyCache.statistics.entries == 1)
      // A notification (applied), read through the batch read.
      let applied = try await store.applyNotification(
        appId: "a1", notificationId: "n1", receivedMs: 10,
        updates: [UserPurchases(user: user, renewalInfos: [Fixture.renewal("t1", signed: 5)])])
      #expect(applied != nil)
      let batch = try await store.histories(appId: "a1", environment: .production, userIds: ["u1", "nobody", "u1"])
      #expect(batch.map(\.renewalInfos.count) == [1, 0, 1])
      #expect(batch[0].transactions.map(\.transactionId) == ["t1", "t2"])
      try await Self.warm(store, user, expect: ["t1", "t2"])
      #expect(store.historyCache.history(of: user)?.renewalInfos.count == 1)
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
      // A reader looked the user up (its second miss: a ticket) and read the old history; then a
      // write committed and invalidated; then the reader tries to fill.
      #expect(Self.ticket(cache.lookup(user)) == nil)
      let ticket = try #require(Self.ticket(cache.lookup(user)))
      let old = UserHistory(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      cache.fill(ticket, old, payloadBytes: 100)
      #expect(cache.statistics.fills == 0 && cache.statistics.entries == 0)
      try await Self.warm(store, user, expect: ["t1", "t2"])
      // Without a write in between, the fill is kept.
      let user2 = Fixture.user("u2")
      _ = cache.lookup(user2)
      let t2 = try #require(Self.ticket(cache.lookup(user2)))
      cache.fill(t2, UserHistory(user: user2), payloadBytes: 100)
      #expect(cache.history(of: user2) == UserHistory(user: user2))
    }
  }

  /// The fill ticket of a miss (nil for a hit or a miss that does not admit).
  static func ticket(_ lookup: HistoryCache.Lookup) -> HistoryCache.FillTicket? {
    if case .miss(let ticket) = lookup { return ticket }
    return nil
  }

  @Test("a miss admits a user only on its second miss in the window; reads without locality keep nothing")
  func admission() throws {
    let cache = HistoryCache(capacityBytes: 64 << 20)
    let users = (0..<500).map { Fixture.user("once-\($0)") }
    // Each user read once: no ticket (but for the rare user whose bit another already set), nothing held.
    let early = users.filter { Self.ticket(cache.lookup($0)) != nil }.count
    #expect(early <= users.count / 20)
    var stats = cache.statistics
    #expect(stats.misses == users.count && stats.entries == 0 && stats.fills == 0)
    // Read again soon after: admitted (about all; two users on one bit may take each other's turn).
    let admitted = users.filter { Self.ticket(cache.lookup($0)) != nil }.count
    #expect(admitted >= users.count * 9 / 10)
    // A ticket fills once; then the user is a hit (a fresh cache: no other user's bit).
    let fresh = HistoryCache(capacityBytes: 64 << 20)
    let user = Fixture.user("twice")
    #expect(Self.ticket(fresh.lookup(user)) == nil)
    let ticket = try #require(Self.ticket(fresh.lookup(user)))
    fresh.fill(ticket, UserHistory(user: user), payloadBytes: 10)
    #expect(fresh.history(of: user) == UserHistory(user: user))
    stats = fresh.statistics
    #expect(stats.fills == 1 && stats.entries == 1 && stats.hits == 1 && stats.misses == 2)
  }

  @Test("turned off, a lookup is a miss without a ticket and counts nothing")
  func offLookup() {
    let cache = HistoryCache(capacityBytes: 0)
    let user = Fixture.user("u1")
    for _ in 0..<3 { #expect(Self.ticket(cache.lookup(user)) == nil) }
    #expect(cache.statistics == .init(hits: 0, misses: 0, fills: 0, invalidations: 0, entries: 0, bytes: 0))
  }

  @Test("the cache stays within its budget and keeps the recently used")
  func bounded() {
    let budget = 64 << 10
    let cache = HistoryCache(capacityBytes: budget)
    let users = (0..<2_000).map { Fixture.user("user-\($0)") }
    let payload = 150 - MemoryLayout<UserHistory>.stride / 2
    for user in users {
      _ = cache.lookup(user)
      if let ticket = Self.ticket(cache.lookup(user)) { cache.fill(ticket, UserHistory(user: user), payloadBytes: payload) }
      _ = cache.history(of: users[0])  // used all along: stays
    }
    let stats = cache.statistics
    #expect(stats.bytes <= budget)
    #expect(stats.entries > 0 && stats.entries < users.count)
    #expect(cache.history(of: users[0]) != nil)
    #expect(cache.history(of: users[1]) == nil)
    // A history larger than a generation's share is never kept.
    let big = Fixture.user("big")
    _ = cache.lookup(big)
    if let ticket = Self.ticket(cache.lookup(big)) { cache.fill(ticket, UserHistory(user: big), payloadBytes: budget) }
    #expect(cache.history(of: big) == nil)
  }

  @Test("the memory gauges show SQLite's heap and the user-key cache filling as users are read")
  func memoryGauges() async throws {
    try await Self.withSQLite(historyCacheBytes: 0) { store in
      func gauge(_ name: String) throws -> Int {
        let line = try #require(store.memoryMetrics().split(separator: "\n").first { $0.hasPrefix(name + " ") })
        return try #require(Int(line.split(separator: " ")[1]))
      }
      #expect(try gauge("substatus_sqlite_memory_bytes") > 0)
      #expect(try gauge("substatus_user_key_cache_entries") == 0)
      let users = (0..<3).map { Fixture.user("m\($0)") }
      _ = try await store.ingest(users.map { UserPurchases(user: $0, transactions: [Fixture.transaction("t-\($0.userId)", purchase: 1)]) }, atMs: Fixture.now)
      for user in users { _ = try await store.history(of: user) }
      #expect(try gauge("substatus_user_key_cache_entries") == users.count)
    }
  }

  @Test("turned off (0 bytes), every read goes to the database and nothing is held")
  func off() async throws {
    try await Self.withSQLite(historyCacheBytes: 0) { store in
      let user = Fixture.user("u1")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
      _ = try await store.history(of: user)
      _ = try await store.history(of: user)
      #expect(store.historyCache.statistics == .init(hits: 0, misses: 0, fills: 0, invalidations: 0, entries: 0, bytes: 0))
      #expect(store.historyCacheMetrics().contains("substatus_history_cache_hits_total 0"))
    }
  }
}
