import Testing

@testable import SubscriptionDomain

/// One instant of `RenewalInfoAsOfTests`' history and what evaluation says of the premium group then.
struct RenewalAsOfCase: Sendable, CustomTestStringConvertible {
  var name: String
  var time: Int64
  var state: SubscriptionState
  var transactionId: String?
  var billingIssue = false
  var autoRenewEnabled = false
  var autoRenewProductId: String?
  var intro: EligibilityReason
  var willRenew = false
  var testDescription: String { name }
}

/// A monthly subscription renewed late once (Feb 1 to Feb 5 uncovered), whose last period ends on
/// Apr 5; the stored renewal info is Apple's latest, signed after that end: billing retry with a
/// 16-day grace period, auto-renewal on, expiration intent billing error.
private let asOfHistory = [
  tx("p1", "premium.monthly", jan1, utc(2024, 2, 1), otx: "p1"),
  tx("p2", "premium.monthly", utc(2024, 2, 5), utc(2024, 3, 5), otx: "p1"),
  tx("p3", "premium.monthly", utc(2024, 3, 5), utc(2024, 4, 5), otx: "p1"),
]
private let retryingRenewal: RenewalInfo = {
  var r = renewal("p1", "premium.monthly", next: "premium.yearly", retry: true, grace: utc(2024, 4, 21), signed: utc(2024, 4, 5, 1))
  r.expirationIntent = .billingError
  return r
}()

let renewalAsOfCases: [RenewalAsOfCase] = [
  RenewalAsOfCase(
    name: "a paid day of the first period: active, nothing of the later renewal info", time: utc(2024, 1, 15),
    state: .active, transactionId: "p1", intro: .activeSubscription),
  RenewalAsOfCase(
    name: "the late renewal's gap: expired, not in grace", time: utc(2024, 2, 3), state: .expired,
    transactionId: "p1", intro: .lapsedNoIntroUsed),
  RenewalAsOfCase(
    name: "a paid day of the last period: active; the renewal info describes it (its pending renewal)",
    time: utc(2024, 3, 20), state: .active, transactionId: "p3", autoRenewEnabled: true,
    autoRenewProductId: "premium.yearly", intro: .activeSubscription, willRenew: true),
  RenewalAsOfCase(
    name: "the last period's very end: the renewal info describes it", time: utc(2024, 4, 5), state: .gracePeriod,
    transactionId: "p3", billingIssue: true, autoRenewEnabled: true, autoRenewProductId: "premium.yearly",
    intro: .inGracePeriod, willRenew: true),
  RenewalAsOfCase(
    name: "after the grace period: billing retry", time: utc(2024, 4, 25), state: .billingRetry,
    transactionId: "p3", billingIssue: true, autoRenewEnabled: true, autoRenewProductId: "premium.yearly",
    intro: .inBillingRetry, willRenew: true),
  RenewalAsOfCase(
    name: "60 days after the period: expired (rule 18)", time: utc(2024, 6, 10), state: .expired,
    transactionId: "p3", autoRenewEnabled: true, autoRenewProductId: "premium.yearly", intro: .lapsedNoIntroUsed),
]

/// A renewal info describes what followed its subscription's last transaction (Apple's renewal
/// info is about the pending renewal when it was signed): evaluation at an earlier `as_of` does not
/// apply it, as event derivation does not.
@Suite("Renewal info at past instants")
struct RenewalInfoAsOfTests {
  @Test("as_of across a history whose latest renewal info says billing retry", arguments: renewalAsOfCases)
  func asOf(_ c: RenewalAsOfCase) throws {
    let evaluation = evaluate(asOfHistory, [retryingRenewal], at: c.time)
    let status = try #require(evaluation.status(ofGroup: Group.premium))
    #expect(status.state == c.state)
    #expect(status.transactionId == c.transactionId)
    #expect(status.billingIssue == c.billingIssue)
    #expect(status.autoRenewEnabled == c.autoRenewEnabled)
    #expect(status.autoRenewProductId == c.autoRenewProductId)
    #expect(evaluation.eligibility(for: "premium.monthly").introductory.reason == c.intro)
    let premium = EntitlementDefinition(entitlementId: "premium", productIds: ["premium.monthly", "premium.yearly"])
    let named = evaluation.namedEntitlements([premium], history: asOfHistory, renewals: [retryingRenewal])
    #expect(named.first?.willRenew == c.willRenew)
  }

  @Test("the event timeline and evaluation read the same renewal info at every instant")
  func sameAsTimeline() {
    let data = PurchaseHistory(transactions: asOfHistory, renewals: [retryingRenewal])
    let timeline = Timeline(history: data, fallback: nil, catalog: Fixture.catalog)
    for c in renewalAsOfCases {
      #expect(timeline.state(Group.premium, at: c.time) == c.state, "\(c.name)")
      #expect((timeline.renewalInfo(of: "p1", at: c.time) != nil) == c.autoRenewEnabled, "\(c.name)")
    }
  }
}
