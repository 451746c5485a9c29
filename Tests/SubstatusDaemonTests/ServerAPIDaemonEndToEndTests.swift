import AppStoreSignedData
import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusDaemon
import SubstatusWire
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
    let sim = try RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
    defer { sim.stop() }
    let daemon = try RunningDaemon(extraArguments: [
      "--app-store-server-api-production-url", "http://\(sim.address)",
      "--app-store-server-api-sandbox-url", "http://\(sim.address)/sandbox",
      "--apple-root-ca", rootPath, "--reconcile-interval", "0.5", "--refresh-interval", "0",
    ])
    defer { if daemon.process.isRunning { _ = daemon.stop() } }
    let address = try #require(HostPort(daemon.grpc))
    let transport = try HTTP2ClientTransport(configuration: .init(host: address.host, port: address.port))
    defer { transport.close() }
    let client = RPCClient(transport: transport)
    func call<Req: ProtobufMessage, Res: ProtobufMessage>(
      _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
    ) async throws -> Res {
      var metadata: Metadata = [:]
      metadata.addString("Bearer \(key)", forKey: "authorization")
      return try await client.unary(method: method.path, request: request, response: Res.self, metadata: metadata)
    }

    // substatusd: tenant, app (with its Apple app id, for production V2 data), catalog, key.
    let bundle = "com.example.reconcile"
    var createTenant = Substatus_V1_CreateTenantRequest()
    createTenant.name = "reconcile"
    let admin = try await call(Substatus_V1_TenantService.createTenant, createTenant, key: daemon.operatorKey).adminKey
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = bundle
    register.appleAppID = 987_654
    let appID = try #require(try await call(Substatus_V1_AdminService.registerApp, register, key: admin).app?.appID)
    var product = Substatus_V1_Product()
    product.productID = "pro.monthly"
    product.type = .autoRenewable
    product.subscriptionGroupID = "pro"
    product.duration = "P1M"
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    put.products = [product]
    _ = try await call(Substatus_V1_AdminService.putProducts, put, key: admin)
    let key = ES256PrivateKey.generate()
    var setKey = Substatus_V1_SetInAppPurchaseKeyRequest()
    setKey.appID = appID
    setKey.issuerID = "57246542-96fe-1a63-e053-0824d011072a"
    setKey.keyID = "RECONCILE1"
    setKey.privateKeyPem = key.pkcs8PEM
    _ = try await call(Substatus_V1_AdminService.setInAppPurchaseKey, setKey, key: admin)

    // The simulated App Store: the same app, V2 notifications to substatusd, the key's public half.
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundle, "shared_secret": "0123456789abcdef", "apple_app_id": 987_654,
        "notification_version": "v2",
        "notification_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications",
        "products": [
          ["product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M"]
        ],
      ])
    _ = try await sim.post(
      "/control/apps/\(bundle)/api-keys",
      ["issuer_id": setKey.issuerID, "key_id": setKey.keyID, "public_key_pem": key.publicKey.pem])
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
    while Date().timeIntervalSince(started) < 30 {
      state = try await call(Substatus_V1_StatusService.getStatus, status, key: admin).groups
        .first { $0.subscriptionGroupID == "pro" }?.state ?? .unspecified
      if state == .revoked { break }
      try await Task.sleep(for: .milliseconds(100))
    }
    let waited = Date().timeIntervalSince(started)
    #expect(state == .revoked)

    let (exitStatus, log) = daemon.stop()
    #expect(exitStatus == 0)
    let runs = log.split(separator: "\n").filter { $0.contains(#""msg":"reconcile""#) }
    // At least one run synced users (u-dave, and the pseudo-user "apple:<id>" when the purchase's
    // own notification arrived before the first sync).
    #expect(runs.contains { $0.contains(#""users_synced":"#) && !$0.contains(#""users_synced":0"#) }, "\(runs.prefix(5))")
    #expect(!log.contains("PRIVATE KEY"))
    print("server api end-to-end: the dropped refund reached substatusd \(String(format: "%.1f", waited)) s later, by reconciliation")
  }
}
