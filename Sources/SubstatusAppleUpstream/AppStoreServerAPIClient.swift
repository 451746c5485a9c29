import Dispatch
import Foundation
import SubscriptionDomain
import SubstatusClock
import SubstatusJSON
import SubstatusServiceCore
import Synchronization
import SubstatusMetrics

/// Makes the bearer token (an ES256 JWT signed with the app's In-App Purchase key) that authorizes
/// App Store Server API calls for one app.
public protocol AppStoreServerAPIAuthorizer: Sendable {
  /// A token valid now; implementations cache it until shortly before it expires.
  /// - Parameter nowMs: the current time, in milliseconds since 1970.
  /// - Throws: ``AppStoreServerAPIError`` with code `keyRefused` when no token can be made.
  func bearerToken(nowMs: Int64) throws(AppStoreServerAPIError) -> String
  /// What names the app for Apple's per-app rate limit (its bundle id); authorizers of one app
  /// share a token bucket. The default, empty, puts every such authorizer in one bucket.
  var rateLimitKey: String { get }
}

extension AppStoreServerAPIAuthorizer {
  /// See ``AppStoreServerAPIAuthorizer/rateLimitKey``: one shared bucket.
  public var rateLimitKey: String { "" }
}

/// Why the App Store Server API gave no usable answer.
public struct AppStoreServerAPIError: Error, Sendable, CustomStringConvertible {
  /// What kind of failure; a struct over a private enum, so adding kinds breaks no caller.
  public struct Code: Sendable, Hashable, CustomStringConvertible {
    private enum Value: String { case notFound, keyRefused, unavailable, rejected, malformedResponse }
    private let value: Value
    private init(_ value: Value) { self.value = value }
    /// Apple knows no such transaction in this environment (4040010, 4040005) or no such app
    /// (4040003): try the other environment, or report NOT_FOUND.
    public static let notFound = Code(.notFound)
    /// Apple refused the JWT (HTTP 401) or no JWT could be made: the In-App Purchase key is wrong,
    /// revoked, or not for this app.
    public static let keyRefused = Code(.keyRefused)
    /// Rate limit (429), server errors (5xx), `…Retryable` codes or the network, after the
    /// bounded retries: try again later.
    public static let unavailable = Code(.unavailable)
    /// Apple refused the request itself (another 4xx, for example 4000006 invalid transaction id).
    public static let rejected = Code(.rejected)
    /// Apple answered 2xx with a body this client cannot read.
    public static let malformedResponse = Code(.malformedResponse)
    /// The code's name.
    public var description: String { value.rawValue }
  }

  /// What kind of failure.
  public var code: Code
  /// The HTTP status, when Apple answered.
  public var httpStatus: Int?
  /// Apple's `errorCode`, when the body carried one.
  public var apiErrorCode: Int64?
  /// A message for the caller (never contains the JWT or the key).
  public var message: String

  /// Creates an error.
  public init(code: Code, httpStatus: Int? = nil, apiErrorCode: Int64? = nil, message: String) {
    self.code = code
    self.httpStatus = httpStatus
    self.apiErrorCode = apiErrorCode
    self.message = message
  }

  /// The message.
  public var description: String { message }

  /// Apple's error codes that mean "no such transaction (or app) here".
  static let notFoundCodes: Set<Int64> = [4_040_010, 4_040_005, 4_040_003, 4_040_001]
  /// Apple's `…Retryable` error codes (and the general internal error).
  static let retryableCodes: Set<Int64> = [4_040_002, 4_040_004, 4_040_006, 5_000_001, 4_290_000]
}

/// One page of Get Transaction History v2 (`HistoryResponse`).
public struct TransactionHistoryPage: Sendable, Hashable {
  /// Apple's revision after this page: pass it to get the next page, store the last one for the
  /// next incremental sync.
  public var revision: String
  /// Whether more pages follow.
  public var hasMore: Bool
  /// The environment Apple answered from (its `environment` value), if present.
  public var rawEnvironment: String?
  /// The signed transactions (compact JWS), at most 20.
  public var signedTransactions: [String]
}

