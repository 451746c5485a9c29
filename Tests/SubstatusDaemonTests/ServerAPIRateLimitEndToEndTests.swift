import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusDaemon
import SubstatusWire
import Synchronization
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// substatusd and appstore-sim as processes, substatusd following the simulator's clock: Apple's
/// side allows this app one Server API request per 2 s; a sync meets the `429`, waits for its
/// `Retry-After` (simulated time, which only the test moves), sends again then and succeeds; its
/// `/metrics` counts the outcomes.
@Suite(.serialized) struct ServerAPIRateLimitEndToEndTests {
  @Test func syncWaitsForRetryAfter() async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("ratelimit-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath, "--start-ms", String(now)])
    defer { sim.stop() }
    let arguments =
      sim.serverAPIArguments(rootCA: rootPath) + [
        "--clock-url", "http://\(sim.address)/control/clock", "--reconcile-interval", "0", "--refresh-interval", "0",
      ]
    let daemon = try await RunningDaemon(extraArguments: arguments)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }

    func request(_ method: String, _ url: String, _ body: String? = nil) async throws -> String {
      var request = URLRequest(url: URL(string: url)!)
      request.httpMethod = method
      if let body { request.httpBody = Data(body.utf8) }
      let (data, _) = try await URLSession.shared.data(for: request)
      return String(decoding: data, as: UTF8.self)
    }
    func limited() async throws -> Int {
      let text = try await request("GET", "http://\(sim.address)/control/server-api/rate-limit")
      let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
      return ((json?["production"] as? [String: Any])?["limited"] as? Int) ?? -1
    }

    let bundle = "com.example.ratelimit"
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: 987_655)
    try await client.linkServerAPI(
      of: sim, daemon: daemon, admin: admin, appID: appID, bundleID: bundle, appleAppID: 987_655, keyID: "RATELIMIT1")
    _ = try await request("PATCH", "http://\(sim.address)/control/apps/\(bundle)", #"{"server_api_rate_limit":0.5}"#)
    _ = try await sim.post("/control/users", ["user_id": "fay", "environment": "production"])
    let bought = try await sim.post("/control/apps/\(bundle)/users/fay/purchase", ["product_id": "pro.monthly"])
    let transactionID = try #require(((bought["transactions"] as? [[String: Any]])?.first)?["transaction_id"] as? String)
    _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])

    var sync = Substatus_V1_SyncTransactionHistoryRequest()
    sync.appID = appID
    sync.userID = "u-fay"
    sync.transactionID = transactionID
    sync.environment = .production
    let done = Mutex(false)
    let syncing = Task {
      defer { done.withLock { $0 = true } }
      return try await client.call(Substatus_V1_IngestService.syncTransactionHistory, sync, key: admin)
    }
    // Each 429 holds the sync until the simulated clock reaches its Retry-After (2 s on), which
    // only this test moves. Halfway there nothing more may be sent (a client that merely backed
    // off would try again and be refused again); at Retry-After the request goes.
    var advances = 0
    var refusedHalfway: [Int] = []
    let started = Date()
    while !done.withLock({ $0 }), Date().timeIntervalSince(started) < 60 {
      if try await limited() > advances {
        _ = try await sim.post("/control/clock/advance", ["seconds": 1])
        try await Task.sleep(for: .milliseconds(500))
        refusedHalfway.append(try await limited())
        _ = try await sim.post("/control/clock/advance", ["seconds": 1])
        advances += 1
      }
      try await Task.sleep(for: .milliseconds(50))
    }
    #expect(refusedHalfway == Array(1...max(1, advances)), "a request went before Retry-After")
    let synced = try await syncing.value
    #expect(synced.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active)
    let refused = try await limited()
    #expect(refused >= 1, "the simulator refused at least one request")
    // One refusal per Retry-After: the daemon sent nothing between a 429 and the clock's move.
    #expect(refused == advances)

    let metrics = try await request("GET", "http://\(daemon.http)/metrics")
    #expect(metrics.contains(#"substatus_appstore_server_api_requests_total{outcome="rate_limited"} \#(refused)"#), "\(metrics)")
    #expect(metrics.contains(#"substatus_appstore_server_api_requests_total{outcome="waited"}"#))
    #expect(!metrics.contains(#"substatus_appstore_server_api_requests_total{outcome="ok"} 0"#))
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }
}
