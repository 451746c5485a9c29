import Synchronization

extension ServiceClock {
  /// Waits until `task` has ended or `limit` of this clock has passed, whichever comes first. The
  /// task is not cancelled, and a task that never ends is not waited for past the limit: for
  /// shutdown paths, where nothing may wait forever.
  ///
  /// ```swift
  /// reconciler.beginGracefulShutdown()
  /// if await clock.waitForEnd(of: reconciling, within: .seconds(5)) == false { reconciling.cancel() }
  /// ```
  /// - Returns: whether the task ended within `limit`.
  public func waitForEnd<Success: Sendable, Failure: Error>(of task: Task<Success, Failure>, within limit: Duration)
    async -> Bool
  {
    await withCheckedContinuation { continuation in
      let outcome = FirstOutcome(continuation)
      let timer = Task {
        do { try await sleep(for: limit) } catch { return }
        outcome.resume(false)
      }
      Task {
        _ = await task.result
        outcome.resume(true)
        timer.cancel()
      }
    }
  }
}

/// Resumes a continuation with the first outcome; later ones are dropped.
private final class FirstOutcome: Sendable {
  private let continuation: Mutex<CheckedContinuation<Bool, Never>?>

  init(_ continuation: CheckedContinuation<Bool, Never>) { self.continuation = Mutex(continuation) }

  func resume(_ value: Bool) { continuation.withLock { $0.take() }?.resume(returning: value) }
}
