import AppStoreSignedData
import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusDaemon
import SubstatusWire
import SubstatusProcessTestKit
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// substatusd and appstore-sim as processes, reconciliation off: a V2 REFUND makes substatusd
/// sync the owner's history from the App Store Server API, which brings a renewal whose own
/// notification was dropped (the REFUND carries only the refunded transaction).
@Suite(.serialized) struct RevocationSyncEndToEndTests {
  @Test func refundNotificationSyncsTheOwnersHistory() async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("revocation-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    // The simulated clock starts 35 days ago: the first month is over by (real) now, its renewal
    // covers now.
    let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
    let sim = try await RunningSimulator(extraArguments: [
      "--root-ca-out", rootPath, "--start-ms", String(nowMs - 35 * 86_400_000),
    ])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(
      extraArguments: sim.serverAPIArguments(rootCA: rootPath) + ["--reconcile-interval", "0", "--refresh-interval", "0"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    func call<Req: ProtobufMessage, Res: ProtobufMessage>(
      _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
    ) async throws -> Res { try await client.call(method, request, key: key) }

    // substatusd: tenant, app (with its Apple app id, for production V2 data), catalog, In-App
    // Purchase key; the simulator: the same app, V2 notifications to substatusd, the key's public half.
    let bundle = "com.example.revocation"
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: 987_655)
    try await client.linkServerAPI(
      of: sim, daemon: daemon, admin: admin, appID: appID, bundleID: bundle, appleAppID: 987_655, keyID: "REVOCATION")

    // Erin subscribes 35 days ago; substatusd learns of it by a sync.
    _ = try await sim.post("/control/users", ["user_id": "erin", "environment": "production"])
    let bought = try await sim.post("/control/apps/\(bundle)/users/erin/purchase", ["product_id": "pro.monthly"])
    let first = try #require(((bought["transactions"] as? [[String: Any]])?.first)?["transaction_id"] as? String)
    var sync = Substatus_V1_SyncTransactionHistoryRequest()
    sync.appID = appID
    sync.userID = "u-erin"
    sync.transactionID = first
    _ = try await call(Substatus_V1_IngestService.syncTransactionHistory, sync, key: admin)
    _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])

    // The renewal's notification is dropped: substatusd sees the month as over.
    _ = try await sim.post(
      "/control/notifications/drop", ["bundle_id": bundle, "notification_type": "DID_RENEW", "count": 1])
    _ = try await sim.post("/control/clock/set", ["now_ms": nowMs])
    _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
    var status = Substatus_V1_GetStatusRequest()
    status.appID = appID
    status.userID = "u-erin"
    func state() async throws -> Substatus_V1_SubscriptionState {
      try await call(Substatus_V1_StatusService.getStatus, status, key: admin).groups
        .first { $0.subscriptionGroupID == "pro" }?.state ?? .unspecified
    }
    #expect(try await state() != .active)

    // The first month is refunded: its REFUND carries that transaction alone. The sync it
    // triggers brings the renewal, which covers now.
    _ = try await sim.post("/control/apps/\(bundle)/users/erin/refund", ["transaction_id": first])
    _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
    var current = Substatus_V1_SubscriptionState.unspecified
    _ = try await waitUntil(timeout: .seconds(20), every: .milliseconds(100)) {
      current = try await state()
      return current == .active
    }
    #expect(current == .active)
    var history = Substatus_V1_GetTransactionHistoryRequest()
    history.appID = appID
    history.userID = "u-erin"
    let transactions = try await call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin).transactions
    #expect(transactions.count == 2)
    #expect(transactions.contains { $0.transactionID == first && $0.revocationDateMs > 0 })

    // The sync counts itself after its commit: the state can be seen before the count.
    func metrics() async throws -> String {
      var request = URLRequest(url: URL(string: "http://\(daemon.http)/metrics")!)
      request.httpMethod = "GET"
      let (data, _) = try await URLSession.shared.data(for: request)
      return String(decoding: data, as: UTF8.self)
    }
    let succeeded = #"substatus_revocation_syncs_total{outcome="succeeded"}"#
    var text = ""
    _ = try await waitUntil(timeout: .seconds(20), every: .milliseconds(100)) {
      text = try await metrics()
      return text.contains(succeeded)
    }
    #expect(text.contains(succeeded), "\(text)")

    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    #expect(log.contains(#""msg":"revocation sync""#))
    #expect(!log.contains("PRIVATE KEY"))
  }
}
