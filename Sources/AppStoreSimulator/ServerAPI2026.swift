import Foundation
import HTTPServer
import SubstatusJSON

/// Apple's per-app limit on App Store Server API requests, as a token bucket per app and
/// environment: `rate` requests per second, bursts of up to `rate` (at least one request)
/// (https://developer.apple.com/documentation/appstoreserverapi/identifying-rate-limits). The
/// defaults are 50 requests per second in production and 5 (a tenth) in the sandbox. The bucket
/// refills with the simulated clock or the wall clock, whichever moved more since the last
/// request: a frozen simulated clock (tests) still refills in real time, and a test that needs a
/// deterministic `429` sets a rate far below its request rate. `Retry-After` is on the simulated
/// clock, like every date the simulator signs.
struct ServerAPIRateLimiter: Sendable {
  static let productionRate = 50.0
  static let sandboxRate = 5.0

  private struct Bucket {
    var tokens: Double
    var atMs: Int64
    var atWall: ContinuousClock.Instant
  }
  private var buckets: [String: Bucket] = [:]
  /// Requests admitted and refused, per `environment`.
  private(set) var admitted: [StoreEnvironment: Int] = [:]
  private(set) var limited: [StoreEnvironment: Int] = [:]

  /// The app's rate in `environment`, requests per second.
  static func rate(_ app: App, _ environment: StoreEnvironment) -> Double {
    environment == .production
      ? app.serverAPIRatePerSecond ?? productionRate : app.sandboxServerAPIRatePerSecond ?? sandboxRate
  }

  /// Takes a token for one request of `app`: nil when admitted, else the UNIX time (ms, on the
  /// simulated clock) from which one is available (`Retry-After`).
  mutating func admit(app: App, environment: StoreEnvironment, nowMs: Int64) -> Int64? {
    let rate = Self.rate(app, environment)
    let capacity = max(1, rate)
    let key = app.bundleID + "\u{0}" + environment.rawValue
    let wall = ContinuousClock.now
    var bucket = buckets[key] ?? Bucket(tokens: capacity, atMs: nowMs, atWall: wall)
    let wallElapsed = wall - bucket.atWall
    let wallMs = wallElapsed.components.seconds * 1000 + wallElapsed.components.attoseconds / 1_000_000_000_000_000
    let elapsed = max(0, nowMs - bucket.atMs, wallMs)
    bucket.tokens = min(capacity, bucket.tokens + Double(elapsed) * rate / 1000)
    bucket.atMs = max(bucket.atMs, nowMs)
    bucket.atWall = wall
    // A margin of 5 ms of refill: a request at the instant of `Retry-After` is admitted even
    // when the sender's clock is a few milliseconds ahead of the simulator's (or for rounding).
    if bucket.tokens >= 1 - rate * 0.005 - 1e-9 {
      bucket.tokens = max(0, bucket.tokens - 1)
      buckets[key] = bucket
      admitted[environment, default: 0] += 1
      return nil
    }
    buckets[key] = bucket
    limited[environment, default: 0] += 1
    let waitMs = Int64(((1 - bucket.tokens) * 1000 / rate).rounded(.up))
    return nowMs + max(1, waitMs)
  }

  /// Forgets every bucket and count (the control API's reset).
  mutating func reset() {
    buckets.removeAll()
    admitted.removeAll()
    limited.removeAll()
  }
}

