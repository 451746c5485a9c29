public import RPCCore
import SubstatusJSON

/// What a Connect or gRPC-Web request's header fields say: the caller's metadata, timeout and
/// message compression.
public struct RequestHead: Sendable {
  /// The request metadata: custom fields, `-bin` values base64-decoded as in gRPC. Fields the
  /// protocols reserve (`connect-*`, `grpc-*` but `grpc-status-details-bin`, content and transfer
  /// fields, pseudo-headers) are not metadata.
  public var metadata: Metadata
  /// The caller's timeout (`connect-timeout-ms` for Connect, `grpc-timeout` for gRPC-Web), `nil`
  /// when none was sent.
  public var timeout: Duration?
  /// How the request's messages are compressed (the body for Connect unary, envelopes with the
  /// compressed flag otherwise): pass it to ``RequestDeframer/init(format:maxMessageSize:compression:)``.
  public var compression: CompressionAlgorithm
  /// The compression the response's messages may use: gzip when the call's accept field
  /// (`accept-encoding`, `connect-accept-encoding`, `grpc-accept-encoding`) lists it, or, when that
  /// field is absent, the request's own ``compression`` (the Connect specification's inference).
  /// Pass it to ``ResponseEncoder`` through ``ResponseCompression``.
  public var responseCompression: CompressionAlgorithm

  /// Creates a head.
  public init(
    metadata: Metadata, timeout: Duration?, compression: CompressionAlgorithm = .identity,
    responseCompression: CompressionAlgorithm = .identity
  ) {
    self.metadata = metadata
    self.timeout = timeout
    self.compression = compression
    self.responseCompression = responseCompression
  }

  /// Reads the header fields of a request of `format`.
  ///
  /// Rules (each a test in `RequestHeadTests`):
  /// - `connect-protocol-version`, when present on a Connect call, must be `1`, else
  ///   `INVALID_ARGUMENT` (absent is accepted, as connect-go does by default: `curl` need not send it).
  /// - `connect-timeout-ms` (Connect) is 1 to 10 ASCII digits, else `INVALID_ARGUMENT`;
  ///   `grpc-timeout` (gRPC-Web) is gRPC's form, else `INTERNAL` as on the gRPC path.
  /// - Compression: the message encoding is `content-encoding` (Connect unary),
  ///   `connect-content-encoding` (Connect streaming) or `grpc-encoding` (gRPC-Web, gRPC); one of
  ///   `supportedCompression` (`identity` also when absent or empty) is read into
  ///   ``compression``. Any other (`br`, `zstd`, `deflate`, … and `gzip` when not supported) is
  ///   `UNIMPLEMENTED` "unknown compression …: supported encodings are gzip, identity" (or
  ///   "identity" alone by default), and the answer's headers name them (`accept-encoding`,
  ///   `connect-accept-encoding` or `grpc-accept-encoding`: `gzip,identity`), as the Connect
  ///   specification prescribes. A
  ///   `content-encoding` other than `identity` on an enveloped body (the whole HTTP body
  ///   compressed) is refused the same way.
  /// - ``responseCompression`` is gzip when gzip is supported and the accept field lists `gzip`
  ///   (or `*`) without `q=0`, identity when the field is present without it, and the request's
  ///   encoding when it is absent.
  ///
  /// - Parameters:
  ///   - fields: The request's header fields, names in lower case (pseudo-headers may be included).
  ///   - format: The call's format from ``CallFormat/classify(method:contentType:)``.
  ///   - supportedCompression: The encodings the caller's transport reads: ``CompressionAlgorithm/supported``
  ///     when it passes ``compression`` to its ``RequestDeframer``; identity alone (the default)
  ///     refuses gzip as before.
  /// - Returns: The head, or the refusal to answer with (through ``ResponseEncoder``).
  public static func parse(
    _ fields: [HTTPField], format: CallFormat, supportedCompression: [CompressionAlgorithm] = [.identity]
  ) -> Result<RequestHead, RequestRefusal> {
    let supported = supportedCompression.contains(.identity) ? supportedCompression : supportedCompression + [.identity]
    var metadata = Metadata()
    var timeout: Duration?
    var timeoutError: RPCError?
    var protocolVersion: String?
    var encoding: String?
    var bodyEncoding: String?
    var accepts: [String] = []
    let encodingField = messageEncodingField(format)
    let acceptField = acceptEncodingField(format)
    for field in fields {
      switch field.name {
      case "connect-protocol-version":
        protocolVersion = field.value
      case "connect-timeout-ms" where format.rpcProtocol == .connect:
        if let duration = parseConnectTimeout(field.value) {
          timeout = duration
        } else {
          timeoutError = RPCError(
            code: .invalidArgument,
            message: "parse timeout: connect-timeout-ms \(ErrorText.quoted(field.value)) is not a number of at most 10 digits")
        }
      case "grpc-timeout" where format.rpcProtocol == .grpcWeb:
        if let duration = HeaderCoding.parseTimeout(field.value) {
          timeout = duration
        } else {
          timeoutError = RPCError(code: .internal, message: "malformed grpc-timeout: \(field.value)")
        }
      case encodingField:
        encoding = field.value
      case "content-encoding":
        if !["", "identity"].contains(field.value.trimmingASCIISpaces().lowercased()) { bodyEncoding = field.value }
      case acceptField:
        accepts.append(field.value)
      default:
        guard !isProtocolField(field.name) else { continue }
        if let element = HeaderCoding.metadataElement(name: field.name, value: field.value) {
          metadata.append(element)
        }
      }
    }
    if format.rpcProtocol == .connect, let protocolVersion, protocolVersion != "1" {
      return .failure(
        RequestRefusal(
          error: RPCError(
            code: .invalidArgument, message: "connect-protocol-version must be \"1\": got \(ErrorText.quoted(protocolVersion))")))
    }
    var accepted = Metadata()
    accepted.addString(CompressionAlgorithm.acceptFieldValue(supported), forKey: acceptField)
    let supportedList = supported.map(\.rawValue).joined(separator: ", ")
    if let bodyEncoding {
      return .failure(
        RequestRefusal(
          error: RPCError(
            code: .unimplemented,
            message:
              "unknown compression \(ErrorText.quoted(bodyEncoding)) of the whole body: compress each message with \(encodingField) (supported encodings are \(supportedList))"
          ),
          responseMetadata: accepted))
    }
    let compression: CompressionAlgorithm
    switch encoding?.trimmingASCIISpaces().lowercased() {
    case nil, "", "identity": compression = .identity
    case "gzip" where supported.contains(.gzip): compression = .gzip
    default:
      return .failure(
        RequestRefusal(
          error: RPCError(
            code: .unimplemented,
            message: "unknown compression \(ErrorText.quoted(encoding ?? "")): supported encodings are \(supportedList)"),
          responseMetadata: accepted))
    }
    if let timeoutError { return .failure(RequestRefusal(error: timeoutError)) }
    let responseCompression: CompressionAlgorithm =
      supported.contains(.gzip) ? CompressionAlgorithm.negotiated(accept: accepts, request: compression) : .identity
    return .success(
      RequestHead(
        metadata: metadata, timeout: timeout, compression: compression, responseCompression: responseCompression))
  }

