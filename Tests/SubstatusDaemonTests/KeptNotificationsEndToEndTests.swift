import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// Rule 25's kept notifications with appstore-sim, substatusd and the `substatus` CLI as
/// processes: the V2 notifications Apple sent are listed whole by `substatus notification list`
/// (filtered by type, only for the app's own tenant), and `--keep-notifications-days` prunes them
/// once they are older, on the simulated clock substatusd follows.
@Suite(.serialized) struct KeptNotificationsEndToEndTests {
  @Test func notificationsAreListedByTheCLIAndPrunedAfterTheRetention() async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("kept-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
    defer { sim.stop() }
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000) - 1_000])
    let daemon = try await RunningDaemon(
      extraArguments: sim.serverAPIArguments(rootCA: rootPath) + [
        "--clock-url", "http://\(sim.address)/control/clock", "--refresh-interval", "0", "--reconcile-interval", "0",
        "--keep-notifications-days", "1",
      ])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    func admin(_ name: String) async throws -> String {
      var tenant = Substatus_V1_CreateTenantRequest()
      tenant.name = name
      return try await client.call(Substatus_V1_TenantService.createTenant, tenant, key: daemon.operatorKey).adminKey
    }
    let key = try await admin("kept")
    let stranger = try await admin("stranger")
    func cli(_ arguments: [String], key: String) async throws -> (Int32, String, String) {
      try await run(try builtExecutable("substatus"), arguments + ["--addr", daemon.grpc, "--key", key, "--timeout", "10"])
    }
    let bundle = "com.example.kept"
    let (registered, out, err) = try await cli(["app", "register", "--bundle-id", bundle, "--apple-app-id", "6400000271"], key: key)
    #expect(registered == 0, "\(err)")
    let app = try #require(AppAccountTokenEndToEndTests.field(out, "app id"), "\(out)")
    try await client.linkServerAPI(
      of: sim, daemon: daemon, admin: key, appID: app, bundleID: bundle, appleAppID: 6_400_000_271, keyID: "KEPTKEY001")

    // A purchase at the App Store: Apple posts SUBSCRIBED, which substatusd keeps.
    _ = try await sim.post("/control/users", ["user_id": "kim", "environment": "production"])
    _ = try await sim.post("/control/apps/\(bundle)/users/kim/purchase", ["product_id": "pro.monthly"])
    try await sim.drain()

    let (listed, json, listErr) = try await cli(["notification", "list", app, "--json"], key: key)
    #expect(listed == 0, "\(listErr)")
    let response = try Substatus_V1_ListKeptNotificationsResponse(jsonString: json)
    let subscribed = try #require(response.notifications.first { $0.notificationType == "SUBSCRIBED" }, "\(json)")
    #expect(subscribed.signedPayload.split(separator: ".").count == 3)
    #expect(!subscribed.notificationUUID.isEmpty && subscribed.receivedMs > 0 && subscribed.environment == .production)
    let (_, table, _) = try await cli(["notification", "list", app], key: key)
    #expect(table.contains("SUBSCRIBED") && table.contains(subscribed.notificationUUID), "\(table)")
    let (_, none, _) = try await cli(["notification", "list", app, "--type", "REFUND", "--json"], key: key)
    #expect(try Substatus_V1_ListKeptNotificationsResponse(jsonString: none).notifications.isEmpty)
    // Another tenant's admin: NOT_FOUND, exit status non-zero, one line naming the status.
    let (refused, _, refusal) = try await cli(["notification", "list", app], key: stranger)
    #expect(refused != 0 && refusal.contains("NOT_FOUND"), "\(refusal)")
    // A usage error names the flag.
    let (usage, _, usageErr) = try await cli(["notification", "list", app, "--since", "yesterday"], key: key)
    #expect(usage != 0 && usageErr.contains("--since"), "\(usageErr)")

    // Two days later on the simulated clock the kept notifications are past the 1-day retention.
    _ = try await sim.post("/control/clock/advance", ["days": 2])
    let pruned = try await waitUntil(timeout: .seconds(30), every: .milliseconds(200)) {
      let (_, json, _) = try await cli(["notification", "list", app, "--json", "--until", String(subscribed.receivedMs + 1)], key: key)
      return try Substatus_V1_ListKeptNotificationsResponse(jsonString: json).notifications.isEmpty
    }
    #expect(pruned, "\(daemon.log.split(separator: "\n").filter { $0.contains("prune") })")
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }
}
