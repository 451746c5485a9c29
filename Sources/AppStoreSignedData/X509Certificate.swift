// X.509 certificates: the `x5c` chain of Apple's signed data, the trusted roots, and the test CA's.
import SubstatusCrypto

/// An X.509 certificate (parsed once by libcrypto; immutable).
///
/// ```swift
/// let root = try X509Certificate(pem: pemText)
/// root.sha256Fingerprint  // "63:34:3A:…:79"
/// ```
public struct X509Certificate: Sendable, Hashable, CustomStringConvertible {
  let object: X509Object
  /// The certificate's DER encoding.
  public let der: [UInt8]
  /// Start of the validity period, in milliseconds since 1970.
  public let notBefore: Int64
  /// End of the validity period, in milliseconds since 1970.
  public let notAfter: Int64

  /// Parses a DER certificate.
  /// - Throws: `AppStoreCryptoError` when the bytes are not exactly one DER certificate.
  public init(der: [UInt8]) throws(AppStoreCryptoError) {
    let object = try LibCrypto.certificate(der: der)
    (notBefore, notAfter) = try LibCrypto.validity(of: object)
    self.object = object
    self.der = der
  }

  /// Parses the only certificate of a PEM text (`-----BEGIN CERTIFICATE-----`).
  /// - Throws: `AppStoreCryptoError` when the text holds no certificate or more than one.
  public init(pem: String) throws(AppStoreCryptoError) {
    try self.init(der: PEM.single(in: pem, labels: ["CERTIFICATE"]).der)
  }

  /// Every certificate of a PEM bundle, in order.
  /// - Throws: `AppStoreCryptoError` when the text holds no certificate or one does not parse.
  public static func certificates(fromPEM pem: String) throws(AppStoreCryptoError)
    -> [X509Certificate]
  {
    let blocks = try PEM.blocks(in: pem).filter { $0.label == "CERTIFICATE" }
    guard !blocks.isEmpty else { throw AppStoreCryptoError("no CERTIFICATE block in the PEM text") }
    var certificates: [X509Certificate] = []
    for block in blocks { certificates.append(try X509Certificate(der: block.der)) }
    return certificates
  }

  /// The certificate as PEM.
  public var pem: String { PEM.encode(label: "CERTIFICATE", der: der) }

  /// The SHA-256 of the DER, as uppercase hex pairs joined by colons (as `openssl x509 -fingerprint`).
  public var sha256Fingerprint: String {
    SHA256.hash(der).map { byte in
      let digits = Array("0123456789ABCDEF")
      return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]])
    }.joined(separator: ":")
  }

  /// The subject distinguished name in OpenSSL's one-line form, e.g. `/CN=Apple Root CA - G3/OU=…`.
  public var subject: String { LibCrypto.subject(of: object) }

  /// Whether the certificate carries an extension with the dotted object identifier `oid`.
  public func hasExtension(oid: String) -> Bool { LibCrypto.hasExtension(object, oid: oid) }

  /// The subject public key, when it is a P-256 key.
  /// - Throws: `AppStoreCryptoError` for any other key type.
  public func es256PublicKey() throws(AppStoreCryptoError) -> ES256PublicKey {
    let key = try LibCrypto.publicKey(of: object)
    guard LibCrypto.isP256(key) else {
      throw AppStoreCryptoError("the certificate's key is not a P-256 EC key")
    }
    return ES256PublicKey(checkedP256: key)
  }

  /// `X509Certificate(<subject>)`.
  public var description: String { "X509Certificate(\(subject))" }

  /// Certificates are equal when their DER is.
  public static func == (lhs: X509Certificate, rhs: X509Certificate) -> Bool { lhs.der == rhs.der }

  /// Hashes the DER.
  public func hash(into hasher: inout Hasher) { hasher.combine(der) }
}
