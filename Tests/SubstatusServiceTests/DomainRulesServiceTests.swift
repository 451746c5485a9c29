import AppStoreSignedData
import Foundation
import HTTPServer
import SubscriptionDomain
import SubscriptionStorage
import SubstatusJSON
import SubstatusWire
import Testing
@testable import SubstatusService

/// A signed-data payload with some fields replaced (`nil` removes one).
func replacing(_ payload: JSONValue, _ changes: [String: JSONValue?]) -> JSONValue {
  guard case .object(var object) = payload else { return payload }
  for (key, value) in changes { object[key] = value }
  return .object(object)
}

extension Harness {
  func report(_ app: String, key: String, asOf: Int64 = 0) async throws -> Substatus_V1_Report {
    var request = Substatus_V1_GetReportRequest()
    request.appID = app
    request.environment = .sandbox
    request.asOfMs = asOf
    return try #require(try await call(Substatus_V1_ReportService.getReport, request, key: key).report)
  }

  func statusResponse(_ app: String, _ user: String, key: String, asOf: Int64 = 0) async throws
    -> Substatus_V1_GetStatusResponse
  {
    var request = Substatus_V1_GetStatusRequest()
    request.appID = app
    request.userID = user
    request.environment = .sandbox
    request.asOfMs = asOf
    return try await call(Substatus_V1_StatusService.getStatus, request, key: key)
  }

  func introReason(_ app: String, _ user: String, _ product: String, key: String, asOf: Int64) async throws
    -> Substatus_V1_EligibilityReason?
  {
    var query = Substatus_V1_EligibilityQuery()
    query.userID = user
    query.productIDs = [product]
    var request = Substatus_V1_CheckEligibilityRequest()
    request.appID = app
    request.environment = .sandbox
    request.asOfMs = asOf
    request.queries = [query]
    return try await call(Substatus_V1_EligibilityService.checkEligibility, request, key: key)
      .users.first?.products.first?.introductory?.reason
  }
}

/// Rules 12, 15, 16 and 17 through the service: signed data submitted by the app, V2
/// notifications posted to the HTTP endpoint, answers from GetStatus, CheckEligibility, GetReport.
@Suite struct DomainRulesServiceTests {
  let t0 = TestApple.t0
  let day = TestApple.day

  /// `premium.yearly` bought 30 days ago; upgraded 2 days ago to `premium.monthly`.
  func upgradeStory(_ apple: TestApple, original: String) -> (yearly: JSONValue, monthly: JSONValue) {
    let yearly = TestApple.transaction(
      id: original, product: "premium.yearly", purchase: t0 - 30 * day, expires: t0 + 335 * day)
    let monthly = TestApple.transaction(
      id: original + "1", original: original, purchase: t0 - 2 * day, expires: t0 + 28 * day)
    return (yearly, monthly)
  }

