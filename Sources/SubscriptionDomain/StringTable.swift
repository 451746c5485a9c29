/// A small open-addressing table from strings to positions, hashed with FNV-1a.
///
/// Evaluation looks up a few dozen short identifiers per user; `Dictionary<String, Int>` spends
/// most of that time seeding and finalizing SipHash. This table is built once (catalog) or per
/// evaluation (deduplication) and stores positions into an array the caller owns.
struct StringTable: Sendable {
  private var slots: [Int32]
  private var mask: Int

  /// A table with room for `capacity` keys at a load factor of at most one half.
  init(capacity: Int) {
    var size = 8
    while size < capacity * 2 { size <<= 1 }
    slots = [Int32](repeating: -1, count: size)
    mask = size - 1
  }

  @inline(__always)
  static func hash(_ key: String) -> Int {
    if let h = key.utf8.withContiguousStorageIfAvailable({ hash(bytes: UnsafeRawBufferPointer($0)) }) {
      return h
    }
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in key.utf8 { h = (h ^ UInt64(byte)) &* 0x100_0000_01b3 }
    return Int(truncatingIfNeeded: h ^ (h >> 29))
  }

  /// FNV-1a over 8-byte words, then the tail bytes, then a final mix.
  @inline(__always)
  static func hash(bytes: UnsafeRawBufferPointer) -> Int {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325 ^ UInt64(bytes.count)
    var offset = 0
    while offset + 8 <= bytes.count {
      let word = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
      h = (h ^ word) &* 0x100_0000_01b3
      h ^= h >> 32
      offset += 8
    }
    while offset < bytes.count {
      h = (h ^ UInt64(bytes[offset])) &* 0x100_0000_01b3
      offset += 1
    }
    h ^= h >> 29
    h = h &* 0xbf58_476d_1ce4_e5b9
    return Int(truncatingIfNeeded: h ^ (h >> 32))
  }

  /// The position stored for `key`, where `keyAt(position)` gives each stored position's key.
  @inline(__always)
  func find(_ key: String, keyAt: (Int) -> String) -> Int? {
    var slot = StringTable.hash(key) & mask
    while true {
      let position = Int(slots[slot])
      if position < 0 { return nil }
      if keyAt(position) == key { return position }
      slot = (slot + 1) & mask
    }
  }

  /// Stores `position` for `key` unless the key is present; returns the existing position if so.
  @inline(__always)
  mutating func insert(_ key: String, position: Int, keyAt: (Int) -> String) -> Int? {
    var slot = StringTable.hash(key) & mask
    while true {
      let existing = Int(slots[slot])
      if existing < 0 {
        slots[slot] = Int32(truncatingIfNeeded: position)
        return nil
      }
      if keyAt(existing) == key { return existing }
      slot = (slot + 1) & mask
    }
  }

  /// Replaces the position stored for a key already present.
  mutating func replace(_ key: String, with position: Int, keyAt: (Int) -> String) {
    var slot = StringTable.hash(key) & mask
    while slots[slot] >= 0 {
      if keyAt(Int(slots[slot])) == key {
        slots[slot] = Int32(truncatingIfNeeded: position)
        return
      }
      slot = (slot + 1) & mask
    }
  }
}
