import AppStoreSignedData
import Foundation
import OutboundHTTP
import SubstatusJSON
import Synchronization

/// Apple's side of the Retention Messaging API: the signed realtime request the App Store sends to
/// the developer's "Get Retention Message" endpoint when a subscriber views the subscription's
/// cancel page, how Apple judges the answer, and Apple's performance test of the endpoint.
///
/// Apple shows what a valid answer names (a message, an alternate product, a promotional offer),
/// and its default message when the answer is late (about 700 ms), not a 200, or not well formed.
enum RetentionMessaging {
  /// Apple's response-time bar: an answer later than this shows the default message.
  static let defaultResponseTimeThresholdMs: Int64 = 700
  /// The most requests in flight the performance test may use.
  static let maxConcurrentRequests = 64
  /// The most requests one performance test may send.
  static let maxTotalRequests = 100_000

  /// What the realtime request is about, and what judging the answer needs.
  struct Context: Sendable {
    var bundleID: String
    var environment: StoreEnvironment
    var originalTransactionID: String
    /// `productId` of the request: the subscription's current product.
    var productID: String
    var groupID: String
    /// The auto-renewables of the subscription's group, with their promotional offer ids.
    var groupProducts: [String: Set<String>]
    /// The In-App Purchase keys registered for the app (they sign promotional offers).
    var keys: [InAppPurchaseKey]
    /// The ids of every transaction of the customer in the app (a signature's `transactionId`).
    var customerTransactionIDs: Set<String>
    /// The decoded payload: `originalTransactionId`, `appAppleId`, `productId`, `userLocale`,
    /// `requestIdentifier`, `signedDate`, `environment`.
    var payload: JSONValue
  }

  /// Apple's verdict on one answer.
  struct Verdict: Sendable {
    /// What the customer sees: `message`, `alternate_product`, `promotional_offer`, or `default`.
    var shown: String
    /// Whether the answer was valid and in time (`shown` is then not `default`).
    var valid: Bool
    /// Why the default is shown instead (empty when valid).
    var problems: [String]
    /// Apple's `SendAttemptResult` for the performance test's failures (`SUCCESS` when valid).
    var attemptResult: String
  }

  /// The realtime request's payload for `subscription` at `signedDate`.
  static func payload(
    app: App, subscription: Subscription, locale: String, requestIdentifier: String, signedDate: Int64
  ) -> JSONValue {
    var object = JSONObject()
    object.append("originalTransactionId", .string(subscription.originalTransactionID))
    object.append("appAppleId", .integer(app.appleAppID))
    object.append("productId", .string(subscription.productID))
    object.append("userLocale", .string(locale))
    object.append("requestIdentifier", .string(requestIdentifier))
    object.append("signedDate", .integer(signedDate))
    object.append("environment", .string(subscription.environment.receiptValue))
    return .object(object)
  }

  /// The context of a realtime request about `subscription`.
  static func context(
    state: SimulatorState, app: App, subscription: Subscription, payload: JSONValue
  ) -> Context {
    var group: [String: Set<String>] = [:]
    for product in app.products.values
    where product.type == .autoRenewable && product.groupID == subscription.groupID {
      group[product.productID] = Set(product.promotionalOffers.keys)
    }
    let ids = Set(state.receiptTransactions(app.bundleID, subscription.userID).map(\.transactionID))
    return Context(
      bundleID: app.bundleID, environment: subscription.environment,
      originalTransactionID: subscription.originalTransactionID, productID: subscription.productID,
      groupID: subscription.groupID, groupProducts: group, keys: app.apiKeys ?? [],
      customerTransactionIDs: ids, payload: payload)
  }

