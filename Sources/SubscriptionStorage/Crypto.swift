// Crypto helpers shared by every Store implementation and by the service: hex, and AES-256-GCM
// sealing of secrets under a rotatable master key. Everything goes through OpenSSL libcrypto (EVP
// API); nothing here is hand-written crypto. SHA-256, secure random bytes and constant-time
// comparison are SubstatusCrypto's, re-exported here: every user of the storage module has them.
//
// Why here and not in SubscriptionStorageSQLite: sealing secrets at rest and hashing API keys are part
// of the Store contract (a PostgreSQL store needs exactly the same), and the service needs the same
// helpers without importing a concrete store.
import CCrypto
import Foundation
@_exported import SubstatusCrypto

#if canImport(Glibc)
  import Glibc
#endif

/// Hex encoding helpers.
public enum Hex {
  /// Lowercase hex of `bytes`.
  public static func encode(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    for b in bytes {
      out.append(digits[Int(b >> 4)])
      out.append(digits[Int(b & 0x0f)])
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// The bytes of a hex string (either case), or `nil` if it is not hex of even length.
  public static func decode(_ text: String) -> [UInt8]? {
    let chars = Array(text.utf8)
    guard chars.count % 2 == 0 else { return nil }
    func value(_ c: UInt8) -> UInt8? {
      switch c {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
      case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
      default: return nil
      }
    }
    var out = [UInt8]()
    out.reserveCapacity(chars.count / 2)
    var i = 0
    while i < chars.count {
      guard let hi = value(chars[i]), let lo = value(chars[i + 1]) else { return nil }
      out.append(hi << 4 | lo)
      i += 2
    }
    return out
  }
}

/// A short, non-secret stand-in for a secret, shown instead of it (`sha256:` + 16 hex digits).
public enum SecretFingerprint {
  /// The fingerprint of `secret`: the first 8 bytes of its SHA-256, in hex, prefixed `sha256:`.
  public static func of(_ secret: String) -> String {
    "sha256:" + Hex.encode(SHA256.hash(secret).prefix(8))
  }
}

/// Why sealing or opening a secret failed.
public struct SecretBoxError: Error, Sendable, Hashable, CustomStringConvertible {
  /// A machine-readable reason.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Value: String, Hashable, Sendable {
      case unknownKey, authenticationFailed, malformed, invalidKey, cryptoFailure
    }
    private let value: Value
    private init(_ value: Value) { self.value = value }
    /// The sealed value names a master key id that is not in the keyring.
    public static let unknownKey = Code(.unknownKey)
    /// The GCM tag did not verify: wrong key, wrong context, or tampered data.
    public static let authenticationFailed = Code(.authenticationFailed)
    /// The sealed bytes are not in the expected format.
    public static let malformed = Code(.malformed)
    /// A master key is not 32 bytes of hex or base64.
    public static let invalidKey = Code(.invalidKey)
    /// libcrypto reported an internal failure.
    public static let cryptoFailure = Code(.cryptoFailure)
    /// The code's name.
    public var description: String { value.rawValue }
  }
  /// The reason.
  public var code: Code
  /// A human-readable explanation (never contains secret material).
  public var message: String
  /// Creates an error.
  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }
  /// `code: message`.
  public var description: String { "\(code): \(message)" }
}

/// One 256-bit AES master key and its id (derived from the key, so it needs no configuration).
public struct MasterKey: Sendable {
  /// The key id stored next to each ciphertext sealed with this key: 16 hex digits.
  public let id: String
  fileprivate let bytes: [UInt8]

  /// A key from 32 raw bytes.
  /// - Throws: `SecretBoxError.invalidKey` unless `bytes` has 32 bytes.
  public init(bytes: [UInt8]) throws(SecretBoxError) {
    guard bytes.count == 32 else {
      throw SecretBoxError(.invalidKey, "a master key must be 32 bytes, got \(bytes.count)")
    }
    self.bytes = bytes
    self.id = Hex.encode(SHA256.hash(Array("substatus-master-key-id:".utf8) + bytes).prefix(8))
  }

