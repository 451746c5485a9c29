// Charts: MRR and its movement, revenue and proceeds, refund rate, actives and trials movement,
// cohort retention and realized LTV, counted from an app's event log (docs/architecture.md
// "Charts"; the proto's `Chart` defines each one). Pure: the caller reads the log and
// feeds the events; nothing here reads a clock or a store.

/// A chart of `ReportService.GetChart` (the proto's `Chart`, whose comments define each one).
public enum ChartKind: String, Sendable, Hashable, Codable, CaseIterable {
  /// Monthly recurring revenue at each bucket's end, by currency.
  case mrr = "MRR"
  /// What moved MRR: new, expansion, contraction, churn, reactivation.
  case mrrMovement = "MRR_MOVEMENT"
  /// Revenue, refunds, net revenue and proceeds after Apple's commission.
  case revenue = "REVENUE"
  /// Paid purchases by purchase bucket and the share of them refunded.
  case refundRate = "REFUND_RATE"
  /// Paying subscriptions and what moved them.
  case activesMovement = "ACTIVES_MOVEMENT"
  /// Free trials and what moved them.
  case trialsMovement = "TRIALS_MOVEMENT"
  /// Cohorts by first paid purchase, and the share still paying after each renewal.
  case cohortRetention = "COHORT_RETENTION"
  /// Cohorts of customers by first purchase, and what they paid since.
  case realizedLTV = "REALIZED_LTV"
}

/// What a chart series counts (the proto's `ChartUnit`).
public enum ChartUnit: String, Sendable, Hashable, Codable {
  /// A count, in ``ChartSeries/values``.
  case count = "COUNT"
  /// Milliunits of the series' currency, in ``ChartSeries/values``.
  case milliunits = "MILLIUNITS"
  /// A ratio from 0 to 1, in ``ChartSeries/ratios``.
  case ratio = "RATIO"
}

/// One series of a chart: one value per bucket.
public struct ChartSeries: Sendable, Hashable {
  /// The name the chart's definition gives it (`mrr`, `new`, `renewal_3`…).
  public var name: String
  /// The currency of a money series; `nil` otherwise.
  public var currency: String?
  /// What the values count.
  public var unit: ChartUnit
  /// For counts and money: one value per bucket.
  public var values: [Int64]
  /// For ratios: one value per bucket.
  public var ratios: [Double]

  /// Creates a series.
  public init(name: String, currency: String? = nil, unit: ChartUnit, values: [Int64] = [], ratios: [Double] = []) {
    self.name = name
    self.currency = currency
    self.unit = unit
    self.values = values
    self.ratios = ratios
  }
}

/// What a chart counts (the proto's `ChartFilters`): every non-empty set must hold.
public struct ChartFilter: Sendable, Hashable {
  /// Only these products; empty: every product.
  public var productIds: Set<String>
  /// Only these subscription groups; empty: every group (and products outside one).
  public var subscriptionGroupIds: Set<String>

  /// Creates a filter; the default counts everything.
  public init(productIds: Set<String> = [], subscriptionGroupIds: Set<String> = []) {
    self.productIds = productIds
    self.subscriptionGroupIds = subscriptionGroupIds
  }

  /// Whether a product of a group passes.
  public func passes(product: String?, group: String?) -> Bool {
    if !productIds.isEmpty {
      guard let product, productIds.contains(product) else { return false }
    }
    if !subscriptionGroupIds.isEmpty {
      guard let group, subscriptionGroupIds.contains(group) else { return false }
    }
    return true
  }
}

/// Apple's commission on a sale, in percent
/// (https://developer.apple.com/app-store/subscriptions/ "Earnings after one year",
/// https://developer.apple.com/app-store/small-business-program/): 15 for an app in the App Store
/// Small Business Program; otherwise 30, but 15 for an auto-renewable subscription's purchase once
/// the subscriber has one year of paid service in the group.
public enum AppleCommission {
  /// One year of paid service, after which a subscription's commission is 15 %.
  public static let yearOfServiceMs: Int64 = 365 * CivilDate.millisecondsPerDay
  /// How long a subscription may lapse and keep its days of paid service.
  public static let retentionGraceMs: Int64 = 60 * CivilDate.millisecondsPerDay

