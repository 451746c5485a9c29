// Base64 codecs for JOSE: the unpadded URL-safe alphabet of RFC 7515 §2 (JWS segments) and the
// padded standard alphabet of RFC 4648 §4 (the certificates of an `x5c` header, PEM bodies).
// Both decoders are strict: any character outside the alphabet, wrong padding, or non-zero bits
// left over in the last character is refused, so one byte string has exactly one encoding.

/// Unpadded base64url (RFC 4648 §5, as JWS uses it: RFC 7515 §2).
///
/// ```swift
/// Base64URL.encode([0xfb, 0xff])   // "-_8"
/// Base64URL.decode("-_8")          // [0xfb, 0xff]
/// Base64URL.decode("-_8=")         // nil: padding is not allowed
/// ```
public enum Base64URL {
  /// The unpadded base64url text of `bytes`.
  /// - Parameter bytes: the bytes to encode.
  /// - Returns: text over `A–Z a–z 0–9 - _`, without `=` padding.
  public static func encode(_ bytes: some Collection<UInt8>) -> String {
    Base64Codec.encode(Array(bytes), alphabet: Base64Codec.urlAlphabet, pad: false)
  }

  /// The bytes of unpadded base64url text, or `nil` when the text is not strictly that: a character
  /// outside the alphabet (including `=`, `+`, `/`, whitespace), a length of 1 modulo 4, or
  /// non-zero unused bits in the last character.
  /// - Parameter text: the encoded text.
  public static func decode(_ text: some StringProtocol) -> [UInt8]? {
    Base64Codec.decode(Array(text.utf8), alphabet: .url, padded: false)
  }
}

/// Padded standard base64 (RFC 4648 §4), strict; used for `x5c` certificates and PEM bodies.
enum Base64Codec {
  enum Alphabet { case standard, url }

  static let standardAlphabet = Array(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
  static let urlAlphabet = Array(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

  /// Padded standard base64 of `bytes`.
  static func encodeStandard(_ bytes: some Collection<UInt8>) -> String {
    encode(Array(bytes), alphabet: standardAlphabet, pad: true)
  }

  /// The bytes of padded standard base64 text, strict (padding required, no whitespace).
  static func decodeStandard(_ text: some StringProtocol) -> [UInt8]? {
    decode(Array(text.utf8), alphabet: .standard, padded: true)
  }

  static func encode(_ bytes: [UInt8], alphabet: [UInt8], pad: Bool) -> String {
    var out = [UInt8]()
    out.reserveCapacity((bytes.count + 2) / 3 * 4)
    var i = 0
    while i + 3 <= bytes.count {
      let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
      out.append(alphabet[Int(n >> 18 & 63)])
      out.append(alphabet[Int(n >> 12 & 63)])
      out.append(alphabet[Int(n >> 6 & 63)])
      out.append(alphabet[Int(n & 63)])
      i += 3
    }
    let rest = bytes.count - i
    if rest == 1 {
      let n = UInt32(bytes[i]) << 16
      out.append(alphabet[Int(n >> 18 & 63)])
      out.append(alphabet[Int(n >> 12 & 63)])
      if pad { out.append(contentsOf: [UInt8(ascii: "="), UInt8(ascii: "=")]) }
    } else if rest == 2 {
      let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
      out.append(alphabet[Int(n >> 18 & 63)])
      out.append(alphabet[Int(n >> 12 & 63)])
      out.append(alphabet[Int(n >> 6 & 63)])
      if pad { out.append(UInt8(ascii: "=")) }
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// 6-bit values by byte, 0xff for bytes outside the alphabet.
  private static func table(_ alphabet: [UInt8]) -> [UInt8] {
    var table = [UInt8](repeating: 0xff, count: 256)
    for (value, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(value) }
    return table
  }
  private static let standardTable = table(standardAlphabet)
  private static let urlTable = table(urlAlphabet)

  static func decode(_ input: [UInt8], alphabet: Alphabet, padded: Bool) -> [UInt8]? {
    var chars = input[...]
    if padded {
      guard chars.count % 4 == 0 else { return nil }
      if chars.last == UInt8(ascii: "=") { chars = chars.dropLast() }
      if chars.last == UInt8(ascii: "=") { chars = chars.dropLast() }
    }
    guard chars.count % 4 != 1 else { return nil }
    var out = [UInt8]()
    out.reserveCapacity(chars.count * 3 / 4)
    let table = alphabet == .standard ? standardTable : urlTable
    var accumulator: UInt32 = 0
    var bits = 0
    for c in chars {
      let v = table[Int(c)]
      guard v != 0xff else { return nil }
      accumulator = accumulator << 6 | UInt32(v)
      bits += 6
      if bits >= 8 {
        bits -= 8
        out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
        accumulator &= (1 << UInt32(bits)) - 1
      }
    }
    // Leftover bits must be zero (canonical encoding).
    guard accumulator == 0 else { return nil }
    return out
  }
}
