import Foundation
import Glibc
import RPCCore
import RPCHTTP2Transport
import SubscriptionStorage
import SubstatusProcessTestKit
import SubstatusWire
import Testing

@testable import SubscriptionStoragePostgres

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// appstore-sim on a free port with a frozen clock (it moves only through the control API).
private final class Simulator: Sendable {
  let pid: pid_t
  let directory: String
  let address: String

  init() throws {
    directory = FileManager.default.temporaryDirectory
      .appendingPathComponent("appstore-sim-pg-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let ready = directory + "/ready.json"
    let start = Int64(Date().timeIntervalSince1970 * 1000) - 3_600_000
    pid = try spawn(
      [
        try builtExecutable("appstore-sim"), "--listen", "127.0.0.1:0", "--ready-file", ready,
        "--time-scale", "0", "--start-ms", String(start),
      ], output: directory + "/sim.log", environment: childEnvironment([:]))
    let deadline = Date().addingTimeInterval(30)
    while !FileManager.default.fileExists(atPath: ready) {
      var status: Int32 = 0
      if waitpid(pid, &status, WNOHANG) == pid || Date() > deadline {
        throw PostgresFailure("appstore-sim did not become ready")
      }
      usleep(20_000)
    }
    let json =
      try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: ready)))
      as? [String: String]
    address = try #require(json?["http"])
  }

  /// Sends a control request and returns the decoded answer.
  @discardableResult
  func control(_ method: String, _ path: String, _ body: [String: any Sendable]? = nil)
    async throws -> [String: Any]
  {
    var request = URLRequest(url: URL(string: "http://\(address)\(path)")!)
    request.httpMethod = method
    if let body {
      request.httpBody = try JSONSerialization.data(withJSONObject: body)
      request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    }
    let (data, response) = try await URLSession.shared.data(for: request)
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    guard (200..<300).contains(status) else {
      throw PostgresFailure(
        "appstore-sim \(path) answered \(status): \(String(decoding: data, as: UTF8.self))")
    }
    return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
  }

  /// verifyReceipt requests the sandbox endpoint received (each refresh of a sandbox receipt sends
  /// exactly one there, after production's 21007).
  func sandboxVerifications() async throws -> Int {
    let stats = try await control("GET", "/control/stats")
    let counts = try #require(stats["verify_receipt_requests"] as? [String: Any])
    return try #require(counts["sandbox"] as? Int)
  }

  /// SIGKILL: requests held by an injected latency must not delay the test's end.
  func stop() {
    kill(pid, SIGKILL)
    waitForExit(pid)
    try? FileManager.default.removeItem(atPath: directory)
  }
}

/// A gRPC client of one instance.
private struct Client: Sendable {
  let transport: HTTP2ClientTransport
  let client: RPCClient

