import Foundation
import OutboundHTTP
import SubstatusJSON
import Synchronization


/// A notification payload format: V1 (JSON with `notification_type` and `unified_receipt`,
/// ``NotificationFormatV1``) or V2 (`{"signedPayload": JWS}`, ``NotificationFormatV2``), each
/// with its own mapping of ``SubscriptionEventKind``.
protocol NotificationFormat: Sendable {
  /// The notification for `event`, rendered from the state at the event; nil when this
  /// version sends nothing for it.
  func render(_ event: NotificationEvent, app: App, state: SimulatorState) -> RenderedNotification?
  /// Delays before each retry after the previous attempt (Apple's schedule for the version).
  var retryDelaysMs: [Int64] { get }
}

/// A rendered notification: what the receiver sees and the request body.
struct RenderedNotification: Sendable {
  /// V1 `notification_type` or V2 `notificationType`.
  var type: String
  /// V2 `subtype`.
  var subtype: String?
  var body: [UInt8]
  /// Set for V2: what Get Notification History reports.
  var v2: NotificationV2Record?
}

/// A V2 notification as Get Notification History reports it.
struct NotificationV2Record: Sendable {
  var notificationUUID: String
  var signedPayload: String
  var signedDateMs: Int64
  /// The transaction ids of the customer it concerns (for the `transactionId` filter); empty
  /// for TEST.
  var originalTransactionID: String?
  var transactionID: String?
}

/// App Store Server Notifications V1 (`responseBodyV1`).
struct NotificationFormatV1: NotificationFormat {
  var retryDelaysMs: [Int64] { NotificationDispatcher.v1RetryDelaysMs }

  func render(_ event: NotificationEvent, app: App, state: SimulatorState) -> RenderedNotification?
  {
    guard let type = typeName(for: event, state: state),
      let body = body(for: event, app: app, state: state)
    else { return nil }
    return RenderedNotification(type: type, subtype: nil, body: body, v2: nil)
  }

  func typeName(for event: NotificationEvent, state: SimulatorState) -> String? {
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
    case .priceIncrease(let accepted): accepted ? nil : "PRICE_INCREASE_CONSENT"
    // V1's CONSUMPTION_REQUEST is for consumables only.
    case .consumptionRequest:
      event.transactionID.flatMap { state.transactions[$0] }?.productType == .consumable
        ? "CONSUMPTION_REQUEST" : nil
    // V1 has no notification for these; V2 sends OFFER_REDEEMED, EXPIRED, GRACE_PERIOD_EXPIRED,
    // ONE_TIME_CHARGE, REFUND_DECLINED, REFUND_REVERSED and TEST.
    case .offerRedeemedForNextRenewal, .expired, .gracePeriodExpired, .oneTimeCharge, .test,
      .refundDeclined, .refundReversed, .rescindConsent, .externalPurchaseToken, .renewalExtended,
      .custom, .renewalExtensionSummary:
      nil
    }
  }

  func body(for event: NotificationEvent, app: App, state: SimulatorState) -> [UInt8]? {
    guard let type = typeName(for: event, state: state) else { return nil }
    let subscription = event.originalTransactionID.flatMap { state.subscriptions[$0] }
    var object = JSONObject()
    object.append("notification_type", .string(type))
    object.append("password", .string(app.sharedSecrets.first ?? ""))
    object.append("environment", .string(event.environment.notificationValue))
    object.append("bid", .string(app.bundleID))
    object.append("bvrs", .string("1"))
    object.append(
      "auto_renew_status", .string(subscription?.autoRenewEnabled == true ? "true" : "false"))
    if let subscription {
      object.append("auto_renew_product_id", .string(subscription.autoRenewProductID))
      object.append("original_transaction_id", .string(subscription.originalTransactionID))
      if let intent = subscription.expirationIntent, event.atMs >= subscription.expiresMs {
        object.append("expiration_intent", .string(intent))
      }
    }
    if case .autoRenewEnabled = event.kind {
      appendDate(&object, "auto_renew_status_change_date", event.atMs)
    }
    if case .autoRenewDisabled = event.kind {
      appendDate(&object, "auto_renew_status_change_date", event.atMs)
    }
    var unified = JSONObject()
    unified.append("status", .integer(0))
    unified.append("environment", .string(event.environment.receiptValue))
    unified.append(
      "latest_receipt",
      .string(state.currentToken(bundleID: event.bundleID, userID: event.userID)?.encoded ?? ""))
    unified.append(
      "latest_receipt_info",
      .array(
        state.latestReceiptInfo(bundleID: event.bundleID, userID: event.userID, excludeOld: false)))
    unified.append(
      "pending_renewal_info",
      .array(state.pendingRenewalInfo(bundleID: event.bundleID, userID: event.userID)))
    object.append("unified_receipt", .object(unified))
    return JSONValue.object(object).serializedBytes()
  }
}

