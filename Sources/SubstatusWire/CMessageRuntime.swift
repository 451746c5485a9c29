// The bridge between generated Swift value types and protobuf-c. Generated code describes each
// message by its full name and field numbers; this file finds protobuf-c's descriptors, reads
// unpacked C structures through the field offsets protobuf-c publishes, and builds C structures
// for packing. Unsafe pointers live only here; nothing in this file is public.
import CProtobufC
import CSubstatusProto

/// Where one field lives in protobuf-c's C structure for its message.
struct CFieldLayout: Sendable {
  var offset: Int
  var quantifierOffset: Int
  var number: UInt32
  var isOneofMember: Bool
}

/// A message's protobuf-c descriptor and the layout of the fields the generated code uses.
struct CMessageLayout: @unchecked Sendable {
  // Points at static, immutable C data.
  let descriptor: UnsafePointer<ProtobufCMessageDescriptor>
  /// Allocated once per message type and never freed (layouts live in `static let`s): reading a
  /// field's layout costs no reference counting, which an `Array` would on every message built.
  let fields: UnsafeBufferPointer<CFieldLayout>
  let size: Int

  /// Looks up the descriptor of `fullName` and the fields with the given numbers, in order.
  init(_ fullName: String, _ numbers: [UInt32]) {
    guard let descriptor = CDescriptorTable.shared.messages[fullName] else {
      fatalError("protobuf-c descriptor for \(fullName) is missing: run scripts/generate-protos")
    }
    self.descriptor = descriptor
    self.size = descriptor.pointee.sizeof_message
    let fields = UnsafeMutableBufferPointer<CFieldLayout>.allocate(capacity: numbers.count)
    for (i, number) in numbers.enumerated() {
      guard let f = protobuf_c_message_descriptor_get_field(descriptor, UInt32(number)) else {
        fatalError("\(fullName) has no field \(number) in protobuf-c: run scripts/generate-protos")
      }
      fields.initializeElement(
        at: i,
        to: CFieldLayout(
          offset: Int(f.pointee.offset), quantifierOffset: Int(f.pointee.quantifier_offset),
          number: f.pointee.id, isOneofMember: f.pointee.flags & UInt32(PROTOBUF_C_FIELD_FLAG_ONEOF.rawValue) != 0))
    }
    self.fields = UnsafeBufferPointer(fields)
  }
}

/// Every message descriptor in CSubstatusProto, by full name.
struct CDescriptorTable: @unchecked Sendable {
  static let shared = CDescriptorTable()
  let messages: [String: UnsafePointer<ProtobufCMessageDescriptor>]

  private init() {
    var messages: [String: UnsafePointer<ProtobufCMessageDescriptor>] = [:]
    for i in 0..<csubstatus_message_descriptor_count() {
      let d = csubstatus_message_descriptor(i)!
      messages[String(cString: d.pointee.name)] = d
    }
    self.messages = messages
  }
}

/// A message type whose value converts to and from protobuf-c's C structure.
protocol CMessageConvertible: ProtobufMessage {
  static var cLayout: CMessageLayout { get }
  init(cReader: CMessageReader) throws(WireError)
  func write(to writer: inout CMessageWriter)
}

extension CMessageConvertible {
  /// Decodes through protobuf-c's unpacker, after checking that every string field is whole (see
  /// ``WholeStrings``).
  ///
  /// - Throws: ``WireError`` with ``WireError/Code-swift.struct/embeddedNUL`` or
  ///   ``WireError/Code-swift.struct/invalidUTF8`` and the field's path for a broken string,
  ///   ``WireError/Code-swift.struct/malformedMessage`` for bytes that are not an encoding.
  static func decode(_ bytes: [UInt8]) throws(WireError) -> Self {
    let layout = cLayout
    let (unpacked, outcome) = bytes.withUnsafeBufferPointer { buffer -> (UnsafeMutablePointer<ProtobufCMessage>?, WholeStrings.Outcome) in
      if let base = buffer.baseAddress {
        let outcome = WholeStrings.scan(base, base + buffer.count, layout.descriptor)
        guard outcome == .whole else { return (nil, outcome) }
      }
      return (protobuf_c_message_unpack(layout.descriptor, nil, buffer.count, buffer.baseAddress), .whole)
    }
    if outcome == .broken, let error = bytes.withUnsafeBufferPointer({ WholeStrings.error($0, layout.descriptor, protoMessageName) }) {
      throw error
    }
    guard let unpacked else {
      throw WireError(
        code: .malformedMessage,
        message: "\(bytes.count) bytes are not a valid encoding of \(protoMessageName)")
    }
    defer { protobuf_c_message_free_unpacked(unpacked, nil) }
    do throws(WireError) {
      return try Self(cReader: CMessageReader(UnsafeRawPointer(unpacked), layout, protoMessageName))
    } catch {
      // Swift's String found bytes that are not UTF-8: name the field.
      throw bytes.withUnsafeBufferPointer { WholeStrings.error($0, layout.descriptor, protoMessageName) } ?? error
    }
  }

