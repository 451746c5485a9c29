import Testing

@testable import SubscriptionDomain

/// Retention rules (docs/architecture.md "Retention Messaging"): the matcher over a subscriber's
/// facts, and the facts the per-user summary keeps for it (format 3).
struct RetentionRulesTests {
  static let messageA = "11111111-1111-4111-8111-111111111111"
  static let messageB = "22222222-2222-4222-8222-222222222222"
  static let fallback = "00000000-0000-4000-8000-000000000000"

  /// A loyal monthly subscriber: 5 paid periods over 150 days, trial used, no billing issue.
  static var loyal: RetentionFacts {
    var f = RetentionFacts(productId: "premium.monthly")
    f.subscriptionGroupId = Group.premium
    f.known = true
    f.paidPeriods = 5
    f.tenureDays = 150
    f.introUsed = true
    f.trialUsed = true
    f.promotionalOfferEligible = true
    f.autoRenewEnabled = true
    return f
  }

  static func condition(_ change: (inout RetentionCondition) -> Void) -> RetentionCondition {
    var c = RetentionCondition()
    change(&c)
    return c
  }

  /// One field of the condition at a time, against ``loyal``.
  static let conditionCases: [(String, RetentionCondition, Bool)] = [
    ("empty", RetentionCondition(), true),
    ("product listed", condition { $0.productIds = ["premium.yearly", "premium.monthly"] }, true),
    ("product not listed", condition { $0.productIds = ["premium.yearly"] }, false),
    ("min paid 5", condition { $0.minPaidPeriods = 5 }, true),
    ("min paid 6", condition { $0.minPaidPeriods = 6 }, false),
    ("max paid 5", condition { $0.maxPaidPeriods = 5 }, true),
    ("max paid 4", condition { $0.maxPaidPeriods = 4 }, false),
    ("max paid 0", condition { $0.maxPaidPeriods = 0 }, false),
    ("min tenure 150", condition { $0.minTenureDays = 150 }, true),
    ("min tenure 151", condition { $0.minTenureDays = 151 }, false),
    ("max tenure 30", condition { $0.maxTenureDays = 30 }, false),
    ("intro used", condition { $0.introUsed = true }, true),
    ("intro not used", condition { $0.introUsed = false }, false),
    ("trial used", condition { $0.trialUsed = true }, true),
    ("trial not used", condition { $0.trialUsed = false }, false),
    ("no promotional offer used yet", condition { $0.maxPromotionalOffersUsed = 0 }, true),
    ("promotional eligible", condition { $0.promotionalOfferEligible = true }, true),
    ("promotional not eligible", condition { $0.promotionalOfferEligible = false }, false),
    ("win-back eligible", condition { $0.winBackEligible = true }, false),
    ("win-back not eligible", condition { $0.winBackEligible = false }, true),
    ("billing issue", condition { $0.billingIssue = true }, false),
    ("no billing issue", condition { $0.billingIssue = false }, true),
    ("refunded", condition { $0.refunded = true }, false),
    ("not refunded", condition { $0.refunded = false }, true),
    ("billed up front", condition { $0.billingPlanTypes = [.billedUpfront] }, true),
    ("monthly plan", condition { $0.billingPlanTypes = [.monthly] }, false),
    ("auto-renew on", condition { $0.autoRenewEnabled = true }, true),
    ("auto-renew off", condition { $0.autoRenewEnabled = false }, false),
    (
      "all of several", condition { $0.minPaidPeriods = 3; $0.introUsed = true; $0.billingIssue = false },
      true
    ),
    ("one of several fails", condition { $0.minPaidPeriods = 3; $0.refunded = true }, false),
  ]

  @Test(arguments: conditionCases)
  func conditionHolds(_ name: String, _ condition: RetentionCondition, _ expected: Bool) {
    #expect(condition.holds(for: Self.loyal) == expected, "\(name)")
  }

