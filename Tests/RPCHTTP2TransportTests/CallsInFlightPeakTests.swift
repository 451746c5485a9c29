import Testing

@testable import RPCHTTP2Transport

/// The high-water mark of calls in flight: a burst that came and went between two readings is
/// still reported once, then the next period starts at the calls in flight now.
@Suite struct CallsInFlightPeakTests {
  @Test func aBurstBetweenTwoReadingsIsReportedOnce() {
    let counters = TransportCounters(maxBufferedRequestBytes: nil, maxCallsInFlight: 4, maxReplyBytesInFlight: nil)
    #expect(counters.takeCallsInFlightPeak() == 0)
    for _ in 0..<6 { _ = counters.admitCall() }  // 4 admitted, 2 refused
    for _ in 0..<3 { counters.callFinished() }
    #expect(counters.takeCallsInFlightPeak() == 4)
    #expect(counters.takeCallsInFlightPeak() == 1)
    counters.callFinished()
    #expect(counters.takeCallsInFlightPeak() == 1)
    #expect(counters.takeCallsInFlightPeak() == 0)
  }
}
