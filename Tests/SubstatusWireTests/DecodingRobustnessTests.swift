import Testing
@testable import SubstatusWire

/// Random and truncated bytes never crash a decoder; they give a value or a clear `WireError`.
@Suite struct DecodingRobustnessTests {
  struct SplitMix64 {
    var state: UInt64
    mutating func next() -> UInt64 {
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
  }

  static let types: [any ProtobufJSONMessage.Type] = ProtoFiles.messageTypes.keys.sorted().map {
    ProtoFiles.messageTypes[$0]!
  }

  @Test func randomBytesGiveAValueOrAClearError() {
    var rng = SplitMix64(state: 42)
    var errors = 0
    for n in 0..<12_000 {
      let type = Self.types[n % Self.types.count]
      let length = Int(rng.next() % 64)
      let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
      do {
        let value = try type.init(serializedBytes: bytes)
        // Whatever decoded re-encodes and decodes to the same value.
        let again = try type.init(serializedBytes: value.serializedBytes())
        #expect(again.serializedBytes() == value.serializedBytes())
      } catch {
        errors += 1
        #expect(!error.message.isEmpty)
        #expect(error.code == .malformedMessage || error.code == .invalidUTF8 || error.code == .embeddedNUL)
      }
    }
    #expect(errors > 1000)
  }

  @Test func everyTruncationOfAFullMessageIsHandled() throws {
    var all = Substatus_Conformance_V1_AllTypes()
    all.fString = "héllo"
    all.fInt64 = -5
    all.fMessage = .init()
    all.fMessage?.name = "nested"
    all.rString = ["a", "b"]
    all.rMessage = [.init(), .init()]
    all.labels = ["k": "v"]
    all.choice = .choiceText("text")
    let bytes = all.serializedBytes()
    #expect(try Substatus_Conformance_V1_AllTypes(serializedBytes: bytes) == all)
    var failures = 0
    for cut in 0..<bytes.count {
      do { _ = try Substatus_Conformance_V1_AllTypes(serializedBytes: Array(bytes[..<cut])) } catch { failures += 1 }
    }
    #expect(failures > 0)
  }

  @Test func invalidUTF8InAStringFieldIsRejected() {
    // Field 1 (product_id), length 2, bytes FF FE.
    #expect { try Substatus_V1_Product(serializedBytes: [0x0A, 0x02, 0xFF, 0xFE]) } throws: {
      ($0 as? WireError)?.code == .invalidUTF8
    }
  }

  @Test func unknownEnumValuesSurviveARoundTrip() throws {
    // Product.type (field 2) = 99, a number ProductType does not declare.
    let product = try Substatus_V1_Product(serializedBytes: [0x10, 99])
    #expect(product.type == .UNRECOGNIZED(99))
    #expect(product.serializedBytes() == [0x10, 99])
    #expect(product.jsonValue()["type"] == .number("99"))
  }
}
