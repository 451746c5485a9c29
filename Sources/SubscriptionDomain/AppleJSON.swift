import SubstatusJSON

// Reading Apple's JSON: strict about structure (objects, arrays, required fields), lenient about
// Apple's value quirks: booleans as `"true"`/`"false"`/`"1"`/`"0"`/JSON booleans/0/1, integers and
// millisecond timestamps as strings or numbers, empty strings for absent values, dates as
// `_ms` fields or `"2024-01-31 10:00:00 Etc/GMT"` text.

/// A JSON object being read, with the path used in error messages.
struct AppleObject {
  let object: JSONObject
  let path: String

  init(_ value: JSONValue, path: String) throws(AppleDataError) {
    guard case .object(let object) = value else {
      throw AppleDataError(
        code: .invalidValue, field: path.isEmpty ? nil : path,
        message: "expected an object, found \(value.typeName)")
    }
    self.object = object
    self.path = path
  }

  func fieldPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

  func invalid(_ key: String, _ message: String) -> AppleDataError {
    AppleDataError(code: .invalidValue, field: fieldPath(key), message: message)
  }

  func missing(_ key: String) -> AppleDataError {
    AppleDataError(code: .missingField, field: fieldPath(key), message: "required field is absent")
  }

  /// The member, or `nil` when absent or `null`.
  func value(_ key: String) -> JSONValue? {
    guard let value = object[key], !value.isNull else { return nil }
    return value
  }

  /// A string; numbers are read as their literal text (some ids arrive as numbers); `""` is absent.
  func string(_ key: String) throws(AppleDataError) -> String? {
    guard let value = value(key) else { return nil }
    switch value {
    case .string(let text): return text.isEmpty ? nil : text
    case .number(let text): return text
    default: throw invalid(key, "expected a string, found \(value.typeName)")
    }
  }

  func requiredString(_ key: String) throws(AppleDataError) -> String {
    guard let text = try string(key) else { throw missing(key) }
    return text
  }

  /// An integer from a JSON number or a numeric string; `""` is absent.
  func int64(_ key: String) throws(AppleDataError) -> Int64? {
    guard let value = value(key) else { return nil }
    switch value {
    case .number:
      guard let number = value.int64Value else {
        throw invalid(key, "expected an integer, found \(value.serialized())")
      }
      return number
    case .string(let text):
      let trimmed = AppleObject.trim(text)
      if trimmed.isEmpty { return nil }
      if let number = Int64(trimmed) { return number }
      if let number = JSONValue.number(trimmed).int64Value, AppleObject.isNumberSyntax(trimmed) {
        return number
      }
      throw invalid(key, "expected an integer, found \(ErrorText.quoted(text))")
    default:
      throw invalid(key, "expected an integer, found \(value.typeName)")
    }
  }

  func int(_ key: String) throws(AppleDataError) -> Int? {
    guard let number = try int64(key) else { return nil }
    guard let small = Int(exactly: number) else { throw invalid(key, "integer out of range") }
    return small
  }

  /// An integer that Apple sometimes sends as a boolean (`auto_renew_status`): `true` is 1.
  func intOrBool(_ key: String) throws(AppleDataError) -> Int? {
    guard let value = value(key) else { return nil }
    if case .bool(let flag) = value { return flag ? 1 : 0 }
    if case .string(let text) = value {
      switch AppleObject.trim(text).lowercased() {
      case "true": return 1
      case "false": return 0
      default: break
      }
    }
    return try int(key)
  }

  /// A boolean from `true`/`false`, `"true"`/`"false"`, `"1"`/`"0"`, `1`/`0`; `""` is absent.
  func bool(_ key: String) throws(AppleDataError) -> Bool? {
    guard let value = value(key) else { return nil }
    switch value {
    case .bool(let flag): return flag
    case .number(let text):
      switch value.int64Value {
      case 0?: return false
      case 1?: return true
      default: throw invalid(key, "expected a boolean, found \(text)")
      }
    case .string(let text):
      switch AppleObject.trim(text).lowercased() {
      case "true", "1": return true
      case "false", "0": return false
      case "": return nil
      default: throw invalid(key, "expected a boolean, found \(ErrorText.quoted(text))")
      }
    default:
      throw invalid(key, "expected a boolean, found \(value.typeName)")
    }
  }

