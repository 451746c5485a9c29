import Testing
@testable import SubstatusWire

/// Decoding unpacks into a stack arena of ``UnpackArena/capacity`` bytes and encoding builds its C
/// structures in a first chunk of stack storage; messages of any size around those bounds decode
/// and encode to the same values, with parts in the arena and parts beyond it in one tree.
@Suite struct ArenaTests {
  /// An eligibility request of `count` product ids of `length` characters each.
  static func request(count: Int, length: Int) -> Subs_Bench_V1_EligibilityRequest {
    var request = Subs_Bench_V1_EligibilityRequest()
    request.userID = "user-" + String(repeating: "u", count: length)
    request.appID = "com.bench.app"
    request.productIDs = (0..<count).map { i in
      let digits = String(i)
      return String(repeating: "p", count: max(0, length - digits.count)) + digits
    }
    return request
  }

  // 0 and 20 fit the arena; 120 × 40 (about 6 KiB unpacked) starts in it and goes on in malloc'd
  // memory; 3 × 5,000 has strings larger than the whole arena; 2,000 × 16 needs a repeated array
  // larger than the arena.
  @Test(arguments: [(0, 0), (20, 20), (120, 40), (3, 5_000), (2_000, 16)])
  func requestsAroundTheArenaSizeRoundTrip(count: Int, length: Int) throws {
    let request = Self.request(count: count, length: length)
    let bytes = request.serializedBytes()
    let decoded = try Subs_Bench_V1_EligibilityRequest(serializedBytes: bytes)
    #expect(decoded == request)
    #expect(decoded.serializedBytes() == bytes)
  }

  @Test(arguments: [0, 1, 20, 200, 2_000])
  func repliesAroundTheEncodeChunkSizeRoundTrip(count: Int) throws {
    var reply = Subs_Bench_V1_EligibilityReply()
    for i in 0..<count {
      var item = Subs_Bench_V1_ProductEligibility()
      item.productID = "com.bench.product.\(i)"
      item.introEligible = i % 2 == 0
      item.promoEligible = i % 3 == 0
      reply.results.append(item)
    }
    let decoded = try Subs_Bench_V1_EligibilityReply(serializedBytes: reply.serializedBytes())
    #expect(decoded == reply)
  }

  /// A broken string after many whole ones is still named, whether it lies in the arena or beyond.
  @Test(arguments: [1, 300])
  func aBrokenStringIsStillNamed(count: Int) {
    var bytes = Self.request(count: count, length: 20).serializedBytes()
    bytes += [0x1A, 3, 0x61, 0xFF, 0x62]  // product_ids (field 3): "a\u{FF}b", not UTF-8
    #expect(throws: WireError.self) { try Subs_Bench_V1_EligibilityRequest(serializedBytes: bytes) }
  }
}
