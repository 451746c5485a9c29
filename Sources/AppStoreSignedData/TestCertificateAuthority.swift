// A certificate authority for tests and the App Store simulator: it issues chains shaped like
// Apple's (root → WWDR-like intermediate → receipt-signing leaf, P-256, ECDSA-SHA256) so that the
// real verifier can be exercised end to end. Its root is NEVER a default trusted root: a service
// trusts it only when configured to (e.g. against the simulator).
import CCrypto
import SubstatusJSON

/// Apple's certificate marker extensions (apple-domain §2.5).
public enum AppleCertificateOID {
  /// On Apple's WWDR intermediate: `1.2.840.113635.100.6.2.1`.
  public static let wwdrIntermediate = "1.2.840.113635.100.6.2.1"
  /// On the App Store receipt-signing leaf: `1.2.840.113635.100.6.11.1`.
  public static let receiptSigningLeaf = "1.2.840.113635.100.6.11.1"
}

/// A self-signed test root with its key, which issues Apple-shaped signing chains.
///
/// ```swift
/// let ca = try TestCertificateAuthority.make()
/// let identity = try ca.issueSigningIdentity()
/// let jws = try identity.signedJWS(payload: Array(#"{"bundleId":"com.example"}"#.utf8))
/// let verifier = SignedDataVerifier(trustedRoots: [ca.root], bundleId: "com.example", appAppleId: nil, environment: .sandbox)
/// ```
public struct TestCertificateAuthority: Sendable {
  /// The self-signed root certificate (CA:TRUE).
  public let root: X509Certificate
  /// The root's private key.
  public let rootKey: ES256PrivateKey

  /// 2020-01-01T00:00:00Z in milliseconds: the default start of every validity period.
  public static let defaultNotBefore: Int64 = 1_577_836_800_000
  /// 2049-12-31T23:59:59Z in milliseconds: the default end of every validity period.
  public static let defaultNotAfter: Int64 = 2_524_607_999_000

  /// Makes a new root with a fresh P-256 key.
  /// - Parameters:
  ///   - commonName: the root's CN.
  ///   - notBefore: start of validity (ms since 1970).
  ///   - notAfter: end of validity (ms since 1970).
  /// - Throws: `AppStoreCryptoError` if libcrypto fails.
  public static func make(
    commonName: String = "Substatus Test Root CA", notBefore: Int64 = defaultNotBefore,
    notAfter: Int64 = defaultNotAfter
  ) throws(AppStoreCryptoError) -> TestCertificateAuthority {
    let key = ES256PrivateKey.generate()
    let der = try LibCrypto.makeCertificate(
      commonName: commonName, organization: "Substatus Test", subjectKey: key.key, issuer: nil,
      issuerKey: key.key,
      notBeforeSeconds: notBefore / 1000, notAfterSeconds: notAfter / 1000,
      extensions: [
        .standard(nid: NID_basic_constraints, value: "critical,CA:TRUE"),
        .standard(nid: NID_key_usage, value: "critical,keyCertSign,cRLSign"),
        .standard(nid: NID_subject_key_identifier, value: "hash"),
      ])
    return TestCertificateAuthority(root: try X509Certificate(der: der), rootKey: key)
  }

  private init(root: X509Certificate, rootKey: ES256PrivateKey) {
    self.root = root
    self.rootKey = rootKey
  }

  /// Loads a CA saved as PEM (``root``'s ``X509Certificate/pem`` and ``rootKeyPEM``).
  /// - Throws: `AppStoreCryptoError` when either does not parse or the key is not the certificate's.
  public init(rootPEM: String, keyPEM: String) throws(AppStoreCryptoError) {
    let root = try X509Certificate(pem: rootPEM)
    let key = try ES256PrivateKey(pkcs8PEM: keyPEM)
    guard try root.es256PublicKey().spkiDER == key.publicKey.spkiDER else {
      throw AppStoreCryptoError("the private key does not belong to the root certificate")
    }
    self.init(root: root, rootKey: key)
  }

  /// The root's private key as PKCS#8 PEM (secret: for the simulator's state directory only).
  public var rootKeyPEM: String { rootKey.pkcs8PEM }

  /// How ``issueSigningIdentity(options:)`` shapes a chain; the defaults give a chain Apple's rules accept.
  public struct SigningIdentityOptions: Sendable, Hashable {
    /// Put Apple's WWDR marker (``AppleCertificateOID/wwdrIntermediate``) on the intermediate.
    public var intermediateHasWWDRMarker = true
    /// Put Apple's receipt-signing marker (``AppleCertificateOID/receiptSigningLeaf``) on the leaf.
    public var leafHasReceiptSigningMarker = true
    /// Make the intermediate a CA (basicConstraints CA:TRUE); `false` gives an invalid chain.
    public var intermediateIsCA = true
    /// The intermediate's validity (ms since 1970).
    public var intermediateNotBefore = TestCertificateAuthority.defaultNotBefore
    /// The intermediate's validity end (ms since 1970).
    public var intermediateNotAfter = TestCertificateAuthority.defaultNotAfter
    /// The leaf's validity start (ms since 1970).
    public var leafNotBefore = TestCertificateAuthority.defaultNotBefore
    /// The leaf's validity end (ms since 1970); set it before a payload's `signedDate` for an expired leaf.
    public var leafNotAfter = TestCertificateAuthority.defaultNotAfter
    /// The intermediate's CN.
    public var intermediateCommonName = "Substatus Test Worldwide Developer Relations CA"
    /// The leaf's CN.
    public var leafCommonName = "Substatus Test App Store Signing"

