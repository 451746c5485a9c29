public import RPCCore

/// The response head: HTTP status and header fields (lower-case names, no pseudo-headers).
public struct ResponseHead: Sendable, Hashable {
  /// The HTTP status code.
  public var status: Int
  /// The header fields, `content-type` first.
  public var fields: [HTTPField]

  /// Creates a head.
  public init(status: Int, fields: [HTTPField]) {
    self.status = status
    self.fields = fields
  }
}

/// What one ``ResponseEncoder/encode(_:)`` produced for the transport to send, in this order: the
/// head (at most once per call), body bytes, then the end of the response.
public struct EncodedResponse: Sendable {
  /// The response head, when it is sent now.
  public var head: ResponseHead?
  /// Body bytes to send after the head (already base64 for gRPC-Web text).
  public var body: [UInt8] = []
  /// Whether the response is complete after ``body``: the transport ends the stream (no HTTP
  /// trailers: these protocols carry the status in the head or the body).
  public var ends = false
  /// Whether a message over the send limit was replaced by `RESOURCE_EXHAUSTED`: the transport
  /// cancels the handler, as on the gRPC path.
  public var exceededSendLimit = false
}

/// How a response compresses its messages, for ``ResponseEncoder``: the algorithm negotiated for
/// the call (``RequestHead/responseCompression``) and the size from which a message is worth it.
public struct ResponseCompression: Sendable, Hashable {
  /// The algorithm for messages at or above ``threshold``; identity sends every message as is.
  public var algorithm: CompressionAlgorithm
  /// The smallest message compressed, in bytes; below it gzip's 18-byte frame and CPU are not
  /// worth it.
  public var threshold: Int

  /// 1 KiB.
  public static let defaultThreshold = 1024

  /// Creates a compression option.
  public init(algorithm: CompressionAlgorithm, threshold: Int = ResponseCompression.defaultThreshold) {
    self.algorithm = algorithm
    self.threshold = threshold
  }
}

/// Turns a handler's ``RPCResponsePart``s into the bytes of a Connect or gRPC-Web response; one
/// per call, fed every batch of parts the handler writes. Pure: the transport sends what it
/// returns.
///
/// - Connect unary: the response waits for the status (it decides the HTTP status). Success is
///   200 with the message as the body, initial metadata as header fields and trailing metadata as
///   `trailer-` fields; an error is the status of the Connect table with
///   ``ConnectError/errorJSON(code:message:trailers:)`` as an `application/json` body.
/// - Connect streaming: 200 and initial metadata at the first part, each message enveloped, then the
///   end-stream message (flag `0x02`, ``ConnectError/endStreamJSON(code:message:trailers:)``).
/// - gRPC-Web: 200 and initial metadata at the first part, each message enveloped, then the trailer
///   frame (flag `0x80`: `grpc-status`, `grpc-message`, metadata as `key: value\r\n` lines; binary
///   values base64 as in HTTP/2 trailers). A status with nothing before it is a Trailers-Only
///   answer: the status in the header fields, no body. gRPC-Web text base64-encodes (with padding)
///   the bytes of each call to ``encode(_:)``.
///
/// With a ``ResponseCompression`` every head advertises `gzip,identity` (`accept-encoding`,
/// `connect-accept-encoding` or `grpc-accept-encoding`); with gzip negotiated, a Connect unary
/// message at or above the threshold is the gzip body with `content-encoding: gzip`, and enveloped
/// messages at or above it carry the compressed flag (1) under `connect-content-encoding: gzip` or
/// `grpc-encoding: gzip` in the head. Errors, Connect's end-stream message and gRPC-Web's trailer
/// frame are never compressed (as connect-go and grpc-go send them).
public struct ResponseEncoder: Sendable {
  /// The call's format.
  public let format: CallFormat
  /// The largest message sent; a longer one ends the call with `RESOURCE_EXHAUSTED`.
  public let maxSendMessageSize: Int
  /// How messages are compressed; `nil`: never, and no accepted encodings are advertised.
  public let compression: ResponseCompression?
  private let extraFields: [HTTPField]
  private var headSent = false
  private var finished = false
  private var unaryInitial: Metadata?
  private var unaryMessage: [UInt8]?

