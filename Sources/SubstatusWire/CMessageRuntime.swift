// The bridge between generated Swift value types and protobuf-c. Generated code describes each
// message by its full name and field numbers; this file finds protobuf-c's descriptors, reads
// unpacked C structures through the field offsets protobuf-c publishes, and builds C structures
// for packing. Unsafe pointers live only here; nothing in this file is public.
import CProtobufC
import CSubstatusProto

#if canImport(Glibc)
  import Glibc
#endif

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
    // protobuf-c allocates the unpacked tree field by field (each string, each repeated array):
    // it goes to a bump arena over stack storage instead, given back at once (``UnpackArena``).
    try withUnsafeTemporaryAllocation(byteCount: UnpackArena.capacity, alignment: 16) {
      (storage) throws(WireError) in
      var arena = UnpackArena(base: storage.baseAddress!, capacity: storage.count)
      return try withUnsafeMutablePointer(to: &arena) { (arena) throws(WireError) in try decode(bytes, arena: arena) }
    }
  }

  private static func decode(_ bytes: [UInt8], arena: UnsafeMutablePointer<UnpackArena>) throws(WireError) -> Self {
    let layout = cLayout
    var allocator = UnpackArena.allocator(arena)
    let (unpacked, outcome) = bytes.withUnsafeBufferPointer { buffer -> (UnsafeMutablePointer<ProtobufCMessage>?, WholeStrings.Outcome) in
      if let base = buffer.baseAddress {
        let outcome = WholeStrings.scan(base, base + buffer.count, layout.descriptor)
        guard outcome == .whole else { return (nil, outcome) }
      }
      return (protobuf_c_message_unpack(layout.descriptor, &allocator, buffer.count, buffer.baseAddress), .whole)
    }
    if outcome == .broken, let error = bytes.withUnsafeBufferPointer({ WholeStrings.error($0, layout.descriptor, protoMessageName) }) {
      throw error
    }
    guard let unpacked else {
      throw WireError(
        code: .malformedMessage,
        message: "\(bytes.count) bytes are not a valid encoding of \(protoMessageName)")
    }
    // Only what did not fit the arena was malloc'd; without such parts there is nothing to free.
    defer { if arena.pointee.overflowed { protobuf_c_message_free_unpacked(unpacked, &allocator) } }
    do throws(WireError) {
      return try Self(cReader: CMessageReader(UnsafeRawPointer(unpacked), layout, protoMessageName))
    } catch {
      // Swift's String found bytes that are not UTF-8: name the field.
      throw bytes.withUnsafeBufferPointer { WholeStrings.error($0, layout.descriptor, protoMessageName) } ?? error
    }
  }

  /// Encodes through protobuf-c's packer.
  func encode() -> [UInt8] {
    // The arena's first chunk is stack storage (Swift keeps temporary allocations of up to
    // 1 KiB on the stack; larger ones may go to the heap): a small message's C structures fit
    // it, and a larger one's next chunk is small enough for glibc's per-thread cache (a 4 KiB
    // malloc per call was above it, and made every call consolidate the allocator's free lists).
    withUnsafeTemporaryAllocation(byteCount: CArena.stackChunkSize, alignment: 16) { first in
      let arena = CArena(first: first)
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

}

/// protobuf-c's allocator for one unpack: a bump arena over the caller's (stack) storage, so that
/// unpacking a request costs no `malloc` per string or repeated field. What does not fit goes to
/// `malloc` (and ``overflowed`` says that `protobuf_c_message_free_unpacked` must run); `free`
/// ignores pointers into the storage, which is given back whole when the decode returns.
struct UnpackArena {
  /// The stack storage of one decode: 1 KiB, which Swift always keeps on the stack (a larger
  /// temporary allocation may go to the heap). A 20-product eligibility request unpacks into
  /// about 750 bytes; what does not fit goes to `malloc`.
  static let capacity = 1024

  let base: UnsafeMutableRawPointer
  let capacity: Int
  var used = 0
  var overflowed = false

  init(base: UnsafeMutableRawPointer, capacity: Int) {
    self.base = base
    self.capacity = capacity
  }

  /// The protobuf-c allocator over `arena`, which must outlive every call that is given it.
  static func allocator(_ arena: UnsafeMutablePointer<UnpackArena>) -> ProtobufCAllocator {
    ProtobufCAllocator(
      alloc: { data, size in
        let arena = data!.assumingMemoryBound(to: UnpackArena.self)
        // 8-byte alignment is what protobuf-c's structures need (pointers, 64-bit fields).
        let rounded = (max(size, 1) + 7) & ~7
        if rounded <= arena.pointee.capacity - arena.pointee.used {
          let p = arena.pointee.base + arena.pointee.used
          arena.pointee.used += rounded
          return p
        }
        arena.pointee.overflowed = true
        return malloc(size)
      },
      free: { data, pointer in
        guard let pointer else { return }
        let arena = data!.assumingMemoryBound(to: UnpackArena.self)
        let base = arena.pointee.base
        if pointer >= base && pointer < base + arena.pointee.capacity { return }
        Glibc.free(pointer)
      },
      allocator_data: UnsafeMutableRawPointer(arena))
  }
}

/// A bump allocator for the C structures of one encode; everything is freed at once, when the
/// arena goes away. A class, so that the writers of nested messages share it without copies.
final class CArena {
  private var chunks: [UnsafeMutableRawPointer] = []
  private var next: UnsafeMutableRawPointer?
  private var remaining = 0
  static let chunkSize = 4096
  /// The size of the first chunk on the stack (``init(first:)``).
  static let stackChunkSize = 1024
  /// The size of the first chunk the arena allocates (unless one item needs more): below
  /// glibc's large-chunk sizes (1 KiB and up, whose allocation consolidates the fast bins first)
  /// and within its per-thread cache, so that a reply a little larger than the stack chunk costs
  /// a cached allocation; later chunks are ``chunkSize``.
  static let firstHeapChunkSize = 960

  init() {}

  /// An arena whose first chunk is `first` (the caller's storage, which must outlive the arena
  /// and is not freed by it).
  init(first: UnsafeMutableRawBufferPointer) {
    next = first.baseAddress
    remaining = first.count
  }

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
      // `rounded` is at most chunkSize / 4 here, which a later chunk always holds.
      let size = chunks.isEmpty ? max(CArena.firstHeapChunkSize, rounded) : CArena.chunkSize
      let p = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
      chunks.append(p)
      next = p
      remaining = size
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

/// Strings decoded lately on one thread, so that a string field whose value came before (a
/// product id, an app id, a bundle id: the same on call after call) costs a hash and a comparison
/// instead of a new `String` (an allocation; strings of up to 15 UTF-8 bytes are stored inline and
/// need none). A direct-mapped table of 256 entries per thread, by a hash of the bytes; a miss
/// replaces the entry. One instance per thread (POSIX thread-specific data), released when the
/// thread exits, so no lock is taken.
final class RecentStrings {
  /// Shorter strings are stored inline in a `String`, without an allocation to save.
  static let minimumLength = 15
  /// Longer strings are rarely repeated identifiers.
  static let maximumLength = 64
  private static let slotCount = 256

  private let slots: UnsafeMutablePointer<String?>

  private init() {
    slots = .allocate(capacity: Self.slotCount)
    slots.initialize(repeating: nil, count: Self.slotCount)
  }

  deinit {
    slots.deinitialize(count: Self.slotCount)
    slots.deallocate()
  }

  private static let key: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { pointer in
      if let pointer { Unmanaged<RecentStrings>.fromOpaque(pointer).release() }
    }
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
  }()

  /// The calling thread's table, made on its first use.
  static var ofThisThread: RecentStrings {
    if let pointer = pthread_getspecific(key) {
      return Unmanaged<RecentStrings>.fromOpaque(pointer).takeUnretainedValue()
    }
    let table = RecentStrings()
    pthread_setspecific(key, Unmanaged.passRetained(table).toOpaque())
    return table
  }

  /// FNV-1a over 8-byte words, folded to a slot.
  private static func slot(_ bytes: UnsafeRawPointer, count: Int) -> Int {
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325
    var offset = 0
    while offset + 8 <= count {
      hash = (hash ^ bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* 0x100_0000_01B3
      offset += 8
    }
    while offset < count {
      hash = (hash ^ UInt64(bytes.load(fromByteOffset: offset, as: UInt8.self))) &* 0x100_0000_01B3
      offset += 1
    }
    hash ^= hash >> 29
    return Int(truncatingIfNeeded: hash ^ (hash >> 32)) & (slotCount - 1)
  }

  /// The remembered string with exactly these bytes (already found to be UTF-8 when it was made).
  func string(_ bytes: UnsafeRawPointer, count: Int) -> String? {
    guard var candidate = slots[Self.slot(bytes, count: count)], candidate.utf8.count == count else { return nil }
    let same = candidate.withUTF8 { memcmp($0.baseAddress!, bytes, count) == 0 }
    return same ? candidate : nil
  }

  /// Remembers a string made from these bytes, in place of the entry of its slot.
  func remember(_ string: String, _ bytes: UnsafeRawPointer, count: Int) {
    slots[Self.slot(bytes, count: count)] = string
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
    let count = strlen(p)
    if count > RecentStrings.minimumLength && count <= RecentStrings.maximumLength,
      let recent = RecentStrings.ofThisThread.string(UnsafeRawPointer(p), count: count)
    {
      return recent
    }
    guard let s = String(validatingCString: p) else {
      throw WireError(
        code: .invalidUTF8, message: "field \(r.layout.fields[i].number) of \(r.messageName) is not valid UTF-8")
    }
    if count > RecentStrings.minimumLength && count <= RecentStrings.maximumLength {
      RecentStrings.ofThisThread.remember(s, UnsafeRawPointer(p), count: count)
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
