import RPCCore
import SubstatusWire
import Testing

/// `grpc-message` and `grpc-status-details-bin` cut to their bounds: still valid UTF-8 and a valid
/// `google.rpc.Status`, with the count of the violations left out.
@Suite struct StatusBoundsTests {
  static func violations(_ count: Int, valueBytes: Int = 200) -> [Google_Rpc_BadRequest.FieldViolation] {
    (0..<count).map { i in
      var v = Google_Rpc_BadRequest.FieldViolation()
      v.field = "entitlements[0].product_ids[\(i)]"
      v.description = "product \"p-\(i)-" + String(repeating: "x", count: valueBytes) + "\" is not in the app's catalog"
      return v
    }
  }

  static func status(_ violations: [Google_Rpc_BadRequest.FieldViolation], extra: [Google_Protobuf_Any] = []) -> Google_Rpc_Status {
    var badRequest = Google_Rpc_BadRequest()
    badRequest.fieldViolations = violations
    var status = Google_Rpc_Status()
    status.code = 3
    status.message = "entitlements[0].product_ids[0]: " + String(repeating: "m", count: 5000)
    status.details = [Google_Protobuf_Any(packing: badRequest)] + extra
    return status
  }

  @Test func messageIsCutToTheBound() {
    let long = "failed to decode: \"" + String(repeating: "9", count: 70_000) + "\""
    let before = StatusBounds.cutCounts.messages
    let cut = StatusBounds.message(long)
    // Counted (other tests may cut at the same time: at least this one).
    #expect(StatusBounds.cutCounts.messages >= before + 1)
    #expect(cut.utf8.count <= StatusBounds.maxMessageBytes)
    #expect(cut.hasPrefix("failed to decode: \"999"))
    #expect(cut.hasSuffix("more bytes)"))
    #expect(StatusBounds.message("short") == "short")
  }

  @Test(arguments: [1, 10, 30, 300, 5_000])
  func violationsAreCappedWithTheCountOfTheRest(count: Int) throws {
    let original = Self.violations(count)
    let bounded = StatusBounds.status(Self.status(original))
    let bytes = bounded.serializedBytes()
    #expect(bytes.count <= StatusBounds.maxDetailsBytes)
    // A valid google.rpc.Status with a valid BadRequest.
    let decoded = try Google_Rpc_Status(serializedBytes: bytes)
    let badRequest = try #require(try decoded.details.first?.unpack(Google_Rpc_BadRequest.self))
    let fits = Self.status(original).serializedBytes().count <= StatusBounds.maxDetailsBytes
    if fits {
      #expect(badRequest.fieldViolations == original)
      return
    }
    let note = try #require(badRequest.fieldViolations.last)
    guard note.reason == "VIOLATIONS_LEFT_OUT" else {
      // Every violation kept (the status's message was what did not fit).
      #expect(badRequest.fieldViolations.map(\.field) == original.map(\.field))
      #expect(count < 10)
      return
    }
    let kept = Array(badRequest.fieldViolations.dropLast())
    #expect(!kept.isEmpty)
    #expect(kept.map(\.field) == original.prefix(kept.count).map(\.field))
    #expect(note.description == "\(count - kept.count) more field violations left out (\(count) in all)")
    #expect(note.reason == "VIOLATIONS_LEFT_OUT")
    #expect(decoded.message.utf8.count <= 512)
  }

  @Test func hugeTextsInsideViolationsAreCut() throws {
    var one = Google_Rpc_BadRequest.FieldViolation()
    one.field = String(repeating: "f", count: 100_000)
    one.description = String(repeating: "é", count: 100_000)
    let bounded = StatusBounds.status(Self.status([one]))
    #expect(bounded.serializedBytes().count <= StatusBounds.maxDetailsBytes)
    let violation = try #require(try bounded.details.first?.unpack(Google_Rpc_BadRequest.self)?.fieldViolations.first)
    #expect(violation.field.utf8.count <= 256)
    #expect(violation.description.utf8.count <= 512)
    #expect(violation.description.hasPrefix("éé"))
  }

  @Test func otherDetailsThatDoNotFitGo() throws {
    var info = Google_Rpc_ErrorInfo()
    info.reason = String(repeating: "r", count: 20_000)
    let bounded = StatusBounds.status(Self.status(Self.violations(3), extra: [Google_Protobuf_Any(packing: info)]))
    #expect(bounded.serializedBytes().count <= StatusBounds.maxDetailsBytes)
    #expect(bounded.details.count == 1)
    #expect(try bounded.details[0].unpack(Google_Rpc_BadRequest.self)?.fieldViolations.count == 3)
  }

  @Test func trailersKeepEverythingButCutTheDetails() throws {
    var trailers: Metadata = ["x-a": "1"]
    trailers.addBinary(Self.status(Self.violations(300)).serializedBytes(), forKey: StatusBounds.detailsKey)
    trailers.addString("2", forKey: "x-b")
    let bounded = StatusBounds.trailers(trailers)
    #expect(bounded.map(\.key) == ["x-a", StatusBounds.detailsKey, "x-b"])
    let details = try #require(bounded.firstBinary(forKey: StatusBounds.detailsKey))
    #expect(details.count <= StatusBounds.maxDetailsBytes)
    _ = try Google_Rpc_Status(serializedBytes: details)
    // Undecodable details over the bound go; small ones stay as they are.
    var garbage = Metadata()
    garbage.addBinary([UInt8](repeating: 0xFF, count: 10_000), forKey: StatusBounds.detailsKey)
    #expect(StatusBounds.trailers(garbage).isEmpty)
    var small = Metadata()
    small.addBinary([1, 2, 3], forKey: StatusBounds.detailsKey)
    #expect(StatusBounds.trailers(small) == small)
  }

  @Test func invalidArgumentWithAHugeDescriptionIsBounded() throws {
    let error = RPCError.invalidArgument(field: "as_of_ms", String(repeating: "9", count: 100_000))
    #expect(error.message.utf8.count <= StatusBounds.maxMessageBytes)
    let details = try #require(error.metadata.firstBinary(forKey: StatusBounds.detailsKey))
    #expect(details.count <= StatusBounds.maxDetailsBytes)
  }

  @Test func aJSONNumberOfSeventyThousandDigitsIsQuotedByItsPrefix() throws {
    let body = #"{"appId":"a","userId":"u","asOfMs":"# + String(repeating: "9", count: 70_000) + "}"
    do {
      _ = try MessageCoding.decode(Substatus_V1_GetStatusRequest.self, from: Array(body.utf8), codec: .json)
      Issue.record("decoded")
    } catch {
      #expect(error.code == .invalidArgument)
      #expect(error.message.utf8.count < 300, "\(error.message.prefix(400))")
      #expect(error.message.contains("(70000 bytes)"))
    }
  }
}