/// App Store Server Notifications V2: `{"signedPayload": JWS}` whose payload is a
/// `ResponseBodyV2DecodedPayload` with `data.signedTransactionInfo` and `data.signedRenewalInfo`,
/// all signed with the app's signing identity.
struct NotificationFormatV2: NotificationFormat {
  let signing: SimulatorSigning

  /// Apple's V2 schedule: five retries, 1, 12, 24, 48 and 72 hours after the previous attempt.
  var retryDelaysMs: [Int64] { NotificationDispatcher.v2RetryDelaysMs }

  /// `notificationType` and `subtype` for `event`.
  static func type(for event: NotificationEvent, state: SimulatorState) -> (String, String?) {
    let transaction = event.transactionID.flatMap { state.transactions[$0] }
    let redeemedOffer =
      transaction.map { $0.promotionalOfferID != nil || $0.offerCodeRefName != nil } ?? false
    switch event.kind {
    case .initialBuy: return (redeemedOffer ? "OFFER_REDEEMED" : "SUBSCRIBED", "INITIAL_BUY")
    case .resubscribe: return (redeemedOffer ? "OFFER_REDEEMED" : "SUBSCRIBED", "RESUBSCRIBE")
    case .renewed: return ("DID_RENEW", nil)
    case .recovered: return ("DID_RENEW", "BILLING_RECOVERY")
    case .autoRenewEnabled: return ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED")
    case .autoRenewDisabled: return ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED")
    case .upgraded, .crossgradedImmediately: return ("DID_CHANGE_RENEWAL_PREF", "UPGRADE")
    case .renewalPreferenceChanged(let downgrade):
      return ("DID_CHANGE_RENEWAL_PREF", downgrade ? "DOWNGRADE" : nil)
    case .failedToRenew(let grace): return ("DID_FAIL_TO_RENEW", grace ? "GRACE_PERIOD" : nil)
    case .gracePeriodExpired: return ("GRACE_PERIOD_EXPIRED", nil)
    case .refunded: return ("REFUND", nil)
    case .familyAccessRevoked: return ("REVOKE", nil)
    case .offerRedeemedForNextRenewal: return ("OFFER_REDEEMED", nil)
    case .oneTimeCharge: return ("ONE_TIME_CHARGE", nil)
    case .test: return ("TEST", nil)
    case .priceIncrease(let accepted): return ("PRICE_INCREASE", accepted ? "ACCEPTED" : "PENDING")
    case .consumptionRequest: return ("CONSUMPTION_REQUEST", nil)
    case .refundDeclined: return ("REFUND_DECLINED", nil)
    case .refundReversed: return ("REFUND_REVERSED", nil)
    case .rescindConsent: return ("RESCIND_CONSENT", nil)
    case .externalPurchaseToken(let subtype, _, _): return ("EXTERNAL_PURCHASE_TOKEN", subtype)
    case .renewalExtended: return ("RENEWAL_EXTENDED", nil)
    case .custom(let type, let subtype): return (type, subtype)
    case .renewalExtensionSummary: return ("RENEWAL_EXTENSION", "SUMMARY")
    case .expired(let intent):
      let subtype: String? =
        switch intent {
        case "1": "VOLUNTARY"
        case "2": "BILLING_RETRY"
        case "3": "PRICE_INCREASE"
        case "4": "PRODUCT_NOT_FOR_SALE"
        default: nil
        }
      return ("EXPIRED", subtype)
    }
  }

