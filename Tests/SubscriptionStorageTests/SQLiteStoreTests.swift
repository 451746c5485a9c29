import Foundation
import SubscriptionDomain
import SubscriptionStorage
import StoreContractTesting
import Synchronization
import Testing

@testable import SubscriptionStorageSQLite

@Suite("SQLite store")
struct SQLiteStoreTests {
  private func open(
    _ dir: TemporaryDirectory, keyring: MasterKeyring? = testKeyring, historyCacheBytes: Int = 32 << 20
  ) throws -> SQLiteStore {
    try SQLiteStore(
      configuration: .init(
        path: dir.file("store.sqlite"), keyring: keyring, readerCount: 2, historyCacheBytes: historyCacheBytes))
  }

  @Test("data survives close and reopen; the schema version is recorded")
  func reopen() async throws {
    let dir = TemporaryDirectory()
    do {
      let store = try open(dir)
      try await Fixture.seed(store)
      _ = try await store.ingest([
        UserPurchases(
          user: Fixture.user("u1"), transactions: [Fixture.transaction("1", purchase: 1)])
      ], atMs: Fixture.now)
      store.close()
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(store.schemaVersion == Schema.latestVersion)
    #expect(try await store.app(id: "a1").bundleId == "com.example.a1")
    #expect(
      try await store.history(of: Fixture.user("u1")).transactions.map(\.transactionId) == ["1"])
    #expect(try await store.integrityCheck() == ["ok"])
  }

