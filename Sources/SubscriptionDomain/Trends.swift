// Trends: an app's subscription series over time, counted from its event log
// (docs/architecture.md "Trends", App Store Connect's Sales and Trends for subscriptions). Pure:
// the caller reads the log and feeds the events; nothing here reads a clock or a store.

/// The length of a trends bucket (the proto's `TrendInterval`).
public enum TrendInterval: String, Sendable, Hashable, Codable, CaseIterable {
  /// UTC days.
  case day = "DAY"
  /// ISO weeks, Monday 00:00 UTC to the next Monday.
  case week = "WEEK"
  /// Calendar months, the 1st 00:00 UTC to the next month's 1st.
  case month = "MONTH"
}

/// Why a trends range was refused: the request field concerned and what is wrong.
public struct TrendRangeError: Error, Sendable, Hashable {
  /// The request field (`from_ms`, `to_ms` or `interval`).
  public var field: String
  /// What is wrong, for people.
  public var message: String

  /// Creates an error.
  public init(field: String, message: String) {
    self.field = field
    self.message = message
  }
}

/// The buckets of a trends range `[fromMs, toMs)`: UTC days, ISO weeks or calendar months, the
/// first and last cut at the range's ends (a range from a Wednesday has a first weekly bucket from
/// that Wednesday to the next Monday).
public struct TrendBuckets: Sendable, Hashable {
  /// The most buckets a range may have.
  public static let maximumCount = 1000

  /// The buckets' length.
  public let interval: TrendInterval
  /// Each bucket's start, ascending; the first is the range's start.
  public let starts: [Int64]
  /// The range's end, excluded: the last bucket's end.
  public let endMs: Int64

  /// The range's start.
  public var startMs: Int64 { starts[0] }
  /// How many buckets there are.
  public var count: Int { starts.count }

  /// Bucket `index`'s end, excluded (the next bucket's start).
  public func end(of index: Int) -> Int64 { index + 1 < starts.count ? starts[index + 1] : endMs }

  /// Cuts `[fromMs, toMs)` into buckets.
  /// - Throws: ``TrendRangeError`` naming `from_ms` or `to_ms` when it is not a UTC midnight or
  ///   `fromMs` is not before `toMs`, and `interval` when there would be more than
  ///   ``maximumCount`` buckets.
  public init(fromMs: Int64, toMs: Int64, interval: TrendInterval) throws(TrendRangeError) {
    let day = CivilDate.millisecondsPerDay
    guard fromMs % day == 0 else {
      throw TrendRangeError(field: "from_ms", message: "must be a UTC midnight (a date), got \(fromMs)")
    }
    guard toMs % day == 0 else {
      throw TrendRangeError(field: "to_ms", message: "must be a UTC midnight (a date), got \(toMs)")
    }
    guard fromMs < toMs else {
      throw TrendRangeError(field: "to_ms", message: "must be after from_ms (the range is [from, to))")
    }
    let lastDay = toMs / day
    var starts: [Int64] = []
    var current = fromMs / day
    while current < lastDay {
      guard starts.count < TrendBuckets.maximumCount else {
        throw TrendRangeError(
          field: "interval",
          message:
            "the range has more than \(TrendBuckets.maximumCount) \(interval.rawValue.lowercased()) buckets: "
            + "choose a longer interval or a shorter range")
      }
      starts.append(current * day)
      current = TrendBuckets.nextBoundary(afterDay: current, interval)
    }
    self.interval = interval
    self.starts = starts
    self.endMs = toMs
  }

  /// The day number (since 1970-01-01) of the first bucket boundary after `day`.
  static func nextBoundary(afterDay day: Int64, _ interval: TrendInterval) -> Int64 {
    switch interval {
    case .day:
      return day + 1
    case .week:
      // 1970-01-01 was a Thursday: Monday-based weekday 3.
      let weekday = day + 3 - 7 * CivilDate.floorDiv(day + 3, 7)
      return day + 7 - weekday
    case .month:
      let date = CivilDate(daysSinceEpoch: day)
      let next = date.month == 12
        ? CivilDate(year: date.year + 1, month: 1, day: 1)
        : CivilDate(year: date.year, month: date.month + 1, day: 1)
      return next.daysSinceEpoch
    }
  }

