import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Rule 26 (docs/architecture.md "Domain rules"), with appstore-sim, substatusd (on SQLite and on
/// PostgreSQL) and the `substatus` CLI as processes: a purchase made outside the app reaches, through Apple's V2 notification
/// alone, the app user its `appAccountToken` names when the app's policy says so (and not
/// otherwise); a purchase sharing TRANSFER writes the new owner's token back to the simulator with
/// Set App Account Token.
@Suite(.serialized) struct AppAccountTokenEndToEndTests {
  /// The value of a `key  value` line of the CLI's human report.
  static func field(_ output: String, _ key: String) -> String? {
    for line in output.split(separator: "\n") where line.hasPrefix(key + "  ") {
      return line.dropFirst(key.count).trimmingCharacters(in: .whitespaces)
    }
    return nil
  }

  /// The `appAccountToken` of each of `user`'s transactions at the simulated App Store, read from
  /// the signed transactions the simulator hands to the user's devices.
  static func tokens(_ sim: RunningSimulator, bundle: String, user: String) async throws -> [String] {
    let signed = try await sim.get("/control/apps/\(bundle)/users/\(user)/signed-transactions")
    return try (signed["signed_transactions"]?.arrayValue ?? []).compactMap(\.stringValue).map { jws in
      let parts = jws.split(separator: ".")
      var text = String(parts[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
      while text.count % 4 != 0 { text += "=" }
      let payload = try JSONValue(parsing: Array(try #require(Data(base64Encoded: text))))
      return payload["appAccountToken"]?.stringValue ?? ""
    }
  }

  @Test(arguments: TestStore.userLevel)
  func aPurchaseMadeOutsideTheAppReachesTheUserItsTokenNamesAndATransferWritesTheTokenBack(store: TestStore) async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("token-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(
      store: try await store.make(),
      extraArguments: sim.serverAPIArguments(rootCA: rootPath) + ["--refresh-interval", "0", "--reconcile-interval", "0"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000) - 1_000])

    var tenant = Substatus_V1_CreateTenantRequest()
    tenant.name = "tokens"
    let admin = try await client.call(Substatus_V1_TenantService.createTenant, tenant, key: daemon.operatorKey).adminKey
    func cli(_ arguments: [String]) async throws -> String {
      let (code, out, err) = try await run(
        try builtExecutable("substatus"), arguments + ["--addr", daemon.grpc, "--key", admin, "--timeout", "10"])
      #expect(code == 0, "substatus \(arguments.joined(separator: " ")): \(err)")
      return out
    }
    func state(_ app: String, _ user: String) async throws -> Substatus_V1_SubscriptionState {
      let response = try Substatus_V1_GetStatusResponse(jsonString: try await cli(["status", app, user, "--json"]))
      return response.groups.first { $0.subscriptionGroupID == "pro" }?.state ?? .unspecified
    }
    /// An app registered with the CLI, its catalog, its key at the simulator, the given policy flags.
    func app(_ bundle: String, appleAppID: Int64, policy: [String]) async throws -> String {
      let registered = try await cli(["app", "register", "--bundle-id", bundle, "--apple-app-id", String(appleAppID)])
      let app = try #require(Self.field(registered, "app id"), "\(registered)")
      var put = Substatus_V1_PutProductsRequest()
      put.appID = app
      var product = Substatus_V1_Product()
      product.productID = "pro.monthly"
      product.type = .autoRenewable
      product.subscriptionGroupID = "pro"
      product.duration = "P1M"
      put.products = [product]
      _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)
      try await client.linkServerAPI(
        of: sim, daemon: daemon, admin: admin, appID: app, bundleID: bundle, appleAppID: appleAppID,
        keyID: "TOKENKEY0\(appleAppID % 10)")
      if !policy.isEmpty { _ = try await cli(["app", "set-policy", app] + policy) }
      return app
    }

    let named = try await app(
      "com.example.token.on", appleAppID: 6_400_000_261,
      policy: ["--app-account-token-is-user-id", "true", "--purchase-sharing", "transfer"])
    #expect(Self.field(try await cli(["app", "show", named]), "app account token is user id") == "true")
    let plain = try await app("com.example.token.off", appleAppID: 6_400_000_262, policy: [])
    #expect(Self.field(try await cli(["app", "show", plain]), "app account token is user id") == "false")

    // carol buys pro.monthly outside the apps (an offer code at the App Store, say), each purchase
    // with the token of an app user; substatusd hears of them only from Apple's notifications.
    let carol = UUID().uuidString.uppercased()
    let dave = UUID().uuidString.uppercased()
    _ = try await sim.post("/control/users", ["user_id": "carol", "environment": "production"])
    for (bundle, token) in [("com.example.token.on", carol), ("com.example.token.off", dave)] {
      _ = try await sim.post(
        "/control/apps/\(bundle)/users/carol/purchase", ["product_id": "pro.monthly", "app_account_token": token])
    }
    try await sim.drain()
    #expect(try await state(named, carol.lowercased()) == .active)
    #expect(try await state(plain, dave.lowercased()) == .neverSubscribed)
    #expect(try await state(named, carol) == .neverSubscribed)  // the id is the token in lower case

    // carol restores her purchase under another account, a UUID too: TRANSFER moves it, and the
    // new owner's token is written back to Apple.
    let phone = UUID().uuidString.lowercased()
    let storeKit = try await sim.get("/control/apps/com.example.token.on/users/carol/signed-transactions")
    var submit = Substatus_V1_SubmitSignedTransactionsRequest()
    submit.appID = named
    submit.userID = phone
    submit.signedTransactions = storeKit["signed_transactions"]?.arrayValue?.compactMap(\.stringValue) ?? []
    try #require(!submit.signedTransactions.isEmpty)
    #expect(try await Self.tokens(sim, bundle: "com.example.token.on", user: "carol") == [carol.lowercased()])
    _ = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    #expect(try await state(named, phone) == .active)
    #expect(try await state(named, carol.lowercased()) == .neverSubscribed)
    let written = try await waitUntil(timeout: .seconds(20), every: .milliseconds(100)) {
      try await Self.tokens(sim, bundle: "com.example.token.on", user: "carol") == [phone]
    }
    let carried = try await Self.tokens(sim, bundle: "com.example.token.on", user: "carol")
    #expect(written, "the simulator's transactions still carry \(carried)")
    if !written {
      let (_, log) = await daemon.stop()
      Issue.record("substatusd's log of the write:\n\(log.split(separator: "\n").filter { $0.contains("account token") }.joined(separator: "\n"))")
      return
    }
    var request = URLRequest(url: try #require(URL(string: "http://\(daemon.http)/metrics")))
    request.httpMethod = "GET"
    let metrics = String(decoding: try await URLSession.shared.data(for: request).0, as: UTF8.self)
    #expect(metrics.contains(#"substatus_app_account_token_writes_total{outcome="ok"} 1"#), "\(metrics)")

    // A restore by an account whose id is not a UUID moves the purchase but writes nothing.
    submit.userID = "carol-tablet"
    _ = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    #expect(try await state(named, "carol-tablet") == .active)
    #expect(try await Self.tokens(sim, bundle: "com.example.token.on", user: "carol") == [phone])
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }

  /// The `outcome` count of `substatus_app_account_token_writes_total` on `daemon`'s `/metrics`.
  static func tokenWrites(_ daemon: RunningDaemon, _ outcome: String) async throws -> Int {
    var request = URLRequest(url: try #require(URL(string: "http://\(daemon.http)/metrics")))
    request.httpMethod = "GET"
    let metrics = String(decoding: try await URLSession.shared.data(for: request).0, as: UTF8.self)
    let prefix = #"substatus_app_account_token_writes_total{outcome=""# + outcome + #""} "#
    for line in metrics.split(separator: "\n") where line.hasPrefix(prefix) { return Int(line.dropFirst(prefix.count)) ?? -1 }
    return 0
  }

  /// The write-back is durable: Apple fails it, substatusd is killed and restarted, and the
  /// simulator then receives the new owner's token (the restarted process finds the write the
  /// transfer's commit left, on the simulated clock it follows).
  @Test func aTransferWhoseWriteBackFailsIsWrittenAfterARestart() async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("token-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
    defer { sim.stop() }
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000) - 1_000])
    let arguments =
      sim.serverAPIArguments(rootCA: rootPath) + [
        "--clock-url", "http://\(sim.address)/control/clock", "--refresh-interval", "0", "--reconcile-interval", "0",
      ]
    let first = try await RunningDaemon(extraArguments: arguments)
    defer { first.abandon() }
    let client = try DaemonClient(first)
    defer { client.transport.close() }
    var tenant = Substatus_V1_CreateTenantRequest()
    tenant.name = "durable-tokens"
    let admin = try await client.call(Substatus_V1_TenantService.createTenant, tenant, key: first.operatorKey).adminKey
    let bundle = "com.example.token.durable"
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = bundle
    register.appleAppID = 6_400_000_263
    let app = try #require(try await client.call(Substatus_V1_AdminService.registerApp, register, key: admin).app).appID
    var put = Substatus_V1_PutProductsRequest()
    put.appID = app
    var product = Substatus_V1_Product()
    product.productID = "pro.monthly"
    product.type = .autoRenewable
    product.subscriptionGroupID = "pro"
    product.duration = "P1M"
    put.products = [product]
    _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)
    try await client.linkServerAPI(
      of: sim, daemon: first, admin: admin, appID: app, bundleID: bundle, appleAppID: 6_400_000_263,
      keyID: "TOKENKEY03")
    var policy = Substatus_V1_SetPolicyRequest()
    policy.appID = app
    var transfer = Substatus_V1_EligibilityPolicy()
    transfer.purchaseSharing = .transfer
    policy.policy = transfer
    policy.updateMask = ["purchase_sharing"]
    _ = try await client.call(Substatus_V1_AdminService.setPolicy, policy, key: admin)

    // erin buys with her first account's token; she restores under a second account.
    let laptop = UUID().uuidString.lowercased()
    let phone = UUID().uuidString.lowercased()
    _ = try await sim.post("/control/users", ["user_id": "erin", "environment": "production"])
    _ = try await sim.post("/control/apps/\(bundle)/users/erin/purchase", ["product_id": "pro.monthly", "app_account_token": laptop])
    let storeKit = try await sim.get("/control/apps/\(bundle)/users/erin/signed-transactions")
    var submit = Substatus_V1_SubmitSignedTransactionsRequest()
    submit.appID = app
    submit.signedTransactions = storeKit["signed_transactions"]?.arrayValue?.compactMap(\.stringValue) ?? []
    try #require(!submit.signedTransactions.isEmpty)
    submit.userID = laptop
    _ = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    // Apple's Server API fails from now on; the restore transfers the purchase to the phone.
    _ = try await sim.post("/control/server-api/faults", ["http_status": 503])
    submit.userID = phone
    _ = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    let attempted = try await waitUntil(timeout: .seconds(30), every: .milliseconds(100)) {
      try await Self.tokenWrites(first, "retried") >= 1
    }
    #expect(attempted, "the writer never tried: \(first.log.split(separator: "\n").filter { $0.contains("account token") })")
    #expect(try await Self.tokens(sim, bundle: bundle, user: "erin") == [laptop])

    // Killed (no graceful end); Apple recovers; a new process on the same data finds the write.
    await first.kill()
    var clear = URLRequest(url: try #require(URL(string: "http://\(sim.address)/control/server-api/faults")))
    clear.httpMethod = "DELETE"
    _ = try await URLSession.shared.data(for: clear)
    let second = try await RunningDaemon(extraArguments: arguments, reusing: first.directory)
    defer { second.abandon() }
    // The retry is due 30 s after the failure on the service's clock (the simulator's).
    _ = try await sim.post("/control/clock/advance", ["minutes": 2])
    let written = try await waitUntil(timeout: .seconds(30), every: .milliseconds(100)) {
      try await Self.tokens(sim, bundle: bundle, user: "erin") == [phone]
    }
    let carried = try await Self.tokens(sim, bundle: bundle, user: "erin")
    #expect(written, "the simulator's transactions still carry \(carried)")
    #expect(try await Self.tokenWrites(second, "ok") == 1)
    let (exitStatus, _) = await second.stop()
    #expect(exitStatus == 0)
  }
}

extension AppAccountTokenEndToEndTests {
  /// The world of the routing tests below: appstore-sim, a substatusd on `store` (its reconciler
  /// every half second when `reconciling`), an app registered with the CLI under
  /// `--app-account-token-is-user-id true`, selling `pro.monthly` and the lower `pro.basic.monthly`
  /// (a downgrade takes effect at renewal), linked to the simulator's Server API; the simulated
  /// clock at substatusd's (real) now.
  struct Routing {
    let sim: RunningSimulator
    let daemon: RunningDaemon
    let client: DaemonClient
    let admin: String
    let app: String
    let bundle: String
    let scratch: URL

    init(store: TestStore, reconciling: Bool, bundle: String, appleAppID: Int64) async throws {
      self.bundle = bundle
      scratch = FileManager.default.temporaryDirectory.appendingPathComponent("token-routing-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
      let rootPath = scratch.appendingPathComponent("root.pem").path
      sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
      daemon = try await RunningDaemon(
        store: try await store.make(),
        extraArguments: sim.serverAPIArguments(rootCA: rootPath) + [
          "--refresh-interval", "0", "--reconcile-interval", reconciling ? "0.5" : "0",
        ])
      client = try DaemonClient(daemon)
      (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: appleAppID)
      try await client.linkServerAPI(
        of: sim, daemon: daemon, admin: admin, appID: app, bundleID: bundle, appleAppID: appleAppID,
        keyID: "ROUTING\(appleAppID % 1000)")
      var patch = URLRequest(url: try #require(URL(string: "http://\(sim.address)/control/apps/\(bundle)")))
      patch.httpMethod = "PATCH"
      patch.httpBody = try JSONSerialization.data(withJSONObject: [
        "products": [
          ["product_id": "pro.basic.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M", "level": 2]
        ]
      ])
      let (_, patched) = try await URLSession.shared.data(for: patch)
      try #require((patched as? HTTPURLResponse)?.statusCode == 200)
      _ = try await cli(["app", "set-policy", app, "--app-account-token-is-user-id", "true"])
      _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000) - 1_000])
      _ = try await sim.post("/control/users", ["user_id": "carol", "environment": "production"])
    }

    func stop() {
      client.transport.close()
      daemon.abandon()
      sim.stop()
      try? FileManager.default.removeItem(at: scratch)
    }

    /// `substatus ARGS --addr … --key ADMIN`; what it printed.
    func cli(_ arguments: [String]) async throws -> String {
      let (code, out, err) = try await run(
        try builtExecutable("substatus"), arguments + ["--addr", daemon.grpc, "--key", admin, "--timeout", "10"])
      #expect(code == 0, "substatus \(arguments.joined(separator: " ")): \(err)")
      return out
    }

    /// The group `pro`'s state for `user`, from `substatus status APP USER --json`.
    func state(_ user: String) async throws -> Substatus_V1_SubscriptionState {
      let response = try Substatus_V1_GetStatusResponse(jsonString: try await cli(["status", app, user, "--json"]))
      return response.groups.first { $0.subscriptionGroupID == "pro" }?.state ?? .unspecified
    }

    /// Drops the simulator's next notification of the app: substatusd never hears of it directly.
    func dropNextNotification() async throws {
      _ = try await sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
      _ = try await sim.post("/control/notifications/drop", ["bundle_id": bundle, "count": 1])
    }

    /// carol's original transaction id at the simulated App Store.
    func carolsOriginalTransaction() async throws -> String {
      let signed = try await sim.get("/control/apps/\(bundle)/users/carol/signed-transactions")
      let jws = try #require(signed["signed_transactions"]?.arrayValue?.first?.stringValue)
      let parts = jws.split(separator: ".")
      var text = String(parts[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
      while text.count % 4 != 0 { text += "=" }
      let payload = try JSONValue(parsing: Array(try #require(Data(base64Encoded: text))))
      return try #require(payload["originalTransactionId"]?.stringValue)
    }
  }

  /// Rule 26 through the Server API alone: carol buys with her token, Apple's notification never
  /// arrives, and substatusd's reconciler finds it in the Notification History and syncs the
  /// purchase to the app user her token names (not to the unclaimed pseudo-user).
  @Test(arguments: TestStore.userLevel)
  func aPurchaseSeenFirstByTheReconcilerReachesTheUserItsTokenNames(store: TestStore) async throws {
    let world = try await Routing(store: store, reconciling: true, bundle: "com.example.token.reconcile", appleAppID: 6_400_000_263)
    defer { world.stop() }
    let token = UUID().uuidString
    try await world.dropNextNotification()
    _ = try await world.sim.post(
      "/control/apps/\(world.bundle)/users/carol/purchase", ["product_id": "pro.monthly", "app_account_token": token])
    _ = try await world.sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
    var state = Substatus_V1_SubscriptionState.unspecified
    let reached = try await waitUntil(timeout: .seconds(30), every: .milliseconds(200)) {
      state = try await world.state(token.lowercased())
      return state == .active
    }
    #expect(reached, "the token's user is \(state); substatusd's reconciler: \(world.daemon.log.split(separator: "\n").filter { $0.contains("reconcile") }.suffix(5))")
    let pseudoUser = "apple:" + (try await world.carolsOriginalTransaction())
    #expect(try await world.state(pseudoUser) == .neverSubscribed)
    let (exitStatus, _) = await world.daemon.stop()
    #expect(exitStatus == 0)
  }

  /// Rule 26 with the token in the renewal info only: carol subscribed without a token (that
  /// notification never arrived), then downgraded from inside the app with her token in the
  /// purchase options. Apple's DID_CHANGE_RENEWAL_PREF carries her current transaction (no token)
  /// and the renewal info (the token of the upcoming renewal): the purchase reaches the token's user.
  @Test(arguments: TestStore.userLevel)
  func aTokenInTheRenewalInfoOnlyNamesTheUser(store: TestStore) async throws {
    let world = try await Routing(store: store, reconciling: false, bundle: "com.example.token.renewal", appleAppID: 6_400_000_264)
    defer { world.stop() }
    let token = UUID().uuidString
    try await world.dropNextNotification()
    _ = try await world.sim.post("/control/apps/\(world.bundle)/users/carol/purchase", ["product_id": "pro.monthly"])
    _ = try await world.sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
    _ = try await world.sim.post(
      "/control/apps/\(world.bundle)/users/carol/change-product", ["product_id": "pro.basic.monthly", "app_account_token": token])
    _ = try await world.sim.post("/control/notifications/drain", ["timeout_ms": 10_000])
    // The transaction Apple signs still carries no token.
    #expect(try await Self.tokens(world.sim, bundle: world.bundle, user: "carol") == [""])
    #expect(try await world.state(token.lowercased()) == .active)
    let pseudoUser = "apple:" + (try await world.carolsOriginalTransaction())
    #expect(try await world.state(pseudoUser) == .neverSubscribed)
    let history = try Substatus_V1_GetTransactionHistoryResponse(
      jsonString: try await world.cli(["history", world.app, token.lowercased(), "--json"]))
    #expect(history.transactions.count == 1, "\(history)")
    let (exitStatus, _) = await world.daemon.stop()
    #expect(exitStatus == 0)
  }
}