  /// The commission in percent of a sale.
  public static func percent(smallBusinessProgram: Bool, autoRenewable: Bool, paidServiceMs: Int64) -> Int64 {
    if smallBusinessProgram { return 15 }
    return autoRenewable && paidServiceMs >= yearOfServiceMs ? 15 : 30
  }

  /// What the developer keeps of `amount` after a commission of `percent`, rounded half up (away
  /// from zero) to the milliunit.
  public static func proceeds(_ amount: Int64, percent: Int64) -> Int64 {
    let kept = amount * (100 - percent)
    return kept >= 0 ? (kept + 50) / 100 : -((-kept + 50) / 100)
  }
}

/// Counts one chart of an app from its event log, one event at a time, holding one small state
/// per subscription (a pair of user and group), per-bucket sums, and for
/// ``ChartKind/refundRate`` the bucket of each paid purchase in the range, for
/// ``ChartKind/realizedLTV`` the cohort of each customer: memory grows with the subscriptions
/// (and customers or purchases in range), never with the events.
///
/// Feed it the events of one environment that occurred before the range's end, **from the start of
/// the log**, in log order (as ``TrendAggregator``, whose reading of states, trials, late events
/// and Family Sharing it shares); then read ``series``.
///
/// ```swift
/// var aggregator = ChartAggregator(chart: .mrrMovement, buckets: buckets, catalog: catalog)
/// for event in log { aggregator.add(event) }
/// let series = aggregator.series
/// ```
public struct ChartAggregator: Sendable {
  /// The most renewals the cohort retention chart follows.
  public static let maximumRenewals = 120

  /// The chart counted.
  public let chart: ChartKind
  /// The buckets counted (for cohort charts, the cohorts).
  public let buckets: TrendBuckets
  private let productDurations: [String: ISO8601Duration]
  private let filter: ChartFilter
  private let smallBusinessProgram: Bool

  private var subscriptions: [SubscriptionKey: Track] = [:]
  // Level series as changes: slot 0 holds the level before the range, slot i + 1 the change
  // during bucket i.
  private var levelChanges: [String: [Int64]] = [:]
  private var moneyLevelChanges: [MoneyKey: [Int64]] = [:]
  // Flow series: one value per bucket.
  private var flows: [String: [Int64]] = [:]
  private var moneyFlows: [MoneyKey: [Int64]] = [:]
  // Refund rate: the bucket of each paid purchase in the range, by transaction id.
  private var purchaseBuckets: [String: Int] = [:]
  // Cohort retention: per cohort, how many subscriptions reached each renewal (index k - 1).
  private var renewalsReached: [[Int64]]
  // Realized LTV: each customer's cohort (-1: before the range) and the currencies they paid in.
  private var customers: [String: Customer] = [:]

  /// Starts counting.
  /// - Parameters:
  ///   - chart: The chart.
  ///   - buckets: The range's buckets (the cohorts, for cohort charts).
  ///   - productDurations: Product ids to their catalog durations (MRR, days of paid service).
  ///   - filter: What counts.
  ///   - smallBusinessProgram: Whether Apple's commission is 15 % on every sale.
  public init(
    chart: ChartKind, buckets: TrendBuckets, productDurations: [String: ISO8601Duration],
    filter: ChartFilter = ChartFilter(), smallBusinessProgram: Bool = false
  ) {
    self.chart = chart
    self.buckets = buckets
    self.productDurations = productDurations
    self.filter = filter
    self.smallBusinessProgram = smallBusinessProgram
    renewalsReached = Array(repeating: [], count: buckets.count)
  }

  /// Starts counting with the durations of `catalog`'s products.
  public init(
    chart: ChartKind, buckets: TrendBuckets, catalog: Catalog, filter: ChartFilter = ChartFilter(),
    smallBusinessProgram: Bool = false
  ) {
    var durations: [String: ISO8601Duration] = [:]
    for product in catalog.products {
      if let duration = product.duration { durations[product.productId] = duration }
    }
    self.init(
      chart: chart, buckets: buckets, productDurations: durations, filter: filter,
      smallBusinessProgram: smallBusinessProgram)
  }

  private struct SubscriptionKey: Hashable {
    var userId: String
    var groupId: String
  }

  private struct MoneyKey: Hashable {
    var name: String
    var currency: String
  }

  private struct Customer {
    var cohort: Int
    var paidCurrencies: Set<String> = []
  }

