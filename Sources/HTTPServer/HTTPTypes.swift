/// The header fields of a request or response, in arrival order, looked up case-insensitively.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
  /// The fields as `(name, value)` pairs, names as sent.
  public private(set) var fields: [(name: String, value: String)]

  /// Creates headers from `(name, value)` pairs.
  public init(_ fields: [(name: String, value: String)] = []) { self.fields = fields }

  /// Creates headers from a dictionary literal, `["Content-Type": "application/json"]`.
  public init(dictionaryLiteral elements: (String, String)...) {
    self.fields = elements.map { (name: $0.0, value: $0.1) }
  }

  /// The first value of the field named `name` (ASCII case-insensitive), or `nil`.
  public subscript(name: String) -> String? {
    let lowered = name.lowercased()
    return fields.first { $0.name.lowercased() == lowered }?.value
  }

  /// Appends a field, keeping any existing one of the same name.
  public mutating func add(name: String, value: String) { fields.append((name: name, value: value)) }

  /// Replaces every field named `name` with one field.
  public mutating func replaceOrAdd(name: String, value: String) {
    let lowered = name.lowercased()
    fields.removeAll { $0.name.lowercased() == lowered }
    fields.append((name: name, value: value))
  }

  /// Iterates the fields in order.
  public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
    fields.makeIterator()
  }

  /// Two header sets are equal when they hold the same fields in the same order.
  public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
    lhs.fields.count == rhs.fields.count
      && zip(lhs.fields, rhs.fields).allSatisfy { $0.name == $1.name && $0.value == $1.value }
  }
}

/// One HTTP/1.1 request as the server hands it to a handler, its body collected in full.
public struct HTTPRequest: Sendable {
  /// The method, e.g. `GET`, `POST`, as sent.
  public var method: String
  /// The percent-decoded path, without the query string, e.g. `/v1/apps/a1/apple/notifications`.
  public var path: String
  /// The decoded query arguments in order; an argument without `=` has an empty value.
  public var queryItems: [(name: String, value: String)]
  /// The request header fields.
  public var headers: HTTPHeaders
  /// The request body (empty when none was sent).
  public var body: [UInt8]
  /// The values of `{name}` segments of the route that matched; filled by ``HTTPRouter``.
  public var pathParameters: [String: String]
  /// The client's address as gRPC names peers (`ipv4:127.0.0.1:53122`, `ipv6:[::1]:53122`);
  /// filled by the server. Behind a trusted proxy it is the forwarded client, without a port
  /// (`ipv4:198.51.100.7`), and ``forwardedBy`` is the proxy.
  public var peer: String = ""
  /// The trusted proxy the request came through (as ``peer`` names peers), when ``peer`` is the
  /// client it forwarded for; `nil` otherwise.
  public var forwardedBy: String?
  /// When the request head arrived, read from the server's clock
  /// (``HTTPServerConfiguration/clock``, its `monotonicNow`); filled by the server. A deadline the
  /// request carries counts from here, not from the end of its body.
  public var receivedAt: Duration?

  /// Creates a request; the server does this, tests of handlers may too.
  public init(
    method: String, path: String, queryItems: [(name: String, value: String)] = [],
    headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], pathParameters: [String: String] = [:]
  ) {
    self.method = method
    self.path = path
    self.queryItems = queryItems
    self.headers = headers
    self.body = body
    self.pathParameters = pathParameters
  }

  /// The first value of query argument `name`, or `nil`.
  public func query(_ name: String) -> String? { queryItems.first { $0.name == name }?.value }
}

/// A response a handler returns: status, header fields and a body, either whole (sent with
/// `Content-Length`) or produced while it is sent (``streamedBody``).
public struct HTTPResponse: Sendable, Equatable {
  /// The status code, e.g. 200.
  public var status: Int
  /// The header fields to send (`Content-Length` is added by the server).
  public var headers: HTTPHeaders
  /// The body bytes; ignored when ``streamedBody`` is set.
  public var body: [UInt8]
  /// A body written while it is produced (chunked transfer encoding on HTTP/1.1), or `nil`.
  public var streamedBody: HTTPStreamedBody?

