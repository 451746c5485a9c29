import Testing

@testable import SubscriptionDomain

/// One row of a status table: a history, an instant, and what the group must look like.
struct StatusCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction]
  var renewals: [RenewalInfo] = []
  var time: Int64
  var group: String = Group.premium
  var state: SubscriptionState
  var product: String? = nil
  var expires: Int64? = nil
  var grace: Int64? = nil
  var ownership: OwnershipType? = nil
  var billingIssue = false
  var inTrial = false
  var inIntro = false
  var autoRenew: Bool? = nil
  var nextProduct: String? = nil
  var entitledProduct: String? = nil
  var policy: EligibilityPolicy = .default
  var testDescription: String { name }
}

let feb1 = utc(2024, 2, 1)
let feb17 = utc(2024, 2, 17)

let statusCases: [StatusCase] = [
  // Rule 4/5: periods are [purchase, expires); trial vs pay-as-you-go vs pay-up-front.
  StatusCase(
    name: "free trial covers now: ACTIVE, in trial",
    history: [tx("t1", "premium.monthly", jan1, jan1 + 7 * day, trial: true)],
    time: jan1 + day, state: .active, product: "premium.monthly", expires: jan1 + 7 * day,
    ownership: .purchased, inTrial: true, entitledProduct: "premium.monthly"),
  StatusCase(
    name: "pay-as-you-go intro (V1 is_in_intro_offer_period): ACTIVE, in intro",
    history: [tx("t1", "premium.monthly", jan1, feb1, intro: true)],
    time: jan1 + 14 * day, state: .active, product: "premium.monthly", expires: feb1,
    ownership: .purchased, inIntro: true, entitledProduct: "premium.monthly"),
  StatusCase(
    name: "pay-up-front intro (V2 offerType 1, PAY_UP_FRONT): ACTIVE, in intro",
    history: [
      tx("t1", "premium.yearly", jan1, utc(2024, 7, 1), offer: .introductory, discount: .payUpFront)
    ],
    time: utc(2024, 3, 1), state: .active, product: "premium.yearly", expires: utc(2024, 7, 1),
    ownership: .purchased, inIntro: true, entitledProduct: "premium.yearly"),
  StatusCase(
    name: "V2 free trial (offerType 1, FREE_TRIAL): ACTIVE, in trial",
    history: [
      tx("t1", "premium.monthly", jan1, jan1 + 7 * day, offer: .introductory, discount: .freeTrial)
    ],
    time: jan1 + 2 * day, state: .active, product: "premium.monthly", expires: jan1 + 7 * day,
    ownership: .purchased, inTrial: true, entitledProduct: "premium.monthly"),
  // Boundaries.
  StatusCase(
    name: "expires == now is expired",
    history: [tx("t1", "premium.monthly", jan1, feb1)], time: feb1, state: .expired,
    product: "premium.monthly", expires: feb1, ownership: .purchased),
  StatusCase(
    name: "one millisecond before expiry is active",
    history: [tx("t1", "premium.monthly", jan1, feb1)], time: feb1 - 1, state: .active,
    product: "premium.monthly", expires: feb1, ownership: .purchased,
    entitledProduct: "premium.monthly"),
  StatusCase(
    name: "purchase == now is active",
    history: [tx("t1", "premium.monthly", jan1, feb1)], time: jan1, state: .active,
    product: "premium.monthly", expires: feb1, ownership: .purchased,
    entitledProduct: "premium.monthly"),
  StatusCase(
    name: "a purchase after now has not happened yet",
    history: [tx("t1", "premium.monthly", feb1, utc(2024, 3, 1))], time: jan1,
    state: .neverSubscribed),
  StatusCase(
    name: "no transaction: NEVER_SUBSCRIBED", history: [], time: jan1, state: .neverSubscribed),
  // Rule 3: revocation.
  StatusCase(
    name: "refunded: REVOKED from the revocation instant",
    history: [tx("t1", "premium.monthly", jan1, feb1, revoked: jan1 + 10 * day, reason: .appIssue)],
    time: jan1 + 10 * day, state: .revoked, product: "premium.monthly", expires: feb1,
    ownership: .purchased),
  StatusCase(
    name: "refund dated after now does not apply yet",
    history: [tx("t1", "premium.monthly", jan1, feb1, revoked: jan1 + 10 * day)],
    time: jan1 + 10 * day - 1, state: .active, product: "premium.monthly", expires: feb1,
    ownership: .purchased, entitledProduct: "premium.monthly"),
  StatusCase(
    name: "older refund, newer paid renewal lapsed: EXPIRED",
    history: [
      tx("t1", "premium.monthly", jan1, feb1, revoked: jan1 + 5 * day),
      tx("t2", "premium.monthly", feb1, utc(2024, 3, 1), otx: "t1"),
    ],
    time: utc(2024, 3, 5), state: .expired, product: "premium.monthly", expires: utc(2024, 3, 1),
    ownership: .purchased),
  // Rule 5: grace and billing retry, read from the data.
  StatusCase(
    name: "grace with the retry flag: GRACE_PERIOD, entitled until grace ends",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true, grace: feb17)],
    time: feb1 + 3 * day, state: .gracePeriod, product: "premium.monthly", expires: feb1,
    grace: feb17, ownership: .purchased, billingIssue: true, autoRenew: true,
    nextProduct: "premium.monthly", entitledProduct: "premium.monthly"),
  StatusCase(
    name: "grace without the retry flag (trial to paid): GRACE_PERIOD",
    history: [tx("t1", "premium.monthly", jan1, jan1 + 7 * day, trial: true)],
    renewals: [renewal("t1", "premium.monthly", retry: false, grace: jan1 + 10 * day)],
    time: jan1 + 8 * day, state: .gracePeriod, product: "premium.monthly",
    expires: jan1 + 7 * day, grace: jan1 + 10 * day, ownership: .purchased, billingIssue: true,
    autoRenew: true, nextProduct: "premium.monthly", entitledProduct: "premium.monthly"),
  StatusCase(
    name: "grace expired while retrying: BILLING_RETRY, not entitled",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true, grace: feb17)],
    time: feb17, state: .billingRetry, product: "premium.monthly", expires: feb1, grace: feb17,
    ownership: .purchased, billingIssue: true, autoRenew: true, nextProduct: "premium.monthly"),
  StatusCase(
    name: "billing retry without grace: BILLING_RETRY",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true)],
    time: feb1 + day, state: .billingRetry, product: "premium.monthly", expires: feb1,
    ownership: .purchased, billingIssue: true, autoRenew: true, nextProduct: "premium.monthly"),
  StatusCase(
    name: "billing retry entitles when the policy says so",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true)],
    time: feb1 + day, state: .billingRetry, product: "premium.monthly", expires: feb1,
    ownership: .purchased, billingIssue: true, autoRenew: true, nextProduct: "premium.monthly",
    entitledProduct: "premium.monthly", policy: EligibilityPolicy(billingRetryEntitled: true)),
  StatusCase(
    name: "retry over, grace over: EXPIRED",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", autoRenew: false, retry: false, grace: feb17)],
    time: utc(2024, 3, 1), state: .expired, product: "premium.monthly", expires: feb1,
    ownership: .purchased, autoRenew: false, nextProduct: "premium.monthly"),
  StatusCase(
    name: "auto-renew off never changes the state",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", autoRenew: false)],
    time: jan1 + day, state: .active, product: "premium.monthly", expires: feb1,
    ownership: .purchased, autoRenew: false, nextProduct: "premium.monthly",
    entitledProduct: "premium.monthly"),
  // Upgrades, downgrades, crossgrades.
  StatusCase(
    name: "upgrade: the new product covers, the upgraded one is revoked but not REVOKED",
    history: [
      tx("t1", "premium.monthly", jan1, feb1, revoked: jan1 + 14 * day, upgraded: true),
      tx("t2", "premium.yearly", jan1 + 14 * day, utc(2025, 1, 15), otx: "t1"),
    ],
    renewals: [renewal("t1", "premium.yearly")],
    time: jan1 + 20 * day, state: .active, product: "premium.yearly", expires: utc(2025, 1, 15),
    ownership: .purchased, autoRenew: true, nextProduct: "premium.yearly",
    entitledProduct: "premium.yearly"),
  StatusCase(
    name: "upgrade then lapse: EXPIRED (newest non-upgraded is not revoked)",
    history: [
      tx("t1", "premium.monthly", jan1, feb1, revoked: jan1 + 14 * day, upgraded: true),
      tx("t2", "premium.yearly", jan1 + 14 * day, feb1 + 14 * day, otx: "t1"),
    ],
    time: utc(2024, 3, 1), state: .expired, product: "premium.yearly", expires: feb1 + 14 * day,
    ownership: .purchased),
  StatusCase(
    name: "downgrade pending: current product until renewal, next product reported",
    history: [tx("t1", "premium.yearly", jan1, utc(2025, 1, 1))],
    renewals: [renewal("t1", "premium.yearly", next: "premium.monthly")],
    time: utc(2024, 6, 1), state: .active, product: "premium.yearly", expires: utc(2025, 1, 1),
    ownership: .purchased, autoRenew: true, nextProduct: "premium.monthly",
    entitledProduct: "premium.yearly"),
  StatusCase(
    name: "downgrade took effect at renewal",
    history: [
      tx("t1", "premium.yearly", jan1, utc(2025, 1, 1)),
      tx("t2", "premium.monthly", utc(2025, 1, 1), utc(2025, 2, 1), otx: "t1"),
    ],
    renewals: [renewal("t1", "premium.monthly")],
    time: utc(2025, 1, 10), state: .active, product: "premium.monthly", expires: utc(2025, 2, 1),
    ownership: .purchased, autoRenew: true, nextProduct: "premium.monthly",
    entitledProduct: "premium.monthly"),
  StatusCase(
    name: "crossgrade weekly to monthly at renewal",
    history: [
      tx("t1", "premium.weekly", jan1, jan1 + 7 * day),
      tx("t2", "premium.monthly", jan1 + 7 * day, utc(2024, 2, 8), otx: "t1"),
    ],
    time: jan1 + 9 * day, state: .active, product: "premium.monthly", expires: utc(2024, 2, 8),
    ownership: .purchased, entitledProduct: "premium.monthly"),
  // Rule 7: Family Sharing.
  StatusCase(
    name: "family-shared purchase is processed like a purchase, ownership reported",
    history: [tx("f1", "family.monthly", jan1, feb1, family: true)],
    time: jan1 + day, group: Group.family, state: .active, product: "family.monthly",
    expires: feb1, ownership: .familyShared, entitledProduct: "family.monthly"),
  StatusCase(
    name: "family access revoked: REVOKED",
    history: [
      tx("f1", "family.monthly", jan1, feb1, revoked: jan1 + 9 * day, family: true)
    ],
    time: jan1 + 10 * day, group: Group.family, state: .revoked, product: "family.monthly",
    expires: feb1, ownership: .familyShared),
  StatusCase(
    name: "own purchase preferred over family share with the same expiry",
    history: [
      tx("f1", "family.monthly", jan1, feb1, family: true),
      tx("p1", "family.monthly", jan1 + day, feb1),
    ],
    time: jan1 + 2 * day, group: Group.family, state: .active, product: "family.monthly",
    expires: feb1, ownership: .purchased, entitledProduct: "family.monthly"),
  // Rule 2: classification of unknown products.
  StatusCase(
    name: "unknown product with subscription_group_identifier is an auto-renewable of that group",
    history: [tx("u1", "legacy.monthly", jan1, feb1, group: "30005005")],
    time: jan1 + day, group: "30005005", state: .active, product: "legacy.monthly",
    expires: feb1, ownership: .purchased, entitledProduct: "legacy.monthly"),
  // Rule 4: sandbox periods are compressed: read expires, never the catalog duration.
  StatusCase(
    name: "sandbox monthly renews every 5 minutes: expired after 5 minutes",
    history: [tx("s1", "premium.monthly", jan1, jan1 + 5 * 60_000)],
    time: jan1 + 5 * 60_000, state: .expired, product: "premium.monthly",
    expires: jan1 + 5 * 60_000, ownership: .purchased),
]

