import Foundation
import HTTPServer
import SubstatusJSON

/// A request body parsed as a JSON object, with typed field access that names the bad field.
struct JSONBody {
  var object: JSONObject

  init(_ request: HTTPRequest) throws(HTTPError) {
    guard !request.body.isEmpty else {
      object = JSONObject()
      return
    }
    let value: JSONValue
    do {
      value = try JSONValue(parsing: request.body)
    } catch {
      throw .badRequest("request body is not valid JSON: \(error)")
    }
    guard let object = value.objectValue else {
      throw .badRequest("request body must be a JSON object")
    }
    self.object = object
  }

  init(object: JSONObject) { self.object = object }

  func optionalString(_ key: String) throws(HTTPError) -> String? {
    guard let value = object[key], !value.isNull else { return nil }
    guard let string = value.stringValue else {
      throw .badRequest("field '\(key)' must be a string")
    }
    return string
  }

  func string(_ key: String) throws(HTTPError) -> String {
    guard let string = try optionalString(key), !string.isEmpty else {
      throw .badRequest("field '\(key)' is required")
    }
    return string
  }

  func optionalInt(_ key: String) throws(HTTPError) -> Int64? {
    guard let value = object[key], !value.isNull else { return nil }
    if let int = value.int64Value { return int }
    if let text = value.stringValue, let int = Int64(text) { return int }
    throw .badRequest("field '\(key)' must be an integer")
  }

  func optionalDouble(_ key: String) throws(HTTPError) -> Double? {
    guard let value = object[key], !value.isNull else { return nil }
    if let double = value.doubleValue { return double }
    if let text = value.stringValue, let double = Double(text) { return double }
    throw .badRequest("field '\(key)' must be a number")
  }

  func optionalBool(_ key: String) throws(HTTPError) -> Bool? {
    guard let value = object[key], !value.isNull else { return nil }
    if let bool = value.boolValue { return bool }
    if let text = value.stringValue {
      if text == "true" || text == "1" { return true }
      if text == "false" || text == "0" { return false }
    }
    throw .badRequest("field '\(key)' must be a boolean")
  }

  func objects(_ key: String) throws(HTTPError) -> [JSONBody] {
    guard let value = object[key], !value.isNull else { return [] }
    guard let array = value.arrayValue else { throw .badRequest("field '\(key)' must be an array") }
    var result: [JSONBody] = []
    for (index, element) in array.enumerated() {
      guard let object = element.objectValue else {
        throw .badRequest("field '\(key)[\(index)]' must be an object")
      }
      result.append(JSONBody(object: object))
    }
    return result
  }

  func optionalObject(_ key: String) throws(HTTPError) -> JSONBody? {
    guard let value = object[key], !value.isNull else { return nil }
    guard let object = value.objectValue else {
      throw .badRequest("field '\(key)' must be an object")
    }
    return JSONBody(object: object)
  }
}

func jsonResponse(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
  .json(value.serializedBytes(), status: status)
}

extension SimError {
  var http: HTTPError { HTTPError(status: status, message: message) }
}

private func identifier(_ text: String, field: String) throws(HTTPError) -> String {
  let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
  guard !text.isEmpty, text.count <= 200, text.allSatisfy({ allowed.contains($0) }) else {
    throw .badRequest("field '\(field)' must be 1-200 characters of A-Z a-z 0-9 . _ -")
  }
  return text
}

private func parseEnvironment(_ text: String?, field: String) throws(HTTPError) -> StoreEnvironment?
{
  guard let text else { return nil }
  guard let environment = StoreEnvironment(rawValue: text.lowercased()) else {
    throw .badRequest("field '\(field)' must be 'production' or 'sandbox'")
  }
  return environment
}

private func parseOffer(_ body: JSONBody, field: String, needsID: String?) throws(HTTPError) -> (
  String?, Offer
) {
  let modeText = try body.string("type")
  guard let mode = OfferMode(rawValue: modeText) else {
    throw .badRequest("field '\(field).type' must be free_trial, pay_as_you_go or pay_up_front")
  }
  var duration: SubscriptionDuration?
  if let text = try body.optionalString("duration") {
    guard let parsed = SubscriptionDuration(iso: text) else {
      throw .badRequest("field '\(field).duration' must be ISO-8601 like P3D, P1W, P1M, P1Y")
    }
    duration = parsed
  }
  let periods = Int(try body.optionalInt("periods") ?? 1)
  if mode != .payAsYouGo && duration == nil {
    throw .badRequest("field '\(field).duration' is required for \(modeText)")
  }
  guard (1...100).contains(periods) else {
    throw .badRequest("field '\(field).periods' must be 1...100")
  }
  let id = try needsID.map { key throws(HTTPError) in try body.string(key) }
  let price = try parsePrice(body, field: "\(field).price")
  return (id, Offer(mode: mode, price: price, duration: duration, periods: periods))
}

