import Testing

@testable import SubscriptionDomain

/// One row of the eligibility table: a history, a product, and both answers.
struct EligibilityCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction] = []
  var renewals: [RenewalInfo] = []
  var time: Int64 = utc(2024, 6, 1)
  var product = "premium.monthly"
  var policy: EligibilityPolicy = .default
  var intro: (Bool, EligibilityReason, String?)
  var promo: (Bool, EligibilityReason, String?)
  var testDescription: String { name }
}

private let may1 = utc(2024, 5, 1)
private let jul1 = utc(2024, 7, 1)

let eligibilityCases: [EligibilityCase] = [
  // Rule 8: introductory offers.
  EligibilityCase(
    name: "NEW_CUSTOMER: nothing in the group",
    intro: (true, .newCustomer, nil), promo: (false, .neverSubscribed, nil)),
  EligibilityCase(
    name: "NEW_CUSTOMER: an intro used in another group does not count",
    history: [tx("r1", "pro.monthly", jan1, jan1 + 7 * day, trial: true)],
    intro: (true, .newCustomer, nil), promo: (false, .neverSubscribed, nil)),
  EligibilityCase(
    name: "LAPSED_NO_INTRO_USED: lapsed paid subscriber who never used an intro is eligible",
    history: [tx("p1", "premium.monthly", jan1, feb1), tx("p2", "premium.monthly", feb1, mar1, otx: "p1")],
    intro: (true, .lapsedNoIntroUsed, "p2"), promo: (true, .lapsedSubscriber, "p2")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: a free trial in the group, on another product",
    history: [tx("p1", "premium.monthly", jan1, jan1 + 7 * day, trial: true)],
    product: "premium.yearly",
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: pay-as-you-go intro",
    history: [tx("p1", "premium.monthly", jan1, feb1, intro: true)],
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: V2 offerType 1 pay-up-front",
    history: [tx("p1", "premium.yearly", jan1, may1, offer: .introductory, discount: .payUpFront)],
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: a refunded trial still used the intro",
    history: [tx("p1", "premium.monthly", jan1, jan1 + 7 * day, trial: true, revoked: jan1 + day)],
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: an upgraded intro transaction still counts",
    history: [
      tx("p1", "premium.monthly", jan1, feb1, intro: true, revoked: jan1 + 3 * day, upgraded: true),
      tx("p2", "premium.yearly", jan1 + 3 * day, jan1 + 33 * day, otx: "p1"),
    ],
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .lapsedSubscriber, "p2")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: a family-shared trial counts",
    history: [tx("f1", "family.monthly", jan1, jan1 + 7 * day, trial: true, family: true)],
    product: "family.monthly",
    intro: (false, .introAlreadyUsed, "f1"), promo: (true, .lapsedSubscriber, "f1")),
  EligibilityCase(
    name: "INTRO_ALREADY_USED: the earliest intro transaction is the evidence",
    history: [
      tx("p9", "premium.monthly", jan1 + 90 * day, jan1 + 97 * day, trial: true),
      tx("p1", "premium.monthly", jan1, jan1 + 7 * day, trial: true),
    ],
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .lapsedSubscriber, "p9")),
  EligibilityCase(
    name: "offer codes do not use up the intro offer (even a free one)",
    history: [tx("p1", "premium.monthly", jan1, feb1, trial: true, offer: .offerCode)],
    intro: (true, .lapsedNoIntroUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "promotional offers do not use up the intro offer",
    history: [tx("p1", "premium.monthly", jan1, feb1, offer: .promotional, discount: .freeTrial)],
    intro: (true, .lapsedNoIntroUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "ACTIVE_SUBSCRIPTION: no intro for a plan change within an active group",
    history: [tx("p1", "premium.monthly", may1, jul1)], product: "premium.yearly",
    intro: (false, .activeSubscription, "p1"), promo: (true, .existingSubscriber, "p1")),
  EligibilityCase(
    name: "ACTIVE_SUBSCRIPTION: family-shared access is a subscription of the group",
    history: [tx("f1", "family.monthly", may1, jul1, family: true)], product: "family.monthly",
    intro: (false, .activeSubscription, "f1"), promo: (true, .existingSubscriber, "f1")),
  EligibilityCase(
    name: "IN_GRACE_PERIOD",
    history: [tx("p1", "premium.monthly", may1 - 30 * day, may1 + 25 * day)],
    renewals: [renewal("p1", "premium.monthly", retry: true, grace: may1 + 40 * day)],
    intro: (false, .inGracePeriod, "p1"), promo: (true, .existingSubscriber, "p1")),
  EligibilityCase(
    name: "IN_BILLING_RETRY",
    history: [tx("p1", "premium.monthly", may1 - 30 * day, may1)],
    renewals: [renewal("p1", "premium.monthly", retry: true)],
    intro: (false, .inBillingRetry, "p1"), promo: (true, .existingSubscriber, "p1")),
  // Rule 10: policy switches.
  EligibilityCase(
    name: "a refund does not block the intro by default",
    history: [tx("p1", "premium.monthly", jan1, feb1, revoked: jan1 + 2 * day, reason: .appIssue)],
    intro: (true, .lapsedNoIntroUsed, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "REFUNDED_IN_GROUP under refundsBlockIntro",
    history: [
      tx("p1", "premium.monthly", jan1, feb1, revoked: jan1 + 2 * day, reason: .appIssue),
      tx("p2", "premium.monthly", mar1, may1),
    ],
    policy: EligibilityPolicy(refundsBlockIntro: true),
    intro: (false, .refundedInGroup, "p1"), promo: (true, .lapsedSubscriber, "p2")),
  EligibilityCase(
    name: "refundsBlockIntro: a Family Sharing removal is not a refund",
    history: [
      tx("f1", "family.monthly", jan1, feb1, revoked: jan1 + 2 * day, reason: .other, family: true)
    ],
    product: "family.monthly", policy: EligibilityPolicy(refundsBlockIntro: true),
    intro: (true, .lapsedNoIntroUsed, "f1"), promo: (true, .lapsedSubscriber, "f1")),
  EligibilityCase(
    name: "refundsBlockIntro: a refund in another group does not count",
    history: [tx("r1", "pro.monthly", jan1, feb1, revoked: jan1 + 2 * day)],
    policy: EligibilityPolicy(refundsBlockIntro: true),
    intro: (true, .newCustomer, nil), promo: (false, .neverSubscribed, nil)),
  EligibilityCase(
    name: "LAPSED_SUBSCRIBER (not eligible) when lapsedSubscribersGetIntro is off",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    policy: EligibilityPolicy(lapsedSubscribersGetIntro: false),
    intro: (false, .lapsedSubscriber, "p1"), promo: (true, .lapsedSubscriber, "p1")),
  EligibilityCase(
    name: "lapsedSubscribersGetIntro off still lets new customers in",
    policy: EligibilityPolicy(lapsedSubscribersGetIntro: false),
    intro: (true, .newCustomer, nil), promo: (false, .neverSubscribed, nil)),
  // Rule 9: promotional offers, group or app scope.
  EligibilityCase(
    name: "promo, group scope: a subscription in another group does not count",
    history: [tx("r1", "pro.monthly", may1, jul1)],
    intro: (true, .newCustomer, nil), promo: (false, .neverSubscribed, nil)),
  EligibilityCase(
    name: "promo, app scope: an active subscription in another group makes an existing subscriber",
    history: [tx("r1", "pro.monthly", may1, jul1)],
    policy: EligibilityPolicy(promoScope: .app),
    intro: (true, .newCustomer, nil), promo: (true, .existingSubscriber, "r1")),
  EligibilityCase(
    name: "promo, app scope: a lapsed subscription in another group",
    history: [tx("r1", "pro.monthly", jan1, feb1)],
    policy: EligibilityPolicy(promoScope: .app),
    intro: (true, .newCustomer, nil), promo: (true, .lapsedSubscriber, "r1")),
  EligibilityCase(
    name: "promo: a used intro does not matter",
    history: [tx("p1", "premium.monthly", may1, may1 + 7 * day, trial: true)],
    time: may1 + day,
    intro: (false, .introAlreadyUsed, "p1"), promo: (true, .existingSubscriber, "p1")),
  // Products the offers do not apply to.
  EligibilityCase(
    name: "NO_INTRO_OFFER: the catalog says the product has none",
    history: [], product: "premium.weekly",
    intro: (false, .noIntroOffer, nil), promo: (false, .neverSubscribed, nil)),
  EligibilityCase(
    name: "NOT_A_SUBSCRIPTION: non-renewing", product: "pass.30days",
    intro: (false, .notASubscription, nil), promo: (false, .notASubscription, nil)),
  EligibilityCase(
    name: "NOT_A_SUBSCRIPTION: non-consumable", product: "lifetime",
    intro: (false, .notASubscription, nil), promo: (false, .notASubscription, nil)),
  EligibilityCase(
    name: "NOT_A_SUBSCRIPTION: consumable", product: "coins.100",
    intro: (false, .notASubscription, nil), promo: (false, .notASubscription, nil)),
  EligibilityCase(
    name: "NOT_A_SUBSCRIPTION: free subscription", product: "newsstand.free",
    intro: (false, .notASubscription, nil), promo: (false, .notASubscription, nil)),
  EligibilityCase(
    name: "UNKNOWN_PRODUCT: not in the catalog, even when the history has it",
    history: [tx("u1", "legacy.monthly", jan1, feb1, group: Group.premium)],
    product: "legacy.monthly",
    intro: (false, .unknownProduct, nil), promo: (false, .unknownProduct, nil)),
]

@Suite("Eligibility (rules 8-10)")
struct EligibilityTests {
  @Test("eligibility table", arguments: eligibilityCases)
  func eligibility(_ c: EligibilityCase) {
    let evaluation = evaluate(c.history, c.renewals, at: c.time, policy: c.policy)
    let answer = evaluation.eligibility(for: c.product)
    #expect(answer.productId == c.product)
    #expect(answer.introductory.eligible == c.intro.0)
    #expect(answer.introductory.reason == c.intro.1)
    #expect(answer.introductory.evidenceTransactionId == c.intro.2)
    #expect(answer.promotional.eligible == c.promo.0)
    #expect(answer.promotional.reason == c.promo.1)
    #expect(answer.promotional.evidenceTransactionId == c.promo.2)
  }

  @Test("every EligibilityReason is produced by some row of the table")
  func everyReasonCovered() {
    var seen = Set<EligibilityReason>()
    for c in eligibilityCases {
      let answer = evaluate(c.history, c.renewals, at: c.time, policy: c.policy)
        .eligibility(for: c.product)
      seen.insert(answer.introductory.reason)
      seen.insert(answer.promotional.reason)
    }
    // Win-back reasons have their own table (WinBackOfferTests); NEW_CUSTOMER_VERIFIED comes from
    // the user's Apple Account, not the history (AppTransactionIdTests).
    #expect(
      seen == Set(EligibilityReason.allCases).subtracting([.winBackOffered, .winBackNotOffered, .newCustomerVerified]))
  }

  @Test("reason names are the API's")
  func reasonNames() {
    #expect(
      EligibilityReason.allCases.map(\.rawValue) == [
        "NEW_CUSTOMER", "LAPSED_NO_INTRO_USED", "INTRO_ALREADY_USED", "ACTIVE_SUBSCRIPTION",
        "IN_GRACE_PERIOD", "IN_BILLING_RETRY", "REFUNDED_IN_GROUP", "NO_INTRO_OFFER",
        "EXISTING_SUBSCRIBER", "LAPSED_SUBSCRIBER", "NEVER_SUBSCRIBED", "NOT_A_SUBSCRIPTION",
        "UNKNOWN_PRODUCT", "WIN_BACK_OFFERED", "WIN_BACK_NOT_OFFERED", "NEW_CUSTOMER_VERIFIED",
      ])
    #expect(
      SubscriptionState.allCases.map(\.rawValue) == [
        "ACTIVE", "GRACE_PERIOD", "BILLING_RETRY", "REVOKED", "EXPIRED", "NEVER_SUBSCRIBED",
      ])
  }

  @Test("a batch answers in request order, with groups, and repeats allowed")
  func batchOrder() {
    let evaluation = evaluate([tx("p1", "premium.monthly", jan1, feb1)], at: jan1 + day)
    let products = ["pro.yearly", "nope", "premium.yearly", "lifetime", "pro.yearly"]
    let answers = evaluation.eligibility(for: products)
    #expect(answers.map(\.productId) == products)
    #expect(answers.map(\.subscriptionGroupId) == [Group.pro, nil, Group.premium, nil, Group.pro])
    #expect(
      answers.map(\.introductory.reason) == [
        .newCustomer, .unknownProduct, .activeSubscription, .notASubscription, .newCustomer,
      ])
  }
}