@Suite("Group status (rules 2-7)")
struct GroupStatusTests {
  @Test("status table", arguments: statusCases)
  func status(_ c: StatusCase) throws {
    let evaluation = evaluate(c.history, c.renewals, at: c.time, policy: c.policy)
    let status = try #require(evaluation.status(ofGroup: c.group))
    #expect(status.state == c.state)
    #expect(status.productId == c.product)
    #expect(status.expiresDate == c.expires)
    #expect(status.gracePeriodExpiresDate == c.grace)
    #expect(status.ownership == c.ownership)
    #expect(status.billingIssue == c.billingIssue)
    #expect(status.inTrial == c.inTrial)
    #expect(status.inIntroOffer == c.inIntro)
    #expect(status.autoRenewEnabled == (c.autoRenew ?? false))
    #expect(status.autoRenewProductId == c.nextProduct)
    let entitled = evaluation.entitlements.filter { $0.subscriptionGroupId == c.group }
    #expect(entitled.map(\.productId) == (c.entitledProduct.map { [$0] } ?? []))
    if c.state == .gracePeriod { #expect(entitled.first?.expiresDate == c.grace) }
    if c.state == .active { #expect(entitled.first?.expiresDate == c.expires) }
  }

  @Test("one status per catalog group (catalog order), then history-only groups sorted by id")
  func severalGroups() {
    let history = [
      tx("p1", "premium.monthly", jan1, feb1),
      tx("r1", "pro.monthly", jan1, jan1 + 10 * day),
      tx("z1", "zeta.monthly", jan1, feb1, group: "90000009"),
      tx("a1", "alpha.monthly", jan1, feb1, group: "10000001"),
      tx("m1", "mystery.item", jan1),
    ]
    let evaluation = evaluate(history, at: jan1 + 15 * day)
    #expect(
      evaluation.groups.map(\.subscriptionGroupId) == [
        Group.premium, Group.pro, Group.family, Group.extra, "10000001", "90000009",
      ])
    #expect(
      evaluation.groups.map(\.state) == [
        .active, .expired, .neverSubscribed, .neverSubscribed, .active, .active,
      ])
    // The unknown product without a group is kept out of evaluation entirely.
    #expect(!evaluation.entitlements.contains { $0.productId == "mystery.item" })
    #expect(
      evaluation.entitlements.map(\.productId) == [
        "alpha.monthly", "premium.monthly", "zeta.monthly",
      ])
  }

  @Test("an unknown product without a group is ignored, even when revoked")
  func unknownWithoutGroup() {
    let evaluation = evaluate(
      [tx("m1", "mystery.item", jan1, feb1, revoked: jan1 + day)], at: jan1 + 2 * day)
    #expect(evaluation.groups.count == Fixture.catalog.subscriptionGroupIds.count)
    #expect(evaluation.entitlements.isEmpty)
    #expect(evaluation.revocations.isEmpty)
  }
}