  /// Judges an answer as Apple does. `status` nil: no answer (`failure` says why: `TIMED_OUT`,
  /// `NO_RESPONSE`…). An answer later than `thresholdMs` shows the default.
  static func judge(
    status: Int?, failure: String?, body: [UInt8], latencyMs: Double, thresholdMs: Int64,
    context: Context
  ) -> Verdict {
    func rejected(_ problem: String, _ result: String) -> Verdict {
      Verdict(shown: "default", valid: false, problems: [problem], attemptResult: result)
    }
    guard let status else {
      return rejected("no answer: \(failure ?? "the request failed")", failure ?? "OTHER")
    }
    guard latencyMs <= Double(thresholdMs) else {
      return rejected(
        "answered in \(Int(latencyMs.rounded())) ms, later than \(thresholdMs) ms", "TIMED_OUT")
    }
    guard status == 200 else {
      return rejected("HTTP status \(status), not 200", "UNSUCCESSFUL_HTTP_RESPONSE_CODE")
    }
    guard let json = try? JSONValue(parsing: body), let object = json.objectValue else {
      return rejected("the body is not a JSON object", "INVALID_RESPONSE")
    }
    let options = ["message", "alternateProduct", "promotionalOffer", "advancedCommerceInfo"]
      .filter { object[$0] != nil && object[$0]?.isNull == false }
    guard options.count == 1, let option = options.first else {
      return rejected(
        options.isEmpty
          ? "the body names none of message, alternateProduct, promotionalOffer"
          : "the body names more than one of \(options.joined(separator: ", "))",
        "INVALID_RESPONSE")
    }
    let value = object[option]!
    var problems: [String] = []
    if value.objectValue == nil {
      problems.append("'\(option)' is not an object")
    } else if option != "advancedCommerceInfo" {
      if let id = value["messageIdentifier"]?.stringValue {
        if UUID(uuidString: id) == nil { problems.append("\(option).messageIdentifier '\(id)' is not a UUID") }
      } else {
        problems.append("\(option).messageIdentifier is missing")
      }
    }
    let shown: String
    switch option {
    case "message":
      shown = "message"
    case "alternateProduct":
      shown = "alternate_product"
      if let product = value["productId"]?.stringValue {
        if context.groupProducts[product] == nil {
          problems.append(
            "alternateProduct.productId '\(product)' is not an auto-renewable of group '\(context.groupID)'")
        } else if product == context.productID {
          problems.append("alternateProduct.productId '\(product)' is the subscriber's current product")
        }
      } else {
        problems.append("alternateProduct.productId is missing")
      }
    case "promotionalOffer":
      shown = "promotional_offer"
      if let signature = value["promotionalOfferSignatureV2"]?.stringValue {
        problems += offerSignatureProblems(signature, context: context)
      } else if value["promotionalOfferSignatureV1"] != nil {
        problems.append("promotionalOfferSignatureV1 is not checked by the simulator: answer a V2 signature")
      } else {
        problems.append("promotionalOffer has no promotionalOfferSignatureV2")
      }
    default:
      shown = "advanced_commerce"
      problems.append("advancedCommerceInfo (Advanced Commerce API) is not modelled by the simulator")
    }
    guard problems.isEmpty else {
      return Verdict(shown: "default", valid: false, problems: problems, attemptResult: "INVALID_RESPONSE")
    }
    return Verdict(shown: shown, valid: true, problems: [], attemptResult: "SUCCESS")
  }

  /// What is wrong with a promotional offer's V2 signature, as Apple checks it: an ES256 JWS by an
  /// In-App Purchase key of the app (`kid`), with the claims of Apple's signature creators: `iss`
  /// the key's issuer, `aud` `promotional-offer`, `bid` the app, `iat`, `nonce`, `productId` the
  /// subscription's product, `offerIdentifier` one of its promotional offers, `transactionId` (if
  /// present) one of the customer's.
  static func offerSignatureProblems(_ signature: String, context: Context) -> [String] {
    let prefix = "promotionalOfferSignatureV2"
    guard let jws = try? JWS.CompactJWS(parsing: signature) else { return ["\(prefix) is not a compact JWS"] }
    guard jws.header["alg"]?.stringValue == "ES256" else { return ["\(prefix): alg is not ES256"] }
    guard let kid = jws.header["kid"]?.stringValue else { return ["\(prefix): the header has no kid"] }
    guard let key = context.keys.first(where: { $0.keyID == kid }) else {
      return ["\(prefix): kid '\(kid)' is not an In-App Purchase key of '\(context.bundleID)'"]
    }
    guard let publicKey = parsedPublicKey(key.publicKeyPEM),
      publicKey.isValidSignature(jws.signature, for: jws.signingInput)
    else { return ["\(prefix): the signature does not verify with key '\(kid)'"] }
    guard let claims = try? JSONValue(parsing: jws.payload), claims.objectValue != nil else {
      return ["\(prefix): the payload is not a JSON object"]
    }
    var problems: [String] = []
    func expect(_ name: String, _ expected: String) {
      let actual = claims[name]?.stringValue
      if actual != expected {
        problems.append("\(prefix): \(name) is \(actual.map { "'\($0)'" } ?? "missing"), not '\(expected)'")
      }
    }
    expect("iss", key.issuerID)
    expect("aud", "promotional-offer")
    expect("bid", context.bundleID)
    expect("productId", context.productID)
    if claims["iat"]?.int64Value == nil { problems.append("\(prefix): iat is missing") }
    if (claims["nonce"]?.stringValue ?? "").isEmpty { problems.append("\(prefix): nonce is missing") }
    if let offer = claims["offerIdentifier"]?.stringValue {
      if context.groupProducts[context.productID]?.contains(offer) != true {
        problems.append("\(prefix): offerIdentifier '\(offer)' is not a promotional offer of '\(context.productID)'")
      }
    } else {
      problems.append("\(prefix): offerIdentifier is missing")
    }
    if let transaction = claims["transactionId"], !transaction.isNull {
      let id = transaction.stringValue ?? transaction.int64Value.map { String($0) } ?? ""
      if !context.customerTransactionIDs.contains(id) {
        problems.append("\(prefix): transactionId '\(id)' is not a transaction of this customer")
      }
    }
    return problems
  }

