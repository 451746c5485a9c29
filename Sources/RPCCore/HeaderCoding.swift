/// Encodings of gRPC header values shared by the transports: `grpc-timeout`, percent-encoded
/// `grpc-message`, base64 `-bin` values, and reserved header names.
package enum HeaderCoding {
  /// Parses `grpc-timeout` (`1*8DIGIT` then one of `H M S m u n`) into a duration.
  package static func parseTimeout(_ value: String) -> Duration? {
    let utf8 = Array(value.utf8)
    guard utf8.count >= 2, utf8.count <= 9, let unit = utf8.last else { return nil }
    var amount: Int64 = 0
    for byte in utf8.dropLast() {
      guard byte >= 0x30, byte <= 0x39 else { return nil }
      amount = amount * 10 + Int64(byte - 0x30)
    }
    switch unit {
    case UInt8(ascii: "H"): return .seconds(amount * 3600)
    case UInt8(ascii: "M"): return .seconds(amount * 60)
    case UInt8(ascii: "S"): return .seconds(amount)
    case UInt8(ascii: "m"): return .milliseconds(amount)
    case UInt8(ascii: "u"): return .microseconds(amount)
    case UInt8(ascii: "n"): return .nanoseconds(amount)
    default: return nil
    }
  }

  /// Formats a duration as `grpc-timeout`, choosing the finest unit that fits in 8 digits.
  package static func formatTimeout(_ duration: Duration) -> String {
    let (seconds, attoseconds) = duration.components
    if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return "1n" }
    let nanos = Double(seconds) * 1e9 + Double(attoseconds) / 1e9
    let units: [(Double, String)] = [(1, "n"), (1e3, "u"), (1e6, "m"), (1e9, "S"), (60e9, "M"), (3600e9, "H")]
    for (scale, unit) in units {
      let value = (nanos / scale).rounded(.up)
      if value < 100_000_000 { return "\(Int64(value))\(unit)" }
    }
    return "99999999H"
  }

  /// Percent-encodes `grpc-message`: bytes outside printable ASCII, and `%`, become `%XX`.
  package static func percentEncode(_ message: String) -> String {
    var out = [UInt8]()
    out.reserveCapacity(message.utf8.count)
    let hex = Array("0123456789ABCDEF".utf8)
    for byte in message.utf8 {
      if byte >= 0x20, byte <= 0x7E, byte != UInt8(ascii: "%") {
        out.append(byte)
      } else {
        out.append(UInt8(ascii: "%"))
        out.append(hex[Int(byte >> 4)])
        out.append(hex[Int(byte & 0xF)])
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// Decodes a percent-encoded `grpc-message`; malformed escapes are kept as they are.
  package static func percentDecode(_ value: String) -> String {
    let bytes = Array(value.utf8)
    guard bytes.contains(UInt8(ascii: "%")) else { return value }
    var out = [UInt8]()
    var i = 0
    while i < bytes.count {
      if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count,
        let hi = hexValue(bytes[i + 1]), let lo = hexValue(bytes[i + 2])
      {
        out.append(hi << 4 | lo)
        i += 3
      } else {
        out.append(bytes[i])
        i += 1
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: byte - 0x30
    case 0x41...0x46: byte - 0x41 + 10
    case 0x61...0x66: byte - 0x61 + 10
    default: nil
    }
  }

  private static let base64Alphabet = Array(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

  /// Base64 without padding, as gRPC sends `-bin` values.
  package static func base64Encode(_ bytes: [UInt8]) -> String {
    var out = [UInt8]()
    out.reserveCapacity((bytes.count + 2) / 3 * 4)
    var i = 0
    while i + 3 <= bytes.count {
      let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
      for shift in [18, 12, 6, 0] { out.append(base64Alphabet[Int((n >> UInt32(shift)) & 63)]) }
      i += 3
    }
    let rest = bytes.count - i
    if rest == 1 {
      let n = UInt32(bytes[i]) << 16
      out.append(base64Alphabet[Int((n >> 18) & 63)])
      out.append(base64Alphabet[Int((n >> 12) & 63)])
    } else if rest == 2 {
      let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
      out.append(base64Alphabet[Int((n >> 18) & 63)])
      out.append(base64Alphabet[Int((n >> 12) & 63)])
      out.append(base64Alphabet[Int((n >> 6) & 63)])
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// Decodes base64 with or without padding (standard or URL alphabet); `nil` when malformed.
  package static func base64Decode(_ text: String) -> [UInt8]? {
    var values = [UInt8]()
    values.reserveCapacity(text.utf8.count)
    for byte in text.utf8 {
      switch byte {
      case 0x41...0x5A: values.append(byte - 0x41)
      case 0x61...0x7A: values.append(byte - 0x61 + 26)
      case 0x30...0x39: values.append(byte - 0x30 + 52)
      case UInt8(ascii: "+"), UInt8(ascii: "-"): values.append(62)
      case UInt8(ascii: "/"), UInt8(ascii: "_"): values.append(63)
      case UInt8(ascii: "="): continue
      default: return nil
      }
    }
    if values.count % 4 == 1 { return nil }
    var out = [UInt8]()
    out.reserveCapacity(values.count * 3 / 4)
    var i = 0
    while i < values.count {
      let chunk = values[i..<min(i + 4, values.count)]
      var n: UInt32 = 0
      for (j, v) in chunk.enumerated() { n |= UInt32(v) << UInt32(18 - 6 * j) }
      out.append(UInt8(truncatingIfNeeded: n >> 16))
      if chunk.count > 2 { out.append(UInt8(truncatingIfNeeded: n >> 8)) }
      if chunk.count > 3 { out.append(UInt8(truncatingIfNeeded: n)) }
      i += 4
    }
    return out
  }

  /// Whether a header is reserved by HTTP/2 or gRPC and so never exposed as metadata.
  /// `grpc-status-details-bin` is not reserved: handlers set it (a serialized `google.rpc.Status`
  /// with details such as `BadRequest`, AIP-193) and clients read it, as in grpc-go.
  package static func isReserved(_ name: String) -> Bool {
    if name.hasPrefix(":") { return true }
    switch name {
    case "content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
      "grpc-status", "grpc-message", "content-length", "connection",
      "host", "trailer", "transfer-encoding", "upgrade", "keep-alive":
      return true
    default: return false
    }
  }

  /// Converts a received header to metadata, decoding `-bin` values; `nil` when reserved or bad.
  package static func metadataElement(name: String, value: String) -> Metadata.Element? {
    if isReserved(name) { return nil }
    if Metadata.isBinaryKey(name) {
      // Several values may be joined with commas.
      var bytes = [UInt8]()
      for part in value.split(separator: ",", omittingEmptySubsequences: false) {
        guard let decoded = base64Decode(String(part).trimmingSpaces()) else { return nil }
        bytes += decoded
      }
      return Metadata.Element(key: name, value: .binary(bytes))
    }
    return Metadata.Element(key: name, value: .string(value))
  }

  /// The header value for a metadata value.
  package static func headerValue(_ value: Metadata.Value) -> String {
    switch value {
    case .string(let s): s
    case .binary(let b): base64Encode(b)
    }
  }
}

extension String {
  fileprivate func trimmingSpaces() -> String {
    var s = Substring(self)
    while s.first == " " { s = s.dropFirst() }
    while s.last == " " { s = s.dropLast() }
    return String(s)
  }
}
