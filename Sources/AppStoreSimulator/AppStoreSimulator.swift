import Foundation
import HTTPServer
import SubstatusJSON
import Synchronization

/// A local stand-in for Apple's side of in-app purchases: `verifyReceipt` (production and
/// sandbox), V1 server notifications with Apple's retry schedule, and a control API that drives
/// subscription lifecycles on a simulated clock. All state is in memory; ids come from counters
/// and time from the simulated clock, so a run is reproducible.
///
/// ```swift
/// let simulator = AppStoreSimulator(configuration: .init(startMs: 1_767_225_600_000))
/// let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0),
///                             router: simulator.router())
/// ```
///
/// The HTTP API is documented in `Sources/appstore-sim/README.md`.
public final class AppStoreSimulator: Sendable {
  /// How the simulator starts.
  public struct Configuration: Sendable {
    /// The simulated clock's start (ms since the epoch); nil starts at the wall clock's now.
    public var startMs: Int64?
    /// Simulated milliseconds per real millisecond; 0 freezes the clock (it moves only through
    /// the control API), 1 follows real time, 60 runs a minute per second.
    public var timeScale: Double
    /// Transaction ids count up from this number (web order line item ids from a tenth of it).
    public var idBase: Int64
    /// Notification URL for apps registered without one.
    public var defaultNotificationURL: String?
    /// Default factor dividing Apple's notification retry delays (per app overridable).
    public var notificationRetryCompression: Double
    /// Seconds to wait for a notification receiver's answer (Apple waits 30).
    public var notificationTimeoutSeconds: Double

    /// Creates a configuration.
    public init(
      startMs: Int64? = nil, timeScale: Double = 0, idBase: Int64 = 2_000_000_000_000_000,
      defaultNotificationURL: String? = nil, notificationRetryCompression: Double = 1,
      notificationTimeoutSeconds: Double = 30
    ) {
      self.startMs = startMs
      self.timeScale = timeScale
      self.idBase = idBase
      self.defaultNotificationURL = defaultNotificationURL
      self.notificationRetryCompression = notificationRetryCompression
      self.notificationTimeoutSeconds = notificationTimeoutSeconds
    }
  }

  let configuration: Configuration
  let state: Locked<SimulatorState>
  let dispatcher: NotificationDispatcher
  let faults = Mutex<[FaultRule]>([])
  /// verifyReceipt requests received, by endpoint (`production`, `sandbox`), faults included.
  let verifyReceiptRequests = Mutex<[String: Int]>([:])
  let notificationFormat: any NotificationFormat = NotificationFormatV1()
  private let ticker = Mutex<Task<Void, Never>?>(nil)

  /// Creates a simulator; with a time scale above 0 it also starts a ticker that renews
  /// subscriptions and retries notifications as simulated time passes.
  public init(configuration: Configuration = Configuration()) {
    self.configuration = configuration
    let start = configuration.startMs ?? Int64(Date().timeIntervalSince1970 * 1000)
    let state = Locked(
      SimulatorState(startMs: start, timeScale: configuration.timeScale, idBase: configuration.idBase))
    self.state = state
    dispatcher = NotificationDispatcher(timeoutSeconds: configuration.notificationTimeoutSeconds) {
      [state] in state.withLock { $0.now }
    }
    if configuration.timeScale > 0 {
      ticker.withLock {
        $0 = Task { [weak self] in
          while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(200))
            guard let self else { return }
            _ = try? self.mutate { _ throws(SimError) in }
          }
        }
      }
    }
  }

  /// Stops the ticker and notification deliveries.
  public func shutdown() {
    ticker.withLock {
      $0?.cancel()
      $0 = nil
    }
    dispatcher.stop()
  }

  deinit { ticker.withLock { $0?.cancel() } }

  /// The simulated clock's current instant, ms since the epoch.
  public var nowMs: Int64 { state.withLock { $0.now } }

  /// Runs `body` on the state after processing everything due by now; on error the state is
  /// left as it was. Notification events it produced are rendered and queued for delivery.
  func mutate<T: Sendable>(_ body: (inout SimulatorState) throws(SimError) -> T) throws(SimError)
    -> (T, [(type: String, userID: String)])
  {
    let format = notificationFormat
    let defaultURL = configuration.defaultNotificationURL
    typealias Outgoing = (event: NotificationEvent, type: String, url: String?, body: [UInt8]?, retries: [Int64])
    let (result, outgoing) = try state.withLock { state throws(SimError) -> (T, [Outgoing]) in
      state.advance(to: state.now)
      let backup = state
      let result: T
      do throws(SimError) {
        result = try body(&state)
      } catch {
        state = backup
        throw error
      }
      state.advance(to: state.now)
      let events = state.pendingEvents
      state.pendingEvents = []
      var outgoing: [Outgoing] = []
      for event in events {
        guard let app = state.apps[event.bundleID], let type = format.typeName(for: event) else { continue }
        let url = app.notificationURL ?? defaultURL
        let retries: [Int64] =
          event.environment == .production || app.sandboxNotificationRetries
          ? NotificationDispatcher.v1RetryDelaysMs.map {
            Int64((Double($0) / max(app.notificationRetryCompression, 1e-9)).rounded())
          } : []
        outgoing.append(
          (event, type, url, url == nil ? nil : format.body(for: event, app: app, state: state), retries))
      }
      return (result, outgoing)
    }
    for item in outgoing {
      guard let url = item.url, let body = item.body else { continue }
      dispatcher.enqueue(
        bundleID: item.event.bundleID, userID: item.event.userID, type: item.type,
        environment: item.event.environment, url: url, body: body, atMs: item.event.atMs,
        retryDelaysMs: item.retries)
    }
    dispatcher.pump()
    return (result, outgoing.map { (type: $0.type, userID: $0.event.userID) })
  }
}

/// A verifyReceipt fault: latency, an HTTP error, or an Apple status, for `remaining` requests.
struct FaultRule: Sendable {
  var environment: StoreEnvironment?
  var latencyMs: Int
  var httpStatus: Int?
  var status: Int?
  var isRetryable: Bool?
  var retryableKey: String
  var remaining: Int?

  var json: JSONValue {
    var object = JSONObject()
    object.append("environment", environment.map { .string($0.rawValue) } ?? .null)
    object.append("latency_ms", .integer(latencyMs))
    object.append("http_status", httpStatus.map { .integer($0) } ?? .null)
    object.append("status", status.map { .integer($0) } ?? .null)
    object.append("is_retryable", isRetryable.map { .bool($0) } ?? .null)
    object.append("retryable_key", .string(retryableKey))
    object.append("count", remaining.map { .integer($0) } ?? .null)
    return .object(object)
  }
}

/// A mutex in a class, so closures can share it.
final class Locked<Value>: Sendable {
  private let mutex: Mutex<Value>

  init(_ value: sending Value) { mutex = Mutex(value) }

  func withLock<Result, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E)
    -> sending Result
  {
    try mutex.withLock(body)
  }
}
