// PEM armour (RFC 7468): DER bytes between "-----BEGIN <label>-----" and "-----END <label>-----"
// lines, base64 in between. Pure Swift; the DER inside is parsed by libcrypto.

/// PEM encoding and decoding of DER blocks.
enum PEM {
  /// One armoured block.
  struct Block: Sendable, Hashable {
    var label: String
    var der: [UInt8]
  }

  /// The PEM text of `der` under `label`, 64 characters a line, ending with a newline.
  static func encode(label: String, der: [UInt8]) -> String {
    let body = Base64Codec.encodeStandard(der)
    var lines = ["-----BEGIN \(label)-----"]
    var index = body.startIndex
    while index < body.endIndex {
      let end = body.index(index, offsetBy: 64, limitedBy: body.endIndex) ?? body.endIndex
      lines.append(String(body[index..<end]))
      index = end
    }
    lines.append("-----END \(label)-----")
    return lines.joined(separator: "\n") + "\n"
  }

  /// Every block in `text`, in order. Text outside blocks (comments, "Bag Attributes") is ignored.
  /// - Throws: `AppStoreCryptoError` when a block is unterminated, its END label differs, or its
  ///   body is not base64.
  static func blocks(in text: String) throws(AppStoreCryptoError) -> [Block] {
    var blocks: [Block] = []
    var current: (label: String, body: String)?
    for rawLine in text.split(
      omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
    {
      let line = rawLine.trimmingASCIIWhitespace()
      if let open = current {
        if line.hasPrefix("-----END ") && line.hasSuffix("-----") {
          let label = String(line.dropFirst(9).dropLast(5))
          guard label == open.label else {
            throw AppStoreCryptoError("PEM block BEGIN \(open.label) ends with END \(label)")
          }
          guard let der = Base64Codec.decodeStandard(open.body) else {
            throw AppStoreCryptoError("PEM block \(label): body is not base64")
          }
          blocks.append(Block(label: label, der: der))
          current = nil
        } else {
          current = (open.label, open.body + line)
        }
      } else if line.hasPrefix("-----BEGIN ") && line.hasSuffix("-----") {
        current = (String(line.dropFirst(11).dropLast(5)), "")
      }
    }
    if let open = current { throw AppStoreCryptoError("PEM block \(open.label) has no END line") }
    return blocks
  }

  /// The DER of the only block labelled one of `labels` in `text`.
  static func single(in text: String, labels: Set<String>) throws(AppStoreCryptoError) -> Block {
    let matching = try blocks(in: text).filter { labels.contains($0.label) }
    guard matching.count == 1 else {
      throw AppStoreCryptoError(
        "expected one PEM block labelled \(labels.sorted().joined(separator: " or ")), found \(matching.count)"
      )
    }
    return matching[0]
  }
}

extension StringProtocol {
  func trimmingASCIIWhitespace() -> Substring {
    let s = Substring(self)
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
    guard let first = s.firstIndex(where: { !isSpace($0) }) else { return s[s.endIndex...] }
    let last = s.lastIndex(where: { !isSpace($0) })!
    return s[first...last]
  }
}