    /// Options giving a chain that verifies.
    public init() {}
  }

  /// Issues an intermediate (signed by the root) and a leaf (signed by the intermediate) with a
  /// fresh P-256 key: the identity that signs test "Apple" data.
  /// - Throws: `AppStoreCryptoError` if libcrypto fails.
  public func issueSigningIdentity(options: SigningIdentityOptions = SigningIdentityOptions())
    throws(AppStoreCryptoError) -> SigningIdentity
  {
    let intermediateKey = ES256PrivateKey.generate()
    var intermediateExtensions: [CertificateExtension] = [
      .standard(
        nid: NID_basic_constraints,
        value: options.intermediateIsCA ? "critical,CA:TRUE,pathlen:0" : "critical,CA:FALSE"),
      .standard(nid: NID_key_usage, value: "critical,keyCertSign,cRLSign"),
      .standard(nid: NID_subject_key_identifier, value: "hash"),
      .standard(nid: NID_authority_key_identifier, value: "keyid:always"),
    ]
    if options.intermediateHasWWDRMarker {
      intermediateExtensions.append(.nullMarker(oid: AppleCertificateOID.wwdrIntermediate))
    }
    let intermediateDER = try LibCrypto.makeCertificate(
      commonName: options.intermediateCommonName, organization: "Substatus Test",
      subjectKey: intermediateKey.key,
      issuer: root.object, issuerKey: rootKey.key,
      notBeforeSeconds: options.intermediateNotBefore / 1000,
      notAfterSeconds: options.intermediateNotAfter / 1000,
      extensions: intermediateExtensions)
    let intermediate = try X509Certificate(der: intermediateDER)

    let leafKey = ES256PrivateKey.generate()
    var leafExtensions: [CertificateExtension] = [
      .standard(nid: NID_basic_constraints, value: "critical,CA:FALSE"),
      .standard(nid: NID_key_usage, value: "critical,digitalSignature"),
      .standard(nid: NID_subject_key_identifier, value: "hash"),
      .standard(nid: NID_authority_key_identifier, value: "keyid:always"),
    ]
    if options.leafHasReceiptSigningMarker {
      leafExtensions.append(.nullMarker(oid: AppleCertificateOID.receiptSigningLeaf))
    }
    let leafDER = try LibCrypto.makeCertificate(
      commonName: options.leafCommonName, organization: "Substatus Test", subjectKey: leafKey.key,
      issuer: intermediate.object, issuerKey: intermediateKey.key,
      notBeforeSeconds: options.leafNotBefore / 1000, notAfterSeconds: options.leafNotAfter / 1000,
      extensions: leafExtensions)
    return SigningIdentity(
      key: leafKey, chain: [try X509Certificate(der: leafDER), intermediate, root])
  }
}

/// A signing key with its certificate chain: what signs Apple's JWS (for tests and the simulator).
public struct SigningIdentity: Sendable {
  /// The leaf's private key.
  public let key: ES256PrivateKey
  /// Leaf, intermediate, root, in `x5c` order.
  public let chain: [X509Certificate]

  /// An identity from parts (the chain in `x5c` order, leaf first).
  public init(key: ES256PrivateKey, chain: [X509Certificate]) {
    self.key = key
    self.chain = chain
  }

  /// The `x5c` header value: each certificate's DER in standard padded base64 (RFC 7515 §4.1.6).
  public var x5c: [String] { chain.map { Base64Codec.encodeStandard($0.der) } }

  /// The JWS header Apple uses: `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
  public var header: JSONValue {
    .object(["alg": .string("ES256"), "x5c": .array(x5c.map { .string($0) })])
  }

  /// A compact JWS of `payload` with Apple's header shape, signed by the leaf key.
  /// - Throws: `AppStoreCryptoError` if signing fails.
  public func signedJWS(payload: [UInt8]) throws(AppStoreCryptoError) -> String {
    try JWS.sign(header: header, payload: payload, key: key)
  }

  /// A compact JWS of the JSON `payload` (compact text), as ``signedJWS(payload:)-(_:[UInt8])``.
  public func signedJWS(payload: JSONValue) throws(AppStoreCryptoError) -> String {
    try signedJWS(payload: payload.serializedBytes())
  }
}