  /// The index of the bucket holding `instant`; `-1` before the range; `nil` at or after its end.
  public func index(of instant: Int64) -> Int? {
    if instant >= endMs { return nil }
    if instant < starts[0] { return -1 }
    var low = 0
    var high = starts.count - 1
    while low < high {
      let middle = (low + high + 1) / 2
      if starts[middle] <= instant { low = middle } else { high = middle - 1 }
    }
    return low
  }
}

/// The series' values of one trends bucket (the proto's `TrendBucket`; its comments define each
/// count precisely).
public struct TrendBucketCounts: Sendable, Hashable {
  /// The bucket's start, included.
  public var startMs: Int64
  /// The bucket's end, excluded.
  public var endMs: Int64
  /// Subscriptions ACTIVE or in GRACE_PERIOD at ``endMs``.
  public var activeSubscribers: Int64 = 0
  /// Of ``activeSubscribers``, those in a free trial.
  public var activeTrials: Int64 = 0
  /// Subscriptions started (or resubscribed) with a free trial.
  public var trialsStarted: Int64 = 0
  /// Free trials that became paid.
  public var trialsConverted: Int64 = 0
  /// Free trials that ended unpaid (expired or revoked).
  public var trialsLapsed: Int64 = 0
  /// Subscriptions started (or resubscribed) with any offer but a free trial.
  public var newPaidSubscriptions: Int64 = 0
  /// Renewals.
  public var renewals: Int64 = 0
  /// Paid subscriptions that expired.
  public var churned: Int64 = 0
  /// Refunds.
  public var refunds: Int64 = 0
  /// Billing issues (grace or retry entered).
  public var billingIssues: Int64 = 0
  /// Billing recoveries.
  public var billingRecoveries: Int64 = 0
  /// Gross sales in milliunits, by currency.
  public var revenue: [String: Int64] = [:]
  /// Purchases (not free trials) without a known price.
  public var unpricedPurchases: Int64 = 0
  /// Refunded prices in milliunits, by currency.
  public var refundedRevenue: [String: Int64] = [:]
  /// Monthly recurring revenue at ``endMs`` in milliunits, by currency.
  public var mrr: [String: Int64] = [:]
  /// Paying subscriptions at ``endMs`` left out of ``mrr`` (price or duration unknown).
  public var mrrUnpricedSubscriptions: Int64 = 0
  /// Answers to Apple's retention requests in the bucket, by the rule that answered (`""`: the
  /// default message), with what their subscribers did next.
  public var retention: [String: RetentionTrendCounts] = [:]

  /// Creates empty counts for a bucket.
  public init(startMs: Int64, endMs: Int64) {
    self.startMs = startMs
    self.endMs = endMs
  }

  /// `trialsConverted / (trialsConverted + trialsLapsed)`; 0 when no trial ended.
  public var trialConversionRate: Double {
    let ended = trialsConverted + trialsLapsed
    return ended == 0 ? 0 : Double(trialsConverted) / Double(ended)
  }
}

/// What one retention rule's answers in a trends bucket led to (the proto's `RetentionTrend`).
public struct RetentionTrendCounts: Sendable, Hashable {
  /// Answers given (`RETENTION_OFFERED` events).
  public var offered: Int64 = 0
  /// Of those, subscribers whose next event in the group was a purchase or auto-renewal turned
  /// back on.
  public var stayed: Int64 = 0
  /// Of those, subscribers whose next such event was an expiry or a refund.
  public var expired: Int64 = 0

  /// No answers.
  public init() {}
}