  init(_ hostPort: String) throws {
    let colon = try #require(hostPort.lastIndex(of: ":"))
    transport = try HTTP2ClientTransport(
      configuration: .init(
        host: String(hostPort[..<colon]),
        port: try #require(Int(hostPort[hostPort.index(after: colon)...]))))
    client = RPCClient(transport: transport)
  }

  func call<Req: ProtobufMessage, Res: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
  ) async throws -> Res {
    var metadata: Metadata = [:]
    metadata.addString("Bearer \(key)", forKey: "authorization")
    return try await client.unary(
      method: method.path, request: request, response: Res.self, metadata: metadata)
  }

  func close() { transport.close() }
}

/// The App Store and substatusd set up for the refresh, on the database `url`, through a setup
/// instance that does not refresh (stopped on return): an app with a monthly subscription that
/// starts with a week's trial (sandbox: 3 minutes, then 5-minute months) and `users` users who bought
/// it, their trials ending 3 s from now. The receipts are submitted (however long that takes on a
/// busy machine), the App Store renews every trial at its end (nobody tells substatusd), and once
/// the trials have ended on the real clock every stored receipt is made due now. Returns the app id,
/// the admin key and the trial's end.
private func setUpDueSubscribers(
  _ sim: Simulator, url: String, masterKey: String, users: [String]
) async throws -> (appID: String, admin: String, trialEnd: Int64) {
  let setup = try await blocking {
    try Instance(
      store: url, masterKey: masterKey,
      extraArguments: verifyReceiptURLs(sim) + ["--refresh-interval", "0"])
  }
  defer { killIfRunning(setup.pid) }
  let client = try Client(setup.grpc)
  defer { client.close() }
  let operatorKey = try #require(setup.operatorKey)
  let secret = "0123456789abcdef0123456789abcdef"
  try await sim.control(
    "POST", "/control/apps",
    [
      "bundle_id": "com.example.lease", "shared_secret": secret,
      "products": [
        [
          "product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro",
          "duration": "P1M", "introductory_offer": ["type": "free_trial", "duration": "P1W"],
        ] as [String: any Sendable]
      ],
    ])
  var createTenant = Substatus_V1_CreateTenantRequest()
  createTenant.name = "lease"
  let admin = try await client.call(
    Substatus_V1_TenantService.createTenant, createTenant, key: operatorKey
  ).adminKey
  var register = Substatus_V1_RegisterAppRequest()
  register.bundleID = "com.example.lease"
  let appID = try #require(
    try await client.call(Substatus_V1_AdminService.registerApp, register, key: admin).app?.appID)
  var setSecret = Substatus_V1_SetSharedSecretRequest()
  setSecret.appID = appID
  setSecret.sharedSecret = secret
  _ = try await client.call(Substatus_V1_AdminService.setSharedSecret, setSecret, key: admin)
  var product = Substatus_V1_Product()
  product.productID = "pro.monthly"
  product.type = .autoRenewable
  product.subscriptionGroupID = "pro"
  product.duration = "P1M"
  product.hasIntroductoryOffer = true
  var put = Substatus_V1_PutProductsRequest()
  put.appID = appID
  put.products = [product]
  _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)

  let now = Int64(Date().timeIntervalSince1970 * 1000)
  try await sim.control("POST", "/control/clock/set", ["now_ms": now - 180_000 + 3_000])
  var trialEnds: Set<Int64> = []
  for user in users {
    try await sim.control("POST", "/control/users", ["user_id": user, "environment": "sandbox"])
    let purchase = try await sim.control(
      "POST", "/control/apps/com.example.lease/users/\(user)/purchase",
      ["product_id": "pro.monthly", "offer": ["type": "introductory"]])
    var submit = Substatus_V1_SubmitReceiptRequest()
    submit.appID = appID
    submit.userID = user
    submit.receiptData = try #require(purchase["receipt"] as? String)
    let submitted = try await client.call(
      Substatus_V1_IngestService.submitReceipt, submit, key: admin)
    let group = try #require(submitted.groups.first { $0.subscriptionGroupID == "pro" })
    trialEnds.insert(group.expiresMs)
  }
  #expect(trialEnds.count == 1, "\(trialEnds)")
  let trialEnd = try #require(trialEnds.first)
  try await sim.control("POST", "/control/clock/advance", ["minutes": 4])
  _ = try await blocking { setup.stop() }
  // The trial's end is on the real clock (the simulator's time scale is 0, the daemons read wall time).
  #expect(await waitUntil(timeout: .seconds(600), every: .milliseconds(50)) { Int64(Date().timeIntervalSince1970 * 1000) > trialEnd + 100 })
  let db = try PGConnection(conninfo: url)
  let due = try db.run(
    "UPDATE receipts SET next_due_ms = $1", [.int(Int64(Date().timeIntervalSince1970 * 1000))])
  #expect(due == users.count)
  return (appID, admin, trialEnd)
}

