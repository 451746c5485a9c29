import Foundation

/// Time helpers in Apple's receipt forms and calendar arithmetic in UTC, without Foundation
/// formatters (deterministic, no time zone database needed).
enum AppleTime {
  static let secondMs: Int64 = 1000
  static let minuteMs: Int64 = 60 * secondMs
  static let hourMs: Int64 = 60 * minuteMs
  static let dayMs: Int64 = 24 * hourMs

  /// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
  static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let mp = (month + 9) % 12
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146097 + doe - 719468
  }

  /// The civil date of a day count since 1970-01-01.
  static func civil(days z0: Int64) -> (year: Int64, month: Int64, day: Int64) {
    let z = z0 + 719468
    let era = (z >= 0 ? z : z - 146096) / 146097
    let doe = z - era * 146097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
    let y = yoe + era * 400
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let d = doy - (153 * mp + 2) / 5 + 1
    let m = mp < 10 ? mp + 3 : mp - 9
    return (m <= 2 ? y + 1 : y, m, d)
  }

  static func daysInMonth(year: Int64, month: Int64) -> Int64 {
    days(year: month == 12 ? year + 1 : year, month: month == 12 ? 1 : month + 1, day: 1)
      - days(year: year, month: month, day: 1)
  }

  /// `ms` plus `months` calendar months in UTC, the day clamped to the target month's length.
  static func addingMonths(_ months: Int64, to ms: Int64) -> Int64 {
    let dayIndex = floorDiv(ms, dayMs)
    let timeOfDay = ms - dayIndex * dayMs
    let (y, m, d) = civil(days: dayIndex)
    let total = y * 12 + (m - 1) + months
    let ny = floorDiv(total, 12)
    let nm = total - ny * 12 + 1
    let nd = min(d, daysInMonth(year: ny, month: nm))
    return days(year: ny, month: nm, day: nd) * dayMs + timeOfDay
  }

  static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
  }

  /// `2026-01-01 00:00:00 Etc/GMT`.
  static func gmt(_ ms: Int64) -> String { format(ms) + " Etc/GMT" }

  /// `2025-12-31 16:00:00 America/Los_Angeles` (US Pacific time with its daylight-saving rules).
  static func pst(_ ms: Int64) -> String {
    format(ms + pacificOffsetMs(ms)) + " America/Los_Angeles"
  }

  /// The Pacific offset from UTC at `ms`: -7 h in daylight time (second Sunday of March 02:00
  /// local to first Sunday of November 02:00 local, rules since 2007), else -8 h.
  static func pacificOffsetMs(_ ms: Int64) -> Int64 {
    let year = civil(days: floorDiv(ms, dayMs)).year
    func nthSunday(_ n: Int64, month: Int64) -> Int64 {
      let first = days(year: year, month: month, day: 1)
      let weekday = ((first % 7) + 11) % 7  // 1970-01-01 was a Thursday; 0 = Sunday
      let firstSunday = first + (7 - weekday) % 7
      return firstSunday + 7 * (n - 1)
    }
    let dstStartUTC = nthSunday(2, month: 3) * dayMs + 2 * hourMs + 8 * hourMs
    let dstEndUTC = nthSunday(1, month: 11) * dayMs + 2 * hourMs + 7 * hourMs
    return (ms >= dstStartUTC && ms < dstEndUTC) ? -7 * hourMs : -8 * hourMs
  }

  private static func format(_ ms: Int64) -> String {
    let dayIndex = floorDiv(ms, dayMs)
    let (y, m, d) = civil(days: dayIndex)
    let seconds = (ms - dayIndex * dayMs) / 1000
    func two(_ v: Int64) -> String { v < 10 ? "0\(v)" : "\(v)" }
    let year = String(y)
    return "\(String(repeating: "0", count: max(0, 4 - year.count)))\(year)-\(two(m))-\(two(d)) "
      + "\(two(seconds / 3600)):\(two(seconds / 60 % 60)):\(two(seconds % 60))"
  }

  /// ISO-8601 date-time in UTC with milliseconds, for the control API: `2026-01-01T00:00:00.000Z`.
  static func iso(_ ms: Int64) -> String {
    let base = format(ms).replacingOccurrences(of: " ", with: "T")
    let millis = ((ms % 1000) + 1000) % 1000
    let m = String(millis)
    return base + "." + String(repeating: "0", count: 3 - m.count) + m + "Z"
  }
}

/// A subscription or offer duration in ISO-8601 form with one component: `P3D`, `P1W`, `P1M`, `P1Y`.
struct SubscriptionDuration: Sendable, Equatable, Codable, CustomStringConvertible {
  enum Unit: String, Sendable, Codable { case day = "D", week = "W", month = "M", year = "Y" }
  var count: Int64
  var unit: Unit

  init(count: Int64, unit: Unit) {
    self.count = count
    self.unit = unit
  }

  /// Parses `P<n><D|W|M|Y>`; nil for anything else.
  init?(iso text: String) {
    guard text.hasPrefix("P"), let last = text.last, let unit = Unit(rawValue: String(last)),
      let count = Int64(text.dropFirst().dropLast()), count > 0, count <= 1000
    else { return nil }
    self.init(count: count, unit: unit)
  }

  var description: String { "P\(count)\(unit.rawValue)" }

  /// The end of a period of this duration starting at `start` (calendar arithmetic in UTC).
  func end(from start: Int64) -> Int64 {
    switch unit {
    case .day: start + count * AppleTime.dayMs
    case .week: start + count * 7 * AppleTime.dayMs
    case .month: AppleTime.addingMonths(count, to: start)
    case .year: AppleTime.addingMonths(12 * count, to: start)
    }
  }

  /// The period length in the sandbox, which compresses time: 3 days → 2 min, 1 week → 3 min,
  /// 1 month → 5 min, 2 months → 10 min, 3 months → 15 min, 6 months → 30 min, 1 year → 1 h.
  var sandboxMs: Int64 {
    switch unit {
    case .day: count <= 3 ? 2 * AppleTime.minuteMs : (count + 6) / 7 * 3 * AppleTime.minuteMs
    case .week: count * 3 * AppleTime.minuteMs
    case .month: count * 5 * AppleTime.minuteMs
    case .year: count * AppleTime.hourMs
    }
  }
}
