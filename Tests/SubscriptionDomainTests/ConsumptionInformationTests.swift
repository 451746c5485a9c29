import Foundation
import Testing

@testable import SubscriptionDomain

/// Rule 27: the share of a transaction's period used when a refund request is answered, and the
/// Send Consumption Information body decided from the app's consumption policy.
@Suite("Refund requests: consumption share and answer")
struct ConsumptionInformationTests {
  static let monthly = tx("m1", "premium.monthly", jan1, jan1 + 30 * day, group: Group.premium)

  @Test(
    "the share of the period used, in milliunits",
    arguments: [
      // (case, transaction, other transactions, asked at, expected)
      ("start", monthly, [], jan1, 0),
      ("middle", monthly, [], jan1 + 15 * day, 50_000),
      ("a third", monthly, [], jan1 + 10 * day, 33_333),
      ("end", monthly, [], jan1 + 30 * day, 100_000),
      ("after the end", monthly, [], jan1 + 90 * day, 100_000),
      ("before the purchase", monthly, [], jan1 - day, 0),
      ("refunded: used until the revocation",
       tx("m2", "premium.monthly", jan1, jan1 + 30 * day, revoked: jan1 + 6 * day), [], jan1 + 20 * day, 20_000),
      ("upgraded: a later purchase of the subscription ends the period (rule 12)", monthly,
       [tx("y1", "premium.yearly", jan1 + 10 * day, jan1 + 375 * day, otx: "m1")], jan1 + 5 * day, 50_000),
      ("non-renewing: its term", tx("p1", "pass.30days", jan1), [], jan1 + 3 * day, 10_000),
      ("non-renewing: the second term starts when the first ends (rule 6)",
       tx("p2", "pass.30days", jan1 + 10 * day), [tx("p1", "pass.30days", jan1)], jan1 + 45 * day, 50_000),
    ] as [(String, Transaction, [Transaction], Int64, Int64)])
  func share(_ name: String, transaction: Transaction, others: [Transaction], at time: Int64, expected: Int64) {
    let used = ConsumptionShare.usedMilliunits(
      of: transaction, history: others + [transaction], catalog: Fixture.catalog, at: time)
    #expect(used == expected, "\(name)")
  }

  @Test("a product without a period has no share: consumable, non-consumable, unknown", arguments: ["coins.100", "lifetime", "unknown.product"])
  func noShare(product: String) {
    let t = tx("c1", product, jan1)
    #expect(ConsumptionShare.usedMilliunits(of: t, history: [t], catalog: Fixture.catalog, at: jan1 + day) == nil)
  }

  static let consented = ConsumptionPolicy(
    customerConsented: true, sampleContentProvided: true, deliveryStatus: .delivered, refundPreference: .grantProrated)

  @Test("no policy, an ASSIGNED transaction or no consent: nothing is sent")
  func notSent() {
    let t = Self.monthly
    #expect(ConsumptionDecision.decide(policy: nil, transaction: t, productType: .autoRenewable, usedMilliunits: 1) == .notSent("no_consumption_policy"))
    var assigned = t
    assigned.rawInAppOwnershipType = "ASSIGNED"
    #expect(ConsumptionDecision.decide(policy: Self.consented, transaction: assigned, productType: .autoRenewable, usedMilliunits: 1) == .notSent("assigned"))
    var noConsent = Self.consented
    noConsent.customerConsented = false
    #expect(ConsumptionDecision.decide(policy: noConsent, transaction: t, productType: .autoRenewable, usedMilliunits: 1) == .notSent("no_customer_consent"))
  }

  @Test(
    "the body follows Apple's constraints on consumptionPercentage and refundPreference",
    arguments: [
      // An auto-renewable: never a percentage (Apple computes it), GRANT_PRORATED kept.
      (ProductType.autoRenewable, ConsumptionDeliveryStatus.delivered, RefundPreference?.some(.grantProrated), Int64?.some(50_000),
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED"}"#),
      // A non-renewing term: the share used.
      (.nonRenewing, .delivered, .decline, 50_000,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","consumptionPercentage":50000,"refundPreference":"DECLINE"}"#),
      // GRANT_PRORATED needs 0 < percentage < 100000.
      (.nonRenewing, .delivered, .grantProrated, 0,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","consumptionPercentage":1,"refundPreference":"GRANT_PRORATED"}"#),
      (.nonRenewing, .delivered, .grantProrated, 100_000,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","consumptionPercentage":99999,"refundPreference":"GRANT_PRORATED"}"#),
      // Undelivered: 0, so no GRANT_PRORATED.
      (.nonRenewing, .undeliveredServerOutage, .grantProrated, 50_000,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"UNDELIVERED_SERVER_OUTAGE","consumptionPercentage":0}"#),
      // A consumable: its consumption is unknown, so no percentage and no GRANT_PRORATED.
      (.consumable, .delivered, .grantProrated, nil,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED"}"#),
      (.consumable, .delivered, .grantFull, nil,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_FULL"}"#),
      (.consumable, .delivered, nil, nil,
       #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED"}"#),
    ] as [(ProductType, ConsumptionDeliveryStatus, RefundPreference?, Int64?, String)])
  func body(type: ProductType, status: ConsumptionDeliveryStatus, preference: RefundPreference?, used: Int64?, json: String) {
    let policy = ConsumptionPolicy(
      customerConsented: true, sampleContentProvided: true, deliveryStatus: status, refundPreference: preference)
    guard case .send(let body) = ConsumptionDecision.decide(policy: policy, transaction: Self.monthly, productType: type, usedMilliunits: used)
    else {
      Issue.record("nothing sent")
      return
    }
    #expect(body.json == json)
  }

  @Test("a stored policy without a consumption policy decodes with none; one with it round-trips")
  func policyCoding() throws {
    var policy = EligibilityPolicy()
    policy.consumptionPolicy = Self.consented
    let data = try JSONEncoder().encode(policy)
    #expect(try JSONDecoder().decode(EligibilityPolicy.self, from: data) == policy)
    let old = #"{"refundsBlockIntro":false,"lapsedSubscribersGetIntro":true,"billingRetryEntitled":false,"promoScope":"GROUP"}"#
    #expect(try JSONDecoder().decode(EligibilityPolicy.self, from: Data(old.utf8)).consumptionPolicy == nil)
  }
}
