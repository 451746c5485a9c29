import Testing

import SubscriptionDomain

/// A hand-built event of the trends tables: the fields trends read, the rest fixed.
private func event(
  _ type: SubscriptionEventType, _ user: String, at time: Int64, after state: SubscriptionState?,
  group: String? = "pro", product: String? = "pro.monthly", offer: SubscriptionEventOffer? = nil,
  price: Int64? = nil, currency: String? = nil, transaction: String? = nil,
  ownership: OwnershipType? = nil
) -> SubscriptionEvent {
  SubscriptionEvent(
    eventId: "\(user)-\(type.rawValue)-\(time)", appId: "app", userId: user, environment: .production,
    type: type, occurredMs: time, detectedMs: time, subscriptionGroupId: group, productId: product,
    transactionId: transaction, stateAfter: state, offer: offer, priceMilliunits: price,
    currency: currency, ownershipType: ownership)
}

private let durations: [String: ISO8601Duration] = [
  "pro.monthly": ISO8601Duration(months: 1), "pro.yearly": ISO8601Duration(years: 1),
  "pro.weekly": ISO8601Duration(weeks: 1),
]

private func trends(from: Int64, to: Int64, _ events: [SubscriptionEvent]) throws -> [TrendBucketCounts] {
  try trends(from: from, to: to, .day, events)
}

private func trends(
  from: Int64, to: Int64, _ interval: TrendInterval, _ events: [SubscriptionEvent]
) throws -> [TrendBucketCounts] {
  var aggregator = TrendAggregator(
    buckets: try TrendBuckets(fromMs: from, toMs: to, interval: interval), productDurations: durations)
  for event in events { aggregator.add(event) }
  return aggregator.counts
}

@Suite("Trends: buckets")
struct TrendBucketsTests {
  @Test(
    "cuts ranges at UTC days, ISO weeks (Mondays) and calendar months, clipped to the range",
    arguments: [
      // Leap February: 29 days.
      (utc(2024, 2, 27), utc(2024, 3, 2), TrendInterval.day,
       [utc(2024, 2, 27), utc(2024, 2, 28), utc(2024, 2, 29), utc(2024, 3, 1)]),
      // 2024-01-03 is a Wednesday: the first week runs to Monday 2024-01-08.
      (utc(2024, 1, 3), utc(2024, 1, 22), .week, [utc(2024, 1, 3), utc(2024, 1, 8), utc(2024, 1, 15)]),
      // 2024-12-30 is a Monday (ISO week 1 of 2025): weeks cross the year unchanged.
      (utc(2024, 12, 30), utc(2025, 1, 14), .week, [utc(2024, 12, 30), utc(2025, 1, 6), utc(2025, 1, 13)]),
      // A Sunday alone is a whole (cut) week.
      (utc(2024, 1, 7), utc(2024, 1, 8), .week, [utc(2024, 1, 7)]),
      (utc(2024, 1, 15), utc(2024, 4, 1), .month, [utc(2024, 1, 15), utc(2024, 2, 1), utc(2024, 3, 1)]),
      (utc(2023, 12, 1), utc(2024, 2, 10), .month, [utc(2023, 12, 1), utc(2024, 1, 1), utc(2024, 2, 1)]),
      // Before 1970 (negative instants) too.
      (utc(1969, 12, 31), utc(1970, 1, 2), .day, [utc(1969, 12, 31), utc(1970, 1, 1)]),
    ])
  func starts(from: Int64, to: Int64, interval: TrendInterval, expected: [Int64]) throws {
    let buckets = try TrendBuckets(fromMs: from, toMs: to, interval: interval)
    #expect(buckets.starts == expected)
    #expect(buckets.endMs == to)
    #expect(buckets.end(of: buckets.count - 1) == to)
  }

