// The one wrapper of libcrypto's SHA-256, HMAC-SHA256 (HMAC.swift), secure random bytes and
// constant-time comparison, for every module that needs them (the stores, App Store signed data,
// webhook signing, the service).
// Everything goes through OpenSSL libcrypto (EVP API); nothing here is hand-written crypto.
import CCrypto

/// SHA-256 digests through libcrypto.
public enum SHA256 {
  /// The 32-byte SHA-256 digest of `bytes`.
  /// - Parameter bytes: the message.
  /// - Returns: 32 bytes.
  public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
    // Contiguous input (an array: every event id's key) is hashed in place, not copied first.
    if let digest = bytes.withContiguousStorageIfAvailable(hash(contiguous:)) { return digest }
    return Array(bytes).withUnsafeBufferPointer(hash(contiguous:))
  }

  private static func hash(contiguous input: UnsafeBufferPointer<UInt8>) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: 32) { out, count in
      var length: UInt32 = 0
      let ok = EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, algorithm.md, nil)
      precondition(ok == 1 && length == 32, "EVP_Digest(SHA-256) failed")
      count = 32
    }
  }

  /// SHA-256 fetched once: `EVP_sha256()` makes every digest fetch it from the provider again,
  /// which costs as much as hashing an event id's key.
  static let algorithm = FetchedDigest("SHA256")

  /// The SHA-256 digest of the UTF-8 bytes of `string`.
  public static func hash(_ string: String) -> [UInt8] { hash(Array(string.utf8)) }
}

/// A digest algorithm fetched once from libcrypto's default provider (`EVP_MD_fetch`); a fetched
/// algorithm is immutable and may be used from any thread, and is kept for the process's life.
final class FetchedDigest: @unchecked Sendable {
  let md: OpaquePointer

  init(_ name: String) {
    guard let md = EVP_MD_fetch(nil, name, nil) else { preconditionFailure("libcrypto has no \(name)") }
    self.md = md
  }
}

/// Cryptographically secure random bytes (OpenSSL `RAND_bytes`).
public enum SecureRandom {
  /// `count` random bytes from the OS-seeded CSPRNG.
  /// - Parameter count: how many bytes.
  public static func bytes(_ count: Int) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
    precondition(ok == 1, "RAND_bytes failed")
    return out
  }
}

/// Comparisons whose running time does not depend on where the inputs differ.
public enum ConstantTime {
  /// Whether `a` and `b` are equal, compared with `CRYPTO_memcmp` (lengths are not secret).
  /// - Returns: `true` when both have the same length and bytes.
  public static func equals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { pa in
      b.withUnsafeBytes { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 }
    }
  }
}
