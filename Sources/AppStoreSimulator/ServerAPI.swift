import AppStoreSignedData
import Foundation
import HTTPServer
import SubstatusJSON

/// An App Store Server API error: the HTTP status and Apple's `errorCode`.
struct ServerAPIError: Error, Sendable {
  var httpStatus: Int
  var errorCode: Int64
  var errorMessage: String

  var response: HTTPResponse {
    jsonResponse(
      .object(["errorCode": .integer(errorCode), "errorMessage": .string(errorMessage)]),
      status: httpStatus)
  }

  static let invalidTransactionID = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_006, errorMessage: "Invalid transaction id.")
  static let transactionIDNotFound = ServerAPIError(
    httpStatus: 404, errorCode: 4_040_010, errorMessage: "Transaction id not found.")
  static let invalidRevision = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_005, errorMessage: "Invalid request revision.")
  static let startDateAfterEndDate = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_013,
    errorMessage: "Invalid request. The end date precedes the start date or the dates are the same."
  )
  static let invalidPaginationToken = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_014, errorMessage: "Invalid pagination token.")
  static let invalidStartDate = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_015, errorMessage: "Invalid start date.")
  static let invalidEndDate = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_016, errorMessage: "Invalid end date.")
  static let invalidNotificationType = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_018, errorMessage: "Invalid notification type.")
  static let multipleFiltersSupplied = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_019,
    errorMessage: "Invalid request. Too many filters were supplied.")
  static let invalidTestNotificationToken = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_020, errorMessage: "Invalid test notification token.")
  static let invalidSort = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_021, errorMessage: "Invalid sort.")
  static let invalidProductType = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_022, errorMessage: "Invalid product type.")
  static let invalidInAppOwnershipType = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_026, errorMessage: "Invalid in-app ownership type.")
  static let invalidRevoked = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_030,
    errorMessage: "Invalid request. The revoked parameter is invalid.")
  static let invalidStatus = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_031, errorMessage: "Invalid status.")
  static let generalBadRequest = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_000, errorMessage: "Bad request.")
  static let testNotificationNotFound = ServerAPIError(
    httpStatus: 404, errorCode: 4_040_008, errorMessage: "Test notification not found.")
}

/// An opaque position token: base64url of `asim:<kind>:<direction>:<position>`.
struct PositionToken: Equatable {
  var kind: String
  var ascending: Bool
  var position: Int

  var encoded: String {
    Base64URL.encode(Array("asim:\(kind):\(ascending ? "A" : "D"):\(position)".utf8))
  }

  init(kind: String, ascending: Bool, position: Int) {
    self.kind = kind
    self.ascending = ascending
    self.position = position
  }

  init?(decoding text: String, kind: String) {
    guard text.utf8.count <= 200, let bytes = Base64URL.decode(text) else { return nil }
    let parts = String(decoding: bytes, as: UTF8.self).split(separator: ":").map(String.init)
    guard parts.count == 4, parts[0] == "asim", parts[1] == kind,
      parts[2] == "A" || parts[2] == "D",
      let position = Int(parts[3]), position >= 0
    else { return nil }
    self.init(kind: kind, ascending: parts[2] == "A", position: position)
  }
}

extension AppStoreSimulator {
  static let historyPageSize = 20
  static let notificationHistoryPageSize = 20

  /// The App Store Server API routes, for production at `/inApps/…` and for the sandbox at
  /// `/sandbox/inApps/…`.
  func addServerAPIRoutes(_ router: inout HTTPRouter) {
    for (prefix, environment) in [("", StoreEnvironment.production), ("/sandbox", .sandbox)] {
      router.add("GET", prefix + "/inApps/v2/history/{transactionId}") { [self] request in
        await serverAPI(request, environment) { app throws(ServerAPIError) in
          try transactionHistory(request, app: app, environment: environment)
        }
      }
      router.add("GET", prefix + "/inApps/v1/subscriptions/{transactionId}") { [self] request in
        await serverAPI(request, environment) { app throws(ServerAPIError) in
          try subscriptionStatuses(request, app: app, environment: environment)
        }
      }
      router.add("GET", prefix + "/inApps/v1/transactions/{transactionId}") { [self] request in
        await serverAPI(request, environment) { app throws(ServerAPIError) in
          try transactionInfo(request, app: app, environment: environment)
        }
      }
      router.add("POST", prefix + "/inApps/v1/notifications/history") { [self] request in
        await serverAPI(request, environment) { app throws(ServerAPIError) in
          try notificationHistory(request, app: app, environment: environment)
        }
      }
      router.add("POST", prefix + "/inApps/v1/notifications/test") { [self] request in
        await serverAPI(request, environment) { app throws(ServerAPIError) in
          requestTestNotification(app: app, environment: environment)
        }
      }
      router.add("GET", prefix + "/inApps/v1/notifications/test/{testNotificationToken}") {
        [self] request in
        await serverAPI(request, environment) { app throws(ServerAPIError) in
          try testNotificationStatus(request, app: app, environment: environment)
        }
      }
      addServerAPI2026Routes(&router, prefix: prefix, environment: environment)
    }
  }

