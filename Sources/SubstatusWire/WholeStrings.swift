// Every string is whole (docs/architecture.md "Security"). protobuf-c unpacks a `string` field into
// a NUL-terminated C string, so its length is lost: "victim\0evil" would reach Swift as "victim".
// Before unpacking, the encoded bytes are scanned once, by protobuf-c's own message descriptors,
// for a NUL byte in any string field, nested messages, repeated fields and map entries included.
// Only when a string is broken (a NUL, or bytes that are not UTF-8, which Swift's String
// validation reports while reading) does a second, slower pass name the field.
import CProtobufC

#if canImport(Glibc)
  import Glibc
#endif

enum WholeStrings {
  /// What the scan found.
  enum Outcome {
    /// Every string field is free of NUL bytes.
    case whole
    /// A string field holds a NUL byte.
    case broken
    /// The bytes are not a protobuf encoding (or nest deeper than ``maxDepth``).
    case malformed
  }

  /// The deepest nesting of messages accepted; far beyond any message of the API, and a bound on
  /// the recursion of this scan and of protobuf-c's unpacker.
  static let maxDepth = 64

  /// Scans `[start, end)` as an encoding of the message `descriptor` describes: one linear pass,
  /// no allocation.
  static func scan(
    _ start: UnsafePointer<UInt8>, _ end: UnsafePointer<UInt8>,
    _ descriptor: UnsafePointer<ProtobufCMessageDescriptor>, depth: Int = 0
  ) -> Outcome {
    var p = start
    while p < end {
      guard let tag = varint(&p, end), tag >> 3 != 0, tag <= UInt64(UInt32.max) else { return .malformed }
      switch tag & 7 {
      case 0:
        guard varint(&p, end) != nil else { return .malformed }
      case 1:
        guard end - p >= 8 else { return .malformed }
        p += 8
      case 5:
        guard end - p >= 4 else { return .malformed }
        p += 4
      case 2:
        guard let length = varint(&p, end), length <= UInt64(end - p) else { return .malformed }
        let value = p
        p += Int(length)
        guard let field = field(descriptor, UInt32(truncatingIfNeeded: tag >> 3)) else { continue }
        if field.pointee.type == PROTOBUF_C_TYPE_STRING {
          if length > 0 && memchr(value, 0, Int(length)) != nil { return .broken }
        } else if field.pointee.type == PROTOBUF_C_TYPE_MESSAGE {
          guard depth < maxDepth else { return .malformed }
          let outcome = scan(value, p, messageDescriptor(field), depth: depth + 1)
          if outcome != .whole { return outcome }
        }
      default:
        // Groups (3, 4) are not proto3, and protobuf-c does not parse them; 6 and 7 do not exist.
        return .malformed
      }
    }
    return .whole
  }

  /// The first string field, in wire order, that holds a NUL byte or is not UTF-8: its path in
  /// proto field-path form (`queries[2].user_id`; a map entry is `labels[0].key`) and what is
  /// wrong. `nil` when every string is whole. Allocates: only for the error path.
  static func firstBrokenString(
    _ start: UnsafePointer<UInt8>, _ end: UnsafePointer<UInt8>,
    _ descriptor: UnsafePointer<ProtobufCMessageDescriptor>, path: String = "", depth: Int = 0
  ) -> (field: String, code: WireError.Code, problem: String)? {
    var occurrences: [UInt32: Int] = [:]
    var p = start
    while p < end {
      guard let tag = varint(&p, end), tag >> 3 != 0, tag <= UInt64(UInt32.max) else { return nil }
      switch tag & 7 {
      case 0: guard varint(&p, end) != nil else { return nil }
      case 1: p += 8
      case 5: p += 4
      case 2:
        guard let length = varint(&p, end), length <= UInt64(end - p) else { return nil }
        let value = UnsafeBufferPointer(start: p, count: Int(length))
        p += Int(length)
        let number = UInt32(truncatingIfNeeded: tag >> 3)
        guard let field = field(descriptor, number) else { continue }
        var name = path.isEmpty ? String(cString: field.pointee.name) : path + "." + String(cString: field.pointee.name)
        if field.pointee.label == PROTOBUF_C_LABEL_REPEATED {
          name += "[\(occurrences[number, default: 0])]"
          occurrences[number, default: 0] += 1
        }
        if field.pointee.type == PROTOBUF_C_TYPE_STRING {
          if value.contains(0) {
            return (name, .embeddedNUL, "holds a NUL byte, which would cut the string")
          }
          if String(validating: value, as: UTF8.self) == nil {
            return (name, .invalidUTF8, "is not valid UTF-8")
          }
        } else if field.pointee.type == PROTOBUF_C_TYPE_MESSAGE, depth < maxDepth, let base = value.baseAddress {
          if let found = firstBrokenString(base, p, messageDescriptor(field), path: name, depth: depth + 1) {
            return found
          }
        }
      default: return nil
      }
      guard p <= end else { return nil }
    }
    return nil
  }

  /// The error for a message whose scan found a broken string, naming the field.
  static func error(
    _ bytes: UnsafeBufferPointer<UInt8>, _ descriptor: UnsafePointer<ProtobufCMessageDescriptor>, _ messageName: String
  ) -> WireError? {
    guard let base = bytes.baseAddress,
      let found = firstBrokenString(base, base + bytes.count, descriptor)
    else { return nil }
    return WireError(
      code: found.code, message: "\(found.field) of \(messageName) \(found.problem)",
      fieldViolation: WireError.FieldViolation(field: found.field, description: found.problem))
  }

  /// Reads a base-128 varint of at most 10 bytes; `nil` when truncated or longer.
  @inline(__always)
  private static func varint(_ p: inout UnsafePointer<UInt8>, _ end: UnsafePointer<UInt8>) -> UInt64? {
    var value: UInt64 = 0
    var shift: UInt64 = 0
    while p < end, shift < 70 {
      let byte = p.pointee
      p += 1
      value |= UInt64(byte & 0x7F) << shift
      if byte < 0x80 { return value }
      shift += 7
    }
    return nil
  }

  /// The field with a number, found as protobuf-c does (`int_range_lookup`): the descriptor's
  /// fields are sorted by number and grouped in ranges of consecutive numbers, usually one.
  @inline(__always)
  private static func field(
    _ descriptor: UnsafePointer<ProtobufCMessageDescriptor>, _ number: UInt32
  ) -> UnsafePointer<ProtobufCFieldDescriptor>? {
    let d = descriptor.pointee
    guard let ranges = d.field_ranges, let fields = d.fields, number <= UInt32(Int32.max) else { return nil }
    let value = Int(number)
    for r in 0..<Int(d.n_field_ranges) {
      let first = Int(ranges[r].start_value)
      let count = Int(ranges[r + 1].orig_index) - Int(ranges[r].orig_index)
      if value >= first && value < first + count { return fields + (Int(ranges[r].orig_index) + value - first) }
    }
    return nil
  }

  @inline(__always)
  private static func messageDescriptor(_ field: UnsafePointer<ProtobufCFieldDescriptor>) -> UnsafePointer<ProtobufCMessageDescriptor> {
    field.pointee.descriptor.assumingMemoryBound(to: ProtobufCMessageDescriptor.self)
  }
}