/// A price in currency units (`9.99`) as milliunits (`9990`).
func parsePrice(_ body: JSONBody, field: String) throws(HTTPError) -> Int64? {
  guard let price = try body.optionalDouble("price") else { return nil }
  guard price >= 0, price < 1e9 else { throw .badRequest("field '\(field)' must be 0...999999999") }
  return Int64((price * 1000).rounded())
}

private func parseProduct(_ body: JSONBody, index: Int) throws(HTTPError) -> Product {
  let field = "products[\(index)]"
  let id = try body.string("product_id")
  guard let type = ProductType(rawValue: try body.string("type")) else {
    throw .badRequest(
      "field '\(field).type' must be auto_renewable, non_renewing, non_consumable or consumable")
  }
  var product = Product(
    productID: id, type: type, groupID: try body.optionalString("subscription_group_id"),
    duration: nil,
    level: Int(try body.optionalInt("level") ?? 1),
    familyShareable: try body.optionalBool("family_shareable") ?? false,
    introductoryOffer: nil, promotionalOffers: [:], offerCodes: [:])
  product.price = try parsePrice(body, field: "\(field).price")
  if let currency = try body.optionalString("currency") {
    guard currency.count == 3, currency.allSatisfy({ $0.isASCII && $0.isUppercase }) else {
      throw .badRequest("field '\(field).currency' must be an ISO 4217 code like USD")
    }
    product.currency = currency
  }
  if let text = try body.optionalString("duration") {
    guard let duration = SubscriptionDuration(iso: text) else {
      throw .badRequest("field '\(field).duration' must be ISO-8601 like P1W, P1M, P3M, P1Y")
    }
    product.duration = duration
  }
  if type == .autoRenewable {
    guard product.groupID != nil else {
      throw .badRequest("field '\(field).subscription_group_id' is required")
    }
    guard product.duration != nil else {
      throw .badRequest("field '\(field).duration' is required")
    }
  }
  if let intro = try body.optionalObject("introductory_offer") {
    product.introductoryOffer = try parseOffer(
      intro, field: "\(field).introductory_offer", needsID: nil
    ).1
  }
  for promo in try body.objects("promotional_offers") {
    let (id, offer) = try parseOffer(promo, field: "\(field).promotional_offers", needsID: "id")
    product.promotionalOffers[id!] = offer
  }
  for code in try body.objects("offer_codes") {
    let (name, offer) = try parseOffer(code, field: "\(field).offer_codes", needsID: "ref_name")
    product.offerCodes[name!] = offer
  }
  if let ids = body.object["win_back_offer_ids"], !ids.isNull {
    guard let array = ids.arrayValue,
      case let offers = array.compactMap(\.stringValue),
      offers.count == array.count, offers.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 64 })
    else {
      throw .badRequest("field '\(field).win_back_offer_ids' must be an array of offer ids")
    }
    product.winBackOfferIDs = offers
  }
  if let monthly = try body.optionalObject("commitment_plan") {
    // A monthly billing plan with a 12-month commitment beside the up-front one (App Store
    // Server API 1.21): only for a one-year auto-renewable.
    guard type == .autoRenewable, product.duration == SubscriptionDuration(count: 1, unit: .year) else {
      throw .badRequest("field '\(field).commitment_plan' is only for a one-year auto-renewable (duration P1Y)")
    }
    guard let price = try parsePrice(monthly, field: "\(field).commitment_plan.price") else {
      throw .badRequest("field '\(field).commitment_plan.price' (the monthly price) is required")
    }
    product.commitmentMonthlyPrice = price
  }
  if type != .autoRenewable
    && (product.introductoryOffer != nil || !product.promotionalOffers.isEmpty
      || !product.offerCodes.isEmpty || product.winBackOfferIDs != nil)
  {
    throw .badRequest("field '\(field)': only auto-renewable subscriptions have offers")
  }
  return product
}

