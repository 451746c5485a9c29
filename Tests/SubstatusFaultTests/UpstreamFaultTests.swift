import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire
import Testing

/// substatusd's SubmitReceipt against appstore-sim whose verifyReceipt is slowed, failed and
/// flapped through the simulator's fault injection (`POST /control/faults`), all on one substatusd.
@Suite(.serialized, .timeLimit(.minutes(1))) struct UpstreamFaultTests {
  @Test func submitReceiptAnswersUnavailableWhileAppleFailsAndRecoversWithoutRestart() async throws
  {
    let work = try temporaryDirectory("substatus-upstream")
    defer { try? FileManager.default.removeItem(at: work) }
    // The simulated clock starts now: substatusd judges the purchase by its own (real) clock.
    let startMs = Int64(Date().timeIntervalSince1970 * 1000)
    let sim = try await ReadyProcess(
      "appstore-sim",
      [
        "--listen", "127.0.0.1:0", "--ready-file", work.appendingPathComponent("sim.json").path,
        "--time-scale", "0", "--start-ms", String(startMs),
      ],
      readyFile: work.appendingPathComponent("sim.json"),
      logFile: work.appendingPathComponent("sim.log"))
    defer { sim.abandon(SIGTERM) }
    let simURL = "http://\(sim.ready["http"]!)"
    let secret = "0123456789abcdef0123456789abcdef"
    let (registered, _) = try await http(
      "POST", simURL + "/control/apps",
      #"{"bundle_id": "com.example.app", "shared_secret": "\#(secret)", "products": [{"product_id": "premium.monthly", "type": "auto_renewable", "subscription_group_id": "20001001", "duration": "P1M"}]}"#
    )
    #expect(registered / 100 == 2)
    try await http(
      "POST", simURL + "/control/users", #"{"user_id": "alice", "environment": "production"}"#)
    let (bought, purchase) = try await http(
      "POST", simURL + "/control/apps/com.example.app/users/alice/purchase",
      #"{"product_id": "premium.monthly"}"#)
    #expect(bought / 100 == 2)
    let receipt = try #require(purchase["receipt"] as? String)

    let daemon = try await startDaemon(
      dataDirectory: work.appendingPathComponent("data"), workDirectory: work,
      extraArguments: [
        "--verify-receipt-production-url", simURL + "/production/verifyReceipt",
        "--verify-receipt-sandbox-url", simURL + "/sandbox/verifyReceipt",
      ])
    defer { daemon.abandon(SIGTERM) }
    let (adminKey, appID) = try await makeTenantAndApp(daemon, workDirectory: work)
    let api = try client(daemon, key: adminKey)
    _ = try await api.setSharedSecret(appID: appID, sharedSecret: secret)

    func submit() async throws -> Substatus_V1_SubmitReceiptResponse {
      try await api.submitReceipt(appID: appID, userID: "alice", receiptData: receipt)
    }
    func active(_ response: Substatus_V1_SubmitReceiptResponse) -> Bool {
      response.groups.contains { $0.subscriptionGroupID == "20001001" && $0.state == .active }
    }
    func fault(_ body: String) async throws {
      let (status, _) = try await http("POST", simURL + "/control/faults", body)
      #expect(status / 100 == 2, "fault \(body) not accepted")
    }
    func clearFaults() async throws {
      let (status, _) = try await http("DELETE", simURL + "/control/faults")
      #expect(status / 100 == 2)
    }

    // Healthy upstream.
    #expect(active(try await submit()))

    // Slow but correct: answered, just later.
    try await fault(#"{"latency_ms": 500, "count": 1}"#)
    let slowStart = ContinuousClock.now
    #expect(active(try await submit()))
    #expect(ContinuousClock.now - slowStart >= .milliseconds(500))

    // Down (HTTP 503 on every attempt): UNAVAILABLE with a message naming the upstream, promptly.
    try await fault(#"{"http_status": 503}"#)
    let downStart = ContinuousClock.now
    let down = await expectRPCError(.unavailable, "verifyReceipt answering 503") {
      try await submit()
    }
    #expect(ContinuousClock.now - downStart < .seconds(15))
    #expect(down?.message.contains("verifyReceipt") == true, "message: \(down?.message ?? "")")
    #expect(down?.message.contains("503") == true, "message: \(down?.message ?? "")")

    // Apple's own "receipt server unavailable" (21005): UNAVAILABLE too, not INVALID_ARGUMENT.
    try await clearFaults()
    try await fault(#"{"status": 21005}"#)
    let apple = await expectRPCError(.unavailable, "verifyReceipt status 21005") {
      try await submit()
    }
    #expect(apple?.message.contains("21005") == true, "message: \(apple?.message ?? "")")

    print("upstream 503: \(down?.message ?? "-")\nupstream 21005: \(apple?.message ?? "-")")

    // Recovered: the same substatusd succeeds again, no restart.
    try await clearFaults()
    #expect(active(try await submit()))

    // Flapping: one failed attempt, then fine: substatusd's retry hides it from the caller.
    try await fault(#"{"http_status": 500, "count": 1}"#)
    #expect(active(try await submit()))
    let (_, left) = try await http("GET", simURL + "/control/faults")
    #expect(
      (left["faults"] as? [Any])?.isEmpty ?? true, "the one-shot fault was not consumed: \(left)")

    // Down, up, down, up: each answer follows the upstream's state at the time.
    for round in 0..<2 {
      try await fault(#"{"http_status": 502}"#)
      _ = await expectRPCError(.unavailable, "round \(round): down") { try await submit() }
      try await clearFaults()
      #expect(active(try await submit()), "round \(round): up")
    }
    let health = try await client(daemon, key: nil).health()
    #expect(health.status == .serving)
    #expect(await daemon.stop() == 0)
  }
}
