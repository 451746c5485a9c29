import SubstatusClock
import Testing

@Suite struct ManualClockTests {
  @Test func advanceMovesBothReadings() {
    let clock = ManualClock(wallMs: 1_000)
    clock.advance(by: .milliseconds(1_500))
    #expect(clock.monotonicNow == .milliseconds(1_500))
    #expect(clock.wallMs == 2_500)
  }

  @Test func sleeperResumesOnlyWhenDue() async throws {
    let clock = ManualClock()
    let task = Task { try await clock.sleep(for: .seconds(10)) }
    while clock.sleeperCount == 0 { await Task.yield() }
    clock.advance(by: .seconds(9))
    #expect(clock.sleeperCount == 1)
    clock.advance(by: .seconds(1))
    try await task.value
    #expect(clock.sleeperCount == 0)
  }

  @Test func cancellationEndsASleep() async {
    let clock = ManualClock()
    let task = Task { try await clock.sleep(for: .seconds(10)) }
    while clock.sleeperCount == 0 { await Task.yield() }
    task.cancel()
    await #expect(throws: CancellationError.self) { try await task.value }
    #expect(clock.sleeperCount == 0)
  }

  @Test func waitForSleepersReturnsOnceThatManySleep() async throws {
    let clock = ManualClock()
    let first = Task { try await clock.sleep(for: .seconds(1)) }
    #expect(await clock.waitForSleepers(1))
    let second = Task { try await clock.sleep(for: .seconds(2)) }
    #expect(await clock.waitForSleepers(2))
    #expect(clock.sleeperCount == 2)
    clock.advance(by: .seconds(2))
    try await first.value
    try await second.value
  }

  @Test func waitForSleepersGivesUpAtItsTimeout() async {
    let clock = ManualClock()
    #expect(await clock.waitForSleepers(1, timeout: .milliseconds(10)) == false)
    // A later sleeper does not trip over the abandoned wait.
    let task = Task { try await clock.sleep(for: .seconds(1)) }
    #expect(await clock.waitForSleepers(1))
    task.cancel()
  }

  @Test func systemClockIsMonotonic() {
    let clock = SystemClock()
    let a = clock.monotonicNow
    let b = clock.monotonicNow
    #expect(b >= a)
    #expect(clock.wallMs > 1_700_000_000_000)
  }
}
