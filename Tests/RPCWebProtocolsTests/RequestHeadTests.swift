import RPCCore
import RPCWebProtocols
import Testing

@Suite struct RequestHeadTests {
  static let connectUnary = try! CallFormat.classify(method: "POST", contentType: "application/json").get()
  static let connectStream = try! CallFormat.classify(method: "POST", contentType: "application/connect+proto").get()
  static let grpcWeb = try! CallFormat.classify(method: "POST", contentType: "application/grpc-web+proto").get()
  static let grpcWebText = try! CallFormat.classify(method: "POST", contentType: "application/grpc-web-text").get()
  static let grpc = try! CallFormat.classify(method: "POST", contentType: "application/grpc").get()

  @Test(arguments: [
    ("5000", Duration?.some(.milliseconds(5000))),
    ("0", .some(.zero)),
    ("9999999999", .some(.milliseconds(9_999_999_999))),
    ("12345678901", nil),
    ("-1", nil),
    ("1.5", nil),
    ("", nil),
    ("5s", nil),
    (" 5", nil),
  ])
  func connectTimeout(_ value: String, _ expected: Duration?) {
    #expect(RequestHead.parseConnectTimeout(value) == expected)
    let result = RequestHead.parse([HTTPField("connect-timeout-ms", value)], format: Self.connectUnary)
    switch result {
    case .success(let head):
      #expect(head.timeout == expected)
    case .failure(let refusal):
      #expect(expected == nil)
      #expect(refusal.error.code == .invalidArgument)
      #expect(refusal.error.message.contains("connect-timeout-ms \"\(value)\""))
    }
  }

  @Test func grpcWebReadsGRPCTimeoutAndIgnoresConnectTimeout() throws {
    let head = try RequestHead.parse(
      [HTTPField("grpc-timeout", "250m"), HTTPField("connect-timeout-ms", "1")], format: Self.grpcWeb
    ).get()
    #expect(head.timeout == .milliseconds(250))
    guard case .failure(let refusal) = RequestHead.parse([HTTPField("grpc-timeout", "soon")], format: Self.grpcWebText)
    else { Issue.record("accepted"); return }
    #expect(refusal.error.code == .internal)
    // A Connect call ignores grpc-timeout.
    #expect(try RequestHead.parse([HTTPField("grpc-timeout", "1S")], format: Self.connectUnary).get().timeout == nil)
  }

  @Test(arguments: [("1", true), ("2", false), ("", false), ("v1", false)])
  func connectProtocolVersion(_ value: String, _ accepted: Bool) {
    for format in [Self.connectUnary, Self.connectStream] {
      switch RequestHead.parse([HTTPField("connect-protocol-version", value)], format: format) {
      case .success: #expect(accepted)
      case .failure(let refusal):
        #expect(!accepted)
        #expect(refusal.error.code == .invalidArgument)
        #expect(refusal.error.message == "connect-protocol-version must be \"1\": got \"\(value)\"")
      }
    }
    // Absent is accepted (curl need not send it).
    #expect((try? RequestHead.parse([], format: Self.connectUnary).get()) != nil)
  }

  struct EncodingCase: Sendable, CustomStringConvertible {
    var format: CallFormat
    var field: String
    var value: String
    var acceptField: String
    var message: String
    var description: String { "\(format.framing) \(field): \(value)" }

    static func unknown(_ format: CallFormat, _ field: String, _ value: String, _ acceptField: String) -> Self {
      EncodingCase(
        format: format, field: field, value: value, acceptField: acceptField,
        message: "unknown compression \"\(value)\": supported encodings are gzip, identity")
    }

    static func wholeBody(_ format: CallFormat, _ value: String, _ acceptField: String, _ messageField: String) -> Self {
      EncodingCase(
        format: format, field: "content-encoding", value: value, acceptField: acceptField,
        message:
          "unknown compression \"\(value)\" of the whole body: compress each message with \(messageField) (supported encodings are gzip, identity)"
      )
    }
  }

  @Test(arguments: [
    EncodingCase.unknown(connectUnary, "content-encoding", "br", "accept-encoding"),
    EncodingCase.unknown(connectUnary, "content-encoding", "gzip, br", "accept-encoding"),
    EncodingCase.unknown(connectStream, "connect-content-encoding", "zstd", "connect-accept-encoding"),
    EncodingCase.unknown(grpcWeb, "grpc-encoding", "deflate", "grpc-accept-encoding"),
    EncodingCase.unknown(grpcWebText, "grpc-encoding", "snappy", "grpc-accept-encoding"),
    EncodingCase.wholeBody(connectStream, "gzip", "connect-accept-encoding", "connect-content-encoding"),
    EncodingCase.wholeBody(grpcWebText, "br", "grpc-accept-encoding", "grpc-encoding"),
  ])
  func unknownCompressionIsRefusedAsUnimplemented(_ row: EncodingCase) throws {
    let fields = [HTTPField(row.field, row.value)]
    guard
      case .failure(let refusal) = RequestHead.parse(
        fields, format: row.format, supportedCompression: CompressionAlgorithm.supported)
    else {
      Issue.record("\(row.value) accepted"); return
    }
    #expect(refusal.error.code == .unimplemented)
    #expect(refusal.error.message == row.message)
    #expect(refusal.responseMetadata.firstString(forKey: row.acceptField) == "gzip,identity")
    #expect((try? RequestHead.parse([HTTPField(row.field, "identity")], format: row.format).get()) != nil)
  }

  struct NegotiationCase: Sendable, CustomStringConvertible {
    var format: CallFormat
    var fields: [HTTPField]
    var compression: CompressionAlgorithm
    var responseCompression: CompressionAlgorithm
    var description: String { "\(format.framing) \(fields)" }
  }

