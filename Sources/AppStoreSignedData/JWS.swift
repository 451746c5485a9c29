// Compact JWS (RFC 7515 §7.1) with ES256 (RFC 7518 §3.4): BASE64URL(header).BASE64URL(payload).BASE64URL(r||s).
import SubstatusJSON

/// Signing compact JWS with ES256.
///
/// ```swift
/// let jws = try JWS.sign(header: ["alg": "ES256", "kid": "ABC123"], payload: bytes, key: key)
/// let parsed = try JWS.CompactJWS(parsing: jws)
/// key.publicKey.isValidSignature(parsed.signature, for: parsed.signingInput)  // true
/// ```
public enum JWS {
  /// The compact serialization of `payload` signed with `key`.
  /// - Parameters:
  ///   - header: the protected header, a JSON object whose `alg` is `"ES256"`; serialized compactly,
  ///     members in the given order.
  ///   - payload: the payload bytes (usually compact JSON).
  ///   - key: the P-256 signing key.
  /// - Throws: `AppStoreCryptoError` when the header is not an object with `alg` ES256, or signing fails.
  public static func sign(header: JSONValue, payload: [UInt8], key: ES256PrivateKey)
    throws(AppStoreCryptoError)
    -> String
  {
    guard header.objectValue != nil else {
      throw AppStoreCryptoError("the JWS header must be a JSON object")
    }
    guard header["alg"]?.stringValue == "ES256" else {
      throw AppStoreCryptoError("the JWS header must carry \"alg\": \"ES256\"")
    }
    let signingInput = Base64URL.encode(header.serializedBytes()) + "." + Base64URL.encode(payload)
    let signature = try key.signature(for: Array(signingInput.utf8))
    return signingInput + "." + Base64URL.encode(signature)
  }

  /// The compact serialization of the JSON `claims` signed with `key` (a JWS whose payload is JSON,
  /// as JWTs and Apple's signature creators make).
  /// - Throws: `AppStoreCryptoError` as ``sign(header:payload:key:)``.
  public static func sign(header: JSONValue, claims: JSONValue, key: ES256PrivateKey)
    throws(AppStoreCryptoError)
    -> String
  {
    try sign(header: header, payload: claims.serializedBytes(), key: key)
  }

  /// A compact JWS split into its decoded parts. Parsing checks only the syntax; it verifies nothing.
  public struct CompactJWS: Sendable, Hashable {
    /// The protected header, a JSON object.
    public let header: JSONValue
    /// The decoded header bytes (the JSON text as sent).
    public let headerBytes: [UInt8]
    /// The decoded payload bytes.
    public let payload: [UInt8]
    /// The decoded signature bytes (r||s for ES256).
    public let signature: [UInt8]
    /// The bytes the signature covers: the first two segments as sent, joined by `.`.
    public let signingInput: [UInt8]

    /// The largest compact JWS accepted, in bytes (Apple's signed data is a few KiB; the limit
    /// bounds the work an attacker can cause).
    public static let maximumLength = 1 << 20

    /// Splits and decodes a compact JWS.
    /// - Throws: `SignedDataVerificationError.malformed` unless the text is exactly three non-empty
    ///   strict base64url segments (header, payload, signature) and the header is a JSON object.
    public init(parsing text: String) throws(SignedDataVerificationError) {
      let bytes = Array(text.utf8)
      guard bytes.count <= Self.maximumLength else {
        throw .malformed("the JWS is longer than \(Self.maximumLength) bytes")
      }
      let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
      guard segments.count == 3 else {
        throw .malformed("a compact JWS has 3 segments, found \(segments.count)")
      }
      let names = ["header", "payload", "signature"]
      var decoded: [[UInt8]] = []
      for (name, segment) in zip(names, segments) {
        guard !segment.isEmpty else { throw .malformed("the \(name) segment is empty") }
        guard let value = Base64Codec.decode(Array(segment), alphabet: .url, padded: false) else {
          throw .malformed("the \(name) segment is not base64url")
        }
        decoded.append(value)
      }
      let header: JSONValue
      do { header = try JSONValue(parsing: decoded[0], maxDepth: 16) } catch {
        throw .malformed("the header is not JSON: \(error)")
      }
      guard header.objectValue != nil else { throw .malformed("the header is not a JSON object") }
      self.header = header
      self.headerBytes = decoded[0]
      self.payload = decoded[1]
      self.signature = decoded[2]
      self.signingInput = Array(bytes[..<(segments[1].endIndex)])
    }
  }
}