  @Test(
    "refuses ranges naming the field",
    arguments: [
      (utc(2024, 1, 1, 1), utc(2024, 1, 5), TrendInterval.day, "from_ms"),
      (utc(2024, 1, 1), utc(2024, 1, 5, 0, 1), .day, "to_ms"),
      (utc(2024, 1, 5), utc(2024, 1, 5), .day, "to_ms"),
      (utc(2024, 1, 6), utc(2024, 1, 5), .month, "to_ms"),
      // 1,001 days.
      (utc(2020, 1, 1), utc(2020, 1, 1) + 1001 * 86_400_000, .day, "interval"),
    ])
  func refuses(from: Int64, to: Int64, interval: TrendInterval, field: String) {
    #expect(throws: TrendRangeError.self) { try TrendBuckets(fromMs: from, toMs: to, interval: interval) }
    do {
      _ = try TrendBuckets(fromMs: from, toMs: to, interval: interval)
    } catch {
      #expect(error.field == field)
    }
  }

  @Test("1,000 buckets are allowed")
  func thousand() throws {
    let buckets = try TrendBuckets(
      fromMs: utc(2020, 1, 1), toMs: utc(2020, 1, 1) + 1000 * 86_400_000, interval: .day)
    #expect(buckets.count == TrendBuckets.maximumCount)
  }

  @Test("finds an instant's bucket: -1 before the range, nil from its end")
  func index() throws {
    let buckets = try TrendBuckets(fromMs: utc(2024, 1, 15), toMs: utc(2024, 4, 1), interval: .month)
    #expect(buckets.index(of: utc(2024, 1, 14, 23, 59)) == -1)
    #expect(buckets.index(of: utc(2024, 1, 15)) == 0)
    #expect(buckets.index(of: utc(2024, 2, 1) - 1) == 0)
    #expect(buckets.index(of: utc(2024, 2, 1)) == 1)
    #expect(buckets.index(of: utc(2024, 3, 31, 23, 59)) == 2)
    #expect(buckets.index(of: utc(2024, 4, 1)) == nil)
  }
}

@Suite("Trends: counting events")
struct TrendAggregatorTests {
  @Test(
    "normalizes prices to a month",
    arguments: [
      (2990, ISO8601Duration(weeks: 1), Int64?(12957)),  // 2990 × 52 / 12 = 12956.67
      (9990, ISO8601Duration(months: 1), 9990),
      (10000, ISO8601Duration(months: 2), 5000),
      (29990, ISO8601Duration(months: 3), 9997),  // 9996.67
      (59990, ISO8601Duration(months: 6), 9998),  // 9998.33
      (99990, ISO8601Duration(years: 1), 8333),  // 8332.5, half up
      (1000, ISO8601Duration(days: 30), 1014),  // 1000 × 365 / 360 = 1013.9
      (1000, ISO8601Duration(months: 1, weeks: 1), nil),
      (1000, ISO8601Duration(hours: 1), nil),
    ] as [(Int64, ISO8601Duration, Int64?)])
  func monthly(price: Int64, duration: ISO8601Duration, expected: Int64?) {
    #expect(monthlyMilliunits(price: price, duration: duration) == expected)
  }