/// All pages of a transaction history fetched in one go.
public struct TransactionHistory: Sendable, Hashable {
  /// The revision after the last page.
  public var revision: String
  /// Every signed transaction, in Apple's (ascending) order.
  public var signedTransactions: [String]
  /// How many pages were read.
  public var pages: Int
}

/// One subscription of Get All Subscription Statuses (`LastTransactionsItem`).
public struct LastTransactionsItem: Sendable, Hashable {
  /// The subscription group.
  public var subscriptionGroupIdentifier: String
  /// `originalTransactionId`.
  public var originalTransactionId: String
  /// Apple's `status` (1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked).
  public var rawStatus: Int?
  /// The latest signed transaction of the subscription.
  public var signedTransactionInfo: String?
  /// The signed renewal info of the subscription.
  public var signedRenewalInfo: String?

  package init(
    subscriptionGroupIdentifier: String, originalTransactionId: String, rawStatus: Int?, signedTransactionInfo: String?,
    signedRenewalInfo: String?
  ) {
    self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
    self.originalTransactionId = originalTransactionId
    self.rawStatus = rawStatus
    self.signedTransactionInfo = signedTransactionInfo
    self.signedRenewalInfo = signedRenewalInfo
  }
}

/// One notification of Get Notification History (`NotificationHistoryResponseItem`).
public struct NotificationHistoryItem: Sendable, Hashable {
  /// The notification as Apple sent it (a compact JWS of a `ResponseBodyV2DecodedPayload`).
  public var signedPayload: String
  /// `sendAttempts[].sendAttemptResult`, oldest first.
  public var sendAttemptResults: [String]
}

/// Calls the App Store Server API (or the App Store simulator) for one app: Get Transaction History
/// v2, Get All Subscription Statuses, Get Notification History and Get Transaction Info, with an
/// ES256 JWT per request and bounded retries with backoff for temporary failures.
///
/// ```swift
/// let client = AppStoreServerAPIClient()
/// let history = try await client.transactionHistory(
///   transactionId: "2000000123", revision: nil, environment: .production, authorizer: signer)
/// ```
public struct AppStoreServerAPIClient: Sendable {
  /// The production base URL (`https://api.storekit.apple.com`).
  public var productionURL: URL
  /// The sandbox base URL (`https://api.storekit-sandbox.apple.com`).
  public var sandboxURL: URL
  /// The time limit of one HTTP request.
  public var timeout: Duration
  /// How many times one request is tried for temporary failures.
  public var maxAttempts: Int
  /// The first backoff: retry *n* waits a random duration in `[½, 1] × initialBackoff × 2^(n-1)`.
  public var initialBackoff: Duration
  /// The clock the backoffs wait on and the callers date tokens by (Apple checks a token's `iat`
  /// and `exp` against its own time, so in tests it stays the system clock even when the service's
  /// follows a simulated one).
  public var clock: any ServiceClock
  /// Apple's rate limits, per app and environment, shared by every copy of this client.
  public let rateLimiter: AppStoreServerAPIRateLimiter
  /// The clock the rate limit's token buckets refill and wait on: real time (a rate is a rate
  /// of real requests, even when ``clock`` follows a simulated one); tests inject a manual one.
  public var rateClock: any ServiceClock
  /// Apple's time, which a `429`'s `Retry-After` (a UNIX time in milliseconds) is read against:
  /// ``clock`` unless the service follows another clock (substatusd's `--clock-url`: the
  /// simulator's). The wait for it ends when this clock reaches it or as much real time
  /// (``rateClock``) has passed, whichever comes first, so a frozen simulated clock never holds a
  /// request for ever.
  public var appleClock: any ServiceClock
  package let requester: any HTTPRequester

  /// Apple's production base URL.
  public static let appleProduction = URL(string: "https://api.storekit.apple.com")!
  /// Apple's sandbox base URL.
  public static let appleSandbox = URL(string: "https://api.storekit-sandbox.apple.com")!

