import Foundation
import SubscriptionDomain
import SubstatusJSON
import Testing

@testable import AppStoreSignedData

/// One CA and its identities, shared by the tests (making keys and certificates costs milliseconds).
struct VerifierFixtures: Sendable {
  let ca: TestCertificateAuthority
  let identity: SigningIdentity
  let otherCA: TestCertificateAuthority

  static let shared: VerifierFixtures = {
    do {
      let ca = try TestCertificateAuthority.make()
      return VerifierFixtures(
        ca: ca, identity: try ca.issueSigningIdentity(),
        otherCA: try TestCertificateAuthority.make(commonName: "Other Root"))
    } catch {
      fatalError("test CA: \(error)")
    }
  }()

  static let bundleId = "com.example.substatus"
  static let appAppleId: Int64 = 1_234_567_890
  /// 2026-01-01T00:00:00Z.
  static let signedDate: Int64 = 1_767_225_600_000

  static func transaction(
    bundleId: String = bundleId, environment: String? = "Sandbox", signedDate: Int64? = signedDate
  ) -> JSONValue {
    var object: JSONObject = [
      "transactionId": .string("2000000847061981"),
      "originalTransactionId": .string("2000000847061900"),
      "bundleId": .string(bundleId), "productId": .string("com.example.monthly"),
      "purchaseDate": .integer(1_767_000_000_000), "expiresDate": .integer(1_769_600_000_000),
      "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
    ]
    if let environment { object.append("environment", .string(environment)) }
    if let signedDate { object.append("signedDate", .integer(signedDate)) }
    return .object(object)
  }

  static func renewalInfo(environment: String = "Sandbox") -> JSONValue {
    .object([
      "originalTransactionId": .string("2000000847061900"),
      "productId": .string("com.example.monthly"),
      "autoRenewProductId": .string("com.example.monthly"), "autoRenewStatus": .integer(1),
      "environment": .string(environment), "signedDate": .integer(signedDate),
    ])
  }

  static func notification(
    bundleId: String = bundleId, appAppleId: Int64? = appAppleId, environment: String = "Sandbox"
  ) -> JSONValue {
    var data: JSONObject = ["bundleId": .string(bundleId), "environment": .string(environment)]
    if let appAppleId { data.append("appAppleId", .integer(appAppleId)) }
    return .object([
      "notificationType": .string("DID_RENEW"),
      "notificationUUID": .string("0a1b2c3d-0000-4000-8000-000000000001"),
      "data": .object(data), "version": .string("2.0"), "signedDate": .integer(signedDate),
    ])
  }

  func verifier(
    environment: Environment = .sandbox, appAppleId: Int64? = VerifierFixtures.appAppleId
  )
    -> SignedDataVerifier
  {
    SignedDataVerifier(
      trustedRoots: [ca.root], bundleId: Self.bundleId, appAppleId: appAppleId,
      environment: environment)
  }
}

/// A compact JWS with any header, signed by `key` (to make what a correct signer never would).
func craftJWS(header: JSONValue, payload: [UInt8], key: ES256PrivateKey) throws -> String {
  let input = Base64URL.encode(header.serializedBytes()) + "." + Base64URL.encode(payload)
  return input + "." + Base64URL.encode(try key.signature(for: Array(input.utf8)))
}

@Suite("SignedDataVerifier")
struct SignedDataVerifierTests {
  let fixtures = VerifierFixtures.shared

  @Test("a transaction signed by a test chain verifies and decodes")
  func validTransaction() throws {
    let jws = try fixtures.identity.signedJWS(payload: VerifierFixtures.transaction())
    let transaction = try fixtures.verifier().verifyAndDecodeTransaction(jws)
    #expect(transaction.transactionId == "2000000847061981")
    #expect(transaction.bundleId == VerifierFixtures.bundleId)
    #expect(transaction.signedDate == VerifierFixtures.signedDate)
    #expect(transaction.environment == .sandbox)
  }

