import RPCCore
import RPCWebProtocols
import Testing

@Suite struct CallFormatTests {
  struct Accepted: Sendable, CustomStringConvertible {
    var contentType: String
    var framing: Framing
    var codec: MessageCodec
    var rpcProtocol: RPCProtocol
    var responseContentType: String
    var description: String { contentType }
  }

  static let accepted: [Accepted] = [
    Accepted(contentType: "application/grpc", framing: .grpc, codec: .protobuf, rpcProtocol: .grpc, responseContentType: "application/grpc"),
    Accepted(contentType: "application/grpc+proto", framing: .grpc, codec: .protobuf, rpcProtocol: .grpc, responseContentType: "application/grpc+proto"),
    Accepted(contentType: "application/grpc+json", framing: .grpc, codec: .json, rpcProtocol: .grpc, responseContentType: "application/grpc+json"),
    Accepted(contentType: "application/grpc-web", framing: .grpcWeb, codec: .protobuf, rpcProtocol: .grpcWeb, responseContentType: "application/grpc-web"),
    Accepted(contentType: "application/grpc-web+proto", framing: .grpcWeb, codec: .protobuf, rpcProtocol: .grpcWeb, responseContentType: "application/grpc-web+proto"),
    Accepted(contentType: "application/grpc-web+json", framing: .grpcWeb, codec: .json, rpcProtocol: .grpcWeb, responseContentType: "application/grpc-web+json"),
    Accepted(contentType: "application/grpc-web-text", framing: .grpcWebText, codec: .protobuf, rpcProtocol: .grpcWeb, responseContentType: "application/grpc-web-text"),
    Accepted(contentType: "application/grpc-web-text+proto", framing: .grpcWebText, codec: .protobuf, rpcProtocol: .grpcWeb, responseContentType: "application/grpc-web-text+proto"),
    Accepted(contentType: "application/json", framing: .connectUnary, codec: .json, rpcProtocol: .connect, responseContentType: "application/json"),
    Accepted(contentType: "application/json; charset=utf-8", framing: .connectUnary, codec: .json, rpcProtocol: .connect, responseContentType: "application/json"),
    Accepted(contentType: "Application/JSON; Charset=\"UTF-8\"", framing: .connectUnary, codec: .json, rpcProtocol: .connect, responseContentType: "application/json"),
    Accepted(contentType: "application/proto", framing: .connectUnary, codec: .protobuf, rpcProtocol: .connect, responseContentType: "application/proto"),
    Accepted(contentType: "application/connect+json", framing: .connectStreaming, codec: .json, rpcProtocol: .connect, responseContentType: "application/connect+json"),
    Accepted(contentType: "application/connect+proto", framing: .connectStreaming, codec: .protobuf, rpcProtocol: .connect, responseContentType: "application/connect+proto"),
  ]

  @Test(arguments: accepted)
  func classifiesContentType(_ row: Accepted) throws {
    let format = try CallFormat.classify(method: "POST", contentType: row.contentType).get()
    #expect(format.framing == row.framing)
    #expect(format.codec == row.codec)
    #expect(format.rpcProtocol == row.rpcProtocol)
    #expect(format.responseContentType == row.responseContentType)
    #expect(format.isEnveloped == (row.framing != .connectUnary))
  }

  @Test(arguments: [
    "text/plain", "application/xml", "application/grpc-web-text+json", "application/connect+thrift",
    "application/json; charset=latin1", "application/x-www-form-urlencoded", "", "multipart/form-data",
  ])
  func refusesOtherContentTypesWith415(_ contentType: String) {
    guard case .failure(let rejection) = CallFormat.classify(method: "POST", contentType: contentType) else {
      Issue.record("\(contentType) was accepted")
      return
    }
    #expect(rejection.status == 415)
    #expect(rejection.message.contains("unsupported content-type \"\(contentType)\""))
    #expect(rejection.headers.first?.name == "accept-post")
    #expect(rejection.headers.first?.value.contains("application/connect+json") == true)
  }

  @Test func refusesAMissingContentTypeWith415() {
    guard case .failure(let rejection) = CallFormat.classify(method: "POST", contentType: nil) else {
      Issue.record("accepted")
      return
    }
    #expect(rejection.status == 415)
    #expect(rejection.message.contains("no content-type"))
  }

  @Test(arguments: ["GET", "PUT", "DELETE", "OPTIONS", "post"])
  func refusesMethodsOtherThanPOSTWith405(_ method: String) {
    guard case .failure(let rejection) = CallFormat.classify(method: method, contentType: "application/json") else {
      Issue.record("\(method) was accepted")
      return
    }
    #expect(rejection.status == 405)
    #expect(rejection.headers == [HTTPField("allow", "POST")])
  }
}