/// A price normalized to a month from a subscription's duration: `P1W` × 52/12, `P1M` × 1, `P2M`
/// × 1/2, `P3M` × 1/3, `P6M` × 1/6, `P1Y` × 1/12 (generally × 12 / months for years and months,
/// × 52 / 12 / weeks, × 365 / 12 / days), rounded half up to the milliunit; `nil` for a duration
/// mixing units or with a time part.
public func monthlyMilliunits(price: Int64, duration: ISO8601Duration) -> Int64? {
  guard duration.hours == 0, duration.minutes == 0, duration.seconds == 0 else { return nil }
  let months = Int64(duration.years) * 12 + Int64(duration.months)
  let numerator: Int64
  let denominator: Int64
  switch (months, duration.weeks, duration.days) {
  case (let m, 0, 0) where m > 0:
    (numerator, denominator) = (1, m)
  case (0, let w, 0) where w > 0:
    (numerator, denominator) = (52, 12 * Int64(w))
  case (0, 0, let d) where d > 0:
    (numerator, denominator) = (365, 12 * Int64(d))
  default:
    return nil
  }
  let (product, overflow) = price.multipliedReportingOverflow(by: numerator)
  guard !overflow else { return nil }
  let half = denominator / 2
  return product >= 0 ? (product + half) / denominator : -((-product + half) / denominator)
}

/// Counts an app's trends from its event log, one event at a time, holding one small state per
/// subscription (a pair of user and subscription group) and per-bucket sums: memory grows with the
/// number of subscriptions and buckets, not with the number of events.
///
/// Feed it the events of one environment that occurred before the range's end, **from the start of
/// the log** (the events before the range tell who is subscribed when it starts), in log order;
/// then read ``counts``. A subscription's state at an instant is the `stateAfter` of its latest
/// event that occurred before then, taking its events in the order fed: an event that occurred
/// before one already fed for the same subscription (data that arrived late) counts in the flow
/// series of the bucket it occurred in but does not change the states at bucket ends.
///
/// **Family Sharing.** A subscription shared with the user by a family member
/// (``SubscriptionEvent/ownershipType`` ``OwnershipType/familyShared``, or, on an event without
/// one, the subscription's last known ownership) is an entitlement, not a purchase of the user:
/// Apple's SUBSCRIBED to a member is "first access via Family Sharing", and the member's
/// transactions carry the organizer's price, paid once, by the organizer. It counts in the
/// active subscribers (and active trials) and in no flow series (no trial, new paid subscription,
/// renewal, churn, refund, billing issue or recovery), no revenue and no MRR; a family-shared
/// one-time product adds no revenue either.
///
/// ```swift
/// var aggregator = TrendAggregator(buckets: buckets, productDurations: durations)
/// for event in log { aggregator.add(event) }
/// let series = aggregator.counts
/// ```
public struct TrendAggregator: Sendable {
  /// The buckets counted.
  public let buckets: TrendBuckets
  private let productDurations: [String: ISO8601Duration]
  private var subscriptions: [SubscriptionKey: Track] = [:]
  private var flows: [TrendBucketCounts]
  // Level series as changes: slot 0 holds the level before the range, slot i + 1 the change
  // during bucket i.
  private var activeChanges: [Int64]
  private var trialChanges: [Int64]
  private var unpricedChanges: [Int64]
  private var mrrChanges: [String: [Int64]] = [:]

  /// Starts counting; `productDurations` maps product ids to their catalog durations (for MRR).
  public init(buckets: TrendBuckets, productDurations: [String: ISO8601Duration]) {
    self.buckets = buckets
    self.productDurations = productDurations
    flows = buckets.starts.indices.map {
      TrendBucketCounts(startMs: buckets.starts[$0], endMs: buckets.end(of: $0))
    }
    activeChanges = Array(repeating: 0, count: buckets.count + 1)
    trialChanges = activeChanges
    unpricedChanges = activeChanges
  }

  /// Starts counting with the durations of `catalog`'s products (for MRR).
  public init(buckets: TrendBuckets, catalog: Catalog) {
    var durations: [String: ISO8601Duration] = [:]
    for product in catalog.products {
      if let duration = product.duration { durations[product.productId] = duration }
    }
    self.init(buckets: buckets, productDurations: durations)
  }

  private struct SubscriptionKey: Hashable {
    var userId: String
    var groupId: String
  }

