import Foundation
import OutboundHTTP

/// What an HTTP POST answered.
public struct HTTPPostResponse: Sendable {
  /// The status code.
  public var status: Int
  /// The body (at most the poster's limit, see ``OutboundHTTPPoster/maxResponseBytes``).
  public var body: [UInt8]
  /// How long the request took, from sending to the whole answer (wall time of the I/O).
  public var duration: Duration

  /// Creates a response.
  public init(status: Int, body: [UInt8], duration: Duration = .zero) {
    self.status = status
    self.body = body
    self.duration = duration
  }
}

/// Sends HTTP POST requests: the service's outbound HTTP to Apple and to webhooks, replaceable in
/// tests.
public protocol HTTPPoster: Sendable {
  /// Posts a body with `headers` (the caller sets `Content-Type`) and returns the answer.
  /// - Throws: On connection failure or timeout (`OutboundHTTPError` from ``OutboundHTTPPoster``).
  func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
  /// Whether ``post(url:headers:body:timeout:)`` itself ends every POST at its `timeout` on the
  /// system clock (answered, failed or timed out, never later) and ends at once when its task is
  /// cancelled: a caller on the system clock then needs no timer of its own beside it.
  var endsPostsAtTheirTimeout: Bool { get }
}

extension HTTPPoster {
  /// See ``HTTPPoster/endsPostsAtTheirTimeout``: not promised unless a poster says so.
  public var endsPostsAtTheirTimeout: Bool { false }
}

extension HTTPPoster {
  /// Posts a JSON body and returns the status code and body.
  /// - Throws: On connection failure or timeout.
  public func post(url: URL, body: [UInt8], timeout: Duration) async throws -> (status: Int, body: [UInt8]) {
    let response = try await post(
      url: url, headers: [("Content-Type", "application/json")], body: body, timeout: timeout)
    return (response.status, response.body)
  }
}

/// ``HTTPPoster`` and ``HTTPRequester`` over an `OutboundHTTPClient` (libcurl's multi interface).
///
/// Every request has a total deadline (its `timeout`: nothing of it outlives that, whatever the
/// other side does), reads at most ``maxResponseBytes`` of the answer (the connection is closed
/// past it), follows at most ``maxRedirects`` redirects and connects only to addresses its
/// ``addressPolicy`` allows, checked at connect time on every address tried. Connections are
/// pooled by the client, so requests with different address policies use different clients
/// (a connection opened for one must not be reused by a request the other policy would refuse).
///
/// ```swift
/// let apple = OutboundHTTPPoster.apple(client: client)
/// let hooks = OutboundHTTPPoster.webhooks(client: webhookClient, policy: WebhookURLPolicy())
/// ```
public struct OutboundHTTPPoster: HTTPPoster, HTTPRequester {
  /// The client the requests go through.
  public let client: OutboundHTTPClient
  /// Redirects followed; 0: a 3xx is the answer.
  public var maxRedirects: Int
  /// The most of an answer's body read.
  public var maxResponseBytes: Int
  /// Whether an answer whose body passed ``maxResponseBytes`` is returned (its status and first
  /// bytes) rather than thrown as `OutboundHTTPError` `tooLarge`.
  public var returnsTruncatedAnswers: Bool
  /// Checks every address before it is connected to; `nil` allows all.
  public var addressPolicy: OutboundAddressPolicy?

  /// Creates a poster.
  public init(
    client: OutboundHTTPClient = .shared, maxRedirects: Int = 0, maxResponseBytes: Int,
    returnsTruncatedAnswers: Bool, addressPolicy: OutboundAddressPolicy? = nil
  ) {
    self.client = client
    self.maxRedirects = maxRedirects
    self.maxResponseBytes = maxResponseBytes
    self.returnsTruncatedAnswers = returnsTruncatedAnswers
    self.addressPolicy = addressPolicy
  }

  /// The most of an answer of Apple's read (a verifyReceipt answer with a long history is a few
  /// MB at most).
  public static let appleMaxResponseBytes = 32 << 20

  /// For Apple's endpoints (verifyReceipt, the Server API): up to 3 redirects, answers up to
  /// ``appleMaxResponseBytes`` (a longer one is an error), any address.
  public static func apple(client: OutboundHTTPClient = .shared) -> OutboundHTTPPoster {
    OutboundHTTPPoster(
      client: client, maxRedirects: 3, maxResponseBytes: appleMaxResponseBytes, returnsTruncatedAnswers: false)
  }

  /// See ``HTTPPoster/endsPostsAtTheirTimeout``: the client's total deadline ends each request,
  /// and a cancelled caller's transfer is removed at once.
  public var endsPostsAtTheirTimeout: Bool { true }

  /// See ``HTTPPoster/post(url:headers:body:timeout:)``.
  /// - Throws: `OutboundHTTPError`.
  public func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
  {
    let response = try await send(.post, url: url, headers: headers, body: body, timeout: timeout)
    return HTTPPostResponse(status: response.status, body: response.body, duration: response.duration)
  }

  /// The client's method for `name`: POST, PUT (Set App Account Token, Send Consumption Information), otherwise GET.
  static func method(_ name: String) -> OutboundRequest.Method {
    switch name.uppercased() {
    case "POST": .post
    case "PUT": .put
    default: .get
    }
  }

  /// See ``HTTPRequester/send(method:url:headers:body:timeout:)``.
  /// - Throws: `OutboundHTTPError`.
  public func send(method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration)
    async throws -> (status: Int, body: [UInt8])
  {
    let response = try await send(
      Self.method(method), url: url, headers: headers, body: body ?? [], timeout: timeout)
    return (response.status, response.body)
  }

  /// See ``HTTPRequester/send(method:url:headers:body:timeout:responseHeaders:)``.
  /// - Throws: `OutboundHTTPError`.
  public func send(
    method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration,
    responseHeaders: [String]
  ) async throws -> (status: Int, body: [UInt8], headers: [String: String]) {
    let response = try await send(
      Self.method(method), url: url, headers: headers, body: body ?? [], timeout: timeout,
      responseHeaders: responseHeaders)
    return (response.status, response.body, response.headers)
  }

  private func send(
    _ method: OutboundRequest.Method, url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration,
    responseHeaders: [String] = []
  ) async throws(OutboundHTTPError) -> OutboundResponse {
    var request = OutboundRequest(method: method, url: url.absoluteString, headers: headers, body: body)
    request.responseHeaders = responseHeaders
    request.timeout = timeout
    request.connectTimeout = min(timeout, .seconds(5))
    request.maxResponseBytes = maxResponseBytes
    request.maxRedirects = maxRedirects
    request.addressPolicy = addressPolicy
    let response = try await client.send(request)
    if response.truncated && !returnsTruncatedAnswers {
      throw OutboundHTTPError(code: .tooLarge, message: "the answer is larger than \(maxResponseBytes) bytes")
    }
    return response
  }
}