  /// Faults, then authorization (401 without a body, as Apple), then the endpoint.
  func serverAPI(
    _ request: HTTPRequest, _ environment: StoreEnvironment,
    _ body: (App) throws(ServerAPIError) -> JSONValue
  ) async -> HTTPResponse {
    await serverAPIResponse(request, environment) { app throws(ServerAPIError) in
      jsonResponse(try body(app))
    }
  }

  /// Faults, then authorization (401 without a body, as Apple), then the app's rate limit
  /// (`429` with `Retry-After`), then the endpoint, which makes the whole response.
  func serverAPIResponse(
    _ request: HTTPRequest, _ environment: StoreEnvironment,
    _ body: (App) throws(ServerAPIError) -> HTTPResponse
  ) async -> HTTPResponse {
    let fault = serverAPIFaults.withLock { rules -> ServerAPIFault? in
      guard
        let index = rules.firstIndex(where: {
          $0.environment == nil || $0.environment == environment
        })
      else { return nil }
      let rule = rules[index]
      if let remaining = rule.remaining {
        if remaining <= 1 {
          rules.remove(at: index)
        } else {
          rules[index].remaining = remaining - 1
        }
      }
      return rule
    }
    if let fault {
      if fault.latencyMs > 0 { try? await Task.sleep(for: .milliseconds(fault.latencyMs)) }
      if let status = fault.httpStatus {
        let code =
          fault.errorCode ?? (status == 429 ? 4_290_000 : status >= 500 ? 5_000_000 : 4_000_000)
        return ServerAPIError(httpStatus: status, errorCode: code, errorMessage: "Injected fault.")
          .response
      }
    }
    let apps = state.withLock { $0.apps }
    let nowSeconds = Int64(Date().timeIntervalSince1970)
    guard
      let (app, _) = ServerAPIAuthorization.authorize(
        header: request.headers["Authorization"], apps: apps, nowSeconds: nowSeconds)
    else { return HTTPResponse(status: 401) }
    if let retryAfterMs = rateLimiter.withLock({ $0.admit(app: app, environment: environment, nowMs: nowMs) }) {
      // https://developer.apple.com/documentation/appstoreserverapi/identifying-rate-limits:
      // 429 with RateLimitExceededError and `Retry-After`, the UNIX time in milliseconds from
      // which a request may succeed.
      var response = ServerAPIError.rateLimitExceeded.response
      response.headers.replaceOrAdd(name: "Retry-After", value: String(retryAfterMs))
      return response
    }
    // Process everything due by now first (renewals, expiries), as every control call does.
    _ = try? mutate { _ throws(SimError) in }
    do throws(ServerAPIError) {
      return try body(app)
    } catch {
      return error.response
    }
  }

  /// The customer (user) a transaction id, original transaction id or app transaction id of
  /// `app` in `environment` belongs to.
  func customer(
    _ request: HTTPRequest, app: App, environment: StoreEnvironment, state: SimulatorState
  )
    throws(ServerAPIError) -> String
  {
    let id = request.pathParameters["transactionId"] ?? ""
    guard !id.isEmpty, id.count <= 30, id.allSatisfy(\.isASCII), id.allSatisfy(\.isNumber) else {
      throw .invalidTransactionID
    }
    if let transaction = state.transactions[id], transaction.bundleID == app.bundleID,
      state.users[transaction.userID]?.environment == environment
    {
      return transaction.userID
    }
    for (key, appTransactionID) in state.appTransactionIDs where appTransactionID == id {
      let parts = key.split(separator: "\u{0}", maxSplits: 1).map(String.init)
      guard parts.count == 2, parts[0] == app.bundleID,
        state.users[parts[1]]?.environment == environment
      else { continue }
      return parts[1]
    }
    throw .transactionIDNotFound
  }

