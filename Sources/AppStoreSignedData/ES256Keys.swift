// P-256 keys for ES256 (ECDSA with SHA-256, RFC 7518 §3.4): App Store Connect's In-App Purchase keys
// (.p8, PKCS#8 PEM) for signing, and the public keys of signing certificates for verification.

/// A P-256 private key, as App Store Connect issues them (an In-App Purchase key's `.p8` file).
///
/// ```swift
/// let key = try ES256PrivateKey(pkcs8PEM: String(contentsOfFile: "SubscriptionKey_ABC123.p8"))
/// let signature = try key.signature(for: Array("message".utf8))   // 64 bytes r||s
/// key.publicKey.isValidSignature(signature, for: Array("message".utf8))  // true
/// ```
public struct ES256PrivateKey: Sendable {
  let key: EVPKey

  init(key: EVPKey) { self.key = key }

  /// Parses a PEM private key: PKCS#8 (`-----BEGIN PRIVATE KEY-----`, the `.p8` format) or SEC1
  /// (`-----BEGIN EC PRIVATE KEY-----`).
  /// - Parameter pkcs8PEM: the PEM text; other text around the block is ignored.
  /// - Throws: `AppStoreCryptoError` when there is not exactly one key block, it does not parse, or
  ///   the key is not on P-256.
  public init(pkcs8PEM: String) throws(AppStoreCryptoError) {
    let block = try PEM.single(in: pkcs8PEM, labels: ["PRIVATE KEY", "EC PRIVATE KEY"])
    let key = try LibCrypto.privateKey(der: block.der)
    guard LibCrypto.isP256(key) else {
      throw AppStoreCryptoError("the private key is not a P-256 EC key")
    }
    self.key = key
  }

  /// A new random P-256 key (for tests and the App Store simulator).
  public static func generate() -> ES256PrivateKey {
    ES256PrivateKey(key: LibCrypto.generateP256())
  }

  /// The key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), the `.p8` format. This is secret material.
  public var pkcs8PEM: String { PEM.encode(label: "PRIVATE KEY", der: LibCrypto.pkcs8DER(key)) }

  /// The matching public key.
  public var publicKey: ES256PublicKey { ES256PublicKey(checkedP256: key) }

  /// The ES256 signature of `message` in JOSE form: r||s, 32 bytes each (RFC 7518 §3.4).
  /// ECDSA signatures are randomized, so two calls give different bytes; both verify.
  /// - Parameter message: the bytes to sign (hashed with SHA-256 here).
  /// - Throws: `AppStoreCryptoError` if libcrypto fails.
  public func signature(for message: [UInt8]) throws(AppStoreCryptoError) -> [UInt8] {
    let der = try LibCrypto.signDER(message, key: key)
    guard let raw = LibCrypto.rawSignature(fromDER: der) else {
      throw AppStoreCryptoError("could not convert an ECDSA signature to r||s")
    }
    return raw
  }

  /// The ECDSA-SHA256 signature of `message` as ASN.1 DER (`ECDSA-Sig-Value`), the form of Apple's
  /// V1 promotional offer signature.
  /// - Parameter message: the bytes to sign (hashed with SHA-256 here).
  /// - Throws: `AppStoreCryptoError` if libcrypto fails.
  public func derSignature(for message: [UInt8]) throws(AppStoreCryptoError) -> [UInt8] {
    try LibCrypto.signDER(message, key: key)
  }
}

/// A P-256 public key that checks ES256 signatures.
public struct ES256PublicKey: Sendable {
  let key: EVPKey

  /// A key the caller has checked is on P-256 (it may be a private key object: only its public
  /// part is used and exported).
  init(checkedP256 key: EVPKey) { self.key = key }

  init(spki der: [UInt8]) throws(AppStoreCryptoError) {
    let key = try LibCrypto.publicKey(spki: der)
    guard LibCrypto.isP256(key) else {
      throw AppStoreCryptoError("the public key is not a P-256 EC key")
    }
    self.key = key
  }

  /// The SubjectPublicKeyInfo DER.
  public var spkiDER: [UInt8] { LibCrypto.spkiDER(key) }

  /// Parses a PEM SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`).
  /// - Throws: `AppStoreCryptoError` when there is not exactly one such block, it does not parse,
  ///   or the key is not on P-256.
  public init(pem: String) throws(AppStoreCryptoError) {
    try self.init(spki: PEM.single(in: pem, labels: ["PUBLIC KEY"]).der)
  }

  /// The key as PEM SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`).
  public var pem: String { PEM.encode(label: "PUBLIC KEY", der: spkiDER) }

  /// Whether `raw` is a valid ES256 signature (JOSE r||s, exactly 64 bytes) of `message`.
  /// Any other length is refused; both low-S and high-S forms are accepted (ECDSA as specified).
  public func isValidSignature(_ raw: [UInt8], for message: [UInt8]) -> Bool {
    guard raw.count == 64, let der = LibCrypto.derSignature(fromRaw: raw) else { return false }
    return LibCrypto.verifyDER(der, message: message, key: key)
  }

  /// Whether `der` is a valid ECDSA-SHA256 signature in ASN.1 DER of `message`.
  public func isValidDERSignature(_ der: [UInt8], for message: [UInt8]) -> Bool {
    LibCrypto.verifyDER(der, message: message, key: key)
  }
}
