import SubstatusJSON
import Testing

@testable import AppStoreSignedData

@Suite("Compact JWS")
struct JWSTests {
  @Test("sign then parse gives back the header and payload, and the signature verifies")
  func roundTrip() throws {
    let key = ES256PrivateKey.generate()
    let header = JSONValue.object([
      "alg": .string("ES256"), "kid": .string("K1"), "typ": .string("JWT"),
    ])
    let jws = try JWS.sign(header: header, payload: Array(#"{"a":1}"#.utf8), key: key)
    let parsed = try JWS.CompactJWS(parsing: jws)
    #expect(parsed.header == header)
    #expect(parsed.headerBytes == Array(#"{"alg":"ES256","kid":"K1","typ":"JWT"}"#.utf8))
    #expect(parsed.payload == Array(#"{"a":1}"#.utf8))
    #expect(parsed.signature.count == 64)
    #expect(
      parsed.signingInput == Array(jws.split(separator: ".").prefix(2).joined(separator: ".").utf8))
    #expect(key.publicKey.isValidSignature(parsed.signature, for: parsed.signingInput))
  }

  @Test(
    "signing refuses a header without alg ES256",
    arguments: [
      JSONValue.object(["alg": .string("HS256")]), .object(["kid": .string("x")]), .array([]),
      .string("ES256"),
    ])
  func badHeader(header: JSONValue) {
    #expect(throws: AppStoreCryptoError.self) {
      try JWS.sign(header: header, payload: [], key: ES256PrivateKey.generate())
    }
  }

  @Test("a signing identity's JWS carries Apple's header shape")
  func identityHeader() throws {
    let identity = try TestCertificateAuthority.make().issueSigningIdentity()
    let jws = try identity.signedJWS(payload: .object(["bundleId": .string("com.example")]))
    let parsed = try JWS.CompactJWS(parsing: jws)
    #expect(parsed.header["alg"] == .string("ES256"))
    let x5cValues = parsed.header["x5c"]?.arrayValue ?? []
    let x5c = x5cValues.compactMap { $0.stringValue }
    #expect(x5c.count == 3)
    let certificates = try x5c.map {
      try X509Certificate(der: Base64Codec.decodeStandard($0) ?? [])
    }
    #expect(certificates == identity.chain)
  }

  static let malformed: [(String, String)] = [
    ("", "3 segments"), ("a.b", "3 segments"), ("a.b.c.d", "3 segments"), ("..", "empty"),
    ("eyJhbGciOiJFUzI1NiJ9..AAAA", "payload segment is empty"),
    ("eyJhbGciOiJFUzI1NiJ9.e30=.AAAA", "payload segment is not base64url"),
    ("eyJhbGciOiJFUzI1NiJ9.e30.AA+A", "signature segment is not base64url"),
    ("bm90IGpzb24.e30.AAAA", "header is not JSON"),
    ("WzFd.e30.AAAA", "header is not a JSON object"),
  ]

  @Test("malformed input gives .malformed with where it failed", arguments: malformed)
  func malformedInput(text: String, detail: String) {
    #expect {
      try JWS.CompactJWS(parsing: text)
    } throws: { error in
      guard case .malformed(let message) = error as? SignedDataVerificationError else {
        return false
      }
      return message.contains(detail)
    }
  }

  @Test("an over-long input is refused before decoding")
  func tooLong() {
    let text = String(repeating: "A", count: JWS.CompactJWS.maximumLength + 1)
    #expect(throws: SignedDataVerificationError.self) { try JWS.CompactJWS(parsing: text) }
  }
}
