import Testing
import RPCCore
import SubstatusWire

/// Typed handlers read and write the codec the transport chose for the call.
@Suite struct MessageCodingTests {
  @Test func typedUnaryAnswersInTheCallsCodec() async throws {
    var router = RPCRouter()
    router.registerUnary(method: "/test.Svc/Echo", request: PayloadMessage.self, response: PayloadMessage.self) {
      request, context in
      PayloadMessage("\(request.text) via \(context.rpcProtocol.rawValue)/\(context.codec.rawValue)")
    }
    let handler = try #require(router.handler(for: "/test.Svc/Echo"))
    let writer = NullWriter()

    let json = ServerContext(
      method: "/test.Svc/Echo", metadata: [:], deadline: nil, peer: "test", rpcProtocol: .connect, codec: .json)
    let jsonParts = try await handler(RPCRequestStream(messages: [Array(#"{"text":"hi"}"#.utf8)]), writer, json)
    #expect(messages(jsonParts) == [Array(#"{"text":"hi via connect/json"}"#.utf8)])

    let binary = ServerContext(method: "/test.Svc/Echo", metadata: [:], deadline: nil, peer: "test")
    let binaryParts = try await handler(RPCRequestStream(messages: [PayloadMessage("hi").serializedBytes()]), writer, binary)
    #expect(messages(binaryParts) == [PayloadMessage("hi via grpc/proto").serializedBytes()])
  }

  @Test(arguments: [
    (#"{"text": 5}"#, RPCError.Code.invalidArgument),
    ("not json", .invalidArgument),
  ])
  func jsonThatDoesNotFitIsInvalidArgument(body: String, code: RPCError.Code) {
    #expect {
      _ = try MessageCoding.decode(PayloadMessage.self, from: Array(body.utf8), codec: .json)
    } throws: { ($0 as? RPCError)?.code == code }
  }

  @Test func binaryThatDoesNotDecodeIsInternalAsInGrpcGo() {
    #expect {
      _ = try MessageCoding.decode(PayloadMessage.self, from: [0xFF], codec: .protobuf)
    } throws: { ($0 as? RPCError)?.code == .internal }
  }

  @Test func bodyThatIsNotUTF8IsInvalidArgument() {
    #expect {
      _ = try MessageCoding.decode(PayloadMessage.self, from: [0x7B, 0xFF, 0x7D], codec: .json)
    } throws: { ($0 as? RPCError)?.code == .invalidArgument }
  }

  private func messages(_ parts: [RPCResponsePart]) -> [[UInt8]] {
    parts.compactMap { if case .message(let m) = $0 { m } else { nil } }
  }
}

private struct NullWriter: RPCResponseWriter {
  func write(_ parts: [RPCResponsePart]) {}
}
