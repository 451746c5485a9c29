import Foundation
import HTTPServer
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire
import Testing

@testable import SubstatusService

/// DeleteUser and DeleteProducts through the service (issue 20): erasure in every environment,
/// the notification data of the user's subscriptions, the audit log without the id, and a later
/// notification handled as for a user never seen.
@Suite struct ErasureServiceTests {
  static let user = "gil-erase-me"
  static let secret = ReceiptRulesServiceTests.secret
  static let t0 = ReceiptRulesServiceTests.t0
  static let day = ReceiptRulesServiceTests.day

  static func postV1(_ h: Harness, _ app: String, type: String, _ elements: [String]) async -> Int {
    let body = """
      {"notification_type":"\(type)","password":"\(secret)","environment":"Sandbox",
       "unified_receipt":{"status":0,"environment":"Sandbox","latest_receipt_info":[\(elements.joined(separator: ","))]}}
      """
    return await h.service.httpRouter().respond(
      to: HTTPRequest(method: "POST", path: "/v1/apps/\(app)/apple/notifications", body: Array(body.utf8))
    ).status
  }

  @Test func deleteUserErasesEveryEnvironmentAndTheUnclaimedNotificationData() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = app
      secret.sharedSecret = Self.secret
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      let (t0, day) = (Self.t0, Self.day)
      let first = ReceiptRulesServiceTests.element("s1", original: "s1", purchase: t0 - 40 * day, expires: t0 - 10 * day)
      let renewal = ReceiptRulesServiceTests.element("s2", original: "s1", purchase: t0 - 10 * day, expires: t0 + 20 * day)

      // Apple's notification arrives before the user submitted the subscription: kept unclaimed.
      #expect(await Self.postV1(h, app, type: "INITIAL_BUY", [first]) == 200)
      let unclaimed = UserKey(appId: app, environment: .sandbox, userId: "apple:s1")
      #expect(try await h.service.store.history(of: unclaimed).transactions.count == 1)

      // The user's receipt (sandbox) and an import in production.
      var receipt = Substatus_V1_ImportReceiptResponseRequest()
      receipt.appID = app
      receipt.userID = Self.user
      receipt.verifyReceiptResponseJson = Array(
        #"{"status":0,"environment":"Sandbox","latest_receipt_info":[\#(first),\#(renewal)]}"#.utf8)
      _ = try await h.call(Substatus_V1_IngestService.importReceiptResponse, receipt, key: admin)
      var production = Substatus_V1_ImportTransactionsRequest()
      production.appID = app
      production.userID = Self.user
      var t = Substatus_V1_Transaction()
      t.transactionID = "p1"
      t.productID = "lifetime"
      t.purchaseDateMs = t0 - day
      production.transactions = [t]
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, production, key: admin)
      // Another user keeps everything.
      receipt.userID = "other"
      _ = try await h.call(Substatus_V1_IngestService.importReceiptResponse, receipt, key: admin)

      var delete = Substatus_V1_DeleteUserRequest()
      delete.appID = app
      delete.userID = Self.user
      let erased = try await h.call(Substatus_V1_AdminService.deleteUser, delete, key: admin)
      #expect(erased.historiesErased == 2)  // sandbox and production; "apple:s1" is shared with "other"
      #expect(erased.transactionsErased == 3)
      #expect(erased.userIDHash == "sha256:" + Hex.encode(SHA256.hash(Self.user)))
      for environment in SubscriptionDomain.Environment.allCases {
        let key = UserKey(appId: app, environment: environment, userId: Self.user)
        #expect(try await h.service.store.history(of: key).transactions.isEmpty)
      }
      #expect(try await h.statusResponse(app, "other", key: admin).entitlements.count == 1)

      // The audit log names the erasure by the hash, never the id.
      let audit = try await h.service.store.auditLog(tenantId: try await h.service.store.app(id: app).tenantId, page: PageRequest(size: 100)).items
      let entry = try #require(audit.first { $0.action == "DeleteUser" })
      #expect(entry.resource == "apps/\(app)/users/\(erased.userIDHash)")
      #expect(!audit.contains { "\($0)".contains(Self.user) })

