/// Swift names for protobuf names, following SwiftProtobuf's conventions so that Swift gRPC users
/// find familiar names: `substatus.v1.Product` -> `Substatus_V1_Product`, `product_id` ->
/// `productID`, `PRODUCT_TYPE_AUTO_RENEWABLE` of `ProductType` -> `autoRenewable`.
enum Naming {
  static let swiftKeywords: Set<String> = [
    "associatedtype", "class", "deinit", "enum", "extension", "fileprivate", "func", "import", "init",
    "inout", "internal", "let", "open", "operator", "private", "protocol", "public", "rethrows",
    "static", "struct", "subscript", "typealias", "var", "break", "case", "continue", "default",
    "defer", "do", "else", "fallthrough", "for", "guard", "if", "in", "repeat", "return", "switch",
    "where", "while", "as", "Any", "catch", "false", "is", "nil", "super", "self", "Self", "throw",
    "throws", "true", "try", "Type", "Protocol",
  ]

  /// `substatus.v1` -> `Substatus_V1_`.
  static func packagePrefix(_ package: String) -> String {
    guard !package.isEmpty else { return "" }
    return package.split(separator: ".").map { upperFirst(String($0)) }.joined(separator: "_") + "_"
  }

  static func upperFirst(_ s: String) -> String { s.prefix(1).uppercased() + s.dropFirst() }

  /// `evidence_transaction_id` -> `evidenceTransactionID`.
  static func fieldName(_ name: String) -> String {
    let words = name.split(separator: "_").map(String.init)
    var out = ""
    for (i, w) in words.enumerated() {
      let lower = w.lowercased()
      if i == 0 {
        out += lower
      } else if lower == "id" || lower == "url" || lower == "uuid" {
        out += lower.uppercased()
      } else if lower == "ids" {
        out += "IDs"
      } else {
        out += upperFirst(w)
      }
    }
    return out
  }

  /// Backquotes a Swift keyword.
  static func escaped(_ name: String) -> String { swiftKeywords.contains(name) ? "`\(name)`" : name }

  /// `EligibilityReason` -> `ELIGIBILITY_REASON`.
  static func upperSnake(_ camel: String) -> String {
    var out = ""
    var previous: Character? = nil
    for c in camel {
      if c.isUppercase, let p = previous, p.isLowercase || p.isNumber { out += "_" }
      out += c.uppercased()
      previous = c
    }
    return out
  }

  /// The Swift case name of an enum value: the enum's prefix stripped, then lowerCamelCase.
  static func enumCaseName(_ value: String, enumName: String) -> String {
    let prefix = upperSnake(enumName) + "_"
    var stripped = value
    if value.hasPrefix(prefix), value.count > prefix.count {
      let rest = String(value.dropFirst(prefix.count))
      if let first = rest.first, !first.isNumber { stripped = rest }
    }
    let words = stripped.split(separator: "_").map { $0.lowercased() }
    guard let head = words.first else { return "_" }
    return head + words.dropFirst().map { upperFirst($0) }.joined()
  }

  /// Turns a proto comment into `///` lines at an indentation.
  static func docComment(_ comment: String, indent: String, fallback: String) -> String {
    var lines = comment.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
      var l = Substring(line)
      if l.hasPrefix(" ") { l = l.dropFirst() }
      return String(l).replacingTrailingWhitespace()
    }
    while lines.last?.isEmpty == true { lines.removeLast() }
    while lines.first?.isEmpty == true { lines.removeFirst() }
    if lines.isEmpty { lines = [fallback] }
    return lines.map { $0.isEmpty ? "\(indent)///\n" : "\(indent)/// \($0)\n" }.joined()
  }
}

extension String {
  func replacingTrailingWhitespace() -> String {
    var s = self
    while let last = s.last, last == " " || last == "\t" || last == "\r" { s.removeLast() }
    return s
  }
}
