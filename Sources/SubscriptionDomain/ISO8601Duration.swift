import SubstatusJSON

/// An ISO-8601 duration such as `P1W`, `P1M`, `P3M`, `P1Y`, `P30D`, `P1Y2M10D` or `PT12H`, added
/// with calendar arithmetic in UTC.
///
/// Years and months move the civil date and clamp to the month's last day
/// (`2024-01-31 + P1M = 2024-02-29`, `2023-01-31 + P1M = 2023-02-28`); weeks, days and time parts
/// then add fixed lengths. No Foundation `Calendar` is involved.
///
/// ```swift
/// let month = try ISO8601Duration(parsing: "P1M")
/// let end = month.added(to: purchaseDateMs)
/// ```
public struct ISO8601Duration: Sendable, Hashable, Codable, CustomStringConvertible {
  /// Years (`nY`).
  public var years: Int
  /// Months (`nM` before `T`).
  public var months: Int
  /// Weeks (`nW`).
  public var weeks: Int
  /// Days (`nD`).
  public var days: Int
  /// Hours (`nH`).
  public var hours: Int
  /// Minutes (`nM` after `T`).
  public var minutes: Int
  /// Seconds (`nS`).
  public var seconds: Int

  /// Creates a duration from its components (all non-negative).
  public init(
    years: Int = 0, months: Int = 0, weeks: Int = 0, days: Int = 0, hours: Int = 0,
    minutes: Int = 0, seconds: Int = 0
  ) {
    self.years = years
    self.months = months
    self.weeks = weeks
    self.days = days
    self.hours = hours
    self.minutes = minutes
    self.seconds = seconds
  }

  /// Parses `P[nY][nM][nW][nD][T[nH][nM][nS]]` with non-negative integer components.
  ///
  /// - Throws: ``AppleDataError`` (`invalidValue`) when the text is not such a duration, has no
  ///   component, or a component would overflow.
  public init(parsing text: String) throws(AppleDataError) {
    guard let parsed = ISO8601Duration.parse(Array(text.utf8)) else {
      throw AppleDataError(
        code: .invalidValue, field: nil,
        message: "\(ErrorText.quoted(text)) is not an ISO-8601 duration such as P1W, P1M, P1Y or P30D")
    }
    self = parsed
  }