  func sign(_ payload: JSONValue, app: App) -> String {
    signing.sign(payload, mode: app.signing ?? .valid)
  }

  // MARK: Get Transaction History (v2)

  private func transactionHistory(_ request: HTTPRequest, app: App, environment: StoreEnvironment)
    throws(ServerAPIError) -> JSONValue
  {
    let sort = request.query("sort") ?? "ASCENDING"
    guard sort == "ASCENDING" || sort == "DESCENDING" else { throw .invalidSort }
    let ascending = sort == "ASCENDING"
    var after: PositionToken?
    if let text = request.query("revision"), !text.isEmpty {
      guard let token = PositionToken(decoding: text, kind: "rev"), token.ascending == ascending
      else {
        throw .invalidRevision
      }
      after = token
    }
    let startDate = try request.query("startDate").map { text throws(ServerAPIError) -> Int64 in
      guard let value = Int64(text), value >= 0 else { throw .invalidStartDate }
      return value
    }
    let endDate = try request.query("endDate").map { text throws(ServerAPIError) -> Int64 in
      guard let value = Int64(text), value >= 0 else { throw .invalidEndDate }
      return value
    }
    if let startDate, let endDate, startDate >= endDate { throw .startDateAfterEndDate }
    let productIDs = Set(request.queryItems.filter { $0.name == "productId" }.map(\.value))
    var productTypes = Set<ProductType>()
    for item in request.queryItems where item.name == "productType" {
      guard
        let type = [ProductType.autoRenewable, .nonRenewing, .nonConsumable, .consumable]
          .first(where: { $0.historyFilterName == item.value })
      else { throw .invalidProductType }
      productTypes.insert(type)
    }
    let groups = Set(
      request.queryItems.filter { $0.name == "subscriptionGroupIdentifier" }.map(\.value))
    var ownership: Ownership?
    if let text = request.query("inAppOwnershipType") {
      guard let parsed = Ownership(rawValue: text) else { throw .invalidInAppOwnershipType }
      ownership = parsed
    }
    var revoked: Bool?
    if let text = request.query("revoked") {
      guard text == "true" || text == "false" else { throw .invalidRevoked }
      revoked = text == "true"
    }

    return try state.withLock { state throws(ServerAPIError) -> JSONValue in
      let userID = try customer(request, app: app, environment: environment, state: state)
      let all = state.receiptTransactions(app.bundleID, userID)
      var candidates = all.filter { transaction in
        (startDate.map { transaction.purchaseMs >= $0 } ?? true)
          && (endDate.map { transaction.purchaseMs < $0 } ?? true)
          && (productIDs.isEmpty || productIDs.contains(transaction.productID))
          && (productTypes.isEmpty || productTypes.contains(transaction.productType))
          && (groups.isEmpty || transaction.groupID.map(groups.contains) == true)
          && (ownership.map { transaction.ownership == $0 } ?? true)
          && (revoked.map { ($0) == (transaction.cancellationMs != nil && !transaction.isUpgraded) }
            ?? true)
      }
      if ascending {
        let position = after?.position ?? 0
        candidates = candidates.filter { state.revision(of: $0) > position }
          .sorted { state.revision(of: $0) < state.revision(of: $1) }
      } else {
        let position = after?.position ?? Int.max
        candidates = candidates.filter { state.revision(of: $0) < position }
          .sorted { state.revision(of: $0) > state.revision(of: $1) }
      }
      let page = candidates.prefix(Self.historyPageSize)
      let hasMore = candidates.count > page.count
      let position =
        page.last.map { state.revision(of: $0) }
        ?? after?.position ?? (ascending ? 0 : Int.max)
      let signedDate = state.now
      var object = JSONObject()
      object.append(
        "revision",
        .string(PositionToken(kind: "rev", ascending: ascending, position: position).encoded))
      object.append("bundleId", .string(app.bundleID))
      object.append("appAppleId", .integer(app.appleAppID))
      object.append("environment", .string(environment.receiptValue))
      object.append("hasMore", .bool(hasMore))
      object.append(
        "signedTransactions",
        .array(
          page.map { .string(sign(state.transactionPayload($0, signedDate: signedDate), app: app)) }
        ))
      return .object(object)
    }
  }

