import SubstatusJSON

/// A Connect unary call in its GET form (the Connect protocol's "Unary-Get-Request"):
/// `GET /package.Service/Method?connect=v1&encoding=json&base64=1&compression=gzip&message=...`,
/// the request message in the query instead of the body. Only methods whose `rpc` declares
/// `idempotency_level = NO_SIDE_EFFECTS` may be called so (the caller decides; see
/// ``notAllowed(forSideEffects:)``).
public struct ConnectGetRequest: Sendable, Hashable {
  /// The call's format: Connect unary, in the codec `encoding` names.
  public let format: CallFormat
  /// The request message, as a POST would carry it in its body (still compressed when
  /// ``compression`` is set).
  public let message: [UInt8]
  /// The `compression` argument (the POST form's `content-encoding`), `nil` when absent.
  public let compression: String?

  /// Reads the query of a GET request.
  ///
  /// - Parameter queryItems: The decoded query arguments, in order (the first of a name counts).
  /// - Returns: The call, or a 400 (a missing `message` or `encoding`, a `connect` other than
  ///   `v1`, `base64=1` over text that is not base64) or 415 (an `encoding` other than `json` or
  ///   `proto`) rejection whose message names the argument.
  public static func parse(queryItems: [(name: String, value: String)]) -> Result<ConnectGetRequest, HTTPRejection> {
    func value(_ name: String) -> String? { queryItems.first { $0.name == name }?.value }
    if let version = value("connect"), version != "v1" {
      return .failure(HTTPRejection(status: 400, message: "connect must be v1, not \(ErrorText.quoted(version))"))
    }
    let format: CallFormat
    switch value("encoding") {
    case "json": format = CallFormat(framing: .connectUnary, codec: .json, responseContentType: "application/json")
    case "proto": format = CallFormat(framing: .connectUnary, codec: .protobuf, responseContentType: "application/proto")
    case nil: return .failure(HTTPRejection(status: 400, message: "a GET call needs encoding=json or encoding=proto"))
    case let other?:
      return .failure(
        HTTPRejection(status: 415, message: "unsupported encoding \(ErrorText.quoted(other)): use json or proto"))
    }
    guard let text = value("message") else {
      return .failure(HTTPRejection(status: 400, message: "a GET call needs the request message in message="))
    }
    var message: [UInt8] = []
    if value("base64") == "1" {
      // URL-safe base64, its padding optional.
      var decoder = Base64StreamDecoder()
      let padded = Array(text.utf8) + Array(repeating: UInt8(ascii: "="), count: (4 - text.utf8.count % 4) % 4)
      guard decoder.decode(padded, into: &message), decoder.pendingCount == 0 else {
        return .failure(HTTPRejection(status: 400, message: "message is not base64 (base64=1)"))
      }
    } else {
      message = Array(text.utf8)
    }
    return .success(ConnectGetRequest(format: format, message: message, compression: value("compression")))
  }

  /// The answer to a GET of a method that may have side effects: 405, `allow: POST`.
  public static func notAllowed(forSideEffects method: String) -> HTTPRejection {
    HTTPRejection(
      status: 405,
      message: "\(method) may have side effects: call it with POST (GET is for methods that declare NO_SIDE_EFFECTS)",
      headers: [HTTPField("allow", "POST")])
  }
}