  /// Creates an encoder.
  ///
  /// - Parameters:
  ///   - format: The call's format (not ``Framing/grpc``).
  ///   - maxSendMessageSize: The largest message sent, in bytes.
  ///   - extraFields: Fields added to the head (CORS).
  ///   - compression: How messages are compressed, usually
  ///     `ResponseCompression(algorithm: head.responseCompression)`; `nil` (the default) never
  ///     compresses and advertises nothing.
  public init(
    format: CallFormat, maxSendMessageSize: Int, extraFields: [HTTPField] = [],
    compression: ResponseCompression? = nil
  ) {
    self.format = format
    self.maxSendMessageSize = maxSendMessageSize
    self.extraFields = extraFields
    self.compression = compression
  }

  /// Whether the response is complete; later parts are ignored.
  public var isFinished: Bool { finished }

  /// Whether the head has been produced.
  public var hasSentHead: Bool { headSent }

  /// Encodes parts written by the handler.
  public mutating func encode(_ parts: [RPCResponsePart]) -> EncodedResponse {
    var out = EncodedResponse()
    guard !finished else { return out }
    var binary: [UInt8] = []
    for part in parts where !finished {
      switch part {
      case .metadata(let metadata):
        if format.framing == .connectUnary {
          if unaryInitial == nil { unaryInitial = metadata }
        } else if !headSent {
          out.head = streamingHead(metadata)
          headSent = true
        }
      case .message(let message):
        if message.count > maxSendMessageSize {
          out.exceededSendLimit = true
          end(
            code: .resourceExhausted,
            message: "message size \(message.count) exceeds sendMaxBytes \(maxSendMessageSize)",
            trailers: [:], into: &out, binary: &binary)
          continue
        }
        switch format.framing {
        case .connectUnary:
          if unaryMessage == nil { unaryMessage = message }
        default:
          if !headSent {
            out.head = streamingHead([:])
            headSent = true
          }
          if let packed = compressed(message) {
            Self.appendEnvelope(flags: 0x01, packed, to: &binary)
          } else {
            Self.appendEnvelope(flags: 0, message, to: &binary)
          }
        }
      case .status(let code, let message, let trailers):
        end(code: code, message: message, trailers: trailers, into: &out, binary: &binary)
      }
    }
    out.body = format.framing == .grpcWebText && !binary.isEmpty ? Self.base64Padded(binary) : binary
    return out
  }

  private mutating func end(
    code: RPCError.Code, message: String, trailers: Metadata, into out: inout EncodedResponse, binary: inout [UInt8]
  ) {
    // A status's message and details are cut to their bounds whatever the protocol (the same
    // text goes into Connect's JSON error and gRPC-Web's trailers).
    let (message, trailers) = StatusBounds.bound(message: message, trailers: trailers)
    finished = true
    out.ends = true
    switch format.framing {
    case .connectUnary:
      var fields: [HTTPField]
      if code == .ok {
        fields = [HTTPField("content-type", format.responseContentType)]
        binary = unaryMessage ?? []
        if let packed = compressed(binary) {
          binary = packed
          fields.append(HTTPField("content-encoding", CompressionAlgorithm.gzip.rawValue))
        }
      } else {
        fields = [HTTPField("content-type", "application/json")]
        binary = ConnectError.errorJSON(code: code, message: message, trailers: trailers).serializedBytes()
      }
      fields += acceptFields
      appendMetadata(unaryInitial ?? [:], prefix: "", to: &fields)
      appendMetadata(trailers, prefix: "trailer-", to: &fields)
      out.head = ResponseHead(
        status: code == .ok ? 200 : ConnectError.httpStatus(of: code), fields: fields + extraFields)
      headSent = true
    case .connectStreaming:
      if !headSent {
        out.head = streamingHead([:])
        headSent = true
      }
      Self.appendEnvelope(
        flags: 0x02, ConnectError.endStreamJSON(code: code, message: message, trailers: trailers).serializedBytes(),
        to: &binary)
    case .grpcWeb, .grpcWebText, .grpc:
      let statusFields = Self.grpcStatusFields(code: code, message: message, trailers: trailers)
      if !headSent && binary.isEmpty {
        // Trailers-Only: the status in the head, no body (and no message encoding).
        var head = streamingHead([:], messagesFollow: false)
        head.fields.insert(contentsOf: statusFields, at: 1)
        out.head = head
        headSent = true
        return
      }
      if !headSent {
        out.head = streamingHead([:])
        headSent = true
      }
      var block: [UInt8] = []
      for field in statusFields {
        block.append(contentsOf: field.name.utf8)
        block.append(contentsOf: ": ".utf8)
        block.append(contentsOf: field.value.utf8)
        block.append(contentsOf: "\r\n".utf8)
      }
      Self.appendEnvelope(flags: 0x80, block, to: &binary)
    }
  }

