import Testing

@testable import SubscriptionDomain

/// Milliseconds at a UTC civil date and time, computed independently of the code under test.
func utc(_ year: Int, _ month: Int, _ day: Int, _ hour: Int = 0, _ minute: Int = 0) -> Int64 {
  // Days from 1970-01-01 by counting whole years and months (slow, obviously right).
  func leap(_ y: Int) -> Bool { y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) }
  var days = 0
  if year >= 1970 {
    for y in 1970..<year { days += leap(y) ? 366 : 365 }
  } else {
    for y in year..<1970 { days -= leap(y) ? 366 : 365 }
  }
  let lengths = [31, leap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
  for m in 0..<(month - 1) { days += lengths[m] }
  days += day - 1
  return (Int64(days) * 86_400 + Int64(hour) * 3600 + Int64(minute) * 60) * 1000
}

@Suite("ISO-8601 durations")
struct ISO8601DurationTests {
  @Test(
    "parses Apple's and combined forms",
    arguments: [
      ("P1W", ISO8601Duration(weeks: 1)),
      ("P1M", ISO8601Duration(months: 1)),
      ("P3M", ISO8601Duration(months: 3)),
      ("P6M", ISO8601Duration(months: 6)),
      ("P1Y", ISO8601Duration(years: 1)),
      ("P30D", ISO8601Duration(days: 30)),
      ("P1Y2M10D", ISO8601Duration(years: 1, months: 2, days: 10)),
      ("P2W3D", ISO8601Duration(weeks: 2, days: 3)),
      ("PT3M", ISO8601Duration(minutes: 3)),
      ("P1DT12H30M5S", ISO8601Duration(days: 1, hours: 12, minutes: 30, seconds: 5)),
    ])
  func parses(text: String, expected: ISO8601Duration) throws {
    let parsed = try ISO8601Duration(parsing: text)
    #expect(parsed == expected)
    #expect(try ISO8601Duration(parsing: parsed.description) == expected)
  }

  @Test(
    "rejects malformed text",
    arguments: ["", "P", "1M", "PM", "P1", "P1M1Y", "P1MT", "PT", "P-1M", "P1.5M", "P1X", "P1M1M",
      "p1m", "P99999999999999999999D"])
  func rejects(text: String) {
    #expect(throws: AppleDataError.self) { try ISO8601Duration(parsing: text) }
  }

  @Test(
    "adds with calendar arithmetic in UTC and month-end clamping",
    arguments: [
      ("P1M", utc(2024, 1, 31, 10, 5), utc(2024, 2, 29, 10, 5)),
      ("P1M", utc(2023, 1, 31), utc(2023, 2, 28)),
      ("P1M", utc(2023, 12, 15), utc(2024, 1, 15)),
      ("P3M", utc(2023, 11, 30), utc(2024, 2, 29)),
      ("P1Y", utc(2024, 2, 29), utc(2025, 2, 28)),
      ("P1Y", utc(2023, 3, 1), utc(2024, 3, 1)),
      ("P1W", utc(2023, 12, 28), utc(2024, 1, 4)),
      ("P30D", utc(2024, 2, 1), utc(2024, 3, 2)),
      ("P1Y2M10D", utc(2023, 12, 31), utc(2025, 2, 28) + 10 * 86_400_000),
      ("P6M", utc(1969, 8, 31, 23, 59), utc(1970, 2, 28, 23, 59)),
      ("PT3M", utc(2024, 1, 1), utc(2024, 1, 1, 0, 3)),
      ("P1M", utc(2100, 1, 31), utc(2100, 2, 28)),
      ("P1M", utc(2000, 1, 31), utc(2000, 2, 29)),
    ])
  func adds(text: String, start: Int64, expected: Int64) throws {
    #expect(try ISO8601Duration(parsing: text).added(to: start) == expected)
  }

  @Test("civil dates round-trip over four centuries of days")
  func civilRoundTrip() {
    var day: Int64 = -146_097
    while day <= 146_097 {
      let civil = CivilDate(daysSinceEpoch: day)
      #expect(civil.daysSinceEpoch == day)
      #expect(civil.month >= 1 && civil.month <= 12 && civil.day >= 1)
      #expect(civil.day <= CivilDate.daysInMonth(year: civil.year, month: civil.month))
      day += 97
    }
    #expect(CivilDate(daysSinceEpoch: 0) == CivilDate(year: 1970, month: 1, day: 1))
    #expect(CivilDate(year: 2024, month: 2, day: 29).daysSinceEpoch * 86_400_000 == utc(2024, 2, 29))
  }
}

/// A bad value in an error message is quoted by its first 64 bytes and its length (issue 30).
@Test func aHugeBadDurationIsQuotedByItsPrefix() {
  let text = "P" + String(repeating: "9", count: 100_000) + "X"
  do {
    _ = try ISO8601Duration(parsing: text)
    Issue.record("parsed")
  } catch {
    #expect(error.message.utf8.count < 200, "\(error.message.prefix(300))")
    #expect(error.message.contains("(100002 bytes)"))
  }
}
