import AppStoreSignedData
import Foundation
import HTTPServer
import OutboundHTTP
import SubstatusJSON
import Synchronization

/// A local stand-in for Apple's side of in-app purchases: `verifyReceipt` (production and
/// sandbox), server notifications V1 and V2 (signed by a test root CA) with Apple's retry
/// schedules, the App Store Server API endpoints a status server needs, and a control API that
/// drives subscription lifecycles on a simulated clock. All state is in memory; ids come from counters
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
    /// The root CA that signs every JWS; nil makes a fresh one.
    public var certificateAuthority: TestCertificateAuthority?

    /// Creates a configuration.
    public init(
      startMs: Int64? = nil, timeScale: Double = 0, idBase: Int64 = 2_000_000_000_000_000,
      defaultNotificationURL: String? = nil, notificationRetryCompression: Double = 1,
      notificationTimeoutSeconds: Double = 30, certificateAuthority: TestCertificateAuthority? = nil
    ) {
      self.certificateAuthority = certificateAuthority
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
  let serverAPIFaults = Mutex<[ServerAPIFault]>([])
  let dropRules = Mutex<[DropRule]>([])
  let signing: SimulatorSigning
  let notificationFormatV1: any NotificationFormat = NotificationFormatV1()
  let notificationFormatV2: any NotificationFormat
  /// verifyReceipt requests received, by endpoint (`production`, `sandbox`), faults included.
  let verifyReceiptRequests = Mutex<[String: Int]>([:])
  /// Accepted Send Consumption Information answers, oldest first.
  let consumptionAnswers = Mutex<[ConsumptionAnswer]>([])
  /// Finished renewal date extensions for all subscribers, by `bundle \0 environment \0 product
  /// \0 requestIdentifier`.
  let massExtensions = Mutex<[String: MassExtension]>([:])
  /// The App Store Server API rate limiter: a token bucket per app and environment.
  let rateLimiter = Mutex(ServerAPIRateLimiter())
  /// Retention Messaging: the client that sends realtime requests (up to 64 in flight, made on
  /// first use: it runs a thread), the `requestIdentifier` counter, the requests sent (oldest
  /// first) and performance test results.
  let retentionClientSlot = Mutex<OutboundHTTPClient?>(nil)
  let retentionSerial = Mutex<UInt64>(0)
  let retentionExchanges = Mutex<[RetentionExchange]>([])
  let retentionPerformanceTests = Mutex<[String: JSONValue]>([:])
  private let ticker = Mutex<Task<Void, Never>?>(nil)

  /// Creates a simulator; with a time scale above 0 it also starts a ticker that renews
  /// subscriptions and retries notifications as simulated time passes.
  public init(configuration: Configuration = Configuration()) {
    self.configuration = configuration
    let authority: TestCertificateAuthority
    if let given = configuration.certificateAuthority {
      authority = given
    } else {
      do {
        authority = try TestCertificateAuthority.make(commonName: "appstore-sim Test Root CA")
      } catch {
        // Only an allocation failure inside libcrypto gets here.
        fatalError("appstore-sim: cannot make the test root CA: \(error)")
      }
    }
    signing = SimulatorSigning(authority: authority)
    notificationFormatV2 = NotificationFormatV2(signing: signing)
    let start = configuration.startMs ?? Int64(Date().timeIntervalSince1970 * 1000)
    let state = Locked(
      SimulatorState(
        startMs: start, timeScale: configuration.timeScale, idBase: configuration.idBase))
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
    retentionClientSlot.withLock { $0?.shutdown() }
  }

  deinit { ticker.withLock { $0?.cancel() } }

  /// The simulated clock's current instant, ms since the epoch.
  public var nowMs: Int64 { state.withLock { $0.now } }

  /// The PEM of the root certificate every JWS chains to (what a verifier must trust).
  public var rootCertificatePEM: String { signing.rootPEM }

  /// Runs `body` on the state after processing everything due by now; on error the state is
  /// left as it was. Notification events it produced are rendered and queued for delivery.
  func mutate<T: Sendable>(_ body: (inout SimulatorState) throws(SimError) -> T) throws(SimError)
    -> (T, [(type: String, userID: String)])
  {
    let formats = (v1: notificationFormatV1, v2: notificationFormatV2)
    let defaultURL = configuration.defaultNotificationURL
    typealias Outgoing = (
      event: NotificationEvent, rendered: RenderedNotification, url: String?, retries: [Int64]
    )
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
        guard let app = state.apps[event.bundleID] else { continue }
        let url = app.notificationURL ?? defaultURL
        let format = app.notificationVersion == .v2 ? formats.v2 : formats.v1
        guard let rendered = format.render(event, app: app, state: state) else { continue }
        let retries: [Int64] =
          event.environment == .production || app.sandboxNotificationRetries
          ? format.retryDelaysMs.map {
            Int64((Double($0) / max(app.notificationRetryCompression, 1e-9)).rounded())
          } : []
        outgoing.append((event, rendered, url, retries))
      }
      return (result, outgoing)
    }
    for item in outgoing {
      guard let url = item.url else { continue }
      let dropped = consumeDropRule(
        bundleID: item.event.bundleID, userID: item.event.userID, type: item.rendered.type)
      dispatcher.enqueue(
        bundleID: item.event.bundleID, userID: item.event.userID, type: item.rendered.type,
        subtype: item.rendered.subtype, environment: item.event.environment, url: url,
        body: item.rendered.body, atMs: item.event.atMs, retryDelaysMs: item.retries,
        v2: item.rendered.v2,
        dropped: dropped)
    }
    dispatcher.pump()
    return (result, outgoing.map { (type: $0.rendered.type, userID: $0.event.userID) })
  }

  /// True when a drop rule matches (and counts it down).
  private func consumeDropRule(bundleID: String, userID: String, type: String) -> Bool {
    dropRules.withLock { rules in
      guard
        let index = rules.firstIndex(where: {
          ($0.bundleID == nil || $0.bundleID == bundleID)
            && ($0.userID == nil || $0.userID == userID)
            && ($0.notificationType == nil || $0.notificationType == type)
        })
      else { return false }
      if let remaining = rules[index].remaining {
        if remaining <= 1 {
          rules.remove(at: index)
        } else {
          rules[index].remaining = remaining - 1
        }
      }
      return true
    }
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

/// A notification fault: matching notifications are recorded but never sent (`remaining` times,
/// or until cleared).
struct DropRule: Sendable {
  var bundleID: String?
  var userID: String?
  var notificationType: String?
  var remaining: Int?

  var json: JSONValue {
    var object = JSONObject()
    object.append("bundle_id", bundleID.map { .string($0) } ?? .null)
    object.append("user_id", userID.map { .string($0) } ?? .null)
    object.append("notification_type", notificationType.map { .string($0) } ?? .null)
    object.append("count", remaining.map { .integer($0) } ?? .null)
    return .object(object)
  }
}

/// An App Store Server API fault: answer `httpStatus` with Apple's `errorCode` (e.g. 429 with
/// 4290000), after `latencyMs`, for `remaining` requests.
struct ServerAPIFault: Sendable {
  var environment: StoreEnvironment?
  var latencyMs: Int
  var httpStatus: Int?
  var errorCode: Int64?
  var remaining: Int?

  var json: JSONValue {
    var object = JSONObject()
    object.append("environment", environment.map { .string($0.rawValue) } ?? .null)
    object.append("latency_ms", .integer(latencyMs))
    object.append("http_status", httpStatus.map { .integer($0) } ?? .null)
    object.append("error_code", errorCode.map { .integer($0) } ?? .null)
    object.append("count", remaining.map { .integer($0) } ?? .null)
    return .object(object)
  }
}

/// A mutex in a class, so closures can share it.
final class Locked<Value>: Sendable {
  private let mutex: Mutex<Value>

  init(_ value: sending Value) { mutex = Mutex(value) }

  func withLock<Result, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result)
    throws(E)
    -> sending Result
  {
    try mutex.withLock(body)
  }
}
