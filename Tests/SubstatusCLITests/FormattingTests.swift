import Testing

@testable import SubstatusCLI

@Suite("substatus table formatting")
struct FormattingTests {
  @Test(
    "milliseconds print as UTC ISO-8601",
    arguments: [
      (0, "-"),
      (1, "1970-01-01T00:00:00.001Z"),
      (-1, "1969-12-31T23:59:59.999Z"),
      (951_782_400_000, "2000-02-29T00:00:00Z"),
      (1_709_164_799_999, "2024-02-28T23:59:59.999Z"),
      (1_709_251_200_000, "2024-03-01T00:00:00Z"),
      (1_767_225_599_000, "2025-12-31T23:59:59Z"),
      (4_102_444_800_000, "2100-01-01T00:00:00Z"),
      (253_402_300_799_000, "9999-12-31T23:59:59Z"),
    ] as [(Int64, String)])
  func time(_ milliseconds: Int64, _ expected: String) {
    #expect(Format.time(milliseconds) == expected)
  }

  @Test("columns align on the widest cell and trailing spaces are trimmed")
  func columns() {
    let text = formatColumns([["A", "BB", "C"], ["long", "", "x"], ["", "", ""]])
    #expect(text == "A     BB  C\nlong      x\n\n")
  }

  @Test("receipts: base64 text passes, binary is encoded, whitespace in base64 is dropped")
  func receipts() {
    #expect(receiptBase64(Array("TUlJ\n".utf8)) == "TUlJ")
    #expect(receiptBase64([0x30, 0x82]) == "MII=")
    #expect(receiptBase64([]) == "")
    #expect(receiptBase64(Array("not base64!".utf8)) == "bm90IGJhc2U2NCE=")
  }
}