extension AppStoreSimulator {
  /// The endpoints of App Store Server API 1.16-1.22 the simulator models.
  func addServerAPI2026Routes(
    _ router: inout HTTPRouter, prefix: String, environment: StoreEnvironment
  ) {
    // Get App Transaction Info (API 1.17).
    router.add("GET", prefix + "/inApps/v1/transactions/appTransactions/{transactionId}") {
      [self] request in
      await serverAPI(request, environment) { app throws(ServerAPIError) in
        try state.withLock { state throws(ServerAPIError) -> JSONValue in
          let userID = try customer(request, app: app, environment: environment, state: state)
          guard
            let payload = state.appTransactionPayload(
              bundleID: app.bundleID, userID: userID, signedDate: state.now)
          else { throw .appTransactionDoesNotExist }
          return .object(["signedAppTransactionInfo": .string(sign(payload, app: app))])
        }
      }
    }
    // Set App Account Token (API 1.16).
    router.add("PUT", prefix + "/inApps/v1/transactions/{transactionId}/appAccountToken") {
      [self] request in
      await serverAPIResponse(request, environment) { app throws(ServerAPIError) in
        guard let body = (try? JSONValue(parsing: request.body))?.objectValue else {
          throw .generalBadRequest
        }
        guard let text = body["appAccountToken"]?.stringValue, UUID(uuidString: text) != nil else {
          throw .invalidAppAccountToken
        }
        let id = request.pathParameters["transactionId"] ?? ""
        try mutateForServerAPI { state throws(ServerAPIError) in
          guard let transaction = state.transactions[id],
            state.users[transaction.userID]?.environment == environment
          else { throw .transactionIDNotFound }
          _ = try state.setAppAccountToken(
            originalTransactionID: id, bundleID: app.bundleID, token: text.lowercased())
        }
        return HTTPResponse(status: 200)
      }
    }
    // Send Consumption Information (V2, API 1.19).
    router.add("PUT", prefix + "/inApps/v2/transactions/consumption/{transactionId}") {
      [self] request in
      await serverAPIResponse(request, environment) { app throws(ServerAPIError) in
        guard let body = (try? JSONValue(parsing: request.body))?.objectValue else {
          throw .generalBadRequest
        }
        let id = request.pathParameters["transactionId"] ?? ""
        let (transaction, now) = try state.withLock {
          state throws(ServerAPIError) -> (Transaction, Int64) in
          guard let transaction = state.transactions[id], transaction.bundleID == app.bundleID,
            state.users[transaction.userID]?.environment == environment
          else { throw .transactionIDNotFound }
          return (transaction, state.now)
        }
        if transaction.ownership == .assigned { throw .assignedTransactionNotSupported }
        try validateConsumptionRequest(body, productType: transaction.productType)
        // Apple asks for the answer within 12 hours of the CONSUMPTION_REQUEST
        // (https://developer.apple.com/documentation/appstoreserverapi/send-consumption-information).
        let within =
          transaction.refundRequested == true
          && now - (transaction.refundRequestedMs ?? now) <= 12 * AppleTime.hourMs
        consumptionAnswers.withLock {
          $0.append(
            ConsumptionAnswer(
              bundleID: app.bundleID, environment: environment, transactionID: id, receivedMs: now,
              withinRequestWindow: within, body: .object(body)))
        }
        return HTTPResponse(status: 202)
      }
    }
    // Extend Subscription Renewal Dates for All Active Subscribers, and its status.
    router.add("POST", prefix + "/inApps/v1/subscriptions/extend/mass") { [self] request in
      await serverAPI(request, environment) { app throws(ServerAPIError) in
        let (body, days, requestID) = try Self.extensionRequest(request.body)
        guard let productID = body["productId"]?.stringValue, !productID.isEmpty else { throw .invalidProductID }
        var storefronts: [String] = []
        if let value = body["storefrontCountryCodes"], !value.isNull {
          guard let list = value.arrayValue, list.allSatisfy({ $0.stringValue.map { Storefront.ids[$0] != nil } == true })
          else { throw .invalidStorefrontCountryCode }
          storefronts = list.compactMap(\.stringValue)
        }
        let mass = try mutateForServerAPI { state throws(ServerAPIError) -> MassExtension in
          state.extendAll(
            bundleID: app.bundleID, environment: environment, productID: productID, days: Int(days),
            storefronts: storefronts, requestIdentifier: requestID)
        }
        let key = [app.bundleID, environment.rawValue, productID, requestID].joined(separator: "\u{0}")
        massExtensions.withLock { $0[key] = mass }
        return .object(["requestIdentifier": .string(requestID)])
      }
    }
    router.add("GET", prefix + "/inApps/v1/subscriptions/extend/mass/{productId}/{requestIdentifier}") {
      [self] request in
      await serverAPI(request, environment) { app throws(ServerAPIError) in
        let productID = request.pathParameters["productId"] ?? ""
        let requestID = request.pathParameters["requestIdentifier"] ?? ""
        let key = [app.bundleID, environment.rawValue, productID, requestID].joined(separator: "\u{0}")
        guard let mass = massExtensions.withLock({ $0[key] }) else { throw .invalidRequestIdentifier }
        var object = JSONObject()
        object.append("requestIdentifier", .string(requestID))
        object.append("complete", .bool(true))
        object.append("completeDate", .integer(mass.completeMs))
        object.append("succeededCount", .integer(Int64(mass.succeeded)))
        object.append("failedCount", .integer(Int64(mass.failed)))
        return .object(object)
      }
    }
    // Extend a Subscription Renewal Date.
    router.add("PUT", prefix + "/inApps/v1/subscriptions/extend/{originalTransactionId}") {
      [self] request in
      await serverAPI(request, environment) { app throws(ServerAPIError) in
        let (_, days, _) = try Self.extensionRequest(request.body)
        let id = request.pathParameters["originalTransactionId"] ?? ""
        let transaction = try mutateForServerAPI { state throws(ServerAPIError) -> Transaction in
          guard let subscription = state.subscriptions[id], subscription.bundleID == app.bundleID,
            subscription.environment == environment
          else { throw .originalTransactionIDNotFound }
          return try state.extendRenewal(originalTransactionID: id, days: Int(days))
        }
        var object = JSONObject()
        object.append("effectiveDate", .integer(transaction.expiresMs ?? 0))
        object.append("originalTransactionId", .string(id))
        object.append("success", .bool(true))
        if let web = transaction.webOrderLineItemID { object.append("webOrderLineItemId", .string(web)) }
        return .object(object)
      }
    }
  }

