// The reader of the stored binary formats: the per-user summary's codec here and the stores'
// payload codecs (SubscriptionStorage's `PayloadCodec`, `EventPayloadCodec`) read varints, zigzag
// integers and length-prefixed UTF-8 with this one reader; each format keeps only its own markers
// (presence bytes, string tables, interned strings) as extensions. Every method is inlinable so
// that the stores' decoders, in another module, are specialized for their error type.

/// Why a ``ByteReader`` stopped.
package enum ByteReaderProblem: Sendable, Hashable {
  /// The input ended inside a value.
  case truncated
  /// A varint longer than 64 bits.
  case badVarint
  /// A count larger than the bytes left (every counted item takes at least one byte).
  case countBeyondInput(UInt64)
  /// A string whose bytes are not UTF-8.
  case notUTF8
}

/// The error a format's decoder throws, made from a ``ByteReaderProblem`` at a byte position.
package protocol ByteReaderError: Error {
  /// The error for `problem` at byte `position` of the input.
  static func byteReader(_ problem: ByteReaderProblem, at position: Int) -> Self
}

/// Reads a byte array from the front: bytes, varints, zigzag integers, counts and length-prefixed
/// UTF-8. Any overrun throws `Failure` (never traps, whatever the input).
package struct ByteReader<Failure: ByteReaderError> {
  /// The input.
  @usableFromInline package let bytes: [UInt8]
  /// The next byte to read.
  @usableFromInline package var position: Int

  /// A reader at the start of `bytes`.
  @inlinable package init(_ bytes: [UInt8], at position: Int = 0) {
    self.bytes = bytes
    self.position = position
  }

  /// Whether every byte was read.
  @inlinable package var isAtEnd: Bool { position == bytes.count }

  /// The bytes left.
  @inlinable package var remaining: Int { bytes.count - position }

  /// One byte.
  @inlinable package mutating func byte() throws(Failure) -> UInt8 {
    guard position < bytes.count else { throw Failure.byteReader(.truncated, at: position) }
    defer { position += 1 }
    return bytes[position]
  }

  /// An unsigned LEB128 varint of at most 64 bits.
  @inlinable package mutating func varint() throws(Failure) -> UInt64 {
    var value: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      let b = try byte()
      guard shift < 63 || (shift == 63 && b <= 1) else { throw Failure.byteReader(.badVarint, at: position - 1) }
      value |= UInt64(b & 0x7F) << shift
      if b < 0x80 { return value }
      shift += 7
    }
  }

  /// A zigzag-encoded signed varint.
  @inlinable package mutating func int() throws(Failure) -> Int64 {
    let z = try varint()
    return Int64(bitPattern: (z >> 1) ^ (0 &- (z & 1)))
  }

  /// A count of items that follow, bounded by the bytes left (each item takes at least one byte).
  @inlinable package mutating func count() throws(Failure) -> Int {
    let n = try varint()
    guard n <= UInt64(remaining) else { throw Failure.byteReader(.countBeyondInput(n), at: position) }
    return Int(n)
  }

  /// The position and length of a length-prefixed string, which is skipped.
  @inlinable package mutating func stringSpan() throws(Failure) -> Range<Int> {
    let n = try varint()
    guard n <= UInt64(remaining) else { throw Failure.byteReader(.truncated, at: position) }
    let start = position
    position += Int(n)
    return start..<position
  }

  /// A length-prefixed string; bytes that are not UTF-8 are replaced (U+FFFD).
  @inlinable package mutating func string() throws(Failure) -> String {
    String(decoding: bytes[try stringSpan()], as: UTF8.self)
  }

  /// A length-prefixed string that must be UTF-8.
  @inlinable package mutating func validString() throws(Failure) -> String {
    let span = try stringSpan()
    guard let s = String(validating: bytes[span], as: UTF8.self) else {
      throw Failure.byteReader(.notUTF8, at: span.lowerBound)
    }
    return s
  }
}
