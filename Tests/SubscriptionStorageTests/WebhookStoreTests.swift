import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// The webhook part of the contract (``WebhookContract``) against the in-memory and SQLite stores,
/// and what only SQLite shows: the signing secret sealed in its row, re-sealed after a rotation.
@Suite("Webhook store")
struct WebhookStoreTests {
  @Test(arguments: StoreKind.allCases, WebhookContract.Case.allCases)
  func contract(kind: StoreKind, test: WebhookContract.Case) async throws {
    try await withStore(kind) { store in
      try await WebhookContract.run(test, store)
    }
  }

  static let secret = "whsec_" + String(repeating: "c3", count: 32)

  @Test func theSigningSecretIsSealedAtRestAndNeedsTheMasterKey() async throws {
    let dir = TemporaryDirectory()
    let path = dir.file("store.sqlite")
    let store = try SQLiteStore(configuration: .init(path: path, keyring: testKeyring, readerCount: 1))
    try await Fixture.seed(store)
    let webhook = WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1)
    try await store.createWebhook(webhook, signingSecret: Self.secret)
    #expect(try await store.webhookSigningSecret(webhookId: "w1") == Self.secret)
    store.close()
    let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
    let wal = (try? Data(contentsOf: URL(fileURLWithPath: path + "-wal"))) ?? Data()
    #expect(bytes.range(of: Data(Self.secret.utf8)) == nil)
    #expect(wal.range(of: Data(Self.secret.utf8)) == nil)

    let keyless = try SQLiteStore(configuration: .init(path: path, keyring: nil, readerCount: 1))
    defer { keyless.close() }
    #expect(try await keyless.webhooks(appId: "a1").map(\.secretFingerprint) == [SecretFingerprint.of(Self.secret)])
    await expectStoreError(.secretUnavailable) { try await keyless.webhookSigningSecret(webhookId: "w1") }
    await expectStoreError(.secretUnavailable) {
      try await keyless.createWebhook(
        WebhookRecord(webhookId: "w2", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
        signingSecret: Self.secret)
    }
  }

  @Test("a restarted store's dispatcher takes back at once what the killed one had claimed, not retries in backoff")
  func restartReleasesTheEarlierRunsClaims() async throws {
    let dir = TemporaryDirectory()
    let path = dir.file("store.sqlite")
    let killed = try SQLiteStore(configuration: .init(path: path, keyring: testKeyring, readerCount: 1))
    try await Fixture.seed(killed)
    try await killed.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    _ = try await WebhookContract.addEvents(killed, users: ["u1", "u2", "u3"])
    _ = try await killed.enqueueDeliveries(atMs: 1, limit: 100)
    let claimed = try await killed.claimDueDeliveries(
      atMs: 1, limit: 10, leaseUntilMs: 120_001, perWebhookLimit: 10, excludingWebhookIds: [], claimant: "run-1")
    #expect(claimed.count == 3)
    // u2's was attempted and waits for its retry (a backoff, not a claim); u3's was delivered.
    try await killed.recordDeliveryAttempt(
      deliveryId: claimed[1].deliveryId,
      attempt: DeliveryAttemptRecord(attemptedMs: 2, httpStatus: 500, error: "HTTP 500", durationMs: 1), state: .pending,
      nextAttemptMs: 60_000)
    try await killed.recordDeliveryAttempt(
      deliveryId: claimed[2].deliveryId,
      attempt: DeliveryAttemptRecord(attemptedMs: 2, httpStatus: 204, error: nil, durationMs: 1), state: .delivered,
      nextAttemptMs: nil)
    killed.close()  // SIGKILL: u1's claim is never recorded

    let restarted = try SQLiteStore(configuration: .init(path: path, keyring: testKeyring, readerCount: 1))
    defer { restarted.close() }
    let before = try await restarted.claimDueDeliveries(
      atMs: 3, limit: 10, leaseUntilMs: 120_003, perWebhookLimit: 10, excludingWebhookIds: [], claimant: "run-2")
    #expect(before.isEmpty, "leased until the lease ends")
    #expect(try await restarted.releaseClaims(notMadeBy: "run-2", atMs: 3) == 1)
    let again = try await restarted.claimDueDeliveries(
      atMs: 3, limit: 10, leaseUntilMs: 120_003, perWebhookLimit: 10, excludingWebhookIds: [], claimant: "run-2")
    #expect(again.map(\.deliveryId) == [claimed[0].deliveryId])
    #expect(try await restarted.releaseClaims(notMadeBy: "run-2", atMs: 4) == 0, "the running dispatcher's claims stay")
    let retry = try #require(try await WebhookContract.allDeliveries(restarted, "w1").first { $0.deliveryId == claimed[1].deliveryId })
    #expect(retry.nextAttemptMs == 60_000, "the retry keeps its backoff")
  }

