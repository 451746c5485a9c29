import CLinuxShims
import Glibc
import Testing

/// The free-list allocator behind each HTTP/2 session's `nghttp2_mem` (`clinux_pool_*`).
@Suite struct SessionPoolTests {
  /// A block keeps its bytes through realloc, comes back zeroed from calloc, and a freed block of
  /// a kept size is handed out again for that size, within the pool's bound.
  @Test(arguments: [1, 63, 64, 65, 700, 2048, 4000, 4096, 4097, 100_000])
  func blocksKeepTheirBytesAndAreReused(size: Int) throws {
    let pool = try #require(clinux_pool_create(16 << 10))
    defer { clinux_pool_destroy(pool) }
    let user = UnsafeMutableRawPointer(pool)
    let block = try #require(clinux_pool_malloc(size, user))
    memset(block, 0xAB, size)
    let grown = try #require(clinux_pool_realloc(block, size * 2, user))
    let bytes = grown.assumingMemoryBound(to: UInt8.self)
    #expect((0..<size).allSatisfy { bytes[$0] == 0xAB })
    // A block realloc moved from went back to the pool (when of a kept size) already.
    let before = clinux_pool_cached_bytes(pool)
    clinux_pool_free(grown, user)
    let kept = clinux_pool_keeps_blocks() == 1 && size * 2 <= 4096
    #expect((clinux_pool_cached_bytes(pool) > before) == kept)
    let zeroed = try #require(clinux_pool_calloc(size * 2, 1, user))
    if kept { #expect(zeroed == grown) }
    #expect((0..<(size * 2)).allSatisfy { zeroed.assumingMemoryBound(to: UInt8.self)[$0] == 0 })
    #expect(clinux_pool_cached_bytes(pool) == before)
    clinux_pool_free(zeroed, user)
  }

  /// Freed blocks beyond the bound go back to malloc: a pool never keeps more than it was given.
  @Test(arguments: [64, 256, 1024])
  func keptBytesStayWithinTheBound(size: Int) throws {
    let bound = 4 << 10
    let pool = try #require(clinux_pool_create(bound))
    defer { clinux_pool_destroy(pool) }
    let user = UnsafeMutableRawPointer(pool)
    let blocks = (0..<100).map { _ in clinux_pool_malloc(size, user) }
    for block in blocks { clinux_pool_free(block, user) }
    #expect(clinux_pool_cached_bytes(pool) <= bound)
    if clinux_pool_keeps_blocks() == 1 { #expect(clinux_pool_cached_bytes(pool) == bound) }
  }
}
