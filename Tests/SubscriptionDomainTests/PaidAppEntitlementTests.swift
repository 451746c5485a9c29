import Foundation
import Testing

@testable import SubscriptionDomain

/// The paid-app entitlement's cutoff (rule 24): a day (UTC) or a version compared number by number.
@Suite("Paid-app entitlement")
struct PaidAppEntitlementTests {
  @Test(
    "cutoffs parse as a day or a version, and print as given",
    arguments: [
      ("2024-03-01", true), ("2.0", false), ("148", false), ("1.10.2", false),
    ])
  func parses(text: String, isDate: Bool) throws {
    let cutoff = try #require(PaidAppEntitlement.cutoff(parsing: text))
    if case .date = cutoff { #expect(isDate) } else { #expect(!isDate) }
    #expect(PaidAppEntitlement.text(of: cutoff) == text)
  }

  @Test("what is neither is refused", arguments: ["", "2024-02-30", "2024-13-01", "v2", "2..0", "1.", "-1", "2024/03/01"])
  func refused(text: String) {
    #expect(PaidAppEntitlement.cutoff(parsing: text) == nil)
  }

  @Test("a day cuts at its first instant, UTC")
  func day() throws {
    let cutoff = try #require(PaidAppEntitlement.cutoff(parsing: "2024-03-01"))
    #expect(cutoff == .date(1_709_251_200_000))
    let paid = PaidAppEntitlement(entitlementId: "premium", before: cutoff)
    #expect(paid.grants(originalPurchaseDate: 1_709_251_199_999, originalApplicationVersion: nil))
    #expect(!paid.grants(originalPurchaseDate: 1_709_251_200_000, originalApplicationVersion: "1.0"))
    #expect(!paid.grants(originalPurchaseDate: nil, originalApplicationVersion: "1.0"))
  }

  @Test(
    "versions compare number by number, never as text",
    arguments: [
      ("1.9", "1.10", true), ("2", "13", true), ("13", "2", false), ("2.0", "2", false), ("2", "2.0.1", true),
      ("1.10", "1.9", false), ("abc", "2", false), ("", "2", false),
    ])
  func version(original: String, cutoff: String, grants: Bool) {
    let paid = PaidAppEntitlement(entitlementId: "premium", before: .version(cutoff))
    #expect(paid.grants(originalPurchaseDate: 0, originalApplicationVersion: original) == grants)
  }

  @Test("a stored policy without it decodes with none, and one with it round-trips")
  func policyJSON() throws {
    let old = #"{"refundsBlockIntro":false,"lapsedSubscribersGetIntro":true,"billingRetryEntitled":false,"promoScope":"GROUP"}"#
    let decoded = try JSONDecoder().decode(EligibilityPolicy.self, from: Data(old.utf8))
    #expect(decoded.paidAppEntitlement == nil)
    var policy = EligibilityPolicy()
    policy.paidAppEntitlement = PaidAppEntitlement(entitlementId: "premium", before: .version("2.0"))
    let again = try JSONDecoder().decode(EligibilityPolicy.self, from: JSONEncoder().encode(policy))
    #expect(again == policy)
  }
}
