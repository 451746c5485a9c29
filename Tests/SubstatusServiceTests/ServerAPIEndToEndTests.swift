import AppStoreSignedData
import AppStoreSimulator
import Foundation
import HTTPServer
import RPCCore
import RPCInProcessTransport
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusJSON
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

@testable import SubstatusService

/// 2026-01-01T00:00:00Z, where the simulator's clock starts.
private let simStartMs: Int64 = 1_767_225_600_000
private let bundleID = "com.example.app"
private let monthly = "com.example.monthly"

/// The App Store simulator over real HTTP, with the Server API, and a substatus service whose
/// Server API client and JWS verifier point at it; the service's clock follows the simulator's.
struct ServerAPIWorld {
  let simulator: AppStoreSimulator
  let simServer: HTTPServer
  let notificationServer: HTTPServer
  let harness: Harness
  let adminKey: String
  let appID: String
  var base: String { "http://\(simServer.address)" }

  /// POSTs (or GETs) a control call that must succeed; returns the body.
  @discardableResult
  func control(_ method: String, _ path: String, _ body: String? = nil) async throws -> JSONValue {
    var request = URLRequest(url: URL(string: base + path)!)
    request.httpMethod = method
    if let body { request.httpBody = Data(body.utf8) }
    let (data, response) = try await URLSession.shared.data(for: request)
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    let json = data.isEmpty ? JSONValue.null : try JSONValue(parsing: Array(data))
    guard (200..<300).contains(status) else {
      throw CallFailure(description: "\(method) \(path) -> \(status) \(json.serialized())")
    }
    // Each answer carries the simulated time: the service's clock follows it.
    if let now = json["now_ms"]?.int64Value { harness.world.now.withLock { $0 = max($0, now) } }
    return json
  }

  struct CallFailure: Error, CustomStringConvertible { var description: String }

