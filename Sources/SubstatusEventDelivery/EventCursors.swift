import CCrypto
import Foundation
import RPCCore
import SubscriptionStorage
import SubstatusCrypto
import SubstatusServiceCore
import Synchronization

/// Event log cursors (`Event.cursor`, `since_cursor`, `next_cursor`), opaque per app: a cursor is
/// the log position encrypted under a key of its app, so it tells nothing of the log beyond its
/// app (not the server-wide count of events, which would show every tenant's volume) and a
/// cursor of another app is refused.
///
/// A cursor is one AES-256 block, base64url without padding (22 characters): 8 bytes of a fixed
/// tag, then the position (big-endian), encrypted (ECB: one block, deterministic, so a position
/// has one cursor) under the app's key, HMAC-SHA256(server key, app id), where the server key is
/// HMAC-SHA256(master key, "substatus event cursors v1"): every instance with the same master key
/// makes and reads the same cursors, and a cursor made before a master key rotation is still read
/// while the old key stays in the keyring. Decrypted under another app's key, a cursor's tag
/// comes out wrong (a chance of 2⁻⁶⁴ that it does not).
///
/// ```swift
/// let cursors = EventCursors(keyring: keyring)
/// let cursor = cursors.encode(appId: "app_1", sequence: 42)
/// try cursors.decode(cursor, appId: "app_1")   // 42
/// try cursors.decode(cursor, appId: "app_2")   // INVALID_ARGUMENT: since_cursor ...
/// ```
public final class EventCursors: Sendable {
  /// The tag before the position: a decryption that does not give it back is not a cursor of
  /// the app.
  private static let tag: [UInt8] = Array("sbstcur1".utf8)
  /// The server keys, the current master key's first.
  private let serverKeys: [[UInt8]]
  /// The apps' keys (one per server key), derived on first use; at most ``cacheLimit`` apps.
  private let appKeys = Mutex<[String: [[UInt8]]]>([:])
  private static let cacheLimit = 10_000

  /// Cursors under the keyring's keys (the current key's for new cursors).
  public init(keyring: MasterKeyring) {
    serverKeys = ([keyring.current] + keyring.previous).map {
      HMACSHA256.authenticate(key: $0.derivationKey, message: Array("substatus event cursors v1".utf8))
    }
  }

  /// Cursors under a random key (a service built without a master key, tests): valid for this
  /// object's life only.
  public init() {
    serverKeys = [SecureRandom.bytes(32)]
  }

  private func keys(of appId: String) -> [[UInt8]] {
    if let cached = appKeys.withLock({ $0[appId] }) { return cached }
    let derived = serverKeys.map { HMACSHA256.authenticate(key: $0, message: Array(appId.utf8)) }
    appKeys.withLock { cache in
      if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
      cache[appId] = derived
    }
    return derived
  }

  /// The cursor of position `sequence` in `appId`'s log (the position after an event).
  public func encode(appId: String, sequence: Int64) -> String {
    var block = Self.tag
    withUnsafeBytes(of: UInt64(bitPattern: sequence).bigEndian) { block += $0 }
    guard let sealed = Self.aes(block, key: keys(of: appId)[0], encrypt: true) else { return "" }
    return Self.base64URL(sealed)
  }

  private static let alphabet: [UInt8] = Array(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

  /// Base64url without padding, written directly: every webhook POST carries a cursor, and
  /// Foundation's base64 followed by three `replacingOccurrences` cost more than the AES block.
  package static func base64URL(_ bytes: [UInt8]) -> String {
    let alphabet = Self.alphabet
    return String(unsafeUninitializedCapacity: (bytes.count * 4 + 2) / 3) { out in
      var n = 0
      var i = 0
      while i < bytes.count {
        let b0 = UInt32(bytes[i])
        let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
        let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
        let v = b0 << 16 | b1 << 8 | b2
        let chars = min(4, (bytes.count - i) * 4 / 3 + ((bytes.count - i) < 3 ? 1 : 0))
        for k in 0..<chars {
          out[n] = alphabet[Int((v >> UInt32(18 - 6 * k)) & 63)]
          n += 1
        }
        i += 3
      }
      return n
    }
  }

  /// The position a cursor of `appId` stands for; 0 for an empty cursor (the start of the log).
  /// - Throws: `INVALID_ARGUMENT` naming `field` for a string this service did not make for
  ///   `appId` (another app's cursor included).
  public func decode(_ cursor: String, appId: String, field: String = "since_cursor") throws(RPCError) -> Int64 {
    guard !cursor.isEmpty else { return 0 }
    let refusal = RPCError.invalidArgument(field: field, "not a cursor of this app returned by this service")
    guard cursor.utf8.count == 22, cursor.utf8.allSatisfy({ $0 < 0x80 }) else { throw refusal }
    let b64 = cursor.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "=="
    guard let data = Data(base64Encoded: b64), data.count == 16 else { throw refusal }
    for key in keys(of: appId) {
      guard let block = Self.aes(Array(data), key: key, encrypt: false), Array(block.prefix(8)) == Self.tag else {
        continue
      }
      let sequence = Int64(bitPattern: block.suffix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
      guard sequence >= 0 else { throw refusal }
      return sequence
    }
    throw refusal
  }

  /// One AES-256 block in ECB mode, no padding; `nil` if libcrypto fails.
  private static func aes(_ block: [UInt8], key: [UInt8], encrypt: Bool) -> [UInt8]? {
    guard block.count == 16, key.count == 32, let context = EVP_CIPHER_CTX_new() else { return nil }
    defer { EVP_CIPHER_CTX_free(context) }
    var out = [UInt8](repeating: 0, count: 32)
    var length: Int32 = 0
    var tail: Int32 = 0
    let ok = key.withUnsafeBufferPointer { k in
      block.withUnsafeBufferPointer { input in
        out.withUnsafeMutableBufferPointer { o in
          EVP_CipherInit_ex(context, EVP_aes_256_ecb(), nil, k.baseAddress, nil, encrypt ? 1 : 0) == 1
            && EVP_CIPHER_CTX_set_padding(context, 0) == 1
            && EVP_CipherUpdate(context, o.baseAddress, &length, input.baseAddress, 16) == 1
            && EVP_CipherFinal_ex(context, o.baseAddress! + Int(length), &tail) == 1
        }
      }
    }
    guard ok, length + tail == 16 else { return nil }
    return Array(out.prefix(16))
  }
}
