import Foundation
import SubstatusJSON
import Synchronization

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// A notification payload format. V1 (JSON with `notification_type` and `unified_receipt`) is
/// implemented; V2 (`{"signedPayload": JWS}`) plugs in here later with its own mapping of
/// ``SubscriptionEventKind`` to `notificationType` + `subtype`, and its own signer.
protocol NotificationFormat: Sendable {
  /// The name the receiver sees (V1 `notification_type`), or nil when this version sends
  /// nothing for the event.
  func typeName(for event: NotificationEvent) -> String?
  /// The request body for `event`, rendered from the state at the event.
  func body(for event: NotificationEvent, app: App, state: SimulatorState) -> [UInt8]?
}

/// App Store Server Notifications V1 (`responseBodyV1`).
struct NotificationFormatV1: NotificationFormat {
  func typeName(for event: NotificationEvent) -> String? {
    switch event.kind {
    case .initialBuy: "INITIAL_BUY"
    case .resubscribe, .upgraded, .crossgradedImmediately: "INTERACTIVE_RENEWAL"
    case .renewed: "DID_RENEW"
    case .autoRenewEnabled, .autoRenewDisabled: "DID_CHANGE_RENEWAL_STATUS"
    case .renewalPreferenceChanged: "DID_CHANGE_RENEWAL_PREF"
    case .failedToRenew: "DID_FAIL_TO_RENEW"
    case .recovered: "DID_RECOVER"
    case .refunded(let autoRenewable): autoRenewable ? "CANCEL" : "REFUND"
    case .familyAccessRevoked: "REVOKE"
    // V1 has no notification for these; V2 sends OFFER_REDEEMED and EXPIRED.
    case .offerRedeemedForNextRenewal, .expired: nil
    }
  }

  func body(for event: NotificationEvent, app: App, state: SimulatorState) -> [UInt8]? {
    guard let type = typeName(for: event) else { return nil }
    let subscription = event.originalTransactionID.flatMap { state.subscriptions[$0] }
    var object = JSONObject()
    object.append("notification_type", .string(type))
    object.append("password", .string(app.sharedSecrets.first ?? ""))
    object.append("environment", .string(event.environment.notificationValue))
    object.append("bid", .string(app.bundleID))
    object.append("bvrs", .string("1"))
    object.append("auto_renew_status", .string(subscription?.autoRenewEnabled == true ? "true" : "false"))
    if let subscription {
      object.append("auto_renew_product_id", .string(subscription.autoRenewProductID))
      object.append("original_transaction_id", .string(subscription.originalTransactionID))
      if let intent = subscription.expirationIntent, event.atMs >= subscription.expiresMs {
        object.append("expiration_intent", .string(intent))
      }
    }
    if case .autoRenewEnabled = event.kind { appendDate(&object, "auto_renew_status_change_date", event.atMs) }
    if case .autoRenewDisabled = event.kind { appendDate(&object, "auto_renew_status_change_date", event.atMs) }
    var unified = JSONObject()
    unified.append("status", .integer(0))
    unified.append("environment", .string(event.environment.receiptValue))
    unified.append(
      "latest_receipt",
      .string(state.currentToken(bundleID: event.bundleID, userID: event.userID)?.encoded ?? ""))
    unified.append(
      "latest_receipt_info",
      .array(state.latestReceiptInfo(bundleID: event.bundleID, userID: event.userID, excludeOld: false)))
    unified.append(
      "pending_renewal_info", .array(state.pendingRenewalInfo(bundleID: event.bundleID, userID: event.userID)))
    object.append("unified_receipt", .object(unified))
    return JSONValue.object(object).serializedBytes()
  }
}

/// One attempt to deliver a notification.
struct DeliveryAttempt: Sendable {
  var atMs: Int64
  var httpStatus: Int?
  var error: String?
}

/// A notification to deliver, with its attempts and retry schedule.
struct Delivery: Sendable {
  enum State: String, Sendable {
    case pending, delivered, failed
  }
  var id: Int
  var bundleID: String
  var userID: String
  var notificationType: String
  var environment: StoreEnvironment
  var url: String
  var body: [UInt8]
  var createdMs: Int64
  var attempts: [DeliveryAttempt] = []
  var nextAttemptMs: Int64?
  /// Delays before each retry, after the previous attempt (already compressed).
  var retryDelaysMs: [Int64]
  var state = State.pending
}