extension AppStoreSimulator {
  /// The simulator's HTTP routes: `verifyReceipt` endpoints, the control API, `/healthz`.
  public func router() -> HTTPRouter {
    var router = HTTPRouter()
    router.add("GET", "/healthz") { _ in .text("ok") }
    for (path, environment) in [
      ("/verifyReceipt", StoreEnvironment.production), ("/production/verifyReceipt", .production),
      ("/sandbox/verifyReceipt", .sandbox),
    ] {
      router.add("POST", path) { [self] request in
        await verifyReceipt(request, endpoint: environment)
      }
      router.add("GET", path) { _ in
        jsonResponse(
          .object(["status": .integer(21000), "environment": .string(environment.receiptValue)]))
      }
    }
    addControlRoutes(&router)
    addControlRoutes2026(&router)
    addRetentionRoutes(&router)
    addServerAPIRoutes(&router)
    addSignedDataControlRoutes(&router)
    return router
  }

  func verifyReceipt(_ request: HTTPRequest, endpoint: StoreEnvironment) async -> HTTPResponse {
    verifyReceiptRequests.withLock { $0[endpoint.rawValue, default: 0] += 1 }
    let fault = faults.withLock { rules -> FaultRule? in
      guard
        let index = rules.firstIndex(where: { $0.environment == nil || $0.environment == endpoint })
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
      if let status = fault.httpStatus { return .error(status: status, message: "injected fault") }
      if let status = fault.status {
        var object: JSONObject = [
          "status": .integer(status), "environment": .string(endpoint.receiptValue),
        ]
        if let retryable = fault.isRetryable ?? ((21100...21199).contains(status) ? true : nil) {
          object.append(fault.retryableKey, .bool(retryable))
        }
        return jsonResponse(.object(object))
      }
    }
    guard let value = try? JSONValue(parsing: request.body), let body = value.objectValue else {
      return jsonResponse(
        .object(["status": .integer(21002), "environment": .string(endpoint.receiptValue)]))
    }
    let receiptData = body["receipt-data"]?.stringValue
    let password = body["password"]?.stringValue
    let exclude =
      body["exclude-old-transactions"].map { $0.boolValue ?? ($0.stringValue == "true") } ?? false
    let response =
      (try? mutate { state throws(SimError) in
        state.verifyReceipt(
          receiptData: receiptData, password: password, excludeOldTransactions: exclude,
          endpoint: endpoint)
      })?.0
    return jsonResponse(response ?? .object(["status": .integer(21009)]))
  }

  /// Runs a control operation and answers with the receipt, the transactions it created or
  /// changed, and the notifications it queued.
  func operation(
    bundleID: String?, userID: String?,
    _ body: (inout SimulatorState) throws(SimError) -> [String]
  ) throws(HTTPError) -> HTTPResponse {
    do throws(SimError) {
      let (result, notifications) = try mutate { state throws(SimError) -> JSONValue in
        let changed = try body(&state)
        var object = JSONObject()
        object.append("now_ms", .integer(state.now))
        if let bundleID, let userID,
          let token = state.currentToken(bundleID: bundleID, userID: userID)
        {
          object.append("receipt", .string(token.encoded))
        }
        var receipts = JSONObject()
        var seen = Set<String>()
        var rendered: [JSONValue] = []
        for id in changed where seen.insert(id).inserted {
          guard let transaction = state.transactions[id] else { continue }
          var entry = state.render(transaction).objectValue ?? JSONObject()
          entry.append("user_id", .string(transaction.userID))
          entry.append("bundle_id", .string(transaction.bundleID))
          rendered.append(.object(entry))
          let key = "\(transaction.bundleID)/\(transaction.userID)"
          if receipts[key] == nil,
            let token = state.currentToken(
              bundleID: transaction.bundleID, userID: transaction.userID)
          {
            receipts[key] = .string(token.encoded)
          }
        }
        object.append("transactions", .array(rendered))
        object.append("receipts", .object(receipts))
        return .object(object)
      }
      guard case .object(var object) = result else { return jsonResponse(result) }
      object.append(
        "notifications",
        .array(
          notifications.map {
            .object(["notification_type": .string($0.type), "user_id": .string($0.userID)])
          }))
      return jsonResponse(.object(object))
    } catch {
      throw error.http
    }
  }

  private func appJSON(_ app: App) -> JSONValue {
    var object = JSONObject()
    object.append("bundle_id", .string(app.bundleID))
    object.append("apple_app_id", .integer(app.appleAppID))
    object.append("shared_secret_count", .integer(app.sharedSecrets.count))
    object.append("notification_url", app.notificationURL.map { .string($0) } ?? .null)
    object.append("retention_url", app.retentionURL.map { .string($0) } ?? .null)
    object.append("grace_period_days", .integer(app.gracePeriodDays))
    object.append("notification_retry_compression", .double(app.notificationRetryCompression))
    object.append("sandbox_notification_retries", .bool(app.sandboxNotificationRetries))
    object.append("notification_version", .string((app.notificationVersion ?? .v1).rawValue))
    object.append("signing", .string((app.signing ?? .valid).rawValue))
    object.append("api_key_ids", .array((app.apiKeys ?? []).map { .string($0.keyID) }))
    object.append("products", .array(app.products.keys.sorted().map { .string($0) }))
    return .object(object)
  }

