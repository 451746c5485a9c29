import Foundation
import Testing
import RPCCore
import SubscriptionDomain
import SubstatusWire
@testable import SubstatusService

@Suite struct ServiceFlowTests {
  @Test func adminFlowImportEligibilityStatusHistoryReport() async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()

      // A read key scoped to the app, a secret.
      var createKey = Substatus_V1_CreateApiKeyRequest()
      createKey.role = .read
      createKey.appIDs = [appID]
      let readKey = try await h.call(Substatus_V1_AdminService.createApiKey, createKey, key: admin)
      #expect(readKey.key.hasPrefix("sk_"))
      #expect(readKey.info?.role == .read)
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = appID
      secret.sharedSecret = "0123456789abcdef0123456789abcdef"
      let fingerprint = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin).fingerprint
      #expect(!fingerprint.isEmpty && !fingerprint.contains("0123456789abcdef"))

      // Import a verifyReceipt body.
      var importRequest = Substatus_V1_ImportReceiptResponseRequest()
      importRequest.appID = appID
      importRequest.userID = "user-1"
      importRequest.verifyReceiptResponseJson = Array(try fixture("verify_receipt_multi_group.json").utf8)
      let imported = try await h.call(Substatus_V1_IngestService.importReceiptResponse, importRequest, key: admin)
      #expect(imported.environment == .production)
      #expect(imported.transactionCount > 0)
      #expect(imported.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .active)

      // The answers equal the domain's for the same data.
      let body = try VerifyReceiptResponse(parsing: importRequest.verifyReceiptResponseJson)
      let catalog = Catalog(products: try Substatus_V1_PutProductsRequest(jsonString: try fixture("catalog.json")).products.enumerated().map {
        try Product(wire: $1, field: "products[\($0)]")
      })
      let now = h.world.now.withLock { $0 }
      let expected = SubscriptionEvaluator.evaluate(history: body.transactions, renewals: body.pendingRenewalInfo, catalog: catalog, at: now)
      let productIDs = ["premium.monthly", "premium.yearly", "premium.weekly", "pro.monthly", "family.monthly", "coins.100", "lifetime", "nope"]

      var check = Substatus_V1_CheckEligibilityRequest()
      check.appID = appID
      var q1 = Substatus_V1_EligibilityQuery()
      q1.userID = "user-1"
      q1.productIDs = productIDs
      var q2 = Substatus_V1_EligibilityQuery()
      q2.userID = "never-seen"
      q2.productIDs = ["premium.monthly"]
      check.queries = [q1, q2]
      let answers = try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: readKey.key)
      #expect(answers.users.map(\.userID) == ["user-1", "never-seen"])
      #expect(answers.users[0].products.map(\.productID) == productIDs)
      #expect(answers.users[0].products == expected.eligibility(for: productIDs).map { $0.wire(type: catalog[$0.productId]?.type) })
      let unknown = answers.users[0].products.last!
      #expect(unknown.introductory?.reason == .unknownProduct && unknown.promotional?.reason == .unknownProduct)
      #expect(answers.users[1].products[0].introductory?.eligible == true)
      #expect(answers.users[1].products[0].introductory?.reason == .newCustomer)
      #expect(answers.users[1].products[0].promotional?.reason == .neverSubscribed)
      let proMonthly = answers.users[0].products[3]
      #expect(proMonthly.promotional?.eligible == true)

      var status = Substatus_V1_GetStatusRequest()
      status.appID = appID
      status.userID = "user-1"
      let got = try await h.call(Substatus_V1_StatusService.getStatus, status, key: readKey.key)
      // Group order follows the stored catalog (ordered by product id); compare by group.
      #expect(got.groups.sorted { $0.subscriptionGroupID < $1.subscriptionGroupID }
        == expected.groups.map(\.wire).sorted { $0.subscriptionGroupID < $1.subscriptionGroupID })
      #expect(got.entitlements == expected.entitlements.map(\.wire))
      #expect(got.entitlements.contains { $0.productID == "lifetime" })
      #expect(got.groups.first { $0.subscriptionGroupID == "20002002" }?.state == .revoked)

      // as_of in the past replays the answer at that instant.
      status.asOfMs = 1_704_100_000_000  // during the trial
      let past = try await h.call(Substatus_V1_StatusService.getStatus, status, key: readKey.key)
      #expect(past.groups.first { $0.subscriptionGroupID == "20001001" }?.inTrial == true)

      // History pages through everything, renewal infos on the first page.
      var history = Substatus_V1_GetTransactionHistoryRequest()
      history.appID = appID
      history.userID = "user-1"
      history.pageSize = 2
      var seen: [String] = []
      repeat {
        let page = try await h.call(Substatus_V1_StatusService.getTransactionHistory, history, key: readKey.key)
        seen += page.transactions.map(\.transactionID)
        history.pageToken = page.nextPageToken
      } while !history.pageToken.isEmpty
      #expect(Set(seen) == Set(body.transactions.map(\.transactionId)))
      #expect(seen.count == Set(seen).count)

      var report = Substatus_V1_GetReportRequest()
      report.appID = appID
      let counts = try await h.call(Substatus_V1_ReportService.getReport, report, key: admin).report!
      #expect(counts.users == 1)
      #expect(counts.active == Int64(expected.reportCounts.active))
      #expect(counts.refunded == Int64(expected.reportCounts.refunded))
    }
  }

  @Test func importTransactionsReportsEachItem() async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = appID
      request.userID = "u"
      var good = Substatus_V1_Transaction()
      good.transactionID = "t1"
      good.productID = "premium.monthly"
      good.purchaseDateMs = 1_711_000_000_000
      good.expiresDateMs = 1_713_000_000_000
      good.isTrialPeriod = true
      var bad = good
      bad.transactionID = ""
      request.transactions = [good, bad]
      let first = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
      #expect(first.transactionResults.map(\.outcome) == [.created, .rejected])
      #expect(first.transactionResults[1].error?.field == "transactions[1].transaction_id")
      #expect(first.transactionResults[1].error?.code == 3)
      request.transactions = [good]
      #expect(try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin).transactionResults[0].outcome == .unchanged)
      request.transactions[0].expiresDateMs += 1000
      #expect(try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin).transactionResults[0].outcome == .updated)

      var check = Substatus_V1_CheckEligibilityRequest()
      check.appID = appID
      var q = Substatus_V1_EligibilityQuery()
      q.userID = "u"
      check.queries = [q]  // no product ids: the whole catalog
      let answer = try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: admin)
      #expect(answer.users[0].products.count == 8)
      #expect(answer.users[0].products[0].introductory?.eligible == false)
    }
  }

  /// A batch bigger than one slice (``SubstatusService/eligibilitySlice``) is read and evaluated
  /// in several: every user, repeated and invalid ones included, is answered in the order asked,
  /// exactly as a call for that user alone.
  @Test func bigBatchesAnswerEveryUserAsAloneInOrder() async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      let users = (0..<(3 * SubstatusService.eligibilitySlice + 3)).map { "user-\($0)" }
      for (n, user) in users.enumerated() where n % 3 != 2 {  // a third never bought anything
        var request = Substatus_V1_ImportTransactionsRequest()
        request.appID = appID
        request.userID = user
        var t = Substatus_V1_Transaction()
        t.transactionID = "t\(n)"
        t.productID = n % 2 == 0 ? "premium.monthly" : "pro.monthly"
        t.purchaseDateMs = 1_711_000_000_000 + Int64(n) * 86_400_000
        t.expiresDateMs = t.purchaseDateMs + 30 * 86_400_000
        t.isTrialPeriod = n % 4 == 0
        request.transactions = [t]
        _ = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
      }
      func query(_ user: String) -> Substatus_V1_EligibilityQuery {
        var q = Substatus_V1_EligibilityQuery()
        q.userID = user
        q.productIDs = ["premium.monthly", "pro.monthly", "lifetime"]
        return q
      }
      var check = Substatus_V1_CheckEligibilityRequest()
      check.appID = appID
      check.asOfMs = 1_712_000_000_000
      let asked = users + [users[1], "", users[0]]  // a repeat, an invalid id, another repeat
      check.queries = asked.map(query)
      let batch = try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: admin)
      #expect(batch.users.map(\.userID) == asked)
      #expect(batch.users[users.count + 1].error?.field == "queries[\(users.count + 1)].user_id")
      for (n, user) in asked.enumerated() where !user.isEmpty {
        var alone = check
        alone.queries = [query(user)]
        let single = try await h.call(Substatus_V1_EligibilityService.checkEligibility, alone, key: admin)
        #expect(batch.users[n] == single.users[0], "user \(user) at \(n)")
      }
    }
  }

  @Test func policyUpdateMaskChangesOnlyNamedFields() async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      var request = Substatus_V1_SetPolicyRequest()
      request.appID = appID
      request.policy = Substatus_V1_EligibilityPolicy()
      request.policy?.refundsBlockIntro = true
      request.updateMask = ["refunds_block_intro"]
      let app = try await h.call(Substatus_V1_AdminService.setPolicy, request, key: admin).app!
      #expect(app.policy?.refundsBlockIntro == true)
      #expect(app.policy?.lapsedSubscribersGetIntro == true)  // default kept
      request.updateMask = ["bogus"]
      await expectStatus(.invalidArgument) { _ = try await h.call(Substatus_V1_AdminService.setPolicy, request, key: admin) }
    }
  }

  @Test func updateAppChangesOnlyNamedFields() async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      let before = try await h.call(Substatus_V1_AdminService.getApp, { var r = Substatus_V1_GetAppRequest(); r.appID = appID; return r }(), key: admin).app!
      var request = Substatus_V1_UpdateAppRequest()
      request.appID = appID
      request.app = Substatus_V1_App()
      request.app?.appleAppID = 1_234_567_890
      request.app?.displayName = "ignored: not in the mask"
      request.updateMask = ["apple_app_id"]
      var app = try await h.call(Substatus_V1_AdminService.updateApp, request, key: admin).app!
      #expect(app.appleAppID == 1_234_567_890)
      #expect(app.displayName == before.displayName)
      #expect(app.bundleID == before.bundleID)
      let read = try await h.call(Substatus_V1_AdminService.getApp, { var r = Substatus_V1_GetAppRequest(); r.appID = appID; return r }(), key: admin).app!
      #expect(read.appleAppID == 1_234_567_890)

      request.app?.appleAppID = 0
      request.app?.displayName = "Renamed"
      request.updateMask = ["apple_app_id", "display_name"]
      app = try await h.call(Substatus_V1_AdminService.updateApp, request, key: admin).app!
      #expect(app.appleAppID == 0)
      #expect(app.displayName == "Renamed")

      for (mask, appleAppID, field) in [([String](), Int64(1), "update_mask"), (["bundle_id"], 1, "update_mask"), (["apple_app_id"], -5, "app.apple_app_id")] {
        request.updateMask = mask
        request.app?.appleAppID = appleAppID
        do {
          _ = try await h.call(Substatus_V1_AdminService.updateApp, request, key: admin)
          Issue.record("\(mask) \(appleAppID) was accepted")
        } catch let error as RPCError {
          #expect(error.code == .invalidArgument)
          #expect(error.message.contains(field), "\(error.message)")
        }
      }
      request.appID = "app_missing"
      request.updateMask = ["display_name"]
      await expectStatus(.notFound) { _ = try await h.call(Substatus_V1_AdminService.updateApp, request, key: admin) }
    }
  }
}
