import AppStoreSignedData
import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusDaemon
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// The Apple Account behind an app user (docs/architecture.md rule 24), with substatusd (on SQLite
/// and on PostgreSQL) and appstore-sim as processes: the device's signed AppTransaction (from the simulator's app
/// download) is submitted; substatusd verifies it, links the account and fetches its whole history
/// from the simulator's App Store Server API by `appTransactionId`, so a purchase made elsewhere
/// reaches the user, and an intro offer the account never used is NEW_CUSTOMER_VERIFIED.
@Suite(.serialized) struct AppTransactionEndToEndTests {
  @Test(arguments: TestStore.userLevel)
  func submittedAppTransactionLinksTheAccountAndVerifiesNewCustomers(store: TestStore) async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("apptx-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(
      store: try await store.make(), extraArguments: sim.serverAPIArguments(rootCA: rootPath) + ["--refresh-interval", "0"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    func call<Req: ProtobufMessage, Res: ProtobufMessage>(
      _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
    ) async throws -> Res { try await client.call(method, request, key: key) }

    let bundle = "com.example.apptx"
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: 987_655)
    // Two groups with an introductory offer each.
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    for (id, group) in [("pro.monthly", "pro"), ("max.monthly", "max")] {
      var product = Substatus_V1_Product()
      product.productID = id
      product.type = .autoRenewable
      product.subscriptionGroupID = group
      product.duration = "P1M"
      product.hasIntroductoryOffer = true
      put.products.append(product)
    }
    _ = try await call(Substatus_V1_AdminService.putProducts, put, key: admin)
    try await client.linkServerAPI(
      of: sim, daemon: daemon, admin: admin, appID: appID, bundleID: bundle, appleAppID: 987_655, keyID: "APPTXKEY01")
    _ = try await sim.post("/control/clock/set", ["now_ms": Int64(Date().timeIntervalSince1970 * 1000)])

    // carol bought pro on a device that never told substatusd (her notification names no app user);
    // dan only downloaded the app; erin never submitted anything.
    for user in ["carol", "dan"] {
      _ = try await sim.post("/control/users", ["user_id": user, "environment": "production"])
    }
    let carolDownload = try await sim.post("/control/apps/\(bundle)/users/carol/app-download", ["original_version": "1.2"])
    _ = try await sim.post("/control/apps/\(bundle)/users/carol/purchase", ["product_id": "pro.monthly"])
    let danDownload = try await sim.post("/control/apps/\(bundle)/users/dan/app-download", [:])
    let carolJWS = try #require(carolDownload["signed_app_transaction"] as? String)
    let danJWS = try #require(danDownload["signed_app_transaction"] as? String)

    func intro(_ user: String, _ product: String) async throws -> Substatus_V1_EligibilityReason {
      var query = Substatus_V1_EligibilityQuery()
      query.userID = user
      query.productIDs = [product]
      var request = Substatus_V1_CheckEligibilityRequest()
      request.appID = appID
      request.queries = [query]
      let response = try await call(Substatus_V1_EligibilityService.checkEligibility, request, key: admin)
      return response.users.first?.products.first?.introductory?.reason ?? .unspecified
    }
    #expect(try await intro("u-dan", "pro.monthly") == .newCustomer)

    var submit = Substatus_V1_SubmitAppTransactionRequest()
    submit.appID = appID
    submit.userID = "u-carol"
    submit.signedAppTransaction = carolJWS
    let carol = try await call(Substatus_V1_IngestService.submitAppTransaction, submit, key: admin)
    #expect(carol.appTransactionID == carolDownload["app_transaction_id"] as? String)
    #expect(carol.environment == .production)
    #expect(carol.originalApplicationVersion == "1.2")
    #expect(carol.historyVerified)
    #expect(carol.transactionCount == 1)
    // Her purchase reached her through her Apple Account, stored with its appTransactionId.
    #expect(carol.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active)
    var history = Substatus_V1_GetTransactionHistoryRequest()
    history.appID = appID
    history.userID = "u-carol"
    let stored = try await call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin).transactions
    #expect(!stored.isEmpty && stored.allSatisfy { $0.appTransactionID == carol.appTransactionID })
    #expect(try await intro("u-carol", "pro.monthly") == .activeSubscription)
    #expect(try await intro("u-carol", "max.monthly") == .newCustomerVerified)

