// ReportService.GetChart: one chart counted from the event log by the domain's ChartAggregator
// (docs/architecture.md "Charts"; the proto's `Chart` defines each one).
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusServiceCore
import SubstatusWire

extension SubstatusService {
  /// `ReportService.GetChart`: validates the request, then reads the environment's events that
  /// occurred before the range's end from the start of the log, a page of ``trendsPageSize`` at a
  /// time, into the domain's ``ChartAggregator`` (the same reading, and cost, as GetTrends).
  public func getChart(
    _ request: Substatus_V1_GetChartRequest, _ context: ServerContext
  ) async throws -> Substatus_V1_GetChartResponse {
    let cached = try await app(request.appID, context)
    let chart = try ChartKind(wire: request.chart)
    let environment = try SubscriptionDomain.Environment(wire: request.environment)
    let interval = try TrendInterval(wire: request.interval)
    let buckets: TrendBuckets
    do {
      buckets = try TrendBuckets(fromMs: request.fromMs, toMs: request.toMs, interval: interval)
    } catch {
      throw invalidArgument(error.field, error.message)
    }
    let filters = request.filters ?? Substatus_V1_ChartFilters()
    for (field, ids) in [
      ("filters.product_ids", filters.productIDs), ("filters.subscription_group_ids", filters.subscriptionGroupIDs),
    ] where ids.contains(where: \.isEmpty) {
      throw invalidArgument(field, "an id is empty")
    }
    var aggregator = ChartAggregator(
      chart: chart, buckets: buckets, catalog: cached.catalog,
      filter: ChartFilter(
        productIds: Set(filters.productIDs), subscriptionGroupIds: Set(filters.subscriptionGroupIDs)),
      smallBusinessProgram: cached.app.smallBusinessProgram)
    try await forEachLoggedEvent(appId: request.appID, environment: environment, occurredBeforeMs: buckets.endMs) {
      aggregator.add($0)
    }

    var response = Substatus_V1_GetChartResponse()
    response.appID = request.appID
    response.environment = environment.wire
    response.chart = request.chart
    response.interval = interval.wire
    response.buckets = buckets.starts.indices.map {
      var bucket = Substatus_V1_ChartBucket()
      bucket.startMs = buckets.starts[$0]
      bucket.endMs = buckets.end(of: $0)
      return bucket
    }
    let series = aggregator.series
    response.series = series.map { $0.wire }
    response.currencies = Set(series.compactMap { $0.currency }).sorted()
    return response
  }
}

extension ChartKind {
  /// The chart of a request.
  /// - Throws: `INVALID_ARGUMENT` naming `chart` when unspecified or unknown.
  init(wire: Substatus_V1_Chart) throws(RPCError) {
    switch wire {
    case .mrr: self = .mrr
    case .mrrMovement: self = .mrrMovement
    case .revenue: self = .revenue
    case .refundRate: self = .refundRate
    case .activesMovement: self = .activesMovement
    case .trialsMovement: self = .trialsMovement
    case .cohortRetention: self = .cohortRetention
    case .realizedLtv: self = .realizedLTV
    case .unspecified:
      throw invalidArgument(
        "chart", "required: one of \(ChartKind.allCases.map { "CHART_\($0.rawValue)" }.joined(separator: ", "))")
    case .UNRECOGNIZED(let n): throw invalidArgument("chart", "unknown chart \(n)")
    }
  }
}

extension ChartSeries {
  /// The wire series.
  var wire: Substatus_V1_ChartSeries {
    var series = Substatus_V1_ChartSeries()
    series.name = name
    series.currency = currency ?? ""
    switch unit {
    case .count: series.unit = .count
    case .milliunits: series.unit = .milliunits
    case .ratio: series.unit = .ratio
    }
    series.values = values
    series.ratios = ratios
    return series
  }
}
