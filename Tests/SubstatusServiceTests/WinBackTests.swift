import Foundation
import RPCCore
import SubstatusJSON
import SubstatusWire
import Testing
@testable import SubstatusService

/// A catalog product of the `20001001` group with win-back offers.
private func premiumMonthly(winBack: [String]) -> Substatus_V1_Product {
  var p = Substatus_V1_Product()
  p.productID = "premium.monthly"
  p.type = .autoRenewable
  p.subscriptionGroupID = "20001001"
  p.duration = "P1M"
  p.hasIntroductoryOffer = true
  p.promotionalOfferIDs = ["premium.winback"]
  p.winBackOfferIDs = winBack
  return p
}

extension Harness {
  func putProducts(_ app: String, _ products: [Substatus_V1_Product], key: String) async throws
    -> Substatus_V1_PutProductsResponse
  {
    var put = Substatus_V1_PutProductsRequest()
    put.appID = app
    put.products = products
    return try await call(Substatus_V1_AdminService.putProducts, put, key: key)
  }

  /// The sandbox eligibility of one user for one product.
  func eligibility(_ app: String, _ user: String, _ product: String, key: String) async throws
    -> Substatus_V1_ProductEligibility
  {
    var query = Substatus_V1_EligibilityQuery()
    query.userID = user
    query.productIDs = [product]
    var check = Substatus_V1_CheckEligibilityRequest()
    check.appID = app
    check.queries = [query]
    check.environment = .sandbox
    let response = try await call(Substatus_V1_EligibilityService.checkEligibility, check, key: key)
    return try #require(response.users.first?.products.first)
  }
}

extension TestApple {
  /// A lapsed subscriber's renewal info that lists Apple's `eligibleWinBackOfferIds`.
  static func winBackRenewalInfo(original: String, eligible: [String]?, signed: Int64) -> JSONValue {
    guard case .object(var o) = renewalInfo(original: original, autoRenew: false) else { return .null }
    o["signedDate"] = .integer(signed)
    if let eligible { o["eligibleWinBackOfferIds"] = .array(eligible.map { .string($0) }) }
    return .object(o)
  }
}

