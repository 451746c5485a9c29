// Everything long-lived in substatusd has one lifecycle: `run()` until told to stop, then a
// graceful shutdown with a bound (the shape of swift-service-lifecycle's `Service`).
import Dispatch
import SubstatusClock
import Synchronization

/// A long-lived part of the process: a listener or a background job.
///
/// ``run()`` does the work until ``beginGracefulShutdown()`` is called (or the task running it is
/// cancelled), then finishes what is in flight and returns. A ``ServiceGroup`` starts services in
/// order and stops them in the reverse order, each within a bound.
public protocol Service: Sendable {
  /// Runs until told to stop; returns when what was in flight has finished.
  /// - Throws: when the service cannot go on (the group then stops the others).
  func run() async throws
  /// Asks ``run()`` to stop taking new work and return once what is in flight has finished. Called
  /// once, from any thread; never blocks.
  func beginGracefulShutdown()
}

/// A one-shot signal that tasks can wait for: fired once, waited for by any number of tasks.
public final class ShutdownSignal: Sendable {
  private let state = Mutex<(fired: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

  /// A signal not fired yet.
  public init() {}

  /// Fires the signal (once; later calls do nothing) and wakes every waiter.
  public func fire() {
    let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
      guard !state.fired else { return [] }
      state.fired = true
      defer { state.waiters = [] }
      return state.waiters
    }
    for waiter in waiters { waiter.resume() }
  }

  /// Whether ``fire()`` was called.
  public var hasFired: Bool { state.withLock { $0.fired } }

  /// Returns once the signal has fired.
  public func wait() async {
    await withCheckedContinuation { continuation in
      let fired = state.withLock { state -> Bool in
        if state.fired { return true }
        state.waiters.append(continuation)
        return false
      }
      if fired { continuation.resume() }
    }
  }
}

/// A ``Service`` made of two closures, for parts that are started and stopped rather than run
/// (an HTTP listener, a timer): `run` is called when the group starts, `stop` once shutdown reaches
/// this service; ``run()`` returns when `stop` has returned.
public struct ClosureService: Service {
  private let start: @Sendable () async throws -> Void
  private let stop: @Sendable () async throws -> Void
  private let signal = ShutdownSignal()

  /// A service that calls `start` when run, then waits for shutdown and calls `stop`.
  public init(start: @escaping @Sendable () async throws -> Void = {}, stop: @escaping @Sendable () async throws -> Void) {
    self.start = start
    self.stop = stop
  }

  /// Calls `start`, waits for ``beginGracefulShutdown()``, calls `stop`.
  public func run() async throws {
    try await start()
    await signal.wait()
    try await stop()
  }

  /// Lets ``run()`` call `stop`.
  public func beginGracefulShutdown() { signal.fire() }
}

/// Starts services in order, waits for a shutdown (asked for, or a listener that ended), and stops
/// them in the reverse order, each within its bound on the clock.
///
/// Two stages: the background services start first, then the listeners (so that nothing a call
/// needs is missing when the first call comes). At shutdown the listeners stop accepting and drain
/// their calls in flight first, then the background services stop.
///
/// ```swift
/// let group = ServiceGroup(
///   background: [.init("refresher", refresher, stopWithin: .seconds(5))],
///   listeners: [.init("grpc", server, stopWithin: .seconds(30))], clock: SystemClock())
/// ProcessSignals.on([SIGTERM]) { group.beginGracefulShutdown() }
/// let outcome = await group.run()
/// ```
public final class ServiceGroup: Sendable {
  /// A service with its name (for logs) and how long it may take to stop.
  public struct Member: Sendable {
    /// Its name in logs and in ``Outcome/unfinished``.
    public var name: String
    /// The service.
    public var service: any Service
    /// How long it may take to return after ``Service/beginGracefulShutdown()``; after that its
    /// task is cancelled and waited for 5 s more.
    public var stopWithin: Duration

    /// A member.
    public init(_ name: String, _ service: any Service, stopWithin: Duration) {
      self.name = name
      self.service = service
      self.stopWithin = stopWithin
    }
  }

  /// How a run ended.
  public struct Outcome: Sendable, Equatable {
    /// The services whose `run()` threw, with the error: `name: error`.
    public var failures: [String] = []
    /// The services that did not return within their bound (left behind), in stopping order.
    public var unfinished: [String] = []
    /// The services in the order they stopped (returned), for logs and tests.
    public var stopped: [String] = []
  }

  private let background: [Member]
  private let listeners: [Member]
  private let clock: any ServiceClock
  private let shutdown = ShutdownSignal()
  private let onShutdown: @Sendable () -> Void

  /// A group of `background` services and `listeners`.
  /// - Parameters:
  ///   - background: Started first, in order; stopped last, in reverse order.
  ///   - listeners: Started after the background services; stopped first, together.
  ///   - clock: The clock of the stopping bounds.
  ///   - onShutdown: Called once when shutdown begins, before any service is told (mark the
  ///     process not serving, end streams that would hold the drain).
  public init(
    background: [Member], listeners: [Member], clock: any ServiceClock, onShutdown: @escaping @Sendable () -> Void = {}
  ) {
    self.background = background
    self.listeners = listeners
    self.clock = clock
    self.onShutdown = onShutdown
  }

  /// Asks the group to stop (from a signal handler, any thread; later calls do nothing).
  public func beginGracefulShutdown() { shutdown.fire() }

  /// Runs the services until a shutdown is asked for or a listener ends, then stops them all.
  /// - Parameter started: Called once every service is started (write a ready file, log).
  /// - Returns: what failed and what was left behind.
  public func run(started: @Sendable () async -> Void = {}) async -> Outcome {
    let record = Record()
    func start(_ member: Member, endsGroup: Bool) -> Task<Void, Never> {
      let shutdown = self.shutdown
      return Task {
        do { try await member.service.run() } catch { record.failures.withLock { $0.append("\(member.name): \(error)") } }
        record.stopped.withLock { $0.append(member.name) }
        if endsGroup { shutdown.fire() }
      }
    }
    let backgroundTasks = background.map { start($0, endsGroup: false) }
    let listenerTasks = listeners.map { start($0, endsGroup: true) }
    await started()
    await shutdown.wait()
    onShutdown()
    var unfinished: [String] = []
    for member in listeners { member.service.beginGracefulShutdown() }
    for (member, task) in zip(listeners, listenerTasks) where await !finish(task, within: member.stopWithin) {
      unfinished.append(member.name)
    }
    for member in background.reversed() { member.service.beginGracefulShutdown() }
    for (member, task) in zip(background, backgroundTasks).reversed() where await !finish(task, within: member.stopWithin) {
      unfinished.append(member.name)
    }
    return Outcome(failures: record.failures.withLock { $0 }, unfinished: unfinished, stopped: record.stopped.withLock { $0 })
  }

  /// What the services' tasks report as they end.
  private final class Record: Sendable {
    let failures = Mutex<[String]>([])
    let stopped = Mutex<[String]>([])
  }

  /// Waits `limit` of the clock for `task` to end by itself, then cancels it and waits 5 s more.
  /// The cancellation is sent from a Dispatch thread, so that a cancellation handler that blocks
  /// cannot hold the shutdown.
  private func finish(_ task: Task<Void, Never>, within limit: Duration) async -> Bool {
    if await clock.waitForEnd(of: task, within: limit) { return true }
    DispatchQueue.global().async { task.cancel() }
    return await clock.waitForEnd(of: task, within: .seconds(5))
  }
}