  /// Creates a simulator user and buys the monthly subscription; returns its transaction id.
  func subscribe(_ user: String, environment: String = "production") async throws -> String {
    try await control("POST", "/control/users", #"{"user_id": "\#(user)", "environment": "\#(environment)"}"#)
    let bought = try await control(
      "POST", "/control/apps/\(bundleID)/users/\(user)/purchase", #"{"product_id": "\#(monthly)"}"#)
    return try #require(bought["transactions"]?.arrayValue?.first?["transaction_id"]?.stringValue)
  }

  func sync(_ user: String, transactionID: String = "", environment: Substatus_V1_Environment = .unspecified, full: Bool = false)
    async throws -> Substatus_V1_SyncTransactionHistoryResponse
  {
    var request = Substatus_V1_SyncTransactionHistoryRequest()
    request.appID = appID
    request.userID = user
    request.transactionID = transactionID
    request.environment = environment
    request.fullResync = full
    return try await harness.call(Substatus_V1_IngestService.syncTransactionHistory, request, key: adminKey)
  }

  func state(_ user: String, environment: Substatus_V1_Environment = .production) async throws -> Substatus_V1_SubscriptionState {
    var request = Substatus_V1_GetStatusRequest()
    request.appID = appID
    request.userID = user
    request.environment = environment
    let status = try await harness.call(Substatus_V1_StatusService.getStatus, request, key: adminKey)
    return status.groups.first { $0.subscriptionGroupID == "g1" }?.state ?? .unspecified
  }
}

/// Runs `body` with a simulator (V2 notifications to the service's HTTP endpoint, the app's
/// In-App Purchase key registered on both sides) and a service over an in-memory store.
func withServerAPIWorld(
  keyRegisteredWithApple: Bool = true, deliverNotifications: Bool = true, _ body: (ServerAPIWorld) async throws -> Void) async throws {
  let authority = try TestCertificateAuthority.make(commonName: "serverapi test root")
  let simulator = AppStoreSimulator(configuration: .init(startMs: simStartMs, certificateAuthority: authority))
  let simServer = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: simulator.router())
  let base = URL(string: "http://\(simServer.address)")!
  let world = TestWorld(wallMs: simStartMs)
  let service = SubstatusService(
    store: InMemoryStore(), environment: world.environment, log: world.log, appleRootCertificates: [authority.root],
    appStoreServerAPI: AppStoreServerAPIClient(
      productionURL: base, sandboxURL: base.appendingPathComponent("sandbox"), timeout: .seconds(10),
      maxAttempts: 2, initialBackoff: .milliseconds(5)))
  let notificationServer = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: service.httpRouter())
  let operatorKey = try #require(try await service.bootstrapOperatorKey())
  var router = RPCRouter()
  service.register(in: &router)
  let transport = InProcessTransport()
  let server = RPCServer(transport: transport.server, router: router, interceptors: service.interceptors())
  defer { simulator.shutdown() }
  try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { try await server.run() }  // calls made before it listens wait for it
    let harness = Harness(world: world, service: service, client: RPCClient(transport: transport.client), operatorKey: operatorKey)
    do {
      let (adminKey, appID) = try await harness.makeTenantWithApp(bundleID: bundleID)
      // The catalog's group of the simulator's product.
      var put = Substatus_V1_PutProductsRequest()
      put.appID = appID
      var product = Substatus_V1_Product()
      product.productID = monthly
      product.type = .autoRenewable
      product.subscriptionGroupID = "g1"
      product.duration = "P1M"
      put.products = [product]
      _ = try await harness.call(Substatus_V1_AdminService.putProducts, put, key: adminKey)
      // The In-App Purchase key: its private half in the store, its public half with "Apple".
      let key = ES256PrivateKey.generate()
      try await service.store.setInAppPurchaseKey(
        appId: appID,
        key: InAppPurchaseKey(
          keyId: "ABCDEFGHIJ", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyPEM: key.pkcs8PEM,
          publicKeyPEM: key.publicKey.pem, publicKeyFingerprint: "sha256:test", setMs: simStartMs))
      service.invalidateApp(appID)
      let sim = ServerAPIWorld(
        simulator: simulator, simServer: simServer, notificationServer: notificationServer, harness: harness,
        adminKey: adminKey, appID: appID)
      try await sim.control(
        "POST", "/control/apps",
        JSONValue.object([
          "bundle_id": .string(bundleID), "shared_secret": .string("0123456789abcdef"), "apple_app_id": .integer(1234), "notification_version": .string("v2"),
          "notification_url": .string(
            deliverNotifications
              ? "http://\(notificationServer.address)/v1/apps/\(appID)/apple/notifications" : "http://127.0.0.1:9/nowhere"),
          "products": .array([
            .object([
              "product_id": .string(monthly), "type": .string("auto_renewable"), "subscription_group_id": .string("g1"),
              "duration": .string("P1M"),
            ])
          ]),
        ]).serialized())
      if keyRegisteredWithApple {
        try await sim.control(
          "POST", "/control/apps/\(bundleID)/api-keys",
          JSONValue.object([
            "issuer_id": .string("57246542-96fe-1a63-e053-0824d011072a"), "key_id": .string("ABCDEFGHIJ"),
            "public_key_pem": .string(key.publicKey.pem),
          ]).serialized())
      }
      try await body(sim)
    } catch {
      server.beginGracefulShutdown()
      await notificationServer.stop(gracePeriod: .seconds(1))
      await simServer.stop(gracePeriod: .seconds(1))
      throw error
    }
    server.beginGracefulShutdown()
    await notificationServer.stop(gracePeriod: .seconds(1))
    await simServer.stop(gracePeriod: .seconds(1))
    try await group.waitForAll()
  }
}