/// Delivers notifications one at a time, oldest due first, and schedules retries on the
/// simulated clock: Apple's V1 schedule is three retries, 6, 24 and 48 hours after the previous
/// attempt, production only; a 200–206 answer is success, anything else (or no answer) failure.
final class NotificationDispatcher: Sendable {
  static let v1RetryDelaysMs: [Int64] = [6, 24, 48].map { $0 * AppleTime.hourMs }

  private struct State {
    var deliveries: [Delivery] = []
    var nextID = 1
    var workerRunning = false
    var stopped = false
  }

  private let state = Mutex(State())
  private let session: URLSession
  private let clock: @Sendable () -> Int64
  private let timeoutSeconds: Double

  init(timeoutSeconds: Double, clock: @escaping @Sendable () -> Int64) {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.timeoutIntervalForRequest = timeoutSeconds
    configuration.httpMaximumConnectionsPerHost = 4
    session = URLSession(configuration: configuration)
    self.clock = clock
    self.timeoutSeconds = timeoutSeconds
  }

  func enqueue(
    bundleID: String, userID: String, type: String, environment: StoreEnvironment, url: String,
    body: [UInt8], atMs: Int64, retryDelaysMs: [Int64]
  ) {
    state.withLock { state in
      state.deliveries.append(
        Delivery(
          id: state.nextID, bundleID: bundleID, userID: userID, notificationType: type,
          environment: environment, url: url, body: body, createdMs: atMs, nextAttemptMs: atMs,
          retryDelaysMs: retryDelaysMs))
      state.nextID += 1
    }
  }

  var deliveries: [Delivery] { state.withLock { $0.deliveries } }

  /// Starts the worker if an attempt is due and none is running.
  func pump() {
    let now = clock()
    let start = state.withLock { state -> Bool in
      guard !state.workerRunning, !state.stopped,
        state.deliveries.contains(where: { $0.state == .pending && ($0.nextAttemptMs ?? .max) <= now })
      else { return false }
      state.workerRunning = true
      return true
    }
    guard start else { return }
    Task { await self.work() }
  }

  /// Waits until no attempt is due or running; false on timeout.
  func drain(timeout: Duration) async -> Bool {
    let clockNow = ContinuousClock()
    let deadline = clockNow.now + timeout
    while clockNow.now < deadline {
      pump()
      let now = clock()
      let busy = state.withLock { state in
        state.workerRunning
          || state.deliveries.contains { $0.state == .pending && ($0.nextAttemptMs ?? .max) <= now }
      }
      if !busy { return true }
      try? await Task.sleep(for: .milliseconds(5))
    }
    return false
  }

  func stop() { state.withLock { $0.stopped = true } }

  private func work() async {
    while true {
      let now = clock()
      let next = state.withLock { state -> (Int, String, [UInt8])? in
        let due = state.deliveries.indices
          .filter { state.deliveries[$0].state == .pending && (state.deliveries[$0].nextAttemptMs ?? .max) <= now }
          .min { (state.deliveries[$0].nextAttemptMs!, $0) < (state.deliveries[$1].nextAttemptMs!, $1) }
        guard !state.stopped, let index = due else {
          state.workerRunning = false
          return nil
        }
        state.deliveries[index].nextAttemptMs = nil
        return (index, state.deliveries[index].url, state.deliveries[index].body)
      }
      guard let (index, url, body) = next else { return }
      let (status, error) = await post(url: url, body: body)
      let finished = clock()
      state.withLock { state in
        var delivery = state.deliveries[index]
        delivery.attempts.append(DeliveryAttempt(atMs: finished, httpStatus: status, error: error))
        if let status, (200...206).contains(status) {
          delivery.state = .delivered
        } else if delivery.attempts.count <= delivery.retryDelaysMs.count {
          delivery.nextAttemptMs = finished + delivery.retryDelaysMs[delivery.attempts.count - 1]
        } else {
          delivery.state = .failed
        }
        state.deliveries[index] = delivery
      }
    }
  }

  private func post(url: String, body: [UInt8]) async -> (Int?, String?) {
    guard let target = URL(string: url), target.scheme == "http" || target.scheme == "https" else {
      return (nil, "invalid notification URL")
    }
    var request = URLRequest(url: target)
    request.httpMethod = "POST"
    request.httpBody = Data(body)
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    request.timeoutInterval = timeoutSeconds
    do {
      let (_, response) = try await session.data(for: request)
      return ((response as? HTTPURLResponse)?.statusCode, nil)
    } catch {
      return (nil, String(describing: error))
    }
  }
}