  func applyAppSettings(_ body: JSONBody, to app: inout App) throws(HTTPError) {
    if let secret = try body.optionalString("shared_secret") {
      guard !secret.isEmpty else { throw .badRequest("field 'shared_secret' must not be empty") }
      var extra: [String] = []
      if let value = body.object["additional_shared_secrets"], !value.isNull {
        guard let array = value.arrayValue, array.allSatisfy({ $0.stringValue != nil }) else {
          throw .badRequest("field 'additional_shared_secrets' must be an array of strings")
        }
        extra = array.compactMap(\.stringValue)
      }
      app.sharedSecrets = [secret] + extra
    }
    if body.object["notification_url"] != nil {
      if let url = try body.optionalString("notification_url") {
        guard let parsed = URL(string: url), parsed.scheme == "http" || parsed.scheme == "https",
          parsed.host != nil
        else { throw .badRequest("field 'notification_url' must be an http(s) URL") }
        app.notificationURL = url
      } else {
        app.notificationURL = nil
      }
    }
    if body.object["retention_url"] != nil {
      if let url = try body.optionalString("retention_url") {
        guard let parsed = URL(string: url), parsed.scheme == "http" || parsed.scheme == "https",
          parsed.host != nil
        else { throw .badRequest("field 'retention_url' must be an http(s) URL") }
        app.retentionURL = url
      } else {
        app.retentionURL = nil
      }
    }
    if let days = try body.optionalInt("grace_period_days") {
      guard [0, 3, 6, 16, 28].contains(days) else {
        throw .badRequest(
          "field 'grace_period_days' must be 0, 3, 16 or 28 (6 for the old weekly grace)")
      }
      app.gracePeriodDays = Int(days)
    }
    if let compression = try body.optionalDouble("notification_retry_compression") {
      guard compression >= 1 else {
        throw .badRequest("field 'notification_retry_compression' must be >= 1")
      }
      app.notificationRetryCompression = compression
    }
    if let retries = try body.optionalBool("sandbox_notification_retries") {
      app.sandboxNotificationRetries = retries
    }
    if let text = try body.optionalString("notification_version") {
      guard let version = NotificationVersion(rawValue: text.lowercased()) else {
        throw .badRequest("field 'notification_version' must be 'v1' or 'v2'")
      }
      app.notificationVersion = version
    }
    for (key, environment) in [("server_api_rate_limit", "production"), ("sandbox_server_api_rate_limit", "sandbox")] {
      guard let rate = try body.optionalDouble(key) else { continue }
      guard rate > 0, rate <= 100_000 else { throw .badRequest("field '\(key)' must be 0 < rate <= 100000 requests/s") }
      if environment == "production" { app.serverAPIRatePerSecond = rate } else { app.sandboxServerAPIRatePerSecond = rate }
    }
    if let text = try body.optionalString("signing") {
      guard let mode = SigningMode(rawValue: text) else {
        throw .badRequest(
          "field 'signing' must be one of \(SigningMode.allCases.map(\.rawValue).joined(separator: ", "))"
        )
      }
      app.signing = mode
    }
    var index = 0
    for product in try body.objects("products") {
      let parsed = try parseProduct(product, index: index)
      app.products[parsed.productID] = parsed
      index += 1
    }
  }

