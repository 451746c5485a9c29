extension JSONValue {
  /// The value as compact JSON text (no insignificant whitespace), members in order.
  public func serialized() -> String {
    var out = ""
    write(to: &out, indent: nil, level: 0)
    return out
  }

  /// The value as JSON text indented by two spaces per level, members in order.
  public func serializedPretty() -> String {
    var out = ""
    write(to: &out, indent: "  ", level: 0)
    return out
  }

  /// The compact JSON text as UTF-8 bytes.
  public func serializedBytes() -> [UInt8] { Array(serialized().utf8) }

  private func write(to out: inout String, indent: String?, level: Int) {
    switch self {
    case .null: out += "null"
    case .bool(let b): out += b ? "true" : "false"
    case .number(let text): out += text
    case .string(let s): JSONValue.writeString(s, to: &out)
    case .array(let elements):
      if elements.isEmpty {
        out += "[]"
        return
      }
      out += "["
      for (n, element) in elements.enumerated() {
        if n > 0 { out += "," }
        JSONValue.newline(&out, indent: indent, level: level + 1)
        element.write(to: &out, indent: indent, level: level + 1)
      }
      JSONValue.newline(&out, indent: indent, level: level)
      out += "]"
    case .object(let object):
      if object.isEmpty {
        out += "{}"
        return
      }
      out += "{"
      for (n, member) in object.members.enumerated() {
        if n > 0 { out += "," }
        JSONValue.newline(&out, indent: indent, level: level + 1)
        JSONValue.writeString(member.key, to: &out)
        out += indent == nil ? ":" : ": "
        member.value.write(to: &out, indent: indent, level: level + 1)
      }
      JSONValue.newline(&out, indent: indent, level: level)
      out += "}"
    }
  }

  private static func newline(_ out: inout String, indent: String?, level: Int) {
    guard let indent else { return }
    out += "\n"
    for _ in 0..<level { out += indent }
  }

  private static func writeString(_ s: String, to out: inout String) {
    out += "\""
    for scalar in s.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\r": out += "\\r"
      case "\t": out += "\\t"
      case "\u{08}": out += "\\b"
      case "\u{0C}": out += "\\f"
      default:
        if scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029 {
          let hex = String(scalar.value, radix: 16)
          out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        } else {
          out.unicodeScalars.append(scalar)
        }
      }
    }
    out += "\""
  }
}
