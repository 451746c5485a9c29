import Testing

@testable import SubscriptionDomain

/// One row of the upgrade table (rule 12): a history, an instant, the group's state, what is
/// entitled, and the introductory answer for `premium.monthly`.
struct UpgradeCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction]
  var renewals: [RenewalInfo] = []
  var time: Int64
  var state: SubscriptionState
  var product: String?
  var transaction: String?
  var entitled: [String]
  var intro: (Bool, EligibilityReason, String?)
  var policy: EligibilityPolicy = .default
  var testDescription: String { name }
}

private let apr1 = utc(2024, 4, 1)
private let yearEnd = utc(2025, 1, 1)

/// The story: `premium.yearly` bought on Jan 1, upgraded on Mar 1 to `premium.monthly`.
private let yearly = tx("y1", "premium.yearly", jan1, yearEnd)
private let monthly = tx("m1", "premium.monthly", mar1, apr1, otx: "y1")

let upgradeCases: [UpgradeCase] = [
  UpgradeCase(
    name: "before the upgrade the old period covers (the new purchase has not happened yet)",
    history: [yearly, monthly], time: feb1, state: .active, product: "premium.yearly",
    transaction: "y1", entitled: ["premium.yearly"], intro: (false, .activeSubscription, "y1")),
  UpgradeCase(
    name: "upgrade known only from the new transaction: the old period ends at its purchase",
    history: [yearly, monthly], time: mar1, state: .active, product: "premium.monthly",
    transaction: "m1", entitled: ["premium.monthly"], intro: (false, .activeSubscription, "m1")),
  UpgradeCase(
    name: "the new period lapsed: EXPIRED, the old yearly does not come back",
    history: [yearly, monthly], time: apr1, state: .expired, product: "premium.monthly",
    transaction: "m1", entitled: [], intro: (true, .lapsedNoIntroUsed, "m1")),
  UpgradeCase(
    name: "the new period lapsed, strict lapsed policy: LAPSED_SUBSCRIBER",
    history: [yearly, monthly], time: apr1 + 10 * day, state: .expired,
    product: "premium.monthly", transaction: "m1", entitled: [],
    intro: (false, .lapsedSubscriber, "m1"),
    policy: EligibilityPolicy(lapsedSubscribersGetIntro: false)),
  UpgradeCase(
    name: "isUpgraded without a revocation date never entitles, even inside its period",
    history: [tx("y1", "premium.yearly", jan1, yearEnd, upgraded: true)], time: feb1,
    state: .expired, product: "premium.yearly", transaction: "y1", entitled: [],
    intro: (true, .lapsedNoIntroUsed, "y1")),
  UpgradeCase(
    name: "isUpgraded re-submitted beside the new transaction: the new one decides",
    history: [tx("y1", "premium.yearly", jan1, yearEnd, upgraded: true), monthly],
    time: utc(2024, 3, 15), state: .active, product: "premium.monthly", transaction: "m1",
    entitled: ["premium.monthly"], intro: (false, .activeSubscription, "m1")),
  UpgradeCase(
    name: "isUpgraded re-submitted, new period lapsed: EXPIRED and not entitled",
    history: [tx("y1", "premium.yearly", jan1, yearEnd, upgraded: true), monthly],
    time: utc(2024, 6, 1), state: .expired, product: "premium.monthly", transaction: "m1",
    entitled: [], intro: (true, .lapsedNoIntroUsed, "m1")),
  UpgradeCase(
    name: "isUpgraded with a revocation date after the upgrade instant still never entitles",
    history: [
      tx("y1", "premium.yearly", jan1, yearEnd, revoked: apr1, upgraded: true),
      tx("m1", "premium.monthly", mar1, utc(2024, 3, 2), otx: "y1"),
    ],
    time: utc(2024, 3, 10), state: .expired, product: "premium.monthly", transaction: "m1",
    entitled: [], intro: (true, .lapsedNoIntroUsed, "m1")),
  UpgradeCase(
    name: "REVOKED comes from the newest non-upgraded transaction: the new one refunded",
    history: [
      tx("y1", "premium.yearly", jan1, yearEnd, upgraded: true),
      tx("m1", "premium.monthly", mar1, apr1, otx: "y1", revoked: utc(2024, 3, 5)),
    ],
    time: utc(2024, 3, 10), state: .revoked, product: "premium.monthly", transaction: "m1",
    entitled: [], intro: (true, .lapsedNoIntroUsed, "m1")),
  UpgradeCase(
    name: "an upgraded-away trial still used the intro offer",
    history: [
      tx("y1", "premium.yearly", jan1, yearEnd, trial: true),
      tx("m1", "premium.monthly", jan1 + 3 * day, feb1, otx: "y1"),
    ],
    time: feb1 + day, state: .expired, product: "premium.monthly", transaction: "m1",
    entitled: [], intro: (false, .introAlreadyUsed, "y1")),
  UpgradeCase(
    name: "grace after an upgrade belongs to the new period, not the old one",
    history: [yearly, monthly],
    renewals: [renewal("y1", "premium.monthly", retry: true, grace: apr1 + 16 * day)],
    time: apr1 + 3 * day, state: .gracePeriod, product: "premium.monthly", transaction: "m1",
    entitled: ["premium.monthly"], intro: (false, .inGracePeriod, "m1")),
  UpgradeCase(
    name: "renewals are not shortened: a renewal starts where the old period ends",
    history: [
      tx("m1", "premium.monthly", jan1, feb1), tx("m2", "premium.monthly", feb1, mar1, otx: "m1"),
    ],
    time: feb1 - 1, state: .active, product: "premium.monthly", transaction: "m1",
    entitled: ["premium.monthly"], intro: (false, .activeSubscription, "m1")),
  UpgradeCase(
    name: "another subscription (another original transaction) is not ended by a purchase",
    history: [
      tx("y1", "premium.yearly", jan1, yearEnd),
      tx("x1", "premium.monthly", mar1, apr1, family: true),
    ],
    time: apr1 + day, state: .active, product: "premium.yearly", transaction: "y1",
    entitled: ["premium.yearly"], intro: (false, .activeSubscription, "y1")),
]

@Suite("Upgrades end the old period at once (rule 12)")
struct UpgradeRuleTests {
  @Test("upgrade table", arguments: upgradeCases)
  func upgrade(_ c: UpgradeCase) throws {
    let evaluation = evaluate(c.history, c.renewals, at: c.time, policy: c.policy)
    let status = try #require(evaluation.status(ofGroup: Group.premium))
    #expect(status.state == c.state)
    #expect(status.productId == c.product)
    #expect(status.transactionId == c.transaction)
    #expect(
      evaluation.entitlements.filter { $0.subscriptionGroupId == Group.premium }.map(\.productId)
        == c.entitled)
    let intro = evaluation.eligibility(for: "premium.monthly").introductory
    #expect(intro.eligible == c.intro.0)
    #expect(intro.reason == c.intro.1)
    #expect(intro.evidenceTransactionId == c.intro.2)
  }

  @Test("the result does not depend on the order of the history")
  func orderIndependent() {
    let history = [tx("y1", "premium.yearly", jan1, yearEnd, upgraded: true), yearly, monthly]
    let reference = evaluate(history, at: utc(2024, 3, 15))
    #expect(evaluate(history.reversed(), at: utc(2024, 3, 15)) == reference)
    #expect(reference.status(ofGroup: Group.premium)?.productId == "premium.monthly")
  }
}
