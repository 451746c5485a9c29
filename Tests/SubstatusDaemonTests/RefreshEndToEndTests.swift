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

/// A running appstore-sim on a free port with a frozen clock, stopped with SIGTERM (killed if a
/// test drops it running: ``ChildProcess``).
final class RunningSimulator: Sendable {
  let child: ChildProcess
  let directory: URL
  let address: String

  init(extraArguments: [String] = []) async throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "appstore-sim-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let ready = directory.appendingPathComponent("ready.json")
    // The clock only moves through the control API; it starts an hour in the past.
    let start = Int64(Date().timeIntervalSince1970 * 1000) - 3_600_000
    child = try ChildProcess(
      try builtExecutable("appstore-sim"),
      ["--listen", "127.0.0.1:0", "--ready-file", ready.path, "--time-scale", "0", "--start-ms", String(start)]
        + extraArguments, directory: directory)
    address = try #require(try await child.readyFile(ready)["http"])
  }

  /// POSTs a JSON body to the control API and returns the decoded answer.
  func post(_ path: String, _ body: [String: Any]) async throws -> [String: Any] {
    var request = URLRequest(url: URL(string: "http://\(address)\(path)")!)
    request.httpMethod = "POST"
    request.httpBody = try JSONSerialization.data(withJSONObject: body)
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    let (data, response) = try await URLSession.shared.data(for: request)
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    guard (200..<300).contains(status) else {
      throw DaemonFailure(
        "appstore-sim \(path) answered \(status): \(String(decoding: data, as: UTF8.self))")
    }
    return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
  }

  /// Sends SIGTERM and removes its directory; does not wait (a test's `defer` cannot).
  func stop() {
    child.send(SIGTERM)
    try? FileManager.default.removeItem(at: directory)
  }
}

/// substatusd and the App Store simulator together: the background refresh follows a renewal that
/// happens at the simulated App Store after the only SubmitReceipt.
@Suite(.serialized) struct RefreshEndToEndTests {
  @Test func refresherPicksUpTheRenewalWithoutAnotherSubmit() async throws {
    let sim = try await RunningSimulator()
    defer { sim.stop() }
    let daemon = try await RunningDaemon(extraArguments: [
      "--verify-receipt-production-url", "http://\(sim.address)/production/verifyReceipt",
      "--verify-receipt-sandbox-url", "http://\(sim.address)/sandbox/verifyReceipt",
      "--refresh-interval", "0.25",
    ])
    defer { daemon.abandon() }
    let address = try #require(HostPort(daemon.grpc))
    let transport = try HTTP2ClientTransport(
      configuration: .init(host: address.host, port: address.port))
    defer { transport.close() }
    let client = RPCClient(transport: transport)
    func call<Req: ProtobufMessage, Res: ProtobufMessage>(
      _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
    ) async throws -> Res {
      var metadata: Metadata = [:]
      metadata.addString("Bearer \(key)", forKey: "authorization")
      return try await client.unary(
        method: method.path, request: request, response: Res.self, metadata: metadata)
    }

    // The simulated App Store: an app with a monthly subscription that starts with a week's trial
    // (sandbox compresses them: 3 minutes of trial, then 5-minute months).
    let secret = "0123456789abcdef0123456789abcdef"
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": "com.example.refresh", "shared_secret": secret,
        "products": [
          [
            "product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro",
            "duration": "P1M",
            "introductory_offer": ["type": "free_trial", "duration": "P1W"],
          ]
        ],
      ])
    _ = try await sim.post("/control/users", ["user_id": "alice", "environment": "sandbox"])

    // substatusd: tenant, app, secret, catalog.
    var createTenant = Substatus_V1_CreateTenantRequest()
    createTenant.name = "refresh"
    let admin = try await call(
      Substatus_V1_TenantService.createTenant, createTenant, key: daemon.operatorKey
    ).adminKey
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = "com.example.refresh"
    let appID = try #require(
      try await call(Substatus_V1_AdminService.registerApp, register, key: admin).app?.appID)
    var setSecret = Substatus_V1_SetSharedSecretRequest()
    setSecret.appID = appID
    setSecret.sharedSecret = secret
    _ = try await call(Substatus_V1_AdminService.setSharedSecret, setSecret, key: admin)
    var product = Substatus_V1_Product()
    product.productID = "pro.monthly"
    product.type = .autoRenewable
    product.subscriptionGroupID = "pro"
    product.duration = "P1M"
    product.hasIntroductoryOffer = true
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    put.products = [product]
    _ = try await call(Substatus_V1_AdminService.putProducts, put, key: admin)

    // Buy so that the 3-minute trial ends 6 s from now on substatusd's (real) clock.
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    _ = try await sim.post("/control/clock/set", ["now_ms": now - 180_000 + 6_000])
    let purchase = try await sim.post(
      "/control/apps/com.example.refresh/users/alice/purchase",
      ["product_id": "pro.monthly", "offer": ["type": "introductory"]])
    let receipt = try #require(purchase["receipt"] as? String)

    var submit = Substatus_V1_SubmitReceiptRequest()
    submit.appID = appID
    submit.userID = "alice"
    submit.receiptData = receipt
    let submitted = try await call(Substatus_V1_IngestService.submitReceipt, submit, key: admin)
    let trial = try #require(submitted.groups.first { $0.subscriptionGroupID == "pro" })
    #expect(trial.state == .active)
    #expect(trial.inTrial)
    let trialEnd = trial.expiresMs
    #expect(abs(trialEnd - (now + 6_000)) < 1_000, "trial ends at \(trialEnd), now \(now)")

    // The App Store renews the trial into a paid (5-minute) month at its end; nobody tells
    // substatusd. (The simulated clock moves to a minute after the trial's end.)
    _ = try await sim.post("/control/clock/advance", ["minutes": 4])

    // The refresher re-verifies just after the trial's end and stores the renewal.
    var status = Substatus_V1_GetStatusRequest()
    status.appID = appID
    status.userID = "alice"
    status.environment = .sandbox
    let started = Date()
    var group: Substatus_V1_GroupStatus?
    _ = try await waitUntil(timeout: .seconds(60), every: .milliseconds(250)) {
      group = try await call(Substatus_V1_StatusService.getStatus, status, key: admin).groups.first
      { $0.subscriptionGroupID == "pro" }
      return (group?.expiresMs ?? 0) > trialEnd
    }
    let renewed = try #require(group)
    let waited = Date().timeIntervalSince(started)
    #expect(renewed.state == .active)
    #expect(!renewed.inTrial)
    #expect(
      renewed.expiresMs == trialEnd + 300_000,
      "expires \(renewed.expiresMs), trial ended \(trialEnd)")

    // Two verifyReceipt calls in all (the submit and one refresh), no receipt or secret in the log.
    let (exitStatus, daemonLog) = await daemon.stop()
    #expect(exitStatus == 0)
    let batches = daemonLog.split(separator: "\n").filter { $0.contains("receipt refresh batch") }
    #expect(batches.contains { $0.contains("\"refreshed\":1") }, "\(batches)")
    #expect(!daemonLog.contains(secret))
    #expect(!daemonLog.contains(String(receipt.prefix(40))))
    print(
      "refresh end-to-end: renewal visible \(String(format: "%.1f", waited)) s after the clock advance; \(batches.count) refresh batch(es)"
    )
  }
}

