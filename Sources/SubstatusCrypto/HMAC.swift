import CCrypto
import Synchronization

/// HMAC-SHA256 (RFC 2104) under one key, on libcrypto's SHA-256: the one implementation, for
/// webhook signatures, event cursor keys and any other MAC.
///
/// The states after the key's inner and outer padded blocks are computed once, in ``init(key:)``;
/// each MAC copies them, hashes the message and the inner digest, and is done (OpenSSL 3's one-shot
/// `HMAC` looks up the algorithm, makes and keys a context on every call). A value is safe to
/// share: its contexts are used under a lock.
///
/// ```swift
/// let mac = HMACSHA256(key: Array(secret.utf8)).authenticate(Array("\(t).".utf8), body)
/// let once = HMACSHA256.authenticate(key: key, message: message)
/// ```
public final class HMACSHA256: Sendable {
  /// The keyed states and a scratch context (libcrypto's `EVP_MD_CTX`, used under the lock only).
  private struct Contexts {
    var inner: OpaquePointer
    var outer: OpaquePointer
    var scratch: OpaquePointer
  }
  private let contexts: Mutex<Contexts>

  /// The MAC of `message` under `key`, 32 bytes.
  public static func authenticate(key: [UInt8], message: [UInt8]) -> [UInt8] {
    HMACSHA256(key: key).authenticate(message)
  }

  /// Hashes the key's padded blocks (a key longer than SHA-256's 64-byte block is hashed first).
  public init(key: [UInt8]) {
    var key = key
    if key.count > 64 { key = SHA256.hash(key) }
    key += [UInt8](repeating: 0, count: 64 - key.count)
    func keyed(_ pad: UInt8) -> OpaquePointer {
      guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
      let block = key.map { $0 ^ pad }
      let ok =
        EVP_DigestInit_ex(context, SHA256.algorithm.md, nil) == 1
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

  /// The MAC of `message`, 32 bytes.
  public func authenticate(_ message: [UInt8]) -> [UInt8] { authenticate([], message) }

  /// The MAC of `prefix` followed by `message` (not copied into one buffer first), 32 bytes.
  public func authenticate(_ prefix: [UInt8], _ message: [UInt8]) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: 32)
    let ok = contexts.withLock { c -> Bool in
      var length: UInt32 = 0
      let inner =
        EVP_MD_CTX_copy_ex(c.scratch, c.inner) == 1
        && prefix.withUnsafeBytes { EVP_DigestUpdate(c.scratch, $0.baseAddress, $0.count) } == 1
        && message.withUnsafeBytes { EVP_DigestUpdate(c.scratch, $0.baseAddress, $0.count) } == 1
        && digest.withUnsafeMutableBytes { EVP_DigestFinal_ex(c.scratch, $0.baseAddress, &length) } == 1
      return inner
        && EVP_MD_CTX_copy_ex(c.scratch, c.outer) == 1
        && digest.withUnsafeBytes { EVP_DigestUpdate(c.scratch, $0.baseAddress, $0.count) } == 1
        && digest.withUnsafeMutableBytes { EVP_DigestFinal_ex(c.scratch, $0.baseAddress, &length) } == 1
    }
    precondition(ok, "HMAC-SHA256 failed")
    return digest
  }
}
