import SubstatusProcessTestKit
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
    #expect(await waitUntil(timeout: .seconds(5), every: .milliseconds(1)) { clock.wallMs == 9_000 })
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

  /// A reading the test holds until it opens the gate.
  final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    /// Whether a reading waits at the gate.
    var isWaitedOn: Bool { state.withLock { $0.waiter != nil } }

    func wait() async {
      await withCheckedContinuation { continuation in
        let open = state.withLock { s -> Bool in
          if !s.open { s.waiter = continuation }
          return s.open
        }
        if open { continuation.resume() }
      }
    }

    func open() {
      state.withLock { s -> CheckedContinuation<Void, Never>? in
        s.open = true
        return s.waiter.take()
      }?.resume()
    }
  }

  /// A followed clock at 5,000 whose second reading (the first poll) waits at ``gate``; counts the
  /// readings and records whether a reading's task was cancelled.
  final class HeldSource: Sendable {
    let gate = Gate()
    let reads = Atomic<Int>(0)
    let cancelled = Atomic<Bool>(false)

    var reading: FollowedClock.Reading {
      { [self] in
        if reads.add(1, ordering: .relaxed).newValue >= 2 {
          await gate.wait()
          if Task.isCancelled { cancelled.store(true, ordering: .relaxed) }
        }
        return 5_000
      }
    }

    /// Starts a clock on it polled by `polls`, and returns once the first poll waits at the gate.
    func startHeldAtTheFirstPoll(polls: ManualClock) async throws -> FollowedClock {
      let clock = try await FollowedClock.start(reading: reading, pollClock: polls)
      #expect(await polls.waitForSleepers(1))
      polls.advance(by: .milliseconds(20))
      #expect(
        await waitUntil(timeout: .seconds(5), every: .milliseconds(1)) { gate.isWaitedOn }, "the first poll is reading")
      return clock
    }
  }

  /// The daemon's reading is a `URLSession` request, and cancelling a task inside
  /// swift-corelibs-foundation 6.3's `URLSession.data(for:)` can deadlock: stop() lets a reading
  /// in flight end by itself, then the poller ends without another reading.
  @Test func stopNeverCancelsAReadingInFlightAndNoReadingFollowsIt() async throws {
    let (source, polls) = (HeldSource(), ManualClock())
    let clock = try await source.startHeldAtTheFirstPoll(polls: polls)
    let stopping = Task { await clock.stop(waitingAtMost: .seconds(3)) }
    // The bounded wait runs on the poll clock: once it waits, let the reading answer.
    #expect(await polls.waitForSleepers(1))
    source.gate.open()
    #expect(await stopping.value, "the poller ended within the limit")
    #expect(source.cancelled.load(ordering: .relaxed) == false, "the reading in flight was not cancelled")
    #expect(source.reads.load(ordering: .relaxed) == 2, "no reading after stop()")
    #expect(clock.wallMs == 5_000)
  }

  /// A reading that hangs past its own limit does not hold the caller of stop(waitingAtMost:).
  @Test func stopWaitingAtMostGivesUpOnAReadingThatNeverEnds() async throws {
    let (source, polls) = (HeldSource(), ManualClock())
    let clock = try await source.startHeldAtTheFirstPoll(polls: polls)
    let stopping = Task { await clock.stop(waitingAtMost: .seconds(3)) }
    #expect(await polls.waitForSleepers(1))
    polls.advance(by: .seconds(3))
    #expect(await stopping.value == false)
    // Let it go: the poller then ends without another reading, never cancelled.
    source.gate.open()
    #expect(await clock.stop(waitingAtMost: .seconds(3)))
    #expect(source.cancelled.load(ordering: .relaxed) == false)
    #expect(source.reads.load(ordering: .relaxed) == 2)
  }

  @Test func stopWaitingAtMostOnAClockThatNeverPolledReturnsAtOnce() async {
    let clock = FollowedClock(wallMs: 1, reading: { 1 })
    #expect(await clock.stop(waitingAtMost: .seconds(1)))
  }
}
