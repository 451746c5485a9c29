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
      try await WebhookContract.run(test, try #require(store as? WebhookContract.FullStore))
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
    #expect(plan.contains { $0.contains("webhook_deliveries_listing") }, "\(plan)")
    #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "no sort: the scan stops at the limit \(plan)")
    #expect(plan.contains { $0.contains("webhook_deliveries_heads") }, "\(plan)")
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
