import Foundation
import HTTPServer
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusJSON

extension SubstatusService {
  /// The HTTP/1.1 endpoints: Apple's notifications, health, readiness and metrics.
  ///
  /// - `POST /v1/apps/{app_id}/apple/notifications`: App Store Server Notifications. V1 bodies are
  ///   authenticated by their `password` (the app's current or, during a rotation, previous shared
  ///   secret, compared in constant time), deduplicated (a V1 body has no id: its SHA-256 is the
  ///   id, and Apple's retries resend the same body), applied atomically with the dedupe record,
  ///   and answered 200 only after the commit. V2 bodies (`{"signedPayload": JWS}`) are verified
  ///   against the trusted roots, the app's bundle id and (in production) its Apple app id;
  ///   deduplicated by `notificationUUID`; their signed transaction and renewal info (verified
  ///   too) are applied atomically with the dedupe record; answered 200 only after the commit.
  ///   Data that fails verification is answered 401 (signature or chain) or 400 (another app,
  ///   environment, malformed) with `{"error":{"status":..,"reason":..,"message":..}}`; a store
  ///   that cannot answer now gives 503, so Apple retries.
  /// - `POST /v1/apps/{app_id}/apple/retention`: Apple's Retention Messaging realtime requests,
  ///   answered from the app's retention rules (``receiveRetentionRequest(appID:body:)``).
  /// - `GET /healthz`: 200 while the process serves.
  /// - `GET /readyz`: 200 when the store answers and the server is not draining, else 503.
  /// - `GET /metrics`: Prometheus text.
  ///
  /// - Parameter isDraining: whether the server is shutting down (readiness turns 503).
  public func httpRouter(isDraining: @escaping @Sendable () -> Bool = { false }) -> HTTPRouter {
    var router = HTTPRouter()
    router.add("POST", "/v1/apps/{app_id}/apple/notifications") { request in
      do {
        return try await self.receiveNotification(appID: request.pathParameters["app_id"] ?? "", body: request.body)
      } catch let error as RPCError {
        // The store failed: 503 (Apple retries) when it may answer later, 500 otherwise.
        self.metrics.notification(outcome: "store_error")
        let retryable: [RPCError.Code] = [.unavailable, .deadlineExceeded, .resourceExhausted, .aborted]
        throw HTTPError(
          status: retryable.contains(error.code) ? 503 : 500,
          message: retryable.contains(error.code) ? "the store is unavailable; retry later" : "internal error")
      }
    }
    router.add("POST", "/v1/apps/{app_id}/apple/retention") { request in
      do {
        return try await self.receiveRetentionRequest(appID: request.pathParameters["app_id"] ?? "", body: request.body)
      } catch let error as RPCError {
        // The store failed: Apple shows its default message; 503 says why.
        self.metrics.notification(outcome: "retention_store_error")
        throw HTTPError(status: error.code == .unavailable ? 503 : 500, message: "the store cannot answer now")
      }
    }
    router.add("GET", "/healthz") { _ in HTTPResponse.json(["status": .string("ok")]) }
    router.add("GET", "/readyz") { _ in
      if isDraining() { return HTTPResponse.json(["status": .string("draining")], status: 503) }
      do {
        _ = try await self.tenantStore.listTenants(page: PageRequest(size: 1))
        return HTTPResponse.json(["status": .string("ready")])
      } catch {
        return HTTPResponse.json(["status": .string("store unavailable")], status: 503)
      }
    }
    router.add("GET", "/metrics") { _ in
      HTTPResponse(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4; charset=utf-8"], body: Array(self.metrics.prometheusText().utf8))
    }
    return router
  }

  func receiveNotification(appID: String, body: [UInt8]) async throws -> HTTPResponse {
    let json: JSONValue
    do { json = try JSONValue(parsing: body) } catch {
      metrics.notification(outcome: "malformed")
      throw HTTPError(status: 400, message: "the body is not JSON: \(error)")
    }
    if let signedPayload = json["signedPayload"] {
      return try await receiveNotificationV2(appID: appID, signedPayload: signedPayload)
    }
    let notification: NotificationV1
    do { notification = try NotificationV1(json: json) } catch {
      metrics.notification(outcome: "malformed")
      throw HTTPError(status: 400, message: "not an App Store Server Notification V1 body: \(error.message)")
    }
    guard !appID.isEmpty, let cached = try await loadApp(appID) else {
      metrics.notification(outcome: "unknown_app")
      throw HTTPError(status: 404, message: "app \(ErrorText.quoted(appID)) not found")
    }
    // Authenticate by the shared secret, current or previous during its overlap.
    let now = environment.now()
    let secrets = try await stored { () throws(StoreError) in try await catalogStore.sharedSecrets(appId: appID) }
    let presented = Array((notification.password ?? "").utf8)
    let valid = secrets?.valid(at: now) ?? []
    var matched = false
    for version in valid where ConstantTime.equals(SHA256.hash(presented), SHA256.hash(version.secret)) { matched = true }
    guard matched else {
      metrics.notification(outcome: "unauthenticated")
      throw HTTPError(status: 401, message: "the notification's password does not match the app's shared secret")
    }
    let environment = notification.environment ?? .production
    // A V1 body is neither signed nor dated, and a retried old body may arrive after a newer one:
    // its copies are as of the latest instant it records (rule 14), and its unified_receipt's
    // pending_renewal_info is the whole truth about its subscriptions (rule 13).
    let asOf = SubscriptionDomain.Transaction.latestRecordedDate(
      in: notification.transactions, otherDates: [notification.autoRenewStatusChangeDate])
    var (transactions, renewalInfos) = (notification.transactions, notification.pendingRenewalInfo)
    for i in transactions.indices { transactions[i].asOfDate = asOf }
    for i in renewalInfos.indices { renewalInfos[i].asOfDate = asOf }
    let updates = try await routeByOriginalTransaction(
      appID: appID, environment: environment, transactions: transactions, renewalInfos: renewalInfos,
      renewalInfoSnapshot: RenewalInfoSnapshot(receiptTransactions: transactions, asOfDate: asOf))
    let id = "v1:" + Hex.encode(SHA256.hash(body))
    let written = try await applyNotification(appID: appID, id: id, receivedMs: now, updates: updates)
    let applied = written != nil
    metrics.notification(outcome: applied ? "applied" : "duplicate")
    if let written { eventsAppended(written.eventsAppended, source: "notification") }
    log.info("notification", [
      ("app_id", .string(cached.app.appId)), ("type", .string(notification.rawNotificationType)),
      ("environment", .string(environment.rawValue)), ("users", .integer(updates.count)),
      ("duplicate", .bool(!applied)),
    ])
    return HTTPResponse.json(["status": .string(applied ? "applied" : "duplicate")])
  }
}

extension SubstatusService {
  /// Groups a notification's data by the users whose history holds each original transaction id.
  /// Data for ids no user has submitted yet is kept under the pseudo-user
  /// "apple:<original_transaction_id>" so that nothing is lost. A renewal-info snapshot goes to
  /// each user restricted to the original transactions routed to that user.
  func routeByOriginalTransaction(
    appID: String, environment: SubscriptionDomain.Environment, transactions: [SubscriptionDomain.Transaction],
    renewalInfos: [RenewalInfo], renewalInfoSnapshot: RenewalInfoSnapshot? = nil, policy: EligibilityPolicy? = nil
  ) async throws(RPCError) -> [UserPurchases] {
    var byUser: [String: UserPurchases] = [:]
    var found = Set<String>()
    var tokens: [String: String] = [:]
    for t in transactions { if let token = t.appAccountToken { tokens[t.originalTransactionId] = token } }
    // Where the transactions carry none, the renewal info's: the token of the upcoming renewal,
    // given in the purchase options of a plan change (rule 26; Apple's
    // https://developer.apple.com/documentation/appstoreserverapi/jwsrenewalinfodecodedpayload).
    for r in renewalInfos where tokens[r.originalTransactionId] == nil {
      if let token = r.appAccountToken { tokens[r.originalTransactionId] = token }
    }
    func route(_ otid: String) async throws(RPCError) -> [String] {
      let users = try await stored { () throws(StoreError) in
        try await purchaseStore.users(appId: appID, environment: environment, originalTransactionId: otid)
      }
      found.formUnion(users)
      return users.isEmpty
        ? [AppAccountTokenOwnership.firstHolder(originalTransactionId: otid, appAccountToken: tokens[otid], policy: policy)] : users
    }
    for t in transactions {
      for user in try await route(t.originalTransactionId) {
        byUser[user, default: UserPurchases(user: UserKey(appId: appID, environment: environment, userId: user))].transactions.append(t)
      }
    }
    for r in renewalInfos {
      for user in try await route(r.originalTransactionId) {
        byUser[user, default: UserPurchases(user: UserKey(appId: appID, environment: environment, userId: user))].renewalInfos.append(r)
      }
    }
    // A user found holding the original transaction may be erased before the write: the write
    // then leaves them erased (the pseudo-users are created as before).
    for user in found { byUser[user]?.onlyIfStored = true }
    if let renewalInfoSnapshot {
      for (user, update) in byUser {
        let routed = Set(update.transactions.map(\.originalTransactionId))
        byUser[user]?.renewalInfoSnapshot = renewalInfoSnapshot.restricted(to: routed)
      }
    }
    return byUser.keys.sorted().map { byUser[$0]! }
  }

