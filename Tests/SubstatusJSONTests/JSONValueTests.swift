import Testing
import SubstatusJSON

@Suite struct JSONValueTests {
  @Test func parsesAppleStyleDocument() throws {
    let text = #"""
      {"status": 0, "environment": "Sandbox", "receipt": {"in_app": [
        {"transaction_id": "1000000000000001", "expires_date_ms": "1700000000000",
         "is_trial_period": "true", "quantity": 1, "big": 9223372036854775807, "neg": -0.5e-3}]},
       "flag": true, "none": null, "esc": "a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}
      """#
    let v = try JSONValue(parsing: text)
    #expect(v["status"]?.int64Value == 0)
    #expect(v["environment"]?.stringValue == "Sandbox")
    let inApp = try #require(v["receipt"]?["in_app"]?.arrayValue?.first)
    #expect(inApp["transaction_id"]?.stringValue == "1000000000000001")
    #expect(inApp["quantity"]?.int64Value == 1)
    #expect(inApp["big"]?.int64Value == Int64.max)
    #expect(inApp["neg"]?.doubleValue == -0.0005)
    #expect(v["flag"]?.boolValue == true)
    #expect(v["none"]?.isNull == true)
    #expect(v["esc"]?.stringValue == "a\"\\/\u{8}\u{c}\n\r\té😀")
    #expect(v.objectValue?.keys == ["status", "environment", "receipt", "flag", "none", "esc"])
  }

  @Test("rejects malformed documents with an offset", arguments: [
    ("", 0), ("{", 1), ("[1,]", 3), ("{\"a\":1,}", 7), ("01", 1), ("1.", 2), ("-", 1), ("tru", 0),
    ("\"abc", 0), ("\"\\x\"", 2), ("\"\\ud800\"", 7), ("{\"a\":1,\"a\":2}", 7), ("[1] x", 4),
    ("\"a\u{01}\"", 2), ("{'a':1}", 1), ("nul", 0),
  ])
  func rejects(text: String, offset: Int) {
    do {
      _ = try JSONValue(parsing: text)
      Issue.record("parsed \(text)")
    } catch {
      #expect(error.offset == offset, "\(error)")
    }
  }

  @Test func rejectsInvalidUTF8AndDeepNesting() {
    #expect(throws: JSONError.self) { try JSONValue(parsing: [0x22, 0xFF, 0x22]) }
    let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
    #expect(throws: JSONError.self) { try JSONValue(parsing: deep) }
    #expect((try? JSONValue(parsing: deep, maxDepth: 256)) != nil)
  }

  @Test func serializationRoundTrips() throws {
    let object: JSONObject = [
      "s": .string("q\"\\\n\u{1}é"), "n": .integer(Int64.min), "d": .double(1.5), "b": .bool(false),
      "z": .null, "a": .array([.integer(1), .array([]), .object([:])]),
    ]
    let value = JSONValue.object(object)
    let compact = value.serialized()
    #expect(compact == #"{"s":"q\"\\\n\u0001é","n":-9223372036854775808,"d":1.5,"b":false,"z":null,"a":[1,[],{}]}"#)
    #expect(try JSONValue(parsing: compact) == value)
    #expect(try JSONValue(parsing: value.serializedPretty()) == value)
  }

  @Test(arguments: [
    ("", #""""#),
    ("plain ascii", #""plain ascii""#),
    ("\"", #""\"""#),
    ("\\", #""\\""#),
    ("a\u{8}b\u{C}c\td\re\nf", #""a\bb\fc\td\re\nf""#),
    ("\u{0}\u{1F}\u{7F}", "\"\\u0000\\u001f\\u007f\""),
    ("line\u{2028}para\u{2029}", #""line\u2028para\u2029""#),
    ("\u{2027}\u{202A}é😀", "\"\u{2027}\\u202aé😀\""),
    ("\u{2029}\u{202E}\u{202F}", #""\u2029\u202e\#u{202F}""#),
    ("\u{2065}\u{2066}\u{2069}\u{206A}", #""\#u{2065}\u2066\u2069\#u{206A}""#),
    ("ends with \u{2028}", #""ends with \u2028""#),
    ("â\u{80}\u{9F}\u{A0}", "\"â\\u0080\\u009f\u{A0}\""),
  ])
  func stringEscapes(text: String, json: String) throws {
    #expect(JSONValue.string(text).serialized() == json)
    #expect(try JSONValue(parsing: json) == .string(text))
  }

  @Test func randomBytesNeverCrash() throws {
    var state: UInt64 = 0x1234_5678
    func next() -> UInt64 {
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
    let alphabet = Array("{}[]\",:0123456789.-eEtrufalsn \\u".utf8)
    for _ in 0..<10_000 {
      let n = Int(next() % 24)
      let bytes = (0..<n).map { _ in alphabet[Int(next() % UInt64(alphabet.count))] }
      if let v = try? JSONValue(parsing: bytes) {
        #expect(try JSONValue(parsing: v.serialized()) == v)
      }
    }
  }
}
