import SubstatusClock
import Synchronization

/// The stop switch of a periodic background job (receipt refresh, reconciliation) and its wait
/// between runs on the injected clock, which a stop or the task's cancellation ends at once.
package final class PeriodicJobTimer: Sendable {
  private struct State {
    var stopping = false
    var sleeper: Task<Void, any Error>?
  }

  private let state = Mutex(State())
  private let clock: any ServiceClock

  /// A timer whose waits are on `clock`.
  package init(clock: any ServiceClock) {
    self.clock = clock
  }

  /// Whether ``stop()`` was called.
  package var isStopping: Bool { state.withLock { $0.stopping } }

  /// Ends the current wait, if any, and every later one at once.
  package func stop() {
    let sleeper = state.withLock { s -> Task<Void, any Error>? in
      s.stopping = true
      return s.sleeper
    }
    sleeper?.cancel()
  }

  /// Waits for `interval`, or less when ``stop()`` is called or the calling task is cancelled.
  package func wait(_ interval: Duration) async {
    let sleeper = Task { [clock] in try await clock.sleep(for: interval) }
    let stopped = state.withLock { s -> Bool in
      s.sleeper = sleeper
      return s.stopping
    }
    if stopped { sleeper.cancel() }
    await withTaskCancellationHandler {
      _ = try? await sleeper.value
    } onCancel: {
      sleeper.cancel()
    }
    state.withLock { $0.sleeper = nil }
  }
}
