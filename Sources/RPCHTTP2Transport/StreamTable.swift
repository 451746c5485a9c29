/// A map from HTTP/2 stream id to an object, for the tables a connection looks up several times
/// per call (its streams, nghttp2's outbound states): open addressing with linear probing over a
/// power-of-two table and a multiplicative hash of the id, instead of a `Dictionary` that hashes
/// every id with SipHash. Stream id 0 (the connection) is never a key.
struct StreamTable<Value: AnyObject> {
  private var keys: [Int32]
  private var values: [Value?]
  private var shift: UInt32
  /// The number of entries.
  private(set) var count = 0

  /// An empty table.
  init() {
    keys = Array(repeating: 0, count: 16)
    values = Array(repeating: nil, count: 16)
    shift = 32 - 4
  }

  var isEmpty: Bool { count == 0 }

  private func slot(of key: Int32) -> Int {
    Int((UInt32(bitPattern: key) &* 0x9E37_79B1) >> shift)
  }

  private var mask: Int { keys.count - 1 }

  /// The value for `key`, or `nil`; setting `nil` removes it.
  subscript(key: Int32) -> Value? {
    get {
      guard key != 0 else { return nil }
      var i = slot(of: key)
      while true {
        let k = keys[i]
        if k == key { return values[i] }
        if k == 0 { return nil }
        i = (i + 1) & mask
      }
    }
    set {
      if let newValue { insert(key, newValue) } else { _ = removeValue(forKey: key) }
    }
  }

  private mutating func insert(_ key: Int32, _ value: Value) {
    precondition(key != 0, "stream id 0 is not a stream")
    if (count + 1) * 4 > keys.count * 3 { grow() }
    var i = slot(of: key)
    while true {
      let k = keys[i]
      if k == key {
        values[i] = value
        return
      }
      if k == 0 {
        keys[i] = key
        values[i] = value
        count += 1
        return
      }
      i = (i + 1) & mask
    }
  }

  /// Removes and returns the value for `key`.
  @discardableResult
  mutating func removeValue(forKey key: Int32) -> Value? {
    guard key != 0 else { return nil }
    var i = slot(of: key)
    while keys[i] != key {
      if keys[i] == 0 { return nil }
      i = (i + 1) & mask
    }
    let removed = values[i]
    keys[i] = 0
    values[i] = nil
    count -= 1
    // Backward-shift: move later entries of the probe run into the hole so that lookups, which
    // stop at the first empty slot, still find them.
    var hole = i
    var j = (i + 1) & mask
    while keys[j] != 0 {
      let home = slot(of: keys[j])
      // The entry at j may move to the hole if its home is not cyclically within (hole, j].
      let distanceToJ = (j - home) & mask
      let distanceToHole = (hole - home) & mask
      if distanceToHole < distanceToJ {
        keys[hole] = keys[j]
        values[hole] = values[j]
        keys[j] = 0
        values[j] = nil
        hole = j
      }
      j = (j + 1) & mask
    }
    return removed
  }

  private mutating func grow() {
    let oldKeys = keys
    let oldValues = values
    keys = Array(repeating: 0, count: oldKeys.count * 2)
    values = Array(repeating: nil, count: oldKeys.count * 2)
    shift -= 1
    count = 0
    for (k, v) in zip(oldKeys, oldValues) where k != 0 { insert(k, v!) }
  }

  /// Removes every entry, keeping the table's size.
  mutating func removeAll() {
    for i in keys.indices where keys[i] != 0 {
      keys[i] = 0
      values[i] = nil
    }
    count = 0
  }

  /// The entries, in no particular order (for the rare walks over all streams).
  var entries: [(key: Int32, value: Value)] {
    var result: [(key: Int32, value: Value)] = []
    result.reserveCapacity(count)
    for i in keys.indices where keys[i] != 0 { result.append((keys[i], values[i]!)) }
    return result
  }

  /// The values, in no particular order.
  var allValues: [Value] { entries.map(\.value) }
}