  /// What the aggregator remembers of one subscription.
  private struct Track {
    var occurredMs = Int64.min
    var state: SubscriptionState?
    var inTrial = false
    var productId: String?
    /// The last price paid and its currency; `nil` when unknown.
    var price: (milliunits: Int64, currency: String)?
    /// The price is a monthly charge of a 12-month commitment (rule 22).
    var billedMonthly = false
    /// The transaction whose price was last added to revenue (a transaction counts once).
    var revenueTransactionId: String?
    /// Shared with the user through Family Sharing (the last ownership an event told).
    var familyShared = false
    /// The latest retention answer in range not yet followed by a decision: its bucket, rule and
    /// instant.
    var retentionOffer: (bucket: Int, ruleId: String, occurredMs: Int64)?
  }

  /// Counts a `RETENTION_OFFERED` event in its bucket (an answer before the range only waits for
  /// nothing) and remembers it for the subscription's next decision.
  private mutating func addRetentionOffer(_ event: SubscriptionEvent, at index: Int) {
    let ruleId = event.retention?.ruleId ?? ""
    if index >= 0 { flows[index].retention[ruleId, default: RetentionTrendCounts()].offered += 1 }
    guard let groupId = event.subscriptionGroupId else { return }
    let key = SubscriptionKey(userId: event.userId, groupId: groupId)
    var track = subscriptions[key] ?? Track()
    track.retentionOffer = index >= 0 ? (index, ruleId, event.occurredMs) : nil
    subscriptions[key] = track
  }

  /// What one subscription adds to the level series.
  private struct Contribution: Equatable {
    var active: Int64 = 0
    var trial: Int64 = 0
    var unpriced: Int64 = 0
    var mrrCurrency: String?
    var mrr: Int64 = 0
  }

  /// Counts one event. Events at or after the range's end are ignored.
  public mutating func add(_ event: SubscriptionEvent) {
    guard let index = buckets.index(of: event.occurredMs) else { return }
    if event.type == .retentionOffered {
      addRetentionOffer(event, at: index)
      return
    }
    let isPurchase = event.isPurchase
    let isFreeTrial = event.offer == .freeTrial

    guard let groupId = event.subscriptionGroupId else {
      if index >= 0 && isPurchase && event.ownershipType != .familyShared { addRevenue(event, at: index) }
      return
    }
    let key = SubscriptionKey(userId: event.userId, groupId: groupId)
    var track = subscriptions[key] ?? Track()
    let wasInTrial = track.inTrial
    let familyShared = event.ownershipType.map { $0 == .familyShared } ?? track.familyShared
    if let offer = track.retentionOffer, event.occurredMs >= offer.occurredMs {
      let stayed = isPurchase || event.type == .autoRenewEnabled
      if stayed || event.type == .expired || event.type == .refunded {
        var counts = flows[offer.bucket].retention[offer.ruleId] ?? RetentionTrendCounts()
        if stayed { counts.stayed += 1 } else { counts.expired += 1 }
        flows[offer.bucket].retention[offer.ruleId] = counts
        track.retentionOffer = nil
      }
    }

    if index >= 0 && !familyShared {
      var bucket = flows[index]
      switch event.type {
      case .subscriptionStarted, .resubscribed:
        if isFreeTrial { bucket.trialsStarted += 1 } else { bucket.newPaidSubscriptions += 1 }
      case .trialConverted:
        bucket.trialsConverted += 1
      case .renewed:
        bucket.renewals += 1
        if wasInTrial { bucket.trialsConverted += 1 }
      case .billingRecovered:
        bucket.billingRecoveries += 1
        if wasInTrial { bucket.trialsConverted += 1 }
      case .productChanged:
        if wasInTrial && isPurchase && !isFreeTrial { bucket.trialsConverted += 1 }
      case .billingIssue:
        bucket.billingIssues += 1
      case .expired:
        if !wasInTrial { bucket.churned += 1 }
      case .refunded:
        bucket.refunds += 1
        if let price = event.priceMilliunits, let currency = event.currency, !currency.isEmpty {
          bucket.refundedRevenue[currency, default: 0] += price
        }
      default:
        break
      }
      if wasInTrial && event.type != .trialConverted
        && (event.stateAfter == .expired || event.stateAfter == .revoked)
      {
        bucket.trialsLapsed += 1
      }
      flows[index] = bucket
      if isPurchase && (event.transactionId == nil || event.transactionId != track.revenueTransactionId) {
        addRevenue(event, at: index)
        track.revenueTransactionId = event.transactionId
      }
    }

    // The state series follow each subscription's events in the order fed.
    guard event.occurredMs >= track.occurredMs else {
      subscriptions[key] = track
      return
    }
    let before = contribution(track)
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
    if isPurchase && !isFreeTrial && !familyShared {
      if let price = event.priceMilliunits, let currency = event.currency, !currency.isEmpty {
        track.price = (price, currency)
      } else {
        track.price = nil
      }
      track.billedMonthly = event.billingPlanType == .monthly
    }
    let after = contribution(track)
    subscriptions[key] = track
    if before != after { record(before: before, after: after, slot: index + 1) }
  }

