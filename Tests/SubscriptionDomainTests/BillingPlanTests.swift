import Testing

@testable import SubscriptionDomain

/// Rule 22: monthly subscriptions with a 12-month commitment (App Store Server API 1.21), from
/// Apple's signed payloads to the group's status and the trends' MRR.
@Suite("Billing plans with a commitment")
struct BillingPlanTests {
  static func commitmentData() throws -> (Transaction, RenewalInfo) {
    let t = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_commitment.json"))
    let r = try RenewalInfo(jwsRenewalInfoPayload: Fixture.bytes("v2_renewal_commitment.json"))
    return (t, r)
  }

  @Test("billingPlanType and both commitmentInfo objects are read from the signed payloads")
  func parsing() throws {
    let (t, r) = try Self.commitmentData()
    #expect(t.billingPlanType == .monthly)
    #expect(
      t.commitment
        == TransactionCommitmentInfo(
          billingPeriodNumber: 3, totalBillingPeriods: 12, commitmentExpiresDate: utc(2025, 1, 1),
          commitmentPrice: 107_880))
    #expect(r.renewalBillingPlanType == .monthly)
    #expect(r.commitment?.willRenew == false)
    #expect(r.commitment?.renewalBillingPlan == .monthly)
    #expect(r.commitment?.commitmentRenewalDate == utc(2025, 1, 1))
    #expect(r.commitment?.commitmentAutoRenewProductId == "premium.yearly")
    // A payload without them (every subscription before API 1.21) has neither.
    let plain = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_priced.json"))
    #expect(plain.rawBillingPlanType == nil && plain.commitment == nil)
  }

  /// Months 1 and 2 of the commitment were stored earlier; month 3 and the renewal info (the
  /// customer cancelled the commitment's renewal in month 3) come from Apple's payloads.
  static func history() throws -> ([Transaction], RenewalInfo) {
    let (third, renewal) = try commitmentData()
    var months: [Transaction] = []
    for (k, start, end) in [(1, utc(2024, 1, 1), utc(2024, 2, 1)), (2, utc(2024, 2, 1), utc(2024, 3, 1))] {
      var t = third
      t.transactionId = "200000000000030\(k == 1 ? 1 : 2)"
      t.purchaseDate = start
      t.expiresDate = end
      t.commitment?.billingPeriodNumber = k
      months.append(t)
    }
    return (months + [third], renewal)
  }

  @Test(
    "status reports the plan and billing period k of 12; cancelling keeps billing until the end",
    arguments: [
      (utc(2024, 1, 15), 1, false), (utc(2024, 2, 15), 2, false), (utc(2024, 3, 15), 3, true),
    ])
  func status(at time: Int64, period: Int, describedByRenewal: Bool) throws {
    let (history, renewal) = try Self.history()
    let group = try #require(evaluate(history, [renewal], at: time).status(ofGroup: Group.premium))
    #expect(group.state == .active)
    #expect(group.billingPlan == .monthly)
    // Each monthly transaction covers its own month (rule 4), not the product's year.
    #expect(group.expiresDate == history[period - 1].expiresDate)
    #expect(group.commitment?.billingPeriodNumber == period)
    #expect(group.commitment?.totalBillingPeriods == 12)
    #expect(group.commitment?.expiresDate == utc(2025, 1, 1))
    // The commitment will not renew; the next billing period still does ("billing continues
    // through all 12 periods"): auto-renew stays on. Earlier months are not described by
    // today's renewal info (rule 21).
    #expect(group.commitment?.willRenew == false)
    #expect(group.autoRenewEnabled == describedByRenewal)
    #expect(group.commitment?.renewalBillingPlan == (describedByRenewal ? .monthly : nil))
  }

  @Test("in the last billing period without a commitment info, auto-renew is the commitment's")
  func lastPeriod() throws {
    var (history, renewal) = try Self.history()
    history[2].commitment?.billingPeriodNumber = 12
    renewal.commitment = nil
    let group = try #require(evaluate(history, [renewal], at: utc(2024, 3, 15)).status(ofGroup: Group.premium))
    #expect(group.commitment?.billingPeriodNumber == 12)
    #expect(group.commitment?.willRenew == true)
    // Billed up front: no commitment reported.
    var upfront = history[2]
    upfront.billingPlanType = .billedUpfront
    upfront.commitment = nil
    let plain = try #require(evaluate([upfront], [renewal], at: utc(2024, 3, 15)).status(ofGroup: Group.premium))
    #expect(plain.billingPlan == .billedUpfront && plain.commitment == nil)
  }

  @Test("a newer unsigned copy keeps the plan and commitment an older signed copy told")
  func merge() throws {
    let (third, _) = try Self.commitmentData()
    var receipt = third
    receipt.rawBillingPlanType = nil
    receipt.commitment = nil
    receipt.signedDate = nil
    receipt.asOfDate = (third.signedDate ?? 0) + 1
    let merged = third.merging(receipt)
    #expect(merged.asOfDate == receipt.asOfDate)
    #expect(merged.billingPlanType == .monthly && merged.commitment == third.commitment)
  }

  @Test("trends: a monthly charge of a one-year commitment is a month of MRR, each charge revenue")
  func mrr() throws {
    let buckets = try TrendBuckets(fromMs: utc(2024, 1, 1), toMs: utc(2024, 3, 1), interval: .month)
    var aggregator = TrendAggregator(buckets: buckets, productDurations: ["premium.yearly": ISO8601Duration(years: 1)])
    for (k, (time, type)) in [(utc(2024, 1, 1), SubscriptionEventType.subscriptionStarted), (utc(2024, 2, 1), .renewed)]
      .enumerated()
    {
      var e = SubscriptionEvent(
        eventId: "e\(k)", appId: "app", userId: "u", environment: .production, type: type, occurredMs: time,
        detectedMs: time, subscriptionGroupId: Group.premium, productId: "premium.yearly", transactionId: "t\(k)",
        stateAfter: .active, offer: SubscriptionEventOffer.none, priceMilliunits: 8_990, currency: "USD")
      e.billingPlanType = .monthly
      aggregator.add(e)
    }
    let counts = aggregator.counts
    #expect(counts.map { $0.mrr["USD"] } == [8_990, 8_990])
    #expect(counts.map { $0.revenue["USD"] } == [8_990, 8_990])
  }
}
