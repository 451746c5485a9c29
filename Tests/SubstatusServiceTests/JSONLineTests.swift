import SubstatusJSON
import Testing

@testable import SubstatusService

@Suite("The access log's JSONLine writes what a serialized JSONObject writes")
struct JSONLineTests {
  @Test(
    "durations in microseconds read as JSONValue.double of the milliseconds",
    arguments: [0, 1, 5, 10, 50, 100, 999, 1000, 1001, 1500, 12_000, 12_340, 123_456, 999_999_999, 86_400_000_000, -1, -500, -1500] as [Int64])
  func milliseconds(_ microseconds: Int64) {
    var line = JSONLine()
    line.append("duration_ms", milliseconds: microseconds)
    var object = JSONObject()
    object.append("duration_ms", .double(Double(microseconds) / 1000))
    #expect(String(decoding: line.finish(), as: UTF8.self) == JSONValue.object(object).serialized())
  }

  @Test(
    "integers and escaped strings, members in order",
    arguments: [
      (Int64(0), "plain"), (1_733_100_000_123, "quote \" and backslash \\"), (-42, "line\nbreak\ttab\u{1}"),
      (Int64.max, "u2028 \u{2028} u2029 \u{2029} é"), (Int64.min, ""),
    ])
  func membersInOrder(_ integer: Int64, _ text: String) {
    var line = JSONLine()
    line.append("ts", integer: integer)
    line.append("msg", string: text)
    line.append("peer", string: "127.0.0.1:5")
    var object = JSONObject()
    object.append("ts", .integer(integer))
    object.append("msg", .string(text))
    object.append("peer", .string("127.0.0.1:5"))
    #expect(String(decoding: line.finish(), as: UTF8.self) == JSONValue.object(object).serialized())
  }

  @Test("an empty line is an empty object")
  func empty() {
    #expect(String(decoding: JSONLine().finish(), as: UTF8.self) == "{}")
  }
}
