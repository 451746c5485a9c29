import Foundation
import Testing

import SubscriptionDomain

/// The charts' fixtures: `Fixtures/charts/events.txt` (an event log) and one hand-computed
/// `<chart>.expected` per chart, both commented with the reasoning.
private enum ChartFixture {
  static func text(_ name: String) throws -> String {
    let url = try #require(
      Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Fixtures/charts"),
      "fixture charts/\(name) is missing")
    return try String(contentsOf: url, encoding: .utf8)
  }

  /// The lines of a fixture that are not comments or blank.
  static func lines(_ name: String) throws -> [String] {
    try text(name).split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && !$0.isEmpty }
  }

  static func date(_ text: String) throws -> Int64 {
    let parts = text.split(separator: "-").compactMap { Int($0) }
    try #require(parts.count == 3, "bad date \(text)")
    return utc(parts[0], parts[1], parts[2])
  }

  /// `events.txt` as events: user type occurred state group product offer price currency
  /// transaction ownership, `-` for absent.
  static func events() throws -> [SubscriptionEvent] {
    try lines("events.txt").enumerated().map { number, line in
      let c = line.split(separator: " ").map(String.init)
      try #require(c.count == 11, "events.txt line \(number): \(line)")
      func optional(_ i: Int) -> String? { c[i] == "-" ? nil : c[i] }
      let occurred = try date(c[2])
      return SubscriptionEvent(
        eventId: "e\(number)", appId: "app", userId: c[0], environment: .production,
        type: try #require(SubscriptionEventType(rawValue: c[1])), occurredMs: occurred, detectedMs: occurred,
        subscriptionGroupId: optional(4), productId: optional(5), transactionId: optional(9),
        stateAfter: optional(3).flatMap(SubscriptionState.init(rawValue:)),
        offer: optional(6).flatMap(SubscriptionEventOffer.init(rawValue:)),
        priceMilliunits: optional(7).flatMap { Int64($0) }, currency: optional(8),
        ownershipType: optional(10).flatMap(OwnershipType.init(rawValue:)))
    }
  }

  static let durations: [String: ISO8601Duration] = [
    "pro.monthly": ISO8601Duration(months: 1), "pro.plus": ISO8601Duration(months: 1),
    "pro.yearly": ISO8601Duration(years: 1),
  ]
}

/// A chart's series as the `.expected` files write them: `name[ CURRENCY]: v1 v2 …`, ratios with 4
/// decimals.
private func render(_ series: [ChartSeries]) -> [String] {
  series.map { s in
    let values = s.unit == .ratio ? s.ratios.map { String(format: "%.4f", $0) } : s.values.map { String($0) }
    return "\(s.name)\(s.currency.map { " \($0)" } ?? ""): \(values.joined(separator: " "))"
  }
}

private func chart(
  _ kind: ChartKind, smallBusinessProgram: Bool = false, filter: ChartFilter = ChartFilter()
) throws -> [ChartSeries] {
  let buckets = try TrendBuckets(fromMs: utc(2024, 1, 1), toMs: utc(2024, 7, 1), interval: .month)
  var aggregator = ChartAggregator(
    chart: kind, buckets: buckets, productDurations: ChartFixture.durations, filter: filter,
    smallBusinessProgram: smallBusinessProgram)
  for event in try ChartFixture.events() { aggregator.add(event) }
  return aggregator.series
}

@Suite("Charts: golden series on a hand-computed log")
struct ChartGoldenTests {
  @Test(
    "every chart matches its hand-computed file",
    arguments: [
      (ChartKind.mrr, false, "mrr.expected"), (.mrrMovement, false, "mrr_movement.expected"),
      (.revenue, false, "revenue.expected"), (.revenue, true, "revenue_small_business.expected"),
      (.refundRate, false, "refund_rate.expected"), (.activesMovement, false, "actives_movement.expected"),
      (.trialsMovement, false, "trials_movement.expected"), (.cohortRetention, false, "cohort_retention.expected"),
      (.realizedLTV, false, "realized_ltv.expected"),
    ])
  func golden(kind: ChartKind, smallBusinessProgram: Bool, file: String) throws {
    #expect(render(try chart(kind, smallBusinessProgram: smallBusinessProgram)) == (try ChartFixture.lines(file)))
  }

