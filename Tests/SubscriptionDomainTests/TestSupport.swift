import Foundation
import Testing

@testable import SubscriptionDomain

let day: Int64 = 86_400_000
let hour: Int64 = 3_600_000
/// 2024-01-01T00:00:00Z.
let jan1 = utc(2024, 1, 1)

enum Fixture {
  /// The bytes of a fixture file under `Fixtures/`.
  static func bytes(_ name: String) throws -> [UInt8] {
    let url = try #require(
      Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Fixtures"),
      "fixture \(name) is missing")
    return Array(try Data(contentsOf: url))
  }

  /// The test catalog, decoded through `Catalog`'s `Codable` conformance.
  static let catalog: Catalog = {
    let url = Bundle.module.url(
      forResource: "catalog.json", withExtension: nil, subdirectory: "Fixtures")!
    return try! JSONDecoder().decode(Catalog.self, from: Data(contentsOf: url))
  }()
}

enum Group {
  static let premium = "20001001"
  static let pro = "20002002"
  static let family = "20003003"
  static let extra = "20004004"
}

/// A transaction builder with the test catalog's defaults.
func tx(
  _ id: String, _ product: String, _ start: Int64, _ end: Int64? = nil, otx: String? = nil,
  trial: Bool = false, intro: Bool = false, offer: OfferType? = nil,
  discount: OfferDiscountType? = nil, revoked: Int64? = nil, reason: RevocationReason? = nil,
  revocationType: RevocationType? = nil, family: Bool = false, upgraded: Bool = false,
  group: String? = nil, signed: Int64? = nil, notification: String? = nil
) -> Transaction {
  Transaction(
    transactionId: id, originalTransactionId: otx ?? id, productId: product,
    subscriptionGroupIdentifier: group, purchaseDate: start, expiresDate: end,
    isTrialPeriod: trial, isInIntroOfferPeriod: intro, offerType: offer,
    offerDiscountType: discount, revocationDate: revoked, revocationReason: reason,
    revocationType: revocationType, inAppOwnershipType: family ? .familyShared : .purchased,
    isUpgraded: upgraded, signedDate: signed, notificationType: notification)
}

/// A renewal info builder.
func renewal(
  _ otx: String, _ product: String, next: String? = nil, autoRenew: Bool = true,
  retry: Bool = false, grace: Int64? = nil, signed: Int64? = nil
) -> RenewalInfo {
  RenewalInfo(
    originalTransactionId: otx, productId: product, autoRenewProductId: next ?? product,
    autoRenewStatus: autoRenew ? .on : .off, isInBillingRetryPeriod: retry,
    gracePeriodExpiresDate: grace, signedDate: signed)
}

func evaluate(
  _ history: [Transaction], _ renewals: [RenewalInfo] = [], at time: Int64,
  policy: EligibilityPolicy = .default, catalog: Catalog = Fixture.catalog
) -> SubscriptionEvaluation {
  SubscriptionEvaluator.evaluate(
    history: history, renewals: renewals, catalog: catalog, policy: policy, at: time)
}

/// A deterministic random generator (SplitMix64) for property tests.
struct SeededGenerator: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
