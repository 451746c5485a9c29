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

  private func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
  }
}