  /// Creates a client.
  public init(
    productionURL: URL = AppStoreServerAPIClient.appleProduction,
    sandboxURL: URL = AppStoreServerAPIClient.appleSandbox, timeout: Duration = .seconds(15),
    maxAttempts: Int = 3, initialBackoff: Duration = .milliseconds(200),
    requester: any HTTPRequester = OutboundHTTPPoster.apple(), clock: any ServiceClock = SystemClock(),
    rateLimiter: AppStoreServerAPIRateLimiter = AppStoreServerAPIRateLimiter(),
    rateClock: any ServiceClock = SystemClock(), appleClock: (any ServiceClock)? = nil
  ) {
    self.rateLimiter = rateLimiter
    self.rateClock = rateClock
    self.appleClock = appleClock ?? clock
    self.productionURL = productionURL
    self.sandboxURL = sandboxURL
    self.timeout = timeout
    self.maxAttempts = max(1, maxAttempts)
    self.initialBackoff = initialBackoff
    self.clock = clock
    self.requester = requester
  }

  /// The base URL of an environment.
  public func baseURL(_ environment: SubscriptionDomain.Environment) -> URL {
    environment == .sandbox ? sandboxURL : productionURL
  }

  // MARK: Endpoints

  /// Get Transaction History v2, one page, sorted ASCENDING (so the revision can be stored).
  /// - Parameters:
  ///   - transactionId: any transaction id, original transaction id or app transaction id of the
  ///     customer.
  ///   - revision: the revision of the previous page or of the last sync; `nil` from the start.
  /// - Throws: ``AppStoreServerAPIError``.
  public func transactionHistoryPage(
    transactionId: String, revision: String?, environment: SubscriptionDomain.Environment,
    authorizer: any AppStoreServerAPIAuthorizer, nowMs: Int64
  ) async throws(AppStoreServerAPIError) -> TransactionHistoryPage {
    var query = [("sort", "ASCENDING")]
    if let revision, !revision.isEmpty { query.append(("revision", revision)) }
    let json = try await call(
      "GET", environment, "/inApps/v2/history/\(try pathSegment(transactionId))", query: query,
      authorizer: authorizer, nowMs: nowMs)
    guard let signed = json["signedTransactions"]?.arrayValue,
      let revision = json["revision"]?.stringValue
    else {
      throw malformed("Get Transaction History", "no revision or signedTransactions")
    }
    return TransactionHistoryPage(
      revision: revision, hasMore: json["hasMore"]?.boolValue ?? false,
      rawEnvironment: json["environment"]?.stringValue,
      signedTransactions: try strings(signed, "Get Transaction History", "signedTransactions"))
  }

  /// Get Transaction History v2, every page from `revision` on (ASCENDING).
  /// - Parameter maxPages: a bound on the pages read in one call (a history of 20 × maxPages
  ///   changed transactions at most); the revision returned resumes where it stopped.
  /// - Throws: ``AppStoreServerAPIError``.
  public func transactionHistory(
    transactionId: String, revision: String?, environment: SubscriptionDomain.Environment,
    authorizer: any AppStoreServerAPIAuthorizer, nowMs: Int64, maxPages: Int = 500
  ) async throws(AppStoreServerAPIError) -> TransactionHistory {
    var all: [String] = []
    var current = revision
    var pages = 0
    while true {
      let page = try await transactionHistoryPage(
        transactionId: transactionId, revision: current, environment: environment,
        authorizer: authorizer, nowMs: nowMs)
      pages += 1
      all += page.signedTransactions
      let advanced = page.revision != current
      current = page.revision
      // A page that says "more" without moving the revision would loop forever: stop there.
      guard page.hasMore, advanced, pages < maxPages else { break }
    }
    return TransactionHistory(revision: current ?? "", signedTransactions: all, pages: pages)
  }