  @Test(
    "renewal info and notifications verify in Sandbox and Production",
    arguments: [Environment.sandbox, .production])
  func validRenewalInfoAndNotification(environment: Environment) throws {
    let verifier = fixtures.verifier(environment: environment)
    let renewal = try fixtures.identity.signedJWS(
      payload: VerifierFixtures.renewalInfo(environment: environment.rawValue))
    #expect(
      try verifier.verifyAndDecodeRenewalInfo(renewal).originalTransactionId == "2000000847061900")
    let notification = try fixtures.identity.signedJWS(
      payload: VerifierFixtures.notification(environment: environment.rawValue))
    let decoded = try verifier.verifyAndDecodeNotification(notification)
    #expect(decoded.rawNotificationType == "DID_RENEW")
    #expect(decoded.data?.appAppleId == VerifierFixtures.appAppleId)
  }

  @Test("verifySignature tells the origin without app checks, and the app checks apply afterwards")
  func origin() throws {
    let jws = try fixtures.identity.signedJWS(
      payload: VerifierFixtures.notification(environment: "Production"))
    let verified = try SignedDataVerifier.verifySignature(jws, trustedRoots: [fixtures.ca.root])
    #expect(verified.origin.bundleId == VerifierFixtures.bundleId)
    #expect(verified.origin.environment == .production)
    #expect(verified.origin.appAppleId == VerifierFixtures.appAppleId)
    #expect(verified.signedDate == VerifierFixtures.signedDate)
    #expect(verified.certificateChain == fixtures.identity.chain)
    #expect(
      throws: SignedDataVerificationError.wrongEnvironment(expected: "Sandbox", found: "Production")
    ) {
      try fixtures.verifier(environment: .sandbox).decodeNotification(verified: verified)
    }
    #expect(
      try fixtures.verifier(environment: .production).decodeNotification(verified: verified).data?
        .bundleId
        == VerifierFixtures.bundleId)
    // Apple Root CA - G3 is the default: a test chain is not trusted by it.
    #expect(throws: SignedDataVerificationError.untrustedRoot) {
      try SignedDataVerifier.verifySignature(jws)
    }
  }

  /// Each way signed data can be wrong, and the typed error it must give.
  enum Failure: String, CaseIterable, Sendable {
    case wrongRoot, rootSwappedForTrustedOne, rootThreeTimes, chainOfTwo, chainOfFour, noX5c,
      x5cNotBase64
    case missingLeafOID, missingIntermediateOID, intermediateNotCA
    case expiredLeafAtSignedDate, leafNotYetValidAtSignedDate
    case tamperedPayload, tamperedSignature, signedByAnotherKey, truncatedSignature
    case algHS256, algNone, algMissing
    case missingSignedDate, payloadNotJSON
    case wrongBundleId, wrongEnvironment, missingEnvironment, xcodeEnvironment,
      localTestingEnvironment
    case wrongAppAppleIdOnProductionNotification, productionVerifierWithoutAppAppleId
    case notificationForAnotherApp
  }

  @Test("each failure gives its typed error", arguments: Failure.allCases)
  func failure(_ failure: Failure) throws {
    let f = fixtures
    let transaction = VerifierFixtures.transaction().serializedBytes()
    var verifier = f.verifier()
    var decode: (SignedDataVerifier, String) throws(SignedDataVerificationError) -> Void = {
      v, jws throws(SignedDataVerificationError) in
      _ = try v.verifyAndDecodeTransaction(jws)
    }
    let jws: String
    let expected: SignedDataVerificationError
    func identity(_ configure: (inout TestCertificateAuthority.SigningIdentityOptions) -> Void)
      throws -> SigningIdentity
    {
      var options = TestCertificateAuthority.SigningIdentityOptions()
      configure(&options)
      return try f.ca.issueSigningIdentity(options: options)
    }
    func withHeader(_ header: JSONValue, key: ES256PrivateKey = f.identity.key) throws -> String {
      try craftJWS(header: header, payload: transaction, key: key)
    }
    func x5c(_ certificates: [X509Certificate]) -> JSONValue {
      .array(certificates.map { .string(Base64Codec.encodeStandard($0.der)) })
    }
    switch failure {
    case .wrongRoot:
      jws = try f.otherCA.issueSigningIdentity().signedJWS(payload: transaction)
      expected = .untrustedRoot
    case .rootSwappedForTrustedOne:
      // Issued by another CA, but the x5c names the trusted root: the path cannot be built.
      let other = try f.otherCA.issueSigningIdentity()
      let chain = [other.chain[0], other.chain[1], f.ca.root]
      jws = try withHeader(.object(["alg": .string("ES256"), "x5c": x5c(chain)]), key: other.key)
      expected = .invalidCertificateChain("unable to get local issuer certificate (depth 1)")
    case .rootThreeTimes:
      // A trusted root is a valid path of one: the three-certificate rule must refuse it.
      jws = try withHeader(
        .object(["alg": .string("ES256"), "x5c": x5c([f.ca.root, f.ca.root, f.ca.root])]),
        key: f.ca.rootKey)
      expected = .invalidCertificateChain("the verified path has 1 certificates, not 3")
    case .chainOfTwo:
      jws = try withHeader(
        .object(["alg": .string("ES256"), "x5c": x5c([f.identity.chain[0], f.identity.chain[2]])]))
      expected = .invalidCertificateChain("x5c has 2 certificates; Apple's chains have 3")
    case .chainOfFour:
      jws = try withHeader(
        .object(["alg": .string("ES256"), "x5c": x5c(f.identity.chain + [f.ca.root])]))
      expected = .invalidCertificateChain("x5c has 4 certificates; Apple's chains have 3")
    case .noX5c:
      jws = try withHeader(.object(["alg": .string("ES256")]))
      expected = .invalidCertificateChain("the header has no x5c")
    case .x5cNotBase64:
      jws = try withHeader(
        .object([
          "alg": .string("ES256"),
          "x5c": .array([.string("%%"), .string("AA=="), .string("AA==")]),
        ]))
      expected = .invalidCertificateChain("x5c[0] is not a base64 string")
    case .missingLeafOID:
      jws = try identity { $0.leafHasReceiptSigningMarker = false }.signedJWS(payload: transaction)
      expected = .missingAppleMarkerOID("1.2.840.113635.100.6.11.1")
    case .missingIntermediateOID:
      jws = try identity { $0.intermediateHasWWDRMarker = false }.signedJWS(payload: transaction)
      expected = .missingAppleMarkerOID("1.2.840.113635.100.6.2.1")
    case .intermediateNotCA:
      jws = try identity { $0.intermediateIsCA = false }.signedJWS(payload: transaction)
      expected = .invalidCertificateChain("invalid CA certificate (depth 1)")
    case .expiredLeafAtSignedDate:
      jws = try identity {
        $0.leafNotBefore = VerifierFixtures.signedDate - 86_400_000 * 30
        $0.leafNotAfter = VerifierFixtures.signedDate - 1000
      }.signedJWS(payload: transaction)
      expected = .certificateNotValidAtSignedDate
    case .leafNotYetValidAtSignedDate:
      jws = try identity { $0.leafNotBefore = VerifierFixtures.signedDate + 60_000 }.signedJWS(
        payload: transaction)
      expected = .certificateNotValidAtSignedDate
    case .tamperedPayload:
      let valid = try f.identity.signedJWS(payload: transaction)
      let parts = valid.split(separator: ".")
      let other = Base64URL.encode(
        VerifierFixtures.transaction(bundleId: "com.example.other").serializedBytes())
      jws = "\(parts[0]).\(other).\(parts[2])"
      expected = .invalidSignature
    case .tamperedSignature:
      let valid = try f.identity.signedJWS(payload: transaction)
      var signature = Base64URL.decode(valid.split(separator: ".")[2])!
      signature[40] ^= 0x80
      jws =
        valid.split(separator: ".").prefix(2).joined(separator: ".") + "."
        + Base64URL.encode(signature)
      expected = .invalidSignature
    case .signedByAnotherKey:
      jws = try withHeader(f.identity.header, key: ES256PrivateKey.generate())
      expected = .invalidSignature
    case .truncatedSignature:
      let valid = try f.identity.signedJWS(payload: transaction)
      let signature = Base64URL.decode(valid.split(separator: ".")[2])!
      jws =
        valid.split(separator: ".").prefix(2).joined(separator: ".") + "."
        + Base64URL.encode(signature.dropLast())
      expected = .invalidSignature
    case .algHS256:
      jws = try withHeader(.object(["alg": .string("HS256"), "x5c": x5c(f.identity.chain)]))
      expected = .unsupportedAlgorithm("HS256")
    case .algNone:
      let header = Base64URL.encode(
        JSONValue.object(["alg": .string("none"), "x5c": x5c(f.identity.chain)]).serializedBytes())
      jws = header + "." + Base64URL.encode(transaction) + ".AA"
      expected = .unsupportedAlgorithm("none")
    case .algMissing:
      jws = try withHeader(.object(["x5c": x5c(f.identity.chain)]))
      expected = .unsupportedAlgorithm("(missing)")
    case .missingSignedDate:
      jws = try f.identity.signedJWS(payload: VerifierFixtures.transaction(signedDate: nil))
      expected = .malformed("the payload has no integer signedDate")
    case .payloadNotJSON:
      jws = try f.identity.signedJWS(payload: Array("[1, 2".utf8))
      expected = .malformed("the payload is not JSON: invalid JSON at byte 5: unterminated array")
    case .wrongBundleId:
      jws = try f.identity.signedJWS(
        payload: VerifierFixtures.transaction(bundleId: "com.example.other"))
      expected = .wrongBundleId(expected: VerifierFixtures.bundleId, found: "com.example.other")
    case .wrongEnvironment:
      jws = try f.identity.signedJWS(
        payload: VerifierFixtures.transaction(environment: "Production"))
      expected = .wrongEnvironment(expected: "Sandbox", found: "Production")
    case .missingEnvironment:
      jws = try f.identity.signedJWS(payload: VerifierFixtures.transaction(environment: nil))
      expected = .wrongEnvironment(expected: "Sandbox", found: nil)
    case .xcodeEnvironment:
      jws = try f.identity.signedJWS(payload: VerifierFixtures.transaction(environment: "Xcode"))
      expected = .unsupportedEnvironment("Xcode")
    case .localTestingEnvironment:
      jws = try f.identity.signedJWS(
        payload: VerifierFixtures.transaction(environment: "LocalTesting"))
      expected = .unsupportedEnvironment("LocalTesting")
    case .wrongAppAppleIdOnProductionNotification:
      verifier = f.verifier(environment: .production)
      decode = { v, jws throws(SignedDataVerificationError) in
        _ = try v.verifyAndDecodeNotification(jws)
      }
      jws = try f.identity.signedJWS(
        payload: VerifierFixtures.notification(appAppleId: 42, environment: "Production"))
      expected = .wrongAppAppleId
    case .productionVerifierWithoutAppAppleId:
      verifier = f.verifier(environment: .production, appAppleId: nil)
      decode = { v, jws throws(SignedDataVerificationError) in
        _ = try v.verifyAndDecodeNotification(jws)
      }
      jws = try f.identity.signedJWS(
        payload: VerifierFixtures.notification(appAppleId: nil, environment: "Production"))
      expected = .wrongAppAppleId
    case .notificationForAnotherApp:
      decode = { v, jws throws(SignedDataVerificationError) in
        _ = try v.verifyAndDecodeNotification(jws)
      }
      jws = try f.identity.signedJWS(
        payload: VerifierFixtures.notification(bundleId: "com.example.other"))
      expected = .wrongBundleId(expected: VerifierFixtures.bundleId, found: "com.example.other")
    }
    #expect(throws: expected) { try decode(verifier, jws) }
  }

  @Test("an appAppleId mismatch is ignored in Sandbox, as Apple's library does")
  func sandboxIgnoresAppAppleId() throws {
    let jws = try fixtures.identity.signedJWS(
      payload: VerifierFixtures.notification(appAppleId: 42))
    #expect(try fixtures.verifier().verifyAndDecodeNotification(jws).data?.appAppleId == 42)
  }

  @Test("garbage and every truncation give a typed error, never a crash")
  func garbage() throws {
    let valid = try fixtures.identity.signedJWS(payload: VerifierFixtures.transaction())
    let verifier = fixtures.verifier()
    var inputs = [
      "", ".", "..", "...", "a.b.c", "\u{0}.\u{0}.\u{0}", String(repeating: ".", count: 1000),
      "e30.e30.e30",
    ]
    for length in stride(from: 0, to: valid.count, by: 13) {
      inputs.append(String(valid.prefix(length)))
    }
    var generator = SplitMix64(seed: 9)
    for _ in 0..<50 {
      var bytes = Array(valid.utf8)
      bytes[Int(generator.next() % UInt64(bytes.count))] = UInt8(
        truncatingIfNeeded: generator.next())
      inputs.append(String(decoding: bytes, as: UTF8.self))
    }
    for input in inputs where input != valid {
      #expect(throws: SignedDataVerificationError.self) {
        try verifier.verifyAndDecodeTransaction(input)
      }
    }
  }

  @Test("Apple Root CA - G3 is embedded, matches the PEM data file and its published fingerprint")
  func appleRoot() throws {
    let root = X509Certificate.appleRootCAG3
    #expect(
      root.sha256Fingerprint
        == "63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79"
    )
    let file = packageRoot.appendingPathComponent("Sources/AppStoreSignedData/AppleRootCA-G3.pem")
    #expect(try String(contentsOf: file, encoding: .utf8) == X509Certificate.appleRootCAG3PEM)
    #expect(root.pem == X509Certificate.appleRootCAG3PEM)
    #expect(root.subject.contains("CN=Apple Root CA - G3"))
    #expect(root.notAfter == 2_187_800_346_000)  // 2039-04-30T18:19:06Z
  }

  @Test(
    "a real Sandbox transaction signed by Apple verifies at its signedDate against Apple Root CA - G3"
  )
  func realAppleTransaction() throws {
    let jws = try fixture("apple-sandbox-transaction.jws").trimmingCharacters(
      in: .whitespacesAndNewlines)
    let verified = try SignedDataVerifier.verifySignature(jws)
    #expect(verified.signedDate == 1_739_161_772_561)
    #expect(verified.certificateChain[2] == .appleRootCAG3)
    #expect(
      verified.certificateChain[0].subject.contains(
        "Prod ECC Mac App Store and iTunes Store Receipt Signing"))
    let verifier = SignedDataVerifier(
      bundleId: "com.goodheartapp", appAppleId: nil, environment: .sandbox)
    let transaction = try verifier.verifyAndDecodeTransaction(jws)
    #expect(transaction.transactionId == "2000000847061981")
    #expect(transaction.type == .consumable)
    #expect(
      throws: SignedDataVerificationError.wrongEnvironment(expected: "Production", found: "Sandbox")
    ) {
      try SignedDataVerifier(bundleId: "com.goodheartapp", appAppleId: 1, environment: .production)
        .verifyAndDecodeTransaction(jws)
    }
    #expect(throws: SignedDataVerificationError.untrustedRoot) {
      try SignedDataVerifier.verifySignature(jws, trustedRoots: [fixtures.ca.root])
    }
    // Any change to the payload breaks Apple's signature.
    let parts = jws.split(separator: ".")
    var payload = Base64URL.decode(parts[1])!
    payload[payload.count - 3] = UInt8(ascii: "X")
    #expect(throws: SignedDataVerificationError.self) {
      try SignedDataVerifier.verifySignature("\(parts[0]).\(Base64URL.encode(payload)).\(parts[2])")
    }
  }
}

