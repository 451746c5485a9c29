import SubstatusWire

/// Human-readable forms of API values for tables.
enum Format {
  /// A millisecond timestamp as UTC ISO-8601 (`2026-11-29T22:55:41Z`, with `.123` when the
  /// milliseconds are not zero); `-` for 0 ("none" in the API).
  static func time(_ milliseconds: Int64) -> String {
    guard milliseconds != 0 else { return "-" }
    let (seconds, millis) = floorDivide(milliseconds, 1000)
    let (days, secondOfDay) = floorDivide(seconds, 86_400)
    let (year, month, day) = civilDate(daysSinceEpoch: days)
    let hour = secondOfDay / 3600
    let minute = secondOfDay % 3600 / 60
    let second = secondOfDay % 60
    var text =
      "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))"
    if millis != 0 { text += ".\(pad(millis, 3))" }
    return text + "Z"
  }

  /// An enum value's name without its enum's prefix (`SUBSCRIPTION_STATE_ACTIVE` → `ACTIVE`); the
  /// number for a value this build does not know.
  static func name<E: ProtobufEnum>(_ value: E, prefix: String) -> String {
    guard let name = value.protoName else { return String(value.rawValue) }
    return name.hasPrefix(prefix) ? String(name.dropFirst(prefix.count)) : name
  }

  static func environment(_ value: Substatus_V1_Environment) -> String {
    value == .unspecified ? "PRODUCTION" : name(value, prefix: "ENVIRONMENT_")
  }

  static func yesNo(_ value: Bool) -> String { value ? "yes" : "no" }

  static func orDash(_ value: String) -> String { value.isEmpty ? "-" : value }

  /// Identifiers joined with commas; `-` for none.
  static func list(_ values: [String]) -> String {
    values.isEmpty ? "-" : values.joined(separator: ",")
  }

  /// Win-back answers as `offer:yes,offer:no` in the answers' (catalog) order; `-` for none.
  static func winBackOffers(_ offers: [Substatus_V1_WinBackOfferEligibility]) -> String {
    list(offers.map { "\($0.offerID):\(yesNo($0.eligible))" })
  }

  /// `(quotient, remainder)` with the remainder in `0..<divisor`.
  private static func floorDivide(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
    var quotient = value / divisor
    var remainder = value % divisor
    if remainder < 0 {
      quotient -= 1
      remainder += divisor
    }
    return (quotient, remainder)
  }

  /// A UTC midnight as its date, `2024-01-31`.
  static func date(_ milliseconds: Int64) -> String {
    let (days, _) = floorDivide(milliseconds, 86_400_000)
    let (year, month, day) = civilDate(daysSinceEpoch: days)
    return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
  }

  /// The UTC midnight of a `YYYY-MM-DD` date in milliseconds since the epoch; `nil` when the text is
  /// not such a date (month 1-12, day within the month).
  static func midnight(ofDate text: String) -> Int64? {
    let parts = text.split(separator: "-", omittingEmptySubsequences: false)
    guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
      parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
      let year = Int64(parts[0]), let month = Int64(parts[1]), let day = Int64(parts[2]),
      (1...12).contains(month), day >= 1
    else { return nil }
    // 2023-02-30 would come back as 2023-03-02.
    let days = daysSinceEpoch(year: year, month: month, day: day)
    guard civilDate(daysSinceEpoch: days) == (year, month, day) else { return nil }
    return days * 86_400_000
  }

  /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
  private static func daysSinceEpoch(year: Int64, month: Int64, day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yearOfEra = y - era * 400
    let monthPrime = month > 2 ? month - 3 : month + 9
    let dayOfYear = (153 * monthPrime + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }

  /// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
  private static func civilDate(daysSinceEpoch: Int64) -> (Int64, Int64, Int64) {
    let z = daysSinceEpoch + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthPrime = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthPrime + 2) / 5 + 1
    let month = monthPrime < 10 ? monthPrime + 3 : monthPrime - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    return (year, month, day)
  }

  private static func pad(_ value: Int64, _ width: Int) -> String {
    let digits = String(value)
    return digits.count >= width
      ? digits : String(repeating: "0", count: width - digits.count) + digits
  }
}

/// Builds the human output of a command: key-value blocks and aligned tables.
struct Report {
  private(set) var text = ""

  /// Aligned `key  value` lines.
  mutating func fields(_ pairs: [(String, String)]) {
    text += formatColumns(pairs.map { [$0.0, $0.1] })
  }

  /// A table with a header row; `empty` is printed instead when there are no rows.
  mutating func table(_ header: [String], _ rows: [[String]], empty: String) {
    if rows.isEmpty {
      text += empty + "\n"
    } else {
      text += formatColumns([header] + rows)
    }
  }

  /// An empty line between sections.
  mutating func gap() { text += "\n" }

  /// A line of text.
  mutating func line(_ line: String) { text += TerminalText.visible(line) + "\n" }
}
