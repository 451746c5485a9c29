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

/// substatusd and appstore-sim as processes: the App Store Server API URLs, the trusted root and
/// the reconcile interval come from substatusd's flags; a refund whose V2 notification the
/// simulator drops reaches substatusd through its periodic reconciliation alone.
@Suite(.serialized) struct ServerAPIDaemonEndToEndTests {
  @Test func periodicReconciliationFillsADroppedNotification() async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("serverapi-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(
      extraArguments: sim.serverAPIArguments(rootCA: rootPath) + ["--reconcile-interval", "0.5", "--refresh-interval", "0"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    func call<Req: ProtobufMessage, Res: ProtobufMessage>(
      _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
    ) async throws -> Res { try await client.call(method, request, key: key) }

    // substatusd: tenant, app (with its Apple app id, for production V2 data), catalog, In-App
    // Purchase key; the simulator: the same app, V2 notifications to substatusd, the key's public half.
    let bundle = "com.example.reconcile"
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: 987_654)
    try await client.linkServerAPI(
      of: sim, daemon: daemon, admin: admin, appID: appID, bundleID: bundle, appleAppID: 987_654, keyID: "RECONCILE1")
    // The simulated clock at substatusd's (real) now, so Apple's history falls in the window.
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000)])
    _ = try await sim.post("/control/users", ["user_id": "dave", "environment": "production"])
    let bought = try await sim.post("/control/apps/\(bundle)/users/dave/purchase", ["product_id": "pro.monthly"])
    let transactionID = try #require(((bought["transactions"] as? [[String: Any]])?.first)?["transaction_id"] as? String)

    var sync = Substatus_V1_SyncTransactionHistoryRequest()
    sync.appID = appID
    sync.userID = "u-dave"
    sync.transactionID = transactionID
    let synced = try await call(Substatus_V1_IngestService.syncTransactionHistory, sync, key: admin)
    #expect(synced.environment == .production)
    #expect(synced.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active)

    // The refund's notification is dropped: only reconciliation can tell substatusd.
    _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
    _ = try await sim.post("/control/notifications/drop", ["bundle_id": bundle, "count": 1])
    _ = try await sim.post("/control/apps/\(bundle)/users/dave/refund", ["group_id": "pro"])
    _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])

    var status = Substatus_V1_GetStatusRequest()
    status.appID = appID
    status.userID = "u-dave"
    let started = Date()
    var state = Substatus_V1_SubscriptionState.unspecified
    _ = try await waitUntil(timeout: .seconds(30), every: .milliseconds(100)) {
      state = try await call(Substatus_V1_StatusService.getStatus, status, key: admin).groups
        .first { $0.subscriptionGroupID == "pro" }?.state ?? .unspecified
      return state == .revoked
    }
    let waited = Date().timeIntervalSince(started)
    #expect(state == .revoked)

    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    let runs = log.split(separator: "\n").filter { $0.contains(#""msg":"reconcile""#) }
    // At least one run synced users (u-dave, and the pseudo-user "apple:<id>" when the purchase's
    // own notification arrived before the first sync).
    #expect(runs.contains { $0.contains(#""users_synced":"#) && !$0.contains(#""users_synced":0"#) }, "\(runs.prefix(5))")
    #expect(!log.contains("PRIVATE KEY"))
    print("server api end-to-end: the dropped refund reached substatusd \(String(format: "%.1f", waited)) s later, by reconciliation")
  }
}
