import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// `substatus report trends` (issue 21, docs/architecture.md "Trends").
let trendsCommands: [CommandSpec] = [
  CommandSpec(
    words: ["report", "trends"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--from", value: "YYYY-MM-DD", help: "the first day counted (UTC)", required: true),
      OptionSpec(
        name: "--to", value: "YYYY-MM-DD", help: "the first day not counted (UTC): the range is [from, to)",
        required: true),
      OptionSpec(
        name: "--interval", value: "day|week|month",
        help: "the buckets: UTC days, ISO weeks (from Monday) or months (default day)"),
      OptionSpec(
        name: "--environment", value: "production|sandbox", help: "whose events count (default production)"),
      OptionSpec(name: "--csv", value: nil, help: "one row per bucket with a header, for spreadsheets"),
    ],
    summary: "the app's subscription series over time (trends), counted from the event log",
    details:
      "A table with one row per series, a sparkline over every bucket and the numbers of the last\n\(TrendsTable.shownBuckets) buckets; amounts in units of their currency (9.99 is 9990 milliunits). --csv prints every\nbucket; --json the response. At most 1,000 buckets."),
]

/// Runs a command of ``trendsCommands``; `nil` for any other command.
func executeTrends(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  guard command.name == "report trends" else { return nil }
  let csv = context.parsed.has("--csv")
  if csv && context.json {
    throw UsageError(message: "--csv and --json cannot be combined", command: command.name)
  }
  let from = try date(context, "--from")
  let to = try date(context, "--to")
  guard from < to else {
    throw UsageError(message: "--to must be after --from (the range is [from, to))", command: command.name)
  }
  let interval: Substatus_V1_TrendInterval =
    switch try context.choice("--interval", ["day", "week", "month"]) {
    case "week": .week
    case "month": .month
    default: .day
    }
  let response = try await context.client.trends(
    appID: context.argument(0), from: Date(substatusMilliseconds: from),
    to: Date(substatusMilliseconds: to), interval: interval, environment: try context.environmentFlag())
  if csv { return TrendsTable.csv(response) }
  return render(context, response) { TrendsTable.terminal(&$0, response) }
}

private func date(_ context: CommandContext, _ flag: String) throws(UsageError) -> Int64 {
  let text = context.parsed.value(flag) ?? ""
  guard let midnight = Format.midnight(ofDate: text) else {
    throw UsageError(message: "\(flag) needs a date YYYY-MM-DD, not '\(text)'", command: context.command.name)
  }
  return midnight
}

/// The human and CSV forms of a GetTrends response.
enum TrendsTable {
  /// How many buckets' numbers the terminal table shows (the sparkline shows them all).
  static let shownBuckets = 12

  /// One series: its name, its values per bucket as text, and as numbers for the sparkline.
  private struct Series {
    var name: String
    var csvName: String
    var text: [String]
    var values: [Double]
  }

  private static func counts(
    _ name: String, _ csvName: String, _ buckets: [Substatus_V1_TrendBucket],
    _ value: (Substatus_V1_TrendBucket) -> Int64
  ) -> Series {
    let values = buckets.map(value)
    return Series(name: name, csvName: csvName, text: values.map { String($0) }, values: values.map { Double($0) })
  }

  private static func money(
    _ name: String, _ csvName: String, _ currency: String, _ buckets: [Substatus_V1_TrendBucket],
    _ amounts: (Substatus_V1_TrendBucket) -> [Substatus_V1_CurrencyAmount]
  ) -> Series {
    let values = buckets.map { bucket in
      amounts(bucket).first { $0.currency == currency }?.amountMilliunits ?? 0
    }
    return Series(
      name: name, csvName: csvName, text: values.map(amount), values: values.map { Double($0) })
  }