  /// What the aggregator remembers of one subscription.
  private struct Track {
    var occurredMs = Int64.min
    var state: SubscriptionState?
    var inTrial = false
    var productId: String?
    var price: (milliunits: Int64, currency: String)?
    var familyShared = false
    /// The transaction last counted as a paid purchase (a transaction counts once).
    var paidTransactionId: String?
    /// Whether it ever had MRR, or was paying (for new against reactivation).
    var hadMRR = false
    var wasPaying = false
    /// Days of paid service (as milliseconds) and the end of the last paid period.
    var paidServiceMs: Int64 = 0
    var paidThroughMs: Int64?
    /// The commission of its last paid purchase (what a refund gives back).
    var commissionPercent: Int64 = 30
    /// Cohort retention: its cohort (-1 before the range), paid periods, and whether it lapsed.
    var cohort: Int?
    var paidPeriods = 0
    var lapsed = false
  }

  /// What one subscription adds to the level series.
  private struct Contribution: Equatable {
    var paying = false
    var trial = false
    var unpriced = false
    var mrrCurrency: String?
    var mrr: Int64 = 0
  }

  /// Counts one event. Events at or after the range's end are ignored.
  public mutating func add(_ event: SubscriptionEvent) {
    // Answers to Apple's retention requests are neither sales nor state changes.
    guard event.type != .retentionOffered, let index = buckets.index(of: event.occurredMs) else { return }
    let isPurchase = event.isPurchase
    let isFreeTrial = event.offer == .freeTrial
    let passes = filter.passes(product: event.productId, group: event.subscriptionGroupId)

    guard let groupId = event.subscriptionGroupId else {
      // A product outside a subscription group: a sale or its refund, nothing more.
      guard event.ownershipType != .familyShared, passes else { return }
      let percent = AppleCommission.percent(
        smallBusinessProgram: smallBusinessProgram, autoRenewable: false, paidServiceMs: 0)
      if event.type == .refunded { refund(event, at: index, percent: percent) }
      guard isPurchase else { return }
      noteCustomer(event, at: index)
      if !isFreeTrial { paidPurchase(event, at: index, percent: percent) }
      return
    }
    let key = SubscriptionKey(userId: event.userId, groupId: groupId)
    var track = subscriptions[key] ?? Track()
    let familyShared = event.ownershipType.map { $0 == .familyShared } ?? track.familyShared
    let inOrder = event.occurredMs >= track.occurredMs

    if !familyShared && isPurchase && passes { noteCustomer(event, at: index) }
    if !familyShared && isPurchase && !isFreeTrial
      && (event.transactionId == nil || event.transactionId != track.paidTransactionId)
    {
      track.paidTransactionId = event.transactionId
      let autoRenewable = event.type != .nonRenewingPurchased && event.type != .oneTimePurchased
      if inOrder && autoRenewable { accumulateService(&track, event) }
      let percent = AppleCommission.percent(
        smallBusinessProgram: smallBusinessProgram, autoRenewable: autoRenewable,
        paidServiceMs: track.paidServiceMs)
      if inOrder && autoRenewable, let product = event.productId, let duration = productDurations[product] {
        let end = duration.added(to: event.occurredMs)
        track.paidServiceMs += end - event.occurredMs
        track.paidThroughMs = end
      }
      track.commissionPercent = percent
      if passes {
        paidPurchase(event, at: index, percent: percent)
        if autoRenewable { countPaidPeriod(&track, at: index) }
      }
    }
    if event.type == .refunded && !familyShared && passes { refund(event, at: index, percent: track.commissionPercent) }

    // The state series follow each subscription's events in the order fed.
    guard inOrder else {
      subscriptions[key] = track
      return
    }
    let before = contribution(track, group: groupId)
    track.occurredMs = event.occurredMs
    track.familyShared = familyShared
    if let state = event.stateAfter { track.state = state }
    if let product = event.productId { track.productId = product }
    switch event.type {
    case .subscriptionStarted, .resubscribed:
      track.inTrial = isFreeTrial
    case .trialConverted, .renewed, .billingRecovered:
      track.inTrial = false
    case .productChanged where isPurchase && !isFreeTrial:
      track.inTrial = false
    default:
      break
    }
    if track.state != .active && track.state != .gracePeriod && track.state != .billingRetry {
      track.inTrial = false
    }
    if track.cohort != nil && (track.state == .expired || track.state == .revoked) { track.lapsed = true }
    if isPurchase && !isFreeTrial && !familyShared {
      if let price = event.priceMilliunits, let currency = event.currency, !currency.isEmpty {
        track.price = (price, currency)
      } else {
        track.price = nil
      }
    }
    let after = contribution(track, group: groupId)
    if before != after { record(before: before, after: after, track: track, index: index) }
    if after.paying { track.wasPaying = true }
    if after.mrrCurrency != nil { track.hadMRR = true }
    subscriptions[key] = track
  }