@Suite("Report counts")
struct ReportCountTests {
  @Test("one user's counts, and sums across users")
  func counts() {
    let trialUser = evaluate(
      [tx("t", "premium.monthly", jan1, jan1 + 7 * day, trial: true)], at: jan1 + day
    ).reportCounts
    var expected = ReportCounts()
    expected.active = 1
    expected.inTrial = 1
    #expect(trialUser == expected)

    let introUser = evaluate([tx("i", "premium.monthly", jan1, feb1, intro: true)], at: jan1 + day)
      .reportCounts
    #expect(introUser.inIntroOffer == 1 && introUser.inTrial == 0 && introUser.active == 1)

    let graceUser = evaluate(
      [tx("g", "premium.monthly", jan1, feb1)], [renewal("g", "premium.monthly", retry: true, grace: feb17)],
      at: feb1 + day
    ).reportCounts
    #expect(graceUser.inGracePeriod == 1 && graceUser.active == 0 && graceUser.expired == 0)

    let retryUser = evaluate(
      [tx("r", "premium.monthly", jan1, feb1)], [renewal("r", "premium.monthly", retry: true)],
      at: feb1 + day
    ).reportCounts
    #expect(retryUser.inBillingRetry == 1 && retryUser.expired == 0)

    let churned = evaluate(
      [tx("e", "premium.monthly", jan1, feb1, revoked: jan1 + day, reason: .appIssue)],
      at: mar1
    ).reportCounts
    #expect(churned.expired == 1 && churned.refunded == 1 && churned.familyAccessRevoked == 0)

    let member = evaluate(
      [
        tx("f", "family.monthly", jan1, feb1, family: true),
        tx("x", "pro.monthly", jan1, feb1, revoked: jan1 + day, reason: .other, family: true),
      ],
      at: jan1 + 2 * day
    ).reportCounts
    #expect(member.familySharedBeneficiaries == 1 && member.familyAccessRevoked == 1)
    #expect(member.active == 1 && member.expired == 0 && member.refunded == 0)

    let never = evaluate([], at: jan1).reportCounts
    #expect(never == ReportCounts())

    let total = [trialUser, introUser, graceUser, retryUser, churned, member, never].reduce(
      ReportCounts(), +)
    #expect(total.active == 3)
    #expect(total.inTrial == 1)
    #expect(total.inIntroOffer == 1)
    #expect(total.inGracePeriod == 1)
    #expect(total.inBillingRetry == 1)
    #expect(total.expired == 1)
    #expect(total.refunded == 1)
    #expect(total.familySharedBeneficiaries == 1)
    #expect(total.familyAccessRevoked == 1)
  }
}