  /// Every series of the response, in the order of the proto's fields, a money series per currency.
  private static func series(_ response: Substatus_V1_GetTrendsResponse) -> [Series] {
    let b = response.buckets
    var rows = [
      counts("active subscribers", "active_subscribers", b) { $0.activeSubscribers },
      counts("active trials", "active_trials", b) { $0.activeTrials },
      counts("trials started", "trials_started", b) { $0.trialsStarted },
      counts("trials converted", "trials_converted", b) { $0.trialsConverted },
      counts("trials lapsed", "trials_lapsed", b) { $0.trialsLapsed },
      Series(
        name: "trial conversion", csvName: "trial_conversion_rate",
        text: b.map { $0.trialsConverted + $0.trialsLapsed == 0 ? "-" : percent($0.trialConversionRate) },
        values: b.map(\.trialConversionRate)),
      counts("new paid subscriptions", "new_paid_subscriptions", b) { $0.newPaidSubscriptions },
      counts("renewals", "renewals", b) { $0.renewals },
      counts("churned", "churned", b) { $0.churned },
      counts("refunds", "refunds", b) { $0.refunds },
      counts("billing issues", "billing_issues", b) { $0.billingIssues },
      counts("billing recoveries", "billing_recoveries", b) { $0.billingRecoveries },
      counts("unpriced purchases", "unpriced_purchases", b) { $0.unpricedPurchases },
    ]
    for currency in response.currencies {
      rows.append(money("revenue \(currency)", "revenue_\(currency)", currency, b) { $0.revenue })
    }
    for currency in response.currencies {
      rows.append(money("refunded \(currency)", "refunded_revenue_\(currency)", currency, b) { $0.refundedRevenue })
    }
    for currency in response.currencies {
      rows.append(money("MRR \(currency)", "mrr_\(currency)", currency, b) { $0.mrr })
    }
    rows.append(counts("MRR unpriced subscriptions", "mrr_unpriced_subscriptions", b) { $0.mrrUnpricedSubscriptions })
    return rows
  }

  /// The terminal form: the range, then one row per series with its sparkline and the numbers of
  /// the last ``shownBuckets`` buckets.
  static func terminal(_ report: inout Report, _ response: Substatus_V1_GetTrendsResponse) {
    let buckets = response.buckets
    guard let first = buckets.first, let last = buckets.last else {
      report.line("no buckets")
      return
    }
    let interval = response.interval == .unspecified ? "DAY" : Format.name(response.interval, prefix: "TREND_INTERVAL_")
    report.fields([
      ("app", response.appID), ("environment", Format.environment(response.environment)),
      ("range", "[\(Format.date(first.startMs)), \(Format.date(last.endMs))), UTC"),
      ("interval", "\(interval) (\(buckets.count) buckets)"),
    ])
    report.gap()
    let shown = max(0, buckets.count - shownBuckets)..<buckets.count
    let header = ["SERIES", "TREND"] + buckets[shown].map { label($0, response.interval) }
    report.table(
      header, series(response).map { [$0.name, sparkline($0.values)] + Array($0.text[shown]) }, empty: "")
    if shown.lowerBound > 0 {
      report.gap()
      report.line("numbers for the last \(shownBuckets) of \(buckets.count) buckets; --csv prints them all")
    }
  }

  /// The CSV form: a header, then one row per bucket (RFC 4180; no field needs quoting, currency
  /// codes are letters).
  static func csv(_ response: Substatus_V1_GetTrendsResponse) -> String {
    let rows = series(response)
    var text = (["start", "end"] + rows.map { TerminalText.visible($0.csvName) }).joined(separator: ",") + "\r\n"
    for (index, bucket) in response.buckets.enumerated() {
      let cells = rows.map { row in
        row.csvName == "trial_conversion_rate" ? String(format: "%.4f", row.values[index]) : row.text[index]
      }
      text += ([Format.date(bucket.startMs), Format.date(bucket.endMs)] + cells).joined(separator: ",") + "\r\n"
    }
    return text
  }

  /// A bucket's column title: its start date, or its month for monthly buckets.
  private static func label(_ bucket: Substatus_V1_TrendBucket, _ interval: Substatus_V1_TrendInterval) -> String {
    let date = Format.date(bucket.startMs)
    return interval == .month ? String(date.prefix(7)) : date
  }

  /// Milliunits as units with 2 or 3 decimals: `9.99`, `12.957`, `-1.50`.
  static func amount(_ milliunits: Int64) -> String {
    let sign = milliunits < 0 ? "-" : ""
    let magnitude = milliunits.magnitude
    let fraction = magnitude % 1000
    var decimals = String(fraction)
    decimals = String(repeating: "0", count: 3 - decimals.count) + decimals
    if decimals.hasSuffix("0") { decimals.removeLast() }
    return "\(sign)\(magnitude / 1000).\(decimals)"
  }

  private static func percent(_ rate: Double) -> String { String(format: "%.0f%%", rate * 100) }

  /// One block per value from ▁ (the smaller of 0 and the least value) to █ (the greatest).
  static func sparkline(_ values: [Double]) -> String {
    let blocks = Array("▁▂▃▄▅▆▇█")
    let low = min(0, values.min() ?? 0)
    let high = values.max() ?? 0
    guard high > low else { return String(repeating: blocks[0], count: values.count) }
    return String(values.map { blocks[Int(((($0 - low) / (high - low)) * 7).rounded())] })
  }
}