  /// Encodes through protobuf-c's packer.
  func encode() -> [UInt8] {
    let arena = CArena()
    // The arena owns the C structures the packer reads: it must outlive the packing.
    return withExtendedLifetime(arena) {
      let message = arena.build(self)
      let size = protobuf_c_message_get_packed_size(message)
      if size == 0 { return [] }
      return [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
        count = protobuf_c_message_pack(message, buffer.baseAddress)
      }
    }
  }

}

/// A bump allocator for the C structures of one encode; everything is freed at once, when the
/// arena goes away. A class, so that the writers of nested messages share it without copies.
final class CArena {
  private var chunks: [UnsafeMutableRawPointer] = []
  private var next: UnsafeMutableRawPointer?
  private var remaining = 0
  private static let chunkSize = 4096

  init() {}

  deinit {
    for c in chunks { c.deallocate() }
  }

  func allocate(_ size: Int) -> UnsafeMutableRawPointer {
    let rounded = (max(size, 1) + 15) & ~15
    if rounded > CArena.chunkSize / 4 {
      let p = UnsafeMutableRawPointer.allocate(byteCount: rounded, alignment: 16)
      chunks.append(p)
      return p
    }
    if rounded > remaining {
      let p = UnsafeMutableRawPointer.allocate(byteCount: CArena.chunkSize, alignment: 16)
      chunks.append(p)
      next = p
      remaining = CArena.chunkSize
    }
    let p = next!
    next = p + rounded
    remaining -= rounded
    return p
  }

  /// A NUL-terminated copy of a string.
  func cString(_ s: String) -> UnsafeMutablePointer<CChar> {
    var s = s
    return s.withUTF8 { utf8 in
      let p = allocate(utf8.count + 1)
      if let base = utf8.baseAddress { p.copyMemory(from: base, byteCount: utf8.count) }
      p.storeBytes(of: 0, toByteOffset: utf8.count, as: UInt8.self)
      return p.assumingMemoryBound(to: CChar.self)
    }
  }

  func binary(_ bytes: [UInt8]) -> ProtobufCBinaryData {
    let p = allocate(bytes.count)
    bytes.withUnsafeBytes { if let base = $0.baseAddress { p.copyMemory(from: base, byteCount: bytes.count) } }
    return ProtobufCBinaryData(len: bytes.count, data: p.assumingMemoryBound(to: UInt8.self))
  }

  /// Builds the C structure of a message in this arena.
  func build<M: CMessageConvertible>(_ value: M) -> UnsafeMutablePointer<ProtobufCMessage> {
    let layout = M.cLayout
    let raw = allocate(layout.size)
    let message = raw.bindMemory(to: ProtobufCMessage.self, capacity: 1)
    layout.descriptor.pointee.message_init(message)
    var writer = CMessageWriter(raw, layout, arena: self)
    value.write(to: &writer)
    return message
  }
}

/// Reads fields of an unpacked protobuf-c message. Indices are positions in the layout's numbers.
struct CMessageReader {
  let base: UnsafeRawPointer
  let layout: CMessageLayout
  let messageName: String

  init(_ base: UnsafeRawPointer, _ layout: CMessageLayout, _ messageName: String) {
    self.base = base
    self.layout = layout
    self.messageName = messageName
  }

  @inline(__always) func load<T>(_ i: Int, _: T.Type) -> T {
    base.load(fromByteOffset: layout.fields[i].offset, as: T.self)
  }

  /// Whether the field is the member set in its oneof.
  func isSet(_ i: Int) -> Bool {
    let f = layout.fields[i]
    return base.load(fromByteOffset: f.quantifierOffset, as: UInt32.self) == f.number
  }

