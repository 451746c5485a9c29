import Foundation
import SubstatusWire
import Testing

/// Per-user summaries through a real substatusd (SQLite file, real gRPC): a write's new answer is
/// read at once (the write stores the user's summary in its commit), and `/metrics` shows the reads
/// answered from summaries.
@Suite(.serialized) struct SummaryEndToEndTests {
  static func importTransaction(
    _ client: DaemonClient, key: String, app: String, user: String, id: String, purchasedMs: Int64, expiresMs: Int64,
    revokedMs: Int64 = 0, signedMs: Int64
  ) async throws {
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = app
    request.userID = user
    var t = Substatus_V1_Transaction()
    t.transactionID = id
    t.originalTransactionID = id
    t.productID = "pro.monthly"
    t.subscriptionGroupID = "pro"
    t.purchaseDateMs = purchasedMs
    t.expiresDateMs = expiresMs
    t.revocationDateMs = revokedMs
    t.signedDateMs = signedMs
    request.transactions = [t]
    _ = try await client.call(Substatus_V1_IngestService.importTransactions, request, key: key)
  }

  static func eligibility(_ client: DaemonClient, key: String, app: String, user: String) async throws -> Substatus_V1_ProductEligibility? {
    var request = Substatus_V1_CheckEligibilityRequest()
    request.appID = app
    var q = Substatus_V1_EligibilityQuery()
    q.userID = user
    q.productIDs = ["pro.monthly"]
    request.queries = [q]
    return try await client.call(Substatus_V1_EligibilityService.checkEligibility, request, key: key).users.first?.products.first
  }

  /// The value of a `/metrics` sample line (0 when absent).
  static func sample(_ metrics: String, _ name: String) -> Int {
    for line in metrics.split(separator: "\n") where line.hasPrefix(name + " ") {
      return Int(line.dropFirst(name.count + 1)) ?? -1
    }
    return 0
  }

  @Test func aWritesNewAnswerIsReadAtOnceFromTheSummaryItStored() async throws {
    let daemon = try await RunningDaemon()
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.summary", appleAppID: 0)
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let day: Int64 = 86_400_000

    // A new customer, then a subscriber: each answer right after its write.
    #expect(try await Self.eligibility(client, key: admin, app: app, user: "ann")?.promotional?.reason == .neverSubscribed)
    try await Self.importTransaction(
      client, key: admin, app: app, user: "ann", id: "9001", purchasedMs: now - day, expiresMs: now + 29 * day,
      signedMs: now - 1_000)
    let active = try await Self.eligibility(client, key: admin, app: app, user: "ann")
    #expect(active?.promotional?.reason == .existingSubscriber)
    #expect(active?.promotional?.evidenceTransactionID == "9001")
    var status = Substatus_V1_GetStatusRequest()
    status.appID = app
    status.userID = "ann"
    #expect(try await client.call(Substatus_V1_StatusService.getStatus, status, key: admin).groups.first?.state == .active)

    // A refund (a newer copy with its revocation): the next read says so.
    try await Self.importTransaction(
      client, key: admin, app: app, user: "ann", id: "9001", purchasedMs: now - day, expiresMs: now + 29 * day,
      revokedMs: now - 500, signedMs: now - 100)
    let revoked = try await client.call(Substatus_V1_StatusService.getStatus, status, key: admin)
    #expect(revoked.groups.first?.state == .revoked)
    #expect(revoked.entitlements.isEmpty)
    #expect(try await Self.eligibility(client, key: admin, app: app, user: "ann")?.promotional?.reason == .lapsedSubscriber)

    // Every read after a write was answered from the summary the write stored; only the first
    // read (a user without data) read a history.
    let metrics = try await WebhookLimitsEndToEndTests.metrics(daemon)
    #expect(Self.sample(metrics, "substatus_summary_hits_total") == 4, "\(metrics)")
    #expect(Self.sample(metrics, "substatus_summary_fallbacks_total{reason=\"missing\"}") == 1, "\(metrics)")
    #expect(Self.sample(metrics, "substatus_summary_fallbacks_total{reason=\"expired\"}") == 0, "\(metrics)")
    #expect(Self.sample(metrics, "substatus_summary_fallbacks_total{reason=\"fingerprint\"}") == 0, "\(metrics)")
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }

  @Test func aStoreWrittenBeforeSummariesGetsThemOnFirstRead() async throws {
    var daemon = try await RunningDaemon()
    defer { daemon.abandon() }
    var client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.summary2", appleAppID: 0)
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let day: Int64 = 86_400_000
    try await Self.importTransaction(
      client, key: admin, app: app, user: "bob", id: "9101", purchasedMs: now - day, expiresMs: now + 29 * day,
      signedMs: now - 1_000)
    let written = try await Self.eligibility(client, key: admin, app: app, user: "bob")

    // As if the data had been written by a build without summaries: the rows are gone.
    await daemon.kill()
    client.transport.close()
    let database = daemon.directory.appendingPathComponent("data/substatus.sqlite").path
    let (status, _, err) = try await runProcess("/usr/bin/sqlite3", [database, "DELETE FROM user_summaries"])
    #expect(status == 0, "\(err)")
    let directory = daemon.directory
    daemon = try await RunningDaemon(reusing: directory)
    client = try DaemonClient(daemon)
    defer { client.transport.close() }

    // The first read falls back to the history and stores the summary; the next one reads it.
    #expect(try await Self.eligibility(client, key: admin, app: app, user: "bob") == written)
    var metrics = try await WebhookLimitsEndToEndTests.metrics(daemon)
    #expect(Self.sample(metrics, "substatus_summary_fallbacks_total{reason=\"missing\"}") == 1, "\(metrics)")
    #expect(Self.sample(metrics, "substatus_summary_rewrites_total{outcome=\"stored\"}") == 1, "\(metrics)")
    #expect(Self.sample(metrics, "substatus_summary_hits_total") == 0, "\(metrics)")
    #expect(try await Self.eligibility(client, key: admin, app: app, user: "bob") == written)
    metrics = try await WebhookLimitsEndToEndTests.metrics(daemon)
    #expect(Self.sample(metrics, "substatus_summary_hits_total") == 1, "\(metrics)")
    let restarted = daemon
    let (exitStatus, _) = await restarted.stop()
    #expect(exitStatus == 0)
  }
}
