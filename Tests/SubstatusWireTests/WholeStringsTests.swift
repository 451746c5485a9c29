import Testing
@testable import SubstatusWire

/// Hand-made protobuf encodings: the generated encoder goes through protobuf-c's packer, whose C
/// strings cannot even hold the NUL byte these tests send.
enum RawProto {
  static func varint(_ value: UInt64) -> [UInt8] {
    var v = value
    var out: [UInt8] = []
    while v >= 0x80 {
      out.append(UInt8(v & 0x7F) | 0x80)
      v >>= 7
    }
    out.append(UInt8(v))
    return out
  }

  /// A length-delimited field (string, bytes, message, map entry).
  static func field(_ number: UInt64, _ bytes: [UInt8]) -> [UInt8] {
    varint(number << 3 | 2) + varint(UInt64(bytes.count)) + bytes
  }

  static func field(_ number: UInt64, _ text: String) -> [UInt8] { field(number, Array(text.utf8)) }

  /// A varint field.
  static func number(_ number: UInt64, _ value: UInt64) -> [UInt8] { varint(number << 3) + varint(value) }
}

/// Decoding rejects a string field holding a NUL byte (protobuf-c would cut it there) or bytes
/// that are not UTF-8 (proto3), naming the field; everything else decodes as before.
@Suite struct WholeStringsTests {
  typealias R = RawProto

  struct Case: Sendable, CustomStringConvertible {
    let name: String
    let type: any ProtobufMessage.Type
    let bytes: [UInt8]
    let field: String
    let code: WireError.Code
    var description: String { name }
  }

  static func query(_ user: [UInt8], products: [[UInt8]] = []) -> [UInt8] {
    R.field(2, R.field(1, user) + products.flatMap { R.field(2, $0) })
  }

  static let cases: [Case] = [
    Case(
      name: "app id with garbage after a NUL", type: Substatus_V1_CheckEligibilityRequest.self,
      bytes: R.field(1, Array("app_1\0garbage".utf8)), field: "app_id", code: .embeddedNUL),
    Case(
      name: "the third query's user", type: Substatus_V1_CheckEligibilityRequest.self,
      bytes: R.field(1, "app_1") + query(Array("a".utf8)) + query(Array("b".utf8))
        + query(Array("victim\0evil".utf8)) + R.number(3, 5),
      field: "queries[2].user_id", code: .embeddedNUL),
    Case(
      name: "a repeated string in a repeated message", type: Substatus_V1_CheckEligibilityRequest.self,
      bytes: query(Array("a".utf8)) + query(Array("b".utf8), products: [[0x70], [0x71], [0x72], [0x73, 0x00]]),
      field: "queries[1].product_ids[3]", code: .embeddedNUL),
    Case(
      name: "a string that is only a NUL", type: Substatus_V1_SetSharedSecretRequest.self,
      bytes: R.field(1, "app_1") + R.field(2, [0]), field: "shared_secret", code: .embeddedNUL),
    Case(
      name: "a map key", type: Substatus_Conformance_V1_AllTypes.self,
      bytes: R.field(50, R.field(1, "k\0") + R.field(2, "v")), field: "labels[0].key", code: .embeddedNUL),
    Case(
      name: "a map value", type: Substatus_Conformance_V1_AllTypes.self,
      bytes: R.field(50, R.field(1, "a") + R.field(2, "b")) + R.field(50, R.field(1, "k") + R.field(2, "v\0")),
      field: "labels[1].value", code: .embeddedNUL),
    Case(
      name: "a message in a map value", type: Substatus_Conformance_V1_AllTypes.self,
      bytes: R.field(51, R.number(1, 7) + R.field(2, R.field(1, "\0"))), field: "nested_by_id[0].value.name",
      code: .embeddedNUL),
    Case(
      name: "a oneof member", type: Substatus_Conformance_V1_AllTypes.self,
      bytes: R.field(41, "text\0"), field: "choice_text", code: .embeddedNUL),
    Case(
      name: "a well-known type inside google.rpc.Status", type: Google_Rpc_Status.self,
      bytes: R.field(3, R.field(1, "type.googleapis.com/x\0")), field: "details[0].type_url", code: .embeddedNUL),
    Case(
      name: "invalid UTF-8 in a repeated message", type: Substatus_Conformance_V1_AllTypes.self,
      bytes: R.field(37, R.field(1, "ok")) + R.field(37, R.field(1, [0x61, 0xFF, 0x62])),
      field: "r_message[1].name", code: .invalidUTF8),
    Case(
      name: "an encoded surrogate is not UTF-8", type: Substatus_V1_GetStatusRequest.self,
      bytes: R.field(1, "app_1") + R.field(2, [0xED, 0xA0, 0x80]), field: "user_id", code: .invalidUTF8),
  ]

  @Test(arguments: cases) func brokenStringNamesTheField(_ c: Case) {
    do {
      _ = try c.type.init(serializedBytes: c.bytes)
      Issue.record("\(c.name): decoded")
    } catch {
      #expect(error.code == c.code)
      #expect(error.fieldViolation?.field == c.field)
      #expect(error.message.hasPrefix("\(c.field) of \(c.type.protoMessageName) "))
    }
  }

  @Test func wholeStringsDecodeAsBefore() throws {
    // Multi-byte UTF-8, an empty string, a NUL inside `bytes` and in an unknown field are fine.
    let bytes =
      R.field(9, "naïve — 日本 🎉") + R.field(10, [0, 1, 0]) + R.field(29, "") + R.field(29, "x")
      + R.field(50, R.field(1, "k") + R.field(2, "v")) + R.field(99, [0x41, 0, 0x42])
    let value = try Substatus_Conformance_V1_AllTypes(serializedBytes: bytes)
    #expect(value.fString == "naïve — 日本 🎉")
    #expect(value.fBytes == [0, 1, 0])
    #expect(value.rString == ["", "x"])
    #expect(value.labels == ["k": "v"])
    let request = try Substatus_V1_CheckEligibilityRequest(
      serializedBytes: R.field(1, "app_1") + Self.query(Array("u".utf8), products: [Array("p".utf8)]))
    #expect(request.queries.first?.productIDs == ["p"])
  }

  @Test func jsonStringWithANULIsRefusedNamingTheField() {
    // Proto3 JSON can spell a NUL (\u0000); the binary encoding could not carry it whole.
    do {
      _ = try Substatus_V1_CheckEligibilityRequest(jsonString: #"{"appId":"app_1","queries":[{"userId":"victim\u0000evil"}]}"#)
      Issue.record("decoded")
    } catch {
      #expect(error.code == .invalidJSON)
      #expect(error.message.contains("\"userId\""))
      #expect(error.message.contains("NUL"))
    }
  }

  @Test(arguments: [
    [0x0A, 0x05, 0x61],  // a length past the end
    [0x0B, 0x0C],  // a group, which proto3 does not have
    [0x0F],  // wire type 7
    [0x00, 0x01],  // field number 0
    [0x12, 0x02, 0x0A, 0x05],  // a nested message whose string runs past its end
  ] as [[UInt8]]) func malformedBytesAreMalformed(_ bytes: [UInt8]) {
    #expect(throws: WireError.self) { try Substatus_V1_CheckEligibilityRequest(serializedBytes: bytes) }
    do { _ = try Substatus_V1_CheckEligibilityRequest(serializedBytes: bytes) } catch {
      #expect(error.code == .malformedMessage)
      #expect(error.fieldViolation == nil)
    }
  }
}