  func render(_ event: NotificationEvent, app: App, state: SimulatorState) -> RenderedNotification?
  {
    let (type, subtype) = Self.type(for: event, state: state)
    let mode = app.signing ?? .valid
    let signedDate = event.atMs
    var data = JSONObject()
    data.append("appAppleId", .integer(app.appleAppID))
    data.append("bundleId", .string(app.bundleID))
    data.append("bundleVersion", .string("1"))
    data.append("environment", .string(event.environment.receiptValue))
    if let transaction = event.transactionID.flatMap({ state.transactions[$0] }) {
      data.append(
        "signedTransactionInfo",
        .string(
          signing.sign(state.transactionPayload(transaction, signedDate: signedDate), mode: mode)))
    }
    if let subscription = event.originalTransactionID.flatMap({ state.subscriptions[$0] }) {
      data.append(
        "signedRenewalInfo",
        .string(
          signing.sign(state.renewalInfoPayload(subscription, signedDate: signedDate), mode: mode)))
      data.append("status", .integer(state.appleStatus(subscription, at: signedDate)))
    }
    if case .consumptionRequest(let reason) = event.kind {
      data.append("consumptionRequestReason", .string(reason))
    }
    let uuid = UUID().uuidString.lowercased()
    var payload = JSONObject()
    payload.append("notificationType", .string(type))
    if let subtype { payload.append("subtype", .string(subtype)) }
    payload.append("notificationUUID", .string(uuid))
    switch event.kind {
    case .rescindConsent:
      // `appData` instead of `data` (https://developer.apple.com/documentation/appstoreservernotifications/appdata).
      var appData = JSONObject()
      appData.append("appAppleId", .integer(app.appleAppID))
      appData.append("bundleId", .string(app.bundleID))
      appData.append("environment", .string(event.environment.receiptValue))
      if let transaction = state.appTransactionPayload(
        bundleID: event.bundleID, userID: event.userID, signedDate: signedDate)
      {
        appData.append("signedAppTransactionInfo", .string(signing.sign(transaction, mode: mode)))
      }
      payload.append("appData", .object(appData))
    case .externalPurchaseToken(_, let id, let created):
      // `externalPurchaseToken` instead of `data`
      // (https://developer.apple.com/documentation/appstoreservernotifications/externalpurchasetoken).
      payload.append(
        "externalPurchaseToken",
        .object([
          "externalPurchaseId": .string(id), "tokenCreationDate": .integer(created),
          "appAppleId": .integer(app.appleAppID), "bundleId": .string(app.bundleID),
        ]))
    case .renewalExtensionSummary(let mass):
      // `summary` instead of `data` (https://developer.apple.com/documentation/appstoreservernotifications/summary).
      var summary = JSONObject()
      summary.append("requestIdentifier", .string(mass.requestIdentifier))
      summary.append("environment", .string(event.environment.receiptValue))
      summary.append("appAppleId", .integer(app.appleAppID))
      summary.append("bundleId", .string(app.bundleID))
      summary.append("productId", .string(mass.productID))
      summary.append("storefrontCountryCodes", .array(mass.storefrontCountryCodes.map { .string($0) }))
      summary.append("failedCount", .integer(Int64(mass.failed)))
      summary.append("succeededCount", .integer(Int64(mass.succeeded)))
      payload.append("summary", .object(summary))
    default:
      payload.append("data", .object(data))
    }
    payload.append("version", .string("2.0"))
    payload.append("signedDate", .integer(signedDate))
    let signedPayload = signing.sign(.object(payload), mode: mode)
    let body = JSONValue.object(["signedPayload": .string(signedPayload)]).serializedBytes()
    return RenderedNotification(
      type: type, subtype: subtype, body: body,
      v2: NotificationV2Record(
        notificationUUID: uuid, signedPayload: signedPayload, signedDateMs: signedDate,
        originalTransactionID: event.originalTransactionID, transactionID: event.transactionID))
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
    /// `dropped`: a fault rule swallowed it; it is never attempted.
    case pending, delivered, failed, dropped
  }
  var id: Int
  var bundleID: String
  var userID: String
  var notificationType: String
  var subtype: String?
  var environment: StoreEnvironment
  var url: String
  var body: [UInt8]
  var createdMs: Int64
  var attempts: [DeliveryAttempt] = []
  var nextAttemptMs: Int64?
  /// Delays before each retry, after the previous attempt (already compressed).
  var retryDelaysMs: [Int64]
  var state = State.pending
  /// V2 notifications: what Get Notification History reports.
  var v2: NotificationV2Record?
}