  /// Get All Subscription Statuses: every subscription of the customer, per group.
  /// - Throws: ``AppStoreServerAPIError``.
  public func allSubscriptionStatuses(
    transactionId: String, environment: SubscriptionDomain.Environment,
    authorizer: any AppStoreServerAPIAuthorizer, nowMs: Int64
  ) async throws(AppStoreServerAPIError) -> [LastTransactionsItem] {
    let json = try await call(
      "GET", environment, "/inApps/v1/subscriptions/\(try pathSegment(transactionId))", query: [],
      authorizer: authorizer, nowMs: nowMs)
    guard let data = json["data"]?.arrayValue else {
      throw malformed("Get All Subscription Statuses", "no data")
    }
    var items: [LastTransactionsItem] = []
    for group in data {
      let groupId = group["subscriptionGroupIdentifier"]?.stringValue ?? ""
      for last in group["lastTransactions"]?.arrayValue ?? [] {
        guard let otid = last["originalTransactionId"]?.stringValue else {
          throw malformed("Get All Subscription Statuses", "a lastTransactions item has no originalTransactionId")
        }
        items.append(
          LastTransactionsItem(
            subscriptionGroupIdentifier: groupId, originalTransactionId: otid,
            rawStatus: last["status"]?.int64Value.map { Int($0) },
            signedTransactionInfo: last["signedTransactionInfo"]?.stringValue,
            signedRenewalInfo: last["signedRenewalInfo"]?.stringValue))
      }
    }
    return items
  }

  /// Get Transaction Info: one signed transaction.
  /// - Throws: ``AppStoreServerAPIError``.
  public func transactionInfo(
    transactionId: String, environment: SubscriptionDomain.Environment,
    authorizer: any AppStoreServerAPIAuthorizer, nowMs: Int64
  ) async throws(AppStoreServerAPIError) -> String {
    let json = try await call(
      "GET", environment, "/inApps/v1/transactions/\(try pathSegment(transactionId))", query: [],
      authorizer: authorizer, nowMs: nowMs)
    guard let signed = json["signedTransactionInfo"]?.stringValue else {
      throw malformed("Get Transaction Info", "no signedTransactionInfo")
    }
    return signed
  }

  /// Set App Account Token (API 1.16): sets the `appAccountToken` of an original transaction and
  /// its renewals, `PUT /inApps/v1/transactions/{originalTransactionId}/appAccountToken` with the
  /// body `UpdateAppAccountTokenRequest` `{"appAccountToken": UUID}`; Apple answers 200 with no body
  /// (https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token,
  /// https://developer.apple.com/documentation/appstoreserverapi/updateappaccounttokenrequest).
  /// - Throws: ``AppStoreServerAPIError`` (`notFound` for an unknown transaction id; `rejected`
  ///   for a token Apple refuses, a family-shared or assigned transaction).
  public func setAppAccountToken(
    originalTransactionId: String, appAccountToken: String, environment: SubscriptionDomain.Environment,
    authorizer: any AppStoreServerAPIAuthorizer, nowMs: Int64
  ) async throws(AppStoreServerAPIError) {
    var body = JSONObject()
    body.append("appAccountToken", .string(appAccountToken))
    _ = try await call(
      "PUT", environment, "/inApps/v1/transactions/\(try pathSegment(originalTransactionId))/appAccountToken",
      query: [], body: JSONValue.object(body).serializedBytes(), authorizer: authorizer, nowMs: nowMs)
  }

