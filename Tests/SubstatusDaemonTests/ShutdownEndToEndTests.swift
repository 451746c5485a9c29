import Foundation
import Testing

/// substatusd's exit on SIGTERM at random points while it follows a test clock over HTTP: it
/// drains, logs "stopped" and exits 0 within seconds, every time.
@Suite(.serialized) struct ShutdownEndToEndTests {
  /// Under `--clock-url` the followed clock reads a real `appstore-sim` every 20 ms over
  /// `URLSession`. A clean-clone CI run once hung here forever after "stopped": the shutdown
  /// cancelled the poller inside `URLSession.data(for:)`, which can deadlock in
  /// swift-corelibs-foundation 6.3 (its issue #5412). Starts and stops substatusd again and again,
  /// SIGTERM at a random point of the poll cycle; each run must exit 0 within 5 s of SIGTERM.
  @Test func exitsPromptlyWithStatusZeroWhileFollowingASimulatorClock() async throws {
    let sim = try await RunningSimulator()
    defer { sim.stop() }
    let arguments = [
      "--clock-url", "http://\(sim.address)/control/clock", "--refresh-interval", "0", "--reconcile-interval", "0",
    ]
    for round in 0..<20 {
      let daemon = try await RunningDaemon(extraArguments: arguments)
      // A random point of the 20 ms poll cycle, a few cycles in (a point in time is what is
      // tested here, not a condition to wait for).
      try await Task.sleep(for: .milliseconds(Int.random(in: 20...120)))
      let started = ContinuousClock.now
      let (status, log) = await daemon.stop(killingAfter: 5)
      let seconds = ContinuousClock.now - started
      #expect(status == 0, "round \(round): substatusd exited \(status) \(seconds) s after SIGTERM:\n\(log.suffix(1500))")
      #expect(log.contains("following a test clock"), "round \(round)")
      #expect(log.contains(#""msg":"stopped""#), "round \(round):\n\(log.suffix(1500))")
      guard status == 0 else { break }
    }
  }
}
