// Rule 25's kept notifications are pruned (docs/architecture.md "Background jobs", "Limits"):
// substatusd's `--keep-notifications-days N` (default 180, Apple's own notification history;
// 0 keeps them for ever) deletes the kept V2 notifications received more than N days ago, in
// bounded batches, once an hour of the service's clock.
import SubscriptionStorage
import SubstatusJSON
import SubstatusClock
import SubstatusMetrics
import SubstatusServiceCore
import Synchronization

/// Deletes the kept notifications older than the retention (a ``ServiceLifecycle``-style service:
/// ``run()`` until ``beginGracefulShutdown()``).
///
/// A pass deletes, oldest first, those received before now (service clock) minus
/// ``Configuration-swift.struct/keepMs``, ``Configuration-swift.struct/batchSize`` per store call,
/// yielding between calls so that a large first prune never holds the store's writer for long;
/// passes run at start and every ``Configuration-swift.struct/interval`` of the service clock.
/// Counted in `substatus_kept_notifications_pruned_total`.
public final class KeptNotificationPruner: MetricsSource, Sendable {
  /// How the pruner works.
  public struct Configuration: Sendable {
    /// How long a kept notification is kept after it was received, in milliseconds.
    public var keepMs: Int64
    /// The time between passes (service clock).
    public var interval: Duration
    /// Notifications deleted per store call (one write transaction).
    public var batchSize: Int

    /// Creates a configuration.
    public init(keepDays: Int, interval: Duration = .seconds(3600), batchSize: Int = 1000) {
      self.keepMs = Int64(max(1, keepDays)) * 86_400_000
      self.interval = interval
      self.batchSize = min(max(1, batchSize), 10_000)
    }
  }

  /// The store the notifications are pruned from.
  public let store: any KeptNotificationRetentionStore
  /// The service's clock.
  public let clock: any ServiceClock
  /// The settings.
  public let configuration: Configuration
  private let log: LogSink
  private let timer: PeriodicJobTimer
  private let pruned = Atomic<UInt64>(0)

  /// Creates a pruner; it does nothing until ``run()`` or ``pruneOnce()``.
  public init(
    store: any KeptNotificationRetentionStore, clock: any ServiceClock, log: LogSink, configuration: Configuration
  ) {
    self.store = store
    self.clock = clock
    self.log = log
    self.configuration = configuration
    self.timer = PeriodicJobTimer(clock: clock)
  }

  /// Prunes at start and every interval until ``beginGracefulShutdown()`` or cancellation.
  public func run() async {
    while !timer.isStopping, !Task.isCancelled {
      await pruneOnce()
      await timer.wait(configuration.interval)
    }
  }

  /// Stops ``run()`` after the batch in progress.
  public func beginGracefulShutdown() { timer.stop() }

  /// One pass: deletes every kept notification older than the retention, a batch at a time.
  /// - Returns: how many were deleted (a store failure ends the pass; it is logged and the next
  ///   pass tries again).
  @discardableResult
  public func pruneOnce() async -> Int {
    let cutoff = clock.wallMs - configuration.keepMs
    var total = 0
    do {
      while !timer.isStopping {
        let n = try await store.pruneKeptNotifications(receivedBeforeMs: cutoff, limit: configuration.batchSize)
        total += n
        pruned.add(UInt64(n), ordering: .relaxed)
        if n < configuration.batchSize { break }
        await Task.yield()
      }
    } catch {
      log.info("kept notification pruner: the store failed; retrying at the next pass", [("error", .string("\(error)"))])
    }
    if total > 0 {
      log.info("kept notifications pruned", [("deleted", .integer(Int64(total))), ("received_before_ms", .integer(cutoff))])
    }
    return total
  }

  /// `substatus_kept_notifications_pruned_total`.
  public func metricFamilies() -> [MetricFamily] {
    [
      .counter(
        "substatus_kept_notifications_pruned_total",
        "Kept V2 notifications deleted because they were received longer ago than --keep-notifications-days.",
        pruned.load(ordering: .relaxed))
    ]
  }
}