  /// The first rule that holds answers; none: the default message.
  @Test(arguments: [
    (5, "loyal", RetentionAnswer.promotionalOffer(messageIdentifier: messageA, offerId: "premium.winback", productId: nil)),
    (1, "switch", RetentionAnswer.alternateProduct(messageIdentifier: messageB, productId: "premium.yearly")),
    (0, nil, RetentionAnswer.message(messageIdentifier: fallback)),
  ] as [(Int, String?, RetentionAnswer)])
  func firstMatchingRuleAnswers(_ paid: Int, _ ruleId: String?, _ answer: RetentionAnswer) {
    let rules = RetentionRuleSet(
      defaultMessageIdentifier: Self.fallback,
      rules: [
        RetentionRule(
          ruleId: "loyal", condition: Self.condition { $0.minPaidPeriods = 3 },
          answer: .promotionalOffer(messageIdentifier: Self.messageA, offerId: "premium.winback", productId: nil)),
        RetentionRule(
          ruleId: "switch", condition: Self.condition { $0.minPaidPeriods = 1 },
          answer: .alternateProduct(messageIdentifier: Self.messageB, productId: "premium.yearly")),
        RetentionRule(
          ruleId: "also-one", condition: Self.condition { $0.minPaidPeriods = 1 },
          answer: .message(messageIdentifier: Self.messageA)),
      ])
    var facts = Self.loyal
    facts.paidPeriods = paid
    #expect(rules.decide(facts) == RetentionDecision(ruleId: ruleId, answer: answer))
  }

  // MARK: Facts from the summary

  static let t0 = jan1

  /// A trial, then paid months (one on a promotional offer, one refunded), as the summary sees
  /// them at `at`.
  static func facts(_ history: [Transaction], _ renewals: [RenewalInfo] = [], product: String = "premium.monthly", at: Int64)
    -> RetentionFacts
  {
    UserSummary(transactions: history, renewals: renewals, catalog: Fixture.catalog, policy: .default, at: at)
      .retentionFacts(productId: product, catalog: Fixture.catalog, policy: .default, at: at)
  }

  static let history: [Transaction] = [
    tx("t1", "premium.monthly", t0, t0 + 7 * day, otx: "o1", trial: true, offer: .introductory, discount: .freeTrial),
    tx("t2", "premium.monthly", t0 + 7 * day, t0 + 37 * day, otx: "o1"),
    tx("t3", "premium.monthly", t0 + 37 * day, t0 + 67 * day, otx: "o1", offer: .promotional),
    tx("t4", "premium.monthly", t0 + 67 * day, t0 + 97 * day, otx: "o1", revoked: t0 + 70 * day, reason: .other),
    tx("t5", "premium.monthly", t0 + 97 * day, t0 + 127 * day, otx: "o1"),
  ]

  @Test func factsOfAHistory() {
    let at = Self.t0 + 100 * day
    let f = Self.facts(Self.history, [renewal("o1", "premium.monthly")], at: at)
    #expect(f.subscriptionGroupId == Group.premium)
    #expect(f.known)
    #expect(f.paidPeriods == 3)  // t2, t3, t5: not the trial, not the refunded t4
    #expect(f.tenureDays == 100)
    #expect(f.trialUsed && f.introUsed)
    #expect(f.promotionalOffersUsed == 1)
    #expect(f.refunded)
    #expect(f.promotionalOfferEligible)
    #expect(!f.winBackEligible && !f.billingIssue)
    #expect(f.autoRenewEnabled)
    #expect(f.billingPlan == .billedUpfront)
  }

  @Test func factsBeforeLaterPurchases() {
    // At day 20 only the trial and the first paid month are purchased.
    let f = Self.facts(Self.history, at: Self.t0 + 20 * day)
    #expect(f.paidPeriods == 1)
    #expect(f.tenureDays == 20)
    #expect(f.promotionalOffersUsed == 0)
    #expect(!f.refunded)
  }

  @Test func factsOfAnUnknownUserAndProduct() {
    let none = Self.facts([], at: Self.t0)
    #expect(!none.known && none.paidPeriods == 0 && none.tenureDays == 0)
    #expect(none.subscriptionGroupId == Group.premium)
    #expect(!none.promotionalOfferEligible)
    let unknown = Self.facts(Self.history, product: "not.in.catalog", at: Self.t0 + 100 * day)
    #expect(unknown.subscriptionGroupId == nil && !unknown.known)
  }

  @Test func billingIssueAndFamilySharing() {
    let history = [
      tx("f1", "premium.monthly", Self.t0, Self.t0 + 30 * day, otx: "f1", family: true),
      tx("f2", "premium.monthly", Self.t0 + 30 * day, Self.t0 + 60 * day, otx: "f1", family: true),
    ]
    let f = Self.facts(history, [renewal("f1", "premium.monthly", retry: true)], at: Self.t0 + 61 * day)
    #expect(f.paidPeriods == 0)  // access shared by the organizer, not paid by this user
    #expect(f.billingIssue)
  }