/// Waits until every user's subscription shows the renewal through `client`.
private func waitForRenewals(
  _ client: Client, appID: String, admin: String, users: [String], trialEnd: Int64
) async throws -> Bool {
  var pending = Set(users)
  return try await waitUntil(timeout: .seconds(60), every: .milliseconds(200)) {
    for user in pending {
      var status = Substatus_V1_GetStatusRequest()
      status.appID = appID
      status.userID = user
      status.environment = .sandbox
      let group = try await client.call(Substatus_V1_StatusService.getStatus, status, key: admin)
        .groups.first { $0.subscriptionGroupID == "pro" }
      if let group, group.expiresMs == trialEnd + 300_000, !group.inTrial { pending.remove(user) }
    }
    return pending.isEmpty
  }
}

/// "refreshed" counts of an instance's batch log lines.
private func refreshedCount(_ log: String) -> Int {
  log.split(separator: "\n").filter { $0.contains("receipt refresh batch") }.reduce(0) { sum, line in
    guard let range = line.range(of: "\"refreshed\":") else { return sum }
    return sum + (Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0)
  }
}

/// Kills and reaps a child the test did not stop already (a reaped pid is left alone).
private func killIfRunning(_ pid: pid_t) {
  var status: Int32 = 0
  guard waitpid(pid, &status, WNOHANG) == 0 else { return }
  kill(pid, SIGKILL)
  waitForExit(pid)
}

private func verifyReceiptURLs(_ sim: Simulator) -> [String] {
  [
    "--verify-receipt-production-url", "http://\(sim.address)/production/verifyReceipt",
    "--verify-receipt-sandbox-url", "http://\(sim.address)/sandbox/verifyReceipt",
  ]
}

/// Background receipt refresh with two substatusd on one PostgreSQL database: each due receipt is
/// claimed by one instance (a lease), so Apple sees one verification per due receipt; a receipt
/// leased by an instance that dies is refreshed by the other once the lease has expired.
@Suite("receipt refresh shared by substatusd instances on one PostgreSQL database", .serialized)
struct RefreshLeaseEndToEndTests {
  @Test func twoInstancesVerifyEachDueReceiptOnce() async throws {
    let sim = try await blocking { try Simulator() }
    defer { sim.stop() }
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let masterKey = MasterKey.generate().hexEncoded
    let users = (0..<12).map { "user\($0)" }
    let (appID, admin, trialEnd) = try await setUpDueSubscribers(
      sim, url: url, masterKey: masterKey, users: users)
    let submitted = try await sim.sandboxVerifications()
    #expect(submitted == users.count)
    // A slow App Store: each batch takes a while, and the other instance claims the next one.
    try await sim.control(
      "POST", "/control/faults", ["environment": "sandbox", "latency_ms": 200])

    // Two instances refresh every 0.2 s, in small batches, so that they share the due receipts.
    let refresh =
      verifyReceiptURLs(sim) + [
        "--refresh-interval", "0.2", "--refresh-lease", "60", "--refresh-batch-size", "2",
      ]
    let (a, b) = try await blocking {
      (
        try Instance(store: url, masterKey: masterKey, extraArguments: refresh),
        try Instance(store: url, masterKey: masterKey, extraArguments: refresh)
      )
    }
    defer {
      killIfRunning(a.pid)
      killIfRunning(b.pid)
    }
    let client = try Client(b.grpc)
    defer { client.close() }
    let renewed = try await waitForRenewals(
      client, appID: appID, admin: admin, users: users, trialEnd: trialEnd)
    #expect(renewed, "renewals not seen:\nA:\n\(a.log)\nB:\n\(b.log)")
    // Give both a few more ticks: nothing is verified twice.
    try await Task.sleep(for: .seconds(2))
    let refreshes = try await sim.sandboxVerifications() - submitted
    let (aStatus, bStatus) = try await blocking { (a.stop(), b.stop()) }
    #expect(aStatus == 0 && bStatus == 0)
    let (byA, byB) = (refreshedCount(a.log), refreshedCount(b.log))
    #expect(refreshes == users.count, "\(refreshes) verifications for \(users.count) due receipts")
    #expect(byA + byB == users.count, "refreshed by A \(byA), by B \(byB)")
    #expect(byA > 0 && byB > 0, "one instance did all: A \(byA), B \(byB)")
    print(
      "two instances, \(users.count) due receipts: \(refreshes) verifyReceipt calls; refreshed by A \(byA), by B \(byB)"
    )
  }

