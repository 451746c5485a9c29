extension JSONValue {
  /// Parses a complete JSON document (RFC 8259): exactly one value, surrounded only by whitespace.
  ///
  /// Strict about structure (no trailing commas, comments, single quotes, leading zeros, lone
  /// surrogates, control characters in strings or duplicate member names).
  ///
  /// - Parameters:
  ///   - bytes: UTF-8 text.
  ///   - maxDepth: The deepest nesting of arrays and objects accepted.
  /// - Throws: ``JSONError`` with the byte offset of the first problem.
  public init<Bytes: Collection>(parsing bytes: Bytes, maxDepth: Int = 128) throws(JSONError)
  where Bytes.Element == UInt8 {
    let parse = { (buffer: UnsafeBufferPointer<UInt8>) -> Result<JSONValue, JSONError> in
      var parser = JSONParser(buffer, maxDepth: maxDepth)
      do throws(JSONError) { return .success(try parser.parseDocument()) } catch { return .failure(error) }
    }
    let result = bytes.withContiguousStorageIfAvailable(parse) ?? Array(bytes).withUnsafeBufferPointer(parse)
    self = try result.get()
  }

  /// Parses a complete JSON document from a string.
  /// - Throws: ``JSONError`` with the byte offset (in UTF-8) of the first problem.
  public init(parsing text: String, maxDepth: Int = 128) throws(JSONError) {
    try self.init(parsing: Array(text.utf8), maxDepth: maxDepth)
  }
}

struct JSONParser {
  let bytes: UnsafeBufferPointer<UInt8>
  let maxDepth: Int
  var i = 0
  var depth = 0

  init(_ bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
    self.bytes = bytes
    self.maxDepth = maxDepth
  }

  mutating func parseDocument() throws(JSONError) -> JSONValue {
    skipWhitespace()
    let value = try parseValue()
    skipWhitespace()
    if i != bytes.count { throw error("unexpected \(describeCurrent()) after the document") }
    return value
  }

  func error(_ message: String) -> JSONError { JSONError(message: message, offset: i) }

  func describeCurrent() -> String {
    guard i < bytes.count else { return "end of input" }
    let b = bytes[i]
    if b >= 0x20 && b < 0x7F { return "'\(Character(Unicode.Scalar(b)))'" }
    return "byte 0x\(String(b, radix: 16))"
  }

  mutating func skipWhitespace() {
    while i < bytes.count {
      switch bytes[i] {
      case 0x20, 0x09, 0x0A, 0x0D: i += 1
      default: return
      }
    }
  }

  mutating func parseValue() throws(JSONError) -> JSONValue {
    guard i < bytes.count else { throw error("expected a value, found end of input") }
    switch bytes[i] {
    case UInt8(ascii: "{"): return try parseObject()
    case UInt8(ascii: "["): return try parseArray()
    case UInt8(ascii: "\""): return .string(try parseString())
    case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
    case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
    case UInt8(ascii: "n"): try expectLiteral("null"); return .null
    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
    default: throw error("expected a value, found \(describeCurrent())")
    }
  }

  mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
    let n = literal.utf8CodeUnitCount
    guard i + n <= bytes.count else { throw error("expected '\(literal)'") }
    let p = literal.utf8Start
    for k in 0..<n where bytes[i + k] != p[k] { throw error("expected '\(literal)'") }
    i += n
  }

  mutating func enter() throws(JSONError) {
    depth += 1
    if depth > maxDepth { throw error("nesting deeper than \(maxDepth)") }
  }

  mutating func parseObject() throws(JSONError) -> JSONValue {
    try enter()
    i += 1
    var object = JSONObject()
    var seen = Set<String>()
    skipWhitespace()
    if i < bytes.count && bytes[i] == UInt8(ascii: "}") {
      i += 1
      depth -= 1
      return .object(object)
    }
    while true {
      skipWhitespace()
      guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else {
        throw error("expected a member name in double quotes, found \(describeCurrent())")
      }
      let keyOffset = i
      let key = try parseString()
      guard seen.insert(key).inserted else {
        throw JSONError(message: "duplicate member name \(ErrorText.quoted(key))", offset: keyOffset)
      }
      skipWhitespace()
      guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else {
        throw error("expected ':' after member name, found \(describeCurrent())")
      }
      i += 1
      skipWhitespace()
      object.append(key, try parseValue())
      skipWhitespace()
      guard i < bytes.count else { throw error("unterminated object") }
      if bytes[i] == UInt8(ascii: ",") {
        i += 1
        continue
      }
      if bytes[i] == UInt8(ascii: "}") {
        i += 1
        depth -= 1
        return .object(object)
      }
      throw error("expected ',' or '}' in object, found \(describeCurrent())")
    }
  }

  mutating func parseArray() throws(JSONError) -> JSONValue {
    try enter()
    i += 1
    var array: [JSONValue] = []
    skipWhitespace()
    if i < bytes.count && bytes[i] == UInt8(ascii: "]") {
      i += 1
      depth -= 1
      return .array(array)
    }
    while true {
      skipWhitespace()
      array.append(try parseValue())
      skipWhitespace()
      guard i < bytes.count else { throw error("unterminated array") }
      if bytes[i] == UInt8(ascii: ",") {
        i += 1
        continue
      }
      if bytes[i] == UInt8(ascii: "]") {
        i += 1
        depth -= 1
        return .array(array)
      }
      throw error("expected ',' or ']' in array, found \(describeCurrent())")
    }
  }

  mutating func parseNumber() throws(JSONError) -> JSONValue {
    let start = i
    if bytes[i] == UInt8(ascii: "-") { i += 1 }
    guard i < bytes.count, isDigit(bytes[i]) else { throw error("expected a digit in number") }
    if bytes[i] == UInt8(ascii: "0") {
      i += 1
      if i < bytes.count, isDigit(bytes[i]) { throw error("leading zero in number") }
    } else {
      while i < bytes.count, isDigit(bytes[i]) { i += 1 }
    }
    if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
      i += 1
      guard i < bytes.count, isDigit(bytes[i]) else { throw error("expected a digit after '.'") }
      while i < bytes.count, isDigit(bytes[i]) { i += 1 }
    }
    if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
      i += 1
      if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
      guard i < bytes.count, isDigit(bytes[i]) else { throw error("expected a digit in exponent") }
      while i < bytes.count, isDigit(bytes[i]) { i += 1 }
    }
    return .number(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self))
  }

  func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

  mutating func parseString() throws(JSONError) -> String {
    i += 1  // opening quote
    let start = i
    // Fast path: no escapes.
    while i < bytes.count {
      let b = bytes[i]
      if b == UInt8(ascii: "\"") {
        let slice = UnsafeBufferPointer(rebasing: bytes[start..<i])
        guard let s = String(validating: slice, as: UTF8.self) else {
          throw JSONError(message: "string is not valid UTF-8", offset: start)
        }
        i += 1
        return s
      }
      if b == UInt8(ascii: "\\") { break }
      if b < 0x20 { throw error("unescaped control character in string") }
      i += 1
    }
    var out = [UInt8](UnsafeBufferPointer(rebasing: bytes[start..<i]))
    while i < bytes.count {
      let b = bytes[i]
      switch b {
      case UInt8(ascii: "\""):
        guard let s = String(validating: out, as: UTF8.self) else {
          throw JSONError(message: "string is not valid UTF-8", offset: start)
        }
        i += 1
        return s
      case UInt8(ascii: "\\"):
        i += 1
        guard i < bytes.count else { throw error("unterminated escape") }
        let e = bytes[i]
        i += 1
        switch e {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"): out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
          var scalar = try parseHex4()
          if (0xD800..<0xDC00).contains(scalar) {
            guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
              throw error("lone high surrogate in \\u escape")
            }
            i += 2
            let low = try parseHex4()
            guard (0xDC00..<0xE000).contains(low) else { throw error("invalid low surrogate in \\u escape") }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
          } else if (0xDC00..<0xE000).contains(scalar) {
            throw error("lone low surrogate in \\u escape")
          }
          out.append(contentsOf: UTF8.encode(Unicode.Scalar(scalar)!)!)
        default:
          i -= 1
          throw error("invalid escape '\\\(Character(Unicode.Scalar(e)))'")
        }
      default:
        if b < 0x20 { throw error("unescaped control character in string") }
        out.append(b)
        i += 1
      }
    }
    throw JSONError(message: "unterminated string", offset: start - 1)
  }

  mutating func parseHex4() throws(JSONError) -> UInt32 {
    guard i + 4 <= bytes.count else { throw error("truncated \\u escape") }
    var v: UInt32 = 0
    for _ in 0..<4 {
      let b = bytes[i]
      let d: UInt32
      switch b {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(b - UInt8(ascii: "0"))
      case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(b - UInt8(ascii: "a") + 10)
      case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(b - UInt8(ascii: "A") + 10)
      default: throw error("invalid hex digit in \\u escape")
      }
      v = v << 4 | d
      i += 1
    }
    return v
  }
}
