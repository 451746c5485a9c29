import Foundation
import RPCCore
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Rule 27 as a user meets it: `appstore-sim` (V2 notifications, its App Store Server API) and a
/// real substatusd (on SQLite and on PostgreSQL) holding the app's In-App Purchase key; the consumption policy set with the CLI
/// (`substatus app set-policy --consumption-policy FILE.json`). A customer's refund request
/// (CONSUMPTION_REQUEST) is answered with Send Consumption Information, whose body the simulator
/// checks as Apple documents and records; a CONSUMPTION_REQUEST about an ASSIGNED transaction is
/// not answered. Both outcomes are events and counted in `/metrics`. The assignment itself
/// entitles like a purchase and is reported apart (rule 23).
@Suite(.serialized) struct ConsumptionEndToEndTests {
  @Test(arguments: TestStore.userLevel) func aRefundRequestIsAnsweredAndAnAssignedOneIsNot(store: TestStore) async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("consumption-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    // The simulated clock starts an hour ago (substatusd runs on the real clock): the refund
    // request is signed then, well within its 12 hours.
    let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
    let sim = try await RunningSimulator(extraArguments: [
      "--root-ca-out", rootPath, "--start-ms", String(nowMs - 3_600_000),
    ])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(
      store: try await store.make(),
      extraArguments: sim.serverAPIArguments(rootCA: rootPath) + ["--reconcile-interval", "0", "--refresh-interval", "0"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let bundle = "com.example.consumption"
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: 987_656)
    try await client.linkServerAPI(
      of: sim, daemon: daemon, admin: admin, appID: appID, bundleID: bundle, appleAppID: 987_656, keyID: "CONSUMPTIO")

    // The app's consumption policy, from a file in proto3 JSON, through the CLI.
    let policyFile = scratch.appendingPathComponent("consumption.json")
    try Data(
      #"{"customerConsented": true, "sampleContentProvided": false, "deliveryStatus": "CONSUMPTION_DELIVERY_STATUS_DELIVERED", "refundPreference": "REFUND_PREFERENCE_DECLINE"}"#
        .utf8
    ).write(to: policyFile)
    let substatus = try builtExecutable("substatus")
    let common = ["--addr", daemon.grpc, "--key", admin, "--timeout", "10"]
    let (code, out, err) = try await run(
      substatus, ["app", "set-policy", appID, "--consumption-policy", policyFile.path] + common)
    #expect(code == 0, "\(err)")
    #expect(out.contains("consumption policy") && out.contains("DELIVERED") && out.contains("DECLINE"), "\(out)")
    // A file without the delivery status is refused, naming the field.
    let bad = scratch.appendingPathComponent("bad.json")
    try Data(#"{"customerConsented": true}"#.utf8).write(to: bad)
    let (badCode, _, badErr) = try await run(substatus, ["app", "set-policy", appID, "--consumption-policy", bad.path] + common)
    #expect(badCode != 0 && badErr.contains("policy.consumption_policy.delivery_status"), "\(badErr)")

    // Ann subscribes, then asks Apple for a refund; an organization assigns the subscription to
    // Olga, and (as no App Store should) a CONSUMPTION_REQUEST about that transaction arrives.
    _ = try await sim.post("/control/users", ["user_id": "ann", "environment": "production"])
    _ = try await sim.post("/control/users", ["user_id": "olga", "environment": "production"])
    let bought = try await sim.post("/control/apps/\(bundle)/users/ann/purchase", ["product_id": "pro.monthly"])
    let annTransaction = try #require(((bought["transactions"] as? [[String: Any]])?.first)?["transaction_id"] as? String)
    let assigned = try await sim.post("/control/apps/\(bundle)/users/olga/assign", ["product_id": "pro.monthly"])
    let olgaTransaction = try #require(
      ((assigned["transactions"] as? [[String: Any]])?.first)?["transaction_id"] as? String, "\(assigned)")
    try await sim.drain()
    _ = try await sim.post(
      "/control/apps/\(bundle)/users/ann/refund-request", ["transaction_id": annTransaction, "reason": "UNINTENDED_PURCHASE"])
    _ = try await sim.post(
      "/control/apps/\(bundle)/users/olga/notify", ["notification_type": "CONSUMPTION_REQUEST", "transaction_id": olgaTransaction])
    try await sim.drain()

    // The answer reaches the simulator's Server API, which accepted the body as Apple would.
    let answer = try #require(
      try await waitForValue(timeout: .seconds(30), every: .milliseconds(100)) { () async throws -> JSONValue? in
        try await sim.get("/control/consumption-answers?bundle_id=\(bundle)")["answers"]?.arrayValue?.first
      }, "no Send Consumption Information reached the simulator: \(daemon.child.output.split(separator: "\n").filter { $0.contains("onsumption") || $0.contains("notification") }.joined(separator: "\n"))")
    #expect(answer["transaction_id"]?.stringValue == annTransaction)
    #expect(answer["within_request_window"] == .bool(true))
    let body = try #require(answer["body"])
    #expect(body["customerConsented"] == .bool(true))
    #expect(body["sampleContentProvided"] == .bool(false))
    #expect(body["deliveryStatus"]?.stringValue == "DELIVERED")
    #expect(body["refundPreference"]?.stringValue == "DECLINE")
    // An auto-renewable subscription: Apple computes the consumption from elapsed time.
    #expect(body["consumptionPercentage"] == nil)

    // Both requests are events of the owners of their transactions.
    func events() async throws -> [Substatus_V1_Event] {
      var request = Substatus_V1_ListEventsRequest()
      request.appID = appID
      request.types = [.consumptionInfoSent, .consumptionInfoFailed, .consumptionInfoNotSent]
      return try await client.call(Substatus_V1_EventService.listEvents, request, key: admin).events
    }
    let logged = try #require(
      try await waitForValue(timeout: .seconds(30), every: .milliseconds(100)) { () async throws -> [Substatus_V1_Event]? in
        let all = try await events()
        return all.count >= 2 ? all : nil
      }, "the consumption events were not logged")
    let sent = try #require(logged.first { $0.type == .consumptionInfoSent }, "\(logged)")
    #expect(sent.transactionID == annTransaction)
    #expect(sent.refundRequestReason == "UNINTENDED_PURCHASE")
    #expect(sent.consumptionBody.contains(#""deliveryStatus":"DELIVERED""#), "\(sent.consumptionBody)")
    let notSent = try #require(logged.first { $0.type == .consumptionInfoNotSent }, "\(logged)")
    #expect(notSent.transactionID == olgaTransaction)
    #expect(notSent.consumptionDetail == "assigned")
    #expect(notSent.ownership == .assigned)
    // The assigned transaction was never answered.
    let answers = try await sim.get("/control/consumption-answers?bundle_id=\(bundle)")["answers"]?.arrayValue ?? []
    #expect(answers.count == 1)

