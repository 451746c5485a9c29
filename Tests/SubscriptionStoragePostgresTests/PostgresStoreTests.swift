import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Synchronization
import Testing

@testable import SubscriptionStoragePostgres

/// The shared contract suite (``StoreContract``) against PostgreSQL, each case on its own database,
/// with the history cache off and with one so small (64 KiB) that entries are evicted all the time.
@Suite("PostgreSQL store contract")
struct PostgresContractTests {
  @Test(arguments: StoreContract.Case.allCases)
  func contract(_ test: StoreContract.Case) async throws {
    try await withPostgresStore { store in try await StoreContract.run(test, store) }
  }

  @Test(arguments: StoreContract.Case.allCases)
  func contractWithATinyHistoryCache(_ test: StoreContract.Case) async throws {
    try await withPostgresStore(historyCacheBytes: 64 << 10) { store in try await StoreContract.run(test, store) }
  }
}

/// What only PostgreSQL has: migrations shared by instances, several instances on one database,
/// sealed secrets across instances, lost sessions.
@Suite("PostgreSQL store")
struct PostgresStoreTests {
  private func open(_ url: String, keyring: MasterKeyring? = testKeyring, poolSize: Int = 2) throws
    -> PostgresStore
  {
    try PostgresStore(configuration: .init(url: url, keyring: keyring, poolSize: poolSize))
  }

  @Test func instancesStartingTogetherMigrateOnceAndANewerSchemaIsRefused() async throws {
    let server = try await blocking { try PostgresServer.fast.get() }
    let url = try await blocking { try server.createDatabase() }
    let versions = try await withThrowingTaskGroup(of: Int.self) { group in
      for _ in 0..<4 {
        group.addTask { [self] in
          try await blocking {
            let store = try open(url, poolSize: 1)
            defer { store.close() }
            return store.schemaVersion
          }
        }
      }
      return try await group.reduce(into: []) { $0.append($1) }
    }
    #expect(versions == Array(repeating: PostgresStore.latestSchemaVersion, count: 4))
    let db = try PGConnection(conninfo: url)
    let rows = try db.query("SELECT version FROM schema_version ORDER BY version")
    #expect(rows.map { $0.int(0) } == (1...PostgresStore.latestSchemaVersion).map(Int64.init))
    try db.run(
      "INSERT INTO schema_version(version, description, applied_ms) VALUES($1, 'from the future', 0)",
      [.int(Int64(PostgresStore.latestSchemaVersion + 1))])
    await expectStoreError(.newerSchema) { try open(url) }
  }

  @Test func unreachableServerIsUnavailable() async throws {
    let port = try freePort()
    await expectStoreError(.unavailable) {
      try open("postgres://postgres@127.0.0.1:\(port)/nope?connect_timeout=2")
    }
  }

  /// A server that accepts and never answers: the connection gives up after the default timeout,
  /// or after the connection string's own `connect_timeout`, which wins over the default.
  @Test(arguments: [
    // (query of the URL, default timeout in seconds)
    ("", 1), ("?connect_timeout=1", 600),
  ])
  func aServerThatNeverAnswersTimesOut(query: String, defaultTimeout: Int) async throws {
    let silent = try SilentListener()
    let url = "postgres://postgres@127.0.0.1:\(silent.port)/nope\(query)"
    let started = ContinuousClock.now
    // Without a timeout libpq waits forever here.
    await expectStoreError(.unavailable) {
      try await blocking { _ = try PGConnection(conninfo: url, connectTimeoutSeconds: defaultTimeout) }
    }
    #expect(ContinuousClock.now - started < .seconds(60))
    withExtendedLifetime(silent) {}
  }

