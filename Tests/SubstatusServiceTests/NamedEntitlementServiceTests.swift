import RPCCore
import SubstatusWire
import Testing

@testable import SubstatusService

/// Named entitlements through the service (docs/architecture.md "Access model"): defined with
/// PutEntitlements, checked against the catalog, answered by GetStatus and GetEntitlements.
@Suite struct NamedEntitlementServiceTests {
  static let t0: Int64 = 1_711_000_000_000
  static let day: Int64 = 86_400_000

  static func definition(_ id: String, _ products: [String], name: String = "") -> Substatus_V1_EntitlementDefinition {
    var e = Substatus_V1_EntitlementDefinition()
    e.entitlementID = id
    e.displayName = name
    e.productIDs = products
    return e
  }

  static func put(_ h: Harness, _ app: String, _ entitlements: [Substatus_V1_EntitlementDefinition], key: String) async throws
    -> Substatus_V1_PutEntitlementsResponse
  {
    var request = Substatus_V1_PutEntitlementsRequest()
    request.appID = app
    request.entitlements = entitlements
    return try await h.call(Substatus_V1_AdminService.putEntitlements, request, key: key)
  }

  static func list(_ h: Harness, _ app: String, key: String) async throws -> [Substatus_V1_EntitlementDefinition] {
    var request = Substatus_V1_ListEntitlementsRequest()
    request.appID = app
    return try await h.call(Substatus_V1_AdminService.listEntitlements, request, key: key).entitlements
  }

