import Foundation

/// A message with the canonical proto3 JSON mapping: lowerCamelCase names (the original names are
/// accepted too), enum value names, 64-bit integers as strings, bytes as base64, default values
/// omitted on output; unknown fields are rejected with an error naming the field.
public protocol ProtobufJSONMessage: ProtobufMessage {
  /// The message in the proto3 JSON mapping.
  func jsonValue() -> JSONValue
  /// Reads a message from its proto3 JSON mapping.
  /// - Throws: ``WireError`` with code `.invalidJSON` naming the field that does not fit.
  init(jsonValue: JSONValue) throws(WireError)
}

extension ProtobufJSONMessage {
  /// The message as compact proto3 JSON text.
  public func jsonString() -> String { jsonValue().serialized() }

  /// Reads a message from proto3 JSON text.
  /// - Throws: ``WireError`` with code `.invalidJSON` for malformed JSON or a field that does not fit.
  public init(jsonString: String) throws(WireError) {
    let value: JSONValue
    do { value = try JSONValue(parsing: jsonString) } catch {
      throw WireError(code: .invalidJSON, message: "\(Self.protoMessageName): \(error)")
    }
    try self.init(jsonValue: value)
  }
}

/// Conversions used by the generated JSON mapping.
enum ProtoJSON {
  static func error(_ message: String, _ field: String) -> WireError {
    WireError(code: .invalidJSON, message: "field \"\(field)\": \(message)")
  }

  static func object(_ value: JSONValue, _ messageName: String) throws(WireError) -> JSONObject {
    guard case .object(let o) = value else {
      throw WireError(code: .invalidJSON, message: "\(messageName) must be a JSON object, not \(value.typeName)")
    }
    return o
  }

  static func unknownField(_ key: String, _ messageName: String) -> WireError {
    WireError(code: .invalidJSON, message: "unknown field \(ErrorText.quoted(key)) in \(messageName)")
  }

  static func array(_ value: JSONValue, _ field: String) throws(WireError) -> [JSONValue] {
    guard case .array(let a) = value else { throw error("expected an array, found \(value.typeName)", field) }
    return a
  }

  static func string(_ value: JSONValue, _ field: String) throws(WireError) -> String {
    guard case .string(let s) = value else { throw error("expected a string, found \(value.typeName)", field) }
    // The binary encoding goes through protobuf-c's C strings, which a NUL would cut (see
    // WholeStrings): refuse it here, where the field is known, rather than send a shorter string.
    guard !s.utf8.contains(0) else { throw error("holds a NUL byte (\\u0000), which would cut the string", field) }
    return s
  }

  static func bool(_ value: JSONValue, _ field: String) throws(WireError) -> Bool {
    guard case .bool(let b) = value else { throw error("expected true or false, found \(value.typeName)", field) }
    return b
  }

  /// An integer from a JSON number or a string holding one, checked against the type's range.
  static func integer<I: FixedWidthInteger>(_ value: JSONValue, _ field: String, _: I.Type) throws(WireError) -> I {
    let text: String
    switch value {
    case .number(let t): text = t
    case .string(let s): text = s
    default: throw error("expected an integer, found \(value.typeName)", field)
    }
    if let exact = I(text) { return exact }
    if let d = Double(text), d.isFinite, let exact = I(exactly: d) { return exact }
    // The value is quoted by its first bytes only: a number may have megabytes of digits.
    throw error("\(ErrorText.quoted(text)) is not an integer in the range of \(I.self)", field)
  }

  static func double(_ value: JSONValue, _ field: String) throws(WireError) -> Double {
    switch value {
    case .number(let t):
      if let d = Double(t) { return d }
    case .string("NaN"): return .nan
    case .string("Infinity"): return .infinity
    case .string("-Infinity"): return -.infinity
    case .string(let s):
      if let d = Double(s) { return d }
    default: break
    }
    throw error("expected a number, found \(value.typeName)", field)
  }

  static func float(_ value: JSONValue, _ field: String) throws(WireError) -> Float {
    Float(try double(value, field))
  }

  static func bytes(_ value: JSONValue, _ field: String) throws(WireError) -> [UInt8] {
    var s = try string(value, field)
    // proto3 JSON accepts standard and URL-safe base64, with or without padding.
    s = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while s.count % 4 != 0 { s += "=" }
    guard let data = Data(base64Encoded: s) else { throw error("not valid base64", field) }
    return [UInt8](data)
  }

  static func enumeration<E: ProtobufEnum>(_ value: JSONValue, _ field: String, _: E.Type) throws(WireError) -> E {
    switch value {
    case .string(let name):
      guard let e = E(protoName: name) else { throw error("unknown enum value \(ErrorText.quoted(name))", field) }
      return e
    case .number:
      return E(rawValue: try integer(value, field, Int32.self))
    default:
      throw error("expected an enum name or number, found \(value.typeName)", field)
    }
  }

  static func message<M: ProtobufJSONMessage>(_ value: JSONValue, _ field: String, _: M.Type) throws(WireError) -> M {
    do { return try M(jsonValue: value) } catch {
      throw WireError(code: .invalidJSON, message: "field \"\(field)\": \(error.message)")
    }
  }

  static func repeated<T>(_ value: JSONValue, _ field: String, _ element: (JSONValue, String) throws(WireError) -> T) throws(WireError) -> [T] {
    var out: [T] = []
    for (n, e) in try array(value, field).enumerated() { out.append(try element(e, "\(field)[\(n)]")) }
    return out
  }

  // Output.
  static func int64(_ v: Int64) -> JSONValue { .string(String(v)) }
  static func uint64(_ v: UInt64) -> JSONValue { .string(String(v)) }
  static func int32(_ v: Int32) -> JSONValue { .integer(v) }
  static func uint32(_ v: UInt32) -> JSONValue { .integer(v) }
  static func bytes(_ v: [UInt8]) -> JSONValue { .string(Data(v).base64EncodedString()) }
  static func double(_ v: Double) -> JSONValue {
    if v.isNaN { return .string("NaN") }
    if v.isInfinite { return .string(v < 0 ? "-Infinity" : "Infinity") }
    return .number("\(v)")
  }
  static func float(_ v: Float) -> JSONValue {
    if v.isNaN { return .string("NaN") }
    if v.isInfinite { return .string(v < 0 ? "-Infinity" : "Infinity") }
    return .number("\(v)")
  }
}