  /// Whether an accept field (`gzip, br`, `gzip;q=1.0, identity;q=0.5`) admits gzip: `gzip` or
  /// `*` listed without `q=0`.
  public static func acceptsGzip(_ value: String) -> Bool {
    for item in value.split(separator: ",") {
      let parts = item.split(separator: ";")
      guard let coding = parts.first?.trimmingASCIISpaces().lowercased(), coding == "gzip" || coding == "*" else {
        continue
      }
      let refused = parts.dropFirst().contains { parameter in
        let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingASCIISpaces().lowercased() }
        return pair.count == 2 && pair[0] == "q" && Double(pair[1]) == 0
      }
      return !refused
    }
    return false
  }

  /// The field that names the encoding of the request's messages, for each framing.
  static func messageEncodingField(_ format: CallFormat) -> String {
    switch format.framing {
    case .connectUnary: "content-encoding"
    case .connectStreaming: "connect-content-encoding"
    case .grpc, .grpcWeb, .grpcWebText: "grpc-encoding"
    }
  }

  /// Parses `connect-timeout-ms`: a positive integer of at most 10 ASCII digits (0 is accepted and
  /// expires at once).
  public static func parseConnectTimeout(_ value: String) -> Duration? {
    let digits = value.utf8
    guard (1...10).contains(digits.count), digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
      let milliseconds = Int64(value)
    else { return nil }
    return .milliseconds(milliseconds)
  }

  /// The field that names the encodings the server accepts, for each framing.
  static func acceptEncodingField(_ format: CallFormat) -> String {
    switch format.framing {
    case .connectUnary: "accept-encoding"
    case .connectStreaming: "connect-accept-encoding"
    case .grpc, .grpcWeb, .grpcWebText: "grpc-accept-encoding"
    }
  }

  /// Whether a field belongs to the protocols (or to HTTP) rather than to the caller's metadata.
  static func isProtocolField(_ name: String) -> Bool {
    if name.hasPrefix("connect-") { return true }
    switch name {
    case "accept-encoding", "content-encoding", "x-grpc-web", "access-control-request-method",
      "access-control-request-headers":
      return true
    default:
      return HeaderCoding.isReserved(name)
    }
  }
}

/// A request refused from its header fields: the error, and metadata for the answer's headers
/// (the accepted encodings after a refused compression).
public struct RequestRefusal: Error, Sendable {
  /// The status of the refusal.
  public var error: RPCError
  /// Initial metadata for the answer.
  public var responseMetadata: Metadata

  /// Creates a refusal.
  public init(error: RPCError, responseMetadata: Metadata = [:]) {
    self.error = error
    self.responseMetadata = responseMetadata
  }

  /// The refusal as response parts for ``ResponseEncoder/encode(_:)``.
  public var responseParts: [RPCResponsePart] {
    var parts: [RPCResponsePart] = []
    if !responseMetadata.isEmpty { parts.append(.metadata(responseMetadata)) }
    parts.append(.status(error.code, message: error.message, trailers: error.metadata))
    return parts
  }
}