  // MARK: Flows

  /// Days of paid service before a paid purchase: a purchase more than 60 days after the last
  /// paid period's end starts over; one before it (an upgrade) gives back the unused rest.
  private func accumulateService(_ track: inout Track, _ event: SubscriptionEvent) {
    guard let through = track.paidThroughMs else { return }
    if event.occurredMs > through + AppleCommission.retentionGraceMs {
      track.paidServiceMs = 0
    } else if event.occurredMs < through {
      track.paidServiceMs = max(0, track.paidServiceMs - (through - event.occurredMs))
    }
  }

  private mutating func paidPurchase(_ event: SubscriptionEvent, at index: Int, percent: Int64) {
    let price = Self.amount(event)
    if index >= 0 {
      switch chart {
      case .revenue:
        if case let (amount, currency)? = price {
          addMoney("revenue", currency, amount, at: index)
          addMoney("net_revenue", currency, amount, at: index)
          addMoney("proceeds", currency, AppleCommission.proceeds(amount, percent: percent), at: index)
        }
      case .refundRate:
        addFlow("purchases", 1, at: index)
        if let transaction = event.transactionId { purchaseBuckets[transaction] = index }
      default:
        break
      }
    }
    if chart == .realizedLTV, case let (amount, currency)? = price, var customer = customers[event.userId],
      customer.cohort >= 0
    {
      addMoney("revenue", currency, amount, at: customer.cohort)
      if amount > 0 && !customer.paidCurrencies.contains(currency) {
        if customer.paidCurrencies.isEmpty { addFlow("paying_customers", 1, at: customer.cohort) }
        customer.paidCurrencies.insert(currency)
        addFlow("paying_in_\(currency)", 1, at: customer.cohort)
        customers[event.userId] = customer
      }
    }
  }

  private mutating func refund(_ event: SubscriptionEvent, at index: Int, percent: Int64) {
    let price = Self.amount(event)
    switch chart {
    case .revenue:
      if index >= 0, case let (amount, currency)? = price {
        addMoney("refunds", currency, amount, at: index)
        addMoney("net_revenue", currency, -amount, at: index)
        addMoney("proceeds", currency, -AppleCommission.proceeds(amount, percent: percent), at: index)
      }
    case .refundRate:
      if let transaction = event.transactionId, let bucket = purchaseBuckets.removeValue(forKey: transaction) {
        addFlow("refunded", 1, at: bucket)
      }
    case .realizedLTV:
      if case let (amount, currency)? = price, let customer = customers[event.userId], customer.cohort >= 0 {
        addMoney("revenue", currency, -amount, at: customer.cohort)
      }
    default:
      break
    }
  }

  /// An event's price and currency, when it carries both.
  private static func amount(_ event: SubscriptionEvent) -> (Int64, String)? {
    guard let price = event.priceMilliunits, let currency = event.currency, !currency.isEmpty else { return nil }
    return (price, currency)
  }

  /// A customer's first purchase event puts them in its bucket's cohort.
  private mutating func noteCustomer(_ event: SubscriptionEvent, at index: Int) {
    guard chart == .realizedLTV, customers[event.userId] == nil else { return }
    customers[event.userId] = Customer(cohort: index)
    if index >= 0 { addFlow("customers", 1, at: index) }
  }

  /// Cohort retention: the first paid purchase sets the cohort; each later one before the first
  /// lapse is a renewal reached.
  private mutating func countPaidPeriod(_ track: inout Track, at index: Int) {
    guard chart == .cohortRetention else { return }
    guard let cohort = track.cohort else {
      track.cohort = index
      track.paidPeriods = 1
      if index >= 0 { addFlow("subscriptions", 1, at: index) }
      return
    }
    guard !track.lapsed else { return }
    track.paidPeriods += 1
    let renewal = track.paidPeriods - 1
    guard cohort >= 0, renewal <= Self.maximumRenewals else { return }
    while renewalsReached[cohort].count < renewal { renewalsReached[cohort].append(0) }
    renewalsReached[cohort][renewal - 1] += 1
  }

