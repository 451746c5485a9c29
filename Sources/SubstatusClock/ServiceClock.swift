import Foundation
import Synchronization

/// The time every timer, deadline, retry, schedule and log line reads: injected, so tests replace it
/// with a ``ManualClock`` and never wait on the wall clock.
///
/// Two readings: ``monotonicNow`` for durations and deadlines (never goes back), and ``wallMs`` for
/// instants that mean something outside the process (Apple's milliseconds since 1970, logs).
public protocol ServiceClock: Sendable {
  /// Monotonic time since an arbitrary origin; never decreases.
  var monotonicNow: Duration { get }
  /// Wall time, milliseconds since 1970-01-01T00:00:00Z.
  var wallMs: Int64 { get }
  /// Suspends the calling task for `duration` of this clock's time.
  ///
  /// - Throws: `CancellationError` when the task is cancelled first.
  func sleep(for duration: Duration) async throws
  /// Runs `work` once `delay` of this clock's time has passed, unless the returned work is
  /// cancelled first. Cancelling frees what the work holds at once (a deadline cancelled when its
  /// call ends must not keep the call alive until the deadline would have passed).
  func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork
}

/// Work waiting on a clock (``ServiceClock/schedule(after:_:)``).
public protocol ScheduledWork: Sendable {
  /// Stops the work from running, if it has not run yet, and lets go of it.
  func cancel()
}

extension ServiceClock {
  /// A task that sleeps on this clock, then runs `work` (clocks whose sleeps end when cancelled,
  /// such as ``ManualClock``).
  public func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
    SleepingWork(task: Task {
      try await self.sleep(for: delay)
      work()
    })
  }
}

/// ``ServiceClock/schedule(after:_:)`` as a task sleeping on the clock.
private struct SleepingWork: ScheduledWork {
  let task: Task<Void, any Error>
  func cancel() { task.cancel() }
}

/// ``SystemClock/schedule(after:_:)`` as a Dispatch timer: cancelling it releases the work at
/// once. (A cancelled `Task.sleep` ends its task, but the runtime's timer keeps its allocation until
/// the original deadline: a million calls with an hour's deadline each would pin it all.)
private final class DispatchTimerWork: ScheduledWork, @unchecked Sendable {
  // A DispatchSourceTimer is thread-safe; it is only activated, cancelled and released here.
  private let timer: any DispatchSourceTimer

  init(after delay: Duration, _ work: @escaping @Sendable () -> Void) {
    timer = DispatchSource.makeTimerSource(queue: .global())
    let nanoseconds = Int(min(delay.nanoseconds, UInt64(Int.max / 2)))
    timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), leeway: .milliseconds(1))
    let timer = self.timer
    timer.setEventHandler {
      work()
      timer.cancel()  // one shot: releases the handler and what it holds
    }
    timer.activate()
  }

  func cancel() { timer.cancel() }
}

/// The process's real clocks: `ContinuousClock` (monotonic) and the system's wall clock.
public struct SystemClock: ServiceClock {
  private static let origin = ContinuousClock.now

  /// Creates the system clock.
  public init() {}

  /// Time since the first use of any `SystemClock` in the process.
  public var monotonicNow: Duration {
    let origin = Self.origin  // set before the reading below, so the first reading is never negative
    return ContinuousClock.now - origin
  }

  /// The system's wall clock, rounded to the millisecond.
  public var wallMs: Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }

  /// `Task.sleep(for:)`.
  public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }

  /// A Dispatch timer, released at once when cancelled.
  public func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
    DispatchTimerWork(after: delay, work)
  }
}

/// A clock that moves only when a test says so: ``advance(by:)`` moves both readings and resumes
/// every sleeper whose time has come, in deadline order.
public final class ManualClock: ServiceClock {
  private struct Sleeper {
    var id: UInt64
    var deadline: Duration
    var continuation: CheckedContinuation<Void, any Error>
  }

  private struct SleeperWaiter {
    var id: UInt64
    var count: Int
    var continuation: CheckedContinuation<Bool, Never>
  }

  private struct State {
    var monotonic: Duration = .zero
    var wallMs: Int64
    var nextID: UInt64 = 0
    var sleepers: [Sleeper] = []
    /// Sleeps cancelled, and waits timed out, before they registered.
    var cancelled: Set<UInt64> = []
    var waiters: [SleeperWaiter] = []

    /// Removes and returns the waiters whose count of sleepers is reached.
    mutating func satisfiedWaiters() -> [SleeperWaiter] {
      let count = sleepers.count
      let satisfied = waiters.filter { $0.count <= count }
      waiters.removeAll { $0.count <= count }
      return satisfied
    }
  }

  private let state: Mutex<State>

  /// Creates a clock at monotonic zero and at `wallMs` on the wall.
  public init(wallMs: Int64 = 1_700_000_000_000) {
    state = Mutex(State(wallMs: wallMs))
  }

