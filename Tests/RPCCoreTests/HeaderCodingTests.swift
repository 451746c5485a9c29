import Testing
@testable import RPCCore

@Suite struct HeaderCodingTests {
  @Test(arguments: [
    ("1S", Duration.seconds(1)), ("250m", .milliseconds(250)), ("3H", .seconds(10800)),
    ("2M", .seconds(120)), ("7u", .microseconds(7)), ("99999999n", .nanoseconds(99_999_999)),
  ])
  func parsesTimeout(text: String, expected: Duration) {
    #expect(HeaderCoding.parseTimeout(text) == expected)
  }

  @Test(arguments: ["", "S", "1", "1x", "123456789S", "-1S", "1.5S"])
  func rejectsMalformedTimeout(text: String) {
    #expect(HeaderCoding.parseTimeout(text) == nil)
  }

  @Test(arguments: [Duration.milliseconds(1500), .seconds(30), .microseconds(3), .seconds(86400 * 400)])
  func formattedTimeoutParsesBackNoShorter(duration: Duration) throws {
    let text = HeaderCoding.formatTimeout(duration)
    let parsed = try #require(HeaderCoding.parseTimeout(text))
    #expect(parsed >= duration)
    #expect(text.utf8.count <= 9)
  }

  @Test(arguments: [
    ("plain message", "plain message"), ("100% sure", "100%25 sure"), ("héllo\n", "h%C3%A9llo%0A"),
  ])
  func percentEncodesGRPCMessage(raw: String, encoded: String) {
    #expect(HeaderCoding.percentEncode(raw) == encoded)
    #expect(HeaderCoding.percentDecode(encoded) == raw)
  }

  @Test func percentDecodeKeepsMalformedEscapes() {
    #expect(HeaderCoding.percentDecode("50%") == "50%")
    #expect(HeaderCoding.percentDecode("%zz") == "%zz")
  }

  @Test(arguments: [
    ([UInt8](), ""), ([0], "AA"), ([0xFF, 0xFE], "//4"), ([1, 2, 3], "AQID"), (Array("hello".utf8), "aGVsbG8"),
  ])
  func base64RoundTrips(bytes: [UInt8], text: String) {
    #expect(HeaderCoding.base64Encode(bytes) == text)
    #expect(HeaderCoding.base64Decode(text) == bytes)
  }

  @Test func base64AcceptsPaddingAndRejectsGarbage() {
    #expect(HeaderCoding.base64Decode("aGVsbG8=") == Array("hello".utf8))
    #expect(HeaderCoding.base64Decode("a") == nil)
    #expect(HeaderCoding.base64Decode("a*bc") == nil)
  }

  @Test func binaryHeadersBecomeBinaryMetadataAndReservedOnesAreDropped() {
    let element = HeaderCoding.metadataElement(name: "trace-bin", value: "AQID")
    #expect(element?.value == .binary([1, 2, 3]))
    #expect(HeaderCoding.metadataElement(name: "grpc-timeout", value: "1S") == nil)
    #expect(HeaderCoding.metadataElement(name: ":path", value: "/a/b") == nil)
    #expect(HeaderCoding.metadataElement(name: "x-user", value: "u1")?.value == .string("u1"))
  }
}

@Suite struct RPCErrorTests {
  @Test func codesRoundTripTheirWireValues() {
    for raw in 0...16 {
      let code = RPCError.Code(rawValue: raw)
      #expect(code?.rawValue == raw)
    }
    #expect(RPCError.Code(rawValue: 17) == nil)
    #expect(RPCError.Code.resourceExhausted.description == "RESOURCE_EXHAUSTED")
  }

  struct Opaque: Error {}
  struct Missing: RPCErrorConvertible {
    var rpcErrorCode: RPCError.Code { .notFound }
    var rpcErrorMessage: String { "tenant t1 not found" }
  }

  @Test func mappingHidesUnknownErrorsAndConvertsDomainErrors() {
    let unknown = RPCError(mapping: Opaque())
    #expect(unknown.code == .unknown)
    #expect(!unknown.message.contains("Opaque"))
    let domain = RPCError(mapping: Missing())
    #expect(domain.code == .notFound && domain.message == "tenant t1 not found")
    #expect(RPCError(mapping: CancellationError()).code == .cancelled)
  }

  @Test func metadataKeepsOrderAndTypes() {
    var metadata: Metadata = ["Authorization": "Bearer x"]
    metadata.addString("a", forKey: "multi")
    metadata.addString("b", forKey: "multi")
    metadata.addBinary([9], forKey: "blob-bin")
    #expect(metadata.firstString(forKey: "authorization") == "Bearer x")
    #expect(metadata.strings(forKey: "MULTI") == ["a", "b"])
    #expect(metadata.firstBinary(forKey: "blob-bin") == [9])
    metadata.removeAll(forKey: "multi")
    #expect(metadata.count == 2)
  }
}
