import Testing
@testable import SubstatusWire

@Suite struct GRPCFramingTests {
  @Test("frames decode one byte at a time", arguments: [0, 1, 64, 70_000])
  func byteAtATime(length: Int) throws {
    let message = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    let framed = GRPCFraming.frame(message) + GRPCFraming.frame([7, 8])
    var deframer = GRPCDeframer(maxMessageLength: 1 << 20)
    var out: [[UInt8]] = []
    for byte in framed {
      deframer.append(CollectionOfOne(byte))
      while let m = try deframer.next() { out.append(m) }
    }
    #expect(out == [message, [7, 8]])
    try deframer.finish()
  }

  @Test func rejectsOversizedCompressedAndTruncated() throws {
    var big = GRPCDeframer(maxMessageLength: 10)
    big.append(GRPCFraming.frame([UInt8](repeating: 1, count: 11)))
    #expect(throws: WireError.self) { try big.next() }

    var compressed = GRPCDeframer(maxMessageLength: 10)
    compressed.append([1, 0, 0, 0, 1, 9])
    #expect { try compressed.next() } throws: { ($0 as? WireError)?.code == .compressedMessage }

    var truncated = GRPCDeframer(maxMessageLength: 10)
    truncated.append([0, 0, 0, 0, 3, 1])
    #expect(try truncated.next() == nil)
    #expect(throws: WireError.self) { try truncated.finish() }
  }
}