  /// Public keys of In-App Purchase keys, parsed, by their PEM text: parsing one (OpenSSL's
  /// decoder) costs several times the signature check, and a performance test checks thousands of
  /// signatures by the same key.
  private static let parsedPublicKeys = Mutex<[String: ES256PublicKey]>([:])
  /// The most keys ``parsedPublicKeys`` keeps (all are dropped past it).
  static let maxParsedPublicKeys = 64

  /// The public key of `pem`, parsed once; `nil` when it does not parse.
  static func parsedPublicKey(_ pem: String) -> ES256PublicKey? {
    if let hit = parsedPublicKeys.withLock({ $0[pem] }) { return hit }
    guard let key = try? ES256PublicKey(pem: pem) else { return nil }
    parsedPublicKeys.withLock { keys in
      if keys.count >= maxParsedPublicKeys { keys.removeAll() }
      keys[pem] = key
    }
    return key
  }

  /// The value at `percentile` (0...100) of `sorted` (ascending), by the nearest-rank method.
  static func percentile(_ sorted: [Double], _ percentile: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    let rank = Int((percentile / 100 * Double(sorted.count)).rounded(.up))
    return sorted[min(max(rank, 1), sorted.count) - 1]
  }
}

/// One realtime request sent and Apple's verdict on its answer.
struct RetentionExchange: Sendable {
  var bundleID: String
  var userID: String
  var url: String
  var sentMs: Int64
  var requestIdentifier: String
  var payload: JSONValue
  var httpStatus: Int?
  var failure: String?
  var latencyMs: Double
  var answer: JSONValue?
  var verdict: RetentionMessaging.Verdict

  var json: JSONValue {
    var object = JSONObject()
    object.append("bundle_id", .string(bundleID))
    object.append("user_id", .string(userID))
    object.append("url", .string(url))
    object.append("sent_ms", .integer(sentMs))
    object.append("request_identifier", .string(requestIdentifier))
    object.append("payload", payload)
    object.append("http_status", httpStatus.map { .integer($0) } ?? .null)
    object.append("failure", failure.map { .string($0) } ?? .null)
    object.append("latency_ms", .double((latencyMs * 1000).rounded() / 1000))
    object.append("answer", answer ?? .null)
    object.append("valid", .bool(verdict.valid))
    object.append("shown", .string(verdict.shown))
    object.append("problems", .array(verdict.problems.map { .string($0) }))
    return .object(object)
  }
}

extension AppStoreSimulator {
  /// A realtime request about one subscription, ready to send: signed body, URL, context.
  struct PreparedRetentionRequest: Sendable {
    var url: String
    var userID: String
    var sentMs: Int64
    var requestIdentifier: String
    var body: [UInt8]
    var context: RetentionMessaging.Context
  }