  /// Get Notification History: the notifications Apple sent (or tried to send) between two
  /// instants, every page (`paginationToken`).
  /// - Parameters:
  ///   - startMs: the start, inclusive (Apple keeps 180 days in production, 30 in the sandbox).
  ///   - endMs: the end.
  ///   - onlyFailures: only notifications whose delivery failed.
  ///   - maxPages: a bound on the pages read.
  /// - Throws: ``AppStoreServerAPIError``.
  public func notificationHistory(
    startMs: Int64, endMs: Int64, onlyFailures: Bool = false,
    environment: SubscriptionDomain.Environment, authorizer: any AppStoreServerAPIAuthorizer,
    nowMs: Int64, maxPages: Int = 500
  ) async throws(AppStoreServerAPIError) -> [NotificationHistoryItem] {
    var body = JSONObject()
    body.append("startDate", .integer(startMs))
    body.append("endDate", .integer(endMs))
    if onlyFailures { body.append("onlyFailures", .bool(true)) }
    let bytes = JSONValue.object(body).serializedBytes()
    var items: [NotificationHistoryItem] = []
    var token: String? = nil
    var pages = 0
    repeat {
      let query = token.map { [("paginationToken", $0)] } ?? []
      let json = try await call(
        "POST", environment, "/inApps/v1/notifications/history", query: query, body: bytes,
        authorizer: authorizer, nowMs: nowMs)
      guard let list = json["notificationHistory"]?.arrayValue else {
        throw malformed("Get Notification History", "no notificationHistory")
      }
      for item in list {
        guard let payload = item["signedPayload"]?.stringValue else {
          throw malformed("Get Notification History", "an item has no signedPayload")
        }
        let results = (item["sendAttempts"]?.arrayValue ?? []).compactMap { $0["sendAttemptResult"]?.stringValue }
        items.append(NotificationHistoryItem(signedPayload: payload, sendAttemptResults: results))
      }
      pages += 1
      let next = json["hasMore"]?.boolValue == true ? json["paginationToken"]?.stringValue : nil
      guard next != token else { break }
      token = next
    } while token != nil && pages < maxPages
    return items
  }

  // MARK: Transport

  private func pathSegment(_ id: String) throws(AppStoreServerAPIError) -> String {
    guard !id.isEmpty, id.utf8.count <= 64,
      id.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-") })
    else {
      throw AppStoreServerAPIError(code: .rejected, message: "transaction id \"\(id.prefix(64))\" is not a valid id")
    }
    return id
  }

  private func malformed(_ endpoint: String, _ what: String) -> AppStoreServerAPIError {
    AppStoreServerAPIError(code: .malformedResponse, httpStatus: 200, message: "\(endpoint) answered an unreadable body: \(what)")
  }

  private func strings(_ values: [JSONValue], _ endpoint: String, _ field: String) throws(AppStoreServerAPIError) -> [String] {
    var out: [String] = []
    out.reserveCapacity(values.count)
    for v in values {
      guard let s = v.stringValue else { throw malformed(endpoint, "\(field) holds a non-string") }
      out.append(s)
    }
    return out
  }