  @Test("rule 12: an upgrade notification carrying only the new transaction ends the old period")
  func upgradeByNotification() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      let (yearly, monthly) = upgradeStory(apple, original: "7000")
      _ = try await h.submitSigned(app, "ann", key: admin, transactions: [try apple.sign(yearly)])
      let upgrade = TestApple.notification(
        "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", signedTransaction: try apple.sign(monthly), status: 1)
      #expect(await h.notify(app, signedPayload: try apple.sign(upgrade)).0 == 200)
      let now = try await h.statusResponse(app, "ann", key: admin)
      let group = try #require(now.groups.first { $0.subscriptionGroupID == "20001001" })
      #expect(group.state == .active)
      #expect(group.productID == "premium.monthly")
      #expect(now.entitlements.map(\.productID) == ["premium.monthly"])
      // The monthly lapsed: nothing entitles, the yearly does not come back.
      let later = try await h.statusResponse(app, "ann", key: admin, asOf: t0 + 40 * day)
      #expect(later.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .expired)
      #expect(later.entitlements.isEmpty)
      #expect(try await h.introReason(app, "ann", "premium.yearly", key: admin, asOf: t0 + 40 * day) == .lapsedNoIntroUsed)
      #expect(try await h.introReason(app, "ann", "premium.yearly", key: admin, asOf: t0) == .activeSubscription)
    }
  }

  @Test("rule 12: the old transaction re-submitted with isUpgraded never entitles")
  func upgradedResubmitted() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let (yearly, monthly) = upgradeStory(apple, original: "7100")
      let upgraded = replacing(yearly, ["isUpgraded": .bool(true), "signedDate": .integer(Int(t0 - 100))])
      let answer = try await h.submitSigned(
        app, "bob", key: admin, transactions: [try apple.sign(yearly), try apple.sign(monthly)])
      #expect(answer.entitlements.map(\.productID) == ["premium.monthly"])
      let resubmitted = try await h.submitSigned(app, "bob", key: admin, transactions: [try apple.sign(upgraded)])
      #expect(resubmitted.transactionResults.map(\.outcome) == [.updated])
      #expect(resubmitted.entitlements.map(\.productID) == ["premium.monthly"])
      let later = try await h.statusResponse(app, "bob", key: admin, asOf: t0 + 40 * day)
      #expect(later.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .expired)
      #expect(later.entitlements.isEmpty)
      // Only the old transaction, marked upgraded: nothing entitles even inside its period.
      _ = try await h.submitSigned(app, "carl", key: admin, transactions: [try apple.sign(upgraded)])
      let alone = try await h.statusResponse(app, "carl", key: admin)
      #expect(alone.entitlements.isEmpty)
      #expect(alone.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .expired)
    }
  }

  /// A family member's shared subscription (own original transaction id).
  func shared(_ id: String, revocation: Int64? = nil, revocationType: String? = nil) -> JSONValue {
    var changes: [String: JSONValue?] = ["inAppOwnershipType": .string("FAMILY_SHARED")]
    if let revocationType { changes["revocationType"] = .string(revocationType) }
    return replacing(TestApple.transaction(id: id, revocation: revocation), changes)
  }

  @Test("rule 15: a REVOKE without revocationDate ends a family member's access at its signedDate")
  func revokeWithoutRevocationDate() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      _ = try await h.submitSigned(app, "kid", key: admin, transactions: [try apple.sign(shared("8000"))])
      #expect(try await h.statusResponse(app, "kid", key: admin).entitlements.map(\.productID) == ["premium.monthly"])
      let revoke = TestApple.notification("REVOKE", signedTransaction: try apple.sign(shared("8000")), status: 5)
      #expect(await h.notify(app, signedPayload: try apple.sign(revoke)).0 == 200)
      let after = try await h.statusResponse(app, "kid", key: admin)
      #expect(after.entitlements.isEmpty)
      #expect(after.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .revoked)
      // Before the notification's signedDate the member was still entitled.
      let before = try await h.statusResponse(app, "kid", key: admin, asOf: t0 - 501)
      #expect(before.entitlements.map(\.productID) == ["premium.monthly"])
      let report = try await h.report(app, key: admin)
      #expect(report.familyAccessRevoked == 1 && report.refunded == 0)
    }
  }

  @Test("rule 16: own and family-shared subscriptions in one group entitle both products")
  func ownAndShared() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let own = TestApple.transaction(id: "9000", product: "premium.monthly")
      let family = replacing(
        TestApple.transaction(id: "9100", product: "premium.yearly", expires: t0 + 300 * day),
        ["inAppOwnershipType": .string("FAMILY_SHARED")])
      let answer = try await h.submitSigned(app, "dan", key: admin, transactions: [try apple.sign(own), try apple.sign(family)])
      #expect(answer.entitlements.map(\.productID) == ["premium.monthly", "premium.yearly"])
      let group = try #require(answer.groups.first { $0.subscriptionGroupID == "20001001" })
      #expect(group.productID == "premium.yearly")
      #expect(group.ownership == .familyShared)
      #expect(try await h.report(app, key: admin).familySharedBeneficiaries == 1)
    }
  }

  @Test("rule 17: a V2 REVOKE that carries a refund is a refund in GetReport")
  func revokeCarryingRefund() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      _ = try await h.submitSigned(app, "eve", key: admin, transactions: [try apple.sign(shared("8100"))])
      _ = try await h.submitSigned(app, "fay", key: admin, transactions: [try apple.sign(shared("8200"))])
      let refund = shared("8100", revocation: t0 - 600, revocationType: "REFUND_FULL")
      let removal = shared("8200", revocation: t0 - 600)
      for (payload, uuid) in [(refund, "r1"), (removal, "r2")] {
        let revoke = TestApple.notification("REVOKE", uuid: uuid, signedTransaction: try apple.sign(payload), status: 5)
        #expect(await h.notify(app, signedPayload: try apple.sign(revoke)).0 == 200)
      }
      let report = try await h.report(app, key: admin)
      #expect(report.refunded == 1)
      #expect(report.familyAccessRevoked == 1)
    }
  }
}

/// Rule 17 for V1 notifications and rule 20 on every verifyReceipt path, through the service.
@Suite struct ReceiptRulesServiceTests {
  static let secret = "0123456789abcdef0123456789abcdef"
  static let t0 = TestApple.t0
  static let day = TestApple.day

  /// A receipt transaction of `premium.monthly` (V1 field names).
  static func element(_ id: String, original: String, purchase: Int64, expires: Int64, cancelled: Int64? = nil, family: Bool = false)
    -> String
  {
    """
    {"product_id":"\(family ? "family.monthly" : "premium.monthly")","transaction_id":"\(id)","original_transaction_id":"\(original)",
     "purchase_date_ms":"\(purchase)","expires_date_ms":"\(expires)",\(cancelled.map { "\"cancellation_date_ms\":\"\($0)\",\"cancellation_reason\":\"0\"," } ?? "")
     "in_app_ownership_type":"\(family ? "FAMILY_SHARED" : "PURCHASED")"}
    """
  }