  @Test func theSummaryKeepsTheRetentionHistory() throws {
    let at = Self.t0 + 100 * day
    let summary = UserSummary(
      transactions: Self.history, renewals: [], catalog: Fixture.catalog, policy: .default, at: at)
    #expect(summary.retention.count == 1)
    let decoded = try UserSummary(decoding: summary.encoded())
    #expect(decoded == summary)
    #expect(
      decoded.retentionFacts(productId: "premium.monthly", catalog: Fixture.catalog, policy: .default, at: at)
        == summary.retentionFacts(productId: "premium.monthly", catalog: Fixture.catalog, policy: .default, at: at))
    #expect(UserSummary.formatVersion == 3)
    var format2 = summary.encoded()
    format2[0] = 2
    #expect(throws: UserSummaryDecodingError.self) { try UserSummary(decoding: format2) }
  }

  @Test func currentSubscriptionProduct() {
    let at = Self.t0 + 100 * day
    let summary = UserSummary(
      transactions: Self.history + [tx("p1", "pro.monthly", Self.t0, Self.t0 + 30 * day)], renewals: [],
      catalog: Fixture.catalog, policy: .default, at: at)
    #expect(summary.currentSubscriptionProductId == "premium.monthly")
  }
}

/// Trends count retention answers per rule and what the subscribers did next.
struct RetentionTrendsTests {
  static func event(
    _ user: String, _ type: SubscriptionEventType, _ at: Int64, rule: String? = nil, stateAfter: SubscriptionState? = nil
  ) -> SubscriptionEvent {
    var e = SubscriptionEvent(
      eventId: "\(user)-\(type.rawValue)-\(at)", appId: "a1", userId: user, environment: .production, type: type,
      occurredMs: at, detectedMs: at, subscriptionGroupId: Group.premium, productId: "premium.monthly",
      transactionId: type == .renewed ? "\(user)-\(at)" : nil, stateAfter: stateAfter)
    if type == .retentionOffered {
      e.retention = RetentionOfferRecord(
        kind: rule == nil ? .defaultMessage : .message, ruleId: rule, messageIdentifier: RetentionRulesTests.messageA,
        offeredId: nil)
    }
    return e
  }

  @Test func offeredStayedAndExpiredPerRule() throws {
    let buckets = try TrendBuckets(fromMs: jan1, toMs: jan1 + 60 * day, interval: .month)
    var trends = TrendAggregator(buckets: buckets, productDurations: [:])
    let events = [
      Self.event("u1", .subscriptionStarted, jan1 - 20 * day, stateAfter: .active),
      Self.event("u1", .retentionOffered, jan1 + day, rule: "loyal"),
      Self.event("u2", .retentionOffered, jan1 + 2 * day),
      Self.event("u3", .retentionOffered, jan1 + 3 * day, rule: "loyal"),
      Self.event("u2", .expired, jan1 + 5 * day, stateAfter: .expired),
      Self.event("u1", .renewed, jan1 + 10 * day, stateAfter: .active),
      Self.event("u1", .renewed, jan1 + 40 * day, stateAfter: .active),  // counted once
      Self.event("u4", .retentionOffered, jan1 + 35 * day, rule: "loyal"),
      Self.event("u4", .expired, jan1 + 36 * day, stateAfter: .expired),
    ]
    for e in events { trends.add(e) }
    let counts = trends.counts
    #expect(counts[0].retention["loyal"] == RetentionTrendCounts(offered: 2, stayed: 1, expired: 0))
    #expect(counts[0].retention[""] == RetentionTrendCounts(offered: 1, stayed: 0, expired: 1))
    #expect(counts[1].retention == ["loyal": RetentionTrendCounts(offered: 1, stayed: 0, expired: 1)])
    // The answers change nothing else: u1's renewals and u2's expiry count as without them.
    var without = TrendAggregator(buckets: buckets, productDurations: [:])
    for e in events where e.type != .retentionOffered { without.add(e) }
    for (a, b) in zip(counts, without.counts) {
      var a = a
      a.retention = [:]
      #expect(a == b)
    }
  }
}

extension RetentionTrendCounts {
  init(offered: Int64, stayed: Int64, expired: Int64) {
    self.init()
    self.offered = offered
    self.stayed = stayed
    self.expired = expired
  }
}