      // A later notification of the user's subscription is handled as for a user never seen.
      #expect(await Self.postV1(h, app, type: "DID_RENEW", [first, renewal]) == 200)
      #expect(try await h.service.store.users(appId: app, environment: .sandbox, originalTransactionId: "s1") == ["apple:s1", "other"])
      #expect(try await h.statusResponse(app, Self.user, key: admin).groups.allSatisfy { $0.state == .neverSubscribed })
    }
  }

  @Test func unclaimedDataOfTheUsersOwnSubscriptionIsErasedToo() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = app
      secret.sharedSecret = Self.secret
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      let element = ReceiptRulesServiceTests.element("s1", original: "s1", purchase: Self.t0 - Self.day, expires: Self.t0 + Self.day)
      #expect(await Self.postV1(h, app, type: "INITIAL_BUY", [element]) == 200)
      var receipt = Substatus_V1_ImportReceiptResponseRequest()
      receipt.appID = app
      receipt.userID = Self.user
      receipt.verifyReceiptResponseJson = Array(#"{"status":0,"environment":"Sandbox","latest_receipt_info":[\#(element)]}"#.utf8)
      _ = try await h.call(Substatus_V1_IngestService.importReceiptResponse, receipt, key: admin)
      var delete = Substatus_V1_DeleteUserRequest()
      delete.appID = app
      delete.userID = Self.user
      let erased = try await h.call(Substatus_V1_AdminService.deleteUser, delete, key: admin)
      #expect(erased.historiesErased == 2)
      #expect(try await h.service.store.users(appId: app, environment: .sandbox, originalTransactionId: "s1").isEmpty)
      // Erasing again is safe and erases nothing; a bad id is INVALID_ARGUMENT naming it.
      #expect(try await h.call(Substatus_V1_AdminService.deleteUser, delete, key: admin).historiesErased == 0)
      delete.userID = ""
      let error = await expectStatus(.invalidArgument) { _ = try await h.call(Substatus_V1_AdminService.deleteUser, delete, key: admin) }
      #expect(error?.fieldViolations.map(\.field) == ["user_id"])
    }
  }

  @Test func deleteProductsKeepsHistoryAndEvaluatesThemAsUnknown() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var put = Substatus_V1_PutEntitlementsRequest()
      put.appID = app
      var premium = Substatus_V1_EntitlementDefinition()
      premium.entitlementID = "premium"
      premium.productIDs = ["lifetime", "premium.monthly"]
      put.entitlements = [premium]
      _ = try await h.call(Substatus_V1_AdminService.putEntitlements, put, key: admin)
      var production = Substatus_V1_ImportTransactionsRequest()
      production.appID = app
      production.userID = "u"
      var t = Substatus_V1_Transaction()
      t.transactionID = "l1"
      t.productID = "lifetime"
      t.purchaseDateMs = Self.t0 - Self.day
      production.transactions = [t]
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, production, key: admin)
      var status = Substatus_V1_GetStatusRequest()
      status.appID = app
      status.userID = "u"
      #expect(try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin).namedEntitlements.map(\.active) == [true])

      var delete = Substatus_V1_DeleteProductsRequest()
      delete.appID = app
      delete.productIDs = ["lifetime", "nope"]
      #expect(try await h.call(Substatus_V1_AdminService.deleteProducts, delete, key: admin).deletedProductIDs == ["lifetime"])
      // Rule 2: a product the catalog lacks (and without a subscription group) is ignored.
      let after = try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin)
      #expect(after.entitlements.isEmpty)
      #expect(after.namedEntitlements.map(\.active) == [false])
      var history = Substatus_V1_GetTransactionHistoryRequest()
      history.appID = app
      history.userID = "u"
      #expect(try await h.call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin).transactions.map(\.transactionID) == ["l1"])
      var list = Substatus_V1_ListEntitlementsRequest()
      list.appID = app
      #expect(try await h.call(Substatus_V1_AdminService.listEntitlements, list, key: admin).entitlements.first?.productIDs == ["premium.monthly"])
      delete.productIDs = []
      await expectStatus(.invalidArgument) { _ = try await h.call(Substatus_V1_AdminService.deleteProducts, delete, key: admin) }
    }
  }
  /// A notification routed to a stored user who is erased before its write (the store decides in
  /// the write's transaction): the user stays erased and the data is kept under the pseudo-user
  /// of its original transaction, exactly as had the erasure come first.
  @Test func aNotificationForAUserErasedBeforeItsWriteIsKeptUnderThePseudoUser() async throws {
    try await withService { h in
      let (_, app) = try await h.makeTenantWithApp()
      let (t0, day) = (Self.t0, Self.day)
      func transaction(_ id: String, purchase: Int64) -> SubscriptionDomain.Transaction {
        SubscriptionDomain.Transaction(
          transactionId: id, originalTransactionId: "s1", productId: "premium.monthly",
          subscriptionGroupIdentifier: "g1", purchaseDate: purchase, expiresDate: purchase + 30 * day,
          environment: .sandbox)
      }
      let user = UserKey(appId: app, environment: .sandbox, userId: Self.user)
      _ = try await h.service.store.ingest(
        [UserPurchases(user: user, transactions: [transaction("s1", purchase: t0 - 40 * day)])], atMs: t0)
      let updates = try await h.service.routeByOriginalTransaction(
        appID: app, environment: .sandbox, transactions: [transaction("s2", purchase: t0 - 10 * day)], renewalInfos: [])
      #expect(updates.map(\.user) == [user])
      #expect(updates.map(\.onlyIfStored) == [true])

      _ = try await h.service.store.deleteUsers(appId: app, userIds: [Self.user])
      let written = try #require(
        try await h.service.applyNotification(appID: app, id: "v2:erased-meanwhile", receivedMs: t0, updates: updates))
      #expect(written.erasedMeanwhile == [user])
      #expect(written.transactionsWritten == 1)
      #expect(try await h.service.store.history(of: user) == UserHistory(user: user))
      let unclaimed = UserKey(appId: app, environment: .sandbox, userId: "apple:s1")
      #expect(try await h.service.store.history(of: unclaimed).transactions.map(\.transactionId) == ["s2"])
      // Applied once: Apple's retry of the same notification is a duplicate.
      #expect(try await h.service.applyNotification(appID: app, id: "v2:erased-meanwhile", receivedMs: t0, updates: updates) == nil)
    }
  }
}
