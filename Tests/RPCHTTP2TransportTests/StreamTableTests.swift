import Testing

@testable import RPCHTTP2Transport

private final class Box {
  let value: Int
  init(_ value: Int) { self.value = value }
}

/// `StreamTable` answers as a `Dictionary` would through inserts, replacements and removals
/// (removal shifts later entries of a probe run back: lookups must still find them).
@Suite struct StreamTableTests {
  @Test(arguments: [1, 2, 3, 7, 42])
  func matchesADictionary(seed: UInt64) {
    var state = seed
    func next(_ bound: Int) -> Int {
      state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      return Int((state >> 33) % UInt64(bound))
    }
    var table = StreamTable<Box>()
    var reference: [Int32: Int] = [:]
    for step in 0..<20_000 {
      // Client stream ids: odd, mostly recent, some far apart (a long-lived stream).
      let key = Int32(2 * (next(3) == 0 ? next(5_000) : 4_000 + next(200)) + 1)
      switch next(3) {
      case 0:
        table[key] = Box(step)
        reference[key] = step
      case 1:
        #expect(table.removeValue(forKey: key)?.value == reference.removeValue(forKey: key))
      default:
        #expect(table[key]?.value == reference[key])
      }
    }
    #expect(table.count == reference.count)
    #expect(Dictionary(uniqueKeysWithValues: table.entries.map { ($0.key, $0.value.value) }) == reference)
    #expect(table[0] == nil)
    table.removeAll()
    #expect(table.isEmpty && table.entries.isEmpty)
  }
}
