import CCrypto
import SubscriptionStorage

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

  /// HMAC-SHA256 of `message` under `key`, through libcrypto.
  public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    let result = key.withUnsafeBufferPointer { k in
      message.withUnsafeBufferPointer { m in
        out.withUnsafeMutableBufferPointer { o in
          HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), m.baseAddress, m.count, o.baseAddress, &length)
        }
      }
    }
    precondition(result != nil && length == 32, "HMAC-SHA256 failed")
    return out
  }

  /// The `Substatus-Signature` value of `body` sent at `timestamp` (seconds since 1970).
  public static func signatureHeader(secret: String, timestamp: Int64, body: [UInt8]) -> String {
    let signed = Array("\(timestamp).".utf8) + body
    return "t=\(timestamp),v1=" + Hex.encode(hmacSHA256(key: Array(secret.utf8), message: signed))
  }
}