  /// One API call with retries; returns the parsed JSON body of a 2xx answer.
  package func call(
    _ method: String, _ environment: SubscriptionDomain.Environment, _ path: String,
    query: [(String, String)], body: [UInt8]? = nil, authorizer: any AppStoreServerAPIAuthorizer,
    nowMs: Int64
  ) async throws(AppStoreServerAPIError) -> JSONValue {
    guard var components = URLComponents(url: baseURL(environment), resolvingAgainstBaseURL: false) else {
      throw AppStoreServerAPIError(code: .rejected, message: "cannot build the URL of \(path)")
    }
    let basePath = components.path
    components.path = basePath.trimmingSuffix("/") + path
    if !query.isEmpty { components.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) } }
    // `+` is legal in a query but Apple's revisions and tokens are base64: encode it.
    let encoded = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
    components.percentEncodedQuery = encoded
    guard let url = components.url else {
      throw AppStoreServerAPIError(code: .rejected, message: "cannot build the URL of \(path)")
    }
    let endpoint = "\(method) \(path.split(separator: "/").prefix(3).joined(separator: "/"))"
    let limitKey = authorizer.rateLimitKey
    var attempt = 0
    var last: AppStoreServerAPIError
    repeat {
      attempt += 1
      try await waitForRateLimit(key: limitKey, environment: environment, endpoint: endpoint)
      let token = try authorizer.bearerToken(nowMs: nowMs)
      var headers = [("Authorization", "Bearer \(token)"), ("Accept", "application/json")]
      if body != nil { headers.append(("Content-Type", "application/json")) }
      let status: Int
      let responseBody: [UInt8]
      let responseHeaders: [String: String]
      do {
        (status, responseBody, responseHeaders) = try await requester.send(
          method: method, url: url, headers: headers, body: body, timeout: timeout,
          responseHeaders: ["Retry-After"])
      } catch {
        rateLimiter.count(.networkError)
        last = AppStoreServerAPIError(code: .unavailable, message: "App Store Server API unreachable (\(endpoint)): \(error)")
        try await backoff(attempt)
        continue
      }
      if (200..<300).contains(status) {
        rateLimiter.count(.ok)
        // Writes answer with no body (Set App Account Token: 200, Send Consumption Information: 202).
        if responseBody.isEmpty { return .null }
        do { return try JSONValue(parsing: responseBody) } catch {
          throw malformed(endpoint, "\(error)")
        }
      }
      if status == 429 {
        // https://developer.apple.com/documentation/appstoreserverapi/identifying-rate-limits:
        // `Retry-After` is the UNIX time in milliseconds from which a request may succeed; no
        // request of this app goes to this environment before then.
        rateLimiter.count(.rateLimited)
        let now = appleClock.wallMs
        let retryAt = responseHeaders["Retry-After"].flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
        rateLimiter.block(key: limitKey, environment: environment, untilMs: retryAt ?? now + rateLimiter.defaultRetryMs)
      } else if status >= 500 {
        rateLimiter.count(.serverError)
      } else {
        rateLimiter.count(.clientError)
      }
      let parsed = try? JSONValue(parsing: responseBody)
      let code = parsed?["errorCode"]?.int64Value
      let text = parsed?["errorMessage"]?.stringValue
      let detail = "\(endpoint) answered HTTP \(status)" + (code.map { " errorCode \($0)" } ?? "") + (text.map { ": \($0)" } ?? "")
      if status == 401 {
        throw AppStoreServerAPIError(code: .keyRefused, httpStatus: status, apiErrorCode: code, message: detail)
      }
      if let code, AppStoreServerAPIError.notFoundCodes.contains(code) {
        throw AppStoreServerAPIError(code: .notFound, httpStatus: status, apiErrorCode: code, message: detail)
      }
      last = AppStoreServerAPIError(code: .unavailable, httpStatus: status, apiErrorCode: code, message: detail)
      if status == 429 {
        // The wait is the rate limiter's (until `Retry-After`), not a backoff.
        continue
      }
      if status >= 500 || code.map(AppStoreServerAPIError.retryableCodes.contains) == true {
        try await backoff(attempt)
        continue
      }
      if status == 404 && code == nil {
        throw AppStoreServerAPIError(code: .notFound, httpStatus: status, message: detail)
      }
      throw AppStoreServerAPIError(code: .rejected, httpStatus: status, apiErrorCode: code, message: detail)
    } while attempt < maxAttempts
    throw last
  }

  /// Waits for the app's turn under Apple's rate limit in `environment`: a token of its bucket
  /// (on ``rateClock``), then the end of any `Retry-After` (on ``clock``); fails without sending
  /// when either wait would be longer than ``AppStoreServerAPIRateLimiter/maxWait``.
  private func waitForRateLimit(
    key: String, environment: SubscriptionDomain.Environment, endpoint: String
  ) async throws(AppStoreServerAPIError) {
    func refuse() -> AppStoreServerAPIError {
      rateLimiter.count(.refusedLocally)
      return AppStoreServerAPIError(
        code: .unavailable, httpStatus: 429, apiErrorCode: 4_290_000,
        message: "\(endpoint): Apple's rate limit for this app is exhausted for longer than \(rateLimiter.maxWait); not sent")
    }
    func sleep(_ clock: any ServiceClock, _ ms: Int64) async throws(AppStoreServerAPIError) {
      do { try await clock.sleep(for: .milliseconds(ms)) } catch {
        throw AppStoreServerAPIError(code: .unavailable, message: "cancelled while waiting for the App Store Server API rate limit")
      }
    }
    var waited = false
    let now = Self.milliseconds(rateClock.monotonicNow)
    guard let tokenAt = rateLimiter.reserve(key: key, environment: environment, nowMs: now) else { throw refuse() }
    if tokenAt > now {
      waited = true
      try await sleep(rateClock, tokenAt - now)
    }
    // A 429 (also one that arrives while this request waits) holds it until `Retry-After` on
    // Apple's clock, or as much real time.
    var until = rateLimiter.blockedUntil(key: key, environment: environment)
    let first = until - appleClock.wallMs
    if first > 0 {
      guard first <= maxWaitMs else { throw refuse() }
      waited = true
      var realDeadline = Self.milliseconds(rateClock.monotonicNow) + first
      while true {
        let appleLeft = until - appleClock.wallMs
        let realLeft = realDeadline - Self.milliseconds(rateClock.monotonicNow)
        guard appleLeft > 0, realLeft > 0 else { break }
        do {
          try await firstOf(appleClock, appleLeft, rateClock, realLeft)
        } catch {
          throw AppStoreServerAPIError(code: .unavailable, message: "cancelled while waiting for the App Store Server API rate limit")
        }
        let later = rateLimiter.blockedUntil(key: key, environment: environment)
        if later > until {
          realDeadline += later - until
          until = later
        }
      }
    }
    if waited { rateLimiter.count(.waited) }
  }

  /// Sleeps until `a` has slept `aMs` or `b` has slept `bMs`, whichever ends first.
  private func firstOf(_ a: any ServiceClock, _ aMs: Int64, _ b: any ServiceClock, _ bMs: Int64) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask { try await a.sleep(for: .milliseconds(aMs)) }
      group.addTask { try await b.sleep(for: .milliseconds(bMs)) }
      defer { group.cancelAll() }
      try await group.next()
    }
  }

  private static func milliseconds(_ d: Duration) -> Int64 {
    d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
  }

  private var maxWaitMs: Int64 {
    rateLimiter.maxWait.components.seconds * 1000 + rateLimiter.maxWait.components.attoseconds / 1_000_000_000_000_000
  }

  private func backoff(_ attempt: Int) async throws(AppStoreServerAPIError) {
    guard attempt < maxAttempts else { return }
    let ceiling = initialBackoff * (1 << min(attempt - 1, 10))
    do { try await clock.sleep(for: ceiling * Double.random(in: 0.5...1.0)) } catch {
      throw AppStoreServerAPIError(code: .unavailable, message: "cancelled while retrying the App Store Server API")
    }
  }
}

