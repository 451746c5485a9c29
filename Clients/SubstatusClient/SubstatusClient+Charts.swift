public import Foundation
public import RPCCore
public import SubstatusWire
import SubstatusServiceAPI

extension SubstatusClient {
  /// One chart over `[from, to)` by day, ISO week or month, counted from the event log
  /// (`ReportService.GetChart`; the proto's `Chart` defines each one). Idempotent.
  ///
  /// ```swift
  /// let chart = try await client.chart(
  ///   appID: app, chart: .mrrMovement, from: Date(substatusMilliseconds: 1_704_067_200_000),
  ///   to: Date(substatusMilliseconds: 1_711_929_600_000), interval: .month)
  /// for series in chart.series { print(series.name, series.currency, series.values) }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - chart: The chart.
  ///   - from: The range's start, included: a UTC midnight.
  ///   - to: The range's end, excluded: a later UTC midnight.
  ///   - interval: The buckets' length (`.unspecified`: days).
  ///   - environment: The environment to count.
  ///   - filters: What to count (`nil`: everything).
  ///   - options: Deadline and metadata.
  /// - Returns: The buckets and the chart's series.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `chart`, `from_ms`, `to_ms`,
  ///   `interval` or a filter).
  public func chart(
    appID: String, chart: Substatus_V1_Chart, from: Date, to: Date,
    interval: Substatus_V1_TrendInterval = .unspecified, environment: Substatus_V1_Environment = .unspecified,
    filters: Substatus_V1_ChartFilters? = nil, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetChartResponse {
    var request = Substatus_V1_GetChartRequest()
    request.appID = appID
    request.chart = chart
    request.fromMs = from.substatusMilliseconds
    request.toMs = to.substatusMilliseconds
    request.interval = interval
    request.environment = environment
    request.filters = filters
    return try await service(
      Substatus_V1_ReportService.Client.self, options: options
    ).getChart(request)
  }
}
