import Foundation
import SubscriptionDomain
import SubscriptionStorage
@testable import SubscriptionStorageSQLite
import Testing

@Suite("SQLite store")
struct SQLiteStoreTests {
  private func open(_ dir: TemporaryDirectory, keyring: MasterKeyring? = testKeyring) throws -> SQLiteStore {
    try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: keyring, readerCount: 2))
  }

  @Test("data survives close and reopen; the schema version is recorded")
  func reopen() async throws {
    let dir = TemporaryDirectory()
    do {
      let store = try open(dir)
      try await Fixture.seed(store)
      _ = try await store.ingest([
        UserPurchases(user: Fixture.user("u1"), transactions: [Fixture.transaction("1", purchase: 1)])
      ])
      store.close()
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(store.schemaVersion == Schema.latestVersion)
    #expect(try await store.app(id: "a1").bundleId == "com.example.a1")
    #expect(try await store.history(of: Fixture.user("u1")).transactions.map(\.transactionId) == ["1"])
    #expect(try await store.integrityCheck() == ["ok"])
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
      _ = try await store.setSharedSecret(appId: "a1", secret: secret, atMs: 1, previousValidUntilMs: 0)
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
      _ = try await store.setSharedSecret(appId: "a1", secret: "one", atMs: 1, previousValidUntilMs: 0)
      _ = try await store.setSharedSecret(appId: "a1", secret: "two", atMs: 2, previousValidUntilMs: 50)
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

  @Test("every hot read is an index lookup (EXPLAIN QUERY PLAN has no full scan)", arguments: HotQueries.all)
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
            UserPurchases(user: Fixture.user("u\(i)"), transactions: [Fixture.transaction("t\(i)", purchase: 1)])
          ])
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
                UserPurchases(user: Fixture.user("ok\(i)"), transactions: [Fixture.transaction("x\(i)", purchase: 1)]),
                UserPurchases(user: Fixture.user("bad\(i)", app: "nope"), transactions: [Fixture.transaction("y\(i)", purchase: 1)]),
              ])
            }
          } else {
            _ = try await store.ingest([
              UserPurchases(user: Fixture.user("ok\(i)"), transactions: [Fixture.transaction("x\(i)", purchase: 1)])
            ])
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
  @Test("the binary layouts cover every stored property of the domain types")
  func fieldCounts() {
    #expect(
      Mirror(reflecting: Transaction(transactionId: "1", productId: "p", purchaseDate: 0)).children.count
        == PayloadCodec.transactionFieldCount)
    #expect(
      Mirror(reflecting: RenewalInfo(originalTransactionId: "1", productId: "p")).children.count
        == PayloadCodec.renewalInfoFieldCount)
  }

  @Test("a transaction with every field set round-trips")
  func transactionRoundTrip() throws {
    var t = Transaction(
      transactionId: "2000000123", originalTransactionId: "1000000001", productId: "com.x.monthly",
      subscriptionGroupIdentifier: "g1", purchaseDate: 1_700_000_000_000, originalPurchaseDate: 1_600_000_000_000,
      expiresDate: 1_702_592_000_000, isTrialPeriod: true, isInIntroOfferPeriod: true,
      offerIdentifier: "promo", revocationDate: -5, isUpgraded: true, environment: .sandbox,
      webOrderLineItemId: "w1", quantity: 3, bundleId: "com.x", appAccountToken: "tok",
      signedDate: Int64.max, notificationType: "REFUND")
    t.rawOfferType = 2
    t.rawOfferDiscountType = "FREE_TRIAL"
    t.rawRevocationReason = 1
    t.rawRevocationType = "FAMILY_REVOKED"
    t.rawInAppOwnershipType = "FAMILY_SHARED"
    t.rawType = "Auto-Renewable Subscription"
    #expect(try PayloadCodec.decodeTransaction(PayloadCodec.encode(t)) == t)
    let minimal = Transaction(transactionId: "é✓", productId: "", purchaseDate: Int64.min)
    #expect(try PayloadCodec.decodeTransaction(PayloadCodec.encode(minimal)) == minimal)
  }

  @Test("a renewal info with every field set round-trips")
  func renewalRoundTrip() throws {
    var r = RenewalInfo(
      originalTransactionId: "1", productId: "p", autoRenewProductId: "q", autoRenewStatus: .off,
      isInBillingRetryPeriod: true, gracePeriodExpiresDate: 99, offerIdentifier: "o",
      environment: .production, renewalDate: 5, recentSubscriptionStartDate: 4,
      eligibleWinBackOfferIds: ["w1", "w2"], signedDate: 7)
    r.rawExpirationIntent = 2
    r.rawPriceConsentStatus = 1
    r.rawOfferType = 3
    #expect(try PayloadCodec.decodeRenewalInfo(PayloadCodec.encode(r)) == r)
  }

  @Test("truncated or foreign bytes are corrupt, never a crash")
  func truncated() {
    let bytes = PayloadCodec.encode(Fixture.transaction("123456", purchase: 42, expires: 99))
    for n in 0..<bytes.count {
      #expect(throws: StoreError.self) { try PayloadCodec.decodeTransaction(Array(bytes.prefix(n))) }
    }
    #expect(throws: StoreError.self) { try PayloadCodec.decodeRenewalInfo([9, 1, 2]) }
  }
}
