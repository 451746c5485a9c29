import SubstatusCrypto
import Testing

@Suite("SubstatusCrypto")
struct SubstatusCryptoTests {
  /// FIPS 180-2's vectors (and the empty message), as contiguous arrays and as a non-contiguous
  /// collection (copied before hashing).
  @Test(
    "SHA-256 of known messages",
    arguments: [
      ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
      ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
      (
        "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
      ),
    ])
  func sha256(message: String, expected: String) {
    #expect(hex(SHA256.hash(message)) == expected)
    #expect(hex(SHA256.hash(Array(message.utf8))) == expected)
    #expect(hex(SHA256.hash(Array(message.utf8).lazy.map { $0 })) == expected)
  }

  /// RFC 4231's HMAC-SHA256 test cases 1-7 (key, data, MAC in hex; case 5's MAC is truncated to
  /// 128 bits, so only its prefix is given): keys shorter than SHA-256's 64-byte block and longer
  /// (131 bytes: hashed first), data shorter and longer than a block. Each MAC is computed twice
  /// with one keyed value (its kept states are copied, not consumed), split in two parts, and
  /// one-shot.
  @Test(
    "HMAC-SHA256: RFC 4231's test vectors",
    arguments: [
      ("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", hexOf("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
      (hexOf("Jefe"), hexOf("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
      (String(repeating: "aa", count: 20), String(repeating: "dd", count: 50),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
      ("0102030405060708090a0b0c0d0e0f10111213141516171819", String(repeating: "cd", count: 50),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
      (String(repeating: "0c", count: 20), hexOf("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"),
      (String(repeating: "aa", count: 131), hexOf("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
      (String(repeating: "aa", count: 131),
       hexOf("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ])
  func hmacSHA256(key: String, data: String, expected: String) {
    let key = bytes(key), data = bytes(data)
    let hmac = HMACSHA256(key: key)
    for _ in 0..<2 { #expect(hex(hmac.authenticate(data)).hasPrefix(expected)) }
    let half = data.count / 2
    #expect(hex(hmac.authenticate(Array(data[..<half]), Array(data[half...]))).hasPrefix(expected))
    #expect(hex(HMACSHA256.authenticate(key: key, message: data)).hasPrefix(expected))
    #expect(hmac.authenticate(data).count == 32)
  }

  @Test("random bytes: the length asked for, and two draws differ", arguments: [16, 32, 64])
  func randomBytes(count: Int) {
    let a = SecureRandom.bytes(count)
    let b = SecureRandom.bytes(count)
    #expect(a.count == count && b.count == count)
    #expect(a != b)
  }

  @Test("constant-time comparison: equal only for the same length and bytes")
  func constantTime() {
    #expect(ConstantTime.equals([1, 2, 3], [1, 2, 3]))
    #expect(!ConstantTime.equals([1, 2, 3], [1, 2, 4]))
    #expect(!ConstantTime.equals([1, 2, 3], [1, 2]))
    #expect(ConstantTime.equals([], []))
  }

  private func bytes(_ hex: String) -> [UInt8] {
    let digits = Array(hex.utf8)
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
  }

  private func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
  }
}

/// The hex digits of a string's UTF-8 bytes (RFC 4231 gives its ASCII data as text).
private func hexOf(_ text: String) -> String {
  text.utf8.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}