  @Test func oneNotificationAppliedByManyInstancesAtOnceIsAppliedOnce() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let stores = try (0..<3).map { _ in try open(url) }
    defer { for s in stores { s.close() } }
    try await Fixture.seed(stores[0])
    for round in 0..<5 {
      let update = UserPurchases(
        user: Fixture.user("u\(round)"),
        transactions: [Fixture.transaction("t\(round)", purchase: 10, expires: 20)])
      let applied = try await withThrowingTaskGroup(of: Bool.self) { group in
        for i in 0..<12 {
          let store = stores[i % stores.count]
          group.addTask {
            try await store.applyNotification(
              appId: "a1", notificationId: "n\(round)", receivedMs: 1, updates: [update]) != nil
          }
        }
        return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
      }
      #expect(applied == 1, "round \(round)")
      #expect(try await stores[1].history(of: Fixture.user("u\(round)")).transactions.count == 1)
    }
  }

  @Test func concurrentInstancesNeverLetAnOldCopyUndoARefund() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    defer {
      a.close()
      b.close()
    }
    try await Fixture.seed(a)
    let old = Fixture.transaction("1", purchase: 100, expires: 200)
    let refunded = Fixture.transaction("1", purchase: 100, expires: 200, revoked: 150)
    let renewal = Fixture.transaction("2", original: "1", purchase: 200, expires: 300)
    try await withThrowingTaskGroup(of: Void.self) { group in
      for i in 0..<30 {
        let (store, t) = i % 3 == 0 ? (a, refunded) : (b, old)
        group.addTask {
          // Both users in both orders: the store locks rows in one canonical order.
          let batch = [
            UserPurchases(user: Fixture.user("x"), transactions: [t, renewal]),
            UserPurchases(user: Fixture.user("y"), transactions: [t]),
          ]
          _ = try await store.ingest(i % 2 == 0 ? batch : batch.reversed(), atMs: Fixture.now)
        }
      }
      try await group.waitForAll()
    }
    for user in ["x", "y"] {
      let h = try await b.history(of: Fixture.user(user))
      #expect(h.transactions.first { $0.transactionId == "1" }?.revocationDate == 150, "\(user)")
    }
    #expect(try await a.history(of: Fixture.user("x")).transactions.count == 2)
    let db = try PGConnection(conninfo: url)
    #expect(try db.first("SELECT count(*) FROM users")?.int(0) == 2)
  }

  /// Rule 13 across instances: renewal-info snapshots of one subscription (Apple's whole current
  /// renewal info: present, or absent and so removed) written at once through two instances end
  /// as the newest on Apple's clock, whichever order their commits take.
  @Test func concurrentRenewalInfoSnapshotsThroughTwoInstancesEndAsTheNewestOnApplesClock() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    defer {
      a.close()
      b.close()
    }
    try await Fixture.seed(a)
    let user = Fixture.user("x")
    _ = try await a.ingest(
      [UserPurchases(user: user, transactions: [Fixture.transaction("1", purchase: 100, expires: 200)])], atMs: Fixture.now)
    for round in 0..<4 {
      let base = 10_000 * Int64(round + 1)
      let writes = 24
      func present(_ k: Int) -> Bool { (k + round) % 2 == 0 }
      try await withThrowingTaskGroup(of: Void.self) { group in
        // Newest first on one instance, oldest first on the other: every interleaving is likely.
        for k in (0..<writes).reversed() {
          let signed = base + Int64(k)
          let update = UserPurchases(
            user: user,
            renewalInfos: present(k) ? [Fixture.renewal("1", signed: signed, retry: k % 3 == 0)] : [],
            renewalInfoSnapshot: RenewalInfoSnapshot(originalTransactionIds: ["1"], asOfDate: signed))
          let store = k % 2 == 0 ? a : b
          group.addTask { _ = try await store.ingest([update], atMs: Fixture.now) }
        }
        try await group.waitForAll()
      }
      let newest = writes - 1
      for store in [a, b] {
        let infos = try await store.history(of: user).renewalInfos
        if present(newest) {
          #expect(infos.map(\.signedDate) == [base + Int64(newest)], "round \(round)")
          #expect(infos.first?.isInBillingRetryPeriod == (newest % 3 == 0), "round \(round)")
        } else {
          #expect(infos.isEmpty, "round \(round): \(infos.map(\.signedDate))")
        }
      }
    }
  }

  /// Purchase sharing KEEP_FIRST across instances: many users of two instances submit the same
  /// original transaction at once; the advisory lock per original transaction lets exactly one
  /// keep it, and every other submission is refused and stores none of it.
  @Test func concurrentFirstSubmissionsUnderKeepFirstHaveExactlyOneWinner() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    defer {
      a.close()
      b.close()
    }
    try await Fixture.seed(a)
    _ = try await a.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .keepFirst))
    let users = (0..<16).map { "u\($0)" }
    for round in 0..<6 {
      let original = "r\(round)"
      let refusals = try await withThrowingTaskGroup(of: Int.self) { group in
        for (n, user) in users.enumerated() {
          group.addTask {
            let store = n % 2 == 0 ? a : b
            return try await store.ingest([
              UserPurchases(
                user: Fixture.user(user), transactions: [Fixture.transaction(original, purchase: 100, expires: 200)],
                submittedMs: 1_000 + Int64(n))
            ], atMs: Fixture.now).refused.count
          }
        }
        return try await group.reduce(0, +)
      }
      #expect(refusals == users.count - 1, "round \(round)")
      let owners = try await b.users(appId: "a1", environment: .production, originalTransactionId: original)
      #expect(owners.count == 1, "round \(round): \(owners)")
      for user in users where !owners.contains(user) {
        #expect(
          try await a.history(of: Fixture.user(user)).transactions.allSatisfy { $0.originalTransactionId != original },
          "\(user)")
      }
    }
  }

  @Test func secretsAreSealedAndReadableByEveryInstanceWithTheKey() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    let keyless = try open(url, keyring: nil)
    let otherKey = try open(
      url, keyring: MasterKeyring(current: try MasterKey(bytes: [UInt8](repeating: 7, count: 32))))
    defer { for s in [a, b, keyless, otherKey] { s.close() } }
    try await Fixture.seed(a)
    let secret = "0123456789abcdef-not-in-the-database"
    let fingerprint = try await a.setSharedSecret(
      appId: "a1", secret: secret, atMs: 10, previousValidUntilMs: 20)
    #expect(try await b.sharedSecrets(appId: "a1")?.current.secret == secret)
    #expect(try await b.app(id: "a1").sharedSecretFingerprint == fingerprint)
    await expectStoreError(.secretUnavailable) { try await keyless.sharedSecrets(appId: "a1") }
    await expectStoreError(.secretUnavailable) { try await otherKey.sharedSecrets(appId: "a1") }
    let db = try PGConnection(conninfo: url)
    let box = try #require(try db.first("SELECT current_box FROM shared_secrets")).bytes(0)
    #expect(!String(decoding: box, as: UTF8.self).contains("not-in-the-database"))
  }

  @Test func afterAKeyRotationResealingLetsTheOldKeyGo() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let oldKey = try MasterKey(bytes: [UInt8](repeating: 1, count: 32))
    let newKey = try MasterKey(bytes: [UInt8](repeating: 2, count: 32))
    let before = try open(url, keyring: MasterKeyring(current: oldKey))
    try await Fixture.seed(before)
    _ = try await before.setSharedSecret(appId: "a1", secret: "first", atMs: 1, previousValidUntilMs: 5)
    _ = try await before.setSharedSecret(appId: "a1", secret: "second", atMs: 2, previousValidUntilMs: 9)
    before.close()
    let rotating = try open(url, keyring: MasterKeyring(current: newKey, previous: [oldKey]))
    #expect(try await rotating.resealSecrets() == 2)
    #expect(try await rotating.resealSecrets() == 0)
    rotating.close()
    let after = try open(url, keyring: MasterKeyring(current: newKey))
    defer { after.close() }
    let secrets = try await after.sharedSecrets(appId: "a1")
    #expect(secrets?.current.secret == "second" && secrets?.previous?.secret == "first")
  }

  @Test func userIdsWithQuotesBackslashesCommasAndBracesReadBackInOneBatch() async throws {
    try await withPostgresStore { store in
      try await Fixture.seed(store)
      let ids = [#"a"b"#, #"c\d"#, "e,f", "{g}", "NULL", " h ", "ü🙂"]
      for (i, id) in ids.enumerated() {
        _ = try await store.ingest([
          UserPurchases(
            user: Fixture.user(id), transactions: [Fixture.transaction("t\(i)", purchase: 1)])
        ], atMs: Fixture.now)
      }
      let histories = try await store.histories(
        appId: "a1", environment: .production, userIds: ids.reversed() + ["nobody"])
      #expect(histories.map(\.user.userId) == ids.reversed() + ["nobody"])
      #expect(
        histories.map { $0.transactions.map(\.transactionId) }
          == ids.indices.reversed().map { ["t\($0)"] } + [[]])
    }
  }

  @Test func historyReadsProbeTheUserIndexEvenWithAGenericPlan() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let store = try open(url)
    defer { store.close() }
    try await Fixture.seed(store)
    _ = try await store.ingest(
      (0..<300).map { i in
        UserPurchases(
          user: Fixture.user("u\(i)"),
          transactions: [Fixture.transaction("t\(i)", purchase: 10, expires: 20)])
      }, atMs: Fixture.now)
    // A prepared statement's generic plan (what the pool's statements get after five runs): the
    // user must be found by an index probe, not by filtering all the app's users.
    let db = try PGConnection(conninfo: url)
    try db.execute("SET plan_cache_mode = force_generic_plan")
    try db.execute("PREPARE h(text, text, text[]) AS \(PostgresQueries.histories)")
    let plan = try db.query(
      "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE h('a1', '\(Fixture.user("u7").environment.rawValue)', '{u7}')"
    ).map { $0.text(0) }
    #expect(!plan.contains { $0.contains("Rows Removed by Filter") }, "\(plan.joined(separator: "\n"))")
    #expect(plan.contains { $0.contains("users_app_id_environment_user_id_key") }, "\(plan)")
    let history = try await store.history(of: Fixture.user("u7"))
    #expect(history.transactions.map(\.transactionId) == ["t7"])
  }

  @Test func statementsDoNotWaitBehindQueuedTransactions() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let store = try open(url, poolSize: 2)
    defer { store.close() }
    // Five slow transactions: one general connection, so they run one after the other.
    final class Count: Sendable { let value = Atomic<Int>(0) }
    let done = Count()
    let begin = ContinuousClock.now
    let slow = Task {
      try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<5 {
          group.addTask {
            try await store.pool.transaction { db throws(StoreError) in
              try db.execute("SELECT pg_sleep(0.4)")
            }
            done.value.add(1, ordering: .relaxed)
          }
        }
        try await group.waitForAll()
      }
    }
    try await Task.sleep(for: .milliseconds(100))
    // A read meanwhile is served by the connection reserved for single statements: at most the
    // transaction running when it was asked for ends meanwhile (in arrival order it would wait
    // for every transaction queued before it).
    let before = done.value.load(ordering: .relaxed)
    let one = try await store.pool.run { db throws(StoreError) in try db.first("SELECT 1")?.int(0) }
    let after = done.value.load(ordering: .relaxed)
    #expect(one == 1)
    #expect(after - before <= 1, "\(after - before) transactions ended while the read waited")
    try await slow.value
    #expect(begin.duration(to: .now) > .milliseconds(1900), "the transactions ran one at a time")
  }

  @Test func libpqRunsOnThePoolThreadsNeverOnTheCallers() async throws {
    try await withPostgresStore { store in
      let names = try await withThrowingTaskGroup(of: String.self) { group in
        for _ in 0..<8 {
          group.addTask {
            try await store.pool.run { _ in
              (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            }
          }
        }
        return try await group.reduce(into: Set<String>()) { $0.insert($1) }
      }
      #expect(!names.isEmpty && names.allSatisfy { $0.hasPrefix("pg-pool-") }, "\(names)")
    }
  }

  @Test func aLostSessionIsReportedOnceThenReconnected() async throws {
    let server = try await blocking { try PostgresServer.fast.get() }
    let url = try await blocking { try server.createDatabase() }
    let store = try open(url, poolSize: 1)
    defer { store.close() }
    try await store.createTenant(Fixture.tenant("t1"))
    let name = String(url.split(separator: "/").last!)
    try server.admin(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(name)'")
    do {
      _ = try await store.tenant(id: "t1")  // may fail: the session was killed under it
    } catch {
      #expect(error.code == .unavailable, "\(error)")
    }
    #expect(try await store.tenant(id: "t1").tenantId == "t1")
  }
}