  /// A key from its text form: 64 hex digits or base64 of 32 bytes (surrounding whitespace ignored).
  /// - Throws: `SecretBoxError.invalidKey` for anything else.
  public init(text: String) throws(SecretBoxError) {
    let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
    if trimmed.utf8.count == 64, let raw = Hex.decode(trimmed) {
      try self.init(bytes: raw)
    } else if let data = Data(base64Encoded: trimmed), data.count == 32 {
      try self.init(bytes: Array(data))
    } else {
      throw SecretBoxError(.invalidKey, "a master key must be 64 hex digits or base64 of 32 bytes")
    }
  }

  /// The key's bytes, to derive other keys from (HMAC-SHA256 under a label of their use), never
  /// to seal with directly, log or show.
  package var derivationKey: [UInt8] { bytes }

  /// The key in hex, for writing a key file. Handle like the secret it is.
  public var hexEncoded: String { Hex.encode(bytes) }

  /// A fresh random key.
  public static func generate() -> MasterKey {
    // 32 bytes always makes a valid key.
    try! MasterKey(bytes: SecureRandom.bytes(32))
  }
}

/// The master keys: the current one seals; every one (current and older) can open.
///
/// Rotation: put the new key first and keep the old ones until every sealed value has been re-sealed
/// (``SecretBox/reseal(_:context:)`` or the store's re-encryption).
///
/// ```swift
/// let keyring = try MasterKeyring.load(environment: ProcessInfo.processInfo.environment)
/// ```
public struct MasterKeyring: Sendable {
  /// The key that seals new values.
  public let current: MasterKey
  /// Older keys, kept to open values sealed before a rotation.
  public let previous: [MasterKey]

  /// A keyring from its keys.
  public init(current: MasterKey, previous: [MasterKey] = []) {
    self.current = current
    self.previous = previous
  }

  /// The key with id `id`, if the keyring holds it.
  public func key(id: String) -> MasterKey? {
    if current.id == id { return current }
    return previous.first { $0.id == id }
  }

  /// Parses a key file: one key per line (hex or base64), the first line the current key, the others
  /// older keys; blank lines and lines starting with `#` are ignored.
  /// - Throws: `SecretBoxError.invalidKey` when no key is present or a line is not a key.
  public static func parse(_ text: String) throws(SecretBoxError) -> MasterKeyring {
    var keys: [MasterKey] = []
    for line in text.split(whereSeparator: \.isNewline) {
      let trimmed = line.trimmingCharacters(in: .whitespaces)
      if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
      keys.append(try MasterKey(text: trimmed))
    }
    guard let first = keys.first else {
      throw SecretBoxError(.invalidKey, "no master key found")
    }
    return MasterKeyring(current: first, previous: Array(keys.dropFirst()))
  }

  /// The environment variable holding the master key (and older keys after it, comma-separated).
  public static let environmentVariable = "SUBSTATUS_MASTER_KEY"
  /// The environment variable naming a master key file (see ``parse(_:)``).
  public static let fileEnvironmentVariable = "SUBSTATUS_MASTER_KEY_FILE"

  /// Loads the keyring from `SUBSTATUS_MASTER_KEY` (keys separated by commas, current first) or from
  /// the file named by `SUBSTATUS_MASTER_KEY_FILE`.
  /// - Returns: `nil` when neither variable is set.
  /// - Throws: `SecretBoxError.invalidKey` when a key is malformed or the file cannot be read.
  public static func load(environment: [String: String]) throws(SecretBoxError) -> MasterKeyring? {
    if let value = environment[environmentVariable], !value.isEmpty {
      return try parse(value.replacingOccurrences(of: ",", with: "\n"))
    }
    if let path = environment[fileEnvironmentVariable], !path.isEmpty {
      return try load(file: path)
    }
    return nil
  }