  @Test("rule 17: a V1 REVOKE does not relabel the user's older refund as a family removal")
  func v1RevokeKeepsOlderRefund() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = app
      secret.sharedSecret = Self.secret
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      let (t0, day) = (Self.t0, Self.day)
      let refunded = Self.element("p1", original: "p1", purchase: t0 - 60 * day, expires: t0 - 30 * day, cancelled: t0 - 59 * day)
      let shared = Self.element("f1", original: "f1", purchase: t0 - 10 * day, expires: t0 + 20 * day, family: true)
      // The receipt first (the refund), then Apple's V1 REVOKE with the family share revoked.
      var importRequest = Substatus_V1_ImportReceiptResponseRequest()
      importRequest.appID = app
      importRequest.userID = "gil"
      importRequest.verifyReceiptResponseJson = Array(
        #"{"status":0,"environment":"Sandbox","latest_receipt_info":[\#(refunded),\#(shared)]}"#.utf8)
      _ = try await h.call(Substatus_V1_IngestService.importReceiptResponse, importRequest, key: admin)
      let revokedShare = Self.element(
        "f1", original: "f1", purchase: t0 - 10 * day, expires: t0 + 20 * day, cancelled: t0 - day, family: true)
      let body = """
        {"notification_type":"REVOKE","password":"\(Self.secret)","environment":"Sandbox",
         "unified_receipt":{"status":0,"environment":"Sandbox","latest_receipt_info":[\(refunded),\(revokedShare)]}}
        """
      let response = await h.service.httpRouter().respond(
        to: HTTPRequest(method: "POST", path: "/v1/apps/\(app)/apple/notifications", body: Array(body.utf8)))
      #expect(response.status == 200)
      let report = try await h.report(app, key: admin)
      #expect(report.refunded == 1)
      #expect(report.familyAccessRevoked == 1)
      #expect(try await h.statusResponse(app, "gil", key: admin).entitlements.isEmpty)
    }
  }

  /// A modern verifyReceipt body with `status`: a lapsed monthly subscription.
  static func expiredBody(status: Int, environment: String = "Sandbox") -> String {
    let (t0, day) = (t0, day)
    return """
      {"status":\(status),"environment":"\(environment)","receipt":{"bundle_id":"com.example.app","in_app":[]},
       "latest_receipt_info":[\(element("e1", original: "e1", purchase: t0 - 60 * day, expires: t0 - 30 * day)),
        \(element("e2", original: "e1", purchase: t0 - 30 * day, expires: t0 - day))],
       "pending_renewal_info":[{"original_transaction_id":"e1","product_id":"premium.monthly","auto_renew_status":"0"}],
       "latest_receipt":"latest"}
      """
  }

  @Test("rule 20: ImportReceiptResponse stores a 21006 body like status 0")
  func importExpired() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var request = Substatus_V1_ImportReceiptResponseRequest()
      request.appID = app
      request.userID = "hal"
      request.verifyReceiptResponseJson = Array(Self.expiredBody(status: 21006).utf8)
      let imported = try await h.call(Substatus_V1_IngestService.importReceiptResponse, request, key: admin)
      #expect(imported.transactionCount == 2 && imported.storedTransactionCount == 2)
      #expect(imported.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .expired)
      #expect(try await h.introReason(app, "hal", "premium.monthly", key: admin, asOf: 0) == .lapsedNoIntroUsed)
    }
  }

  @Test("rule 20: SubmitReceipt stores Apple's 21006 answer like status 0")
  func submitExpired() async throws {
    let fake = FakeAppStore { _ in (200, ReceiptRulesServiceTests.expiredBody(status: 21006)) }
    let client = VerifyReceiptClient(
      productionURL: URL(string: "http://apple.invalid/production")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
      maxAttempts: 1, poster: fake)
    try await withService(verifyReceipt: client) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = app
      secret.sharedSecret = Self.secret
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      var request = Substatus_V1_SubmitReceiptRequest()
      request.appID = app
      request.userID = "ida"
      request.receiptData = "ios6-receipt"
      let submitted = try await h.call(Substatus_V1_IngestService.submitReceipt, request, key: admin)
      #expect(submitted.transactionCount == 2)
      #expect(submitted.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .expired)
      #expect(try await h.statusResponse(app, "ida", key: admin).groups.first { $0.subscriptionGroupID == "20001001" }?.expiresMs == Self.t0 - Self.day)
    }
  }

  @Test("rule 20: the receipt refresher stores a 21006 answer and keeps the receipt")
  func refreshExpired() async throws {
    let fake = FakeAppStore { _ in (200, ReceiptRulesServiceTests.expiredBody(status: 21006, environment: "Production")) }
    let w = RefreshWorld(fake: fake)
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let summary = try #require(await w.refresher().refreshDue())
    #expect(summary.outcomes == [.refreshed: 1])
    let history = try await w.store.history(of: UserKey(appId: "app1", environment: .production, userId: "u1"))
    #expect(history.transactions.map(\.transactionId) == ["e1", "e2"])
  }
}