    // Rule 23: the assignment entitles like a purchase, reported as ASSIGNED (`substatus status`)
    // and counted apart from purchases and Family Sharing (`substatus report`).
    let olgaOriginal = try #require(
      ((assigned["transactions"] as? [[String: Any]])?.first)?["original_transaction_id"] as? String)
    let (statusCode, statusOut, statusErr) = try await run(
      substatus, ["status", appID, "apple:" + olgaOriginal, "--json"] + common)
    #expect(statusCode == 0, "\(statusErr)")
    let olga = try Substatus_V1_GetStatusResponse(jsonString: statusOut).groups.first { $0.subscriptionGroupID == "pro" }
    #expect(olga?.state == .active && olga?.ownership == .assigned, "\(statusOut)")
    let (reportCode, reportOut, reportErr) = try await run(substatus, ["report", appID, "--json"] + common)
    #expect(reportCode == 0, "\(reportErr)")
    let report = try #require(try Substatus_V1_GetReportResponse(jsonString: reportOut).report, "\(reportOut)")
    #expect(report.assignedBeneficiaries == 1 && report.familySharedBeneficiaries == 0, "\(reportOut)")
    #expect(report.active == 2, "ann's purchase and olga's assignment: \(reportOut)")

    var request = URLRequest(url: try #require(URL(string: "http://\(daemon.http)/metrics")))
    request.httpMethod = "GET"
    let (data, _) = try await URLSession.shared.data(for: request)
    let metrics = String(decoding: data, as: UTF8.self)
    #expect(metrics.contains(#"substatus_consumption_requests_total{outcome="sent"} 1"#), "\(metrics)")
    #expect(metrics.contains(#"substatus_consumption_requests_total{outcome="not_sent"} 1"#))
  }
}