  private mutating func addFlow(_ name: String, _ amount: Int64, at index: Int) {
    flows[name, default: Array(repeating: 0, count: buckets.count)][index] += amount
  }

  private mutating func addMoney(_ name: String, _ currency: String, _ amount: Int64, at index: Int) {
    moneyFlows[MoneyKey(name: name, currency: currency), default: Array(repeating: 0, count: buckets.count)][index] +=
      amount
  }

  // MARK: Levels and movements

  private func contribution(_ track: Track, group: String) -> Contribution {
    var result = Contribution()
    guard track.state == .active || track.state == .gracePeriod, !track.familyShared,
      filter.passes(product: track.productId, group: group)
    else { return result }
    if track.inTrial {
      result.trial = true
      return result
    }
    result.paying = true
    guard track.state == .active else { return result }
    if let price = track.price, let product = track.productId, let duration = productDurations[product],
      let monthly = monthlyMilliunits(price: price.milliunits, duration: duration)
    {
      result.mrrCurrency = price.currency
      result.mrr = monthly
    } else {
      result.unpriced = true
    }
    return result
  }

  private mutating func record(before: Contribution, after: Contribution, track: Track, index: Int) {
    let slot = index + 1
    changeLevel("actives", Int64(after.paying ? 1 : 0) - Int64(before.paying ? 1 : 0), slot: slot)
    changeLevel("trials", Int64(after.trial ? 1 : 0) - Int64(before.trial ? 1 : 0), slot: slot)
    changeLevel(
      "unpriced_subscriptions", Int64(after.unpriced ? 1 : 0) - Int64(before.unpriced ? 1 : 0), slot: slot)
    if let currency = before.mrrCurrency { changeMoneyLevel(currency, by: -before.mrr, slot: slot) }
    if let currency = after.mrrCurrency { changeMoneyLevel(currency, by: after.mrr, slot: slot) }
    guard index >= 0 else { return }

    switch chart {
    case .activesMovement:
      if !before.paying && after.paying {
        addFlow(before.trial ? "converted" : track.wasPaying ? "reactivated" : "new", 1, at: index)
      } else if before.paying && !after.paying {
        addFlow("churned", -1, at: index)
      }
    case .trialsMovement:
      if !before.trial && after.trial {
        addFlow("new", 1, at: index)
      } else if before.trial && !after.trial {
        addFlow(after.paying ? "converted" : "expired", -1, at: index)
      }
    case .mrrMovement:
      switch (before.mrrCurrency, after.mrrCurrency) {
      case (nil, nil):
        break
      case (nil, let currency?):
        addMoney(track.hadMRR ? "reactivation" : "new", currency, after.mrr, at: index)
      case (let currency?, nil):
        addMoney("churn", currency, -before.mrr, at: index)
      case (let old?, let new?) where old == new:
        let change = after.mrr - before.mrr
        if change > 0 { addMoney("expansion", new, change, at: index) }
        if change < 0 { addMoney("contraction", new, change, at: index) }
      case (let old?, let new?):
        addMoney("churn", old, -before.mrr, at: index)
        addMoney("reactivation", new, after.mrr, at: index)
      }
    default:
      break
    }
  }

  private mutating func changeLevel(_ name: String, _ amount: Int64, slot: Int) {
    guard amount != 0 else { return }
    levelChanges[name, default: Array(repeating: 0, count: buckets.count + 1)][slot] += amount
  }

  private mutating func changeMoneyLevel(_ currency: String, by amount: Int64, slot: Int) {
    moneyLevelChanges[MoneyKey(name: "mrr", currency: currency), default: Array(repeating: 0, count: buckets.count + 1)][
      slot] += amount
  }

  // MARK: Series