  static func importTransaction(
    _ h: Harness, _ app: String, _ user: String, id: String, product: String, purchase: Int64, expires: Int64? = nil,
    key: String
  ) async throws {
    var t = Substatus_V1_Transaction()
    t.transactionID = id
    t.productID = product
    t.purchaseDateMs = purchase
    t.expiresDateMs = expires ?? 0
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = app
    request.userID = user
    request.transactions = [t]
    let response = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: key)
    #expect(response.transactionResults.map(\.outcome) == [.created])
  }

  @Test func definitionsAreStoredListedAndDeleted() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let premium = Self.definition("premium", ["premium.monthly", "premium.yearly", "lifetime"], name: "Premium")
      let adsFree = Self.definition("ads_free", ["lifetime"])
      let put = try await Self.put(h, app, [premium, adsFree], key: admin)
      #expect(put.entitlements == [premium, adsFree])
      #expect(try await Self.list(h, app, key: admin) == [adsFree, premium])

      var delete = Substatus_V1_DeleteEntitlementsRequest()
      delete.appID = app
      delete.entitlementIDs = ["nope", "ads_free"]
      #expect(try await h.call(Substatus_V1_AdminService.deleteEntitlements, delete, key: admin).deletedEntitlementIDs == ["ads_free"])
      #expect(try await Self.list(h, app, key: admin) == [premium])
    }
  }

  @Test func unknownProductsAreInvalidArgumentNamingEachOne() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let good = Self.definition("premium", ["premium.monthly"])
      let bad = Self.definition("pro", ["pro.monthly", "pro.lifetime", "pro.monthly"])
      let unknown = Self.definition("legacy", ["old.product"])
      let error = await expectStatus(.invalidArgument) { _ = try await Self.put(h, app, [good, bad, unknown], key: admin) }
      let violations = error?.fieldViolations ?? []
      #expect(violations.map(\.field) == ["entitlements[1].product_ids[1]", "entitlements[1].product_ids[2]", "entitlements[2].product_ids[0]"])
      #expect(violations[0].description.contains("\"pro.lifetime\" is not in the app's catalog"))
      #expect(violations[1].description.contains("appears twice"))
      #expect(violations[2].description.contains("\"old.product\""))
      #expect(error?.message.contains("entitlements[1].product_ids[1]") == true)
      // All or nothing.
      #expect(try await Self.list(h, app, key: admin) == [])

      // Another app's catalog does not count.
      let (otherAdmin, otherApp) = try await h.makeTenantWithApp(name: "other", bundleID: "com.other.app")
      _ = try await Self.put(h, otherApp, [Self.definition("x", ["lifetime"])], key: otherAdmin)
      await expectStatus(.notFound) { _ = try await Self.put(h, otherApp, [good], key: admin) }

      // Ids and batch limits.
      let empty = await expectStatus(.invalidArgument) { _ = try await Self.put(h, app, [Self.definition("", [])], key: admin) }
      #expect(empty?.fieldViolations.map(\.field) == ["entitlements[0].entitlement_id"])
      let twice = await expectStatus(.invalidArgument) { _ = try await Self.put(h, app, [good, good], key: admin) }
      #expect(twice?.fieldViolations.map(\.field) == ["entitlements[1].entitlement_id"])
      await expectStatus(.invalidArgument) { _ = try await Self.put(h, app, [], key: admin) }
      let many = (0...SubstatusService.maxEntitlementsPerCall).map { Self.definition("e\($0)", []) }
      await expectStatus(.resourceExhausted) { _ = try await Self.put(h, app, many, key: admin) }
    }
  }

  @Test func statusAndEntitlementsAnswerNamedEntitlements() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      _ = try await Self.put(
        h, app,
        [
          Self.definition("premium", ["premium.monthly", "premium.yearly", "lifetime"]),
          Self.definition("ads_free", ["lifetime"]),
          Self.definition("pass", ["pass.30days"]),
        ], key: admin)
      try await Self.importTransaction(
        h, app, "u1", id: "m1", product: "premium.monthly", purchase: Self.t0, expires: Self.t0 + 30 * Self.day, key: admin)

      var status = Substatus_V1_GetStatusRequest()
      status.appID = app
      status.userID = "u1"
      status.asOfMs = Self.t0 + Self.day
      let answer = try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin).namedEntitlements
      #expect(answer.map(\.entitlementID) == ["ads_free", "pass", "premium"])
      #expect(answer.map(\.active) == [false, false, true])
      #expect(answer.map(\.state) == [.neverSubscribed, .neverSubscribed, .active])
      #expect(answer[2].productID == "premium.monthly")
      #expect(answer[2].transactionID == "m1")
      #expect(answer[2].expiresMs == Self.t0 + 30 * Self.day)
      #expect(answer[2].ownership == .purchased)

      // After the period: EXPIRED, with the lapsed transaction.
      status.asOfMs = Self.t0 + 31 * Self.day
      let later = try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin).namedEntitlements
      #expect(later[2].active == false)
      #expect(later[2].state == .expired)
      #expect(later[2].transactionID == "m1")

      // A lifetime purchase grants both, with no end.
      try await Self.importTransaction(h, app, "u1", id: "l1", product: "lifetime", purchase: Self.t0 + 2 * Self.day, key: admin)
      var entitlements = Substatus_V1_GetEntitlementsRequest()
      entitlements.appID = app
      entitlements.userID = "u1"
      entitlements.asOfMs = Self.t0 + 3 * Self.day
      entitlements.entitlementIDs = ["premium", "ads_free"]
      let read = try await h.service.store.history(of: .init(appId: app, environment: .production, userId: "u1"))
      #expect(read.transactions.count == 2)
      let filtered = try await h.call(Substatus_V1_StatusService.getEntitlements, entitlements, key: admin)
      #expect(filtered.namedEntitlements.map(\.entitlementID) == ["premium", "ads_free"])
      #expect(filtered.namedEntitlements.map(\.active) == [true, true])
      #expect(filtered.namedEntitlements.map(\.productID) == ["lifetime", "lifetime"])
      #expect(filtered.namedEntitlements.map(\.expiresMs) == [0, 0])
      #expect(filtered.entitlements.map(\.productID) == ["lifetime", "premium.monthly"])

      // Without a filter: every definition; an undefined id is INVALID_ARGUMENT naming it.
      entitlements.entitlementIDs = []
      #expect(try await h.call(Substatus_V1_StatusService.getEntitlements, entitlements, key: admin).namedEntitlements.count == 3)
      entitlements.entitlementIDs = ["premium", "gold"]
      let error = await expectStatus(.invalidArgument) {
        _ = try await h.call(Substatus_V1_StatusService.getEntitlements, entitlements, key: admin)
      }
      #expect(error?.fieldViolations.map(\.field) == ["entitlement_ids[1]"])

      // Deleting a definition removes it from the answers at once.
      var delete = Substatus_V1_DeleteEntitlementsRequest()
      delete.appID = app
      delete.entitlementIDs = ["pass"]
      _ = try await h.call(Substatus_V1_AdminService.deleteEntitlements, delete, key: admin)
      status.asOfMs = Self.t0 + 3 * Self.day
      #expect(try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin).namedEntitlements.map(\.entitlementID) == ["ads_free", "premium"])
    }
  }
}