  /// Signs a realtime request about `subscription` (found by original transaction id, or by the
  /// user's subscription of `groupID`) for the app's `retention_url` (or `url`).
  func prepareRetentionRequest(
    bundleID: String, userID: String?, groupID: String?, originalTransactionID: String?,
    locale: String, url: String?, sandboxOnly: Bool = false
  ) throws(SimError) -> PreparedRetentionRequest {
    let requestIdentifier = nextRetentionRequestIdentifier()
    let (prepared, _) = try mutate { state throws(SimError) -> PreparedRetentionRequest in
      let app = try state.app(bundleID)
      let subscription: Subscription
      if let originalTransactionID {
        guard let found = state.subscriptions[originalTransactionID], found.bundleID == bundleID,
          userID == nil || found.userID == userID
        else {
          throw .notFound("no subscription of '\(bundleID)' has original transaction id '\(originalTransactionID)'")
        }
        subscription = found
      } else if let userID, let groupID {
        _ = try state.user(userID)
        subscription = try state.requireOwnSubscription(bundleID, userID, group: groupID)
      } else {
        throw .badRequest("a realtime request needs 'original_transaction_id' or 'group_id'")
      }
      if sandboxOnly && subscription.environment != .sandbox {
        throw .conflict(
          "Apple's performance test runs only in the sandbox: use a sandbox subscription's original transaction id")
      }
      guard let target = url ?? app.retentionURL else {
        throw .conflict("app '\(bundleID)' has no 'retention_url' (PATCH /control/apps/\(bundleID))")
      }
      let payload = RetentionMessaging.payload(
        app: app, subscription: subscription, locale: locale, requestIdentifier: requestIdentifier,
        signedDate: state.now)
      let signed = signing.sign(payload, mode: app.signing ?? .valid)
      let body = JSONValue.object(["signedPayload": .string(signed)]).serializedBytes()
      return PreparedRetentionRequest(
        url: target, userID: subscription.userID, sentMs: state.now,
        requestIdentifier: requestIdentifier, body: body,
        context: RetentionMessaging.context(state: state, app: app, subscription: subscription, payload: payload))
    }
    return prepared
  }

  /// The client realtime requests go through.
  var retentionClient: OutboundHTTPClient {
    retentionClientSlot.withLock { slot in
      if let client = slot { return client }
      let client = OutboundHTTPClient(
        configuration: .init(
          maxConnections: RetentionMessaging.maxConcurrentRequests,
          maxConnectionsPerHost: RetentionMessaging.maxConcurrentRequests))
      slot = client
      return client
    }
  }

  /// A fresh `requestIdentifier`: a UUID counting up, so runs are reproducible.
  func nextRetentionRequestIdentifier() -> String {
    let serial = retentionSerial.withLock { serial -> UInt64 in
      serial += 1
      return serial
    }
    let hex = String(serial, radix: 16)
    return "5e7e0000-0000-4000-8000-" + String(repeating: "0", count: max(0, 12 - hex.count)) + hex
  }

  /// Sends a prepared request as the App Store does and judges the answer.
  func sendRetentionRequest(_ prepared: PreparedRetentionRequest, thresholdMs: Int64) async -> RetentionExchange {
    var request = OutboundRequest(
      method: .post, url: prepared.url, headers: [("Content-Type", "application/json")], body: prepared.body)
    // Apple shows the default once the bar has passed: it waits no longer.
    request.timeout = .milliseconds(thresholdMs)
    request.connectTimeout = .milliseconds(thresholdMs)
    request.maxResponseBytes = 64 << 10
    let clock = ContinuousClock()
    let start = clock.now
    var status: Int?
    var failure: String?
    var body: [UInt8] = []
    do {
      let response = try await retentionClient.send(request)
      status = response.status
      body = response.body
      if response.truncated { failure = "INVALID_RESPONSE" }
    } catch {
      switch error.code {
      case .timeout: failure = "TIMED_OUT"
      case .tlsFailed: failure = "TLS_ISSUE"
      case .connectFailed, .resolveFailed, .addressRefused: failure = "SOCKET_ISSUE"
      case .connectionLost: failure = "PREMATURE_CLOSE"
      default: failure = "OTHER"
      }
    }
    let elapsed = clock.now - start
    let latencyMs = Double(elapsed.components.seconds) * 1000
      + Double(elapsed.components.attoseconds) / 1e15
    if failure == "INVALID_RESPONSE" { status = nil }
    let verdict = RetentionMessaging.judge(
      status: status, failure: failure, body: body, latencyMs: latencyMs, thresholdMs: thresholdMs,
      context: prepared.context)
    return RetentionExchange(
      bundleID: prepared.context.bundleID, userID: prepared.userID, url: prepared.url,
      sentMs: prepared.sentMs, requestIdentifier: prepared.requestIdentifier,
      payload: prepared.context.payload, httpStatus: status, failure: failure, latencyMs: latencyMs,
      answer: status == nil ? nil : (try? JSONValue(parsing: body)) ?? .string(String(decoding: body, as: UTF8.self)),
      verdict: verdict)
  }

