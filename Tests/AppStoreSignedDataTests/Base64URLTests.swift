import Testing

@testable import AppStoreSignedData

@Suite("Base64URL")
struct Base64URLTests {
  /// RFC 4648 §10 vectors, unpadded, plus bytes that use the two URL-only characters.
  @Test(
    "encodes and decodes",
    arguments: [
      ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"),
      ("fooba", "Zm9vYmE"),
      ("foobar", "Zm9vYmFy"),
    ])
  func vectors(plain: String, encoded: String) {
    #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
    #expect(Base64URL.decode(encoded) == Array(plain.utf8))
  }

  @Test("uses - and _ instead of + and /")
  func urlAlphabet() {
    #expect(Base64URL.encode([0xfb, 0xff, 0xbf]) == "-_-_")
    #expect(Base64URL.decode("-_-_") == [0xfb, 0xff, 0xbf])
    #expect(Base64Codec.encodeStandard([0xfb, 0xff, 0xbf]) == "+/+/")
  }

  @Test(
    "refuses what is not strict unpadded base64url",
    arguments: ["Zg==", "Zg=", "Z", "Zm9vY", "+/+/", "Zm 9v", "Zm9v\n", "Zh", "Zm9=", "Ã©"])
  func strict(text: String) {
    #expect(Base64URL.decode(text) == nil)
  }

  @Test("round-trips every length up to 70 bytes, both alphabets")
  func roundTrip() {
    for length in 0...70 {
      let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
      #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
      #expect(Base64Codec.decodeStandard(Base64Codec.encodeStandard(bytes)) == bytes)
    }
  }

  @Test("standard decoding requires padding", arguments: ["Zg", "Zm8", "Zg=", "Z===", "Zg==Zg=="])
  func standardPadding(text: String) {
    #expect(Base64Codec.decodeStandard(text) == nil)
  }
}
