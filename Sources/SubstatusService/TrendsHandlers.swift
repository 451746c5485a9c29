// ReportService.GetTrends: the app's series over time, counted from the event log by the domain's
// TrendAggregator (docs/architecture.md "Trends").
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusServiceCore
import SubstatusWire

extension SubstatusService {
  /// How many events GetTrends and GetChart read from the log at a time.
  static let trendsPageSize = 1000

  /// Reads the environment's events that occurred before `occurredBeforeMs` from the start of the
  /// app's log, a page of ``trendsPageSize`` at a time, handing each to `body` in log order (what
  /// GetTrends and GetChart count from). Only an empty page ends the log: a store may answer fewer
  /// than asked before the end. Checks for cancellation between pages.
  func forEachLoggedEvent(
    appId: String, environment: SubscriptionDomain.Environment, occurredBeforeMs: Int64,
    _ body: (SubscriptionEvent) -> Void
  ) async throws {
    let query = EventQuery(environment: environment, occurredBeforeMs: occurredBeforeMs)
    var after: Int64 = 0
    while true {
      let page = try await stored { () throws(StoreError) in
        try await eventLogStore.events(appId: appId, query: query, afterSequence: after, limit: Self.trendsPageSize)
      }
      for logged in page { body(logged.event) }
      guard let last = page.last else { break }
      after = last.sequence
      try Task.checkCancellation()
    }
  }

  /// `ReportService.GetTrends`: validates the range, then reads the environment's events that
  /// occurred before the range's end from the start of the log, a page of
  /// ``trendsPageSize`` at a time, into the domain's ``TrendAggregator``.
  ///
  /// Cost: every event of the app and environment that occurred before `to_ms` is read once
  /// (the ones before `from_ms` say who is subscribed when the range starts); memory is one small
  /// state per subscription (user and group) plus per-bucket sums, never the events.
  public func getTrends(
    _ request: Substatus_V1_GetTrendsRequest, _ context: ServerContext
  ) async throws -> Substatus_V1_GetTrendsResponse {
    let cached = try await app(request.appID, context)
    let environment = try SubscriptionDomain.Environment(wire: request.environment)
    let interval = try TrendInterval(wire: request.interval)
    let buckets: TrendBuckets
    do {
      buckets = try TrendBuckets(fromMs: request.fromMs, toMs: request.toMs, interval: interval)
    } catch {
      throw invalidArgument(error.field, error.message)
    }
    var aggregator = TrendAggregator(buckets: buckets, catalog: cached.catalog)
    try await forEachLoggedEvent(appId: request.appID, environment: environment, occurredBeforeMs: buckets.endMs) {
      aggregator.add($0)
    }

    var response = Substatus_V1_GetTrendsResponse()
    response.appID = request.appID
    response.environment = environment.wire
    response.interval = interval.wire
    response.buckets = aggregator.counts.map(\.wire)
    var currencies = Set<String>()
    for bucket in response.buckets {
      for amount in bucket.revenue + bucket.refundedRevenue + bucket.mrr { currencies.insert(amount.currency) }
    }
    response.currencies = currencies.sorted()
    return response
  }
}

extension TrendInterval {
  /// The interval of a request: UNSPECIFIED means days.
  /// - Throws: `INVALID_ARGUMENT` naming `interval` for an unknown value.
  init(wire: Substatus_V1_TrendInterval) throws(RPCError) {
    switch wire {
    case .unspecified, .day: self = .day
    case .week: self = .week
    case .month: self = .month
    case .UNRECOGNIZED(let n): throw invalidArgument("interval", "unknown interval \(n)")
    }
  }

  /// The wire value.
  var wire: Substatus_V1_TrendInterval {
    switch self {
    case .day: .day
    case .week: .week
    case .month: .month
    }
  }
}

extension TrendBucketCounts {
  /// The wire bucket, amounts ordered by currency.
  var wire: Substatus_V1_TrendBucket {
    var bucket = Substatus_V1_TrendBucket()
    bucket.startMs = startMs
    bucket.endMs = endMs
    bucket.activeSubscribers = activeSubscribers
    bucket.activeTrials = activeTrials
    bucket.trialsStarted = trialsStarted
    bucket.trialsConverted = trialsConverted
    bucket.trialsLapsed = trialsLapsed
    bucket.trialConversionRate = trialConversionRate
    bucket.newPaidSubscriptions = newPaidSubscriptions
    bucket.renewals = renewals
    bucket.churned = churned
    bucket.refunds = refunds
    bucket.billingIssues = billingIssues
    bucket.billingRecoveries = billingRecoveries
    bucket.revenue = Self.amounts(revenue)
    bucket.unpricedPurchases = unpricedPurchases
    bucket.refundedRevenue = Self.amounts(refundedRevenue)
    bucket.mrr = Self.amounts(mrr)
    bucket.mrrUnpricedSubscriptions = mrrUnpricedSubscriptions
    bucket.retention = retention.keys.sorted().map { ruleId in
      var w = Substatus_V1_RetentionTrend()
      w.ruleID = ruleId
      w.offered = retention[ruleId]!.offered
      w.stayed = retention[ruleId]!.stayed
      w.expired = retention[ruleId]!.expired
      return w
    }
    return bucket
  }

  private static func amounts(_ byCurrency: [String: Int64]) -> [Substatus_V1_CurrencyAmount] {
    byCurrency.sorted { $0.key < $1.key }.map {
      var amount = Substatus_V1_CurrencyAmount()
      amount.currency = $0.key
      amount.amountMilliunits = $0.value
      return amount
    }
  }
}