  @Test(arguments: [
    NegotiationCase(format: connectUnary, fields: [], compression: .identity, responseCompression: .identity),
    // Without accept-encoding the client accepts what it sent (the Connect specification).
    NegotiationCase(
      format: connectUnary, fields: [HTTPField("content-encoding", "gzip")], compression: .gzip,
      responseCompression: .gzip),
    NegotiationCase(
      format: connectUnary, fields: [HTTPField("content-encoding", "gzip"), HTTPField("accept-encoding", "identity")],
      compression: .gzip, responseCompression: .identity),
    NegotiationCase(
      format: connectUnary, fields: [HTTPField("content-encoding", "Identity"), HTTPField("accept-encoding", "br, gzip")],
      compression: .identity, responseCompression: .gzip),
    NegotiationCase(
      format: connectUnary, fields: [HTTPField("accept-encoding", "gzip;q=0, br")], compression: .identity,
      responseCompression: .identity),
    NegotiationCase(
      format: connectUnary, fields: [HTTPField("accept-encoding", "gzip;q=0.5, identity")], compression: .identity,
      responseCompression: .gzip),
    NegotiationCase(
      format: connectStream,
      fields: [HTTPField("connect-content-encoding", "GZIP"), HTTPField("connect-accept-encoding", "gzip")],
      compression: .gzip, responseCompression: .gzip),
    // HTTP's accept-encoding does not choose the message encoding of an enveloped response.
    NegotiationCase(
      format: connectStream, fields: [HTTPField("accept-encoding", "gzip")], compression: .identity,
      responseCompression: .identity),
    NegotiationCase(
      format: grpcWeb,
      fields: [HTTPField("grpc-encoding", "gzip"), HTTPField("grpc-accept-encoding", "identity,deflate,gzip")],
      compression: .gzip, responseCompression: .gzip),
    NegotiationCase(
      format: grpcWebText, fields: [HTTPField("grpc-accept-encoding", "*")], compression: .identity,
      responseCompression: .gzip),
    NegotiationCase(
      format: grpc, fields: [HTTPField("grpc-encoding", "gzip"), HTTPField("grpc-accept-encoding", "identity")],
      compression: .gzip, responseCompression: .identity),
    NegotiationCase(format: grpc, fields: [HTTPField("grpc-encoding", "")], compression: .identity, responseCompression: .identity),
  ])
  func gzipIsAcceptedAndNegotiated(_ row: NegotiationCase) throws {
    let head = try RequestHead.parse(row.fields, format: row.format, supportedCompression: CompressionAlgorithm.supported)
      .get()
    #expect(head.compression == row.compression)
    #expect(head.responseCompression == row.responseCompression)
    #expect(head.metadata.isEmpty)
  }

  @Test(arguments: [
    ([String](), CompressionAlgorithm.gzip, CompressionAlgorithm.gzip),
    ([], .identity, .identity),
    (["identity,deflate,gzip"], .identity, .gzip),
    (["identity", "gzip"], .identity, .gzip),
    (["identity"], .gzip, .identity),
    (["GZip ; q=0"], .gzip, .identity),
    (["br;q=1, *;q=0.1"], .identity, .gzip),
    ([""], .gzip, .identity),
  ])
  func responseCompressionNegotiation(_ accept: [String], _ request: CompressionAlgorithm, _ expected: CompressionAlgorithm) {
    #expect(CompressionAlgorithm.negotiated(accept: accept, request: request) == expected)
    #expect(CompressionAlgorithm.acceptFieldValue(CompressionAlgorithm.supported) == "gzip,identity")
  }

  /// A transport that does not inflate (it leaves `supportedCompression` at its default) refuses
  /// gzip as before and never negotiates it for the response.
  @Test(arguments: [
    (connectUnary, "content-encoding", "accept-encoding"),
    (connectStream, "connect-content-encoding", "connect-accept-encoding"),
    (grpcWeb, "grpc-encoding", "grpc-accept-encoding"),
  ])
  func withoutSupportGzipIsRefused(_ format: CallFormat, _ field: String, _ acceptField: String) throws {
    guard case .failure(let refusal) = RequestHead.parse([HTTPField(field, "gzip")], format: format) else {
      Issue.record("gzip accepted"); return
    }
    #expect(refusal.error.code == .unimplemented)
    #expect(refusal.error.message == "unknown compression \"gzip\": supported encodings are identity")
    #expect(refusal.responseMetadata.firstString(forKey: acceptField) == "identity")
    let head = try RequestHead.parse([HTTPField(acceptField, "gzip")], format: format).get()
    #expect(head.compression == .identity && head.responseCompression == .identity)
  }

  @Test func metadataFromHeaders() throws {
    let head = try RequestHead.parse(
      [
        HTTPField(":path", "/a.B/C"), HTTPField("content-type", "application/json"),
        HTTPField("authorization", "Bearer k"), HTTPField("trace-bin", "AAE"), HTTPField("trace-bin", "AgM="),
        HTTPField("connect-protocol-version", "1"), HTTPField("connect-timeout-ms", "10"),
        HTTPField("accept-encoding", "gzip"), HTTPField("content-length", "2"), HTTPField("x-grpc-web", "1"),
        HTTPField("grpc-status-details-bin", "AA"), HTTPField("x-custom", "v"),
      ], format: Self.connectUnary
    ).get()
    #expect(head.metadata.firstString(forKey: "authorization") == "Bearer k")
    #expect(head.metadata.binaries(forKey: "trace-bin") == [[0, 1], [2, 3]])
    #expect(head.metadata.firstString(forKey: "x-custom") == "v")
    #expect(head.metadata.firstBinary(forKey: "grpc-status-details-bin") == [0])
    #expect(head.metadata.count == 5)
  }
}