/// A small deterministic generator for test inputs.
struct SplitMix64: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

@Suite("SignedDataVerifier against chains made by pyca/cryptography")
struct IndependentChainTests {
  @Test("a chain and JWS made in Python verify; without a marker OID they are refused")
  func pythonChain() async throws {
    let payload = VerifierFixtures.transaction()
    let results = try await pythonChecks([
      .object(["kind": .string("apple_like_jws"), "payload": payload]),
      .object(["kind": .string("apple_like_jws"), "payload": payload, "leafMarker": .bool(false)]),
      .object([
        "kind": .string("apple_like_jws"), "payload": payload, "intermediateMarker": .bool(false),
      ]),
    ])
    func verifier(_ result: JSONValue) throws -> (SignedDataVerifier, String) {
      let root = try X509Certificate(pem: result["rootPEM"]?.stringValue ?? "")
      return (
        SignedDataVerifier(
          trustedRoots: [root], bundleId: VerifierFixtures.bundleId, appAppleId: nil,
          environment: .sandbox),
        result["jws"]?.stringValue ?? ""
      )
    }
    let (good, jws) = try verifier(results[0])
    #expect(try good.verifyAndDecodeTransaction(jws).transactionId == "2000000847061981")
    let (noLeafMarker, jws1) = try verifier(results[1])
    #expect(
      throws: SignedDataVerificationError.missingAppleMarkerOID(
        AppleCertificateOID.receiptSigningLeaf)
    ) {
      try noLeafMarker.verifyAndDecodeTransaction(jws1)
    }
    let (noIntermediateMarker, jws2) = try verifier(results[2])
    #expect(
      throws: SignedDataVerificationError.missingAppleMarkerOID(
        AppleCertificateOID.wwdrIntermediate)
    ) {
      try noIntermediateMarker.verifyAndDecodeTransaction(jws2)
    }
  }

  @Test("one verifier and one chain used from many tasks at once")
  func concurrentUse() async throws {
    let fixtures = VerifierFixtures.shared
    let verifier = fixtures.verifier()
    let jws = try fixtures.identity.signedJWS(payload: VerifierFixtures.transaction())
    let bad = try fixtures.identity.signedJWS(
      payload: VerifierFixtures.transaction(bundleId: "com.example.other"))
    let outcomes = await withTaskGroup(of: Bool.self) { group in
      for index in 0..<64 {
        group.addTask {
          let expectedError = SignedDataVerificationError.wrongBundleId(
            expected: VerifierFixtures.bundleId, found: "com.example.other")
          do throws(SignedDataVerificationError) {
            _ = try verifier.verifyAndDecodeTransaction(index.isMultiple(of: 2) ? jws : bad)
            return index.isMultiple(of: 2)
          } catch {
            return !index.isMultiple(of: 2) && error == expectedError
          }
        }
      }
      var all: [Bool] = []
      for await outcome in group { all.append(outcome) }
      return all
    }
    #expect(outcomes.count == 64)
    #expect(outcomes.allSatisfy { $0 })
  }
}

