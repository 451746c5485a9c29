import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import Testing

@testable import SubscriptionStorageSQLite

/// The SQLite event log beyond the contract: restarts, query plans, the payload layout.
@Suite("SQLite event log")
struct SQLiteEventLogTests {
  private func open(_ dir: TemporaryDirectory) throws -> SQLiteStore {
    try SQLiteStore(configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 2))
  }

  /// Users whose periods end at different instants, auto-renewal off, ingested at 2,000.
  private static func seedUsers(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.putProducts(
      appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")])
    for n in 0..<6 {
      let t = Fixture.transaction("t\(n)", purchase: 1_000, expires: 10_000 * Int64(n + 1), signed: 1_000)
      let off = RenewalInfo(
        originalTransactionId: "t\(n)", productId: "monthly", autoRenewStatus: .off, environment: .production,
        signedDate: 1_000)
      _ = try await store.ingest(
        [UserPurchases(user: Fixture.user("u\(n)"), transactions: [t], renewalInfos: [off])], atMs: 2_000)
    }
  }

  /// The scheduler resumes from the store: runs at many instants, with the process restarted in
  /// between, log exactly the events one run at the end logs (nothing missed or doubled), each
  /// detected by the first run at or after it was due.
  @Test func transitionsResumeAfterARestartWithNothingMissedOrDoubled() async throws {
    let dir = TemporaryDirectory()
    var store = try open(dir)
    try await Self.seedUsers(store)
    var appended: [LoggedEvent] = []
    for (n, at) in [Int64(15_000), 15_000, 35_000, 35_001, 60_000, 90_000].enumerated() {
      appended += try await store.appendDueTransitionEvents(atMs: at, limit: 10)
      if n % 2 == 1 {
        store.close()
        store = try open(dir)
      }
    }
    defer { store.close() }
    #expect(try await store.nextTransitionDueMs() == nil)

    let once = InMemoryStore()
    try await Self.seedUsers(once)
    let reference = try await once.appendDueTransitionEvents(atMs: 90_000, limit: 100)
    #expect(reference.count == 6)
    #expect(Set(appended.map(\.event.eventId)) == Set(reference.map(\.event.eventId)))
    #expect(appended.count == reference.count)
    // Each was detected by the first run at or after it was due.
    for e in appended.map(\.event) {
      let runs: [Int64] = [15_000, 35_000, 60_000, 90_000]
      #expect(e.detectedMs == runs.first { $0 >= e.occurredMs }, "\(e.userId)")
    }
    let logged = try await EventLogContract.readAll(store, query: EventQuery(types: [.expired]))
    #expect(logged == appended)
  }

  @Test(
    "the event log's statements are index lookups (EXPLAIN QUERY PLAN has no full scan)",
    arguments: EventQueries.all + [
      SQLiteStore.eventsStatement(appId: "a1", query: EventQuery(userId: "u1"), afterSequence: 0, limit: 10).sql,
      SQLiteStore.eventsStatement(
        appId: "a1", query: EventQuery(types: [.expired], environment: .production, occurredFromMs: 1),
        afterSequence: 0, limit: 10
      ).sql,
    ])
  func queryPlans(sql: String) async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    let plan = try await store.queryPlan(sql)
    #expect(!plan.isEmpty)
    for line in plan {
      #expect(!line.hasPrefix("SCAN"), "full scan in plan of \(sql): \(plan)")
    }
  }

  @Test("a user's events are found by probing the user's keys, not by walking the app's users")
  func userFilterProbesTheUserIndex() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    let sql = SQLiteStore.eventsStatement(appId: "a1", query: EventQuery(userId: "u1"), afterSequence: 0, limit: 10).sql
    let plan = try await store.queryPlan(sql)
    #expect(plan.contains { $0.contains("users") && $0.contains("(app_id=? AND environment=? AND user_id=?)") }, "\(plan)")
    #expect(plan.contains { $0.contains("events_by_user") }, "\(plan)")
  }

  @Test("the event payload layout covers every stored property of SubscriptionEvent")
  func payloadCoversEveryField() {
    let e = SubscriptionEvent(
      eventId: "e", appId: "a", userId: "u", environment: .production, type: .renewed, occurredMs: 1,
      detectedMs: 2)
    #expect(Mirror(reflecting: e).children.count == PayloadCodec.eventFieldCount)
  }

  @Test("an event payload this build cannot read is reported corrupt, not guessed")
  func corruptPayloads() throws {
    var bytes = PayloadCodec.encode(EventLogContract.event("e1"))
    #expect(try PayloadCodec.decodeEvent(bytes) == EventLogContract.event("e1"))
    bytes[0] = 99
    #expect(throws: StoreError.self) { try PayloadCodec.decodeEvent(bytes) }
    #expect(throws: StoreError.self) { try PayloadCodec.decodeEvent(Array(PayloadCodec.encode(EventLogContract.event("e1")).dropLast())) }
  }

  @Test("the ownership type round-trips; a format 1 payload (before events carried it) still reads, without one")
  func ownershipTypeAndFormatOnePayloads() throws {
    var shared = EventLogContract.event("e1")
    shared.ownershipType = .familyShared
    #expect(try PayloadCodec.decodeEvent(PayloadCodec.encode(shared)) == shared)
    // Each format is the next without its added fields, each absent one a 0 byte: format 7 adds
    // the refund request's answer (3: consumption body, detail, request reason), 6 the retention
    // answer (1), 5 the commitment (3), 4 the notification type and subtype (2), 3 the billing
    // plan, 2 the ownership type.
    var old = EventLogContract.event("e1")
    old.ownershipType = nil
    var bytes = Array(PayloadCodec.encode(old).dropLast(11))
    bytes[0] = 1
    #expect(try PayloadCodec.decodeEvent(bytes) == old)
    var formatTwo = Array(PayloadCodec.encode(shared).dropLast(10))
    formatTwo[0] = 2
    #expect(try PayloadCodec.decodeEvent(formatTwo) == shared)
    var formatThree = Array(PayloadCodec.encode(shared).dropLast(9))
    formatThree[0] = 3
    #expect(try PayloadCodec.decodeEvent(formatThree) == shared)
    var formatFour = Array(PayloadCodec.encode(shared).dropLast(7))
    formatFour[0] = 4
    #expect(try PayloadCodec.decodeEvent(formatFour) == shared)
    var formatFive = Array(PayloadCodec.encode(shared).dropLast(4))
    formatFive[0] = 5
    #expect(try PayloadCodec.decodeEvent(formatFive) == shared)
    var formatSix = Array(PayloadCodec.encode(shared).dropLast(3))
    formatSix[0] = 6
    #expect(try PayloadCodec.decodeEvent(formatSix) == shared)
  }

  @Test("rule 27: the consumption fields round-trip (format 7)")
  func consumptionFields() throws {
    var sent = EventLogContract.event("e1")
    sent.type = .consumptionInfoSent
    sent.consumptionBody = #"{"customerConsented":true}"#
    sent.consumptionDetail = "rejected: HTTP 400"
    sent.refundRequestReason = "UNINTENDED_PURCHASE"
    #expect(try PayloadCodec.decodeEvent(PayloadCodec.encode(sent)) == sent)
  }

  @Test("a retention answer round-trips (format 6), with and without a rule and an offered id")
  func retentionAnswer() throws {
    for record in [
      RetentionOfferRecord(kind: .promotionalOffer, ruleId: "loyal", messageIdentifier: "m-1", offeredId: "offer.a"),
      RetentionOfferRecord(kind: .defaultMessage, ruleId: nil, messageIdentifier: "m-0", offeredId: nil),
    ] {
      var e = EventLogContract.event("e1", type: .retentionOffered)
      e.retention = record
      #expect(try PayloadCodec.decodeEvent(PayloadCodec.encode(e)) == e)
    }
  }

  @Test("rule 22: an event's commitment round-trips")
  func commitment() throws {
    var e = EventLogContract.event("e1", type: .commitmentStarted)
    e.billingPlanType = .monthly
    e.commitment = CommitmentStatus(billingPeriodNumber: 1, totalBillingPeriods: 12, expiresDate: 1_800_000_000_000)
    #expect(try PayloadCodec.decodeEvent(PayloadCodec.encode(e)) == e)
  }

  @Test("rule 25: a notification's type and subtype round-trip")
  func notificationType() throws {
    var e = EventLogContract.event("e1", type: .appleNotification)
    e.notificationType = "EXTERNAL_PURCHASE_TOKEN"
    e.notificationSubtype = "CREATED"
    #expect(try PayloadCodec.decodeEvent(PayloadCodec.encode(e)) == e)
  }

  @Test("rule 22: the billing plan round-trips")
  func billingPlan() throws {
    var monthly = EventLogContract.event("e1")
    monthly.billingPlanType = .monthly
    #expect(try PayloadCodec.decodeEvent(PayloadCodec.encode(monthly)) == monthly)
  }

  /// A database at schema `version` with tenant t1, app a1 and its user u1 (key 1), written through
  /// the SQL of that version; open for the caller to add more.
  private static func olderDatabase(_ path: String, through version: Int) throws -> SQLiteConnection {
    let db = try SQLiteConnection(path: path, readOnly: false, create: true)
    _ = try Schema.migrate(db, now: 0, through: version)
    try db.execute("INSERT INTO tenants(tenant_id, name, created_ms) VALUES('t1', 't', 0)")
    try db.run(
      "INSERT INTO apps(app_id, tenant_id, bundle_id, display_name, policy, created_ms) VALUES('a1', 't1', 'b', '', ?, 0)",
      [.blob(try PayloadCodec.encodeJSON(EligibilityPolicy.default))])
    try db.execute("INSERT INTO users(user_key, app_id, environment, user_id) VALUES(1, 'a1', 'Production', 'u1')")
    return db
  }

  /// A database written before the event log (schema 8) migrates; its users' data stays, and the
  /// first write after it logs only what that write adds (the stored history was never logged and
  /// is not logged now).
  @Test func aDatabaseFromBeforeTheEventLogMigratesAndLogsOnlyNewWrites() async throws {
    let dir = TemporaryDirectory()
    let path = dir.file("store.sqlite")
    // Data written by the previous version: through the SQL it used (no event tables exist).
    do {
      let db = try Self.olderDatabase(path, through: 8)
      let t = Fixture.transaction("old", purchase: 1_000, expires: 2_000, signed: 1_000)
      try db.run(
        "INSERT INTO transactions(user_key, transaction_id, original_transaction_id, purchase_ms, signed_ms, payload) VALUES(1, ?, ?, ?, ?, ?)",
        [.text(t.transactionId), .text(t.originalTransactionId), .int(t.purchaseDate), .int(1_000), .blob(PayloadCodec.encode(t))])
      db.close()
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(store.schemaVersion == Schema.latestVersion)
    #expect(try await store.lastEventSequence() == 0)
    let renewal = Fixture.transaction("new", original: "old", purchase: 2_000, expires: 3_000, signed: 2_000)
    let summary = try await store.ingest([UserPurchases(user: Fixture.user("u1"), transactions: [renewal])], atMs: 2_500)
    let logged = try await EventLogContract.readAll(store)
    #expect(summary.eventsAppended == logged.count)
    #expect(logged.map(\.event.transactionId) == ["new"])
  }

  /// Version 12 rebuilt the log to deduplicate per user: a log written before keeps its events and
  /// their sequences, never reuses a number erasure freed (the AUTOINCREMENT high-water mark moves
  /// across the rebuild), keeps the trigger that erases the events' deliveries, and deduplicates a
  /// user's event ids while two users may each have an id.
  @Test func theVersion12RebuildKeepsTheLogItsSequencesAndTheErasureTrigger() async throws {
    let dir = TemporaryDirectory()
    let path = dir.file("store.sqlite")
    do {
      let db = try Self.olderDatabase(path, through: 11)
      for id in ["e1", "e2", "e3"] {
        try db.run(
          "INSERT INTO events(event_id, app_id, user_key, environment, type, occurred_ms, payload) VALUES(?, 'a1', 1, 'Production', 'RENEWED', 100, ?)",
          [.text(id), .blob(PayloadCodec.encode(EventLogContract.event(id)))])
      }
      // Erasure of the newest event: its number (3) stays used.
      try db.execute("DELETE FROM events WHERE sequence = 3")
      db.close()
    }
    let store = try open(dir)
    defer { store.close() }
    #expect(store.schemaVersion == Schema.latestVersion)
    #expect(try await EventLogContract.readAll(store).map(\.sequence) == [1, 2])
    #expect(try await EventLogContract.readAll(store).map(\.event.eventId) == ["e1", "e2"])
    let appended = try await store.appendEvents([
      EventLogContract.event("e2"), EventLogContract.event("e4"), EventLogContract.event("e2", user: "u2"),
    ])
    #expect(appended.map(\.event.eventId) == ["e4", "e2"])
    #expect(appended.map(\.event.userId) == ["u1", "u2"])
    // Numbers only grow: past the erased 3 (a refused duplicate may use one up, as before).
    #expect(appended.map(\.sequence).allSatisfy { $0 > 3 })
    #expect(appended.map(\.sequence) == appended.map(\.sequence).sorted())
    let db = try SQLiteConnection(path: path, readOnly: true, create: false)
    defer { db.close() }
    let trigger = try db.first("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'") { $0.text(0) }
    #expect(trigger?.contains("DELETE FROM webhook_deliveries WHERE sequence = OLD.sequence") == true)
    let index = try db.first("SELECT sql FROM sqlite_master WHERE name = 'events_by_user'") { $0.text(0) }
    #expect(index == "CREATE UNIQUE INDEX events_by_user ON events(user_key, event_id)")
  }

  /// Schema 13: every change of an app's products changes its `catalog_version` in the same
  /// transaction (the event derivation rebuilds its catalog only then), and only that app's.
  @Test func everyChangeOfAnAppsProductsChangesItsCatalogVersion() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    let db = try SQLiteConnection(path: dir.file("store.sqlite"), readOnly: true, create: false)
    defer { db.close() }
    func version() throws -> Int64? {
      try db.first("SELECT catalog_version FROM apps WHERE app_id = 'a1'") { $0.int(0) }
    }
    let start = try #require(try version())
    try await store.putProducts(appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")])
    let added = try #require(try version())
    #expect(added > start)
    try await store.putProducts(appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g2")])
    let changed = try #require(try version())
    #expect(changed > added)
    _ = try await store.deleteProducts(appId: "a1", productIds: ["monthly"])
    #expect(try #require(try version()) > changed)
  }
}