  /// The counts of every bucket, oldest first.
  public var counts: [TrendBucketCounts] {
    var result = flows
    var active: Int64 = activeChanges[0]
    var trials: Int64 = trialChanges[0]
    var unpriced: Int64 = unpricedChanges[0]
    var mrr: [String: Int64] = mrrChanges.mapValues { $0[0] }
    for index in result.indices {
      active += activeChanges[index + 1]
      trials += trialChanges[index + 1]
      unpriced += unpricedChanges[index + 1]
      for (currency, changes) in mrrChanges { mrr[currency, default: 0] += changes[index + 1] }
      result[index].activeSubscribers = active
      result[index].activeTrials = trials
      result[index].mrrUnpricedSubscriptions = unpriced
      result[index].mrr = mrr.filter { $0.value != 0 }
    }
    return result
  }

  private mutating func addRevenue(_ event: SubscriptionEvent, at index: Int) {
    if let price = event.priceMilliunits, let currency = event.currency, !currency.isEmpty {
      flows[index].revenue[currency, default: 0] += price
    } else if event.offer != .freeTrial {
      flows[index].unpricedPurchases += 1
    }
  }

  private func contribution(_ track: Track) -> Contribution {
    var result = Contribution()
    guard track.state == .active || track.state == .gracePeriod else { return result }
    result.active = 1
    if track.inTrial {
      result.trial = 1
      return result
    }
    guard track.state == .active, !track.familyShared else { return result }
    if let price = track.price, track.billedMonthly {
      // Rule 22: a 12-month commitment charges its price every month (each charge its own
      // transaction), whatever the product's one-year duration.
      result.mrrCurrency = price.currency
      result.mrr = price.milliunits
    } else if let price = track.price, let product = track.productId,
      let duration = productDurations[product],
      let monthly = monthlyMilliunits(price: price.milliunits, duration: duration)
    {
      result.mrrCurrency = price.currency
      result.mrr = monthly
    } else {
      result.unpriced = 1
    }
    return result
  }

  private mutating func record(before: Contribution, after: Contribution, slot: Int) {
    activeChanges[slot] += after.active - before.active
    trialChanges[slot] += after.trial - before.trial
    unpricedChanges[slot] += after.unpriced - before.unpriced
    if let currency = before.mrrCurrency { changeMRR(currency, by: -before.mrr, slot: slot) }
    if let currency = after.mrrCurrency { changeMRR(currency, by: after.mrr, slot: slot) }
  }

  private mutating func changeMRR(_ currency: String, by amount: Int64, slot: Int) {
    if mrrChanges[currency] == nil {
      mrrChanges[currency] = Array(repeating: 0, count: buckets.count + 1)
    }
    mrrChanges[currency]![slot] += amount
  }
}

extension SubscriptionEvent {
  private static let purchaseTypes: Set<SubscriptionEventType> = [
    .subscriptionStarted, .resubscribed, .trialConverted, .renewed, .billingRecovered,
    .productChanged, .nonRenewingPurchased, .oneTimePurchased,
  ]

  /// Whether the event is a sale that trends and charts count: a purchase or renewal transaction
  /// (a product change only when a transaction carries it).
  var isPurchase: Bool {
    Self.purchaseTypes.contains(type) && (type != .productChanged || transactionId != nil)
  }
}
