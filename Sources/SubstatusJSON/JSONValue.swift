/// A JSON value (RFC 8259) that keeps what Foundation's `JSONSerialization` loses on Linux: the
/// difference between `true` and `1`, the exact text of numbers (so 64-bit integers keep every
/// digit), and the order of object members.
///
/// ```swift
/// let value = try JSONValue(parsing: #"{"status": 0, "environment": "Sandbox"}"#)
/// value["status"]?.int64Value    // 0
/// value["environment"]?.stringValue  // "Sandbox"
/// ```
public enum JSONValue: Sendable, Hashable {
  /// `null`.
  case null
  /// `true` or `false`.
  case bool(Bool)
  /// A number, kept as its literal text (always valid JSON number syntax).
  case number(String)
  /// A string.
  case string(String)
  /// An array.
  case array([JSONValue])
  /// An object, members in document order.
  case object(JSONObject)

  /// A number value from an integer.
  public static func integer<I: BinaryInteger>(_ value: I) -> JSONValue { .number(String(value)) }

  /// A number value from a double; non-finite values become `null`, as JSON has no syntax for them.
  public static func double(_ value: Double) -> JSONValue {
    guard value.isFinite else { return .null }
    if abs(value) < 1e15, let integer = Int64(exactly: value) { return .number(String(integer)) }
    return .number("\(value)")
  }

  /// The member named `key` when this is an object.
  public subscript(key: String) -> JSONValue? {
    if case .object(let object) = self { return object[key] }
    return nil
  }

  /// The string when this is a string.
  public var stringValue: String? {
    if case .string(let s) = self { return s }
    return nil
  }

  /// The boolean when this is `true` or `false`.
  public var boolValue: Bool? {
    if case .bool(let b) = self { return b }
    return nil
  }

  /// The number as a 64-bit integer when it is a number whose text is an integer in range
  /// (`12`, `-3`, also `1e3` and `12.0`, which denote integers).
  public var int64Value: Int64? {
    guard case .number(let text) = self else { return nil }
    return JSONValue.integer(fromNumberText: text)
  }

  /// The number as a double when this is a number.
  public var doubleValue: Double? {
    guard case .number(let text) = self else { return nil }
    return Double(text)
  }

  /// The elements when this is an array.
  public var arrayValue: [JSONValue]? {
    if case .array(let a) = self { return a }
    return nil
  }

  /// The object when this is an object.
  public var objectValue: JSONObject? {
    if case .object(let o) = self { return o }
    return nil
  }

  /// Whether this is `null`.
  public var isNull: Bool {
    if case .null = self { return true }
    return false
  }

  /// A short name of the value's JSON type, for error messages: `"string"`, `"number"`, ….
  public var typeName: String {
    switch self {
    case .null: "null"
    case .bool: "boolean"
    case .number: "number"
    case .string: "string"
    case .array: "array"
    case .object: "object"
    }
  }

  static func integer(fromNumberText text: String) -> Int64? {
    if let exact = Int64(text) { return exact }
    // Exponent or fraction forms that still denote an integer, e.g. "1e3" or "5.0".
    guard let d = Double(text), abs(d) <= 9_007_199_254_740_992 else { return nil }
    return Int64(exactly: d)
  }
}

/// The members of a JSON object in document order, with lookup by name.
///
/// Duplicate names are rejected by the parser; ``JSONObject/subscript(_:)`` returns the member.
public struct JSONObject: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
  /// The members, in order.
  public private(set) var members: [(key: String, value: JSONValue)]

  /// An empty object.
  public init() { members = [] }

  /// An object with these members, in order.
  public init(_ members: [(key: String, value: JSONValue)]) { self.members = members }

  /// An object from a literal, members in literal order.
  public init(dictionaryLiteral elements: (String, JSONValue)...) {
    members = elements.map { (key: $0.0, value: $0.1) }
  }

  /// The member names, in order.
  public var keys: [String] { members.map(\.key) }

  /// The number of members.
  public var count: Int { members.count }

  /// Whether there are no members.
  public var isEmpty: Bool { members.isEmpty }

  /// The value of the member named `key`; setting `nil` removes it, setting a new name appends it.
  public subscript(key: String) -> JSONValue? {
    get { members.first(where: { $0.key == key })?.value }
    set {
      if let i = members.firstIndex(where: { $0.key == key }) {
        if let newValue { members[i].value = newValue } else { members.remove(at: i) }
      } else if let newValue {
        members.append((key: key, value: newValue))
      }
    }
  }

  /// Appends a member without checking for an existing one of the same name.
  public mutating func append(_ key: String, _ value: JSONValue) {
    members.append((key: key, value: value))
  }

  /// Iterates over the members in order.
  public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> {
    members.makeIterator()
  }

  public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
    lhs.members.count == rhs.members.count
      && zip(lhs.members, rhs.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(members.count)
    for m in members {
      hasher.combine(m.key)
      hasher.combine(m.value)
    }
  }
}

/// A JSON document that could not be parsed, with the byte offset where parsing stopped.
public struct JSONError: Error, Hashable, Sendable, CustomStringConvertible {
  /// What is wrong.
  public var message: String
  /// The 0-based byte offset in the input.
  public var offset: Int

  /// Creates an error.
  public init(message: String, offset: Int) {
    self.message = message
    self.offset = offset
  }

  public var description: String { "invalid JSON at byte \(offset): \(message)" }
}
