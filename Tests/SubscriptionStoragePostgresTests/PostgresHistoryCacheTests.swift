import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import SubstatusProcessTestKit
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

/// Two instances on one database: what one writes, the other's cache stops serving, through the
/// change feed (`user_changes`, `NOTIFY`, the poll, whole clears when it may have missed rows).
@Suite("PostgreSQL history cache across instances")
struct PostgresHistoryCacheFeedTests {
  /// Runs `body` with two stores on one fresh database: `a` writes (cache off), `b` caches with a
  /// poll interval of `pollInterval` seconds.
  static func withTwoInstances(
    pollInterval: Double = 60, _ body: (_ a: PostgresStore, _ b: PostgresStore, _ url: String) async throws -> Void
  ) async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let (a, b) = try await blocking {
      let a = try PostgresStore(configuration: .init(url: url, keyring: testKeyring, poolSize: 2))
      var c = PostgresStore.Configuration(url: url, keyring: testKeyring, poolSize: 2, historyCacheBytes: 32 << 20)
      c.changePollInterval = pollInterval
      return (a, try PostgresStore(configuration: c))
    }
    defer {
      a.close()
      b.close()
    }
    try await Fixture.seed(a)
    try await body(a, b, url)
  }

  /// Reads through `store` until `done` holds of the history, for at most 5 s; returns whether it did.
  static func eventually(
    _ store: PostgresStore, _ user: UserKey, _ done: (UserHistory) -> Bool
  ) async throws -> Bool {
    try await waitUntil(timeout: .seconds(5), every: .milliseconds(10)) { done(try await store.history(of: user)) }
  }

  /// Waits (at most 5 s) until `store`'s feed has read `changes` rows in all; returns whether it did.
  static func caughtUp(_ store: PostgresStore, changes: Int) async throws -> Bool {
    _ = await waitUntil(timeout: .seconds(5)) { store.changeFeed!.statistics.changesRead >= changes }
    return store.changeFeed!.statistics.changesRead == changes
  }

  /// a writes `t1` for u1; once b's feed has read that change, b caches the history.
  static func cachedInB(_ a: PostgresStore, _ b: PostgresStore) async throws -> UserKey {
    let user = Fixture.user("u1")
    _ = try await a.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t1", purchase: 1)])], atMs: Fixture.now)
    #expect(try await caughtUp(b, changes: 1))
    try await PostgresHistoryCacheTests.warm(b, user, expect: ["t1"])
    #expect(b.historyCache.statistics.entries == 1)
    return user
  }

  /// Runs SQL on the database itself (not through a store).
  static func sql(_ url: String, _ statement: String) async throws {
    try await blocking { try PGConnection(conninfo: url).execute(statement) }
  }

  @Test("a write through one instance is read through the other at once after its notification (the poll is a minute)")
  func writeSeenAfterNotification() async throws {
    try await Self.withTwoInstances { a, b, _ in
      let user = try await Self.cachedInB(a, b)
      #expect(try await b.history(of: user).transactions.count == 1)  // served from memory
      _ = try await a.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      #expect(try await Self.eventually(b, user) { $0.transactions.map(\.transactionId) == ["t1", "t2"] })
      // Cached again (once b has read the change), then a notification through a.
      #expect(try await Self.caughtUp(b, changes: 2))
      try await PostgresHistoryCacheTests.warm(b, user, expect: ["t1", "t2"])
      #expect(b.historyCache.history(of: user)?.transactions.count == 2)
      _ = try await a.applyNotification(
        appId: "a1", notificationId: "n1", receivedMs: 10,
        updates: [UserPurchases(user: user, renewalInfos: [Fixture.renewal("t1", signed: 5)])])
      #expect(try await Self.eventually(b, user) { $0.renewalInfos.count == 1 })
      #expect(b.changeFeed!.statistics.changesRead == 3)
      #expect(b.changeFeed!.statistics.clears == 1)  // the start only
    }
  }

  @Test("an erasure through one instance is not served from the other's cache")
  func erasureNotServed() async throws {
    try await Self.withTwoInstances { a, b, _ in
      let user = try await Self.cachedInB(a, b)
      _ = try await a.deleteUsers(appId: "a1", userIds: ["u1"])
      #expect(try await Self.eventually(b, user) { $0.transactions.isEmpty })
      // The feed names no erased user: b, finding the user gone, cleared everything.
      #expect(b.changeFeed!.statistics.clears == 2)
    }
  }

  @Test("without a notification, the poll invalidates; a prune of rows the instance read clears nothing")
  func pollAndPrune() async throws {
    try await Self.withTwoInstances(pollInterval: 0.05) { a, b, url in
      let user = try await Self.cachedInB(a, b)
      // A change row without NOTIFY (as a commit whose notification was lost would leave).
      try await Self.sql(url, "INSERT INTO user_changes(user_key) SELECT user_key FROM users WHERE user_id = 'u1'")
      #expect(try await Self.caughtUp(b, changes: 2))
      #expect(b.historyCache.statistics.entries == 0)
      try await a.pruneUserChanges(olderThanSeconds: 0)
      try await PostgresHistoryCacheTests.warm(b, user, expect: ["t1"])
      try await Task.sleep(for: .milliseconds(200))  // several polls
      #expect(b.historyCache.statistics.entries == 1)
      #expect(b.changeFeed!.statistics.clears == 1)
    }
  }

  @Test("rows pruned before the instance read them clear its whole cache")
  func prunedUnreadRowsClear() async throws {
    try await Self.withTwoInstances(pollInterval: 0.05) { a, b, url in
      _ = try await Self.cachedInB(a, b)
      // Rows recorded and pruned in one commit: b never sees them, only the watermark past its position.
      try await Self.sql(
        url,
        """
        BEGIN;
        INSERT INTO user_changes(user_key) SELECT user_key FROM users WHERE user_id = 'u1';
        UPDATE user_changes_pruned SET through = (SELECT MAX(sequence) FROM user_changes);
        DELETE FROM user_changes;
        COMMIT
        """)
      _ = await waitUntil(timeout: .seconds(5)) { b.changeFeed!.statistics.clears >= 2 }
      #expect(b.changeFeed!.statistics.clears == 2)
      #expect(b.historyCache.statistics.entries == 0)
    }
  }

  @Test("a writer whose sequences cross a multiple of 4096 prunes the rows older than 5 minutes and raises the watermark")
  func writersPrune() async throws {
    try await Self.withTwoInstances { a, _, url in
      func count(_ sql: String) async throws -> Int64 {
        try await blocking { try PGConnection(conninfo: url).first(sql)?.int(0) ?? -1 }
      }
      try await Self.sql(
        url,
        """
        INSERT INTO user_changes(user_key, changed_at) VALUES (0, now() - interval '6 minutes'), (0, now() - interval '4 minutes');
        ALTER TABLE user_changes ALTER COLUMN sequence RESTART WITH 4095
        """)
      let users = [Fixture.user("p1"), Fixture.user("p2")]
      // Sequences 4095 and 4096: no multiple of 4096 crossed before the last one.
      _ = try await a.ingest(users.map { UserPurchases(user: $0, transactions: [Fixture.transaction("t-\($0.userId)", purchase: 1)]) }, atMs: Fixture.now)
      #expect(try await count("SELECT count(*) FROM user_changes") == 3)
      #expect(try await count("SELECT through FROM user_changes_pruned") == 1)
      #expect(try await count("SELECT MIN(sequence) FROM user_changes") == 2)
    }
  }

  @Test("a lost listening connection clears the cache; once reconnected, writes are seen again")
  func lostConnectionClears() async throws {
    try await Self.withTwoInstances(pollInterval: 0.05) { a, b, url in
      let user = try await Self.cachedInB(a, b)
      let name = b.changeFeed!.applicationName
      try await Self.sql(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '\(name)'")
      #expect(await waitUntil(timeout: .seconds(5)) { b.historyCache.statistics.entries == 0 })
      #expect(b.changeFeed!.statistics.clears >= 2)
      try await PostgresHistoryCacheTests.warm(b, user, expect: ["t1"])
      _ = try await a.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t2", purchase: 2)])], atMs: Fixture.now)
      #expect(try await Self.eventually(b, user) { $0.transactions.count == 2 })
    }
  }
}
