import Testing

@testable import SubscriptionDomain

/// One row of the named-entitlement table: a history, the instant, and what `premium` (defined
/// below) is then.
struct NamedEntitlementCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction]
  var renewals: [RenewalInfo] = []
  var time: Int64
  var policy: EligibilityPolicy = .default
  var expected: NamedEntitlement
  var testDescription: String { name }
}

/// `premium`: both subscription groups premium and pro, the non-renewing 30-day pass and the
/// lifetime non-consumable. The family group, extra group and the one-month pass grant nothing.
let premiumEntitlement = EntitlementDefinition(
  entitlementId: "premium", displayName: "Premium",
  productIds: ["premium.monthly", "premium.yearly", "pro.yearly", "pass.30days", "lifetime"])

private func expect(
  _ active: Bool, _ state: SubscriptionState, expires: Int64? = nil, renews: Bool = false,
  _ product: String? = nil, _ transaction: String? = nil, ownership: OwnershipType? = nil
) -> NamedEntitlement {
  NamedEntitlement(
    entitlementId: "premium", active: active, state: state, expiresDate: expires,
    willRenew: renews, productId: product, transactionId: transaction,
    ownership: ownership ?? (active ? .purchased : nil))
}



let namedEntitlementCases: [NamedEntitlementCase] = [
  NamedEntitlementCase(
    name: "no purchase: NEVER_SUBSCRIBED", history: [], time: jan1,
    expected: expect(false, .neverSubscribed)),
  NamedEntitlementCase(
    name: "a subscription of another group that is not in the entitlement grants nothing",
    history: [tx("f1", "family.monthly", jan1, feb1)], time: jan1 + day,
    expected: expect(false, .neverSubscribed)),
  NamedEntitlementCase(
    name: "a product of the entitlement's group that it does not list grants nothing",
    history: [tx("p1", "pro.monthly", jan1, feb1)], time: jan1 + day,
    expected: expect(false, .neverSubscribed)),
  NamedEntitlementCase(
    name: "an active subscription grants it, renewing",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly")], time: jan1 + day,
    expected: expect(true, .active, expires: feb1, renews: true, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "auto-renew off: active, not renewing",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly", autoRenew: false)], time: jan1 + day,
    expected: expect(true, .active, expires: feb1, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "renewing into a product outside the entitlement: not renewing it",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly", next: "premium.weekly")], time: jan1 + day,
    expected: expect(true, .active, expires: feb1, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "across groups: the grant that lasts longest is reported",
    history: [
      tx("m1", "premium.monthly", jan1, feb1),
      tx("y1", "pro.yearly", jan1 + day, utc(2025, 1, 2)),
    ],
    renewals: [renewal("m1", "premium.monthly"), renewal("y1", "pro.yearly", autoRenew: false)],
    time: jan1 + 2 * day,
    expected: expect(true, .active, expires: utc(2025, 1, 2), "pro.yearly", "y1")),
  NamedEntitlementCase(
    name: "across groups: once the longer one lapses, the other still grants it",
    history: [
      tx("m1", "premium.monthly", jan1, utc(2024, 3, 1)),
      tx("y1", "pro.yearly", jan1 - 300 * day, jan1 + 65 * day - 300 * day),
    ],
    renewals: [renewal("m1", "premium.monthly")], time: feb1,
    expected: expect(true, .active, expires: utc(2024, 3, 1), renews: true, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "a non-consumable grants it with no end, beside a subscription",
    history: [tx("m1", "premium.monthly", jan1, feb1), tx("l1", "lifetime", jan1 + day)],
    renewals: [renewal("m1", "premium.monthly")], time: jan1 + 2 * day,
    expected: expect(true, .active, "lifetime", "l1")),
  NamedEntitlementCase(
    name: "a refunded non-consumable grants nothing: REVOKED",
    history: [tx("l1", "lifetime", jan1, revoked: jan1 + day)], time: jan1 + 2 * day,
    expected: expect(false, .revoked, "lifetime", "l1")),
  NamedEntitlementCase(
    name: "a refund dated after the instant has not happened yet",
    history: [tx("l1", "lifetime", jan1, revoked: jan1 + day)], time: jan1 + hour,
    expected: expect(true, .active, "lifetime", "l1")),
  NamedEntitlementCase(
    name: "a non-renewing term grants it until the term ends",
    history: [tx("n1", "pass.30days", jan1)], time: jan1 + 10 * day,
    expected: expect(true, .active, expires: jan31, "pass.30days", "n1")),
  NamedEntitlementCase(
    name: "after the non-renewing term: EXPIRED",
    history: [tx("n1", "pass.30days", jan1)], time: jan31,
    expected: expect(false, .expired, "pass.30days", "n1")),
  NamedEntitlementCase(
    name: "a non-renewing product not in the entitlement grants nothing",
    history: [tx("n1", "pass.1month", jan1)], time: jan1 + day,
    expected: expect(false, .neverSubscribed)),
  NamedEntitlementCase(
    name: "a lapsed subscription: EXPIRED with its end",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly", autoRenew: false)], time: feb1,
    expected: expect(false, .expired, expires: feb1, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "a refunded subscription: REVOKED",
    history: [tx("m1", "premium.monthly", jan1, feb1, revoked: jan1 + 3 * day)],
    time: jan1 + 4 * day,
    expected: expect(false, .revoked, expires: feb1, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "in grace: GRACE_PERIOD, active until the grace ends",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly", retry: true, grace: feb1 + 16 * day)],
    time: feb1 + day,
    expected: expect(true, .gracePeriod, expires: feb1 + 16 * day, renews: true, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "billing retry does not entitle by default: inactive BILLING_RETRY",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly", retry: true)], time: feb1 + day,
    expected: expect(false, .billingRetry, expires: feb1, renews: true, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "billing retry entitles under the policy: active BILLING_RETRY with no known end",
    history: [tx("m1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("m1", "premium.monthly", retry: true)], time: feb1 + day,
    policy: EligibilityPolicy(billingRetryEntitled: true),
    expected: expect(true, .billingRetry, renews: true, "premium.monthly", "m1")),
  NamedEntitlementCase(
    name: "billing retry under the policy ranks below an active grant of another group",
    history: [
      tx("m1", "premium.monthly", jan1, feb1),
      tx("y1", "pro.yearly", jan1, utc(2025, 1, 1)),
    ],
    renewals: [renewal("m1", "premium.monthly", retry: true), renewal("y1", "pro.yearly")],
    time: feb1 + day, policy: EligibilityPolicy(billingRetryEntitled: true),
    expected: expect(true, .active, expires: utc(2025, 1, 1), renews: true, "pro.yearly", "y1")),
  NamedEntitlementCase(
    name: "family-shared subscription grants it, as FAMILY_SHARED",
    history: [tx("f1", "premium.yearly", jan1, utc(2025, 1, 1), family: true)],
    renewals: [renewal("f1", "premium.yearly")], time: jan1 + day,
    expected: expect(
      true, .active, expires: utc(2025, 1, 1), renews: true, "premium.yearly", "f1",
      ownership: .familyShared)),
  NamedEntitlementCase(
    name: "own and family-shared ending together: the own purchase is reported",
    history: [
      tx("f1", "premium.yearly", jan1, utc(2025, 1, 1), family: true),
      tx("o1", "pro.yearly", jan1, utc(2025, 1, 1)),
    ],
    time: jan1 + day, expected: expect(true, .active, expires: utc(2025, 1, 1), "pro.yearly", "o1")),
  NamedEntitlementCase(
    name: "family-shared removed: REVOKED",
    history: [
      tx("f1", "premium.yearly", jan1, utc(2025, 1, 1), revoked: jan1 + 5 * day, family: true)
    ],
    time: jan1 + 6 * day,
    expected: expect(false, .revoked, expires: utc(2025, 1, 1), "premium.yearly", "f1")),
  NamedEntitlementCase(
    name: "an upgrade within the group: the new product grants it from its purchase",
    history: [
      tx("m1", "premium.monthly", jan1, feb1, revoked: jan1 + 10 * day, upgraded: true),
      tx("y1", "premium.yearly", jan1 + 10 * day, jan1 + 376 * day, otx: "m1"),
    ],
    renewals: [renewal("m1", "premium.yearly")], time: jan1 + 11 * day,
    expected: expect(true, .active, expires: jan1 + 376 * day, renews: true, "premium.yearly", "y1")),
  NamedEntitlementCase(
    name: "as of an instant before the purchase: NEVER_SUBSCRIBED",
    history: [tx("m1", "premium.monthly", jan1, feb1)], time: jan1 - day,
    expected: expect(false, .neverSubscribed)),
]

@Suite("Named entitlements")
struct NamedEntitlementTests {
  @Test("named entitlement table", arguments: namedEntitlementCases)
  func table(_ c: NamedEntitlementCase) {
    let evaluation = evaluate(c.history, c.renewals, at: c.time, policy: c.policy)
    let answers = evaluation.namedEntitlements([premiumEntitlement], history: c.history, renewals: c.renewals)
    #expect(answers == [c.expected])
  }

  @Test("one answer per definition, in the order given; no definitions, no answers")
  func order() {
    let lifetimeOnly = EntitlementDefinition(entitlementId: "ads_free", productIds: ["lifetime"])
    let empty = EntitlementDefinition(entitlementId: "nothing", productIds: [])
    let history = [tx("m1", "premium.monthly", jan1, feb1)]
    let evaluation = evaluate(history, at: jan1 + day)
    let answers = evaluation.namedEntitlements(
      [lifetimeOnly, premiumEntitlement, empty], history: history, renewals: [])
    #expect(answers.map(\.entitlementId) == ["ads_free", "premium", "nothing"])
    #expect(answers.map(\.active) == [false, true, false])
    #expect(answers.map(\.state) == [.neverSubscribed, .active, .neverSubscribed])
    #expect(evaluation.namedEntitlements([], history: history, renewals: []).isEmpty)
  }
}
