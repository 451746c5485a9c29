import Synchronization
import Testing

@testable import SubstatusClock

/// ``FollowedClock`` against an injected reading: a followed time the test sets, and failures.
@Suite struct FollowedClockTests {
  /// The followed clock: a time the test moves, or a failure.
  final class Source: Sendable {
    let now: Mutex<Int64>
    let failing = Atomic<Bool>(false)
    let reads = Atomic<Int>(0)

    init(_ now: Int64) { self.now = Mutex(now) }

    struct Unreachable: Error {}

    var reading: FollowedClock.Reading {
      { [self] in
        reads.add(1, ordering: .relaxed)
        if failing.load(ordering: .relaxed) { throw Unreachable() }
        return now.withLock { $0 }
      }
    }

    func set(_ ms: Int64) { now.withLock { $0 = ms } }
  }

  @Test func synchronizeMovesBothReadingsToTheFollowedTime() async throws {
    let source = Source(1_000_000)
    let clock = FollowedClock(wallMs: 1_000_000, reading: source.reading)
    source.set(1_086_400)
    #expect(try await clock.synchronize() == 1_086_400)
    #expect(clock.wallMs == 1_086_400)
    #expect(clock.monotonicNow == .milliseconds(86_400))
  }

  @Test func aSleepEndsOnlyOnceTheFollowedClockPassedItsDeadline() async throws {
    let source = Source(0)
    let clock = FollowedClock(wallMs: 0, reading: source.reading)
    let sleeper = Task { try await clock.sleep(for: .seconds(30)) }
    while clock.sleeperCount == 0 { await Task.yield() }
    source.set(29_999)
    try await clock.synchronize()
    #expect(clock.sleeperCount == 1, "not yet due")
    source.set(30_000)
    try await clock.synchronize()
    try await sleeper.value
    #expect(clock.sleeperCount == 0)
  }

  @Test func aFollowedClockThatGoesBackIsNotFollowedBack() async throws {
    let source = Source(50_000)
    let clock = FollowedClock(wallMs: 50_000, reading: source.reading)
    source.set(40_000)
    #expect(try await clock.synchronize() == 50_000)
    #expect(clock.wallMs == 50_000)
    #expect(clock.monotonicNow == .zero)
  }

  @Test func aFailedReadingLeavesTheTimeAndTheNextOneMovesIt() async throws {
    let source = Source(10)
    let clock = FollowedClock(wallMs: 10, reading: source.reading)
    source.failing.store(true, ordering: .relaxed)
    source.set(20)
    await #expect(throws: Source.Unreachable.self) { try await clock.synchronize() }
    #expect(clock.wallMs == 10)
    #expect(clock.failedReadings == 1)
    source.failing.store(false, ordering: .relaxed)
    #expect(try await clock.synchronize() == 20)
  }

  @Test func startReadsOnceThenPollsEveryIntervalOfThePollClockUntilStopped() async throws {
    let source = Source(7_000)
    let polls = ManualClock()
    let clock = try await FollowedClock.start(reading: source.reading, pollInterval: .milliseconds(20), pollClock: polls)
    defer { clock.stop() }
    #expect(clock.wallMs == 7_000)
    #expect(source.reads.load(ordering: .relaxed) == 1)
    source.set(9_000)
    #expect(await polls.waitForSleepers(1))
    polls.advance(by: .milliseconds(20))
    // The poll runs on its own task: wait (bounded) until it has read the new time.
    let deadline = ContinuousClock.now + .seconds(5)
    while clock.wallMs != 9_000, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
    #expect(clock.wallMs == 9_000)
    clock.stop()
    #expect(await polls.waitForSleepers(1, timeout: .milliseconds(200)) == false, "no poll after stop()")
  }

  @Test func startFailsWhenTheFirstReadingFails() async {
    let source = Source(0)
    source.failing.store(true, ordering: .relaxed)
    await #expect(throws: Source.Unreachable.self) { _ = try await FollowedClock.start(reading: source.reading) }
  }

  /// The transition scheduler sleeps until the next transition (at most 30 s) and must act on it at
  /// most 60 s late: a sleeper wakes at the first reading at or past its deadline, so with readings
  /// every 7 s of followed time it is late by less than one step.
  @Test(arguments: [Int64(1), 7_000, 29_999])
  func aSleeperWakesWithinOneStepOfTheFollowedClock(step: Int64) async throws {
    let source = Source(0)
    let clock = FollowedClock(wallMs: 0, reading: source.reading)
    let woke = Task { () throws -> Int64 in
      try await clock.sleep(for: .seconds(30))
      return clock.wallMs
    }
    while clock.sleeperCount == 0 { await Task.yield() }
    var now: Int64 = 0
    while clock.sleeperCount > 0 {
      now += step
      source.set(now)
      try await clock.synchronize()
    }
    let at = try await woke.value
    #expect(at >= 30_000)
    #expect(at - 30_000 < step)
    #expect(at - 30_000 <= 60_000)
  }
}
