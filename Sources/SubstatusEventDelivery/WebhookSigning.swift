import SubscriptionStorage
import SubstatusCrypto

/// Webhook signing secrets and the `Substatus-Signature` header (Stripe's scheme, so receivers can
/// reuse their verifiers): `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
///
/// The HMAC key is the whole secret string as shown to the user (`whsec_` included), as Stripe's
/// libraries use theirs.
///
/// ```swift
/// let secret = WebhookSigning.newSecret(randomBytes: SecureRandom.bytes)
/// let header = WebhookSigning.signatureHeader(secret: secret, timestamp: 1_700_000_000, body: body)
/// ```
public enum WebhookSigning {
  /// The prefix of every signing secret.
  public static let secretPrefix = "whsec_"

  /// A new signing secret: `whsec_` and 64 hex digits (32 random bytes).
  /// - Parameter randomBytes: the source of randomness (``ServiceEnvironment/randomBytes``).
  public static func newSecret(randomBytes: (Int) -> [UInt8]) -> String {
    secretPrefix + Hex.encode(randomBytes(32))
  }

  /// The secret's fingerprint, as shared secrets have (``SecretFingerprint/of(_:)``).
  public static func fingerprint(_ secret: String) -> String { SecretFingerprint.of(secret) }

  /// The `Substatus-Signature` value of `body` sent at `timestamp` (seconds since 1970).
  public static func signatureHeader(secret: String, timestamp: Int64, body: [UInt8]) -> String {
    let signed = Array("\(timestamp).".utf8) + body
    return "t=\(timestamp),v1=" + Hex.encode(HMACSHA256.authenticate(key: Array(secret.utf8), message: signed))
  }
}

/// `Substatus-Signature` headers under one secret: the secret's part of HMAC-SHA256 is done once
/// (``SubstatusCrypto/HMACSHA256``), and each signature hashes only the message; the dispatcher
/// keeps one signer per webhook it delivers to. Signatures equal
/// ``WebhookSigning/signatureHeader(secret:timestamp:body:)``'s.
///
/// ```swift
/// let signer = WebhookSigner(secret: secret)
/// let header = signer.signatureHeader(timestamp: 1_700_000_000, body: body)
/// ```
public final class WebhookSigner: Sendable {
  private let hmac: HMACSHA256

  /// Keys the MAC with the secret as shown to the user (`whsec_` included).
  public init(secret: String) {
    hmac = HMACSHA256(key: Array(secret.utf8))
  }

  /// HMAC-SHA256 of `prefix` followed by `body` under the secret.
  public func mac(_ prefix: [UInt8], _ body: [UInt8]) -> [UInt8] { hmac.authenticate(prefix, body) }

  /// The `Substatus-Signature` value of `body` sent at `timestamp` (seconds since 1970).
  public func signatureHeader(timestamp: Int64, body: [UInt8]) -> String {
    let t = String(timestamp)
    return "t=" + t + ",v1=" + Hex.encode(mac(Array((t + ".").utf8), body))
  }
}
