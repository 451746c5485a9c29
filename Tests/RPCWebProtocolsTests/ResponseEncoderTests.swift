import RPCCore
import RPCWebProtocols
import SubstatusWire
import Testing

@Suite struct ResponseEncoderTests {
  static func encoder(_ contentType: String, max: Int = 100, extra: [HTTPField] = []) -> ResponseEncoder {
    ResponseEncoder(
      format: try! CallFormat.classify(method: "POST", contentType: contentType).get(), maxSendMessageSize: max,
      extraFields: extra)
  }

  @Test func connectUnarySuccessWaitsForTheStatus() {
    var encoder = Self.encoder("application/json", extra: [HTTPField("vary", "Origin")])
    let first = encoder.encode([.metadata(["x-initial": "1"]), .message(Array("{}".utf8))])
    #expect(first.head == nil && first.body.isEmpty && !first.ends)
    #expect(!encoder.hasSentHead)
    var trailers: Metadata = ["x-cost": "2"]
    trailers.addBinary([0xFF], forKey: "trace-bin")
    let last = encoder.encode([.status(.ok, message: "", trailers: trailers)])
    #expect(
      last.head
        == ResponseHead(
          status: 200,
          fields: [
            HTTPField("content-type", "application/json"), HTTPField("x-initial", "1"),
            HTTPField("trailer-x-cost", "2"), HTTPField("trailer-trace-bin", "/w"), HTTPField("vary", "Origin"),
          ]))
    #expect(last.body == Array("{}".utf8))
    #expect(last.ends)
    #expect(encoder.hasSentHead)
    #expect(encoder.isFinished)
    #expect(encoder.encode([.message([1])]).body.isEmpty)
  }

  @Test(arguments: ConnectErrorTests.table)
  func connectUnaryErrorIsTheTablesStatusWithAJSONBody(_ code: RPCError.Code, _ name: String, _ status: Int) {
    var encoder = Self.encoder("application/proto")
    let out = encoder.encode([.message([1, 2]), .status(code, message: "why", trailers: [:])])
    #expect(out.head?.status == status)
    #expect(out.head?.fields.first == HTTPField("content-type", "application/json"))
    #expect(String(decoding: out.body, as: UTF8.self) == #"{"code":"\#(name)","message":"why"}"#)
    #expect(out.ends)
  }

  @Test func connectUnaryErrorDetailsGoInTheBodyNotInTrailerFields() {
    var encoder = Self.encoder("application/json")
    let error = RPCError.invalidArgument(field: "app_id", "must not be empty")
    var trailers = error.metadata
    trailers.addString("v", forKey: "x-t")
    let out = encoder.encode([.status(error.code, message: error.message, trailers: trailers)])
    #expect(out.head?.status == 400)
    #expect(out.head?.fields.map(\.name) == ["content-type", "trailer-x-t"])
    let body = String(decoding: out.body, as: UTF8.self)
    #expect(body.hasPrefix(#"{"code":"invalid_argument","message":"app_id: must not be empty","details":[{"type":"google.rpc.BadRequest","value":""#))
  }

  @Test func connectStreamingEnvelopesAndEndStream() {
    var encoder = Self.encoder("application/connect+json")
    let first = encoder.encode([.metadata(["x-a": "1"]), .message([7])])
    #expect(first.head == ResponseHead(status: 200, fields: [HTTPField("content-type", "application/connect+json"), HTTPField("x-a", "1")]))
    #expect(first.body == envelope(0, [7]))
    let second = encoder.encode([.message([8]), .status(.notFound, message: "gone", trailers: ["x-t": "2"])])
    #expect(second.head == nil)
    #expect(
      second.body
        == envelope(0, [8])
        + envelope(2, Array(#"{"error":{"code":"not_found","message":"gone"},"metadata":{"x-t":["2"]}}"#.utf8)))
    #expect(second.ends)
  }

  @Test func connectStreamingStatusAloneStillSendsAHeadAndEndStream() {
    var encoder = Self.encoder("application/connect+proto")
    let out = encoder.encode([.status(.ok, message: "", trailers: [:])])
    #expect(out.head?.status == 200)
    #expect(out.body == envelope(2, Array("{}".utf8)))
  }

  @Test func grpcWebMessagesThenTrailerFrame() {
    var encoder = Self.encoder("application/grpc-web+proto")
    var trailers: Metadata = ["x-t": "v"]
    trailers.addBinary([0, 1], forKey: "trace-bin")
    let out = encoder.encode([.message([1, 2]), .status(.invalidArgument, message: "bad 100%", trailers: trailers)])
    #expect(out.head == ResponseHead(status: 200, fields: [HTTPField("content-type", "application/grpc-web+proto")]))
    let block = "grpc-status: 3\r\ngrpc-message: bad 100%25\r\nx-t: v\r\ntrace-bin: AAE\r\n"
    #expect(out.body == envelope(0, [1, 2]) + envelope(0x80, Array(block.utf8)))
    #expect(out.ends)
  }

  @Test func grpcWebStatusAloneIsTrailersOnly() {
    var encoder = Self.encoder("application/grpc-web", extra: [HTTPField("vary", "Origin")])
    let out = encoder.encode([.status(.unimplemented, message: "unknown method", trailers: [:])])
    #expect(
      out.head
        == ResponseHead(
          status: 200,
          fields: [
            HTTPField("content-type", "application/grpc-web"), HTTPField("grpc-status", "12"),
            HTTPField("grpc-message", "unknown method"), HTTPField("vary", "Origin"),
          ]))
    #expect(out.body.isEmpty)
    #expect(out.ends)
  }

  @Test func grpcWebTextBase64EncodesEachWrite() {
    var encoder = Self.encoder("application/grpc-web-text")
    let first = encoder.encode([.message([1])])
    #expect(first.head?.fields.first == HTTPField("content-type", "application/grpc-web-text"))
    #expect(String(decoding: first.body, as: UTF8.self) == "AAAAAAEB")
    let last = encoder.encode([.status(.ok, message: "", trailers: [:])])
    let block = envelope(0x80, Array("grpc-status: 0\r\n".utf8))
    var expected = HeaderCoding.base64Encode(block)
    while expected.utf8.count % 4 != 0 { expected += "=" }
    #expect(String(decoding: last.body, as: UTF8.self) == expected)
  }

  @Test(arguments: ["application/json", "application/connect+proto", "application/grpc-web"])
  func messageOverTheSendLimitEndsTheCallWithResourceExhausted(_ contentType: String) {
    var encoder = Self.encoder(contentType, max: 3)
    let out = encoder.encode([.message([1, 2, 3, 4]), .status(.ok, message: "", trailers: [:])])
    #expect(out.exceededSendLimit)
    #expect(out.ends)
    let text = String(decoding: out.body, as: UTF8.self)
    switch contentType {
    case "application/json":
      #expect(out.head?.status == 429)
      #expect(text == #"{"code":"resource_exhausted","message":"message size 4 exceeds sendMaxBytes 3"}"#)
    case "application/connect+proto":
      #expect(text.contains(#""code":"resource_exhausted""#))
    default:
      #expect(out.head?.fields.contains(HTTPField("grpc-status", "8")) == true)
    }
  }

  @Test func refusedCompressionNamesTheAcceptedEncoding() throws {
    let format = try CallFormat.classify(method: "POST", contentType: "application/json").get()
    guard case .failure(let refusal) = RequestHead.parse([HTTPField("content-encoding", "br")], format: format) else {
      Issue.record("accepted"); return
    }
    var encoder = ResponseEncoder(format: format, maxSendMessageSize: 10)
    let out = encoder.encode(refusal.responseParts)
    #expect(out.head?.status == 501)
    #expect(out.head?.fields.contains(HTTPField("accept-encoding", "identity")) == true)
    #expect(
      String(decoding: out.body, as: UTF8.self)
        == #"{"code":"unimplemented","message":"unknown compression \"br\": supported encodings are identity"}"#)
  }
}
