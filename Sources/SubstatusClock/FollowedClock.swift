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
/// ```swift
/// let clock = try await FollowedClock.start(reading: { try await simulatorNowMs() })
/// defer { clock.stop() }
/// try await clock.sleep(for: .seconds(30))  // returns once the simulator's clock moved 30 s
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
  private let poller = Mutex<Task<Void, Never>?>(nil)
  private let failures = Atomic<Int>(0)

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
      while !Task.isCancelled {
        do { try await pollClock.sleep(for: pollInterval) } catch { return }
        guard let clock else { return }
        _ = try? await clock.synchronize()
      }
    }
    clock.poller.withLock { $0 = task }
    return clock
  }

  /// Stops the polling: the readings stay where they are (sleepers wait for a ``synchronize()``).
  public func stop() {
    poller.withLock { task in
      task?.cancel()
      task = nil
    }
  }

  deinit { poller.withLock { $0?.cancel() } }

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
