/// Text for error messages and log lines that may hold a client's input: a bad value is quoted by
/// a short prefix and its length, never whole, and long text is cut on a UTF-8 boundary with a
/// marker. A request may carry megabytes in one field; its error must not (README, "Limits").
///
/// ```swift
/// ErrorText.quoted("12345")                   // "\"12345\""
/// ErrorText.quoted(String(repeating: "9", count: 70_000))
/// // "\"9999…9999…\" (70000 bytes)" — the first 64 bytes only
/// ErrorText.truncated(longMessage, maxBytes: 2048)  // at most 2,048 bytes, ending "… (N more bytes)"
/// ```
public enum ErrorText {
  /// The most bytes of a client's value that an error message quotes: 64.
  public static let maxQuotedBytes = 64

  /// `value` in double quotes when it has at most `maxBytes` UTF-8 bytes; otherwise its first
  /// bytes up to `maxBytes` (cut on a character boundary), `…` inside the quotes, and its length
  /// in bytes after them: `"2026-01-01T00:00:00…" (70000 bytes)`.
  ///
  /// - Parameters:
  ///   - value: The client's value.
  ///   - maxBytes: The most bytes of it quoted.
  public static func quoted(_ value: some StringProtocol, maxBytes: Int = maxQuotedBytes) -> String {
    let count = value.utf8.count
    if count <= maxBytes { return "\"\(value)\"" }
    return "\"\(prefix(value, maxBytes: maxBytes))…\" (\(count) bytes)"
  }

  /// `text` when it has at most `maxBytes` UTF-8 bytes; otherwise its beginning, cut on a Unicode
  /// scalar boundary, followed by `… (N more bytes)`, all in at most `maxBytes` bytes (a `maxBytes`
  /// below the marker's length gives the marker alone, possibly longer).
  ///
  /// - Parameters:
  ///   - text: The text, such as a status message.
  ///   - maxBytes: The most UTF-8 bytes of the result.
  public static func truncated(_ text: String, maxBytes: Int) -> String {
    let count = text.utf8.count
    if count <= maxBytes { return text }
    // The marker's length depends on the number it holds, which depends on where the cut falls:
    // reserve room for the largest number (the whole length).
    let reserve = "… (\(count) more bytes)".utf8.count
    let kept = prefix(text, maxBytes: max(0, maxBytes - reserve))
    let cut = count - kept.utf8.count
    return kept + "… (\(cut) more bytes)"
  }

  /// The longest prefix of `text` of at most `maxBytes` UTF-8 bytes that ends on a scalar boundary.
  static func prefix(_ text: some StringProtocol, maxBytes: Int) -> String {
    let text = String(text)
    let utf8 = text.utf8
    guard utf8.count > maxBytes else { return text }
    var end = utf8.index(utf8.startIndex, offsetBy: maxBytes)
    // A continuation byte (10xxxxxx) is inside a scalar: step back to the scalar's first byte.
    while end > utf8.startIndex, utf8[end] & 0xC0 == 0x80 { end = utf8.index(before: end) }
    return String(decoding: utf8[..<end], as: UTF8.self)
  }
}
