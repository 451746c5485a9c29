import SubscriptionStorage

/// Appends the events of changes that happen by time alone (a period ends without renewal, a
/// grace period or billing retry ends): a loop over the store's
/// ``SubscriptionStorage/EventLogStore/appendDueTransitionEvents(atMs:limit:)``.
///
/// It sleeps until the store's next recorded transition (``SubscriptionStorage/EventLogStore/nextTransitionDueMs()``),
/// at least ``Configuration-swift.struct/minInterval`` (1 s) and at most
/// ``Configuration-swift.struct/maxInterval`` (30 s), and wakes early when the service's
/// ``EventSignal`` fires (a write here may have recorded an earlier transition): a transition
/// recorded on another instance sharing the database is acted on at most 30 s late. Sleeps are on
/// the service's injected clock. The store claims each user it processes, so
/// instances never append the same transition twice, and the recorded transitions survive
/// restarts (nothing is missed).
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
    /// The longest sleep between passes.
    public var maxInterval: Duration
    /// The shortest sleep between passes (a transition the store keeps due is not spun on).
    public var minInterval: Duration
    /// Users processed per store call.
    public var batchSize: Int

    /// Creates a configuration.
    public init(maxInterval: Duration = .seconds(30), minInterval: Duration = .seconds(1), batchSize: Int = 500) {
      self.maxInterval = max(maxInterval, minInterval)
      self.minInterval = minInterval
      self.batchSize = min(max(1, batchSize), 1000)
    }
  }

  /// The service whose store and signal are used.
  public let service: SubstatusService
  /// The settings.
  public let configuration: Configuration
  private let timer: PeriodicJobTimer

  /// Creates a scheduler; it does nothing until ``run()`` or ``appendDue()``.
  public init(service: SubstatusService, configuration: Configuration = Configuration()) {
    self.service = service
    self.configuration = configuration
    self.timer = PeriodicJobTimer(clock: service.environment.clock)
  }

  /// Appends due transitions until ``beginGracefulShutdown()`` or cancellation.
  public func run() async {
    while !timer.isStopping, !Task.isCancelled {
      let seen = service.eventSignal.generation
      let next = await appendDue()
      let now = service.environment.now()
      var sleep = configuration.maxInterval
      if let next { sleep = max(configuration.minInterval, min(sleep, .milliseconds(next - now))) }
      await wait(sleep, unlessSignalledAfter: seen)
    }
  }

  /// Sleeps for `duration`, or less when the service's ``EventSignal`` moves past `seen` (a write
  /// may have recorded an earlier transition), ``beginGracefulShutdown()`` is called or the task
  /// is cancelled.
  private func wait(_ duration: Duration, unlessSignalledAfter seen: UInt64) async {
    await withTaskGroup(of: Void.self) { group in
      group.addTask { await self.timer.wait(duration) }
      group.addTask { await self.service.eventSignal.wait(after: seen) }
      await group.next()
      group.cancelAll()
    }
  }

  /// Stops ``run()`` after the pass in progress.
  public func beginGracefulShutdown() { timer.stop() }

  /// One pass: appends every transition due now (in batches), wakes watchers and the dispatcher.
  /// - Returns: the next recorded transition after the pass, `nil` when none (or the store failed:
  ///   the next pass tries again; failures are logged).
  @discardableResult
  public func appendDue() async -> Int64? {
    let store = service.store
    do {
      // Batches while users stay due (bounded: a store that keeps one due is retried next pass).
      for _ in 0..<100 {
        let appended = try await store.appendDueTransitionEvents(
          atMs: service.environment.now(), limit: configuration.batchSize)
        if !appended.isEmpty { service.eventsAppended(appended.count, source: "transition") }
        guard let next = try await store.nextTransitionDueMs(), next <= service.environment.now(), !appended.isEmpty
        else { break }
      }
      return try await store.nextTransitionDueMs()
    } catch {
      service.log.info("transition scheduler: the store failed; retrying at the next pass", [("error", .string(error.message))])
      return nil
    }
  }
}
