/// gRPC metadata: an ordered list of key-value pairs carried in HTTP/2 headers or trailers.
///
/// Keys are lower-case ASCII. A key ending in `-bin` carries binary values (base64 on the wire);
/// any other key carries printable ASCII strings. A key may appear more than once.
///
/// ```swift
/// var metadata: Metadata = ["authorization": "Bearer abc"]
/// metadata.addBinary([0, 1, 2], forKey: "trace-bin")
/// metadata.firstString(forKey: "authorization")  // "Bearer abc"
/// ```
public struct Metadata: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral,
  CustomStringConvertible
{
  /// One metadata value.
  public enum Value: Sendable, Hashable, ExpressibleByStringLiteral {
    /// A printable ASCII value, for a key without the `-bin` suffix.
    case string(String)
    /// A binary value, for a key with the `-bin` suffix.
    case binary([UInt8])

    /// A string value.
    public init(stringLiteral value: String) { self = .string(value) }
  }

  /// One key-value pair.
  public struct Element: Sendable, Hashable {
    /// The lower-case key.
    public var key: String
    /// The value.
    public var value: Value
  }

  private var elements: [Element]

  /// Empty metadata.
  public init() { elements = [] }

  /// Metadata from a literal, keys lower-cased.
  public init(dictionaryLiteral pairs: (String, Value)...) {
    elements = pairs.map { Element(key: $0.0.lowercased(), value: $0.1) }
  }

  /// The number of pairs.
  public var count: Int { elements.count }
  /// Whether there are no pairs.
  public var isEmpty: Bool { elements.isEmpty }

  /// Iterates the pairs in insertion order.
  public func makeIterator() -> IndexingIterator<[Element]> { elements.makeIterator() }

  /// Whether a key names binary values (ends with `-bin`).
  public static func isBinaryKey(_ key: String) -> Bool { key.hasSuffix("-bin") }

  /// Appends a string value.
  ///
  /// - Parameters:
  ///   - value: A printable ASCII string.
  ///   - key: The key; lower-cased.
  public mutating func addString(_ value: String, forKey key: String) {
    elements.append(Element(key: key.lowercased(), value: .string(value)))
  }

  /// Appends a binary value.
  ///
  /// - Parameters:
  ///   - value: The bytes.
  ///   - key: The key, which should end in `-bin`; lower-cased.
  public mutating func addBinary(_ value: [UInt8], forKey key: String) {
    elements.append(Element(key: key.lowercased(), value: .binary(value)))
  }

  /// Appends a pair as it came off the wire.
  package mutating func append(_ element: Element) { elements.append(element) }

  /// Whether the pair at `index` is the string value `value` under `key` (a transport checks
  /// whether a call's headers repeat the previous call's metadata, to reuse it).
  package func hasString(_ value: String, forKey key: String, at index: Int) -> Bool {
    guard index < elements.count, elements[index].key == key, case .string(let s) = elements[index].value else {
      return false
    }
    return s == value
  }

  /// The first `count` pairs.
  package func prefix(_ count: Int) -> Metadata {
    var metadata = Metadata()
    metadata.elements = Array(elements.prefix(count))
    return metadata
  }

  /// Removes every value for a key.
  public mutating func removeAll(forKey key: String) {
    let key = key.lowercased()
    elements.removeAll { $0.key == key }
  }

  /// Every string value for a key, in order.
  public func strings(forKey key: String) -> [String] {
    let key = key.lowercased()
    return elements.compactMap {
      guard $0.key == key, case .string(let s) = $0.value else { return nil }
      return s
    }
  }

  /// The first string value for a key.
  public func firstString(forKey key: String) -> String? { strings(forKey: key).first }

  /// Every binary value for a key, in order.
  public func binaries(forKey key: String) -> [[UInt8]] {
    let key = key.lowercased()
    return elements.compactMap {
      guard $0.key == key, case .binary(let b) = $0.value else { return nil }
      return b
    }
  }

  /// The first binary value for a key.
  public func firstBinary(forKey key: String) -> [UInt8]? { binaries(forKey: key).first }

  /// Appends every pair of another metadata.
  public mutating func add(contentsOf other: Metadata) { elements.append(contentsOf: other.elements) }

  /// `[key: value, ...]`, with binary values shown by length only.
  public var description: String {
    let parts = elements.map { element -> String in
      switch element.value {
      case .string(let s): "\(element.key): \(s)"
      case .binary(let b): "\(element.key): <\(b.count) bytes>"
      }
    }
    return "[" + parts.joined(separator: ", ") + "]"
  }
}