  // MARK: Get All Subscription Statuses

  private func subscriptionStatuses(_ request: HTTPRequest, app: App, environment: StoreEnvironment)
    throws(ServerAPIError) -> JSONValue
  {
    var statuses = Set<Int>()
    for item in request.queryItems where item.name == "status" {
      guard let value = Int(item.value), (1...5).contains(value) else { throw .invalidStatus }
      statuses.insert(value)
    }
    return try state.withLock { state throws(ServerAPIError) -> JSONValue in
      let userID = try customer(request, app: app, environment: environment, state: state)
      let now = state.now
      let owned = state.subscriptions.values
        .filter { $0.bundleID == app.bundleID && $0.userID == userID }
        .sorted { ($0.groupID, $0.originalTransactionID) < ($1.groupID, $1.originalTransactionID) }
      var data: [JSONValue] = []
      var groupOrder: [String] = []
      var byGroup: [String: [JSONValue]] = [:]
      for subscription in owned {
        let status = state.appleStatus(subscription, at: now)
        guard statuses.isEmpty || statuses.contains(status),
          let latest = state.transactions[subscription.latestTransactionID]
        else { continue }
        var item = JSONObject()
        item.append("originalTransactionId", .string(subscription.originalTransactionID))
        item.append("status", .integer(status))
        item.append(
          "signedTransactionInfo",
          .string(sign(state.transactionPayload(latest, signedDate: now), app: app)))
        item.append(
          "signedRenewalInfo",
          .string(sign(state.renewalInfoPayload(subscription, signedDate: now), app: app)))
        if byGroup[subscription.groupID] == nil { groupOrder.append(subscription.groupID) }
        byGroup[subscription.groupID, default: []].append(.object(item))
      }
      for group in groupOrder {
        data.append(
          .object([
            "subscriptionGroupIdentifier": .string(group),
            "lastTransactions": .array(byGroup[group] ?? []),
          ]))
      }
      var object = JSONObject()
      object.append("environment", .string(environment.receiptValue))
      object.append("bundleId", .string(app.bundleID))
      object.append("appAppleId", .integer(app.appleAppID))
      object.append("data", .array(data))
      return .object(object)
    }
  }

  // MARK: Get Transaction Info

  private func transactionInfo(_ request: HTTPRequest, app: App, environment: StoreEnvironment)
    throws(ServerAPIError) -> JSONValue
  {
    let id = request.pathParameters["transactionId"] ?? ""
    guard !id.isEmpty, id.count <= 30, id.allSatisfy(\.isASCII), id.allSatisfy(\.isNumber) else {
      throw .invalidTransactionID
    }
    return try state.withLock { state throws(ServerAPIError) -> JSONValue in
      guard let transaction = state.transactions[id], transaction.bundleID == app.bundleID,
        state.users[transaction.userID]?.environment == environment
      else { throw .transactionIDNotFound }
      return .object([
        "signedTransactionInfo": .string(
          sign(state.transactionPayload(transaction, signedDate: state.now), app: app))
      ])
    }
  }

  // MARK: Get Notification History

