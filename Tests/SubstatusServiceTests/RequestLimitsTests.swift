import Foundation
import Testing
import RPCCore
import SubstatusWire
@testable import SubstatusService

/// Every batch limit answers one code, RESOURCE_EXHAUSTED, naming the field (README "Limits";
/// docs/architecture.md "Security": oversized messages or batches), and tenant names are plain
/// text.
@Suite struct RequestLimitsTests {
  /// Every batch limit at 2 or 3, so that one more item exceeds it; PutProducts at 8, the size of
  /// the fixture catalog.
  static var limits: ServiceLimits {
    var l = ServiceLimits()
    l.maxEligibilityQueries = 2
    l.maxProductsPerQuery = 2
    l.maxEligibilityItems = 3
    l.maxProductsPerPut = 8
    l.maxImportItems = 2
    return l
  }

  struct Batch: Sendable, CustomStringConvertible {
    let description: String
    /// The message the call must fail with.
    let message: String
    let call: @Sendable (Harness, String, String) async throws -> Void
  }

  static func query(_ user: String, _ products: [String]) -> Substatus_V1_EligibilityQuery {
    var q = Substatus_V1_EligibilityQuery()
    q.userID = user
    q.productIDs = products
    return q
  }

  static func transaction(_ id: String) -> Substatus_V1_Transaction {
    var t = Substatus_V1_Transaction()
    t.transactionID = id
    t.productID = "lifetime"
    t.purchaseDateMs = 1_700_000_000_000
    return t
  }

  static let batches: [Batch] = [
    Batch(description: "CheckEligibility queries", message: "queries: at most 2 per call, got 3") { h, admin, app in
      var r = Substatus_V1_CheckEligibilityRequest()
      r.appID = app
      r.queries = ["a", "b", "c"].map { query($0, ["p"]) }
      _ = try await h.call(Substatus_V1_EligibilityService.checkEligibility, r, key: admin)
    },
    Batch(description: "CheckEligibility products of a query", message: "queries[1].product_ids: at most 2 per user, got 3") { h, admin, app in
      var r = Substatus_V1_CheckEligibilityRequest()
      r.appID = app
      r.queries = [query("a", ["p"]), query("b", ["p", "q", "r"])]
      _ = try await h.call(Substatus_V1_EligibilityService.checkEligibility, r, key: admin)
    },
    Batch(description: "CheckEligibility answers", message: "queries: at most 3 per call (user × product answers), got 4") { h, admin, app in
      var r = Substatus_V1_CheckEligibilityRequest()
      r.appID = app
      r.queries = [query("a", ["p", "q"]), query("b", ["p", "q"])]
      _ = try await h.call(Substatus_V1_EligibilityService.checkEligibility, r, key: admin)
    },
    Batch(description: "PutProducts", message: "products: at most 8 per call, got 9") { h, admin, app in
      var r = Substatus_V1_PutProductsRequest()
      r.appID = app
      r.products = (1...9).map { "p\($0)" }.map { var p = Substatus_V1_Product(); p.productID = $0; p.type = .consumable; return p }
      _ = try await h.call(Substatus_V1_AdminService.putProducts, r, key: admin)
    },
    Batch(description: "ImportTransactions transactions", message: "transactions: at most 2 per call, got 3") { h, admin, app in
      var r = Substatus_V1_ImportTransactionsRequest()
      r.appID = app
      r.userID = "u"
      r.transactions = ["1", "2", "3"].map(transaction)
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, r, key: admin)
    },
    Batch(description: "ImportTransactions renewal infos", message: "renewal_infos: at most 2 per call, got 3") { h, admin, app in
      var r = Substatus_V1_ImportTransactionsRequest()
      r.appID = app
      r.userID = "u"
      r.renewalInfos = ["1", "2", "3"].map { var i = Substatus_V1_RenewalInfo(); i.originalTransactionID = $0; return i }
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, r, key: admin)
    },
    Batch(description: "SubmitSignedTransactions transactions", message: "signed_transactions: at most 2 per call, got 3") { h, admin, app in
      var r = Substatus_V1_SubmitSignedTransactionsRequest()
      r.appID = app
      r.userID = "u"
      r.signedTransactions = ["a.b.c", "a.b.c", "a.b.c"]
      _ = try await h.call(Substatus_V1_IngestService.submitSignedTransactions, r, key: admin)
    },
    Batch(description: "SubmitSignedTransactions renewal infos", message: "signed_renewal_infos: at most 2 per call, got 3") { h, admin, app in
      var r = Substatus_V1_SubmitSignedTransactionsRequest()
      r.appID = app
      r.userID = "u"
      r.signedRenewalInfos = ["a.b.c", "a.b.c", "a.b.c"]
      _ = try await h.call(Substatus_V1_IngestService.submitSignedTransactions, r, key: admin)
    },
  ]

  @Test(arguments: batches) func oversizeBatchIsResourceExhaustedNamingTheField(_ batch: Batch) async throws {
    try await withService(limits: Self.limits) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: 0)
      let error = await expectStatus(.resourceExhausted, batch.description) { try await batch.call(h, admin, app) }
      #expect(error?.message == batch.message)
    }
  }

  @Test(arguments: ["line\nbreak", "tab\tinside", "\u{1B}[31mred", "del\u{7F}", "next\u{85}line", "bell\u{07}"])
  func tenantNameWithControlCharactersIsRefused(_ name: String) async throws {
    try await withService { h in
      var create = Substatus_V1_CreateTenantRequest()
      create.name = name
      let error = await expectStatus(.invalidArgument, name.debugDescription) {
        _ = try await h.call(Substatus_V1_TenantService.createTenant, create, key: h.operatorKey)
      }
      #expect(error?.message == "name: contains control characters")
      let tenants = try await h.call(Substatus_V1_TenantService.listTenants, Substatus_V1_ListTenantsRequest(), key: h.operatorKey)
      #expect(tenants.tenants.isEmpty)
    }
  }

  @Test func tenantNameInAnyScriptIsAccepted() async throws {
    try await withService { h in
      var create = Substatus_V1_CreateTenantRequest()
      create.name = "  Ünïcode — 日本の会社 🎉  "
      let tenant = try await h.call(Substatus_V1_TenantService.createTenant, create, key: h.operatorKey).tenant
      #expect(tenant?.name == "Ünïcode — 日本の会社 🎉")
    }
  }
}
