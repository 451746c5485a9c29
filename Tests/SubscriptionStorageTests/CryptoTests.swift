import Foundation
import SubscriptionStorage
import Testing

@Suite("Crypto helpers")
struct CryptoTests {
  @Test(
    "SHA-256 matches the FIPS 180-2 test vectors",
    arguments: [
      ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
      ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ])
  func sha256Vectors(input: String, expected: String) {
    #expect(Hex.encode(SHA256.hash(input)) == expected)
  }

  @Test("hex round trip and rejection of non-hex")
  func hexRoundTrip() {
    let bytes: [UInt8] = [0, 1, 0x7f, 0x80, 0xff]
    #expect(Hex.encode(bytes) == "00017f80ff")
    #expect(Hex.decode("00017F80ff") == bytes)
    #expect(Hex.decode("abc") == nil)
    #expect(Hex.decode("zz") == nil)
  }

  @Test("constant-time comparison")
  func constantTime() {
    #expect(ConstantTime.equals([1, 2, 3], [1, 2, 3]))
    #expect(!ConstantTime.equals([1, 2, 3], [1, 2, 4]))
    #expect(!ConstantTime.equals([1, 2, 3], [1, 2]))
    #expect(ConstantTime.equals([], []))
  }

  @Test("seal then open returns the plaintext; ciphertexts differ (random nonce)")
  func sealOpen() throws {
    let keyring = MasterKeyring(current: .generate())
    let secret = Array("0123456789abcdef0123456789abcdef".utf8)
    let a = try SecretBox.seal(secret, context: "app-1", keyring: keyring)
    let b = try SecretBox.seal(secret, context: "app-1", keyring: keyring)
    #expect(a.box != b.box)
    #expect(a.keyId == keyring.current.id)
    #expect(!a.box.contains(subsequence: secret))
    #expect(try SecretBox.open(a, context: "app-1", keyring: keyring) == secret)
  }

  @Test("a wrong key, a wrong context or a flipped bit fails GCM authentication")
  func wrongKeyFails() throws {
    let key = MasterKey.generate()
    let other = MasterKey.generate()
    let sealed = try SecretBox.seal(
      Array("s3cret".utf8), context: "app-1", keyring: MasterKeyring(current: key))
    do {
      _ = try SecretBox.open(sealed.box, context: "app-1", key: other)
      Issue.record("opened with the wrong key")
    } catch {
      #expect(error.code == .authenticationFailed)
    }
    do {
      _ = try SecretBox.open(sealed.box, context: "app-2", key: key)
      Issue.record("opened with the wrong context")
    } catch {
      #expect(error.code == .authenticationFailed)
    }
    var tampered = sealed.box
    tampered[14] ^= 1
    do {
      _ = try SecretBox.open(tampered, context: "app-1", key: key)
      Issue.record("opened tampered data")
    } catch {
      #expect(error.code == .authenticationFailed)
    }
    do {
      _ = try SecretBox.open(sealed, context: "app-1", keyring: MasterKeyring(current: other))
      Issue.record("opened with a keyring lacking the key")
    } catch {
      #expect(error.code == .unknownKey)
    }
  }

  @Test("rotation: an old key in the keyring still opens; reseal moves to the current key")
  func rotation() throws {
    let old = MasterKey.generate()
    let new = MasterKey.generate()
    let sealed = try SecretBox.seal(
      Array("x".utf8), context: "c", keyring: MasterKeyring(current: old))
    let rotated = MasterKeyring(current: new, previous: [old])
    #expect(try SecretBox.open(sealed, context: "c", keyring: rotated) == Array("x".utf8))
    let resealed = try SecretBox.reseal(sealed, context: "c", keyring: rotated)
    #expect(resealed.keyId == new.id)
    #expect(
      try SecretBox.open(resealed, context: "c", keyring: MasterKeyring(current: new))
        == Array("x".utf8))
  }

  @Test("master keys parse from hex and base64; other text is refused")
  func keyParsing() throws {
    let raw = [UInt8](repeating: 7, count: 32)
    let hex = try MasterKey(text: Hex.encode(raw) + "\n")
    let b64 = try MasterKey(text: Data(raw).base64EncodedString())
    #expect(hex.id == b64.id)
    #expect(hex.id.count == 16)
    #expect(throws: SecretBoxError.self) { try MasterKey(text: "too short") }
    #expect(throws: SecretBoxError.self) { try MasterKey(bytes: [1, 2, 3]) }
    let ring = try MasterKeyring.parse(
      "# current\n\(Hex.encode(raw))\n\n\(Hex.encode([UInt8](repeating: 9, count: 32)))\n")
    #expect(ring.current.id == hex.id)
    #expect(ring.previous.count == 1)
    #expect(throws: SecretBoxError.self) { try MasterKeyring.parse("# nothing\n") }
  }

  @Test("the keyring loads from the environment variable or a key file")
  func keyringFromEnvironment() throws {
    let a = Hex.encode([UInt8](repeating: 1, count: 32))
    let b = Hex.encode([UInt8](repeating: 2, count: 32))
    let ring = try #require(
      try MasterKeyring.load(environment: [MasterKeyring.environmentVariable: "\(a),\(b)"]))
    #expect(ring.current.id == (try MasterKey(text: a)).id)
    #expect(ring.previous.map(\.id) == [(try MasterKey(text: b)).id])
    #expect(try MasterKeyring.load(environment: [:]) == nil)
    let path = FileManager.default.temporaryDirectory.appendingPathComponent(
      "mk-\(UUID().uuidString)"
    ).path
    try Data((b + "\n").utf8).write(to: URL(fileURLWithPath: path))
    defer { try? FileManager.default.removeItem(atPath: path) }
    let fromFile = try #require(
      try MasterKeyring.load(environment: [MasterKeyring.fileEnvironmentVariable: path]))
    #expect(fromFile.current.id == (try MasterKey(text: b)).id)
  }

  @Test("loadOrCreate writes a 0600 key file once and reads the same key afterwards")
  func loadOrCreate() throws {
    let dir = TemporaryDirectory()
    let path = dir.file("master.key")
    let created = try MasterKeyring.loadOrCreate(file: path)
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
    let loaded = try MasterKeyring.loadOrCreate(file: path)
    #expect(loaded.current.id == created.current.id)
    #expect(try MasterKeyring.load(file: path).current.id == created.current.id)
    try Data("not a key\n".utf8).write(to: URL(fileURLWithPath: dir.file("bad.key")))
    #expect(throws: SecretBoxError.self) {
      try MasterKeyring.loadOrCreate(file: dir.file("bad.key"))
    }
  }

  @Test("fingerprints are stable, short and do not contain the secret")
  func fingerprint() {
    let secret = "0123456789abcdef0123456789abcdef"
    #expect(SecretFingerprint.of(secret) == SecretFingerprint.of(secret))
    #expect(SecretFingerprint.of(secret) != SecretFingerprint.of(secret + "x"))
    #expect(SecretFingerprint.of(secret).hasPrefix("sha256:"))
    #expect(SecretFingerprint.of(secret).count == 7 + 16)
  }
}

extension Array where Element == UInt8 {
  fileprivate func contains(subsequence: [UInt8]) -> Bool {
    guard subsequence.count <= count else { return false }
    for i in 0...(count - subsequence.count)
    where Array(self[i..<(i + subsequence.count)]) == subsequence {
      return true
    }
    return false
  }
}