@Suite struct RefreshConfigurationTests {
  @Test func refreshSettingsFromFileEnvironmentAndFlags() throws {
    let defaults = try #require(
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(defaults.refreshInterval == 60)
    #expect(defaults.refreshConcurrency == 8)
    #expect(defaults.refreshTenantConcurrency == 2)
    #expect(defaults.refreshLease == 300)
    #expect(defaults.refreshBatchSize == 200)
    let file: [UInt8] = Array(
      #"{"data_dir": "/d", "refresh_interval": 30, "refresh_concurrency": 3, "refresh_tenant_concurrency": 1, "refresh_lease": 90}"#
        .utf8)
    let c = try #require(
      try DaemonConfiguration.parse(
        arguments: ["--config", "c.json", "--refresh-interval", "0", "--refresh-batch-size", "50"],
        environment: ["SUBSTATUS_REFRESH_CONCURRENCY": "16"], readFile: { _ in file }))
    #expect(c.refreshInterval == 0)  // off
    #expect(c.refreshConcurrency == 16)
    #expect(c.refreshTenantConcurrency == 1)
    #expect(c.refreshLease == 90)
    #expect(c.refreshBatchSize == 50)
  }

  @Test(arguments: [
    (["--refresh-interval", "-1"], "--refresh-interval must be a non-negative number"),
    (
      ["--refresh-concurrency", "0"],
      "--refresh-concurrency must be a whole number between 1 and 1000"
    ),
    (
      ["--refresh-tenant-concurrency", "1.5"], "--refresh-tenant-concurrency must be a whole number"
    ),
    (["--refresh-lease", "0.5"], "--refresh-lease must be at least 1 second"),
    (["--refresh-batch-size", "0"], "--refresh-batch-size must be a whole number between 1 and 1000"),
  ])
  func badRefreshSettings(arguments: [String], message: String) {
    #expect {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: [:])
    } throws: { error in
      (error as? DaemonConfiguration.UsageError)?.description.contains(message) == true
    }
  }
}
