import SubstatusJSON
import SubstatusWire

/// A test-only protobuf message with one `bytes payload = 1` field, encoded by hand (JSON: the
/// payload as a UTF-8 string field `text`, enough for codec tests).
struct PayloadMessage: ProtobufJSONMessage {
  static let protoMessageName = "test.Payload"
  var payload: [UInt8] = []

  init() {}
  init(_ text: String) { payload = Array(text.utf8) }

  init(serializedBytes bytes: [UInt8]) throws(WireError) {
    var i = 0
    func varint() throws(WireError) -> Int {
      var value = 0
      var shift = 0
      while true {
        guard i < bytes.count, shift < 64 else {
          throw WireError(code: .malformedMessage, message: "truncated varint")
        }
        let byte = bytes[i]
        i += 1
        value |= Int(byte & 0x7F) << shift
        if byte & 0x80 == 0 { return value }
        shift += 7
      }
    }
    while i < bytes.count {
      let tag = try varint()
      guard tag == 0x0A else { throw WireError(code: .malformedMessage, message: "unexpected tag \(tag)") }
      let length = try varint()
      guard length >= 0, i + length <= bytes.count else {
        throw WireError(code: .malformedMessage, message: "truncated payload")
      }
      payload = Array(bytes[i..<(i + length)])
      i += length
    }
  }

  func serializedBytes() -> [UInt8] {
    guard !payload.isEmpty else { return [] }
    var out: [UInt8] = [0x0A]
    var n = payload.count
    while n >= 0x80 {
      out.append(UInt8(n & 0x7F) | 0x80)
      n >>= 7
    }
    out.append(UInt8(n))
    return out + payload
  }

  var text: String { String(decoding: payload, as: UTF8.self) }

  func jsonValue() -> JSONValue {
    var o = JSONObject()
    o.append("text", .string(text))
    return .object(o)
  }

  init(jsonValue: JSONValue) throws(WireError) {
    guard case .object(let o) = jsonValue, o.count == 1, case .string(let text)? = o["text"] else {
      throw WireError(code: .invalidJSON, message: "expected {\"text\": string}")
    }
    self.init(text)
  }
}
