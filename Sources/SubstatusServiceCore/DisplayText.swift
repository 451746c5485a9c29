import RPCCore

// Names are text (README "Request limits and whole strings"): what a client sets and others read
// back (tenant and app names, key descriptions, entitlement display names, webhook URLs) holds no
// control character, since one would forge lines and escapes in listings, logs and terminals, and
// display text holds no bidirectional embedding, override or isolate, which would reorder what a
// reader sees ("Trojan Source", CVE-2021-42574). Identifiers get the control-character rule from
// `requireID`.

/// The text rules of client-set names, descriptions and URLs.
package enum DisplayText {
  /// What is wrong with `text`, or `nil`: a Unicode control character (general category Cc: C0,
  /// DEL, C1), or a bidirectional formatting character (U+202A to U+202E, U+2066 to U+2069).
  package static func problem(in text: String) -> String? {
    // Printable ASCII, the common case, is decided from the bytes.
    if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return nil }
    var bidi = false
    for scalar in text.unicodeScalars {
      if isControl(scalar) { return "contains control characters" }
      if isBidiControl(scalar) { bidi = true }
    }
    return bidi
      ? "contains bidirectional formatting characters (U+202A to U+202E, U+2066 to U+2069)" : nil
  }

  /// Whether `text` holds a control character (Cc), decided on the UTF-8 bytes: C0 and DEL are
  /// single bytes that never occur inside a multi-byte sequence, and C1 is `C2 80` to `C2 9F`.
  package static func hasControl(_ text: String) -> Bool {
    var previous: UInt8 = 0
    for byte in text.utf8 {
      if byte < 0x20 || byte == 0x7F || (previous == 0xC2 && (0x80...0x9F).contains(byte)) {
        return true
      }
      previous = byte
    }
    return false
  }

  /// C0 (U+0000 to U+001F), DEL and C1 (U+0080 to U+009F): exactly Unicode's Cc.
  package static func isControl(_ scalar: Unicode.Scalar) -> Bool {
    scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
  }

  /// The embeddings, overrides and isolates of the Unicode bidirectional algorithm (UAX #9):
  /// LRE, RLE, PDF, LRO, RLO and LRI, RLI, FSI, PDI.
  static func isBidiControl(_ scalar: Unicode.Scalar) -> Bool {
    (0x202A...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value)
  }
}

/// Checks a client-set display text (a name, a description): at most `maxBytes` bytes of UTF-8,
/// no control character, no bidirectional formatting character.
/// - Throws: `INVALID_ARGUMENT` naming `field`.
package func requireDisplayText(_ value: String, _ field: String, maxBytes: Int = 200) throws(RPCError) {
  guard value.utf8.count <= maxBytes else {
    throw invalidArgument(field, "longer than \(maxBytes) bytes")
  }
  if let problem = DisplayText.problem(in: value) { throw invalidArgument(field, problem) }
}