  @Test("a trial that converts and renews across monthly buckets, with MRR from the conversion")
  func subscriptionCrossingBuckets() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 4, 1), .month,
      [
        event(.subscriptionStarted, "u1", at: utc(2024, 1, 25), after: .active, offer: .freeTrial,
              price: 0, currency: "USD", transaction: "t1"),
        event(.trialConverted, "u1", at: utc(2024, 2, 1, 10), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "t2"),
        event(.renewed, "u1", at: utc(2024, 3, 1, 10), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "t3"),
      ])
    #expect(series.map(\.activeSubscribers) == [1, 1, 1])
    #expect(series.map(\.activeTrials) == [1, 0, 0])
    #expect(series.map(\.trialsStarted) == [1, 0, 0])
    #expect(series.map(\.trialsConverted) == [0, 1, 0])
    #expect(series.map(\.trialConversionRate) == [0, 1, 0])
    #expect(series.map(\.renewals) == [0, 0, 1])
    #expect(series.map(\.newPaidSubscriptions) == [0, 0, 0])
    #expect(series.map(\.revenue) == [["USD": 0], ["USD": 9990], ["USD": 9990]])
    #expect(series.map(\.mrr) == [[:], ["USD": 9990], ["USD": 9990]])
    #expect(series.map(\.unpricedPurchases) == [0, 0, 0])
    #expect(series.map(\.startMs) == [utc(2024, 1, 1), utc(2024, 2, 1), utc(2024, 3, 1)])
    #expect(series.map(\.endMs) == [utc(2024, 2, 1), utc(2024, 3, 1), utc(2024, 4, 1)])
  }

  @Test("events before the range set who is subscribed when it starts, without counting as flows")
  func eventsBeforeTheRange() throws {
    let series = try trends(
      from: utc(2024, 3, 1), to: utc(2024, 3, 3),
      [
        event(.subscriptionStarted, "u1", at: utc(2023, 6, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 99990, currency: "EUR", transaction: "a1"),
        event(.subscriptionStarted, "u2", at: utc(2023, 7, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "b1"),
        event(.expired, "u2", at: utc(2023, 8, 1), after: .expired),
        event(.expired, "u1", at: utc(2024, 3, 2, 12), after: .expired),
      ].map {
        var e = $0
        if e.userId == "u1" { e.productId = "pro.yearly" }
        return e
      })
    #expect(series.map(\.activeSubscribers) == [1, 0])
    #expect(series.map(\.mrr) == [["EUR": 8333], [:]])
    #expect(series.map(\.newPaidSubscriptions) == [0, 0])
    #expect(series.map(\.churned) == [0, 1])
    #expect(series.allSatisfy { $0.revenue.isEmpty })
  }

  @Test("a bucket's edges: an event at a bucket's start belongs to it, not to the one before")
  func bucketEdges() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 4),
      [
        event(.subscriptionStarted, "u1", at: utc(2024, 1, 2), after: .active, offer: SubscriptionEventOffer.none,
              price: 1000, currency: "USD", transaction: "t1"),
        event(.expired, "u1", at: utc(2024, 1, 3) - 1, after: .expired),
        // At the range's end: not counted.
        event(.subscriptionStarted, "u2", at: utc(2024, 1, 4), after: .active, offer: SubscriptionEventOffer.none,
              price: 1000, currency: "USD", transaction: "t2"),
      ])
    #expect(series.map(\.newPaidSubscriptions) == [0, 1, 0])
    #expect(series.map(\.churned) == [0, 1, 0])
    #expect(series.map(\.activeSubscribers) == [0, 0, 0])
  }

  @Test("a refund revokes, counts with its price, and stops the MRR")
  func refunds() throws {
    let series = try trends(
      from: utc(2024, 5, 1), to: utc(2024, 5, 4),
      [
        event(.subscriptionStarted, "u1", at: utc(2024, 5, 1, 8), after: .active, offer: .introductory,
              price: 4990, currency: "GBP", transaction: "t1"),
        event(.refunded, "u1", at: utc(2024, 5, 2, 9), after: .revoked, price: 4990, currency: "GBP",
              transaction: "t1"),
      ])
    #expect(series.map(\.newPaidSubscriptions) == [1, 0, 0])
    #expect(series.map(\.refunds) == [0, 1, 0])
    #expect(series.map(\.refundedRevenue) == [[:], ["GBP": 4990], [:]])
    #expect(series.map(\.revenue) == [["GBP": 4990], [:], [:]])
    #expect(series.map(\.activeSubscribers) == [1, 0, 0])
    #expect(series.map(\.mrr) == [["GBP": 4990], [:], [:]])
    #expect(series.map(\.churned) == [0, 0, 0])
  }

  @Test("revenue and MRR by currency; weekly products normalized")
  func currencies() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 2),
      [
        event(.subscriptionStarted, "u1", at: utc(2024, 1, 1, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "a"),
        event(.subscriptionStarted, "u2", at: utc(2024, 1, 1, 2), after: .active, product: "pro.weekly",
              offer: SubscriptionEventOffer.none, price: 2990, currency: "EUR", transaction: "b"),
        event(.subscriptionStarted, "u3", at: utc(2024, 1, 1, 3), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "c"),
        // The same user in another group is another subscription.
        event(.subscriptionStarted, "u3", at: utc(2024, 1, 1, 4), after: .active, group: "extras",
              product: "extras.yearly", offer: SubscriptionEventOffer.none, price: 12000, currency: "USD", transaction: "d"),
        event(.oneTimePurchased, "u4", at: utc(2024, 1, 1, 5), after: nil, group: nil, product: "coins",
              offer: nil, price: 1990, currency: "JPY", transaction: "e"),
      ])
    let day = try #require(series.first)
    #expect(day.activeSubscribers == 4)
    #expect(day.newPaidSubscriptions == 3 + 1)
    #expect(day.revenue == ["USD": 31980, "EUR": 2990, "JPY": 1990])
    // extras.yearly is not in the catalog: its duration is unknown.
    #expect(day.mrr == ["USD": 19980, "EUR": 12957])
    #expect(day.mrrUnpricedSubscriptions == 1)
  }

  @Test("unknown prices: counted as unpriced purchases and left out of MRR")
  func unknownPrices() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 3),
      [
        event(.subscriptionStarted, "u1", at: utc(2024, 1, 1, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "a"),
        // A renewal whose data carried no price: the last price is no longer known.
        event(.renewed, "u1", at: utc(2024, 1, 2, 1), after: .active, offer: SubscriptionEventOffer.none, transaction: "b"),
      ])
    #expect(series.map(\.unpricedPurchases) == [0, 1])
    #expect(series.map(\.revenue) == [["USD": 9990], [:]])
    #expect(series.map(\.mrr) == [["USD": 9990], [:]])
    #expect(series.map(\.mrrUnpricedSubscriptions) == [0, 1])
  }

  @Test("a trial that lapses, a trial through a billing issue, and the conversion rate")
  func trialsLapsing() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 4),
      [
        event(.subscriptionStarted, "a", at: utc(2024, 1, 1, 1), after: .active, offer: .freeTrial,
              price: 0, currency: "USD", transaction: "a1"),
        event(.subscriptionStarted, "b", at: utc(2024, 1, 1, 2), after: .active, offer: .freeTrial,
              price: 0, currency: "USD", transaction: "b1"),
        event(.subscriptionStarted, "c", at: utc(2024, 1, 1, 3), after: .active, offer: .freeTrial,
              price: 0, currency: "USD", transaction: "c1"),
        event(.expired, "a", at: utc(2024, 1, 2, 1), after: .expired),
        event(.billingIssue, "b", at: utc(2024, 1, 2, 2), after: .gracePeriod),
        event(.billingRecovered, "b", at: utc(2024, 1, 3, 2), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "b2"),
        event(.trialConverted, "c", at: utc(2024, 1, 3, 3), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "c2"),
      ])
    #expect(series.map(\.trialsStarted) == [3, 0, 0])
    #expect(series.map(\.trialsLapsed) == [0, 1, 0])
    #expect(series.map(\.churned) == [0, 0, 0])
    #expect(series.map(\.trialsConverted) == [0, 0, 2])
    #expect(series.map(\.trialConversionRate) == [0, 0, 1])
    #expect(series.map(\.billingIssues) == [0, 1, 0])
    #expect(series.map(\.billingRecoveries) == [0, 0, 1])
    // b is in grace (entitled, still in its trial) at the end of day 2.
    #expect(series.map(\.activeSubscribers) == [3, 2, 2])
    #expect(series.map(\.activeTrials) == [3, 2, 0])
    #expect(series.map(\.mrr) == [[:], [:], ["USD": 19980]])
  }

  @Test("billing retry is not active; churn after retry")
  func billingRetry() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 4),
      [
        event(.subscriptionStarted, "u", at: utc(2023, 12, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "t1"),
        event(.billingIssue, "u", at: utc(2024, 1, 1, 1), after: .billingRetry),
        event(.expired, "u", at: utc(2024, 1, 3, 1), after: .expired),
      ])
    #expect(series.map(\.activeSubscribers) == [0, 0, 0])
    #expect(series.map(\.billingIssues) == [1, 0, 0])
    #expect(series.map(\.churned) == [0, 0, 1])
  }

  @Test("an event that occurred before one already fed counts as a flow but does not rewrite states")
  func lateEvents() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 4),
      [
        event(.subscriptionStarted, "u", at: utc(2024, 1, 1, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "t1"),
        event(.renewed, "u", at: utc(2024, 1, 3, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "t3"),
        // Logged late: occurred on day 2.
        event(.billingIssue, "u", at: utc(2024, 1, 2, 1), after: .billingRetry),
      ])
    #expect(series.map(\.billingIssues) == [0, 1, 0])
    #expect(series.map(\.activeSubscribers) == [1, 1, 1])
  }

  @Test("a transaction's price counts once, even when two events carry it")
  func revenueOncePerTransaction() throws {
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 2),
      [
        event(.subscriptionStarted, "u", at: utc(2024, 1, 1, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: 9990, currency: "USD", transaction: "t1"),
        event(.productChanged, "u", at: utc(2024, 1, 1, 2), after: .active, product: "pro.yearly",
              offer: SubscriptionEventOffer.none, price: 99990, currency: "USD", transaction: "t2"),
        event(.renewed, "u", at: utc(2024, 1, 1, 2), after: .active, product: "pro.yearly",
              offer: SubscriptionEventOffer.none, price: 99990, currency: "USD", transaction: "t2"),
      ])
    #expect(series[0].revenue == ["USD": 9990 + 99990])
    #expect(series[0].mrr == ["USD": 8333])
  }

  @Test("a family-shared subscription is access, not a purchase: active, but no flow, revenue or MRR")
  func familySharing() throws {
    let usd = (price: Int64(9990), currency: "USD")
    let series = try trends(
      from: utc(2024, 1, 1), to: utc(2024, 1, 4),
      [
        // Day 1: the organizer buys; the member gets access (Apple's transaction carries the price).
        event(.subscriptionStarted, "organizer", at: utc(2024, 1, 1, 1), after: .active,
              offer: SubscriptionEventOffer.none, price: usd.price, currency: usd.currency, transaction: "o1",
              ownership: .purchased),
        event(.subscriptionStarted, "member", at: utc(2024, 1, 1, 2), after: .active,
              offer: SubscriptionEventOffer.none, price: usd.price, currency: usd.currency, transaction: "m1",
              ownership: .familyShared),
        // Day 2: both renew; the organizer pays.
        event(.renewed, "organizer", at: utc(2024, 1, 2, 1), after: .active, offer: SubscriptionEventOffer.none,
              price: usd.price, currency: usd.currency, transaction: "o2", ownership: .purchased),
        event(.renewed, "member", at: utc(2024, 1, 2, 2), after: .active, offer: SubscriptionEventOffer.none,
              price: usd.price, currency: usd.currency, transaction: "m2", ownership: .familyShared),
        // Day 3: an event without an ownership keeps the subscription's (the member's billing
        // issue mirrors the organizer's, not counted twice); a shared non-consumable is no sale.
        event(.billingIssue, "organizer", at: utc(2024, 1, 3, 1), after: .billingRetry),
        event(.billingIssue, "member", at: utc(2024, 1, 3, 2), after: .billingRetry),
        event(.oneTimePurchased, "member", at: utc(2024, 1, 3, 3), after: nil, group: nil, product: "levels",
              offer: nil, price: 4990, currency: "USD", transaction: "m3", ownership: .familyShared),
      ])
    #expect(series.map(\.activeSubscribers) == [2, 2, 0])
    #expect(series.map(\.newPaidSubscriptions) == [1, 0, 0])
    #expect(series.map(\.renewals) == [0, 1, 0])
    #expect(series.map(\.billingIssues) == [0, 0, 1])
    #expect(series.map(\.revenue) == [["USD": 9990], ["USD": 9990], [:]])
    #expect(series.map(\.unpricedPurchases) == [0, 0, 0])
    #expect(series.map(\.mrr) == [["USD": 9990], ["USD": 9990], [:]])
    #expect(series.map(\.mrrUnpricedSubscriptions) == [0, 0, 0])
  }
}
