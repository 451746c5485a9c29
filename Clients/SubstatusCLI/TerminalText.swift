/// What the CLI prints of the server's strings: never a raw control byte. A name, description, URL
/// or error message that holds ESC, BEL, CR or LF (stored before the server refused them, or sent
/// by a server that does not) would otherwise move the cursor, recolour or retitle the terminal,
/// or forge lines of a table. Every string printed as text goes through ``visible(_:)`` (table
/// cells, report lines, streamed rows, error messages), and every write through
/// ``visibleKeepingLines(_:)`` as well; `--json` output is JSON with these characters escaped
/// already.
enum TerminalText {
  /// `text` with every character a terminal would act on, rather than show, written as
  /// `\u{1B}`: the control characters (Unicode Cc: C0 including tab, CR and LF; DEL; C1), the
  /// line and paragraph separators (U+2028, U+2029) and the bidirectional formatting characters
  /// (U+202A to U+202E, U+2066 to U+2069), which reorder what follows them.
  static func visible(_ text: String) -> String {
    escaped(text, keepingLines: false)
  }

  /// Like ``visible(_:)`` but keeps LF, and CR right before LF (the line ends of `--csv`): for
  /// whole outputs, whose lines are the CLI's own.
  static func visibleKeepingLines(_ text: String) -> String {
    escaped(text, keepingLines: true)
  }

  private static func escaped(_ text: String, keepingLines: Bool) -> String {
    // Printable ASCII (and LF when kept), the common case, is decided from the bytes.
    if text.utf8.allSatisfy({ ($0 >= 0x20 && $0 < 0x7F) || (keepingLines && $0 == 0x0A) }) {
      return text
    }
    var out = String.UnicodeScalarView()
    let scalars = Array(text.unicodeScalars)
    for (index, scalar) in scalars.enumerated() {
      let lineEnd =
        keepingLines
        && (scalar == "\n"
          || scalar == "\r" && index + 1 < scalars.count && scalars[index + 1] == "\n")
      if lineEnd || !actsOnTerminal(scalar) {
        out.append(scalar)
      } else {
        out.append(
          contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
      }
    }
    return String(out)
  }

  private static func actsOnTerminal(_ scalar: Unicode.Scalar) -> Bool {
    let v = scalar.value
    return v < 0x20 || (0x7F...0x9F).contains(v) || v == 0x2028 || v == 0x2029
      || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v)
  }
}