  func int32(_ i: Int) -> Int32 { load(i, Int32.self) }
  func uint32(_ i: Int) -> UInt32 { load(i, UInt32.self) }
  func int64(_ i: Int) -> Int64 { load(i, Int64.self) }
  func uint64(_ i: Int) -> UInt64 { load(i, UInt64.self) }
  func float(_ i: Int) -> Float { load(i, Float.self) }
  func double(_ i: Int) -> Double { load(i, Double.self) }
  func bool(_ i: Int) -> Bool { load(i, Int32.self) != 0 }
  func enumeration<E: ProtobufEnum>(_ i: Int) -> E { E(rawValue: load(i, Int32.self)) }

  func string(_ i: Int) throws(WireError) -> String {
    try CMessageReader.string(load(i, UnsafePointer<CChar>?.self), field: i, self)
  }

  static func string(_ p: UnsafePointer<CChar>?, field i: Int, _ r: CMessageReader) throws(WireError) -> String {
    guard let p else { return "" }
    if p.pointee == 0 { return "" }
    guard let s = String(validatingCString: p) else {
      throw WireError(
        code: .invalidUTF8, message: "field \(r.layout.fields[i].number) of \(r.messageName) is not valid UTF-8")
    }
    return s
  }

  func bytes(_ i: Int) -> [UInt8] {
    let b = load(i, ProtobufCBinaryData.self)
    guard b.len > 0, let data = b.data else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: b.len))
  }

  func message<M: CMessageConvertible>(_ i: Int, _: M.Type) throws(WireError) -> M? {
    guard let p = load(i, UnsafeRawPointer?.self) else { return nil }
    return try M(cReader: CMessageReader(p, M.cLayout, M.protoMessageName))
  }

  private func count(_ i: Int) -> Int {
    base.load(fromByteOffset: layout.fields[i].quantifierOffset, as: Int.self)
  }

  private func repeated<T, R>(_ i: Int, _: T.Type, _ transform: (T) throws(WireError) -> R) throws(WireError) -> [R] {
    let n = count(i)
    guard n > 0, let p = load(i, UnsafeRawPointer?.self) else { return [] }
    let elements = p.assumingMemoryBound(to: T.self)
    var out: [R] = []
    out.reserveCapacity(n)
    for k in 0..<n { out.append(try transform(elements[k])) }
    return out
  }

  func repeatedInt32(_ i: Int) -> [Int32] { (try? repeated(i, Int32.self) { $0 }) ?? [] }
  func repeatedUInt32(_ i: Int) -> [UInt32] { (try? repeated(i, UInt32.self) { $0 }) ?? [] }
  func repeatedInt64(_ i: Int) -> [Int64] { (try? repeated(i, Int64.self) { $0 }) ?? [] }
  func repeatedUInt64(_ i: Int) -> [UInt64] { (try? repeated(i, UInt64.self) { $0 }) ?? [] }
  func repeatedFloat(_ i: Int) -> [Float] { (try? repeated(i, Float.self) { $0 }) ?? [] }
  func repeatedDouble(_ i: Int) -> [Double] { (try? repeated(i, Double.self) { $0 }) ?? [] }
  func repeatedBool(_ i: Int) -> [Bool] { (try? repeated(i, Int32.self) { $0 != 0 }) ?? [] }
  func repeatedEnumeration<E: ProtobufEnum>(_ i: Int) -> [E] {
    (try? repeated(i, Int32.self) { E(rawValue: $0) }) ?? []
  }
  func repeatedString(_ i: Int) throws(WireError) -> [String] {
    try repeated(i, UnsafePointer<CChar>?.self) { (p) throws(WireError) in try CMessageReader.string(p, field: i, self) }
  }
  func repeatedBytes(_ i: Int) -> [[UInt8]] {
    (try? repeated(i, ProtobufCBinaryData.self) { b in
      guard b.len > 0, let data = b.data else { return [] }
      return Array(UnsafeBufferPointer(start: data, count: b.len))
    }) ?? []
  }
  func repeatedMessage<M: CMessageConvertible>(_ i: Int, _: M.Type) throws(WireError) -> [M] {
    try repeated(i, UnsafeRawPointer?.self) { (p) throws(WireError) -> M in
      guard let p else { return M() }
      return try M(cReader: CMessageReader(p, M.cLayout, M.protoMessageName))
    }
  }
}

