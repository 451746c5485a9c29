public import RPCCore
import SubstatusJSON

/// One HTTP header field, name in lower case, as both listeners read and write them.
public struct HTTPField: Sendable, Hashable, CustomStringConvertible {
  /// The lower-case field name.
  public var name: String
  /// The field value.
  public var value: String

  /// Creates a field; the name is lower-cased.
  public init(_ name: String, _ value: String) {
    self.name = name.lowercased()
    self.value = value
  }

  /// `name: value`.
  public var description: String { "\(name): \(value)" }
}

/// An answer at the HTTP level, before any RPC exists: an unsupported media type, a method other
/// than POST, a CORS preflight. The body is ``message`` as `text/plain`.
public struct HTTPRejection: Error, Sendable, Hashable {
  /// The HTTP status code, such as 415.
  public var status: Int
  /// A sentence for the caller, sent as the `text/plain` body.
  public var message: String
  /// Extra response header fields (`accept-post`, `allow`, CORS fields).
  public var headers: [HTTPField]

  /// Creates a rejection.
  public init(status: Int, message: String, headers: [HTTPField] = []) {
    self.status = status
    self.message = message
    self.headers = headers
  }
}

/// How a call's request and response bodies are framed, chosen by the request's `content-type`.
public enum Framing: Sendable, Hashable {
  /// gRPC over HTTP/2: length-prefixed messages, status in HTTP trailers.
  case grpc
  /// gRPC-Web, binary: length-prefixed messages, status in a trailer frame (flag `0x80`) in the body.
  case grpcWeb
  /// gRPC-Web text (`application/grpc-web-text`): the gRPC-Web body, base64-encoded.
  case grpcWebText
  /// Connect unary: the bare message is the whole body; the status is the HTTP status, an error is
  /// Connect's JSON error body.
  case connectUnary
  /// Connect streaming: enveloped messages, then an end-stream message (flag `0x02`) in JSON.
  case connectStreaming
}

/// The protocol, codec and framing of one call, read from its `content-type` by
/// ``classify(method:contentType:)``.
///
/// ```swift
/// switch CallFormat.classify(method: "POST", contentType: "application/json") {
/// case .success(let format): format.framing   // .connectUnary, codec .json
/// case .failure(let rejection): rejection.status   // 415 for an unknown type
/// }
/// ```
public struct CallFormat: Sendable, Hashable {
  /// How bodies are framed.
  public let framing: Framing
  /// How messages are encoded.
  public let codec: MessageCodec
  /// The media type the response carries (the request's, without parameters; a Connect unary
  /// error is always `application/json`).
  public let responseContentType: String

  /// Creates a format; ``classify(method:contentType:)`` is the usual way.
  public init(framing: Framing, codec: MessageCodec, responseContentType: String) {
    self.framing = framing
    self.codec = codec
    self.responseContentType = responseContentType
  }

  /// The protocol ``ServerContext/rpcProtocol`` reports for the call.
  public var rpcProtocol: RPCProtocol {
    switch framing {
    case .grpc: .grpc
    case .grpcWeb, .grpcWebText: .grpcWeb
    case .connectUnary, .connectStreaming: .connect
    }
  }

  /// Whether requests are a sequence of length-prefixed envelopes (all but Connect unary).
  public var isEnveloped: Bool { framing != .connectUnary }

  /// The content types the server accepts, for the `accept-post` field of a 415 answer.
  public static let acceptedContentTypes = [
    "application/grpc", "application/grpc+proto", "application/grpc+json",
    "application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json",
    "application/grpc-web-text", "application/grpc-web-text+proto",
    "application/json", "application/proto", "application/connect+json", "application/connect+proto",
  ]