@Suite("Win-back offers (rule 19) through the service")
struct WinBackServiceTests {
  @Test("PutProducts stores win-back offer ids; ListProducts returns them in order")
  func catalogRoundTrip() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let put = try await h.putProducts(app, [premiumMonthly(winBack: ["wb.b", "wb.a"])], key: admin)
      #expect(put.products.map(\.winBackOfferIDs) == [["wb.b", "wb.a"]])
      var list = Substatus_V1_ListProductsRequest()
      list.appID = app
      let listed = try await h.call(Substatus_V1_AdminService.listProducts, list, key: admin).products
      #expect(listed.first { $0.productID == "premium.monthly" }?.winBackOfferIDs == ["wb.b", "wb.a"])
      #expect(listed.first { $0.productID == "premium.yearly" }?.winBackOfferIDs == [])
    }
  }

  /// A bad catalog entry and the field its INVALID_ARGUMENT names.
  struct BadCatalog: Sendable, CustomTestStringConvertible {
    var name: String
    var product: Substatus_V1_Product
    var field: String
    var testDescription: String { name }
  }

  static let badCatalogs: [BadCatalog] = {
    var consumable = Substatus_V1_Product()
    consumable.productID = "coins.100"
    consumable.type = .consumable
    consumable.winBackOfferIDs = ["wb.a"]
    var emptyPromo = premiumMonthly(winBack: [])
    emptyPromo.promotionalOfferIDs = [""]
    var twicePromo = premiumMonthly(winBack: [])
    twicePromo.promotionalOfferIDs = ["p", "p"]
    return [
      BadCatalog(
        name: "an empty win-back offer id", product: premiumMonthly(winBack: ["wb.a", ""]),
        field: "products[0].win_back_offer_ids[1]"),
      BadCatalog(
        name: "a win-back offer id twice", product: premiumMonthly(winBack: ["wb.a", "wb.b", "wb.a"]),
        field: "products[0].win_back_offer_ids[2]"),
      BadCatalog(
        name: "a win-back offer id over 255 bytes",
        product: premiumMonthly(winBack: [String(repeating: "w", count: 256)]),
        field: "products[0].win_back_offer_ids[0]"),
      BadCatalog(
        name: "more than 350 win-back offer ids",
        product: premiumMonthly(winBack: (0...350).map { "wb.\($0)" }),
        field: "products[0].win_back_offer_ids"),
      BadCatalog(
        name: "win-back offers on a consumable", product: consumable,
        field: "products[0].win_back_offer_ids"),
      BadCatalog(
        name: "an empty promotional offer id", product: emptyPromo,
        field: "products[0].promotional_offer_ids[0]"),
      BadCatalog(
        name: "a promotional offer id twice", product: twicePromo,
        field: "products[0].promotional_offer_ids[1]"),
    ]
  }()

  @Test("PutProducts refuses bad offer ids, naming the field, and stores nothing", arguments: badCatalogs)
  func badOfferIds(_ bad: BadCatalog) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var list = Substatus_V1_ListProductsRequest()
      list.appID = app
      let before = try await h.call(Substatus_V1_AdminService.listProducts, list, key: admin).products
      let error = await expectStatus(.invalidArgument, bad.name) {
        _ = try await h.putProducts(app, [bad.product], key: admin)
      }
      #expect(try violatedField(error) == bad.field)
      #expect(try await h.call(Substatus_V1_AdminService.listProducts, list, key: admin).products == before)
    }
  }

  @Test("CheckEligibility answers win-back offers from the latest signed renewal info")
  func eligibilityFromSignedRenewalInfo() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      _ = try await h.putProducts(
        app, [premiumMonthly(winBack: ["premium.wb.half", "premium.wb.free"])], key: admin)
      let day = TestApple.day
      let lapsed = try apple.sign(
        TestApple.transaction(id: "2000", purchase: TestApple.t0 - 40 * day, expires: TestApple.t0 - 10 * day))

      // Before any renewal info: no offer, no evidence.
      _ = try await h.submitSigned(app, "alice", key: admin, transactions: [lapsed])
      let none = try await h.eligibility(app, "alice", "premium.monthly", key: admin)
      #expect(none.winBackOffers.map(\.offerID) == ["premium.wb.half", "premium.wb.free"])
      #expect(none.winBackOffers.map(\.reason) == [.winBackNotOffered, .winBackNotOffered])
      #expect(none.winBackOffers.map(\.evidenceTransactionID) == ["", ""])

      // A StoreKit 2 renewal info in which Apple offers one of them.
      let offered = try apple.sign(
        TestApple.winBackRenewalInfo(
          original: "2000", eligible: ["premium.wb.free", "premium.wb.other"], signed: TestApple.t0 - 2000))
      _ = try await h.submitSigned(app, "alice", key: admin, transactions: [lapsed], renewals: [offered])
      let answer = try await h.eligibility(app, "alice", "premium.monthly", key: admin)
      #expect(answer.winBackOffers.map(\.offerID) == ["premium.wb.half", "premium.wb.free"])
      #expect(answer.winBackOffers.map(\.eligible) == [false, true])
      #expect(answer.winBackOffers.map(\.reason) == [.winBackNotOffered, .winBackOffered])
      #expect(answer.winBackOffers.map(\.evidenceTransactionID) == ["2000", "2000"])
      #expect(answer.introductory?.reason == .lapsedNoIntroUsed)
      #expect(answer.promotional?.reason == .lapsedSubscriber)
      // Products without win-back offers, or not auto-renewable, answer none.
      #expect(try await h.eligibility(app, "alice", "premium.yearly", key: admin).winBackOffers.isEmpty)
      #expect(try await h.eligibility(app, "alice", "lifetime", key: admin).winBackOffers.isEmpty)
      #expect(try await h.eligibility(app, "alice", "nope", key: admin).winBackOffers.isEmpty)

      // A V2 notification with a newer renewal info that no longer lists it: not offered.
      let withdrawn = try apple.sign(
        TestApple.winBackRenewalInfo(original: "2000", eligible: nil, signed: TestApple.t0 - 1000))
      let notification = try apple.sign(
        TestApple.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", signedTransaction: lapsed,
          signedRenewal: withdrawn, status: 2))
      #expect(await h.notify(app, signedPayload: notification).0 == 200)
      let after = try await h.eligibility(app, "alice", "premium.monthly", key: admin)
      #expect(after.winBackOffers.map(\.reason) == [.winBackNotOffered, .winBackNotOffered])
      #expect(after.winBackOffers.map(\.evidenceTransactionID) == ["2000", "2000"])
    }
  }
}
