import CCrypto
import Synchronization
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

/// `Substatus-Signature` headers under one secret, the secret's part of HMAC-SHA256 done once:
/// the SHA-256 states after the key's inner and outer padded blocks (RFC 2104) are kept, and each
/// signature copies them, hashes the message and the inner digest, and is done. OpenSSL 3's
/// one-shot `HMAC` looked up the algorithm, made and keyed a context for every event; the
/// dispatcher keeps one signer per webhook it delivers to. Signatures equal
/// ``WebhookSigning/signatureHeader(secret:timestamp:body:)``'s.
///
/// ```swift
/// let signer = WebhookSigner(secret: secret)
/// let header = signer.signatureHeader(timestamp: 1_700_000_000, body: body)
/// ```
public final class WebhookSigner: Sendable {
  /// The keyed states and a scratch context (libcrypto's `EVP_MD_CTX`, used under the lock only).
  private struct Contexts {
    var inner: OpaquePointer
    var outer: OpaquePointer
    var scratch: OpaquePointer
  }
  private let contexts: Mutex<Contexts>

  /// Hashes the secret's padded blocks (the secret as shown to the user, `whsec_` included).
  public init(secret: String) {
    var key = Array(secret.utf8)
    if key.count > 64 { key = SHA256.hash(key) }
    key += [UInt8](repeating: 0, count: 64 - key.count)
    func keyed(_ pad: UInt8) -> OpaquePointer {
      guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
      let block = key.map { $0 ^ pad }
      let ok =
        EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1
        && block.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, $0.count) } == 1
      precondition(ok, "SHA-256 failed")
      return context
    }
    guard let scratch = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
    contexts = Mutex(Contexts(inner: keyed(0x36), outer: keyed(0x5c), scratch: scratch))
  }

  deinit {
    contexts.withLock { c in
      EVP_MD_CTX_free(c.inner)
      EVP_MD_CTX_free(c.outer)
      EVP_MD_CTX_free(c.scratch)
    }
  }

  /// HMAC-SHA256 of `prefix` followed by `body` under the secret.
  public func mac(_ prefix: [UInt8], _ body: [UInt8]) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: 32)
    let ok = contexts.withLock { c -> Bool in
      var length: UInt32 = 0
      let inner =
        EVP_MD_CTX_copy_ex(c.scratch, c.inner) == 1
        && prefix.withUnsafeBytes { EVP_DigestUpdate(c.scratch, $0.baseAddress, $0.count) } == 1
        && body.withUnsafeBytes { EVP_DigestUpdate(c.scratch, $0.baseAddress, $0.count) } == 1
        && digest.withUnsafeMutableBytes { EVP_DigestFinal_ex(c.scratch, $0.baseAddress, &length) } == 1
      return inner
        && EVP_MD_CTX_copy_ex(c.scratch, c.outer) == 1
        && digest.withUnsafeBytes { EVP_DigestUpdate(c.scratch, $0.baseAddress, $0.count) } == 1
        && digest.withUnsafeMutableBytes { EVP_DigestFinal_ex(c.scratch, $0.baseAddress, &length) } == 1
    }
    precondition(ok, "HMAC-SHA256 failed")
    return digest
  }

  /// The `Substatus-Signature` value of `body` sent at `timestamp` (seconds since 1970).
  public func signatureHeader(timestamp: Int64, body: [UInt8]) -> String {
    let t = String(timestamp)
    return "t=" + t + ",v1=" + Hex.encode(mac(Array((t + ".").utf8), body))
  }
}
