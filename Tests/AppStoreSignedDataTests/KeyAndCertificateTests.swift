import SubstatusJSON
import Testing

@testable import AppStoreSignedData

@Suite("ES256 keys")
struct ES256KeyTests {
  let message = Array("bundleId\u{2063}keyId\u{2063}product".utf8)

  @Test("an App Store Connect-style .p8 parses and gives the public key openssl gives")
  func p8() throws {
    let key = try ES256PrivateKey(pkcs8PEM: fixture("p256-key.p8"))
    #expect(key.publicKey.pem == (try fixture("p256-key.pub.pem")))
    let sec1 = try ES256PrivateKey(pkcs8PEM: fixture("p256-key.sec1.pem"))
    #expect(sec1.publicKey.spkiDER == key.publicKey.spkiDER)
    // PKCS#8 out, PKCS#8 in: the same key.
    #expect(try ES256PrivateKey(pkcs8PEM: key.pkcs8PEM).publicKey.spkiDER == key.publicKey.spkiDER)
    #expect(key.pkcs8PEM.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
  }

  @Test(
    "refuses what is not one P-256 private key",
    arguments: [
      "", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
      "-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n",
      "-----BEGIN PRIVATE KEY-----\nMIGHAgEA\n",
      "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    ])
  func badPrivateKeys(pem: String) {
    #expect(throws: AppStoreCryptoError.self) { try ES256PrivateKey(pkcs8PEM: pem) }
  }

  @Test("refuses a P-384 key, and two keys in one text")
  func wrongCurve() throws {
    #expect(throws: AppStoreCryptoError.self) {
      try ES256PrivateKey(pkcs8PEM: fixture("p384-key.p8"))
    }
    let p8 = try fixture("p256-key.p8")
    #expect(throws: AppStoreCryptoError.self) { try ES256PrivateKey(pkcs8PEM: p8 + p8) }
  }

  @Test("raw signatures are 64 bytes and verify only the signed message under the right key")
  func signAndVerify() throws {
    let key = ES256PrivateKey.generate()
    let signature = try key.signature(for: message)
    #expect(signature.count == 64)
    #expect(key.publicKey.isValidSignature(signature, for: message))
    #expect(!key.publicKey.isValidSignature(signature, for: message + [0]))
    #expect(!ES256PrivateKey.generate().publicKey.isValidSignature(signature, for: message))
    var flipped = signature
    flipped[10] ^= 0x01
    #expect(!key.publicKey.isValidSignature(flipped, for: message))
    #expect(!key.publicKey.isValidSignature(Array(signature.prefix(63)), for: message))
    #expect(!key.publicKey.isValidSignature(signature + [0], for: message))
    #expect(!key.publicKey.isValidSignature([UInt8](repeating: 0, count: 64), for: message))
    #expect(!key.publicKey.isValidSignature([], for: message))
  }

  @Test("DER signatures verify as DER and convert to the same r||s")
  func derSignatures() throws {
    let key = ES256PrivateKey.generate()
    let der = try key.derSignature(for: message)
    #expect(der.first == 0x30)
    #expect(key.publicKey.isValidDERSignature(der, for: message))
    let raw = try #require(LibCrypto.rawSignature(fromDER: der))
    #expect(key.publicKey.isValidSignature(raw, for: message))
    #expect(LibCrypto.derSignature(fromRaw: raw) == der)
  }

  @Test("public keys round-trip through PEM; other PEM is refused")
  func publicKeyPEM() throws {
    let key = ES256PrivateKey.generate()
    let publicKey = try ES256PublicKey(pem: key.publicKey.pem)
    #expect(publicKey.spkiDER == key.publicKey.spkiDER)
    #expect(throws: AppStoreCryptoError.self) { try ES256PublicKey(pem: key.pkcs8PEM) }
  }

  @Test("the signatures verify with pyca/cryptography")
  func independentVerifier() async throws {
    let key = try ES256PrivateKey(pkcs8PEM: fixture("p256-key.p8"))
    let jws = try JWS.sign(
      header: .object(["alg": .string("ES256"), "kid": .string("ABC123")]),
      claims: .object(["n": .integer(1)]), key: key)
    let der = try key.derSignature(for: message)
    let results = try await pythonChecks([
      .object([
        "kind": .string("jws"), "publicKeyPEM": .string(key.publicKey.pem), "jws": .string(jws),
      ]),
      .object([
        "kind": .string("der"), "publicKeyPEM": .string(key.publicKey.pem),
        "messageB64": .string(Base64Codec.encodeStandard(message)),
        "signatureB64": .string(Base64Codec.encodeStandard(der)),
      ]),
      // A negative control: the same signature over another message must fail in Python too.
      .object([
        "kind": .string("der"), "publicKeyPEM": .string(key.publicKey.pem),
        "messageB64": .string(Base64Codec.encodeStandard(message + [1])),
        "signatureB64": .string(Base64Codec.encodeStandard(der)),
      ]),
    ])
    #expect(results[0]["ok"] == .bool(true))
    #expect(results[0]["header"] == .object(["alg": .string("ES256"), "kid": .string("ABC123")]))
    #expect(results[1]["ok"] == .bool(true))
    #expect(results[2]["ok"] == .bool(false))
  }
}

@Suite("X.509 certificates and the test CA")
struct CertificateTests {
  @Test("a test CA issues an Apple-shaped chain that pyca/cryptography accepts")
  func chainShape() async throws {
    let ca = try TestCertificateAuthority.make()
    let identity = try ca.issueSigningIdentity()
    let (leaf, intermediate, root) = (identity.chain[0], identity.chain[1], identity.chain[2])
    #expect(root == ca.root)
    #expect(intermediate.hasExtension(oid: AppleCertificateOID.wwdrIntermediate))
    #expect(!intermediate.hasExtension(oid: AppleCertificateOID.receiptSigningLeaf))
    #expect(leaf.hasExtension(oid: AppleCertificateOID.receiptSigningLeaf))
    #expect(!leaf.hasExtension(oid: AppleCertificateOID.wwdrIntermediate))
    #expect(try leaf.es256PublicKey().spkiDER == identity.key.publicKey.spkiDER)
    #expect(leaf.notBefore == TestCertificateAuthority.defaultNotBefore)
    #expect(leaf.notAfter == TestCertificateAuthority.defaultNotAfter)
    #expect(root.subject.contains("CN=Substatus Test Root CA"))

    let results = try await pythonChecks([
      .object(["kind": .string("chain"), "pems": .array(identity.chain.map { .string($0.pem) })])
    ])
    let result = results[0]
    #expect(result["ok"] == .bool(true), "\(result.serialized())")
    #expect(
      result["fingerprints"]?.arrayValue?.compactMap(\.stringValue)
        == identity.chain.map { $0.sha256Fingerprint.replacingColons().lowercased() })
    #expect(result["basicConstraintsCA"] == .array([.bool(false), .bool(true), .bool(true)]))
    let extensions =
      result["extensions"]?.arrayValue?.map { $0.arrayValue?.compactMap(\.stringValue) ?? [] } ?? []
    #expect(extensions.count == 3)
    #expect(extensions.first?.contains(AppleCertificateOID.receiptSigningLeaf) == true)
    #expect(extensions.dropFirst().first?.contains(AppleCertificateOID.wwdrIntermediate) == true)
    // Apple's marker extensions hold DER NULL.
    #expect(
      result["markerValues"]
        == .array([.array([.string("0500")]), .array([.string("0500")]), .array([])]))
  }

  @Test("options drop the marker OIDs and move the leaf's validity")
  func options() throws {
    let ca = try TestCertificateAuthority.make()
    var options = TestCertificateAuthority.SigningIdentityOptions()
    options.intermediateHasWWDRMarker = false
    options.leafHasReceiptSigningMarker = false
    options.leafNotBefore = 1_600_000_000_000
    options.leafNotAfter = 1_700_000_000_000
    let identity = try ca.issueSigningIdentity(options: options)
    #expect(!identity.chain[0].hasExtension(oid: AppleCertificateOID.receiptSigningLeaf))
    #expect(!identity.chain[1].hasExtension(oid: AppleCertificateOID.wwdrIntermediate))
    #expect(identity.chain[0].notBefore == 1_600_000_000_000)
    #expect(identity.chain[0].notAfter == 1_700_000_000_000)
  }

  @Test("PEM and DER round trips; bundles; garbage is refused")
  func pem() throws {
    let ca = try TestCertificateAuthority.make()
    let identity = try ca.issueSigningIdentity()
    #expect(try X509Certificate(pem: ca.root.pem) == ca.root)
    #expect(try X509Certificate(der: ca.root.der).der == ca.root.der)
    let bundle = "# a comment\n" + identity.chain.map(\.pem).joined(separator: "\r\n")
    #expect(try X509Certificate.certificates(fromPEM: bundle) == identity.chain)
    #expect(throws: AppStoreCryptoError.self) { try X509Certificate(pem: bundle) }
    #expect(throws: AppStoreCryptoError.self) {
      try X509Certificate.certificates(fromPEM: "nothing here")
    }
    #expect(throws: AppStoreCryptoError.self) { try X509Certificate(der: []) }
    #expect(throws: AppStoreCryptoError.self) {
      try X509Certificate(der: Array(ca.root.der.dropLast()))
    }
    #expect(throws: AppStoreCryptoError.self) { try X509Certificate(der: ca.root.der + [0]) }
  }

  @Test("a CA saved as PEM loads back and issues chains to the same root")
  func persistence() throws {
    let ca = try TestCertificateAuthority.make(commonName: "Saved Root")
    let loaded = try TestCertificateAuthority(rootPEM: ca.root.pem, keyPEM: ca.rootKeyPEM)
    #expect(loaded.root == ca.root)
    let identity = try loaded.issueSigningIdentity()
    #expect(identity.chain[2] == ca.root)
    let other = try TestCertificateAuthority.make()
    #expect(throws: AppStoreCryptoError.self) {
      try TestCertificateAuthority(rootPEM: ca.root.pem, keyPEM: other.rootKeyPEM)
    }
  }
}

extension String {
  func replacingColons() -> String { split(separator: ":").joined() }
}
