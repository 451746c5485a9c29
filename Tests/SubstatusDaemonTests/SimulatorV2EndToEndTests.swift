import Foundation
import SubstatusJSON
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

extension RunningSimulator {
  /// GETs a control API path and decodes the JSON answer.
  func get(_ path: String) async throws -> JSONValue {
    let (data, response) = try await URLSession.shared.data(from: try #require(URL(string: "http://\(address)\(path)")))
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    guard (200..<300).contains(status) else {
      throw DaemonFailure("appstore-sim \(path) answered \(status): \(String(decoding: data, as: UTF8.self))")
    }
    return try JSONValue(parsing: [UInt8](data))
  }

  /// Waits until every notification due has been delivered (or given up).
  func drain() async throws {
    let drained = try await post("/control/notifications/drain", ["timeout_ms": 10_000])
    #expect(drained["drained"] as? Bool == true)
  }
}

/// The App Store simulator in V2 mode and substatusd, both real processes: the simulator signs
/// with its own test root, substatusd trusts exactly that root (`--apple-root-ca`), and the V2
/// notifications travel over real HTTP.
@Suite(.serialized) struct SimulatorV2EndToEndTests {
  @Test func purchaseAndRefundReachTheStatusThroughSignedNotifications() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-v2-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let rootFile = directory.appendingPathComponent("sim-root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootFile])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", rootFile])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }

    // substatusd's app and the simulator's, which posts V2 notifications to it.
    let bundleID = "com.example.simv2"
    let appleAppID: Int64 = 6_400_000_077
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundleID, appleAppID: appleAppID)
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundleID, "apple_app_id": appleAppID, "shared_secret": "unused-by-v2",
        "notification_version": "v2", "notification_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications",
        "products": [["product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M"]],
      ])
    _ = try await sim.post("/control/users", ["user_id": "alice", "environment": "production"])
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000) - 1_000])

    // A purchase: SUBSCRIBED reaches substatusd before the app said anything, so it is kept under
    // the pseudo-user of its original transaction.
    _ = try await sim.post("/control/apps/\(bundleID)/users/alice/purchase", ["product_id": "pro.monthly"])
    try await sim.drain()
    let storeKit = try await sim.get("/control/apps/\(bundleID)/users/alice/signed-transactions")
    let originalTransactionID = try #require(storeKit["transactions"]?.arrayValue?.first?["originalTransactionId"]?.stringValue)
    let fromNotification = try await client.status(appID: appID, user: "apple:\(originalTransactionID)", environment: .production, key: admin)
    #expect(fromNotification?.state == .active)
    #expect(fromNotification?.productID == "pro.monthly")

    // The app hands over what StoreKit 2 gave it: verified against the simulator's root.
    var submit = Substatus_V1_SubmitSignedTransactionsRequest()
    submit.appID = appID
    submit.userID = "alice"
    submit.signedTransactions = storeKit["signed_transactions"]?.arrayValue?.compactMap(\.stringValue) ?? []
    submit.signedRenewalInfos = storeKit["signed_renewal_info"]?.arrayValue?.compactMap(\.stringValue) ?? []
    try #require(!submit.signedTransactions.isEmpty)
    let submitted = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    #expect(submitted.environment == .production)
    #expect(submitted.transactionResults.allSatisfy { $0.outcome == .created }, "\(submitted.transactionResults)")
    #expect(submitted.renewalInfoResults.allSatisfy { $0.outcome == .created }, "\(submitted.renewalInfoResults)")
    #expect(submitted.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active)

    // A refund: the V2 REFUND is routed to alice by the original transaction id.
    _ = try await sim.post("/control/apps/\(bundleID)/users/alice/refund", ["group_id": "pro"])
    try await sim.drain()
    #expect(try await client.status(appID: appID, user: "alice", environment: .production, key: admin)?.state == .revoked)

    // Every event appended is counted in /metrics by the write that appended it: the SUBSCRIBED
    // and REFUND notifications' as `notification` (STARTED of the pseudo-user, REFUNDED of alice),
    // the submission's as `ingest`; together, as many as the app's log holds.
    var list = Substatus_V1_ListEventsRequest()
    list.appID = appID
    list.limit = 1000
    let logged = try await client.call(Substatus_V1_EventService.listEvents, list, key: admin).events
    let appended = try await Self.eventsAppended(daemon)
    #expect(logged.contains { $0.type == .refunded && $0.userID == "alice" }, "\(logged.map(\.type))")
    #expect((appended["notification"] ?? 0) >= 2, "\(appended)")
    #expect(appended.values.reduce(0, +) == logged.count, "\(appended) for \(logged.map(\.type))")

    // Every V2 delivery was acknowledged with 200 at its first attempt.
    let deliveries = try await sim.get("/control/notifications?user_id=alice")["notifications"]?.arrayValue ?? []
    #expect(deliveries.compactMap { $0["notification_type"]?.stringValue } == ["SUBSCRIBED", "REFUND"])
    for delivery in deliveries {
      #expect(delivery["attempts"]?.arrayValue?.compactMap { $0["http_status"]?.int64Value } == [200], "\(delivery)")
    }

    // The simulator signs with another key than its leaf's from now on: substatusd refuses the
    // notification (401, Apple would retry) and StoreKit's data item by item.
    var patch = URLRequest(url: try #require(URL(string: "http://\(sim.address)/control/apps/\(bundleID)")))
    patch.httpMethod = "PATCH"
    patch.httpBody = Data(#"{"signing":"wrong_key"}"#.utf8)
    let (_, patched) = try await URLSession.shared.data(for: patch)
    #expect((patched as? HTTPURLResponse)?.statusCode == 200)
    _ = try await sim.post("/control/users", ["user_id": "bob", "environment": "production"])
    _ = try await sim.post("/control/apps/\(bundleID)/users/bob/purchase", ["product_id": "pro.monthly"])
    try await sim.drain()
    let bobs = try await sim.get("/control/notifications?user_id=bob")["notifications"]?.arrayValue ?? []
    #expect(bobs.first?["attempts"]?.arrayValue?.first?["http_status"]?.int64Value == 401, "\(bobs)")
    let forged = try await sim.get("/control/apps/\(bundleID)/users/bob/signed-transactions")
    submit.userID = "bob"
    submit.signedTransactions = forged["signed_transactions"]?.arrayValue?.compactMap(\.stringValue) ?? []
    submit.signedRenewalInfos = []
    let refused = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    #expect(refused.environment == .unspecified)
    #expect(refused.transactionResults.map { $0.error?.message.hasPrefix("INVALID_SIGNATURE: ") } == [true])
    #expect(try await client.status(appID: appID, user: "bob", environment: .production, key: admin)?.state == .neverSubscribed)

    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    #expect(log.contains("\"type\":\"REFUND\""))
  }

  /// `substatus_events_appended_total` of the daemon's /metrics, by source (read with curl, off the
  /// cooperative pool).
  static func eventsAppended(_ daemon: RunningDaemon) async throws -> [String: Int] {
    let text = try await runProcess("/usr/bin/curl", ["-sS", "--max-time", "10", "http://\(daemon.http)/metrics"]).1
    var counts: [String: Int] = [:]
    for line in text.split(separator: "\n") where line.hasPrefix("substatus_events_appended_total{source=\"") {
      let parts = line.split(separator: " ")
      let source = line.dropFirst("substatus_events_appended_total{source=\"".count).prefix { $0 != "\"" }
      counts[String(source)] = parts.last.flatMap { Int($0) }
    }
    return counts
  }
}
