import Synchronization

/// Wakes what waits for new events in the log: WatchEvents streams and the webhook dispatcher.
///
/// The service's writes that append events (ingest, notifications, the transition scheduler)
/// ``signal()`` after their commit; the daemon also signals about once a second, so events written
/// by other instances sharing a PostgreSQL database are seen. A reader takes the ``generation``
/// before it reads the log and, having found nothing new, waits for a later one: a signal between
/// its read and its wait is never lost.
///
/// ```swift
/// let seen = signal.generation
/// let batch = try await store.events(appId: app, query: query, afterSequence: after, limit: 100)
/// if batch.isEmpty { await signal.wait(after: seen) }
/// ```
public final class EventSignal: Sendable {
  private struct State {
    var closed = false
    var generation: UInt64 = 0
    var nextWaiter: UInt64 = 0
    var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
  }

  private let state = Mutex(State())

  /// Creates a signal.
  public init() {}

  /// The number of signals so far.
  public var generation: UInt64 { state.withLock { $0.generation } }

  /// Whether ``close()`` was called.
  public var isClosed: Bool { state.withLock { $0.closed } }

  /// Ends every wait now and later (the server shuts down: watchers end their streams).
  public func close() {
    state.withLock { $0.closed = true }
    signal()
  }

  /// The tasks waiting now.
  public var waiting: Int { state.withLock { $0.waiters.count } }

  /// Wakes every waiter: the log may have new events.
  public func signal() {
    let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
      state.generation &+= 1
      defer { state.waiters.removeAll(keepingCapacity: true) }
      return Array(state.waiters.values)
    }
    for waiter in waiters { waiter.resume() }
  }

  /// Returns once the ``generation`` is past `seen` (at once if it already is), the signal is
  /// closed, or the calling task is cancelled.
  public func wait(after seen: UInt64) async {
    let id = state.withLock { state -> UInt64 in
      state.nextWaiter &+= 1
      return state.nextWaiter
    }
    await withTaskCancellationHandler {
      await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let wait = state.withLock { state -> Bool in
          guard state.generation == seen, !state.closed, !Task.isCancelled else { return false }
          state.waiters[id] = continuation
          return true
        }
        if !wait { continuation.resume() }
      }
    } onCancel: {
      state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
    }
  }
}
