import Foundation
import SubstatusJSON
import SubstatusWire
import Testing

/// Apple's modern path as the App Store simulator plays it, against a real substatusd: V2
/// notifications only, so substatusd knows each subscriber by the pseudo-user of its original
/// transaction (`apple:<id>`). An upgrade ends the old product's period at once (rule 12), and a
/// lapsed subscriber whom the App Store offers a win-back offer is told so by CheckEligibility
/// (rule 19).
@Suite(.serialized) struct SimulatorLifecycleEndToEndTests {
  @Test func upgradeAndWinBackFromTheSimulatorsNotifications() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-life-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let rootFile = directory.appendingPathComponent("sim-root.pem").path
    // The simulated clock starts 40 days ago, so that its months end before (real) now.
    let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
    let startMs = nowMs - 40 * 86_400_000
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootFile, "--start-ms", String(startMs)])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", rootFile])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }

    let bundleID = "com.example.simlife"
    let appleAppID: Int64 = 6_400_000_078
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundleID, appleAppID: appleAppID)
    // The catalog: premium.monthly (level 1) is an upgrade from basic.yearly (level 2); the
    // simulator offers wb.half to lapsed premium subscribers.
    var basic = Substatus_V1_Product()
    basic.productID = "basic.yearly"
    basic.type = .autoRenewable
    basic.subscriptionGroupID = "pro"
    basic.duration = "P1Y"
    var premium = Substatus_V1_Product()
    premium.productID = "premium.monthly"
    premium.type = .autoRenewable
    premium.subscriptionGroupID = "pro"
    premium.duration = "P1M"
    premium.winBackOfferIDs = ["wb.half", "wb.free"]
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    put.products = [basic, premium]
    _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundleID, "apple_app_id": appleAppID, "shared_secret": "unused-by-v2",
        "notification_version": "v2", "notification_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications",
        "products": [
          ["product_id": "basic.yearly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1Y", "level": 2],
          [
            "product_id": "premium.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M",
            "level": 1, "win_back_offer_ids": ["wb.half"],
          ],
        ],
      ])
    for user in ["upgrader", "leaver"] {
      _ = try await sim.post("/control/users", ["user_id": user, "environment": "production"])
    }
    func pseudoUser(_ user: String) async throws -> String {
      let signed = try await sim.get("/control/apps/\(bundleID)/users/\(user)/signed-transactions")
      let id = try #require(signed["transactions"]?.arrayValue?.first?["originalTransactionId"]?.stringValue)
      return "apple:\(id)"
    }
    func status(_ user: String, asOf: Int64 = 0) async throws -> Substatus_V1_GetStatusResponse {
      var request = Substatus_V1_GetStatusRequest()
      request.appID = appID
      request.userID = user
      request.asOfMs = asOf
      return try await client.call(Substatus_V1_StatusService.getStatus, request, key: admin)
    }

    // The upgrader buys basic.yearly, and a day later upgrades to premium.monthly: Apple ends the
    // yearly at once (DID_CHANGE_RENEWAL_PREF/UPGRADE carries the new transaction).
    _ = try await sim.post("/control/apps/\(bundleID)/users/upgrader/purchase", ["product_id": "basic.yearly"])
    _ = try await sim.post("/control/clock/advance", ["days": 1])
    _ = try await sim.post("/control/apps/\(bundleID)/users/upgrader/change-product", ["product_id": "premium.monthly"])
    // The leaver buys premium.monthly and turns auto-renew off.
    _ = try await sim.post("/control/apps/\(bundleID)/users/leaver/purchase", ["product_id": "premium.monthly"])
    _ = try await sim.post("/control/apps/\(bundleID)/users/leaver/cancel-auto-renew", ["group_id": "pro"])
    try await sim.drain()
    let upgrader = try await pseudoUser("upgrader")
    let leaver = try await pseudoUser("leaver")

    // An hour after the upgrade: premium.monthly alone entitles; the yearly period ended.
    let afterUpgrade = try await status(upgrader, asOf: startMs + 86_400_000 + 3_600_000)
    let group = try #require(afterUpgrade.groups.first { $0.subscriptionGroupID == "pro" })
    #expect(group.state == .active)
    #expect(group.productID == "premium.monthly")
    #expect(afterUpgrade.entitlements.map(\.productID) == ["premium.monthly"])

    // 32 days on: the upgrader's premium month renewed; the leaver's month expired, and Apple's
    // EXPIRED notification's renewal info offers wb.half.
    _ = try await sim.post("/control/clock/advance", ["days": 32])
    try await sim.drain()
    let renewed = try await status(upgrader)
    #expect(renewed.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active)
    #expect(renewed.entitlements.map(\.productID) == ["premium.monthly"], "the upgraded yearly must not entitle")
    let lapsed = try await status(leaver)
    #expect(lapsed.groups.first { $0.subscriptionGroupID == "pro" }?.state == .expired)
    #expect(lapsed.entitlements.isEmpty)

    var check = Substatus_V1_CheckEligibilityRequest()
    check.appID = appID
    var query = Substatus_V1_EligibilityQuery()
    query.userID = leaver
    query.productIDs = ["premium.monthly"]
    var activeQuery = Substatus_V1_EligibilityQuery()
    activeQuery.userID = upgrader
    activeQuery.productIDs = ["premium.monthly"]
    check.queries = [query, activeQuery]
    let answers = try await client.call(Substatus_V1_EligibilityService.checkEligibility, check, key: admin).users
    let offers = try #require(answers.first?.products.first?.winBackOffers)
    #expect(offers.map(\.offerID) == ["wb.half", "wb.free"])
    #expect(offers.map(\.eligible) == [true, false])
    #expect(offers.map(\.reason) == [.winBackOffered, .winBackNotOffered])
    #expect(offers.first?.evidenceTransactionID == String(leaver.dropFirst("apple:".count)))
    // The active subscriber is offered none.
    #expect(answers.last?.products.first?.winBackOffers.allSatisfy { !$0.eligible } == true)
  }
}