  @Test("MRR movement's net is the MRR chart's change, bucket by bucket")
  func movementAddsUp() throws {
    let levels = try chart(.mrr)
    let movement = try chart(.mrrMovement)
    for currency in ["EUR", "USD"] {
      let mrr = try #require(levels.first { $0.name == "mrr" && $0.currency == currency }).values
      let net = try #require(movement.first { $0.name == "net" && $0.currency == currency }).values
      let before: Int64 = currency == "USD" ? 15000 : 0
      #expect(zip([before] + mrr.dropLast(), mrr).map { $1 - $0 } == net)
    }
  }

  @Test(
    "filters count only the subscriptions and sales they name",
    arguments: [
      // pro.plus alone: bob until his downgrade (Mar), alice from her upgrade until her refund.
      (ChartFilter(productIds: ["pro.plus"]), ["mrr EUR: 12000 12000 0 0 0 0", "mrr USD: 0 0 15000 0 0 0"]),
      (ChartFilter(subscriptionGroupIds: ["other"]), [String]()),
    ])
  func filters(filter: ChartFilter, expected: [String]) throws {
    #expect(render(try chart(.mrr, filter: filter)).filter { $0.hasPrefix("mrr ") } == expected)
  }
}

@Suite("Charts: Apple's commission")
struct ChartCommissionTests {
  private static let month = ISO8601Duration(months: 1)

  private func event(
    _ type: SubscriptionEventType, _ date: Int64, _ transaction: String, product: String = "m",
    price: Int64 = 10000
  ) -> SubscriptionEvent {
    SubscriptionEvent(
      eventId: transaction, appId: "app", userId: "u", environment: .production, type: type, occurredMs: date,
      detectedMs: date, subscriptionGroupId: "g", productId: product, transactionId: transaction,
      stateAfter: .active, offer: SubscriptionEventOffer.none, priceMilliunits: price, currency: "USD")
  }

  /// Proceeds of the last bucket for a history of yearly purchases.
  private func lastProceeds(_ events: [SubscriptionEvent]) throws -> Int64 {
    let buckets = try TrendBuckets(fromMs: utc(2025, 1, 1), toMs: utc(2025, 12, 1), interval: .month)
    var aggregator = ChartAggregator(
      chart: .revenue, buckets: buckets, productDurations: ["y": ISO8601Duration(years: 1), "m": Self.month])
    for event in events { aggregator.add(event) }
    let proceeds = try #require(aggregator.series.first { $0.name == "proceeds" })
    return try #require(proceeds.values.last { $0 != 0 })
  }

  @Test("a lapse of more than 60 days starts the year of service over; 60 days or less keeps it")
  func retentionGrace() throws {
    // A year paid 2024-01-01 to 2025-01-01, then a new purchase 60 days (kept: 15 %) or 61 days
    // (over: 30 %) after.
    let year = event(.subscriptionStarted, utc(2024, 1, 1), "t1", product: "y")
    #expect(try lastProceeds([year, event(.resubscribed, utc(2025, 3, 2), "t2")]) == 8500)
    #expect(try lastProceeds([year, event(.resubscribed, utc(2025, 3, 3), "t2")]) == 7000)
  }

  @Test("an upgrade gives back the unused rest of the period")
  func upgradeRest() throws {
    // Yearly from 2024-01-01; on 2024-12-01 an upgrade to a monthly product: the 31 unused days
    // are given back (335 days of service: 30 %); its renewal on 2025-01-01 follows 366 days (15 %).
    let events = [
      event(.subscriptionStarted, utc(2024, 1, 1), "t1", product: "y"),
      event(.productChanged, utc(2024, 12, 1), "t2"),
    ]
    #expect(try lastProceeds(events + [event(.renewed, utc(2025, 1, 1), "t3")]) == 8500)
    var aggregator = ChartAggregator(
      chart: .revenue, buckets: try TrendBuckets(fromMs: utc(2024, 12, 1), toMs: utc(2025, 1, 1), interval: .month),
      productDurations: ["y": ISO8601Duration(years: 1), "m": Self.month])
    for event in events { aggregator.add(event) }
    #expect(aggregator.series.first { $0.name == "proceeds" }?.values == [7000])
  }

  @Test(
    "proceeds round half away from zero to the milliunit",
    arguments: [(Int64(9990), Int64(30), Int64(6993)), (999, 30, 699), (1, 15, 1), (-999, 30, -699), (5, 30, 4)])
  func rounding(amount: Int64, percent: Int64, expected: Int64) {
    #expect(AppleCommission.proceeds(amount, percent: percent) == expected)
  }
}