extension String {
  fileprivate func trimmingSuffix(_ suffix: String) -> String {
    hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
  }
}

/// Apple's limits on App Store Server API requests, kept by the client: a token bucket per app
/// and environment (50 requests per second in production, 5 in the sandbox, a tenth), on the
/// client's rate clock (real time), and the end of the last `429`'s `Retry-After` (UNIX time in
/// milliseconds, Apple's), before which no request of that app goes to that environment
/// (https://developer.apple.com/documentation/appstoreserverapi/identifying-rate-limits).
/// Counts every outcome for `/metrics`.
public final class AppStoreServerAPIRateLimiter: MetricsSource, Sendable {
  /// What happened to one request (or one wait), as counted in `/metrics`.
  public enum Outcome: String, Sendable, CaseIterable {
    /// 2xx.
    case ok
    /// 429 from Apple.
    case rateLimited = "rate_limited"
    /// Another 4xx.
    case clientError = "client_error"
    /// 5xx.
    case serverError = "server_error"
    /// No answer (connection, timeout).
    case networkError = "network_error"
    /// Waited for a token or for `Retry-After` before sending.
    case waited
    /// Not sent: the wait would have been longer than ``AppStoreServerAPIRateLimiter/maxWait``.
    case refusedLocally = "refused_locally"
  }

  private struct Bucket {
    var tokens: Double
    var atMs: Int64
  }

  private struct State {
    var buckets: [String: Bucket] = [:]
    /// The last `Retry-After` per app and environment (UNIX ms, Apple's wall time).
    var blockedUntil: [String: Int64] = [:]
    var outcomes: [Outcome: UInt64] = [:]
  }

