import SubscriptionStorage
import SubstatusServiceCore
import SubstatusEventDelivery

/// Appends the events of changes that happen by time alone (a period ends without renewal, a
/// grace period or billing retry ends): a loop over the store's
/// ``SubscriptionStorage/EventLogStore/appendDueTransitionEvents(atMs:limit:)``.
///
/// **When it runs a pass.** Due times are instants of the service's clock
/// (``ServiceEnvironment/clock``); the period between passes is real time
/// (``ServiceEnvironment/wireClock``). After each pass it waits for the first of:
/// - the store's next recorded transition (``SubscriptionStorage/EventLogStore/nextTransitionDueMs()``)
///   on the service's clock: in production at that instant; under `substatusd --clock-url`, once
///   the followed test clock reaches it, however the test moves that clock;
/// - ``Configuration-swift.struct/maxInterval`` (30 s) of real time, the periodic pass: a
///   transition recorded by another instance sharing the database, or after a store failure, is
///   acted on at most that late (and so within the 60 s of docs/architecture.md "Events");
///   ``Configuration-swift.struct/minInterval`` (1 s) of real time instead when a transition is
///   due already (the store keeps it: another instance holds its user), so it is not spun on;
/// - the service's ``EventSignal`` (a write here may have recorded an earlier transition).
///
/// **Catching up yields to calls.** After a restart (or a long store outage) tens of thousands of
/// users can be due at once. A pass appends them in small batches (``Configuration-swift.struct/batchSize``
/// users per store call, one short write transaction each). While calls are in flight (the
/// `callsInFlight` gauge given to ``init(service:configuration:callsInFlight:)``), it pauses between
/// batches on the wire clock for as long as its share allows (``Configuration-swift.struct/share``:
/// with the default quarter, a batch that took 4 ms is followed by a 12 ms pause), so the catch-up
/// never holds the store's writer or a CPU for long: calls keep their latency, and the catch-up
/// still finishes. With no call in flight it only yields its thread between batches: an idle
/// server catches up at full speed. Without a gauge it always pauses.
///
/// It depends on no other wake-up: the daemon's once-a-second signal for watchers also wakes it,
/// harmlessly. A followed test clock that stands still (the simulator at `--time-scale 0`) never
/// ends a sleep on it, which is why the periodic pass is on real time. The store claims each user
/// it processes, so instances never append the same transition twice, and the recorded
/// transitions survive restarts (nothing is missed).
///
/// ```swift
/// let scheduler = EventTransitionScheduler(service: service)
/// let task = Task { await scheduler.run() }
/// scheduler.beginGracefulShutdown()
/// await task.value
/// ```
public final class EventTransitionScheduler: Sendable {
  /// How the scheduler works.
  public struct Configuration: Sendable {
    /// The longest real time between passes.
    public var maxInterval: Duration
    /// The real time between passes while a transition stays due (a transition the store keeps
    /// due is not spun on).
    public var minInterval: Duration
    /// Users processed per store call (one write transaction): small, so that a batch holds the
    /// store's writer and a CPU for a few milliseconds at most.
    public var batchSize: Int
    /// The largest share of real time a pass spends in store calls while users stay due: after a
    /// batch that took `t`, the pass pauses `t × (1 − share) / share` (at least ``minPause``)
    /// before the next one. 1 never pauses but for ``minPause``.
    public var share: Double
    /// The shortest pause between two batches of a pass.
    public var minPause: Duration
    /// The most users a pass processes (then the next pass starts after ``minInterval``).
    public var maxUsersPerPass: Int

    /// Creates a configuration.
    public init(
      maxInterval: Duration = .seconds(30), minInterval: Duration = .seconds(1), batchSize: Int = 32,
      share: Double = 0.25, minPause: Duration = .milliseconds(1), maxUsersPerPass: Int = 50_000
    ) {
      self.maxInterval = max(maxInterval, minInterval)
      self.minInterval = minInterval
      self.batchSize = min(max(1, batchSize), 1000)
      self.share = share.isFinite ? min(max(share, 0.01), 1) : 0.25
      self.minPause = max(minPause, .zero)
      self.maxUsersPerPass = max(maxUsersPerPass, self.batchSize)
    }

    /// The pause after a batch that took `took`.
    func pause(after took: Duration) -> Duration {
      max(minPause, took * ((1 - share) / share))
    }
  }

