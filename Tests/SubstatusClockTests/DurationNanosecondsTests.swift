import SubstatusClock
import Testing

/// `Duration.nanoseconds`: whole nanoseconds, 0 below zero, saturating for what cannot be counted.
@Suite struct DurationNanosecondsTests {
  @Test(arguments: [
    (Duration.zero, UInt64(0)),
    (.nanoseconds(1), 1),
    (.milliseconds(1_500), 1_500_000_000),
    (.seconds(3_600), 3_600_000_000_000),
    (.nanoseconds(-1), 0),
    (.seconds(-5), 0),
    (.seconds(Int64.max), UInt64(Int64.max)),
    (.seconds(Int64.max / 1_000_000_000 + 1), UInt64(Int64.max)),
  ])
  func wholeNanoseconds(_ duration: Duration, _ expected: UInt64) {
    #expect(duration.nanoseconds == expected)
  }
}
