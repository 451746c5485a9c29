import Foundation
import RPCWebProtocols
import Testing

enum Fixture {
  /// The bytes of a fixture file under `Fixtures/`.
  static func bytes(_ name: String) throws -> [UInt8] {
    let url = try #require(
      Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Fixtures"), "fixture \(name) is missing")
    return Array(try Data(contentsOf: url))
  }
}

/// `count` bytes that compress somewhat (a repeating text with a counter), deterministic.
func sampleBytes(_ count: Int) -> [UInt8] {
  var bytes: [UInt8] = []
  bytes.reserveCapacity(count)
  var line = 0
  while bytes.count < count {
    bytes.append(contentsOf: #"{"productId":"com.example.pro.\#(line)","userId":"u-\#(line * 7919 % 1000)"},"#.utf8)
    line += 1
  }
  return Array(bytes.prefix(count))
}

@Suite struct GzipTests {
  @Test(arguments: [0, 1, 100, 1024, 70_000, 1 << 20])
  func roundTrip(size: Int) throws {
    let plain = sampleBytes(size)
    let packed = try #require(Gzip.compress(plain))
    #expect(Array(packed.prefix(3)) == [0x1F, 0x8B, 0x08])  // gzip magic, deflate
    if size >= 1024 { #expect(packed.count < plain.count / 3) }
    #expect(try Gzip.decompress(packed, limit: size) == plain)
  }

  @Test func inflatesWhatAnIndependentEncoderWrote() throws {
    // Written by CPython's gzip module (level 9).
    let plain = try Fixture.bytes("python-gzip.json")
    #expect(try Gzip.decompress(try Fixture.bytes("python-gzip.json.gz"), limit: plain.count) == plain)
  }

  @Test func concatenatedMembersInflateToTheirConcatenation() throws {
    let a = sampleBytes(3000)
    let b = Array("tail".utf8)
    let packed = try #require(Gzip.compress(a)) + (try #require(Gzip.compress(b)))
    #expect(try Gzip.decompress(packed, limit: 4096) == a + b)
  }

  @Test(arguments: [0, 1, 4096])
  func theLimitIsInclusive(size: Int) throws {
    let packed = try #require(Gzip.compress(sampleBytes(size)))
    #expect(try Gzip.decompress(packed, limit: size).count == size)
    if size > 0 {
      #expect(throws: Gzip.DecompressionError.self) { try Gzip.decompress(packed, limit: size - 1) }
    }
  }

  /// 4 KiB that inflate to 4 MiB: inflating stops at the limit having read only the first part of
  /// the input (inflating the whole and checking after would have read all of it).
  @Test(arguments: [0, 1, 64 << 10, 1 << 20])
  func aBombStopsAtTheLimit(limit: Int) throws {
    let bomb = try Fixture.bytes("bomb-4MiB-zeros.gz")
    #expect(bomb.count < 5000)
    do {
      _ = try Gzip.decompress(bomb, limit: limit)
      Issue.record("the bomb inflated within \(limit)")
    } catch {
      guard case .exceedsLimit(let reported, let consumed) = error else {
        Issue.record("\(error)"); return
      }
      #expect(reported == limit)
      #expect(consumed < bomb.count / 3, "read \(consumed) of \(bomb.count) bytes")
    }
    // The same bytes within a limit that fits inflate whole.
    #expect(try Gzip.decompress(bomb, limit: 4 << 20) == [UInt8](repeating: 0, count: 4 << 20))
  }

  struct CorruptCase: Sendable, CustomStringConvertible {
    var name: String
    var bytes: [UInt8]
    var description: String { name }
  }

  static let corrupt: [CorruptCase] = {
    let packed = Gzip.compress(sampleBytes(2000))!
    var badCRC = packed
    badCRC[badCRC.count - 8] ^= 0xFF
    var badLength = packed
    badLength[badLength.count - 1] ^= 0x01
    var badBlock = packed
    badBlock[10] = 0xFF  // first byte of the deflate data: block type 3 is reserved
    return [
      CorruptCase(name: "empty", bytes: []),
      CorruptCase(name: "not gzip", bytes: Array("{\"appId\":\"x\"}".utf8)),
      CorruptCase(name: "zlib format, not gzip", bytes: [0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]),
      CorruptCase(name: "truncated", bytes: Array(packed.dropLast(5))),
      CorruptCase(name: "header only", bytes: Array(packed.prefix(10))),
      CorruptCase(name: "bad CRC", bytes: badCRC),
      CorruptCase(name: "bad length", bytes: badLength),
      CorruptCase(name: "reserved block type", bytes: badBlock),
      CorruptCase(name: "trailing garbage", bytes: packed + [0, 0, 0, 0]),
    ]
  }()

  @Test(arguments: corrupt)
  func corruptInputIsAnError(_ row: CorruptCase) {
    do {
      let plain = try Gzip.decompress(row.bytes, limit: 1 << 20)
      Issue.record("inflated to \(plain.count) bytes")
    } catch {
      guard case .corrupt(let reason) = error else { Issue.record("\(error)"); return }
      #expect(!reason.isEmpty)
    }
  }
}