  /// Requests per second per app in production.
  public let productionRate: Double
  /// Requests per second per app in the sandbox.
  public let sandboxRate: Double
  /// The longest a request waits for its turn; past it the call fails as `unavailable` unsent.
  public let maxWait: Duration
  /// The wait after a `429` without a readable `Retry-After`, in milliseconds.
  public let defaultRetryMs: Int64
  private let state = Mutex(State())

  /// Creates a limiter with Apple's limits (or others, for a test or a negotiated limit).
  public init(
    productionRate: Double = 50, sandboxRate: Double = 5, maxWait: Duration = .seconds(10),
    defaultRetryMs: Int64 = 1_000
  ) {
    self.productionRate = max(0.001, productionRate)
    self.sandboxRate = max(0.001, sandboxRate)
    self.maxWait = maxWait
    self.defaultRetryMs = max(1, defaultRetryMs)
  }

  private func rate(_ environment: SubscriptionDomain.Environment) -> Double {
    environment == .sandbox ? sandboxRate : productionRate
  }

  private static func key(_ app: String, _ environment: SubscriptionDomain.Environment) -> String {
    app + "\u{0}" + (environment == .sandbox ? "sandbox" : "production")
  }

  /// Reserves a token for the next request of `app` in `environment`: the instant (ms of the
  /// rate clock) at which it may be sent (`nowMs` or later), or nil when that is more than
  /// ``maxWait`` away (nothing is reserved then). A `Retry-After` is apart: ``blockedUntil(key:environment:)``.
  public func reserve(key app: String, environment: SubscriptionDomain.Environment, nowMs: Int64) -> Int64? {
    let rate = rate(environment)
    let maxWaitMs = maxWait.components.seconds * 1000 + maxWait.components.attoseconds / 1_000_000_000_000_000
    return state.withLock { state -> Int64? in
      let key = Self.key(app, environment)
      var bucket = state.buckets[key] ?? Bucket(tokens: rate, atMs: nowMs)
      if nowMs > bucket.atMs {
        bucket.tokens = min(rate, bucket.tokens + Double(nowMs - bucket.atMs) * rate / 1000)
        bucket.atMs = nowMs
      }
      // Tokens may go below zero: each waiting request holds its place in line.
      let deficit = 1 - bucket.tokens
      let tokenAt = deficit > 0 ? bucket.atMs + Int64((deficit * 1000 / rate).rounded(.up)) : nowMs
      let sendAt = max(tokenAt, nowMs)
      guard sendAt - nowMs <= maxWaitMs else {
        state.buckets[key] = bucket
        return nil
      }
      bucket.tokens -= 1
      state.buckets[key] = bucket
      return sendAt
    }
  }

  /// Apple answered 429: no request of `app` in `environment` before `untilMs`.
  public func block(key app: String, environment: SubscriptionDomain.Environment, untilMs: Int64) {
    state.withLock { state in
      let key = Self.key(app, environment)
      state.blockedUntil[key] = max(state.blockedUntil[key] ?? 0, untilMs)
    }
  }

  /// The end of the last `Retry-After` of `app` in `environment` (UNIX ms; 0 when none).
  public func blockedUntil(key app: String, environment: SubscriptionDomain.Environment) -> Int64 {
    state.withLock { $0.blockedUntil[Self.key(app, environment)] ?? 0 }
  }

  /// Counts one outcome.
  public func count(_ outcome: Outcome) { state.withLock { $0.outcomes[outcome, default: 0] += 1 } }

  /// How many requests had `outcome` so far.
  public func count(of outcome: Outcome) -> UInt64 { state.withLock { $0.outcomes[outcome] ?? 0 } }

  /// The counts as a metric family (`substatus_appstore_server_api_requests_total`).
  public func metricFamilies() -> [MetricFamily] {
    let outcomes = state.withLock { $0.outcomes }
    return [
      .labelled(
        "substatus_appstore_server_api_requests_total",
        "App Store Server API requests by outcome (ok, rate_limited, client_error, server_error, network_error; waited: a wait for the rate limit before sending; refused_locally: not sent, the wait would be too long).",
        .counter, label: "outcome", Outcome.allCases.map { ($0.rawValue, outcomes[$0] ?? 0) })
    ]
  }
}