  /// Loads the key file at `path`, or, if there is none, creates it (mode 0600, created exclusively
  /// and fsynced) holding a fresh random key. For a first start without configuration; keeping the
  /// key file away from the database (another disk, a secret store) is what makes encryption at rest
  /// worth having.
  /// - Throws: `SecretBoxError.invalidKey` when the file exists but holds no valid key or cannot be
  ///   created.
  public static func loadOrCreate(file path: String) throws(SecretBoxError) -> MasterKeyring {
    if FileManager.default.fileExists(atPath: path) { return try load(file: path) }
    let key = MasterKey.generate()
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
    guard fd >= 0 else {
      // Lost a race with another creator: use its key.
      if errno == EEXIST { return try load(file: path) }
      throw SecretBoxError(.invalidKey, "cannot create master key file \(path)")
    }
    defer { close(fd) }
    let text = Array((key.hexEncoded + "\n").utf8)
    let written = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard written == text.count, fsync(fd) == 0 else {
      unlink(path)
      throw SecretBoxError(.invalidKey, "cannot write master key file \(path)")
    }
    return MasterKeyring(current: key)
  }

  /// Loads the keyring from a key file (see ``parse(_:)``).
  /// - Throws: `SecretBoxError.invalidKey` when the file cannot be read or holds no valid key.
  public static func load(file path: String) throws(SecretBoxError) -> MasterKeyring {
    guard let data = FileManager.default.contents(atPath: path) else {
      throw SecretBoxError(.invalidKey, "cannot read master key file \(path)")
    }
    return try parse(String(decoding: data, as: UTF8.self))
  }
}

/// A value sealed with AES-256-GCM: which master key, a 96-bit nonce, the ciphertext and its tag.
public struct SealedSecret: Sendable, Hashable {
  /// The id of the master key that sealed it.
  public var keyId: String
  /// `nonce (12) || ciphertext || tag (16)`.
  public var box: [UInt8]
  /// Creates a sealed value from its stored parts.
  public init(keyId: String, box: [UInt8]) {
    self.keyId = keyId
    self.box = box
  }
}

/// AES-256-GCM authenticated encryption of small secrets under a ``MasterKeyring``.
///
/// The `context` (for example `"shared-secret:" + appId`) is authenticated as additional data, so a
/// ciphertext copied to another row fails to open instead of decrypting to another app's secret.
public enum SecretBox {
  private static let nonceLength = 12
  private static let tagLength = 16

