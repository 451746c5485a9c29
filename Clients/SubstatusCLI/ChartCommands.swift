import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// `substatus report chart` (issue 35, docs/architecture.md "Charts").
let chartCommands: [CommandSpec] = [
  CommandSpec(
    words: ["report", "chart"], positionals: ["APP", "NAME"],
    options: [
      OptionSpec(name: "--from", value: "YYYY-MM-DD", help: "the first day counted (UTC)", required: true),
      OptionSpec(
        name: "--to", value: "YYYY-MM-DD", help: "the first day not counted (UTC): the range is [from, to)",
        required: true),
      OptionSpec(
        name: "--interval", value: "day|week|month",
        help: "the buckets (cohorts, for cohort charts): UTC days, ISO weeks or months (default day)"),
      OptionSpec(
        name: "--environment", value: "production|sandbox", help: "whose events count (default production)"),
      OptionSpec(name: "--csv", value: nil, help: "one row per bucket with a header, for spreadsheets"),
    ],
    summary: "one chart of the app (MRR, movements, revenue, refunds, cohorts, LTV) from the event log",
    details:
      "NAME is one of \(ChartTable.names.map(\.name).joined(separator: ", ")).\nA table with one row per series, a sparkline over every bucket and the numbers of the last\n\(TrendsTable.shownBuckets) buckets; amounts in units of their currency (9.99 is 9990 milliunits). --csv prints every\nbucket; --json the response. At most 1,000 buckets. Each chart is defined in the README (Charts)."),
]

/// Runs a command of ``chartCommands``; `nil` for any other command.
func executeChart(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  guard command.name == "report chart" else { return nil }
  let csv = context.parsed.has("--csv")
  if csv && context.json {
    throw UsageError(message: "--csv and --json cannot be combined", command: command.name)
  }
  let name = context.argument(1).lowercased().replacingOccurrences(of: "_", with: "-")
  guard let chart = ChartTable.names.first(where: { $0.name == name })?.chart else {
    throw UsageError(
      message: "unknown chart '\(context.argument(1))': one of \(ChartTable.names.map(\.name).joined(separator: ", "))",
      command: command.name)
  }
  let from = try chartDate(context, "--from")
  let to = try chartDate(context, "--to")
  guard from < to else {
    throw UsageError(message: "--to must be after --from (the range is [from, to))", command: command.name)
  }
  let interval: Substatus_V1_TrendInterval =
    switch try context.choice("--interval", ["day", "week", "month"]) {
    case "week": .week
    case "month": .month
    default: .day
    }
  let response = try await context.client.chart(
    appID: context.argument(0), chart: chart, from: Date(substatusMilliseconds: from),
    to: Date(substatusMilliseconds: to), interval: interval, environment: try context.environmentFlag())
  if csv { return ChartTable.csv(response) }
  return render(context, response) { ChartTable.terminal(&$0, response, name: name) }
}

private func chartDate(_ context: CommandContext, _ flag: String) throws(UsageError) -> Int64 {
  let text = context.parsed.value(flag) ?? ""
  guard let midnight = Format.midnight(ofDate: text) else {
    throw UsageError(message: "\(flag) needs a date YYYY-MM-DD, not '\(text)'", command: context.command.name)
  }
  return midnight
}

/// The human and CSV forms of a GetChart response.
enum ChartTable {
  /// The charts' names on the command line.
  static let names: [(name: String, chart: Substatus_V1_Chart)] = [
    ("mrr", .mrr), ("mrr-movement", .mrrMovement), ("revenue", .revenue), ("refund-rate", .refundRate),
    ("actives-movement", .activesMovement), ("trials-movement", .trialsMovement),
    ("cohort-retention", .cohortRetention), ("realized-ltv", .realizedLtv),
  ]

  /// A series' column name: its name, and its currency for money (`revenue_EUR`).
  static func column(_ series: Substatus_V1_ChartSeries) -> String {
    series.currency.isEmpty ? series.name : "\(series.name)_\(series.currency)"
  }

  /// A series' values as text, one per bucket.
  static func text(_ series: Substatus_V1_ChartSeries, csv: Bool) -> [String] {
    switch series.unit {
    case .ratio: series.ratios.map { csv ? String(format: "%.4f", $0) : String(format: "%.1f%%", $0 * 100) }
    case .milliunits: series.values.map(TrendsTable.amount)
    default: series.values.map { String($0) }
    }
  }

  private static func numbers(_ series: Substatus_V1_ChartSeries) -> [Double] {
    series.unit == .ratio ? series.ratios : series.values.map { Double($0) }
  }

  /// The terminal form: the range, then one row per series with its sparkline and the numbers of
  /// the last ``TrendsTable/shownBuckets`` buckets.
  static func terminal(_ report: inout Report, _ response: Substatus_V1_GetChartResponse, name: String) {
    let buckets = response.buckets
    guard let first = buckets.first, let last = buckets.last else {
      report.line("no buckets")
      return
    }
    let interval = Format.name(response.interval, prefix: "TREND_INTERVAL_")
    report.fields([
      ("app", response.appID), ("environment", Format.environment(response.environment)), ("chart", name),
      ("range", "[\(Format.date(first.startMs)), \(Format.date(last.endMs))), UTC"),
      ("interval", "\(interval) (\(buckets.count) buckets)"),
    ])
    report.gap()
    let shown = max(0, buckets.count - TrendsTable.shownBuckets)..<buckets.count
    let header = ["SERIES", "TREND"] + buckets[shown].map {
      response.interval == .month ? String(Format.date($0.startMs).prefix(7)) : Format.date($0.startMs)
    }
    let rows = response.series.map { series in
      [TerminalText.visible(column(series)), TrendsTable.sparkline(numbers(series))]
        + Array(text(series, csv: false)[shown])
    }
    report.table(header, rows, empty: "")
    if response.series.isEmpty {
      report.line("no series: nothing to count in the range")
    }
    if shown.lowerBound > 0 {
      report.gap()
      report.line("numbers for the last \(TrendsTable.shownBuckets) of \(buckets.count) buckets; --csv prints them all")
    }
  }

  /// The CSV form: a header (`start`, `end`, then a column per series), then one row per bucket
  /// (RFC 4180; no field needs quoting: names and currency codes are letters, digits and `_`).
  static func csv(_ response: Substatus_V1_GetChartResponse) -> String {
    let columns = response.series.map { text($0, csv: true) }
    var csv = (["start", "end"] + response.series.map { TerminalText.visible(column($0)) })
      .joined(separator: ",") + "\r\n"
    for (index, bucket) in response.buckets.enumerated() {
      let cells = columns.map { index < $0.count ? $0[index] : "" }
      csv += ([Format.date(bucket.startMs), Format.date(bucket.endMs)] + cells).joined(separator: ",") + "\r\n"
    }
    return csv
  }
}
