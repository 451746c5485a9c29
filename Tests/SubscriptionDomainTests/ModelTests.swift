import Foundation
import Testing

@testable import SubscriptionDomain

@Suite("Model")
struct ModelTests {
  @Test("Codable round trip keeps unknown raw values")
  func codableRoundTrip() throws {
    var transaction = tx(
      "1", "premium.monthly", jan1, feb1, offer: .introductory, discount: .payAsYouGo,
      revoked: jan1 + day, reason: .appIssue, revocationType: .refundProrated, family: true)
    transaction.rawInAppOwnershipType = "SOMETHING_NEW"
    transaction.rawOfferType = 9
    transaction.rawEnvironment = "Xcode"
    let decoded = try JSONDecoder().decode(
      Transaction.self, from: JSONEncoder().encode(transaction))
    #expect(decoded == transaction)
    #expect(decoded.rawInAppOwnershipType == "SOMETHING_NEW" && decoded.inAppOwnershipType == nil)
    #expect(decoded.rawOfferType == 9 && decoded.offerType == nil)
    #expect(decoded.rawEnvironment == "Xcode" && decoded.environment == nil)

    var info = renewal("1", "premium.monthly", next: "premium.yearly", retry: true, grace: feb17)
    info.rawExpirationIntent = 42
    let decodedInfo = try JSONDecoder().decode(RenewalInfo.self, from: JSONEncoder().encode(info))
    #expect(decodedInfo == info && decodedInfo.expirationIntent == nil)

    let catalog = try JSONDecoder().decode(Catalog.self, from: JSONEncoder().encode(Fixture.catalog))
    #expect(catalog == Fixture.catalog)
    #expect(catalog["pass.1month"]?.duration == ISO8601Duration(months: 1))
    #expect(catalog.subscriptionGroupIds == [Group.premium, Group.pro, Group.family, Group.extra])

    let policy = EligibilityPolicy(refundsBlockIntro: true, promoScope: .app)
    #expect(try JSONDecoder().decode(EligibilityPolicy.self, from: JSONEncoder().encode(policy)) == policy)
  }

  @Test("typed views write their raw values")
  func typedViews() {
    var transaction = tx("1", "p", jan1)
    transaction.inAppOwnershipType = .familyShared
    transaction.revocationType = .familyRevoke
    transaction.type = .nonConsumable
    #expect(transaction.rawInAppOwnershipType == "FAMILY_SHARED")
    #expect(transaction.rawRevocationType == "FAMILY_REVOKE")
    #expect(transaction.rawType == "Non-Consumable" && transaction.type == .nonConsumable)
    #expect(Environment(appleValue: "PROD") == .production)
    #expect(Environment(appleValue: "sandbox") == .sandbox)
    #expect(Environment(appleValue: "LocalTesting") == nil)
    #expect(ProductType(appleValue: "Auto-Renewable Subscription") == .autoRenewable)
    #expect(ProductType(appleValue: "NON_RENEWABLE") == .nonRenewing)
  }

  @Test("catalog lookups: later duplicates win, unknown ids miss, many products")
  func catalogLookups() {
    let catalog = Catalog(products: [
      Product(productId: "a", type: .consumable),
      Product(productId: "a", type: .nonConsumable),
    ])
    #expect(catalog["a"]?.type == .nonConsumable)
    #expect(catalog.position(of: "a") == 1)
    #expect(catalog["b"] == nil && catalog.position(of: "b") == nil)
    let many = Catalog(
      products: (0..<500).map {
        Product(productId: "com.example.product.\($0)", type: .autoRenewable, subscriptionGroupId: "g\($0 % 7)")
      })
    for i in 0..<500 { #expect(many.position(of: "com.example.product.\(i)") == i) }
    #expect(many.position(of: "com.example.product.500") == nil)
    #expect(many.subscriptionGroupIds == (0..<7).map { "g\($0)" })
  }
}