  /// Seals `plaintext` with the keyring's current key.
  /// - Throws: `SecretBoxError.cryptoFailure` if libcrypto fails.
  public static func seal(
    _ plaintext: [UInt8], context: String, keyring: MasterKeyring
  ) throws(SecretBoxError) -> SealedSecret {
    let key = keyring.current
    let nonce = SecureRandom.bytes(nonceLength)
    let aad = Array(context.utf8)
    guard let ctx = EVP_CIPHER_CTX_new() else {
      throw SecretBoxError(.cryptoFailure, "EVP_CIPHER_CTX_new failed")
    }
    defer { EVP_CIPHER_CTX_free(ctx) }
    var out = [UInt8](repeating: 0, count: plaintext.count + 16)
    var tag = [UInt8](repeating: 0, count: tagLength)
    var written: Int32 = 0
    var total = 0
    var ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, Int32(nonceLength), nil) == 1
    ok = ok && EVP_EncryptInit_ex(ctx, nil, nil, key.bytes, nonce) == 1
    if ok && !aad.isEmpty {
      ok = EVP_EncryptUpdate(ctx, nil, &written, aad, Int32(aad.count)) == 1
    }
    if ok && !plaintext.isEmpty {
      ok = out.withUnsafeMutableBufferPointer {
        EVP_EncryptUpdate(ctx, $0.baseAddress, &written, plaintext, Int32(plaintext.count)) == 1
      }
      total = Int(written)
    }
    if ok {
      ok = out.withUnsafeMutableBufferPointer {
        EVP_EncryptFinal_ex(ctx, $0.baseAddress! + total, &written) == 1
      }
      total += Int(written)
    }
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, Int32(tagLength), &tag) == 1
    guard ok else { throw SecretBoxError(.cryptoFailure, "AES-256-GCM encryption failed") }
    return SealedSecret(keyId: key.id, box: nonce + out[0..<total] + tag)
  }

  /// Opens a sealed value with the keyring key it names.
  /// - Throws: `SecretBoxError.unknownKey` if the keyring lacks that key,
  ///   `SecretBoxError.authenticationFailed` if the GCM tag fails (wrong key, wrong context,
  ///   tampering), `SecretBoxError.malformed` if the bytes are too short.
  public static func open(
    _ sealed: SealedSecret, context: String, keyring: MasterKeyring
  ) throws(SecretBoxError) -> [UInt8] {
    guard let key = keyring.key(id: sealed.keyId) else {
      throw SecretBoxError(
        .unknownKey,
        "the secret was sealed with master key \(sealed.keyId), which is not configured")
    }
    return try open(sealed.box, context: context, key: key)
  }

  /// Opens `box` with one specific key (used by tests and by ``open(_:context:keyring:)``).
  /// - Throws: as ``open(_:context:keyring:)``.
  public static func open(
    _ box: [UInt8], context: String, key: MasterKey
  ) throws(SecretBoxError) -> [UInt8] {
    guard box.count >= nonceLength + tagLength else {
      throw SecretBoxError(.malformed, "sealed secret is \(box.count) bytes, too short")
    }
    let nonce = Array(box[0..<nonceLength])
    let ciphertext = Array(box[nonceLength..<(box.count - tagLength)])
    var tag = Array(box[(box.count - tagLength)...])
    let aad = Array(context.utf8)
    guard let ctx = EVP_CIPHER_CTX_new() else {
      throw SecretBoxError(.cryptoFailure, "EVP_CIPHER_CTX_new failed")
    }
    defer { EVP_CIPHER_CTX_free(ctx) }
    var out = [UInt8](repeating: 0, count: ciphertext.count + 16)
    var written: Int32 = 0
    var total = 0
    var ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, Int32(nonceLength), nil) == 1
    ok = ok && EVP_DecryptInit_ex(ctx, nil, nil, key.bytes, nonce) == 1
    if ok && !aad.isEmpty {
      ok = EVP_DecryptUpdate(ctx, nil, &written, aad, Int32(aad.count)) == 1
    }
    if ok && !ciphertext.isEmpty {
      ok = out.withUnsafeMutableBufferPointer {
        EVP_DecryptUpdate(ctx, $0.baseAddress, &written, ciphertext, Int32(ciphertext.count)) == 1
      }
      total = Int(written)
    }
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, Int32(tagLength), &tag) == 1
    guard ok else { throw SecretBoxError(.cryptoFailure, "AES-256-GCM decryption setup failed") }
    let final = out.withUnsafeMutableBufferPointer {
      EVP_DecryptFinal_ex(ctx, $0.baseAddress! + total, &written)
    }
    guard final == 1 else {
      ERR_clear_error()
      throw SecretBoxError(
        .authenticationFailed,
        "the sealed secret failed GCM authentication (wrong master key, wrong context or tampered data)"
      )
    }
    total += Int(written)
    return Array(out[0..<total])
  }

  /// Re-seals a value under the keyring's current key (master key rotation).
  /// - Throws: as ``open(_:context:keyring:)`` and ``seal(_:context:keyring:)``.
  public static func reseal(
    _ sealed: SealedSecret, context: String, keyring: MasterKeyring
  ) throws(SecretBoxError) -> SealedSecret {
    if sealed.keyId == keyring.current.id { return sealed }
    return try seal(
      open(sealed, context: context, keyring: keyring), context: context, keyring: keyring)
  }
}