@Suite("Verified-chain cache")
struct VerifiedChainCacheTests {
  @Test(
    "a cached chain is still checked against the signedDate, the trusted roots and the signature")
  func cachedChainChecks() throws {
    let fixtures = VerifierFixtures.shared
    var options = TestCertificateAuthority.SigningIdentityOptions()
    options.leafNotAfter = VerifierFixtures.signedDate + 86_400_000
    let identity = try fixtures.ca.issueSigningIdentity(options: options)
    let verifier = fixtures.verifier()
    let first = try identity.signedJWS(payload: VerifierFixtures.transaction())
    _ = try verifier.verifyAndDecodeTransaction(first)
    let x5c = identity.x5c
    #expect(VerifiedChainCache.shared.entry(for: x5c) != nil)

    // Same chain, signed after the leaf expired.
    let late = try identity.signedJWS(
      payload: VerifierFixtures.transaction(
        signedDate: VerifierFixtures.signedDate + 2 * 86_400_000))
    #expect(throws: SignedDataVerificationError.certificateNotValidAtSignedDate) {
      try verifier.verifyAndDecodeTransaction(late)
    }
    // Same chain, a verifier that trusts another root.
    let other = SignedDataVerifier(
      trustedRoots: [fixtures.otherCA.root], bundleId: VerifierFixtures.bundleId, appAppleId: nil,
      environment: .sandbox)
    #expect(throws: SignedDataVerificationError.untrustedRoot) {
      try other.verifyAndDecodeTransaction(first)
    }
    // Same chain, another key's signature.
    let forged = try craftJWS(
      header: identity.header, payload: VerifierFixtures.transaction().serializedBytes(),
      key: ES256PrivateKey.generate())
    #expect(throws: SignedDataVerificationError.invalidSignature) {
      try verifier.verifyAndDecodeTransaction(forged)
    }
    // And the first one still verifies.
    #expect(try verifier.verifyAndDecodeTransaction(first).transactionId == "2000000847061981")
  }

  @Test("a chain that failed validation is not cached")
  func failuresAreNotCached() throws {
    var options = TestCertificateAuthority.SigningIdentityOptions()
    options.leafHasReceiptSigningMarker = false
    let identity = try VerifierFixtures.shared.ca.issueSigningIdentity(options: options)
    let jws = try identity.signedJWS(payload: VerifierFixtures.transaction())
    for _ in 0..<2 {
      #expect(
        throws: SignedDataVerificationError.missingAppleMarkerOID(
          AppleCertificateOID.receiptSigningLeaf)
      ) {
        try VerifierFixtures.shared.verifier().verifyAndDecodeTransaction(jws)
      }
    }
    #expect(VerifiedChainCache.shared.entry(for: identity.x5c) == nil)
  }

  @Test("the cache keeps at most its capacity, dropping the oldest")
  func capacity() throws {
    let cache = VerifiedChainCache(capacity: 2)
    let chain = VerifierFixtures.shared.identity.chain
    let entry = VerifiedChainCache.Entry(
      chain: chain, leafKey: try chain[0].es256PublicKey(), notBefore: 0, notAfter: 1)
    for key in ["a", "b", "c"] { cache.insert(entry, for: [key]) }
    #expect(cache.count == 2)
    #expect(cache.entry(for: ["a"]) == nil)
    #expect(cache.entry(for: ["b"]) != nil)
    #expect(cache.entry(for: ["c"]) != nil)
    #expect(entry.isValid(atSeconds: 0))
    #expect(!entry.isValid(atSeconds: 1))
  }
}

