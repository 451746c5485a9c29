/// Which browser origins may call the API, and the CORS fields of the answers (Fetch standard;
/// the header lists are those of connectrpc's `cors` package, plus `Authorization` and
/// `X-Grpc-Web` for gRPC-Web clients).
///
/// No origin is allowed by default: a browser page from another origin cannot read any answer.
/// `substatusd --cors-origin https://console.example.com` (repeatable) allows one origin, compared
/// case-insensitively with the request's `Origin`; `*` allows every origin. Credentials (cookies)
/// are never allowed: callers authenticate with an `Authorization` header, which must be listed in
/// `Access-Control-Allow-Headers` and is.
public struct CORSPolicy: Sendable, Hashable {
  /// The allowed origins, lower-cased, such as `https://console.example.com`.
  public let allowedOrigins: [String]

  /// Request header fields a browser may send (`Access-Control-Allow-Headers`).
  public static let allowedHeaders = [
    "Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms", "Connect-Accept-Encoding",
    "Connect-Content-Encoding", "Accept-Encoding", "Content-Encoding", "Grpc-Timeout", "X-Grpc-Web",
    "X-User-Agent", "Authorization",
  ]

  /// Response header fields a page may read (`Access-Control-Expose-Headers`).
  public static let exposedHeaders = [
    "Content-Encoding", "Connect-Content-Encoding", "Connect-Accept-Encoding", "Grpc-Status", "Grpc-Message",
    "Grpc-Status-Details-Bin", "Grpc-Accept-Encoding",
  ]

  /// How long a browser may cache a preflight answer, in seconds.
  public static let maxAgeSeconds = 7200

  /// Creates a policy.
  /// - Parameter allowedOrigins: Origins as `scheme://host[:port]`, or `*` for any; empty allows none.
  public init(allowedOrigins: [String]) {
    self.allowedOrigins = allowedOrigins.map { $0.lowercased() }
  }

  /// Whether any origin is allowed.
  public var isEnabled: Bool { !allowedOrigins.isEmpty }

  /// Whether a request's `Origin` is allowed.
  public func allows(origin: String) -> Bool {
    let origin = origin.lowercased()
    return allowedOrigins.contains { $0 == "*" || $0 == origin }
  }

  /// Whether a request is a CORS preflight: `OPTIONS` with `Origin` and
  /// `Access-Control-Request-Method`.
  public static func isPreflight(method: String, origin: String?, requestMethod: String?) -> Bool {
    method == "OPTIONS" && origin != nil && requestMethod != nil
  }

  /// The answer to a preflight.
  ///
  /// An allowed origin asking for `POST` gets 204 with `Access-Control-Allow-Origin` (the origin),
  /// `-Allow-Methods: POST`, `-Allow-Headers` (``allowedHeaders`` and any other header names the
  /// browser asks for: custom metadata), `-Max-Age` and `Vary`. Anything else is a 403 rejection
  /// without CORS fields, so the browser refuses the call.
  ///
  /// - Parameters:
  ///   - origin: The `Origin` field.
  ///   - requestMethod: `Access-Control-Request-Method`.
  ///   - requestHeaders: `Access-Control-Request-Headers`, if any.
  /// - Returns: The head to answer with (no body), or the rejection.
  public func preflight(origin: String, requestMethod: String, requestHeaders: String?) -> Result<ResponseHead, HTTPRejection> {
    guard allows(origin: origin) else {
      return .failure(HTTPRejection(status: 403, message: "CORS: the origin \(origin) is not allowed"))
    }
    guard requestMethod == "POST" else {
      return .failure(HTTPRejection(status: 403, message: "CORS: RPCs use POST, not \(requestMethod)"))
    }
    var headers = Self.allowedHeaders
    let known = Set(headers.map { $0.lowercased() })
    for name in (requestHeaders ?? "").split(separator: ",") {
      let name = name.trimmingASCIISpaces()
      guard !name.isEmpty, name.utf8.allSatisfy(Self.isTokenByte), !known.contains(name.lowercased()) else { continue }
      headers.append(name)
    }
    return .success(
      ResponseHead(
        status: 204,
        fields: [
          HTTPField("access-control-allow-origin", origin),
          HTTPField("access-control-allow-methods", "POST"),
          HTTPField("access-control-allow-headers", headers.joined(separator: ", ")),
          HTTPField("access-control-max-age", String(Self.maxAgeSeconds)),
          HTTPField("vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        ]))
  }

  /// The CORS fields of an answer to an actual request: for an allowed `Origin`,
  /// `Access-Control-Allow-Origin`, `-Expose-Headers` (``exposedHeaders``) and `Vary: Origin`;
  /// none otherwise.
  public func responseFields(origin: String?) -> [HTTPField] {
    guard let origin, allows(origin: origin) else { return [] }
    return [
      HTTPField("access-control-allow-origin", origin),
      HTTPField("access-control-expose-headers", Self.exposedHeaders.joined(separator: ", ")),
      HTTPField("vary", "Origin"),
    ]
  }

  private static func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
    case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."): true
    default: false
    }
  }
}