  /// The service whose store and signal are used.
  let service: any IngestPath
  /// The settings.
  public let configuration: Configuration
  /// The periodic pass, on real time (the environment's wire clock).
  private let passTimer: PeriodicJobTimer
  /// The next due transition, on the service's clock.
  private let dueTimer: PeriodicJobTimer
  /// The pauses between a pass's batches, on real time (the environment's wire clock).
  private let pauseTimer: PeriodicJobTimer
  /// The calls in flight now (the scheduler's own work is none of them); `nil`: unknown.
  private let callsInFlight: (@Sendable () -> Int)?

  /// Creates a scheduler; it does nothing until ``run()`` or ``appendDue()``. `callsInFlight`
  /// tells how many calls wait for the CPU and the store now (the daemon's: gRPC calls in flight
  /// but open `WatchEvents` streams); while it is 0 a catch-up does not pause between batches.
  /// `nil` (unknown): it always pauses.
  package init(
    service: any IngestPath, configuration: Configuration = Configuration(),
    callsInFlight: (@Sendable () -> Int)? = nil
  ) {
    self.service = service
    self.configuration = configuration
    self.callsInFlight = callsInFlight
    self.passTimer = PeriodicJobTimer(clock: service.environment.wireClock)
    self.dueTimer = PeriodicJobTimer(clock: service.environment.clock)
    self.pauseTimer = PeriodicJobTimer(clock: service.environment.wireClock)
  }

  /// Appends due transitions until ``beginGracefulShutdown()`` or cancellation.
  public func run() async {
    while !passTimer.isStopping, !Task.isCancelled {
      let seen = service.eventSignal.generation
      let next = await appendDue()
      await wait(untilDue: next, unlessSignalledAfter: seen)
    }
  }

  /// Waits until the service's clock reaches `next` (when it is later than now), the periodic
  /// pass's real time has passed, or the service's ``EventSignal`` moves past `seen`; or until
  /// ``beginGracefulShutdown()`` or cancellation.
  private func wait(untilDue next: Int64?, unlessSignalledAfter seen: UInt64) async {
    let now = service.environment.now()
    let pass = next.map { $0 <= now } == true ? configuration.minInterval : configuration.maxInterval
    await withTaskGroup(of: Void.self) { group in
      group.addTask { await self.passTimer.wait(pass) }
      if let next, next > now {
        group.addTask { await self.dueTimer.wait(.milliseconds(next - now)) }
      }
      group.addTask { await self.service.eventSignal.wait(after: seen) }
      await group.next()
      group.cancelAll()
    }
  }

  /// Stops ``run()`` after the pass in progress.
  public func beginGracefulShutdown() {
    passTimer.stop()
    dueTimer.stop()
    pauseTimer.stop()
  }

  /// One pass: appends every transition due now (in batches, pausing between them for the
  /// configuration's ``Configuration-swift.struct/share`` while calls are in flight), wakes
  /// watchers and the dispatcher.
  /// - Returns: the next recorded transition after the pass, `nil` when none (or the store failed:
  ///   the next pass tries again; failures are logged).
  @discardableResult
  public func appendDue() async -> Int64? {
    let store = service.store
    let wire = service.environment.wireClock
    do {
      // Batches while users stay due (bounded: a store that keeps one due is retried next pass).
      for _ in 0..<(configuration.maxUsersPerPass / configuration.batchSize) {
        let started = wire.monotonicNow
        let appended = try await store.appendDueTransitionEvents(
          atMs: service.environment.now(), limit: configuration.batchSize)
        let took = wire.monotonicNow - started
        if !appended.isEmpty { service.eventsAppended(appended.count, source: "transition") }
        guard let next = try await store.nextTransitionDueMs(), next <= service.environment.now(), !appended.isEmpty,
          !pauseTimer.isStopping
        else { break }
        if let callsInFlight, callsInFlight() == 0 {
          // Nothing waits: the next batch at once, after letting other tasks run.
          await Task.yield()
          continue
        }
        // Yield: calls (and other writes) have the CPU and the store's writer until the next batch.
        await pauseTimer.wait(configuration.pause(after: took))
      }
      return try await store.nextTransitionDueMs()
    } catch {
      service.log.info("transition scheduler: the store failed; retrying at the next pass", [("error", .string(error.message))])
      return nil
    }
  }
}