  private func addControlRoutes(_ router: inout HTTPRouter) {
    router.add("GET", "/control/clock") { [self] _ in
      let now = nowMs
      return jsonResponse(
        .object([
          "now_ms": .integer(now), "now": .string(AppleTime.iso(now)),
          "time_scale": .double(configuration.timeScale),
        ]))
    }
    router.add("POST", "/control/clock/advance") { [self] request in
      let body = try JSONBody(request)
      var delta: Int64 = 0
      if let ms = try body.optionalInt("ms") { delta += ms }
      if let seconds = try body.optionalInt("seconds") { delta += seconds * 1000 }
      if let minutes = try body.optionalInt("minutes") { delta += minutes * 60_000 }
      if let hours = try body.optionalInt("hours") { delta += hours * 3_600_000 }
      if let days = try body.optionalInt("days") { delta += days * AppleTime.dayMs }
      if let text = try body.optionalString("duration") {
        guard let duration = SubscriptionDuration(iso: text) else {
          throw HTTPError.badRequest("field 'duration' must be ISO-8601 like P1D, P1W, P1M")
        }
        let now = nowMs
        delta += duration.end(from: now) - now
      }
      guard delta >= 0 else { throw HTTPError.badRequest("the clock only moves forward") }
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        let before = state.nextSeq
        state.advance(to: state.now + delta)
        return state.transactions(since: before)
      }
    }
    router.add("POST", "/control/clock/set") { [self] request in
      let body = try JSONBody(request)
      guard let target = try body.optionalInt("now_ms") else {
        throw HTTPError.badRequest("field 'now_ms' is required")
      }
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        guard target >= state.now else {
          throw .badRequest("field 'now_ms' is in the past; the clock only moves forward")
        }
        let before = state.nextSeq
        state.advance(to: target)
        return state.transactions(since: before)
      }
    }

    router.add("POST", "/control/apps") { [self] request in
      let body = try JSONBody(request)
      let bundleID = try identifier(try body.string("bundle_id"), field: "bundle_id")
      _ = try body.string("shared_secret")
      var app = App(
        bundleID: bundleID, appleAppID: try body.optionalInt("apple_app_id") ?? 0,
        sharedSecrets: [],
        notificationURL: nil, gracePeriodDays: 0,
        notificationRetryCompression: configuration.notificationRetryCompression,
        sandboxNotificationRetries: false)
      try applyAppSettings(body, to: &app)
      let registered = app
      let exists = state.withLock { state in
        if state.apps[bundleID] != nil { return true }
        state.register(registered)
        return false
      }
      if exists { throw HTTPError(status: 409, message: "app '\(bundleID)' is already registered") }
      return jsonResponse(appJSON(registered), status: 201)
    }
    router.add("GET", "/control/apps/{bundle_id}") { [self] request in
      let bundleID = request.pathParameters["bundle_id"]!
      guard let app = state.withLock({ $0.apps[bundleID] }) else {
        throw HTTPError.notFound("app '\(bundleID)' is not registered")
      }
      return jsonResponse(appJSON(app))
    }
    for method in ["PATCH", "PUT"] {
      router.add(method, "/control/apps/{bundle_id}") { [self] request in
        let bundleID = request.pathParameters["bundle_id"]!
        let body = try JSONBody(request)
        guard var app = state.withLock({ $0.apps[bundleID] }) else {
          throw HTTPError.notFound("app '\(bundleID)' is not registered")
        }
        try applyAppSettings(body, to: &app)
        let updated = app
        state.withLock { $0.apps[bundleID] = updated }
        return jsonResponse(appJSON(updated))
      }
    }

    router.add("POST", "/control/users") { [self] request in
      let body = try JSONBody(request)
      let id = try body.optionalString("user_id").map { text throws(HTTPError) in
        try identifier(text, field: "user_id")
      }
      let environment =
        try parseEnvironment(try body.optionalString("environment"), field: "environment")
        ?? .sandbox
      let storefront = try body.optionalString("storefront")
      if let storefront, Storefront.ids[storefront] == nil {
        throw HTTPError.badRequest(
          "field 'storefront' must be one of \(Storefront.ids.keys.sorted().joined(separator: ", "))"
        )
      }
      do throws(SimError) {
        let (user, _) = try mutate { state throws(SimError) in
          var user = try state.createUser(id: id, environment: environment)
          user.storefront = storefront
          state.users[user.userID] = user
          return user
        }
        return jsonResponse(userJSON(user), status: 201)
      } catch { throw error.http }
    }
    router.add("GET", "/control/users/{user_id}") { [self] request in
      let id = request.pathParameters["user_id"]!
      guard let user = state.withLock({ $0.users[id] }) else {
        throw HTTPError.notFound("user '\(id)' does not exist")
      }
      return jsonResponse(userJSON(user))
    }
    router.add("DELETE", "/control/users/{user_id}") { [self] request in
      let id = request.pathParameters["user_id"]!
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        _ = try state.user(id)
        state.users[id]!.deleted = true
        return []
      }
    }
    router.add("POST", "/control/users/{user_id}/billing-failure") { [self] request in
      let id = request.pathParameters["user_id"]!
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        try state.setBillingFails(userID: id)
        return []
      }
    }
    router.add("POST", "/control/users/{user_id}/billing-recover") { [self] request in
      let id = request.pathParameters["user_id"]!
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        try state.recover(userID: id)
      }
    }
    router.add("POST", "/control/users/{user_id}/family/members") { [self] request in
      let organizer = request.pathParameters["user_id"]!
      let member = try JSONBody(request).string("user_id")
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        try state.addFamilyMember(organizerID: organizer, memberID: member)
      }
    }
    router.add("DELETE", "/control/users/{user_id}/family/members/{member_id}") { [self] request in
      let organizer = request.pathParameters["user_id"]!
      let member = request.pathParameters["member_id"]!
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        try state.removeFamilyMember(memberID: member, organizerID: organizer)
      }
    }
    router.add("POST", "/control/users/{user_id}/family/leave") { [self] request in
      let member = request.pathParameters["user_id"]!
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        try state.removeFamilyMember(memberID: member, organizerID: nil)
      }
    }

    let prefix = "/control/apps/{bundle_id}/users/{user_id}"
    router.add("GET", prefix + "/receipt") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        _ = try state.app(bundleID)
        _ = try state.user(userID)
        return state.receiptTransactions(bundleID, userID).map(\.transactionID)
      }
    }
    router.add("GET", prefix + "/transaction-receipt") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      guard let id = request.query("transaction_id"), !id.isEmpty else {
        throw HTTPError.badRequest("query argument 'transaction_id' is required")
      }
      let token = try state.withLock { state throws(HTTPError) -> String in
        guard let transaction = state.transactions[id], transaction.bundleID == bundleID,
          transaction.userID == userID, let user = state.users[userID]
        else { throw .notFound("transaction '\(id)' is not in the receipt of '\(userID)'") }
        return ReceiptToken(
          environment: user.environment, snapshotSeq: transaction.seq, issuedMs: state.now,
          bundleID: bundleID, userID: userID, transactionID: id
        ).encoded
      }
      return jsonResponse(.object(["receipt": .string(token)]))
    }
    router.add("POST", prefix + "/purchase") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let productID = try body.string("product_id")
      var offer: OfferRequest?
      if let object = try body.optionalObject("offer") {
        switch try object.string("type") {
        case "introductory": offer = .introductory
        case "promotional": offer = .promotional(try object.string("id"))
        case "offer_code": offer = .offerCode(try object.string("ref_name"))
        default:
          throw HTTPError.badRequest(
            "field 'offer.type' must be introductory, promotional or offer_code")
        }
      }
      let requested = offer
      let plan = try body.optionalString("billing_plan")
      guard plan == nil || plan == "MONTHLY" || plan == "BILLED_UPFRONT" else {
        throw HTTPError.badRequest("field 'billing_plan' must be MONTHLY or BILLED_UPFRONT")
      }
      let token = try body.optionalString("app_account_token")
      if let token, UUID(uuidString: token) == nil {
        throw HTTPError.badRequest("field 'app_account_token' must be a UUID")
      }
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.purchase(
          bundleID: bundleID, userID: userID, productID: productID, offer: requested,
          appAccountToken: token?.lowercased(), billingPlan: plan)
      }
    }
    router.add("POST", prefix + "/change-product") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let productID = try body.string("product_id")
      let token = try body.optionalString("app_account_token")
      if let token, UUID(uuidString: token) == nil {
        throw HTTPError.badRequest("field 'app_account_token' must be a UUID")
      }
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.changeProduct(
          bundleID: bundleID, userID: userID, productID: productID, appAccountToken: token?.lowercased())
      }
    }
    for (path, enabled) in [("/cancel-auto-renew", false), ("/enable-auto-renew", true)] {
      router.add("POST", prefix + path) { [self] request in
        let (bundleID, userID) = (
          request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
        )
        let groupID = try JSONBody(request).string("group_id")
        return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
          try state.setAutoRenew(
            bundleID: bundleID, userID: userID, groupID: groupID, enabled: enabled)
          return []
        }
      }
    }
    router.add("POST", prefix + "/renew") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let groupID = try JSONBody(request).string("group_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        _ = try state.user(userID)
        let subscription = try state.requireOwnSubscription(bundleID, userID, group: groupID)
        guard subscription.autoRenewEnabled, !subscription.renewalStopped,
          subscription.billingRetrySinceMs == nil
        else {
          throw .conflict(
            "the subscription in group '\(groupID)' is not set to renew (auto-renew off, billing retry or stopped)"
          )
        }
        let before = state.nextSeq
        state.advance(to: max(state.now, subscription.expiresMs))
        return state.receiptTransactions(bundleID, userID).filter { $0.seq >= before }.map(
          \.transactionID)
      }
    }
    router.add("POST", prefix + "/expire") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let groupID = try body.string("group_id")
      let intent = try body.optionalString("expiration_intent") ?? "1"
      guard ["1", "2", "3", "4", "5"].contains(intent) else {
        throw HTTPError.badRequest("field 'expiration_intent' must be \"1\"...\"5\"")
      }
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        _ = try state.user(userID)
        return try state.expire(
          bundleID: bundleID, userID: userID, groupID: groupID, intent: intent)
      }
    }
    router.add("POST", prefix + "/refund") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let transactionID = try body.optionalString("transaction_id")
      let groupID = try body.optionalString("group_id")
      let reason = try body.optionalString("cancellation_reason") ?? "0"
      guard reason == "0" || reason == "1" else {
        throw HTTPError.badRequest("field 'cancellation_reason' must be \"0\" or \"1\"")
      }
      var prorated: Int?
      switch try body.optionalString("revocation_type") ?? "REFUND_FULL" {
      case "REFUND_FULL": break
      case "REFUND_PRORATED":
        guard let percentage = try body.optionalInt("revocation_percentage"),
          (1...99_999).contains(percentage)
        else {
          throw HTTPError.badRequest(
            "field 'revocation_percentage' (milliunits, 1...99999) is required for REFUND_PRORATED")
        }
        prorated = Int(percentage)
      default:
        throw HTTPError.badRequest(
          "field 'revocation_type' must be REFUND_FULL or REFUND_PRORATED")
      }
      let percentage = prorated
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.refund(
          bundleID: bundleID, userID: userID, transactionID: transactionID, groupID: groupID,
          reason: reason, proratedPercentage: percentage)
      }
    }
    router.add("POST", prefix + "/refund-request") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let transactionID = try body.optionalString("transaction_id")
      let groupID = try body.optionalString("group_id")
      let reason = try body.optionalString("reason") ?? "UNINTENDED_PURCHASE"
      let reasons = [
        "UNINTENDED_PURCHASE", "FULFILLMENT_ISSUE", "UNSATISFIED_WITH_PURCHASE", "LEGAL", "OTHER",
      ]
      guard reasons.contains(reason) else {
        throw HTTPError.badRequest("field 'reason' must be one of \(reasons.joined(separator: ", "))")
      }
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.requestRefund(
          bundleID: bundleID, userID: userID, transactionID: transactionID, groupID: groupID,
          reason: reason)
      }
    }
    router.add("POST", prefix + "/refund-decline") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let transactionID = try body.optionalString("transaction_id")
      let groupID = try body.optionalString("group_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.declineRefund(
          bundleID: bundleID, userID: userID, transactionID: transactionID, groupID: groupID)
      }
    }
    router.add("POST", prefix + "/refund-reverse") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let transactionID = try JSONBody(request).string("transaction_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.reverseRefund(bundleID: bundleID, userID: userID, transactionID: transactionID)
      }
    }
    router.add("POST", prefix + "/price-increase-consent") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let groupID = try JSONBody(request).string("group_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.consentToPriceIncrease(bundleID: bundleID, userID: userID, groupID: groupID)
        return []
      }
    }
    router.add("POST", "/control/apps/{bundle_id}/products/{product_id}/price-increase") {
      [self] request in
      let (bundleID, productID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["product_id"]!
      )
      let body = try JSONBody(request)
      guard let price = try parsePrice(body, field: "price") else {
        throw HTTPError.badRequest("field 'price' is required")
      }
      let requiresConsent = try body.optionalBool("requires_consent") ?? true
      return try operation(bundleID: nil, userID: nil) { state throws(SimError) in
        try state.increasePrice(
          bundleID: bundleID, productID: productID, price: price, requiresConsent: requiresConsent)
      }
    }
    router.add("POST", prefix + "/stop-family-sharing") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let groupID = try JSONBody(request).string("group_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        _ = try state.user(userID)
        return try state.stopFamilySharing(
          bundleID: bundleID, organizerID: userID, groupID: groupID)
      }
    }

    router.add("GET", "/control/notifications") { [self] request in
      let bundleID = request.query("bundle_id")
      let userID = request.query("user_id")
      let list = dispatcher.deliveries.filter {
        (bundleID == nil || $0.bundleID == bundleID) && (userID == nil || $0.userID == userID)
      }
      return jsonResponse(.object(["notifications": .array(list.map(deliveryJSON))]))
    }
    router.add("POST", "/control/notifications/drain") { [self] request in
      let timeout = try JSONBody(request).optionalInt("timeout_ms") ?? 10_000
      let drained = await dispatcher.drain(timeout: .milliseconds(min(max(timeout, 0), 120_000)))
      return jsonResponse(.object(["drained": .bool(drained)]), status: drained ? 200 : 504)
    }

    router.add("GET", "/control/state") { [self] _ in .json(snapshotJSON()) }
    router.add("PUT", "/control/state") { [self] request in
      do throws(SnapshotError) {
        try restore(snapshotJSON: request.body)
      } catch {
        throw HTTPError.badRequest(error.message)
      }
      return jsonResponse(.object(["now_ms": .integer(nowMs)]))
    }

    router.add("GET", "/control/stats") { [self] _ in
      let counts = verifyReceiptRequests.withLock { $0 }
      var object = JSONObject()
      for environment in [StoreEnvironment.production, .sandbox] {
        object.append(environment.rawValue, .integer(Int64(counts[environment.rawValue] ?? 0)))
      }
      return jsonResponse(.object(["verify_receipt_requests": .object(object)]))
    }
    router.add("GET", "/control/faults") { [self] _ in
      jsonResponse(.object(["faults": .array(faults.withLock { $0.map(\.json) })]))
    }
    router.add("DELETE", "/control/faults") { [self] _ in
      faults.withLock { $0.removeAll() }
      return jsonResponse(.object(["faults": .array([])]))
    }
    router.add("POST", "/control/faults") { [self] request in
      let body = try JSONBody(request)
      let environment = try parseEnvironment(
        try body.optionalString("environment"), field: "environment")
      let status = try body.optionalInt("status").map(Int.init)
      let httpStatus = try body.optionalInt("http_status").map(Int.init)
      if let status, !(status == 21005 || status == 21009 || (21000...21199).contains(status)) {
        throw HTTPError.badRequest(
          "field 'status' must be an Apple verifyReceipt status 21000...21199")
      }
      if let httpStatus, !(400...599).contains(httpStatus) {
        throw HTTPError.badRequest("field 'http_status' must be 400...599")
      }
      let key = try body.optionalString("retryable_key") ?? "is-retryable"
      guard key == "is-retryable" || key == "is_retryable" else {
        throw HTTPError.badRequest("field 'retryable_key' must be 'is-retryable' or 'is_retryable'")
      }
      let count = try body.optionalInt("count").map(Int.init)
      if let count, count < 1 { throw HTTPError.badRequest("field 'count' must be >= 1") }
      let rule = FaultRule(
        environment: environment, latencyMs: Int(try body.optionalInt("latency_ms") ?? 0),
        httpStatus: httpStatus, status: status, isRetryable: try body.optionalBool("is_retryable"),
        retryableKey: key, remaining: count)
      faults.withLock { $0.append(rule) }
      return jsonResponse(rule.json, status: 201)
    }
  }

  private func userJSON(_ user: User) -> JSONValue {
    var object = JSONObject()
    object.append("user_id", .string(user.userID))
    object.append("environment", .string(user.environment.rawValue))
    object.append("deleted", .bool(user.deleted))
    object.append("billing_fails", .bool(user.billingFails))
    object.append("family_organizer", user.familyOrganizer.map { .string($0) } ?? .null)
    object.append("family_members", .array(user.familyMembers.map { .string($0) }))
    object.append("storefront", .string(user.storefront ?? "USA"))
    return .object(object)
  }

  func deliveryJSON(_ delivery: Delivery) -> JSONValue {
    var object = JSONObject()
    object.append("id", .integer(delivery.id))
    object.append("bundle_id", .string(delivery.bundleID))
    object.append("user_id", .string(delivery.userID))
    object.append("notification_type", .string(delivery.notificationType))
    if let subtype = delivery.subtype { object.append("subtype", .string(subtype)) }
    if let v2 = delivery.v2 { object.append("notification_uuid", .string(v2.notificationUUID)) }
    object.append("environment", .string(delivery.environment.rawValue))
    object.append("url", .string(delivery.url))
    object.append("state", .string(delivery.state.rawValue))
    object.append("created_ms", .integer(delivery.createdMs))
    object.append("next_attempt_ms", delivery.nextAttemptMs.map { .integer($0) } ?? .null)
    object.append(
      "attempts",
      .array(
        delivery.attempts.map { attempt in
          var entry = JSONObject()
          entry.append("at_ms", .integer(attempt.atMs))
          entry.append("http_status", attempt.httpStatus.map { .integer($0) } ?? .null)
          entry.append("error", attempt.error.map { .string($0) } ?? .null)
          return .object(entry)
        }))
    return .object(object)
  }
}