  private func notificationHistory(_ request: HTTPRequest, app: App, environment: StoreEnvironment)
    throws(ServerAPIError) -> JSONValue
  {
    guard let value = try? JSONValue(parsing: request.body), let body = value.objectValue else {
      throw .generalBadRequest
    }
    guard let startDate = body["startDate"]?.int64Value else { throw .invalidStartDate }
    guard let endDate = body["endDate"]?.int64Value else { throw .invalidEndDate }
    guard startDate < endDate else { throw .startDateAfterEndDate }
    let type = body["notificationType"]?.stringValue
    if body["notificationType"].map({ !$0.isNull && $0.stringValue == nil }) == true {
      throw .invalidNotificationType
    }
    let subtype = body["notificationSubtype"]?.stringValue
    let transactionID = body["transactionId"]?.stringValue
    if type != nil && transactionID != nil { throw .multipleFiltersSupplied }
    let onlyFailures = body["onlyFailures"]?.boolValue ?? false
    var after = 0
    if let text = request.query("paginationToken"), !text.isEmpty {
      guard let token = PositionToken(decoding: text, kind: "nh") else {
        throw .invalidPaginationToken
      }
      after = token.position
    }
    var customer: (bundleID: String, userID: String)?
    if let transactionID {
      var fake = request
      fake.pathParameters["transactionId"] = transactionID
      let userID = try state.withLock { state throws(ServerAPIError) -> String in
        try self.customer(fake, app: app, environment: environment, state: state)
      }
      customer = (app.bundleID, userID)
    }
    let matching = dispatcher.deliveries.filter { delivery in
      guard let v2 = delivery.v2, delivery.bundleID == app.bundleID,
        delivery.environment == environment,
        delivery.id > after, v2.signedDateMs >= startDate, v2.signedDateMs <= endDate
      else { return false }
      if let type, delivery.notificationType != type { return false }
      if let subtype, delivery.subtype != subtype { return false }
      if let customer, delivery.userID != customer.userID { return false }
      if onlyFailures && delivery.state == .delivered { return false }
      return true
    }.sorted { $0.id < $1.id }
    let page = matching.prefix(Self.notificationHistoryPageSize)
    let hasMore = matching.count > page.count
    var object = JSONObject()
    object.append("notificationHistory", .array(page.map(historyItem)))
    object.append("hasMore", .bool(hasMore))
    if hasMore, let last = page.last {
      object.append(
        "paginationToken",
        .string(PositionToken(kind: "nh", ascending: true, position: last.id).encoded))
    }
    return .object(object)
  }

  private func historyItem(_ delivery: Delivery) -> JSONValue {
    var item = JSONObject()
    item.append("signedPayload", .string(delivery.v2?.signedPayload ?? ""))
    item.append("sendAttempts", .array(delivery.attempts.map(Self.sendAttemptJSON)))
    return .object(item)
  }

  static func sendAttemptJSON(_ attempt: DeliveryAttempt) -> JSONValue {
    .object([
      "attemptDate": .integer(attempt.atMs),
      "sendAttemptResult": .string(sendAttemptResult(attempt)),
    ])
  }

  /// Apple's `sendAttemptResult` for an attempt.
  static func sendAttemptResult(_ attempt: DeliveryAttempt) -> String {
    if let status = attempt.httpStatus {
      return (200...206).contains(status) ? "SUCCESS" : "UNSUCCESSFUL_HTTP_RESPONSE_CODE"
    }
    let error = (attempt.error ?? "").lowercased()
    if error.contains("timed out") { return "TIMED_OUT" }
    if error.contains("invalid notification url") { return "OTHER" }
    return "NO_RESPONSE"
  }

  // MARK: Request a Test Notification

  private func requestTestNotification(app: App, environment: StoreEnvironment) -> JSONValue {
    let atMs = nowMs
    _ = try? mutate { state throws(SimError) in
      state.pendingEvents.append(
        NotificationEvent(
          kind: .test, bundleID: app.bundleID, userID: "", environment: environment,
          originalTransactionID: nil, atMs: state.now))
    }
    let delivery = dispatcher.deliveries.last {
      $0.bundleID == app.bundleID && $0.environment == environment && $0.notificationType == "TEST"
    }
    let token = (delivery?.v2?.notificationUUID ?? UUID().uuidString.lowercased()) + "_\(atMs)"
    return .object(["testNotificationToken": .string(token)])
  }

  private func testNotificationStatus(
    _ request: HTTPRequest, app: App, environment: StoreEnvironment
  )
    throws(ServerAPIError) -> JSONValue
  {
    let token = request.pathParameters["testNotificationToken"] ?? ""
    guard let uuid = token.split(separator: "_").first.map(String.init), !uuid.isEmpty else {
      throw .invalidTestNotificationToken
    }
    guard
      let delivery = dispatcher.deliveries.first(where: {
        $0.bundleID == app.bundleID && $0.environment == environment
          && $0.v2?.notificationUUID == uuid
      }), let v2 = delivery.v2
    else { throw .testNotificationNotFound }
    var object = JSONObject()
    object.append("signedPayload", .string(v2.signedPayload))
    object.append("sendAttempts", .array(delivery.attempts.map(Self.sendAttemptJSON)))
    if let first = delivery.attempts.first {
      object.append("firstSendAttemptResult", .string(Self.sendAttemptResult(first)))
    }
    return .object(object)
  }
}