  @Test func resealingAfterARotationCoversSigningSecrets() async throws {
    let dir = TemporaryDirectory()
    let path = dir.file("store.sqlite")
    let oldKey = try MasterKey(bytes: [UInt8](repeating: 3, count: 32))
    let newKey = try MasterKey(bytes: [UInt8](repeating: 4, count: 32))
    let before = try SQLiteStore(configuration: .init(path: path, keyring: MasterKeyring(current: oldKey), readerCount: 1))
    try await Fixture.seed(before)
    try await before.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    before.close()
    let rotating = try SQLiteStore(
      configuration: .init(path: path, keyring: MasterKeyring(current: newKey, previous: [oldKey]), readerCount: 1))
    #expect(try await rotating.resealSecrets() == 1)
    #expect(try await rotating.resealSecrets() == 0)
    rotating.close()
    let after = try SQLiteStore(configuration: .init(path: path, keyring: MasterKeyring(current: newKey), readerCount: 1))
    defer { after.close() }
    #expect(try await after.webhookSigningSecret(webhookId: "w1") == Self.secret)
  }

  @Test func aDeliveryWrittenWithItsEventAsJSONIsStillClaimedAndRead() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    let events = try await WebhookContract.addEvents(store, users: ["u1", "u2"])
    #expect(try await store.enqueueDeliveries(atMs: 1, limit: 10) == 2)
    // The first delivery as an earlier build wrote it: the event as Foundation JSON.
    let json = Array(try JSONEncoder().encode(events[0].event))
    try await store.writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE webhook_deliveries SET event = ? WHERE sequence = ?", [.blob(json), .int(events[0].sequence)])
    }
    let claimed = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(claimed.map(\.event) == events)
    // An attempts array with blanks is still empty.
    #expect(try WebhookRowCoding.decodeAttempts(Array(" [ ] ".utf8)).isEmpty)
  }

  /// Claims and attempt records commit without the fsync (synchronous=NORMAL for their group),
  /// every other write with it, and the setting is back to FULL after each relaxed commit.
  @Test func bookkeepingWritesCommitWithoutTheFsyncAndOthersWithIt() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    // PRAGMA synchronous inside a write: 1 is NORMAL, 2 is FULL.
    let relaxed = try await store.writer.write(durable: false) { db throws(StoreError) in
      try db.first("PRAGMA synchronous", []) { $0.int(0) }
    }
    #expect(relaxed == 1)
    let durable = try await store.writer.write { db throws(StoreError) in try db.first("PRAGMA synchronous", []) { $0.int(0) } }
    #expect(durable == 2, "restored after the relaxed commit")
    // A group with one durable write among relaxed ones is fsynced.
    let mixed = try await withThrowingTaskGroup(of: Int64?.self) { group in
      for n in 0..<8 {
        group.addTask {
          try await store.writer.write(durable: n != 3) { db throws(StoreError) in
            try db.first("PRAGMA synchronous", []) { $0.int(0) }
          }
        }
      }
      return try await group.reduce(into: [Int64?]()) { $0.append($1) }
    }
    #expect(mixed.count == 8)
    #expect(mixed.contains(2), "the durable write's group is fsynced")
  }

  @Test func theClaimUsesTheIndexes() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    let plan = try await store.queryPlan(
      WebhookQueries.claimHeads.replacingOccurrences(of: "?1", with: "'w1'").replacingOccurrences(of: "?2", with: "0")
        .replacingOccurrences(of: "?3", with: "4"))
    #expect(plan.contains { $0.contains("USING INDEX webhook_deliveries_ready (webhook_id=? AND next_attempt_ms<?)") }, "\(plan)")
    #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "no sort: the scan stops at the limit \(plan)")
    let promote = try await store.queryPlan(WebhookQueries.promoteHeads.replacingOccurrences(of: "?1", with: "'[1]'"))
    #expect(promote.contains { $0.contains("USING INDEX webhook_deliveries_heads (webhook_id=? AND environment=? AND user_id=?)") }, "\(promote)")
    #expect(!promote.contains { $0.contains("SCAN webhook_deliveries") }, "\(promote)")
  }

  /// The heads (the one pending delivery per webhook and user a claim may take) stay one per user
  /// through inserts, claims, records, retries and replays, and a claim passes no other row: with
  /// many deliveries waiting behind leased heads, a claim finds the one due head.
  @Test func oneHeadPerUserThroughRecordsRetriesAndReplays() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    let events = try await WebhookContract.addEvents(store, users: ["u1", "u2", "u1", "u2", "u1"])
    #expect(try await store.enqueueDeliveries(atMs: 1, limit: 10) == 5)
    func heads() async throws -> [String: Int64] {
      try await store.writer.write { db throws(StoreError) in
        try db.all(
          "SELECT user_id, COUNT(*) FROM webhook_deliveries WHERE state = 'PENDING' AND head = 1 GROUP BY user_id", []
        ) { ($0.text(0), $0.int(1)) }
      }.reduce(into: [String: Int64]()) { $0[$1.0] = $1.1 }
    }
    #expect(try await heads() == ["u1": 1, "u2": 1])
    let first = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(first.map(\.event) == [events[0], events[1]])
    // A replay while both heads are in flight adds deliveries behind them, not heads.
    #expect(try await store.replay(appId: "a1", webhookId: "w1", afterSequence: 0, atMs: 2) == 5)
    #expect(try await heads() == ["u1": 1, "u2": 1])
    #expect(try await store.claimDueDeliveries(atMs: 3, limit: 10, leaseUntilMs: 100).isEmpty)
    // u1's head delivered and u2's retried, in one batch: u1's next is the head, u2 keeps its own.
    let missing = try await store.recordDeliveryAttempts([
      DeliveryOutcome(deliveryId: first[0].deliveryId, attempt: Self.attempt(4, 204), state: .delivered, nextAttemptMs: nil),
      DeliveryOutcome(deliveryId: first[1].deliveryId, attempt: Self.attempt(4, 500), state: .pending, nextAttemptMs: 50),
    ])
    #expect(missing.isEmpty)
    #expect(try await heads() == ["u1": 1, "u2": 1])
    // u1's oldest pending is now the replayed copy of its first event (older than its second).
    let next = try await store.claimDueDeliveries(atMs: 5, limit: 10, leaseUntilMs: 100)
    #expect(next.map(\.event) == [events[0]], "u1's replayed first; u2 waits for its retry")
    #expect(next.map(\.attempts) == [[]])
    // u2's head fails for good: u2's next becomes the head, due at once.
    _ = try await store.recordDeliveryAttempts([
      DeliveryOutcome(deliveryId: first[1].deliveryId, attempt: Self.attempt(6, 500), state: .failed, nextAttemptMs: nil)
    ])
    #expect(try await store.claimDueDeliveries(atMs: 6, limit: 10, leaseUntilMs: 100).map(\.event) == [events[1]])
    #expect(try await heads() == ["u1": 1, "u2": 1])
  }

  /// A replay's page of deliveries is one statement: with nothing pending, each user's first
  /// delivery of the page (per environment: a sandbox user and a production user of one id are
  /// two users) is the head and the rest wait behind it; claims then go in log order per user.
  @Test func aReplayPageMakesOneHeadPerUserItsFirstDelivery() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    try await Fixture.seed(store)
    let production = try await WebhookContract.addEvents(store, users: ["u1", "u2", "u1", "u1", "u2"])
    let sandbox = try await WebhookContract.addEvents(store, users: ["u1", "u1"], environment: .sandbox)
    // Created after the events: only the replay makes deliveries.
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    #expect(try await store.replay(appId: "a1", webhookId: "w1", afterSequence: 0, atMs: 2) == 7)
    let heads = try await store.writer.write { db throws(StoreError) in
      try db.all(
        "SELECT environment, user_id, sequence FROM webhook_deliveries WHERE state = 'PENDING' AND head = 1 ORDER BY sequence",
        []
      ) { "\($0.text(0))/\($0.text(1))@\($0.int(2))" }
    }
    #expect(
      heads == [
        "Production/u1@\(production[0].sequence)", "Production/u2@\(production[1].sequence)",
        "Sandbox/u1@\(sandbox[0].sequence)",
      ], "\(heads)")
    var order: [Int64] = []
    for t in 3..<20 {
      let claimed = try await store.claimDueDeliveries(atMs: Int64(t), limit: 10, leaseUntilMs: 1_000)
      if claimed.isEmpty { break }
      order += claimed.map(\.event.sequence)
      _ = try await store.recordDeliveryAttempts(
        claimed.map {
          DeliveryOutcome(deliveryId: $0.deliveryId, attempt: Self.attempt(Int64(t), 204), state: .delivered, nextAttemptMs: nil)
        })
    }
    #expect(order.sorted() == (production + sandbox).map(\.sequence).sorted(), "every delivery once")
    for events in [production.filter { $0.event.userId.hasSuffix("u1") }, production.filter { $0.event.userId.hasSuffix("u2") }, sandbox] {
      let sequences = events.map(\.sequence)
      #expect(order.filter(sequences.contains) == sequences, "one user's deliveries in log order")
    }
  }

  /// A schema-15 database (deliveries with their own copy of the event, no heads) opened by this
  /// build: its pending deliveries get one head per user (the oldest), and are claimed in order.
  @Test func aVersion15DatabaseGetsItsHeadsOnMigration() async throws {
    let dir = TemporaryDirectory()
    let path = dir.file("store.sqlite")
    let old = try SQLiteStore(configuration: .init(path: path, keyring: testKeyring, readerCount: 1))
    try await Fixture.seed(old)
    try await old.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    let events = try await WebhookContract.addEvents(old, users: ["u1", "u2", "u1"])
    #expect(try await old.enqueueDeliveries(atMs: 1, limit: 10) == 3)
    // Back to what schema 15 held: the event copied into the row, no head column, the old indexes
    // (and none of the later migrations' tables and columns).
    try await old.writer.write { db throws(StoreError) in
      try db.execute(
        """
        UPDATE webhook_deliveries SET event = (SELECT payload FROM events e WHERE e.sequence = webhook_deliveries.sequence);
        DROP INDEX webhook_deliveries_ready;
        DROP INDEX webhook_deliveries_by_webhook;
        DROP INDEX webhook_deliveries_failed;
        ALTER TABLE webhook_deliveries DROP COLUMN head;
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_ms) WHERE state = 'PENDING';
        CREATE INDEX webhook_deliveries_listing ON webhook_deliveries(webhook_id, state, delivery_key);
        DROP TABLE app_accounts;
        DROP TABLE kept_notifications;
        ALTER TABLE apps DROP COLUMN small_business_program;
        DROP TABLE retention_rules;
        DROP TABLE consumption_requests;
        DROP TABLE app_account_token_writes;
        DELETE FROM schema_version WHERE version >= 16;
        """)
    }
    old.close()
    let store = try SQLiteStore(configuration: .init(path: path, keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    let claimed = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(claimed.map(\.event) == [events[0], events[1]])
    _ = try await store.recordDeliveryAttempts(
      claimed.map { DeliveryOutcome(deliveryId: $0.deliveryId, attempt: Self.attempt(2, 204), state: .delivered, nextAttemptMs: nil) })
    #expect(try await store.claimDueDeliveries(atMs: 3, limit: 10, leaseUntilMs: 100).map(\.event) == [events[2]])
  }

  /// A batch of records is one savepoint of the writer: when its second statement (the users'
  /// next heads) fails, the first one's attempts and states are rolled back with it, so the
  /// deliveries are still leased heads with no attempt, nothing behind them became claimable, and
  /// the same batch recorded again (the dispatcher's retry after the lease) is recorded once.
  @Test func aRecordBatchThatFailsHalfwayLeavesNothingOfIt() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    let events = try await WebhookContract.addEvents(store, users: ["u1", "u2", "u3", "u1", "u2", "u3"])
    #expect(try await store.enqueueDeliveries(atMs: 1, limit: 10) == 6)
    let heads = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(heads.map(\.event) == Array(events.prefix(3)))
    // On the writer's connection only: making any row a head fails, which only the second
    // statement of a batch of deliveries that all ended does.
    try await store.writer.write { db throws(StoreError) in
      try db.execute(
        """
        CREATE TEMP TRIGGER fail_promotion BEFORE UPDATE OF head ON webhook_deliveries WHEN NEW.head = 1 AND OLD.head = 0
        BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
        """)
    }
    let outcomes = heads.map {
      DeliveryOutcome(deliveryId: $0.deliveryId, attempt: Self.attempt(2, 204), state: .delivered, nextAttemptMs: nil)
    }
    await #expect(throws: StoreError.self) { try await store.recordDeliveryAttempts(outcomes) }
    let listed = try await WebhookContract.allDeliveries(store, "w1")
    #expect(listed.count == 6)
    #expect(listed.allSatisfy { $0.state == .pending && $0.attempts.isEmpty }, "\(listed)")
    #expect(try await store.claimDueDeliveries(atMs: 50, limit: 10, leaseUntilMs: 200).isEmpty, "still leased, nothing behind them due")
    try await store.writer.write { db throws(StoreError) in try db.execute("DROP TRIGGER fail_promotion") }
    #expect(try await store.recordDeliveryAttempts(outcomes).isEmpty)
    let recorded = Dictionary(uniqueKeysWithValues: try await WebhookContract.allDeliveries(store, "w1").map { ($0.deliveryId, $0) })
    #expect(heads.allSatisfy { recorded[$0.deliveryId]?.attempts == [Self.attempt(2, 204)] })
    #expect(try await store.claimDueDeliveries(atMs: 50, limit: 10, leaseUntilMs: 200).map(\.event) == Array(events.suffix(3)))
  }

  /// A batch that names one delivery twice (a retry and then its success) keeps both attempts,
  /// in order, and ends delivered, its user's next delivery the head.
  @Test func aBatchNamingADeliveryTwiceKeepsBothAttemptsInOrder() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: Self.secret)
    let events = try await WebhookContract.addEvents(store, users: ["u1", "u1"])
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 10)
    let head = try #require(try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100).first)
    #expect(
      try await store.recordDeliveryAttempts([
        DeliveryOutcome(deliveryId: head.deliveryId, attempt: Self.attempt(2, 500), state: .pending, nextAttemptMs: 3),
        DeliveryOutcome(deliveryId: head.deliveryId, attempt: Self.attempt(4, 204), state: .delivered, nextAttemptMs: nil),
      ]).isEmpty)
    let listed = try await WebhookContract.allDeliveries(store, "w1")
    #expect(listed.first { $0.deliveryId == head.deliveryId }?.attempts == [Self.attempt(2, 500), Self.attempt(4, 204)])
    #expect(listed.first { $0.deliveryId == head.deliveryId }?.state == .delivered)
    #expect(try await store.claimDueDeliveries(atMs: 5, limit: 10, leaseUntilMs: 100).map(\.event) == [events[1]])
  }

  static func attempt(_ ms: Int64, _ status: Int) -> DeliveryAttemptRecord {
    DeliveryAttemptRecord(attemptedMs: ms, httpStatus: status, error: status == 204 ? nil : "HTTP \(status)", durationMs: 1)
  }
}