  /// Classifies a request by its HTTP method and `content-type`.
  ///
  /// | content-type | framing | codec |
  /// |---|---|---|
  /// | `application/grpc`, `+proto`, `+json` | ``Framing/grpc`` | protobuf, JSON |
  /// | `application/grpc-web`, `+proto`, `+json` | ``Framing/grpcWeb`` | protobuf, JSON |
  /// | `application/grpc-web-text`, `+proto` | ``Framing/grpcWebText`` | protobuf |
  /// | `application/proto`, `application/json` | ``Framing/connectUnary`` | protobuf, JSON |
  /// | `application/connect+proto`, `+json` | ``Framing/connectStreaming`` | protobuf, JSON |
  ///
  /// Media types compare case-insensitively; parameters are ignored except `charset`, which must
  /// be `utf-8` when present.
  ///
  /// - Parameters:
  ///   - method: The HTTP method; RPCs are `POST` (Connect's GET form is read by ``ConnectGetRequest``).
  ///   - contentType: The `content-type` field, `nil` when absent.
  /// - Returns: The format, or a 405 (method) or 415 (media type) rejection whose message names
  ///   what was received.
  public static func classify(method: String, contentType: String?) -> Result<CallFormat, HTTPRejection> {
    guard method == "POST" else {
      return .failure(
        HTTPRejection(
          status: 405, message: "RPCs use POST, not \(method)", headers: [HTTPField("allow", "POST")]))
    }
    guard let contentType, let mediaType = mediaType(contentType) else {
      return .failure(unsupported(contentType))
    }
    let format: CallFormat? =
      switch mediaType {
      case "application/grpc", "application/grpc+proto": CallFormat(framing: .grpc, codec: .protobuf, responseContentType: mediaType)
      case "application/grpc+json": CallFormat(framing: .grpc, codec: .json, responseContentType: mediaType)
      case "application/grpc-web", "application/grpc-web+proto":
        CallFormat(framing: .grpcWeb, codec: .protobuf, responseContentType: mediaType)
      case "application/grpc-web+json": CallFormat(framing: .grpcWeb, codec: .json, responseContentType: mediaType)
      case "application/grpc-web-text", "application/grpc-web-text+proto":
        CallFormat(framing: .grpcWebText, codec: .protobuf, responseContentType: mediaType)
      case "application/proto": CallFormat(framing: .connectUnary, codec: .protobuf, responseContentType: mediaType)
      case "application/json": CallFormat(framing: .connectUnary, codec: .json, responseContentType: mediaType)
      case "application/connect+proto":
        CallFormat(framing: .connectStreaming, codec: .protobuf, responseContentType: mediaType)
      case "application/connect+json":
        CallFormat(framing: .connectStreaming, codec: .json, responseContentType: mediaType)
      default: nil
      }
    guard let format else { return .failure(unsupported(contentType)) }
    return .success(format)
  }

  private static func unsupported(_ contentType: String?) -> HTTPRejection {
    let received = contentType.map { ErrorText.quoted($0) } ?? "no content-type"
    return HTTPRejection(
      status: 415,
      message:
        "unsupported content-type \(received): use application/json or application/proto (Connect), application/connect+json or +proto (Connect streaming), application/grpc-web[-text][+proto] (gRPC-Web) or application/grpc[+proto] (gRPC)",
      headers: [HTTPField("accept-post", acceptedContentTypes.joined(separator: ", "))])
  }

  /// The lower-cased media type without parameters; `nil` when a `charset` other than UTF-8 is named.
  private static func mediaType(_ contentType: String) -> String? {
    let parts = contentType.split(separator: ";", omittingEmptySubsequences: false)
    for parameter in parts.dropFirst() {
      let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingASCIISpaces().lowercased() }
      if pair.count == 2, pair[0] == "charset", pair[1].trimmingCharacters("\"") != "utf-8" { return nil }
    }
    return parts[0].trimmingASCIISpaces().lowercased()
  }
}

extension StringProtocol {
  /// The text without leading and trailing spaces and tabs.
  func trimmingASCIISpaces() -> String {
    var s = Substring(self)
    while s.first == " " || s.first == "\t" { s = s.dropFirst() }
    while s.last == " " || s.last == "\t" { s = s.dropLast() }
    return String(s)
  }

  /// The text without leading and trailing `character`s.
  func trimmingCharacters(_ character: Character) -> String {
    var s = Substring(self)
    while s.first == character { s = s.dropFirst() }
    while s.last == character { s = s.dropLast() }
    return String(s)
  }
}