  /// An instant in milliseconds: `msKey` (number or string) first, else `textKey` as
  /// `yyyy-MM-dd HH:mm:ss Etc/GMT` (or RFC 3339 UTC, or all digits: milliseconds).
  func date(ms msKey: String, text textKey: String?) throws(AppleDataError) -> Int64? {
    if let ms = try int64(msKey) { return ms }
    guard let textKey, let text = try string(textKey) else { return nil }
    // iOS 6-style receipts put milliseconds in `expires_date`.
    if !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let ms = Int64(text) { return ms }
    guard let ms = AppleObject.parseDate(text) else {
      throw invalid(textKey, "expected a date such as \"2024-01-31 10:00:00 Etc/GMT\", found \(ErrorText.quoted(text))")
    }
    return ms
  }

  /// An array, or `nil` when absent or `null`.
  func array(_ key: String) throws(AppleDataError) -> [JSONValue]? {
    guard let value = value(key) else { return nil }
    guard case .array(let elements) = value else {
      throw invalid(key, "expected an array, found \(value.typeName)")
    }
    return elements
  }

  /// An array of strings (absent is empty).
  func strings(_ key: String) throws(AppleDataError) -> [String] {
    guard let elements = try array(key) else { return [] }
    var result: [String] = []
    for (i, element) in elements.enumerated() {
      guard case .string(let text) = element else {
        throw AppleDataError(
          code: .invalidValue, field: "\(fieldPath(key))[\(i)]",
          message: "expected a string, found \(element.typeName)")
      }
      result.append(text)
    }
    return result
  }

  /// A nested object, or `nil` when absent or `null`.
  func object(_ key: String) throws(AppleDataError) -> AppleObject? {
    guard let value = value(key) else { return nil }
    return try AppleObject(value, path: fieldPath(key))
  }

  /// Each element of an array of objects.
  func objects(_ key: String) throws(AppleDataError) -> [AppleObject] {
    guard let elements = try array(key) else { return [] }
    var result: [AppleObject] = []
    result.reserveCapacity(elements.count)
    for (i, element) in elements.enumerated() {
      result.append(try AppleObject(element, path: "\(fieldPath(key))[\(i)]"))
    }
    return result
  }

  static func trim(_ text: String) -> String {
    var scalars = Substring(text)
    while let first = scalars.first, first == " " { scalars.removeFirst() }
    while let last = scalars.last, last == " " { scalars.removeLast() }
    return String(scalars)
  }

  static func isNumberSyntax(_ text: String) -> Bool {
    (try? JSONValue(parsing: text))?.typeName == "number"
  }

  /// Parses `yyyy-MM-dd HH:mm:ss` followed by ` Etc/GMT`, ` GMT`, ` UTC`, `Z` or nothing, also with
  /// `T` as separator; all digits are milliseconds (old receipts' `expires_date`).
  static func parseDate(_ text: String) -> Int64? {
    let bytes = Array(trim(text).utf8)
    if !bytes.isEmpty, bytes.allSatisfy({ $0 >= 48 && $0 <= 57 }) { return Int64(trim(text)) }
    guard bytes.count >= 19 else { return nil }
    func digits(_ range: Range<Int>) -> Int64? {
      var value: Int64 = 0
      for i in range {
        let b = bytes[i]
        guard b >= 48 && b <= 57 else { return nil }
        value = value * 10 + Int64(b - 48)
      }
      return value
    }
    guard bytes[4] == 45, bytes[7] == 45, bytes[10] == 32 || bytes[10] == 84, bytes[13] == 58,
      bytes[16] == 58,
      let year = digits(0..<4), let month = digits(5..<7), let day = digits(8..<10),
      let hour = digits(11..<13), let minute = digits(14..<16), let second = digits(17..<19),
      (1...12).contains(month), day >= 1, day <= CivilDate.daysInMonth(year: year, month: month),
      hour < 24, minute < 60, second < 61
    else { return nil }
    let rest = String(decoding: bytes[19...], as: UTF8.self)
    guard ["", "Z", " Etc/GMT", " GMT", " UTC", "+00:00"].contains(rest) else { return nil }
    let days = CivilDate(year: year, month: month, day: day).daysSinceEpoch
    return days * CivilDate.millisecondsPerDay + ((hour * 60 + minute) * 60 + second) * 1000
  }
}

extension AppleDataError {
  init(json error: JSONError) {
    self.init(code: .invalidJSON, field: nil, message: error.description)
  }
}

func parseJSON(_ bytes: [UInt8]) throws(AppleDataError) -> JSONValue {
  do {
    return try JSONValue(parsing: bytes)
  } catch {
    throw AppleDataError(json: error)
  }
}