@Suite("Where a notification says it comes from")
struct SignedDataOriginTests {
  /// Each kind of V2 notification body keeps its app and environment in another object.
  @Test(
    "data, summary, appData and externalPurchaseToken name the app",
    arguments: [
      (#"{"data":{"bundleId":"com.example.app","appAppleId":7,"environment":"Sandbox"}}"#, "Sandbox"),
      (#"{"summary":{"bundleId":"com.example.app","appAppleId":7,"environment":"Production"}}"#, "Production"),
      (#"{"appData":{"bundleId":"com.example.app","appAppleId":7,"environment":"Sandbox"}}"#, "Sandbox"),
      (#"{"externalPurchaseToken":{"bundleId":"com.example.app","appAppleId":7,"externalPurchaseId":"SANDBOX_1"}}"#, "Sandbox"),
    ])
  func origin(body: String, environment: String) throws {
    let fixtures = VerifierFixtures.shared
    let payload = body.dropLast() + #","signedDate":1700000000000}"#
    let jws = try fixtures.identity.signedJWS(payload: Array(payload.utf8))
    let origin = try SignedDataVerifier.verifySignature(jws, trustedRoots: [fixtures.ca.root]).origin
    #expect(origin.bundleId == "com.example.app")
    #expect(origin.appAppleId == 7)
    #expect(origin.rawEnvironment == environment)
  }
}

/// Found by fuzzing (`Fuzz/Corpus/signed/regress-signed-date-beyond-openssl`): a `signedDate` so far
/// away that OpenSSL cannot compare it with the validity fields was refused as an invalid chain.
@Test(arguments: [Int64(173_568_960_097_600_000), Int64.max, Int64.min])
func signedDateBeyondOpenSSLIsNotValidAtSignedDate(_ signedDate: Int64) throws {
  let fixtures = VerifierFixtures.shared
  let identity = try fixtures.ca.issueSigningIdentity()
  let jws = try identity.signedJWS(payload: VerifierFixtures.transaction(signedDate: signedDate))
  #expect(throws: SignedDataVerificationError.certificateNotValidAtSignedDate) {
    try fixtures.verifier().verifyAndDecodeTransaction(jws)
  }
}