/// Writes fields into a protobuf-c message structure being built in an arena.
struct CMessageWriter {
  let base: UnsafeMutableRawPointer
  let layout: CMessageLayout
  let arena: CArena

  init(_ base: UnsafeMutableRawPointer, _ layout: CMessageLayout, arena: CArena) {
    self.base = base
    self.layout = layout
    self.arena = arena
  }

  @inline(__always) func store<T>(_ i: Int, _ value: T) {
    base.storeBytes(of: value, toByteOffset: layout.fields[i].offset, as: T.self)
  }

  /// Marks the field as the member set in its oneof.
  func setCase(_ i: Int) {
    let f = layout.fields[i]
    base.storeBytes(of: f.number, toByteOffset: f.quantifierOffset, as: UInt32.self)
  }

  func int32(_ i: Int, _ v: Int32) { store(i, v) }
  func uint32(_ i: Int, _ v: UInt32) { store(i, v) }
  func int64(_ i: Int, _ v: Int64) { store(i, v) }
  func uint64(_ i: Int, _ v: UInt64) { store(i, v) }
  func float(_ i: Int, _ v: Float) { store(i, v) }
  func double(_ i: Int, _ v: Double) { store(i, v) }
  func bool(_ i: Int, _ v: Bool) { store(i, Int32(v ? 1 : 0)) }
  func enumeration<E: ProtobufEnum>(_ i: Int, _ v: E) { store(i, v.rawValue) }

  mutating func string(_ i: Int, _ v: String) {
    if v.isEmpty && !layout.fields[i].isOneofMember { return }
    store(i, UnsafePointer(arena.cString(v)))
  }

  mutating func bytes(_ i: Int, _ v: [UInt8]) {
    if v.isEmpty && !layout.fields[i].isOneofMember { return }
    store(i, arena.binary(v))
  }

  mutating func message<M: CMessageConvertible>(_ i: Int, _ v: M?) {
    guard let v else { return }
    store(i, UnsafeRawPointer(arena.build(v)))
  }

  private mutating func repeated<T, S>(_ i: Int, _ values: [S], _: T.Type, _ transform: (CArena, S) -> T) {
    guard !values.isEmpty else { return }
    let p = arena.allocate(MemoryLayout<T>.stride * values.count).bindMemory(to: T.self, capacity: values.count)
    for (k, v) in values.enumerated() { (p + k).initialize(to: transform(arena, v)) }
    base.storeBytes(of: values.count, toByteOffset: layout.fields[i].quantifierOffset, as: Int.self)
    store(i, UnsafeRawPointer(p))
  }

  mutating func repeatedInt32(_ i: Int, _ v: [Int32]) { repeated(i, v, Int32.self) { $1 } }
  mutating func repeatedUInt32(_ i: Int, _ v: [UInt32]) { repeated(i, v, UInt32.self) { $1 } }
  mutating func repeatedInt64(_ i: Int, _ v: [Int64]) { repeated(i, v, Int64.self) { $1 } }
  mutating func repeatedUInt64(_ i: Int, _ v: [UInt64]) { repeated(i, v, UInt64.self) { $1 } }
  mutating func repeatedFloat(_ i: Int, _ v: [Float]) { repeated(i, v, Float.self) { $1 } }
  mutating func repeatedDouble(_ i: Int, _ v: [Double]) { repeated(i, v, Double.self) { $1 } }
  mutating func repeatedBool(_ i: Int, _ v: [Bool]) { repeated(i, v, Int32.self) { $1 ? 1 : 0 } }
  mutating func repeatedEnumeration<E: ProtobufEnum>(_ i: Int, _ v: [E]) {
    repeated(i, v, Int32.self) { $1.rawValue }
  }
  mutating func repeatedString(_ i: Int, _ v: [String]) {
    repeated(i, v, UnsafePointer<CChar>?.self) { arena, s in UnsafePointer(arena.cString(s)) }
  }
  mutating func repeatedBytes(_ i: Int, _ v: [[UInt8]]) {
    repeated(i, v, ProtobufCBinaryData.self) { arena, b in arena.binary(b) }
  }
  mutating func repeatedMessage<M: CMessageConvertible>(_ i: Int, _ v: [M]) {
    repeated(i, v, UnsafeRawPointer?.self) { arena, m in UnsafeRawPointer(arena.build(m)) }
  }
}
