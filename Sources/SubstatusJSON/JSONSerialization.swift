extension JSONValue {
  /// The value as compact JSON text (no insignificant whitespace), members in order.
  public func serialized() -> String { String(decoding: serializedBytes(), as: UTF8.self) }

  /// The value as JSON text indented by two spaces per level, members in order.
  public func serializedPretty() -> String {
    var out: [UInt8] = []
    write(to: &out, indent: "  ", level: 0)
    return String(decoding: out, as: UTF8.self)
  }

  /// The compact JSON text as UTF-8 bytes.
  public func serializedBytes() -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(256)
    write(to: &out, indent: nil, level: 0)
    return out
  }

  // The text is built as UTF-8 bytes: appending bytes is several times cheaper than appending
  // `Unicode.Scalar`s to a `String`, and this runs for every access log line.
  private func write(to out: inout [UInt8], indent: StaticString?, level: Int) {
    switch self {
    case .null: JSONValue.append("null", to: &out)
    case .bool(let b): JSONValue.append(b ? "true" : "false", to: &out)
    case .number(let text): out.append(contentsOf: text.utf8)
    case .string(let s): JSONValue.writeString(s, to: &out)
    case .array(let elements):
      if elements.isEmpty {
        JSONValue.append("[]", to: &out)
        return
      }
      out.append(UInt8(ascii: "["))
      for (n, element) in elements.enumerated() {
        if n > 0 { out.append(UInt8(ascii: ",")) }
        JSONValue.newline(&out, indent: indent, level: level + 1)
        element.write(to: &out, indent: indent, level: level + 1)
      }
      JSONValue.newline(&out, indent: indent, level: level)
      out.append(UInt8(ascii: "]"))
    case .object(let object):
      if object.isEmpty {
        JSONValue.append("{}", to: &out)
        return
      }
      out.append(UInt8(ascii: "{"))
      for (n, member) in object.members.enumerated() {
        if n > 0 { out.append(UInt8(ascii: ",")) }
        JSONValue.newline(&out, indent: indent, level: level + 1)
        JSONValue.writeString(member.key, to: &out)
        JSONValue.append(indent == nil ? ":" : ": ", to: &out)
        member.value.write(to: &out, indent: indent, level: level + 1)
      }
      JSONValue.newline(&out, indent: indent, level: level)
      out.append(UInt8(ascii: "}"))
    }
  }

  private static func append(_ text: StaticString, to out: inout [UInt8]) {
    text.withUTF8Buffer { out.append(contentsOf: $0) }
  }

  /// `\uXXXX` in lowercase hexadecimal, for a scalar below U+10000.
  private static func appendUnicodeEscape(_ scalar: UInt32, to out: inout [UInt8]) {
    let hex: [UInt8] = Array("0123456789abcdef".utf8)
    append("\\u", to: &out)
    for shift in stride(from: 12, through: 0, by: -4) { out.append(hex[Int(scalar >> UInt32(shift) & 0xF)]) }
  }

  private static func newline(_ out: inout [UInt8], indent: StaticString?, level: Int) {
    guard let indent else { return }
    out.append(UInt8(ascii: "\n"))
    for _ in 0..<level { append(indent, to: &out) }
  }

  /// A JSON string literal: `"` and `\` escaped, control characters (C0, DEL, C1) as their short
  /// escape or `\u00XX`, U+2028 / U+2029 as `\u2028` / `\u2029` (valid JSON, but line breaks to
  /// JavaScript), and the bidirectional formatting characters U+202A to U+202E and U+2066 to
  /// U+2069 as `\u202a` … (they reorder what a terminal shows); everything else copied as UTF-8.
  /// Every escape is valid JSON that decodes to the same string.
  private static func writeString(_ s: String, to out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    var s = s
    s.withUTF8 { bytes in
      var copied = 0
      var i = 0
      while i < bytes.count {
        let b = bytes[i]
        let escapedLength: Int
        if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") || b < 0x20 || b == 0x7F {
          escapedLength = 1
        } else if b == 0xC2, i + 1 < bytes.count, (0x80...0x9F).contains(bytes[i + 1]) {
          escapedLength = 2  // C1: U+0080 to U+009F
        } else if b == 0xE2, i + 2 < bytes.count,
          bytes[i + 1] == 0x80 && (0xA8...0xAE).contains(bytes[i + 2])
            || bytes[i + 1] == 0x81 && (0xA6...0xA9).contains(bytes[i + 2])
        {
          escapedLength = 3  // U+2028 to U+202E, U+2066 to U+2069
        } else {
          i += 1
          continue
        }
        out.append(contentsOf: bytes[copied..<i])
        switch b {
        case UInt8(ascii: "\""): append("\\\"", to: &out)
        case UInt8(ascii: "\\"): append("\\\\", to: &out)
        case UInt8(ascii: "\n"): append("\\n", to: &out)
        case UInt8(ascii: "\r"): append("\\r", to: &out)
        case UInt8(ascii: "\t"): append("\\t", to: &out)
        case 0x08: append("\\b", to: &out)
        case 0x0C: append("\\f", to: &out)
        case 0xC2, 0xE2:
          // The scalar of the 2- or 3-byte sequence: U+0080 to U+009F, or U+20xx.
          let scalar =
            b == 0xC2
            ? UInt32(bytes[i + 1])
            : 0x2000 | UInt32(bytes[i + 1] & 0x3F) << 6 | UInt32(bytes[i + 2] & 0x3F)
          appendUnicodeEscape(scalar, to: &out)
        default:
          appendUnicodeEscape(UInt32(b), to: &out)
        }
        i += escapedLength
        copied = i
      }
      out.append(contentsOf: bytes[copied...])
    }
    out.append(UInt8(ascii: "\""))
  }
}