  /// The monotonic reading: the sum of every ``advance(by:)``.
  public var monotonicNow: Duration { state.withLock { $0.monotonic } }

  /// The wall reading: the initial value plus every ``advance(by:)``, in milliseconds.
  public var wallMs: Int64 { state.withLock { $0.wallMs } }

  /// How many tasks are suspended in ``sleep(for:)`` now (tests wait for a sleeper to arrive
  /// before advancing).
  public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

  /// Suspends until the clock has been advanced past now + `duration`; returns at once for a
  /// duration of zero or less.
  public func sleep(for duration: Duration) async throws {
    let id = state.withLock { s -> UInt64 in
      s.nextID += 1
      return s.nextID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        let (resumeNow, satisfied) = state.withLock { s -> ((any Error)??, [SleeperWaiter]) in
          if s.cancelled.remove(id) != nil { return (.some(CancellationError()), []) }
          if duration <= .zero { return (.some(nil), []) }
          s.sleepers.append(Sleeper(id: id, deadline: s.monotonic + duration, continuation: continuation))
          return (nil, s.satisfiedWaiters())
        }
        for waiter in satisfied { waiter.continuation.resume(returning: true) }
        switch resumeNow {
        case .some(.some(let error)): continuation.resume(throwing: error)
        case .some(.none): continuation.resume()
        case .none: break
        }
      }
    } onCancel: {
      let sleeper = state.withLock { s -> Sleeper? in
        guard let index = s.sleepers.firstIndex(where: { $0.id == id }) else {
          s.cancelled.insert(id)
          return nil
        }
        return s.sleepers.remove(at: index)
      }
      sleeper?.continuation.resume(throwing: CancellationError())
    }
  }

  /// Moves both readings forward by `duration` and resumes the sleepers that are due.
  public func advance(by duration: Duration) {
    let due = state.withLock { s -> [Sleeper] in
      s.monotonic += duration
      let (seconds, attoseconds) = duration.components
      s.wallMs += seconds * 1000 + attoseconds / 1_000_000_000_000_000
      let due = s.sleepers.filter { $0.deadline <= s.monotonic }.sorted { $0.deadline < $1.deadline }
      s.sleepers.removeAll { $0.deadline <= s.monotonic }
      return due
    }
    for sleeper in due { sleeper.continuation.resume() }
  }

  /// Suspends until at least `count` tasks are suspended in ``sleep(for:)``: a test calls it before
  /// ``advance(by:)`` to know that the code under test has reached its wait (a periodic job has
  /// finished its run, a retry loop is in its backoff).
  ///
  /// ```swift
  /// let task = Task { await refresher.run() }
  /// await clock.waitForSleepers(1)  // the first run is done; the refresher waits its interval
  /// clock.advance(by: .seconds(60))
  /// ```
  ///
  /// - Parameters:
  ///   - count: How many sleepers to wait for.
  ///   - timeout: A bound in real time, so that a test whose code never sleeps fails instead of
  ///     hanging.
  /// - Returns: `false` when `timeout` passed, or the task was cancelled, first.
  @discardableResult
  public func waitForSleepers(_ count: Int = 1, timeout: Duration = .seconds(10)) async -> Bool {
    let id = state.withLock { s -> UInt64 in
      s.nextID += 1
      return s.nextID
    }
    let bound = Task {
      try await Task.sleep(for: timeout)
      self.giveUp(waiter: id)
    }
    defer { bound.cancel() }
    return await withTaskCancellationHandler {
      await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        let reached = state.withLock { s -> Bool? in
          if s.sleepers.count >= count { return true }
          if s.cancelled.remove(id) != nil { return false }
          s.waiters.append(SleeperWaiter(id: id, count: count, continuation: continuation))
          return nil
        }
        if let reached { continuation.resume(returning: reached) }
      }
    } onCancel: {
      giveUp(waiter: id)
    }
  }

  /// Ends a ``waitForSleepers(_:timeout:)`` with `false`, now or as it registers.
  private func giveUp(waiter id: UInt64) {
    let waiter = state.withLock { s -> SleeperWaiter? in
      guard let index = s.waiters.firstIndex(where: { $0.id == id }) else {
        s.cancelled.insert(id)
        return nil
      }
      return s.waiters.remove(at: index)
    }
    waiter?.continuation.resume(returning: false)
  }
}

extension Duration {
  /// The duration in whole nanoseconds: 0 for a negative one (a duration just below zero can come
  /// as 0 s and negative attoseconds), `Int64.max` for one too long to count (about 292 years).
  public var nanoseconds: UInt64 {
    let (seconds, attoseconds) = components
    if seconds < 0 || attoseconds < 0 { return 0 }
    let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
    return overflow || whole > UInt64(Int64.max) ? UInt64(Int64.max) : whole + UInt64(attoseconds / 1_000_000_000)
  }
}