  /// Applies a notification's routed updates once (``Store/applyNotification(appId:notificationId:receivedMs:updates:)``).
  /// What was routed to a user erased since the routing is kept under the pseudo-users of its
  /// original transactions, as it would have been had the erasure come first: a notification's
  /// data is never lost, and an erased user is never brought back.
  /// - Returns: `nil` for a notification already applied.
  func applyNotification(appID: String, id: String, receivedMs: Int64, updates: [UserPurchases])
    async throws(RPCError) -> IngestSummary?
  {
    guard var written = try await stored({ () throws(StoreError) in
      try await purchaseStore.applyNotification(appId: appID, notificationId: id, receivedMs: receivedMs, updates: updates)
    }) else { return nil }
    if written.erasedMeanwhile.isEmpty { return written }
    let erased = Set(written.erasedMeanwhile)
    var unclaimed: [String: UserPurchases] = [:]
    for update in updates where erased.contains(update.user) {
      for otid in update.originalTransactionIds.sorted() {
        let user = UserKey(
          appId: appID, environment: update.user.environment,
          userId: Self.unclaimedUserID(originalTransactionId: otid))
        var part = unclaimed[user.userId] ?? UserPurchases(user: user)
        part.transactions += update.transactions.filter { $0.originalTransactionId == otid }
        part.renewalInfos += update.renewalInfos.filter { $0.originalTransactionId == otid }
        part.renewalInfoSnapshot = update.renewalInfoSnapshot.map { $0.restricted(to: [otid]) }
        unclaimed[user.userId] = part
      }
    }
    let kept = try await stored { () throws(StoreError) in
      try await purchaseStore.ingest(unclaimed.keys.sorted().map { unclaimed[$0]! }, atMs: receivedMs)
    }
    written.transactionsWritten += kept.transactionsWritten
    written.renewalInfosWritten += kept.renewalInfosWritten
    written.eventsAppended += kept.eventsAppended
    return written
  }
}

extension HTTPResponse {
  static func json(_ object: JSONObject, status: Int = 200) -> HTTPResponse {
    HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: JSONValue.object(object).serializedBytes())
  }
}

extension SubstatusService {
  /// Records a V2 `CONSUMPTION_REQUEST` for the responder, once per notification (a retry of the
  /// same notification finds its row), when the app's policy has a consumption policy; then wakes
  /// the responder. A failure is logged and left to Apple's retry of the notification.
  func recordConsumptionRequest(
    _ notification: NotificationV2, notificationId: String, cached: CachedApp,
    environment: SubscriptionDomain.Environment, transactions: [SubscriptionDomain.Transaction]
  ) async throws(RPCError) {
    guard notification.notificationType == .consumptionRequest, cached.app.policy.consumptionPolicy != nil,
      let transaction = transactions.first
    else { return }
    let now = self.environment.now()
    let request = ConsumptionRequest(
      appId: cached.app.appId, notificationId: notificationId, environment: environment,
      transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
      requestedMs: notification.signedDate ?? now, receivedMs: now,
      reason: notification.data?.consumptionRequestReason)
    let recorded = try await stored { () throws(StoreError) in try await consumptionRequestStore.recordConsumptionRequest(request) }
    if recorded {
      consumptionMetrics.count("recorded")
      consumptionSignal.signal()
    }
  }
}
