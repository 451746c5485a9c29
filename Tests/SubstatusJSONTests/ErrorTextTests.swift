import SubstatusJSON
import Testing

/// A client's value in an error message: a short prefix and its length, never the whole value.
@Suite struct ErrorTextTests {
  @Test(arguments: ["", "abc", String(repeating: "x", count: 64), "é🎉"])
  func shortValuesAreQuotedWhole(value: String) {
    #expect(ErrorText.quoted(value) == "\"\(value)\"")
  }

  @Test(arguments: [
    (String(repeating: "9", count: 70_000), 70_000),
    (String(repeating: "é", count: 100), 200),  // 2 bytes each: the cut falls inside none
    ("a" + String(repeating: "🎉", count: 40), 161),  // 4 bytes each: 64 is inside one
  ])
  func longValuesAreQuotedByTheirFirstBytesAndLength(value: String, bytes: Int) {
    let quoted = ErrorText.quoted(value)
    #expect(quoted.hasSuffix("…\" (\(bytes) bytes)"))
    let inside = quoted.dropFirst().prefix { $0 != "…" }
    #expect(inside.utf8.count <= ErrorText.maxQuotedBytes)
    #expect(inside.utf8.count > ErrorText.maxQuotedBytes - 4)
    #expect(value.hasPrefix(inside))
  }

  @Test(arguments: [100, 2048, 4096])
  func truncatedTextFitsItsBoundOnAScalarBoundaryWithAMarker(bound: Int) {
    for text in [String(repeating: "a", count: 10_000), String(repeating: "é", count: 10_000), String(repeating: "🎉x", count: 5_000)] {
      let cut = ErrorText.truncated(text, maxBytes: bound)
      #expect(cut.utf8.count <= bound)
      let kept = String(cut.prefix { $0 != "…" })
      #expect(text.hasPrefix(kept))
      #expect(cut == kept + "… (\(text.utf8.count - kept.utf8.count) more bytes)")
      // Valid UTF-8 all the way (a String is; the bytes round-trip).
      #expect(String(validating: Array(cut.utf8), as: UTF8.self) == cut)
    }
  }

  @Test func textWithinTheBoundIsUnchanged() {
    let text = String(repeating: "ü", count: 1024)
    #expect(ErrorText.truncated(text, maxBytes: 2048) == text)
  }
}
