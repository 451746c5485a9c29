import Foundation

/// Sends HTTP requests with headers (GET and POST); the App Store Server API client's outbound
/// I/O, replaceable in tests.
public protocol HTTPRequester: Sendable {
  /// Sends one request and returns the status code and body.
  /// - Parameters:
  ///   - method: `GET` or `POST`.
  ///   - url: the full URL, query included.
  ///   - headers: request headers (an `Authorization` header is never logged).
  ///   - body: the body, for `POST`.
  ///   - timeout: the time limit of the request.
  /// - Throws: On connection failure or timeout.
  func send(method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration)
    async throws -> (status: Int, body: [UInt8])

  /// Sends one request and returns the status code, body and the values of the response headers
  /// named in `responseHeaders` (the App Store Server API's `Retry-After`). The default sends
  /// with ``send(method:url:headers:body:timeout:)`` and returns no header.
  /// - Throws: On connection failure or timeout.
  func send(
    method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration,
    responseHeaders: [String]
  ) async throws -> (status: Int, body: [UInt8], headers: [String: String])
}

extension HTTPRequester {
  /// See ``HTTPRequester/send(method:url:headers:body:timeout:responseHeaders:)``: no header.
  public func send(
    method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration,
    responseHeaders: [String]
  ) async throws -> (status: Int, body: [UInt8], headers: [String: String]) {
    let (status, body) = try await send(method: method, url: url, headers: headers, body: body, timeout: timeout)
    return (status, body, [:])
  }
}
