/// The strict HTTP/1.1 framing rules the listener enforces on every request head before it reads a
/// body (RFC 9112 §6): what would let two parsers disagree on where a request ends is refused, and
/// the connection closed after the answer, so nothing smuggled behind it is read.
///
/// libmicrohttpd 0.9.75 (Debian 12) accepts all of these: with both `Content-Length` and
/// `Transfer-Encoding` it frames by the chunks; with an unknown coding it reads the body until
/// the connection closes (the client waits for an answer that never comes); it joins an obs-fold
/// line into a mangled field, cuts a value at a NUL, and takes a bare LF as a line end. Its
/// `MHD_OPTION_STRICT_FOR_CLIENT` only requires `Host` (answering its 400 twice) and refuses a
/// space in the target (closing without an answer), so it stays off: the field rules are checked
/// here and the line rules on the head's bytes (``HTTPServer``).
public enum HTTPFraming {
  /// Why a request head was refused.
  public enum Fault: Sendable, Equatable {
    /// Both `Content-Length` and `Transfer-Encoding`.
    case contentLengthWithTransferEncoding
    /// A transfer coding other than `chunked`.
    case unknownTransferCoding(String)
    /// Codings stacked (`chunked, chunked`), an empty list, or `Transfer-Encoding` in HTTP/1.0.
    case badTransferEncoding
    /// Several `Content-Length` values that differ, or one that is not a number.
    case badContentLength
    /// HTTP/1.1 without exactly one `Host` (RFC 9112 §3.2).
    case badHost
    /// The head's bytes: a bare LF, an obs-fold line, a NUL or CR in a field, a field name that is
    /// not a token, a space or control character in the request target.
    case malformedHead(String)

    /// The answer: 501 for an unknown coding (RFC 9112 §6.1), else 400; always with
    /// `Connection: close`.
    public var response: HTTPResponse {
      var response: HTTPResponse
      switch self {
      case .contentLengthWithTransferEncoding:
        response = .error(status: 400, message: "a request may not have both Content-Length and Transfer-Encoding")
      case .unknownTransferCoding(let coding):
        response = .error(status: 501, message: "transfer coding \"\(coding.prefix(32))\" is not implemented (only chunked)")
      case .badTransferEncoding:
        response = .error(status: 400, message: "Transfer-Encoding must be exactly chunked, in HTTP/1.1")
      case .badContentLength:
        response = .error(status: 400, message: "Content-Length must be one decimal number")
      case .badHost:
        response = .error(status: 400, message: "exactly one Host field is required in HTTP/1.1")
      case .malformedHead(let what):
        response = .error(status: 400, message: "malformed request head: \(what)")
      }
      response.headers.add(name: "Connection", value: "close")
      return response
    }
  }

  /// Checks the framing fields of a request head; `nil` when they are acceptable.
  /// - Parameters:
  ///   - headers: the head's fields.
  ///   - version: the request line's version (`HTTP/1.1`).
  public static func check(headers: HTTPHeaders, version: String) -> Fault? {
    var lengths: [Substring] = []
    var codings: [Substring] = []
    var hasTransferEncoding = false
    var hosts = 0
    for field in headers.fields {
      switch field.name.lowercased() {
      case "host":
        hosts += 1
      case "content-length":
        lengths += field.value.split(separator: ",", omittingEmptySubsequences: false).map(\.trimmingSpaces)
      case "transfer-encoding":
        hasTransferEncoding = true
        codings += field.value.split(separator: ",", omittingEmptySubsequences: false).map(\.trimmingSpaces)
      default: continue
      }
    }
    if version == "HTTP/1.1" && hosts != 1 { return .badHost }
    if hasTransferEncoding {
      if !lengths.isEmpty { return .contentLengthWithTransferEncoding }
      if let unknown = codings.first(where: { !$0.isEmpty && $0.lowercased() != "chunked" }) {
        return .unknownTransferCoding(String(unknown))
      }
      guard codings.count == 1, version == "HTTP/1.1" else { return .badTransferEncoding }
      return nil
    }
    if let first = lengths.first {
      guard !first.isEmpty, first.count <= 18, first.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
        lengths.allSatisfy({ $0 == first })
      else { return .badContentLength }
    }
    return nil
  }

  /// Whether `byte` may appear in a field name (RFC 9110 `tchar`).
  static func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case 0x30...0x39, 0x41...0x5a, 0x61...0x7a: return true
    case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
      UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
      UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
      return true
    default: return false
    }
  }
}