  private static func parse(_ bytes: [UInt8]) -> ISO8601Duration? {
    guard bytes.count >= 3, bytes[0] == UInt8(ascii: "P") else { return nil }
    var result = ISO8601Duration()
    var inTime = false
    var number: Int? = nil
    var lastRank = -1  // components must appear in order, each at most once
    for byte in bytes.dropFirst() {
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"):
        let digit = Int(byte - UInt8(ascii: "0"))
        let (times10, o1) = (number ?? 0).multipliedReportingOverflow(by: 10)
        let (value, o2) = times10.addingReportingOverflow(digit)
        guard !o1, !o2, value <= 1_000_000 else { return nil }
        number = value
      case UInt8(ascii: "T"):
        guard !inTime, number == nil else { return nil }
        inTime = true
        lastRank = 4
      default:
        guard let value = number else { return nil }
        let rank: Int
        switch (byte, inTime) {
        case (UInt8(ascii: "Y"), false): rank = 0; result.years = value
        case (UInt8(ascii: "M"), false): rank = 1; result.months = value
        case (UInt8(ascii: "W"), false): rank = 2; result.weeks = value
        case (UInt8(ascii: "D"), false): rank = 3; result.days = value
        case (UInt8(ascii: "H"), true): rank = 5; result.hours = value
        case (UInt8(ascii: "M"), true): rank = 6; result.minutes = value
        case (UInt8(ascii: "S"), true): rank = 7; result.seconds = value
        default: return nil
        }
        guard rank > lastRank else { return nil }
        lastRank = rank
        number = nil
      }
    }
    // A component is required, and a `T` must be followed by one.
    guard number == nil, lastRank >= 0, lastRank != 4 else { return nil }
    return result
  }

  /// The canonical text, e.g. `P1Y2M10D`, `P1W`, `PT12H`, or `P0D` for an empty duration.
  public var description: String {
    var text = "P"
    if years != 0 { text += "\(years)Y" }
    if months != 0 { text += "\(months)M" }
    if weeks != 0 { text += "\(weeks)W" }
    if days != 0 { text += "\(days)D" }
    if hours != 0 || minutes != 0 || seconds != 0 {
      text += "T"
      if hours != 0 { text += "\(hours)H" }
      if minutes != 0 { text += "\(minutes)M" }
      if seconds != 0 { text += "\(seconds)S" }
    }
    return text == "P" ? "P0D" : text
  }

  /// Encodes as the canonical ISO-8601 text.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    try container.encode(description)
  }

  /// Decodes from ISO-8601 text.
  public init(from decoder: any Decoder) throws {
    let container = try decoder.singleValueContainer()
    let text = try container.decode(String.self)
    do {
      self = try ISO8601Duration(parsing: text)
    } catch {
      throw DecodingError.dataCorruptedError(
        in: container, debugDescription: error.message)
    }
  }

  /// Adds this duration to an instant (milliseconds since the epoch), in UTC.
  ///
  /// Years and months are added together to the civil date, clamping the day to the target
  /// month's length; then weeks, days, hours, minutes and seconds are added as fixed lengths.
  public func added(to instant: Int64) -> Int64 {
    var time = instant
    let totalMonths = years * 12 + months
    if totalMonths != 0 {
      let dayNumber = CivilDate.floorDiv(time, CivilDate.millisecondsPerDay)
      let timeOfDay = time - dayNumber * CivilDate.millisecondsPerDay
      let civil = CivilDate(daysSinceEpoch: dayNumber)
      let shifted = civil.addingMonths(totalMonths)
      time = shifted.daysSinceEpoch * CivilDate.millisecondsPerDay + timeOfDay
    }
    let fixedDays = Int64(weeks) * 7 + Int64(days)
    let fixedSeconds = Int64(hours) * 3600 + Int64(minutes) * 60 + Int64(seconds)
    return time &+ fixedDays &* CivilDate.millisecondsPerDay &+ fixedSeconds &* 1000
  }
}

/// A proleptic Gregorian calendar date in UTC (Howard Hinnant's civil-date algorithms).
struct CivilDate: Hashable, Sendable {
  static let millisecondsPerDay: Int64 = 86_400_000

  var year: Int64
  var month: Int64  // 1...12
  var day: Int64  // 1...31

  init(year: Int64, month: Int64, day: Int64) {
    self.year = year
    self.month = month
    self.day = day
  }

  /// The date `days` days after 1970-01-01.
  init(daysSinceEpoch days: Int64) {
    let z = days + 719_468
    let era = CivilDate.floorDiv(z, 146_097)
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    day = doy - (153 * mp + 2) / 5 + 1
    month = mp < 10 ? mp + 3 : mp - 9
    year = yoe + era * 400 + (month <= 2 ? 1 : 0)
  }

  /// Days since 1970-01-01.
  var daysSinceEpoch: Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = CivilDate.floorDiv(y, 400)
    let yoe = y - era * 400
    let mp = month > 2 ? month - 3 : month + 9
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
  }

  static func isLeapYear(_ year: Int64) -> Bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
  }

  static func daysInMonth(year: Int64, month: Int64) -> Int64 {
    switch month {
    case 2: return isLeapYear(year) ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
  }

  /// This date moved by `months` calendar months, the day clamped to the month's length.
  func addingMonths(_ months: Int) -> CivilDate {
    let zeroBased = year * 12 + (month - 1) + Int64(months)
    let newYear = CivilDate.floorDiv(zeroBased, 12)
    let newMonth = zeroBased - newYear * 12 + 1
    let newDay = min(day, CivilDate.daysInMonth(year: newYear, month: newMonth))
    return CivilDate(year: newYear, month: newMonth, day: newDay)
  }

  static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
  }
}
