import SubstatusJSON
import Testing

@testable import SubscriptionDomain

/// Trends over the events the domain's derivation logs for whole lifecycles (the fixtures of
/// ``EventLifecycleTests``), not hand-built ones.
@Suite("Trends: derived lifecycles")
struct TrendsLifecycleTests {
  /// The log a store keeps after every step of a lifecycle fixture.
  private func log(_ name: String) throws -> [SubscriptionEvent] {
    let document = resolvingTimes(try JSONValue(parsing: Fixture.bytes("events/\(name)")))
    var model = EventLogModel()
    for step in document["steps"]?.arrayValue ?? [] {
      if let time = step["write"]?.int64Value {
        let transactions = try (step["transactions"]?.arrayValue ?? []).map {
          try Transaction(jwsTransactionPayload: $0, notificationType: step["notification"]?.stringValue)
        }
        let renewals = try (step["renewals"]?.arrayValue ?? []).map { try RenewalInfo(jwsRenewalInfoPayload: $0) }
        model.write(transactions, renewals, at: time)
      } else if let time = step["tick"]?.int64Value {
        model.tick(at: time)
      }
    }
    return model.log
  }

  private func trends(
    _ events: [SubscriptionEvent], from: Int64, to: Int64, _ interval: TrendInterval
  ) throws -> [TrendBucketCounts] {
    var aggregator = TrendAggregator(
      buckets: try TrendBuckets(fromMs: from, toMs: to, interval: interval), catalog: Fixture.catalog)
    for event in events { aggregator.add(event) }
    return aggregator.counts
  }

  @Test("trial, conversion, renewals, a billing issue through grace and retry, recovery: by month")
  func trialToRecoveryByMonth() throws {
    let series = try trends(
      try log("trial_conversion_billing_recovery.json"), from: utc(2024, 1, 1), to: utc(2024, 5, 1), .month)
    #expect(series.map(\.trialsStarted) == [1, 0, 0, 0])
    #expect(series.map(\.trialsConverted) == [1, 0, 0, 0])
    #expect(series.map(\.renewals) == [0, 1, 0, 1])
    #expect(series.map(\.billingIssues) == [0, 0, 1, 0])
    #expect(series.map(\.billingRecoveries) == [0, 0, 1, 0])
    #expect(series.map(\.activeSubscribers) == [1, 1, 1, 1])
    #expect(series.map(\.revenue) == [["USD": 9990], ["USD": 9990], ["USD": 9990], ["USD": 9990]])
    #expect(series.map(\.mrr) == [["USD": 9990], ["USD": 9990], ["USD": 9990], ["USD": 9990]])
    #expect(series.allSatisfy { $0.unpricedPurchases == 0 && $0.mrrUnpricedSubscriptions == 0 })
  }

  @Test("the same lifecycle by ISO week: entitled in grace, not in billing retry, back on recovery")
  func trialToRecoveryByWeek() throws {
    // Weeks from Monday 2024-03-04; grace from 03-08 to 03-24, retry until the recovery on 03-28.
    let series = try trends(
      try log("trial_conversion_billing_recovery.json"), from: utc(2024, 3, 4), to: utc(2024, 4, 1), .week)
    #expect(series.map(\.startMs) == [utc(2024, 3, 4), utc(2024, 3, 11), utc(2024, 3, 18), utc(2024, 3, 25)])
    #expect(series.map(\.activeSubscribers) == [1, 1, 0, 1])
    #expect(series.map(\.mrr) == [[:], [:], [:], ["USD": 9990]])
    #expect(series.map(\.billingIssues) == [1, 0, 0, 0])
    #expect(series.map(\.billingRecoveries) == [0, 0, 0, 1])
    #expect(series.map(\.revenue) == [[:], [:], [:], ["USD": 9990]])
  }

  @Test("a refund and its reversal, then the expiry: refunded amount, then churn")
  func refundAndReversal() throws {
    let series = try trends(
      try log("refund_and_reversal.json"), from: utc(2024, 1, 1), to: utc(2024, 3, 1), .month)
    #expect(series.map(\.newPaidSubscriptions) == [1, 0])
    #expect(series.map(\.refunds) == [1, 0])
    #expect(series.map(\.refundedRevenue) == [["USD": 9990], [:]])
    #expect(series.map(\.churned) == [0, 1])
    #expect(series.map(\.activeSubscribers) == [0, 0])
  }

  @Test("a voluntary expiry is churn; auto-renew off changes no series")
  func voluntaryExpiry() throws {
    let series = try trends(try log("voluntary_expiry.json"), from: utc(2024, 1, 1), to: utc(2024, 3, 1), .month)
    #expect(series.map(\.newPaidSubscriptions) == [1, 0])
    #expect(series.map(\.activeSubscribers) == [1, 0])
    #expect(series.map(\.churned) == [0, 1])
  }
}