  /// The chart's series, in the order of its definition; money series by currency, a currency
  /// whose series are all 0 over the range left out.
  public var series: [ChartSeries] {
    switch chart {
    case .mrr:
      return money(["mrr"], levels: true) + [count("unpriced_subscriptions", level: true)]
    case .mrrMovement:
      return money(["new", "expansion", "contraction", "churn", "reactivation", "net"], levels: false)
    case .revenue:
      return money(["revenue", "refunds", "net_revenue", "proceeds"], levels: false)
    case .refundRate:
      let purchases = count("purchases")
      let refunded = count("refunded")
      return [purchases, refunded, ratio("refund_rate", refunded.values, purchases.values)]
    case .activesMovement:
      return [count("actives", level: true), count("new"), count("converted"), count("reactivated"), count("churned")]
        + [sum("net", ["new", "converted", "reactivated", "churned"])]
    case .trialsMovement:
      return [count("trials", level: true), count("new"), count("converted"), count("expired")]
        + [sum("net", ["new", "converted", "expired"])]
    case .cohortRetention:
      let size = count("subscriptions")
      let renewals = renewalsReached.map(\.count).max() ?? 0
      var result = [size]
      for k in stride(from: 1, through: renewals, by: 1) {
        let reached = renewalsReached.map { k <= $0.count ? $0[k - 1] : 0 }
        result.append(ratio("renewal_\(k)", reached, size.values))
      }
      return result
    case .realizedLTV:
      let customers = count("customers")
      var result = [customers, count("paying_customers")]
      for currency in currencies(["revenue"]) {
        let revenue = moneyFlows[MoneyKey(name: "revenue", currency: currency)] ?? zeros
        let paying = flows["paying_in_\(currency)"] ?? zeros
        result.append(ChartSeries(name: "revenue", currency: currency, unit: .milliunits, values: revenue))
        result.append(
          ChartSeries(
            name: "ltv_per_customer", currency: currency, unit: .milliunits,
            values: zip(revenue, customers.values).map(Self.divide)))
        result.append(
          ChartSeries(
            name: "ltv_per_paying_customer", currency: currency, unit: .milliunits,
            values: zip(revenue, paying).map(Self.divide)))
      }
      return result
    }
  }

  private var zeros: [Int64] { Array(repeating: 0, count: buckets.count) }

  private func cumulative(_ changes: [Int64]?) -> [Int64] {
    guard let changes else { return zeros }
    var level = changes[0]
    return (0..<buckets.count).map { index in
      level += changes[index + 1]
      return level
    }
  }

  private func count(_ name: String, level: Bool = false) -> ChartSeries {
    ChartSeries(name: name, unit: .count, values: level ? cumulative(levelChanges[name]) : flows[name] ?? zeros)
  }

  private func sum(_ name: String, _ names: [String]) -> ChartSeries {
    var values = zeros
    for part in names {
      for (index, value) in (flows[part] ?? zeros).enumerated() { values[index] += value }
    }
    return ChartSeries(name: name, unit: .count, values: values)
  }

  private func ratio(_ name: String, _ numerators: [Int64], _ denominators: [Int64]) -> ChartSeries {
    ChartSeries(
      name: name, unit: .ratio,
      ratios: zip(numerators, denominators).map { $1 == 0 ? 0 : Double($0) / Double($1) })
  }

  /// The currencies in which some series of `names` is not 0 in some bucket, in order.
  private func currencies(_ names: [String], levels: Bool = false) -> [String] {
    var result = Set<String>()
    let source = levels ? moneyLevelChanges.mapValues(cumulative) : moneyFlows
    for (key, values) in source where names.contains(key.name) && values.contains(where: { $0 != 0 }) {
      result.insert(key.currency)
    }
    return result.sorted()
  }

  /// Money series: per currency, one series per name (`net`: the sum of the others).
  private func money(_ names: [String], levels: Bool) -> [ChartSeries] {
    var result: [ChartSeries] = []
    for currency in currencies(names, levels: levels) {
      var net = zeros
      for name in names {
        let key = MoneyKey(name: name, currency: currency)
        let values: [Int64]
        if name == "net" {
          values = net
        } else {
          values = levels ? cumulative(moneyLevelChanges[key]) : moneyFlows[key] ?? zeros
          for (index, value) in values.enumerated() { net[index] += value }
        }
        result.append(ChartSeries(name: name, currency: currency, unit: .milliunits, values: values))
      }
    }
    return result
  }

  /// `amount / count` rounded half away from zero; 0 when `count` is 0.
  private static func divide(_ amount: Int64, _ count: Int64) -> Int64 {
    guard count > 0 else { return 0 }
    let half = count / 2
    return amount >= 0 ? (amount + half) / count : -((-amount + half) / count)
  }
}
