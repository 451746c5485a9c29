import RPCCore
import RPCWebProtocols
import SubstatusJSON
import SubstatusWire
import Testing

/// Connect's JSON error and gRPC-Web's status carry a status cut to ``StatusBounds``, whatever the
/// handler put in it.
@Suite struct StatusBoundsEncodingTests {
  static func hugeStatus() -> (message: String, trailers: Metadata) {
    var badRequest = Google_Rpc_BadRequest()
    badRequest.fieldViolations = (0..<300).map { i in
      var v = Google_Rpc_BadRequest.FieldViolation()
      v.field = "entitlements[0].product_ids[\(i)]"
      v.description = String(repeating: "x", count: 300)
      return v
    }
    var status = Google_Rpc_Status()
    status.code = 3
    status.details = [Google_Protobuf_Any(packing: badRequest)]
    var trailers = Metadata()
    trailers.addBinary(status.serializedBytes(), forKey: StatusBounds.detailsKey)
    return ("bad: " + String(repeating: "9", count: 1_000_000), trailers)
  }

  @Test func connectUnaryErrorIsBounded() throws {
    let (message, trailers) = Self.hugeStatus()
    var encoder = ResponseEncoderTests.encoder("application/json")
    let out = encoder.encode([.status(.invalidArgument, message: message, trailers: trailers)])
    #expect(out.head?.status == 400)
    // 1 KiB of message, 3 KiB of details in base64 and again as JSON (`debug`).
    #expect(out.body.count < 12_288)
    let json = try JSONValue(parsing: out.body)
    let text = try #require(json["message"]?.stringValue)
    #expect(text.utf8.count <= StatusBounds.maxMessageBytes)
    let detail = try #require(json["details"]?.arrayValue?.first)
    let violations = try #require(detail["debug"]?["fieldViolations"]?.arrayValue)
    #expect(violations.last?["description"]?.stringValue?.hasSuffix("more field violations left out (300 in all)") == true)
  }

  @Test(arguments: ["application/grpc-web+proto", "application/connect+json"])
  func streamingStatusIsBounded(contentType: String) {
    let (message, trailers) = Self.hugeStatus()
    var encoder = ResponseEncoderTests.encoder(contentType)
    let out = encoder.encode([.message([1]), .status(.invalidArgument, message: message, trailers: trailers)])
    #expect(out.ends)
    // 1 KiB of message (at most 3 KiB percent-encoded) and 3 KiB of details (4 KiB in base64;
    // Connect's JSON has them in JSON too).
    #expect(out.body.count < 12_288)
    let text = String(decoding: out.body, as: UTF8.self)
    #expect(text.contains("more bytes)"))
  }
}