  /// The fields both renewal-date extensions (one subscription, and all active subscribers)
  /// validate as Apple documents them: `extendByDays` 1...90, `extendReasonCode` 0...3, a
  /// `requestIdentifier` of 1 to 128 bytes; the body, for the fields only one of them reads.
  static func extensionRequest(_ bytes: [UInt8]) throws(ServerAPIError) -> (
    body: JSONObject, days: Int64, requestIdentifier: String
  ) {
    guard let body = (try? JSONValue(parsing: bytes))?.objectValue else { throw .generalBadRequest }
    guard let days = body["extendByDays"]?.int64Value, (1...90).contains(days) else {
      throw .invalidExtendByDays
    }
    guard let reason = body["extendReasonCode"]?.int64Value, (0...3).contains(reason) else {
      throw .invalidExtendReasonCode
    }
    guard let requestID = body["requestIdentifier"]?.stringValue, !requestID.isEmpty,
      requestID.utf8.count <= 128
    else { throw .invalidRequestIdentifier }
    return (body, days, requestID)
  }

  /// Runs a Server API write on the state (after processing what is due), queuing the
  /// notifications it produced; on error the state is left as it was.
  func mutateForServerAPI<T: Sendable>(
    _ body: (inout SimulatorState) throws(ServerAPIError) -> T
  ) throws(ServerAPIError) -> T {
    var failure: ServerAPIError?
    do throws(SimError) {
      return try mutate { state throws(SimError) -> T in
        do throws(ServerAPIError) {
          return try body(&state)
        } catch {
          failure = error
          // Any SimError rolls the state back; the ServerAPIError is what the caller gets.
          throw SimError(status: error.httpStatus, message: error.errorMessage)
        }
      }.0
    } catch {
      throw failure ?? .generalBadRequest
    }
  }
}