    submit.userID = "u-dan"
    submit.signedAppTransaction = danJWS
    let dan = try await call(Substatus_V1_IngestService.submitAppTransaction, submit, key: admin)
    #expect(dan.historyVerified && dan.transactionCount == 0)
    #expect(try await intro("u-dan", "pro.monthly") == .newCustomerVerified)
    #expect(try await intro("u-erin", "pro.monthly") == .newCustomer)

    // A paid app turned subscription: "legacy" for those who first got a version before 1.1 (dan
    // got 1.0, carol 1.2), whatever they bought.
    var entitlements = Substatus_V1_PutEntitlementsRequest()
    entitlements.appID = appID
    var legacy = Substatus_V1_EntitlementDefinition()
    legacy.entitlementID = "legacy"
    legacy.productIDs = ["max.monthly"]
    entitlements.entitlements = [legacy]
    _ = try await call(Substatus_V1_AdminService.putEntitlements, entitlements, key: admin)
    func legacyActive(_ user: String) async throws -> Substatus_V1_NamedEntitlement? {
      var request = Substatus_V1_GetStatusRequest()
      request.appID = appID
      request.userID = user
      return try await call(Substatus_V1_StatusService.getStatus, request, key: admin).namedEntitlements
        .first { $0.entitlementID == "legacy" }
    }
    #expect(try await legacyActive("u-dan")?.active == false)
    var setPolicy = Substatus_V1_SetPolicyRequest()
    setPolicy.appID = appID
    var policy = Substatus_V1_EligibilityPolicy()
    policy.paidAppEntitlementID = "legacy"
    policy.paidAppBefore = "1.1"
    setPolicy.policy = policy
    setPolicy.updateMask = ["paid_app_entitlement_id", "paid_app_before"]
    let app = try await call(Substatus_V1_AdminService.setPolicy, setPolicy, key: admin).app
    #expect(app?.policy?.paidAppBefore == "1.1")
    let danLegacy = try await legacyActive("u-dan")
    #expect(danLegacy?.active == true && danLegacy?.expiresMs == 0 && danLegacy?.transactionID == dan.appTransactionID)
    #expect(try await legacyActive("u-carol")?.active == false)
    #expect(try await legacyActive("u-erin")?.active == false)
    policy.paidAppBefore = "soon"
    setPolicy.policy = policy
    do {
      _ = try await call(Substatus_V1_AdminService.setPolicy, setPolicy, key: admin)
      Issue.record("a bad cutoff was accepted")
    } catch let error as RPCError {
      #expect(error.code == .invalidArgument && error.message.contains("paid_app_before"), "\(error.message)")
    }

    // A tampered AppTransaction is refused, naming the field and the reason.
    // (carol's payload under dan's header and signature)
    let (dans, carols) = (danJWS.split(separator: ".").map(String.init), carolJWS.split(separator: ".").map(String.init))
    submit.signedAppTransaction = dans[0] + "." + carols[1] + "." + dans[2]
    do {
      _ = try await call(Substatus_V1_IngestService.submitAppTransaction, submit, key: admin)
      Issue.record("a tampered AppTransaction was accepted")
    } catch let error as RPCError {
      #expect(error.code == .invalidArgument)
      #expect(error.message.contains("signed_app_transaction") && error.message.contains("INVALID_SIGNATURE"), "\(error.message)")
    }
    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    #expect(!log.contains("PRIVATE KEY"))
  }
}
