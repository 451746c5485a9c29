import RPCCore
import RPCWebProtocols
import Testing

@Suite struct RequestHeadTests {
  static let connectUnary = try! CallFormat.classify(method: "POST", contentType: "application/json").get()
  static let connectStream = try! CallFormat.classify(method: "POST", contentType: "application/connect+proto").get()
  static let grpcWeb = try! CallFormat.classify(method: "POST", contentType: "application/grpc-web+proto").get()
  static let grpcWebText = try! CallFormat.classify(method: "POST", contentType: "application/grpc-web-text").get()

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
    var acceptField: String
    var description: String { "\(format.framing) \(field)" }
  }

  @Test(arguments: [
    EncodingCase(format: connectUnary, field: "content-encoding", acceptField: "accept-encoding"),
    EncodingCase(format: connectStream, field: "connect-content-encoding", acceptField: "connect-accept-encoding"),
    EncodingCase(format: connectStream, field: "content-encoding", acceptField: "connect-accept-encoding"),
    EncodingCase(format: grpcWeb, field: "grpc-encoding", acceptField: "grpc-accept-encoding"),
    EncodingCase(format: grpcWebText, field: "content-encoding", acceptField: "grpc-accept-encoding"),
  ])
  func compressionIsRefusedAsUnimplemented(_ row: EncodingCase) throws {
    guard case .failure(let refusal) = RequestHead.parse([HTTPField(row.field, "gzip")], format: row.format) else {
      Issue.record("gzip accepted"); return
    }
    #expect(refusal.error.code == .unimplemented)
    #expect(refusal.error.message == "unknown compression \"gzip\": supported encodings are identity")
    #expect(refusal.responseMetadata.firstString(forKey: row.acceptField) == "identity")
    #expect((try? RequestHead.parse([HTTPField(row.field, "identity")], format: row.format).get()) != nil)
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