  /// Apple's performance test: `totalRequests` realtime requests about one sandbox subscription,
  /// at most `maxConcurrent` in flight; an answer counts as a success when valid within
  /// `thresholdMs`; the test passes when the success rate reaches `successRateThreshold` percent.
  /// Answers Apple's `PerformanceTestResultResponse` (response times in ms).
  ///
  /// `originalTransactionIDs` (the simulator's extension, for benchmarks): the requests go round
  /// these subscriptions instead of asking about one.
  func runRetentionPerformanceTest(
    bundleID: String, userID: String?, groupID: String?, originalTransactionIDs: [String], url: String?,
    totalRequests: Int, maxConcurrent: Int, thresholdMs: Int64, successRateThreshold: Int
  ) async throws(SimError) -> JSONValue {
    // Every request is signed before the first is sent, so the signing does not count in the figures.
    var prepared: [PreparedRetentionRequest] = []
    prepared.reserveCapacity(totalRequests)
    for index in 0..<totalRequests {
      prepared.append(
        try prepareRetentionRequest(
          bundleID: bundleID, userID: userID, groupID: groupID,
          originalTransactionID: originalTransactionIDs.isEmpty
            ? nil : originalTransactionIDs[index % originalTransactionIDs.count],
          locale: "en-US", url: url, sandboxOnly: true))
    }
    let clock = ContinuousClock()
    let start = clock.now
    let work = prepared
    let exchanges = await withTaskGroup(of: [RetentionExchange].self) { group in
      let next = Locked(0)
      for _ in 0..<min(maxConcurrent, totalRequests) {
        group.addTask {
          var mine: [RetentionExchange] = []
          while true {
            let index = next.withLock { value -> Int in
              value += 1
              return value - 1
            }
            guard index < work.count else { return mine }
            mine.append(await self.sendRetentionRequest(work[index], thresholdMs: thresholdMs))
          }
        }
      }
      var all: [RetentionExchange] = []
      for await part in group { all += part }
      return all
    }
    let elapsed = clock.now - start
    let durationMs = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    let successes = exchanges.filter(\.verdict.valid).count
    var failures: [String: Int] = [:]
    for exchange in exchanges where !exchange.verdict.valid {
      failures[exchange.verdict.attemptResult, default: 0] += 1
    }
    let answered = exchanges.filter { $0.httpStatus != nil }.map(\.latencyMs).sorted()
    let successRate = exchanges.isEmpty ? 0 : successes * 100 / exchanges.count
    let rounded = { (value: Double) -> JSONValue in .double((value * 1000).rounded() / 1000) }
    var times = JSONObject()
    times.append("average", rounded(answered.isEmpty ? 0 : answered.reduce(0, +) / Double(answered.count)))
    for (name, p) in [("p50", 50.0), ("p90", 90), ("p95", 95), ("p99", 99)] {
      times.append(name, rounded(RetentionMessaging.percentile(answered, p)))
    }
    times.append("max", rounded(answered.last ?? 0))
    var config = JSONObject()
    config.append("maxConcurrentRequests", .integer(maxConcurrent))
    config.append("totalRequests", .integer(totalRequests))
    config.append("totalDuration", .integer(durationMs))
    config.append("responseTimeThreshold", .integer(thresholdMs))
    config.append("successRateThreshold", .integer(successRateThreshold))
    let requestID = nextRetentionRequestIdentifier()
    var result = JSONObject()
    result.append("requestId", .string(requestID))
    result.append("config", .object(config))
    result.append("target", .string(prepared.first?.url ?? url ?? ""))
    result.append("result", .string(successRate >= successRateThreshold ? "PASS" : "FAIL"))
    result.append("successRate", .integer(successRate))
    result.append("numPending", .integer(0))
    result.append("responseTimes", .object(times))
    result.append(
      "failures", .object(JSONObject(failures.keys.sorted().map { (key: $0, value: .integer(failures[$0]!)) })))
    let problems = Set(exchanges.flatMap(\.verdict.problems)).sorted().prefix(10)
    result.append("problems", .array(problems.map { .string($0) }))
    let json = JSONValue.object(result)
    retentionPerformanceTests.withLock { $0[requestID] = json }
    return json
  }
}