  @Test("the data-directory configuration puts substatus.sqlite in the directory")
  func dataDirectory() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .dataDirectory(dir.path, keyring: testKeyring))
    try await store.createTenant(Fixture.tenant())
    store.close()
    #expect(FileManager.default.fileExists(atPath: dir.file("substatus.sqlite")))
  }

  @Test("WAL mode, synchronous=FULL and a busy timeout are in effect")
  func pragmas() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    let values = try await store.readers.read { db throws(StoreError) in
      [
        try db.first("PRAGMA journal_mode") { $0.text(0) } ?? "",
        String(try db.first("PRAGMA synchronous") { $0.int(0) } ?? -1),
        String(try db.first("PRAGMA busy_timeout") { $0.int(0) } ?? -1),
      ]
    }
    #expect(values == ["wal", "2", "10000"])  // synchronous 2 = FULL
  }

  @Test("a database from a newer substatus is refused with a clear error")
  func newerSchema() async throws {
    let dir = TemporaryDirectory()
    do {
      let store = try open(dir)
      store.close()
    }
    do {
      let raw = try SQLiteConnection(path: dir.file("store.sqlite"), readOnly: false, create: false)
      try raw.run(
        "INSERT INTO schema_version(version, description, applied_ms) VALUES(?, 'from the future', 0)",
        [.int(Int64(Schema.latestVersion + 1))])
    }
    #expect {
      try open(dir)
    } throws: { error in
      guard let e = error as? StoreError else { return false }
      return e.code == .newerSchema && e.message.contains("newer")
    }
  }

  @Test("a database at schema version 1 is migrated to the latest version, data kept")
  func migratesOldDatabase() async throws {
    let dir = TemporaryDirectory()
    do {
      let raw = try SQLiteConnection(path: dir.file("store.sqlite"), readOnly: false, create: true)
      #expect(try Schema.migrate(raw, now: 0, through: 1) == 1)
      try raw.run(
        "INSERT INTO tenants(tenant_id, name, disabled, created_ms) VALUES('t1', 'old', 0, 5)")
      raw.close()
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(store.schemaVersion == Schema.latestVersion)
    #expect(try await store.tenant(id: "t1").name == "old")
    let versions = try await store.readers.read { db throws(StoreError) in
      try db.all("SELECT version FROM schema_version ORDER BY version") { $0.int(0) }
    }
    #expect(versions == Schema.migrations.map { Int64($0.version) })
  }

  @Test("a catalog stored before win-back offers existed reads back with none, no migration needed")
  func catalogWithoutWinBackOffers() async throws {
    let dir = TemporaryDirectory()
    do {
      let store = try open(dir)
      try await Fixture.seed(store)
      store.close()
    }
    do {
      // The JSON payload an earlier substatus wrote: no `winBackOfferIds` key.
      let old = #"{"productId":"monthly","type":"AUTO_RENEWABLE","subscriptionGroupId":"g1","hasIntroductoryOffer":true,"promotionalOfferIds":["promo1"]}"#
      let raw = try SQLiteConnection(path: dir.file("store.sqlite"), readOnly: false, create: false)
      try raw.run(
        "INSERT INTO products(app_id, product_id, payload) VALUES('a1', 'monthly', ?)",
        [.blob(Array(old.utf8))])
      raw.close()
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(
      try await store.products(appId: "a1") == [
        Product(
          productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1",
          hasIntroductoryOffer: true, promotionalOfferIds: ["promo1"])
      ])
  }

  @Test("reads and writes run on the store's own threads; per-user history reads on the caller's")
  func ownThreads() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    let readerName = try await store.readers.read { _ throws(StoreError) in currentThreadName() }
    let writerName = try await store.writer.write { _ throws(StoreError) in currentThreadName() }
    #expect(readerName.hasPrefix("sqlite-reader-"))
    #expect(writerName == "sqlite-writer")
    #expect(currentThreadName() != readerName)
    // The hot path's reads borrow a connection and run right here.
    let caller = currentThreadName()
    let inline = try store.inlineReaders.read { _ throws(StoreError) in currentThreadName() }
    #expect(inline == caller)
  }

  @Test("with every inline connection lent out, reads go to the reader threads with the same answers")
  func inlineFallback() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1, inlineReaderCount: 1))
    defer { store.close() }
    try await Fixture.seed(store)
    _ = try await store.ingest([
      UserPurchases(
        user: Fixture.user("u1"), transactions: [Fixture.transaction("1", purchase: 1)],
        renewalInfos: [Fixture.renewal("1")])
    ], atMs: Fixture.now)
    // The only inline connection is busy: a nested borrower is told to go elsewhere.
    let nested = try store.inlineReaders.read { _ throws(StoreError) in
      try store.inlineReaders.read { _ throws(StoreError) in "ran" }
    }
    #expect(nested == .some(nil))
    let viaThreads = try await store.readers.read { _ throws(StoreError) in currentThreadName() }
    #expect(viaThreads.hasPrefix("sqlite-reader-"))
    // Inline and without inline connections, the same history.
    let inline = try await store.history(of: Fixture.user("u1"))
    let noInline = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1, inlineReaderCount: 0))
    defer { noInline.close() }
    #expect(try await noInline.history(of: Fixture.user("u1")) == inline)
    #expect(inline.transactions.map(\.transactionId) == ["1"])
    #expect(inline.renewalInfos.map(\.originalTransactionId) == ["1"])
  }

  @Test("tasks reading in a loop on the shared pool leave writers their turn")
  func inlineReadersDoNotStarveWriters() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    _ = try await store.ingest([UserPurchases(user: Fixture.user("r"), transactions: [Fixture.transaction("r1", purchase: 1)])], atMs: Fixture.now)
    // Readers run until the writer has made its 5 writes (or 60 s have passed); starved, the writer
    // got its next turn only when the readers stopped.
    final class Flag: Sendable { let raised = Atomic<Bool>(false) }
    let writerDone = Flag()
    let deadline = ContinuousClock.now + .seconds(60)
    let started = ContinuousClock.now
    let writerTime = try await withThrowingTaskGroup(of: Duration?.self) { group in
      // More tight readers than the pool has threads: inline reads never suspend by themselves.
      for _ in 0..<(2 * ProcessInfo.processInfo.activeProcessorCount + 2) {
        group.addTask {
          while !writerDone.raised.load(ordering: .relaxed) && ContinuousClock.now < deadline {
            _ = try await store.history(of: Fixture.user("r"))
          }
          return nil
        }
      }
      group.addTask {
        for n in 0..<5 {
          _ = try await store.ingest([
            UserPurchases(user: Fixture.user("w\(n)"), transactions: [Fixture.transaction("w\(n)", purchase: 1)])
          ], atMs: Fixture.now)
        }
        writerDone.raised.store(true, ordering: .relaxed)
        return started.duration(to: .now)
      }
      var writerTime: Duration?
      for try await result in group { if let result { writerTime = result } }
      return writerTime
    }
    let elapsed = try #require(writerTime)
    #expect(elapsed < .seconds(45), "5 writes beside the readers took \(elapsed)")
  }

  @Test("the user key cache: keys of users read are kept, bounded; absent users are not cached")
  func userKeyCache() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1, userKeyCacheCapacity: 4))
    defer { store.close() }
    try await Fixture.seed(store)
    // Read while absent: empty, and not remembered as absent.
    #expect(try await store.history(of: Fixture.user("late")).transactions.isEmpty)
    #expect(store.userKeys.count == 0)
    _ = try await store.ingest([
      UserPurchases(user: Fixture.user("late"), transactions: [Fixture.transaction("L", purchase: 5)])
    ], atMs: Fixture.now)
    #expect(try await store.history(of: Fixture.user("late")).transactions.map(\.transactionId) == ["L"])
    #expect(store.userKeys.count == 1)
    // Cached or not, the same answer; the cache never holds more than its capacity.
    for n in 0..<10 {
      let user = Fixture.user("u\(n)")
      _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("t\(n)", purchase: Int64(n))])], atMs: Fixture.now)
      #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t\(n)"])
      #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t\(n)"])
      #expect(store.userKeys.count <= 4)
    }
    // A user in the other environment or app is another user.
    #expect(try await store.history(of: Fixture.user("u9", environment: .sandbox)).transactions.isEmpty)
  }

  @Test("history comes in purchase order whatever the transaction ids' order")
  func historyInPurchaseOrder() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    // Rows come in id order (a, m1, m2, z); purchases: z first, then m1 and m2 at the same time
    // (then in id order), then a.
    _ = try await store.ingest([
      UserPurchases(
        user: Fixture.user("u1"),
        transactions: [
          Fixture.transaction("a", purchase: 30), Fixture.transaction("z", purchase: 10),
          Fixture.transaction("m2", purchase: 20), Fixture.transaction("m1", purchase: 20),
        ])
    ], atMs: Fixture.now)
    #expect(try await store.history(of: Fixture.user("u1")).transactions.map(\.transactionId) == ["z", "m1", "m2", "a"])
  }


  @Test("touchApiKey writes at most once a minute per key")
  func touchThrottle() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    let key = Fixture.key("k1")
    try await store.createApiKey(key)
    let before = store.groupCommitStatistics.writes
    try await store.touchApiKey(keyId: "k1", atMs: 100_000)
    try await store.touchApiKey(keyId: "k1", atMs: 130_000)
    #expect(store.groupCommitStatistics.writes == before + 1)
    #expect(try await store.apiKey(hash: key.keyHash)?.lastUsedMs == 100_000)
    try await store.touchApiKey(keyId: "k1", atMs: 160_001)
    #expect(try await store.apiKey(hash: key.keyHash)?.lastUsedMs == 160_001)
  }

  @Test(
    "SQLite result codes map to store error codes",
    arguments: [
      (Int32(19), StoreError.Code.alreadyExists), (11, .corrupt), (26, .corrupt),
      (13, .unavailable),
      (10, .unavailable), (5, .unavailable), (14, .unavailable), (1, .internalError),
      (13 | (1 << 8), .unavailable),
    ])
  func errorMapping(code: Int32, expected: StoreError.Code) {
    #expect(SQLiteConnection.error(code: code, message: "m").code == expected)
  }

  @Test("a file that is not a database is reported as corrupt")
  func notADatabase() throws {
    let dir = TemporaryDirectory()
    try Data(repeating: 0x5a, count: 8192).write(to: URL(fileURLWithPath: dir.file("store.sqlite")))
    #expect {
      try open(dir)
    } throws: { error in
      (error as? StoreError)?.code == .corrupt
    }
  }

  @Test("shared secrets are encrypted at rest and need the right master key")
  func secretsAtRest() async throws {
    let dir = TemporaryDirectory()
    let secret = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    do {
      let store = try open(dir)
      try await Fixture.seed(store)
      _ = try await store.setSharedSecret(
        appId: "a1", secret: secret, atMs: 1, previousValidUntilMs: 0)
      store.close()
    }
    // Nothing in the file (or its WAL) holds the plaintext.
    for name in try FileManager.default.contentsOfDirectory(atPath: dir.path) {
      let bytes = try Data(contentsOf: URL(fileURLWithPath: dir.file(name)))
      #expect(bytes.range(of: Data(secret.utf8)) == nil, "plaintext secret found in \(name)")
    }
    // Another master key: a clear error, never garbage.
    let wrong = try open(dir, keyring: MasterKeyring(current: .generate()))
    await expectStoreError(.secretUnavailable) { try await wrong.sharedSecrets(appId: "a1") }
    wrong.close()
    // Without a master key: secrets can be neither set nor read.
    let none = try open(dir, keyring: nil)
    await expectStoreError(.secretUnavailable) { try await none.sharedSecrets(appId: "a1") }
    await expectStoreError(.secretUnavailable) {
      try await none.setSharedSecret(appId: "a1", secret: "x", atMs: 2, previousValidUntilMs: 0)
    }
    none.close()
  }

  @Test("master key rotation: old key still opens, reseal moves every secret to the new key")
  func masterKeyRotation() async throws {
    let dir = TemporaryDirectory()
    let oldKey = MasterKey.generate()
    let newKey = MasterKey.generate()
    do {
      let store = try open(dir, keyring: MasterKeyring(current: oldKey))
      try await Fixture.seed(store)
      _ = try await store.setSharedSecret(
        appId: "a1", secret: "one", atMs: 1, previousValidUntilMs: 0)
      _ = try await store.setSharedSecret(
        appId: "a1", secret: "two", atMs: 2, previousValidUntilMs: 50)
      store.close()
    }
    do {
      let store = try open(dir, keyring: MasterKeyring(current: newKey, previous: [oldKey]))
      #expect(try await store.sharedSecrets(appId: "a1")?.current.secret == "two")
      #expect(try await store.resealSecrets() == 2)
      #expect(try await store.resealSecrets() == 0)
      store.close()
    }
    let store = try open(dir, keyring: MasterKeyring(current: newKey))
    defer { store.close() }
    let secrets = try #require(try await store.sharedSecrets(appId: "a1"))
    #expect(secrets.current.secret == "two")
    #expect(secrets.previous?.secret == "one")
  }

  @Test(
    "every hot read is an index lookup (EXPLAIN QUERY PLAN has no full scan)",
    arguments: HotQueries.all)
  func queryPlans(sql: String) async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    let plan = try await store.queryPlan(sql)
    #expect(!plan.isEmpty)
    for line in plan {
      #expect(!line.hasPrefix("SCAN"), "full scan in plan of \(sql): \(plan)")
    }
    #expect(plan.contains { $0.hasPrefix("SEARCH") })
  }

  @Test(
    "notification routing reads the transactions of one original id first, then their users by key")
  func routingPlanStartsFromTheOriginalTransaction() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    let plan = try await store.queryPlan(HotQueries.usersByOriginalTransaction)
    // The outer loop must be the index on original_transaction_id: starting from the users of the
    // app would probe every one of them (the plan is all SEARCH either way).
    #expect(
      plan.first?.hasPrefix("SEARCH t USING COVERING INDEX transactions_by_original") == true,
      "\(plan)")
    #expect(plan.contains { $0.hasPrefix("SEARCH u USING INTEGER PRIMARY KEY") }, "\(plan)")
  }

  @Test("concurrent writes are grouped into fewer commits, each acknowledged")
  func groupCommit() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    let before = store.groupCommitStatistics
    try await withThrowingTaskGroup(of: Void.self) { group in
      for i in 0..<200 {
        group.addTask {
          _ = try await store.ingest([
            UserPurchases(
              user: Fixture.user("u\(i)"), transactions: [Fixture.transaction("t\(i)", purchase: 1)]
            )
          ], atMs: Fixture.now)
        }
      }
      try await group.waitForAll()
    }
    let after = store.groupCommitStatistics
    #expect(after.writes - before.writes == 200)
    #expect(after.commits - before.commits < 200)
    let users = try await collectPages(size: 1000) {
      try await store.listUsers(appId: "a1", environment: .production, page: $0)
    }
    #expect(users.joined().count == 200)
  }

  @Test("a failing write in a group rolls back alone; its neighbours commit")
  func failureIsolation() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    try await withThrowingTaskGroup(of: Void.self) { group in
      for i in 0..<50 {
        group.addTask {
          if i % 5 == 0 {
            await expectStoreError(.notFound) {
              try await store.ingest([
                UserPurchases(
                  user: Fixture.user("ok\(i)"),
                  transactions: [Fixture.transaction("x\(i)", purchase: 1)]),
                UserPurchases(
                  user: Fixture.user("bad\(i)", app: "nope"),
                  transactions: [Fixture.transaction("y\(i)", purchase: 1)]),
              ], atMs: Fixture.now)
            }
          } else {
            _ = try await store.ingest([
              UserPurchases(
                user: Fixture.user("ok\(i)"),
                transactions: [Fixture.transaction("x\(i)", purchase: 1)])
            ], atMs: Fixture.now)
          }
        }
      }
      try await group.waitForAll()
    }
    for i in 0..<50 {
      let count = try await store.history(of: Fixture.user("ok\(i)")).transactions.count
      #expect(count == (i % 5 == 0 ? 0 : 1), "user ok\(i)")
    }
  }

  @Test("two stores on one file, writing and reading under load: no SQLITE_BUSY reaches a caller")
  func contention() async throws {
    let dir = TemporaryDirectory()
    // Two stores on one file must turn the history cache off: neither sees the other's writes
    // (substatusd runs one store per data directory).
    let first = try open(dir, historyCacheBytes: 0)
    let second = try open(dir, historyCacheBytes: 0)
    defer {
      first.close()
      second.close()
    }
    try await Fixture.seed(first)
    let stores = [first, second]
    try await withThrowingTaskGroup(of: Void.self) { group in
      for w in 0..<6 {
        group.addTask {
          let store = stores[w % 2]
          for i in 0..<60 {
            _ = try await store.ingest([
              UserPurchases(
                user: Fixture.user("w\(w)"),
                transactions: (0..<5).map {
                  Fixture.transaction("w\(w)-\(i)-\($0)", purchase: Int64(i * 5 + $0))
                })
            ], atMs: Fixture.now)
          }
        }
      }
      for r in 0..<6 {
        group.addTask {
          let store = stores[(r + 1) % 2]
          for _ in 0..<150 {
            let h = try await store.history(of: Fixture.user("w\(r)"))
            #expect(h.transactions.count % 5 == 0, "a reader saw half of an ingest")
          }
        }
      }
      try await group.waitForAll()
    }
    for w in 0..<6 {
      #expect(try await second.history(of: Fixture.user("w\(w)")).transactions.count == 300)
    }
    #expect(try await first.integrityCheck() == ["ok"])
  }

  @Test("reads racing with writes never leave a stale app or catalog in the cache")
  func cacheRaces() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    for round in 0..<40 {
      let policy = EligibilityPolicy(refundsBlockIntro: round % 2 == 0)
      let product = Product(productId: "p", type: .consumable, promotionalOfferIds: ["r\(round)"])
      try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<4 {
          group.addTask {
            _ = try await store.app(id: "a1")
            _ = try await store.products(appId: "a1")
          }
        }
        group.addTask {
          _ = try await store.setPolicy(appId: "a1", policy: policy)
          try await store.putProducts(appId: "a1", products: [product])
        }
        try await group.waitForAll()
      }
      #expect(try await store.app(id: "a1").policy == policy, "round \(round)")
      #expect(try await store.products(appId: "a1") == [product], "round \(round)")
    }
  }

  @Test("a full database fails writes with unavailable, keeps serving reads, and recovers")
  func diskFull() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    _ = try await store.ingest([
      UserPurchases(
        user: Fixture.user("u0"), transactions: [Fixture.transaction("kept", purchase: 1)])
    ], atMs: Fixture.now)
    // max_page_count makes SQLite answer SQLITE_FULL exactly as a full disk does.
    let pages = try await store.writer.write { db throws(StoreError) in
      try db.first("PRAGMA page_count") { $0.int(0) } ?? 0
    }
    try await store.writer.write { db throws(StoreError) in
      try db.execute("PRAGMA max_page_count=\(pages + 2)")
    }
    let big = (0..<400).map { Fixture.transaction("big-\($0)", purchase: Int64($0)) }
    do {
      _ = try await store.ingest([UserPurchases(user: Fixture.user("u1"), transactions: big)], atMs: Fixture.now)
      Issue.record("an ingest larger than the free space succeeded")
    } catch {
      #expect(error.code == .unavailable, "\(error)")
      #expect(error.message.contains("full"), "\(error)")
    }
    #expect(try await store.history(of: Fixture.user("u1")).transactions.isEmpty)
    #expect(
      try await store.history(of: Fixture.user("u0")).transactions.map(\.transactionId) == ["kept"])
    try await store.writer.write { db throws(StoreError) in
      try db.execute("PRAGMA max_page_count=1073741823")
    }
    _ = try await store.ingest([UserPurchases(user: Fixture.user("u1"), transactions: big)], atMs: Fixture.now)
    #expect(try await store.history(of: Fixture.user("u1")).transactions.count == 400)
    #expect(try await store.integrityCheck() == ["ok"])
  }

  @Test("a store released without close() stops its threads without hanging; the file reopens")
  func releasedWithoutClose() async throws {
    let dir = TemporaryDirectory()
    do {
      let store = try open(dir)
      try await Fixture.seed(store)
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(try await store.app(id: "a1").tenantId == "t1")
  }

  @Test("after close, calls fail with unavailable instead of hanging")
  func closed() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    store.close()
    await expectStoreError(.unavailable) { try await store.tenant(id: "t1") }
    await expectStoreError(.unavailable) { try await store.createTenant(Fixture.tenant()) }
  }
}