  @Test func receiptsLeasedByAnInstanceThatDiesAreRefreshedByAnotherAfterTheLease() async throws {
    let sim = try await blocking { try Simulator() }
    defer { sim.stop() }
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let masterKey = MasterKey.generate().hexEncoded
    let leaseSeconds: Int64 = 6
    let refresh =
      verifyReceiptURLs(sim) + ["--refresh-interval", "0.2", "--refresh-lease", "\(leaseSeconds)"]
    let users = (0..<4).map { "user\($0)" }
    let (appID, admin, trialEnd) = try await setUpDueSubscribers(
      sim, url: url, masterKey: masterKey, users: users)
    let submitted = try await sim.sandboxVerifications()

    // Apple hangs: A claims the due receipts and its first verifications never come back; A is
    // killed while it holds the lease.
    try await sim.control("POST", "/control/faults", ["environment": "sandbox", "latency_ms": 20_000])
    let a = try await blocking { try Instance(store: url, masterKey: masterKey, extraArguments: refresh) }
    defer { killIfRunning(a.pid) }
    _ = try await waitUntil(timeout: .seconds(30), every: .milliseconds(20)) {
      try await sim.sandboxVerifications() != submitted
    }
    _ = try await blocking { a.stop(SIGKILL) }
    let attemptsByA = try await sim.sandboxVerifications() - submitted
    #expect(attemptsByA >= 1, "A never verified:\n\(a.log)")
    try await sim.control("DELETE", "/control/faults")
    // All four are A's until the lease ends.
    let db = try PGConnection(conninfo: url)
    let leases = try db.query("SELECT next_due_ms FROM receipts").map { $0.int(0) }
    #expect(leases.count == users.count)
    let leaseEnd = try #require(leases.first)
    #expect(Set(leases) == [leaseEnd], "\(leases)")
    let killedAt = Int64(Date().timeIntervalSince1970 * 1000)
    #expect(leaseEnd > killedAt, "the lease ended before the test could check it")

    // B starts, finds nothing due until the lease ends, then refreshes all four.
    let b = try await blocking { try Instance(store: url, masterKey: masterKey, extraArguments: refresh) }
    defer { killIfRunning(b.pid) }
    let clientB = try Client(b.grpc)
    defer { clientB.close() }
    let firstByB: Int64? = try await waitForValue(timeout: .seconds(60), every: .milliseconds(20)) {
      try await sim.sandboxVerifications() > submitted + attemptsByA ? Int64(Date().timeIntervalSince1970 * 1000) : nil
    }
    let taken = try #require(firstByB, "B never refreshed:\n\(b.log)")
    #expect(taken >= leaseEnd, "B verified \(leaseEnd - taken) ms before A's lease ended")
    let renewed = try await waitForRenewals(
      clientB, appID: appID, admin: admin, users: users, trialEnd: trialEnd)
    #expect(renewed, "renewals not seen through B:\n\(b.log)")
    try await Task.sleep(for: .seconds(1))
    let byB = try await sim.sandboxVerifications() - submitted - attemptsByA
    #expect(byB == users.count, "B verified \(byB) times for \(users.count) receipts")
    let bStatus = try await blocking { b.stop() }
    #expect(bStatus == 0)
    #expect(refreshedCount(b.log) == users.count)
    print(
      "lease takeover: A killed holding \(users.count) receipts (\(attemptsByA) in flight); B took them \(taken - killedAt) ms after the kill, \(taken - leaseEnd) ms after the lease's end (lease \(leaseSeconds) s)"
    )
  }
}