  private func streamingHead(_ metadata: Metadata, messagesFollow: Bool = true) -> ResponseHead {
    var fields = [HTTPField("content-type", format.responseContentType)]
    if messagesFollow, compression?.algorithm == .gzip {
      fields.append(HTTPField(RequestHead.messageEncodingField(format), CompressionAlgorithm.gzip.rawValue))
    }
    fields += acceptFields
    appendMetadata(metadata, prefix: "", to: &fields)
    return ResponseHead(status: 200, fields: fields + extraFields)
  }

  /// The accepted encodings advertised when compression is configured.
  private var acceptFields: [HTTPField] {
    guard compression != nil else { return [] }
    let value = CompressionAlgorithm.acceptFieldValue(CompressionAlgorithm.supported)
    return [HTTPField(RequestHead.acceptEncodingField(format), value)]
  }

  /// `message` gzipped when gzip is negotiated and the message reaches the threshold; `nil` to
  /// send it as is.
  private func compressed(_ message: [UInt8]) -> [UInt8]? {
    guard let compression, compression.algorithm == .gzip, message.count >= compression.threshold else { return nil }
    return Gzip.compress(message)
  }

  /// `grpc-status`, `grpc-message` (percent-encoded, when not empty) and the trailing metadata.
  static func grpcStatusFields(code: RPCError.Code, message: String, trailers: Metadata) -> [HTTPField] {
    var fields = [HTTPField("grpc-status", String(code.rawValue))]
    if !message.isEmpty { fields.append(HTTPField("grpc-message", HeaderCoding.percentEncode(message))) }
    for element in trailers where !HeaderCoding.isReserved(element.key) {
      fields.append(HTTPField(element.key, HeaderCoding.headerValue(element.value)))
    }
    return fields
  }

  /// Appends metadata as fields; for Connect, `grpc-status-details-bin` is left out (the details
  /// are in the JSON error). The accepted-encoding fields of a refused compression pass, unless
  /// the encoder advertises them itself.
  private func appendMetadata(_ metadata: Metadata, prefix: String, to fields: inout [HTTPField]) {
    for element in metadata {
      switch element.key {
      case "accept-encoding", "connect-accept-encoding", "grpc-accept-encoding":
        if compression != nil { continue }
      case ConnectError.statusDetailsKey where !prefix.isEmpty: continue
      default: if HeaderCoding.isReserved(element.key) { continue }
      }
      fields.append(HTTPField(prefix + element.key, HeaderCoding.headerValue(element.value)))
    }
  }

  /// Appends one envelope: flags, big-endian length, payload.
  static func appendEnvelope(flags: UInt8, _ payload: [UInt8], to out: inout [UInt8]) {
    let n = UInt32(truncatingIfNeeded: payload.count)
    out.append(flags)
    out.append(UInt8(truncatingIfNeeded: n >> 24))
    out.append(UInt8(truncatingIfNeeded: n >> 16))
    out.append(UInt8(truncatingIfNeeded: n >> 8))
    out.append(UInt8(truncatingIfNeeded: n))
    out.append(contentsOf: payload)
  }

  /// Standard base64 with padding.
  static func base64Padded(_ bytes: [UInt8]) -> [UInt8] {
    var text = Array(HeaderCoding.base64Encode(bytes).utf8)
    while text.count % 4 != 0 { text.append(UInt8(ascii: "=")) }
    return text
  }
}
