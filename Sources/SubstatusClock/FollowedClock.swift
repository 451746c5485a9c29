import Synchronization

/// A clock that follows another process's clock, for end-to-end tests only: substatusd started with
/// `--clock-url` follows the App Store simulator's clock (`GET /control/clock`), so that what
/// happens by time alone (a period ends, a webhook retry is due, a claim's lease ends) happens
/// when the test moves the simulated time, not the wall clock.
///
/// The readings are those of the followed clock at the last ``synchronize()``: a poll every
/// ``pollInterval`` of real time (``start(reading:pollInterval:pollClock:)``) moves both readings
/// forward to it and resumes every ``sleep(for:)`` whose time has come, within one poll interval
/// of real time after the followed clock passed it. A followed clock that goes back is not
/// followed back (``monotonicNow`` never decreases); a reading that fails leaves the time as it
/// was, and the next poll tries again.
///
/// ``stop()`` never cancels a reading in flight: the reading ends by its own time limit (the
/// daemon's is a 2 s HTTP request) and the poller then ends; see ``stop(waitingAtMost:)``.
///
/// ```swift
/// let clock = try await FollowedClock.start(reading: { try await simulatorNowMs() })
/// try await clock.sleep(for: .seconds(30))  // returns once the simulator's clock moved 30 s
/// _ = await clock.stop(waitingAtMost: .seconds(3))
/// ```
public final class FollowedClock: ServiceClock {
  /// Reads the followed clock: milliseconds since 1970-01-01T00:00:00Z.
  public typealias Reading = @Sendable () async throws -> Int64

  /// The real time between two readings of the followed clock.
  public let pollInterval: Duration
  private let read: Reading
  /// Holds the followed readings and the sleepers; moved only by ``synchronize()``.
  private let followed: ManualClock
  /// Serializes the moves, so that two readings racing cannot both add the same difference.
  private let mover = Mutex<Void>(())
  private let polling = Mutex(Polling())
  private let failures = Atomic<Int>(0)

  /// The poller of ``start(reading:pollInterval:pollClock:)``: cancelled only while it waits
  /// between readings, never while a reading is in flight.
  private struct Polling {
    var task: Task<Void, Never>?
    /// The real clock the poller waits on.
    var clock: (any ServiceClock)?
    var stopping = false
    var reading = false
  }

  /// Creates a clock at `wallMs` that moves only through ``synchronize()`` (tests drive it so;
  /// ``start(reading:pollInterval:pollClock:)`` also polls).
  public init(wallMs: Int64, pollInterval: Duration = .milliseconds(20), reading read: @escaping Reading) {
    self.pollInterval = pollInterval
    self.read = read
    self.followed = ManualClock(wallMs: wallMs)
  }

  /// Reads the followed clock once (an error here is the caller's: nothing to follow), then
  /// follows it, reading it every `pollInterval` of `pollClock` (real time) until ``stop()``.
  /// - Throws: what `read` threw at the first reading.
  public static func start(
    reading read: @escaping Reading, pollInterval: Duration = .milliseconds(20),
    pollClock: any ServiceClock = SystemClock()
  ) async throws -> FollowedClock {
    let clock = FollowedClock(wallMs: try await read(), pollInterval: pollInterval, reading: read)
    let task = Task { [weak clock] in
      while true {
        do { try await pollClock.sleep(for: pollInterval) } catch { return }
        guard let clock, clock.beginReading() else { return }
        _ = try? await clock.synchronize()
        guard clock.endReading() else { return }
      }
    }
    clock.polling.withLock {
      $0.task = task
      $0.clock = pollClock
    }
    return clock
  }

  /// Stops the polling: the readings stay where they are (sleepers wait for a ``synchronize()``).
  /// A poller waiting between readings is cancelled; a reading in flight is not: it ends by its
  /// own time limit, and no reading follows it. (A clock released without ``stop()`` stops too:
  /// the poller holds it weakly and ends at its next wake.)
  public func stop() {
    let waiting = polling.withLock { p -> Task<Void, Never>? in
      p.stopping = true
      return p.reading ? nil : p.task
    }
    // Outside the lock: a cancellation runs the sleep's cancellation handler.
    waiting?.cancel()
  }

  /// Stops the polling (``stop()``) and waits until the poller has ended, at most `limit` of the
  /// poll clock: a reading in flight ends by its own time limit, so a limit above it is met
  /// unless the reading hangs past its own limit.
  /// - Returns: whether the poller has ended (`true` too for a clock that never polled).
  public func stop(waitingAtMost limit: Duration) async -> Bool {
    stop()
    let (task, clock) = polling.withLock { ($0.task, $0.clock) }
    guard let task, let clock else { return true }
    return await clock.waitForEnd(of: task, within: limit)
  }

  /// The poller is about to read: `false` once ``stop()`` was called (no reading then).
  private func beginReading() -> Bool {
    polling.withLock { p in
      p.reading = !p.stopping
      return p.reading
    }
  }

  /// The poller's reading ended: `false` once ``stop()`` was called (the poller ends then).
  private func endReading() -> Bool {
    polling.withLock { p in
      p.reading = false
      return !p.stopping
    }
  }

  /// Milliseconds of the followed clock since this clock was created; never decreases.
  public var monotonicNow: Duration { followed.monotonicNow }

  /// The followed clock at the last ``synchronize()``, never less than an earlier reading.
  public var wallMs: Int64 { followed.wallMs }

  /// How many readings of the followed clock failed so far.
  public var failedReadings: Int { failures.load(ordering: .relaxed) }

  /// How many tasks wait in ``sleep(for:)``.
  public var sleeperCount: Int { followed.sleeperCount }

  /// Suspends until the followed clock has moved `duration` past the current reading.
  /// - Throws: `CancellationError` when the task is cancelled first.
  public func sleep(for duration: Duration) async throws { try await followed.sleep(for: duration) }

  /// Reads the followed clock and moves this one forward to it, resuming the sleepers that are due.
  /// - Returns: the reading after the move (the earlier one when the followed clock went back).
  /// - Throws: what the reading threw; the clock does not move then.
  @discardableResult
  public func synchronize() async throws -> Int64 {
    let now: Int64
    do { now = try await read() } catch {
      failures.add(1, ordering: .relaxed)
      throw error
    }
    return moveForward(to: now)
  }

  /// Moves the readings to `now` unless they are already there or later; resumes due sleepers.
  private func moveForward(to now: Int64) -> Int64 {
    mover.withLock { _ in
      let current = followed.wallMs
      if now > current { followed.advance(by: .milliseconds(now - current)) }
      return followed.wallMs
    }
  }
}