  /// Creates a response.
  public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
    self.status = status
    self.headers = headers
    self.body = body
  }

  /// A response whose body `produce` writes while the server sends it.
  ///
  /// The status and headers go out first; `produce` then runs in a task of its own. Each
  /// ``HTTPBodyWriter/write(_:)`` waits while more than `maxPendingBytes` are not yet taken by the
  /// connection (a slow reader slows the producer instead of growing a buffer); when the client
  /// goes away the producer's task is cancelled and writes throw; when the server stops the task
  /// is cancelled (what it writes before returning still goes out, for a short grace). The body
  /// ends when `produce` returns; if it throws, the connection is closed without the final chunk,
  /// so the client sees a truncated body.
  ///
  /// ```swift
  /// HTTPResponse.streamed(headers: ["Content-Type": "text/event-stream"]) { writer in
  ///   for await event in events { try await writer.write(Array(event.utf8)) }
  /// }
  /// ```
  public static func streamed(
    status: Int = 200, headers: HTTPHeaders = HTTPHeaders(), maxPendingBytes: Int = 64 * 1024,
    _ produce: @escaping @Sendable (HTTPBodyWriter) async throws -> Void
  ) -> HTTPResponse {
    var response = HTTPResponse(status: status, headers: headers)
    response.streamedBody = HTTPStreamedBody(maxPendingBytes: maxPendingBytes, produce: produce)
    return response
  }

  /// Equal when status, headers and body are, and both stream the same ``HTTPStreamedBody`` or none.
  public static func == (lhs: HTTPResponse, rhs: HTTPResponse) -> Bool {
    lhs.status == rhs.status && lhs.headers == rhs.headers && lhs.body == rhs.body
      && lhs.streamedBody === rhs.streamedBody
  }

  /// A response with a UTF-8 body and the given content type.
  public static func text(
    _ text: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8"
  ) -> HTTPResponse {
    HTTPResponse(status: status, headers: ["Content-Type": contentType], body: Array(text.utf8))
  }

  /// A response whose body is already-serialized JSON, with `Content-Type: application/json`.
  public static func json(_ bytes: [UInt8], status: Int = 200) -> HTTPResponse {
    HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: bytes)
  }

  /// The JSON error body this module uses for every error: `{"error":{"status":N,"message":"…"}}`.
  public static func error(status: Int, message: String) -> HTTPResponse {
    let body = "{\"error\":{\"status\":\(status),\"message\":\(jsonQuoted(message))}}"
    return .json(Array(body.utf8), status: status)
  }
}

/// An error a route handler throws to answer with a precise status and a JSON error body.
public struct HTTPError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The HTTP status to answer with (4xx or 5xx).
  public var status: Int
  /// A message for the caller; it must not contain secrets.
  public var message: String
  /// Extra header fields for the error response (e.g. `Allow` for 405).
  public var headers: HTTPHeaders

  /// Creates an error with a status and message.
  public init(status: Int, message: String, headers: HTTPHeaders = HTTPHeaders()) {
    self.status = status
    self.message = message
    self.headers = headers
  }

  /// 400 Bad Request with `message`.
  public static func badRequest(_ message: String) -> HTTPError { HTTPError(status: 400, message: message) }
  /// 404 Not Found with `message`.
  public static func notFound(_ message: String) -> HTTPError { HTTPError(status: 404, message: message) }

  /// `HTTP <status>: <message>`.
  public var description: String { "HTTP \(status): \(message)" }

  /// The response the server sends for this error.
  public var response: HTTPResponse {
    var response = HTTPResponse.error(status: status, message: message)
    for field in headers { response.headers.replaceOrAdd(name: field.name, value: field.value) }
    return response
  }
}

/// Quotes `text` as a JSON string literal (RFC 8259 escapes).
func jsonQuoted(_ text: String) -> String {
  var out = "\""
  for scalar in text.unicodeScalars {
    switch scalar {
    case "\"": out += "\\\""
    case "\\": out += "\\\\"
    case "\n": out += "\\n"
    case "\r": out += "\\r"
    case "\t": out += "\\t"
    case _ where scalar.value < 0x20:
      let hex = String(scalar.value, radix: 16)
      out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
    default: out.unicodeScalars.append(scalar)
    }
  }
  return out + "\""
}
