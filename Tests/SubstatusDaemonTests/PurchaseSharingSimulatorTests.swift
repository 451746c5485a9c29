import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// Purchase sharing with the App Store simulator (V2) and substatusd (on SQLite and on PostgreSQL),
/// both real processes: one
/// customer's StoreKit 2 purchase submitted by two accounts of the app under TRANSFER; Apple's
/// signed REFUND notification then reaches the current owner only.
@Suite(.serialized) struct PurchaseSharingSimulatorTests {
  @Test(arguments: TestStore.userLevel) func aTransferredSubscriptionsNotificationReachesOnlyItsCurrentOwner(store: TestStore)
    async throws
  {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-sharing-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let rootFile = directory.appendingPathComponent("sim-root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootFile])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(store: try await store.make(), extraArguments: ["--apple-root-ca", rootFile])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }

    let bundleID = "com.example.sharing"
    let appleAppID: Int64 = 6_400_000_078
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundleID, appleAppID: appleAppID)
    var policy = Substatus_V1_SetPolicyRequest()
    policy.appID = appID
    policy.policy = Substatus_V1_EligibilityPolicy()
    policy.policy?.purchaseSharing = .transfer
    policy.updateMask = ["purchase_sharing"]
    _ = try await client.call(Substatus_V1_AdminService.setPolicy, policy, key: admin)
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundleID, "apple_app_id": appleAppID, "shared_secret": "unused-by-v2",
        "notification_version": "v2", "notification_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications",
        "products": [["product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M"]],
      ])
    _ = try await sim.post("/control/users", ["user_id": "alice", "environment": "production"])
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000) - 1_000])
    _ = try await sim.post("/control/apps/\(bundleID)/users/alice/purchase", ["product_id": "pro.monthly"])
    try await sim.drain()

    // Alice's StoreKit 2 data, submitted by her first account, then restored under her second.
    let storeKit = try await sim.get("/control/apps/\(bundleID)/users/alice/signed-transactions")
    var submit = Substatus_V1_SubmitSignedTransactionsRequest()
    submit.appID = appID
    submit.signedTransactions = storeKit["signed_transactions"]?.arrayValue?.compactMap(\.stringValue) ?? []
    submit.signedRenewalInfos = storeKit["signed_renewal_info"]?.arrayValue?.compactMap(\.stringValue) ?? []
    try #require(!submit.signedTransactions.isEmpty)
    for user in ["alice-phone", "alice-work"] {
      submit.userID = user
      let submitted = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
      #expect(submitted.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active, "\(user)")
    }
    #expect(try await client.status(appID: appID, user: "alice-phone", environment: .production, key: admin)?.state == .neverSubscribed)
    #expect(try await client.status(appID: appID, user: "alice-work", environment: .production, key: admin)?.state == .active)

    // The events follow ownership: the first account's purchase, then one OWNERSHIP_TRANSFERRED
    // per account in the transfer's commit; no purchase event for the second account.
    func events(_ user: String) async throws -> [Substatus_V1_Event] {
      var request = Substatus_V1_ListEventsRequest()
      request.appID = appID
      request.userID = user
      request.limit = 1000
      return try await client.call(Substatus_V1_EventService.listEvents, request, key: admin).events
    }
    let phoneEvents = try await events("alice-phone")
    #expect(phoneEvents.map(\.type) == [.subscriptionStarted, .ownershipTransferred])
    let workEvents = try await events("alice-work")
    #expect(workEvents.map(\.type) == [.ownershipTransferred])
    for (event, before, after) in [
      (phoneEvents.last, Substatus_V1_SubscriptionState.active, Substatus_V1_SubscriptionState.neverSubscribed),
      (workEvents.last, .neverSubscribed, .active),
    ] {
      #expect(event?.previousUserID == "alice-phone" && event?.subscriptionGroupID == "pro")
      #expect(event?.stateBefore == before && event?.stateAfter == after)
      #expect(event?.originalTransactionID == phoneEvents.first?.originalTransactionID)
    }

    // A refund at the App Store: the signed REFUND is stored for alice-work only.
    _ = try await sim.post("/control/apps/\(bundleID)/users/alice/refund", ["group_id": "pro"])
    try await sim.drain()
    #expect(try await client.status(appID: appID, user: "alice-work", environment: .production, key: admin)?.state == .revoked)
    var history = Substatus_V1_GetTransactionHistoryRequest()
    history.appID = appID
    history.environment = .production
    history.userID = "alice-phone"
    let phone = try await client.call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin)
    #expect(!phone.transactions.isEmpty && phone.transactions.allSatisfy { $0.revocationDateMs == 0 })
    history.userID = "alice-work"
    let work = try await client.call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin)
    #expect(work.transactions.contains { $0.revocationDateMs > 0 })
    // The refund is an event of the owner only.
    let workAfterRefund = try await events("alice-work").map(\.type)
    #expect(workAfterRefund.first == .ownershipTransferred && workAfterRefund.contains(.refunded), "\(workAfterRefund)")
    #expect(try await events("alice-phone").map(\.type) == [.subscriptionStarted, .ownershipTransferred])
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }
}