/// ``FairClaim``: the tenants take turns in a claim, whatever their backlogs.
@Suite struct FairClaimTests {
  static func c(_ tenant: String, _ webhook: String, _ sequence: Int64) -> FairClaim.Candidate {
    FairClaim.Candidate(tenantId: tenant, webhookId: webhook, sequence: sequence, key: sequence)
  }

  @Test(arguments: [
    // (limit, per webhook, per tenant, the sequences picked in order)
    (4, 100, 100, [Int64(1), 10, 20, 2]),
    (3, 100, 100, [1, 10, 20]),
    (100, 100, 2, [1, 10, 20, 2, 11]),
    (100, 1, 100, [1, 10, 20, 3]),
    (2, 100, 100, [1, 10]),
  ])
  func tenantsInTurnThenLogOrder(limit: Int, perWebhook: Int, perTenant: Int, expected: [Int64]) {
    // Tenant a: a long, old backlog over two webhooks; b: two later events; c: one, latest.
    let candidates = [
      Self.c("a", "w1", 1), Self.c("a", "w1", 2), Self.c("a", "w2", 3), Self.c("a", "w1", 4), Self.c("a", "w2", 5),
      Self.c("b", "w3", 10), Self.c("b", "w3", 11), Self.c("c", "w4", 20),
    ].shuffled()
    let picked = FairClaim.pick(candidates, limit: limit, perWebhook: perWebhook, perTenant: perTenant)
    #expect(picked.map(\.sequence) == expected)
  }
}