@Suite("Payload codec")
struct PayloadCodecTests {
  private func roundTrip(_ t: Transaction) throws -> Transaction {
    try PayloadCodec.decodeTransaction(
      PayloadCodec.encode(t), transactionId: t.transactionId,
      originalTransactionId: t.originalTransactionId, purchaseDate: t.purchaseDate)
  }

  @Test("the well-known string table has no duplicates and covers the domain's raw values")
  func wellKnownTable() {
    #expect(Set(WellKnownStrings.table).count == WellKnownStrings.table.count)
    for value in Environment.allCases.map(\.rawValue) + OwnershipType.allCases.map(\.rawValue) {
      #expect(WellKnownStrings.index[value] != nil, "\(value)")
    }
    #expect(WellKnownStrings.table.count < 126)  // one-byte varint tags
  }

  @Test("the binary layouts cover every stored property of the domain types")
  func fieldCounts() {
    #expect(
      Mirror(reflecting: Transaction(transactionId: "1", productId: "p", purchaseDate: 0)).children
        .count
        == PayloadCodec.transactionFieldCount)
    #expect(
      Mirror(reflecting: RenewalInfo(originalTransactionId: "1", productId: "p")).children.count
        == PayloadCodec.renewalInfoFieldCount)
  }

  @Test("a transaction with every field set round-trips")
  func transactionRoundTrip() throws {
    var t = Transaction(
      transactionId: "2000000123", originalTransactionId: "1000000001", productId: "com.x.monthly",
      subscriptionGroupIdentifier: "g1", purchaseDate: 1_700_000_000_000,
      originalPurchaseDate: 1_600_000_000_000,
      expiresDate: 1_702_592_000_000, isTrialPeriod: true, isInIntroOfferPeriod: true,
      offerIdentifier: "promo", revocationDate: -5, isUpgraded: true, environment: .sandbox,
      webOrderLineItemId: "w1", quantity: 3, bundleId: "com.x", appAccountToken: "tok",
      signedDate: Int64.max, asOfDate: 1_700_000_000_001, notificationType: "REFUND", price: 9_990,
      currency: "EUR", appTransactionId: "704289572311810221")
    t.rawOfferType = 2
    t.rawOfferDiscountType = "FREE_TRIAL"
    t.rawRevocationReason = 1
    t.rawRevocationType = "FAMILY_REVOKED"
    t.rawInAppOwnershipType = "FAMILY_SHARED"
    t.rawType = "Auto-Renewable Subscription"
    #expect(try roundTrip(t) == t)
    let minimal = Transaction(transactionId: "é✓", productId: "", purchaseDate: Int64.min)
    #expect(try roundTrip(minimal) == minimal)
    // Strings outside the well-known table are kept literally.
    var unusual = t
    unusual.rawEnvironment = "Xcode"
    unusual.rawType = "Something New"
    unusual.notificationType = "ONE_TIME_CHARGE"
    #expect(try roundTrip(unusual) == unusual)
  }

  @Test("rule 22: a commitment's plan and infos round-trip; format 3 payloads read without them")
  func billingPlans() throws {
    var t = Fixture.transaction("1", purchase: 10, expires: 20, signed: 15)
    t.price = 8_990
    t.currency = "USD"
    // The bytes format 3 wrote: format 4's without the three absence bytes at the end
    // (appTransactionId, the plan, the commitment).
    let formatThree = [3] + PayloadCodec.encode(t).dropFirst().dropLast(3)
    #expect(
      try PayloadCodec.decodeTransaction(
        Array(formatThree), transactionId: "1", originalTransactionId: "1", purchaseDate: 10) == t)
    t.billingPlanType = .monthly
    t.commitment = TransactionCommitmentInfo(
      billingPeriodNumber: 3, totalBillingPeriods: 12, commitmentExpiresDate: 1_800_000_000_000, commitmentPrice: 107_880)
    #expect(try roundTrip(t) == t)
    t.rawBillingPlanType = "QUARTERLY"  // a value this build does not know is kept as given
    t.commitment = TransactionCommitmentInfo(billingPeriodNumber: 1)
    #expect(try roundTrip(t) == t)

    var r = Fixture.renewal("1", signed: 7, retry: false)
    let renewalFormatTwo = [2] + PayloadCodec.encode(r).dropFirst().dropLast(4)
    #expect(try PayloadCodec.decodeRenewalInfo(Array(renewalFormatTwo), originalTransactionId: "1") == r)
    r.renewalBillingPlanType = .monthly
    r.commitment = RenewalCommitmentInfo(
      commitmentAutoRenewProductId: "pro.yearly", rawCommitmentAutoRenewStatus: 0,
      rawCommitmentRenewalBillingPlanType: "BILLED_UPFRONT", commitmentRenewalDate: 1_800_000_000_000,
      commitmentRenewalPrice: 99_990)
    #expect(try PayloadCodec.decodeRenewalInfo(PayloadCodec.encode(r), originalTransactionId: "1") == r)
  }

  @Test("a renewal info with every field set round-trips")
  func renewalRoundTrip() throws {
    var r = RenewalInfo(
      originalTransactionId: "1", productId: "p", autoRenewProductId: "q", autoRenewStatus: .off,
      isInBillingRetryPeriod: true, gracePeriodExpiresDate: 99, offerIdentifier: "o",
      environment: .production, renewalDate: 5, recentSubscriptionStartDate: 4,
      eligibleWinBackOfferIds: ["w1", "w2"], signedDate: 7, asOfDate: 8, appTransactionId: "704289572311810221")
    r.rawExpirationIntent = 2
    r.rawPriceConsentStatus = 1
    r.rawOfferType = 3
    r.appAccountToken = "7e3fb20b-4cdb-47cc-936d-99d65f608138"
    #expect(
      try PayloadCodec.decodeRenewalInfo(PayloadCodec.encode(r), originalTransactionId: "1") == r)
  }

  @Test("payloads of format 1 (before asOfDate) are still read, their asOfDate unknown")
  func formatOne() throws {
    // Format 1 is format 2 without the trailing asOfDate (here absent: one presence byte); a
    // transaction's format 2 is format 3 without price and currency (absent: two presence bytes),
    // format 3 is format 4 without appTransactionId, the billing plan and the commitment (absent:
    // three more presence bytes); a renewal info's format 2 is format 3 without the same three,
    // format 3 is format 4 without appAccountToken (one more).
    func formatOne(_ bytes: [UInt8], trailing: Int) -> [UInt8] { [1] + bytes.dropFirst().dropLast(trailing) }
    let t = Fixture.transaction("1", purchase: 10, expires: 20, signed: 15, revoked: 12)
    #expect(
      try PayloadCodec.decodeTransaction(
        formatOne(PayloadCodec.encode(t), trailing: 6), transactionId: "1", originalTransactionId: "1",
        purchaseDate: 10) == t)
    let r = Fixture.renewal("1", signed: 7, retry: true)
    #expect(
      try PayloadCodec.decodeRenewalInfo(formatOne(PayloadCodec.encode(r), trailing: 5), originalTransactionId: "1") == r)
    // A format-1 payload with a trailing byte is corrupt, as before.
    #expect(throws: StoreError.self) {
      try PayloadCodec.decodeRenewalInfo([1] + PayloadCodec.encode(r).dropFirst(), originalTransactionId: "1")
    }
  }

  @Test("transactions of format 2 (written before price and currency) are still read, both unknown")
  func formatTwo() throws {
    // The bytes the previous release wrote for this transaction (format 2, ending with asOfDate).
    var t = Fixture.transaction("1", purchase: 10, expires: 20, signed: 15)
    t.asOfDate = 14
    let formatTwo: [UInt8] =
      [2, 7] + Array("monthly".utf8) + [1, 2] + Array("g1".utf8)
      + [0, 1, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 0, 0, 1, 30, 0, 1, 28]
    #expect(PayloadCodec.encode(t) == [4] + formatTwo.dropFirst() + [0, 0, 0, 0, 0])
    let decoded = try PayloadCodec.decodeTransaction(
      formatTwo, transactionId: "1", originalTransactionId: "1", purchaseDate: 10)
    #expect(decoded == t)
    #expect(decoded.price == nil && decoded.currency == nil && decoded.asOfDate == 14)
    // The same fields with a price are written as format 4 and read back with it.
    t.price = 0
    t.currency = "JPY"
    #expect(
      try PayloadCodec.decodeTransaction(
        PayloadCodec.encode(t), transactionId: "1", originalTransactionId: "1", purchaseDate: 10) == t)
    // A format-2 payload carrying price bytes is corrupt (trailing bytes), as any unknown layout.
    #expect(throws: StoreError.self) {
      try PayloadCodec.decodeTransaction(
        [2] + PayloadCodec.encode(t).dropFirst(), transactionId: "1", originalTransactionId: "1", purchaseDate: 10)
    }
  }

  @Test("payloads written before appTransactionId (transaction format 3, renewal info format 2) read it as unknown")
  func beforeAppTransactionId() throws {
    var t = Fixture.transaction("1", purchase: 10, expires: 20, signed: 15)
    t.price = 990
    t.currency = "EUR"
    var withAccount = t
    withAccount.appTransactionId = "704289572311810221"
    // The previous release's bytes: today's without the trailing appTransactionId, billing plan and
    // commitment (absent: one byte each).
    let formatThree = [3] + PayloadCodec.encode(t).dropFirst().dropLast(3)
    let decoded = try PayloadCodec.decodeTransaction(formatThree, transactionId: "1", originalTransactionId: "1", purchaseDate: 10)
    #expect(decoded == t && decoded.appTransactionId == nil)
    #expect(
      try PayloadCodec.decodeTransaction(
        PayloadCodec.encode(withAccount), transactionId: "1", originalTransactionId: "1", purchaseDate: 10) == withAccount)
    // A format-3 payload carrying an appTransactionId is corrupt (trailing bytes).
    #expect(throws: StoreError.self) {
      try PayloadCodec.decodeTransaction(
        [3] + PayloadCodec.encode(withAccount).dropFirst(), transactionId: "1", originalTransactionId: "1", purchaseDate: 10)
    }
    var r = Fixture.renewal("1", signed: 7, retry: true)
    r.asOfDate = 3
    let renewalFormatTwo = [2] + PayloadCodec.encode(r).dropFirst().dropLast(4)
    #expect(try PayloadCodec.decodeRenewalInfo(renewalFormatTwo, originalTransactionId: "1") == r)
    r.appTransactionId = "704289572311810221"
    #expect(try PayloadCodec.decodeRenewalInfo(PayloadCodec.encode(r), originalTransactionId: "1") == r)
  }

  @Test("renewal infos written before appAccountToken (format 3) read it as unknown; format 4 keeps it")
  func renewalBeforeAppAccountToken() throws {
    var r = Fixture.renewal("1", signed: 7, retry: false)
    r.appTransactionId = "704289572311810221"
    // The previous release's bytes: today's without the trailing appAccountToken (absent: one byte).
    let formatThree = [3] + PayloadCodec.encode(r).dropFirst().dropLast(1)
    let decoded = try PayloadCodec.decodeRenewalInfo(formatThree, originalTransactionId: "1")
    #expect(decoded == r && decoded.appAccountToken == nil)
    r.appAccountToken = "7e3fb20b-4cdb-47cc-936d-99d65f608138"
    #expect(try PayloadCodec.decodeRenewalInfo(PayloadCodec.encode(r), originalTransactionId: "1") == r)
    // A format-3 payload carrying a token is corrupt (trailing bytes).
    #expect(throws: StoreError.self) {
      try PayloadCodec.decodeRenewalInfo([3] + PayloadCodec.encode(r).dropFirst(), originalTransactionId: "1")
    }
  }

  @Test("truncated or foreign bytes are corrupt, never a crash")
  func truncated() {
    let bytes = PayloadCodec.encode(Fixture.transaction("123456", purchase: 42, expires: 99))
    for n in 0..<bytes.count {
      #expect(throws: StoreError.self) {
        try PayloadCodec.decodeTransaction(
          Array(bytes.prefix(n)), transactionId: "1", originalTransactionId: "1", purchaseDate: 0)
      }
    }
    #expect(throws: StoreError.self) {
      try PayloadCodec.decodeTransaction(
        bytes + [0], transactionId: "1", originalTransactionId: "1", purchaseDate: 0)
    }
    #expect(throws: StoreError.self) {
      try PayloadCodec.decodeRenewalInfo([9, 1, 2], originalTransactionId: "1")
    }
  }
}