/// Delivers notifications one at a time, oldest due first, and schedules retries on the
/// simulated clock: Apple's V1 schedule is three retries, 6, 24 and 48 hours after the previous
/// attempt, production only; a 200–206 answer is success, anything else (or no answer) failure.
final class NotificationDispatcher: Sendable {
  static let v1RetryDelaysMs: [Int64] = [6, 24, 48].map { $0 * AppleTime.hourMs }
  static let v2RetryDelaysMs: [Int64] = [1, 12, 24, 48, 72].map { $0 * AppleTime.hourMs }

  private struct State {
    var deliveries: [Delivery] = []
    var nextID = 1
    var workerRunning = false
    var stopped = false
    /// How many deliveries are `pending` (with an attempt scheduled or under way): with none,
    /// ``pump()`` and ``drain(timeout:)``, which every control call reaches, need not look at
    /// the deliveries kept (thousands after a seeded run).
    var pendingCount = 0

    /// Whether an attempt is due at `now`.
    func hasDue(at now: Int64) -> Bool {
      // By index: a `Delivery` is never copied (its strings and arrays would be retained).
      pendingCount > 0
        && deliveries.indices.contains {
          deliveries[$0].state == .pending && (deliveries[$0].nextAttemptMs ?? .max) <= now
        }
    }
  }

  private let state = Mutex(State())
  /// The outbound HTTP client (libcurl): at most 4 connections, to the one substatusd.
  private let client: OutboundHTTPClient
  private let clock: @Sendable () -> Int64
  private let timeoutSeconds: Double

  init(timeoutSeconds: Double, clock: @escaping @Sendable () -> Int64) {
    client = OutboundHTTPClient(configuration: .init(maxConnections: 4, maxConnectionsPerHost: 4))
    self.clock = clock
    self.timeoutSeconds = timeoutSeconds
  }

  func enqueue(
    bundleID: String, userID: String, type: String, subtype: String? = nil,
    environment: StoreEnvironment,
    url: String, body: [UInt8], atMs: Int64, retryDelaysMs: [Int64],
    v2: NotificationV2Record? = nil,
    dropped: Bool = false
  ) {
    state.withLock { state in
      var delivery = Delivery(
        id: state.nextID, bundleID: bundleID, userID: userID, notificationType: type,
        subtype: subtype,
        environment: environment, url: url, body: body, createdMs: atMs,
        nextAttemptMs: dropped ? nil : atMs,
        retryDelaysMs: retryDelaysMs)
      delivery.v2 = v2
      if dropped { delivery.state = .dropped } else { state.pendingCount += 1 }
      state.deliveries.append(delivery)
      state.nextID += 1
    }
  }

  var deliveries: [Delivery] { state.withLock { $0.deliveries } }

  /// Starts the worker if an attempt is due and none is running.
  func pump() {
    let now = clock()
    let start = state.withLock { state -> Bool in
      guard !state.workerRunning, !state.stopped, state.hasDue(at: now) else { return false }
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
      let busy = state.withLock { state in state.workerRunning || state.hasDue(at: now) }
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
          .filter {
            state.deliveries[$0].state == .pending
              && (state.deliveries[$0].nextAttemptMs ?? .max) <= now
          }
          .min {
            (state.deliveries[$0].nextAttemptMs!, $0) < (state.deliveries[$1].nextAttemptMs!, $1)
          }
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
        if delivery.state != .pending { state.pendingCount -= 1 }
        state.deliveries[index] = delivery
      }
    }
  }

  private func post(url: String, body: [UInt8]) async -> (Int?, String?) {
    guard let target = URL(string: url), target.scheme == "http" || target.scheme == "https" else {
      return (nil, "invalid notification URL")
    }
    var request = OutboundRequest(
      method: .post, url: target.absoluteString, headers: [("Content-Type", "application/json")], body: body)
    request.timeout = .milliseconds(Int64((timeoutSeconds * 1000).rounded()))
    request.connectTimeout = min(request.timeout, .seconds(5))
    // Apple reads no more than a status from the notification endpoint.
    request.maxResponseBytes = 64 << 10
    do {
      return (try await client.send(request).status, nil)
    } catch {
      return (nil, error.description)
    }
  }
}