@Suite("App Store Server API against the App Store simulator")
struct ServerAPIEndToEndTests {
  @Test("SyncTransactionHistory: full history first, then only what changed since the stored revision")
  func incrementalSync() async throws {
    // No notification reaches the service: every change comes from the syncs.
    try await withServerAPIWorld(deliverNotifications: false) { sim in
      let transactionID = try await sim.subscribe("alice")
      let first = try await sim.sync("user-1", transactionID: transactionID)
      #expect(first.environment == .production)
      #expect(first.transactionCount == 1 && first.storedTransactionCount == 1)
      #expect(!first.revision.isEmpty)
      #expect(first.groups.first { $0.subscriptionGroupID == "g1" }?.state == .active)
      #expect(first.groups.first { $0.subscriptionGroupID == "g1" }?.autoRenewEnabled == true)
      // Nothing changed: the stored revision brings nothing back.
      let again = try await sim.sync("user-1")
      #expect(again.transactionCount == 0 && again.storedTransactionCount == 0)
      // A month later the subscription renewed: only the renewal comes back.
      try await sim.control("POST", "/control/clock/advance", #"{"days": 31}"#)
      let renewed = try await sim.sync("user-1")
      #expect(renewed.transactionCount == 1 && renewed.storedTransactionCount == 1)
      #expect(renewed.revision != first.revision)
      let history = try await sim.harness.service.store.history(
        of: UserKey(appId: sim.appID, environment: .production, userId: "user-1"))
      #expect(history.transactions.count == 2)
      // --full fetches everything again; nothing is new.
      let full = try await sim.sync("user-1", full: true)
      #expect(full.transactionCount == 2 && full.storedTransactionCount == 0)
    }
  }

  @Test("a sandbox transaction is found after production answers 4040010; errors map to statuses")
  func sandboxFallbackAndErrors() async throws {
    try await withServerAPIWorld { sim in
      let transactionID = try await sim.subscribe("bob", environment: "sandbox")
      let synced = try await sim.sync("user-2", transactionID: transactionID)
      #expect(synced.environment == .sandbox && synced.transactionCount == 1)
      // Asked in production only: Apple knows no such transaction there.
      await expectStatus(.notFound, "production only") {
        _ = try await sim.sync("user-2", transactionID: transactionID, environment: .production)
      }
      // No transaction id and nothing stored: the caller must pass one.
      await expectStatus(.invalidArgument, "nothing to ask with") { _ = try await sim.sync("nobody") }
      await expectStatus(.invalidArgument, "bad id") { _ = try await sim.sync("user-2", transactionID: "12/34") }
      // Apple down: UNAVAILABLE after the bounded retries.
      try await sim.control("POST", "/control/server-api/faults", #"{"http_status": 503, "count": 2}"#)
      await expectStatus(.unavailable, "Apple down") {
        _ = try await sim.sync("user-2", transactionID: transactionID, environment: .sandbox)
      }
    }
  }

  @Test("an app without a key, or whose key Apple refuses, gets FAILED_PRECONDITION")
  func keyRefused() async throws {
    try await withServerAPIWorld(keyRegisteredWithApple: false) { sim in
      let transactionID = try await sim.subscribe("carol")
      let error = await expectStatus(.failedPrecondition, "key unknown to Apple") {
        _ = try await sim.sync("user-3", transactionID: transactionID)
      }
      #expect(error?.message.contains("SetInAppPurchaseKey") == true)
    }
  }

  @Test("signed data that fails verification stores nothing and keeps the revision")
  func verificationFailure() async throws {
    try await withServerAPIWorld(deliverNotifications: false) { sim in
      let transactionID = try await sim.subscribe("erin")
      let first = try await sim.sync("user-5", transactionID: transactionID)
      // Untrusted first, so the renewal's own notification is refused too and stores nothing.
      try await sim.control("PATCH", "/control/apps/\(bundleID)", #"{"signing": "untrusted_root"}"#)
      try await sim.control("POST", "/control/clock/advance", #"{"days": 31}"#)
      try await sim.control("POST", "/control/notifications/drain", #"{"timeout_ms": 10000}"#)
      let error = await expectStatus(.failedPrecondition, "untrusted chain") { _ = try await sim.sync("user-5") }
      #expect(error?.message.contains("failed verification") == true)
      let user = UserKey(appId: sim.appID, environment: .production, userId: "user-5")
      #expect(try await sim.harness.service.store.history(of: user).transactions.count == 1)
      #expect(try await sim.harness.service.store.transactionHistorySync(of: user)?.revision == first.revision)
      // Once Apple's signatures check out again, the same sync picks up the renewal.
      try await sim.control("PATCH", "/control/apps/\(bundleID)", #"{"signing": "valid"}"#)
      #expect(try await sim.sync("user-5").storedTransactionCount == 1)
    }
  }

  @Test("SubmitReceipt with an In-App Purchase key syncs the receipt's transaction from the Server API")
  func submitReceiptModernPath() async throws {
    try await withServerAPIWorld { sim in
      let transactionID = try await sim.subscribe("frank")
      var request = Substatus_V1_SubmitReceiptRequest()
      request.appID = sim.appID
      request.userID = "user-6"
      request.receiptData = try TestReceipt.signed(
        TestReceipt.payload(bundleID: bundleID, inApps: [(monthly, transactionID, transactionID)]))
      // The app has no shared secret: only the Server API path can answer.
      let response = try await sim.harness.call(Substatus_V1_IngestService.submitReceipt, request, key: sim.adminKey)
      #expect(response.environment == .production)
      #expect(response.transactionCount == 1 && response.storedTransactionCount == 1)
      #expect(response.groups.first { $0.subscriptionGroupID == "g1" }?.state == .active)
      let user = UserKey(appId: sim.appID, environment: .production, userId: "user-6")
      #expect(try await sim.harness.service.store.transactionHistorySync(of: user)?.transactionId == transactionID)
      // A receipt without a transaction id takes the verifyReceipt path, which needs the secret.
      request.receiptData = try TestReceipt.signed(TestReceipt.payload(bundleID: bundleID, inApps: []))
      let error = await expectStatus(.failedPrecondition, "verifyReceipt path") {
        _ = try await sim.harness.call(Substatus_V1_IngestService.submitReceipt, request, key: sim.adminKey)
      }
      #expect(error?.message.contains("shared secret") == true)
    }
  }

  @Test("reconciliation fills a gap left by a dropped notification")
  func reconciliationFillsDroppedNotification() async throws {
    try await withServerAPIWorld { sim in
      let transactionID = try await sim.subscribe("dave")
      _ = try await sim.sync("user-4", transactionID: transactionID)
      #expect(try await sim.state("user-4") == .active)
      try await sim.control("POST", "/control/notifications/drain", #"{"timeout_ms": 10000}"#)

      // Apple refunds the subscription, and the REFUND notification never arrives.
      try await sim.control("POST", "/control/notifications/drop", #"{"bundle_id": "\#(bundleID)", "count": 1}"#)
      try await sim.control("POST", "/control/clock/advance", #"{"hours": 1}"#)
      try await sim.control("POST", "/control/apps/\(bundleID)/users/dave/refund", #"{"group_id": "g1"}"#)
      try await sim.control("POST", "/control/notifications/drain", #"{"timeout_ms": 10000}"#)
      let deliveries = try await sim.control("GET", "/control/notifications?bundle_id=\(bundleID)")
      #expect(deliveries["notifications"]?.arrayValue?.contains { $0["state"]?.stringValue == "dropped" } == true, "\(deliveries.serialized())")
      #expect(try await sim.state("user-4") == .active)  // stale: the refund is unknown here

      // One reconciliation pass (triggered directly, not after an hour).
      let reconciler = ServerAPIReconciler(service: sim.harness.service, owner: "instance-a")
      let pass = await reconciler.reconcileAll()
      let summary = try #require(pass["\(sim.appID)/Production"])
      #expect(summary.notifications >= 1)
      // Its counters in /metrics: the sums over both environments.
      let metrics = sim.harness.service.metrics.prometheusText()
      #expect(metrics.contains("substatus_reconciler_runs_total 1\n"))
      #expect(metrics.contains("substatus_reconciler_notifications_total \(pass.values.map(\.notifications).reduce(0, +))\n"))
      #expect(metrics.contains("substatus_reconciler_users_synced_total \(pass.values.map(\.usersSynced).reduce(0, +))\n"))
      #expect(metrics.contains("substatus_reconciler_failures_total 0\n"))
      // user-4, and the pseudo-user "apple:<id>" when the purchase's own notification arrived first.
      #expect(summary.usersSynced >= 1)
      #expect(summary.rejected == 0)
      #expect(try await sim.state("user-4") == .revoked)

      // A second run finds every notification processed and syncs nobody.
      let second = try await reconciler.reconcile(appId: sim.appID, environment: .production)
      #expect(second.usersSynced == 0)
      #expect(second.alreadyProcessed == second.notifications)

      // While another instance holds the app's claim, this one skips it.
      let now = sim.harness.world.now.withLock { $0 }
      _ = try await sim.harness.service.store.claimReconciliation(
        appId: sim.appID, environment: .production, owner: "instance-b", atMs: now, leaseUntilMs: now + 60_000)
      #expect(try await reconciler.reconcile(appId: sim.appID, environment: .production).skippedClaimed)
      // reconcileAll covers every app with a key in both environments.
      let all = await ServerAPIReconciler(service: sim.harness.service, owner: "instance-b").reconcileAll()
      #expect(Set(all.keys) == ["\(sim.appID)/Production", "\(sim.appID)/Sandbox"])
    }
  }
}
