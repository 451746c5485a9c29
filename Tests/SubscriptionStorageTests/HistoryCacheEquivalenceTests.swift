import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import Testing

/// The history cache's one promise (issue 23, "correctness first"): a store with it answers every
/// read exactly as the same store without it, whatever writes, notifications and erasures come
/// between the reads. Two SQLite stores take the same random sequence of operations on a few
/// users (the copies of ``CopyPermutationCase``: every source, refunds, reversals, upgrades,
/// family sharing, removals); every read is made three times on the cached one, so that it misses,
/// fills (a history is kept on its user's second miss) and then hits.
@Suite("History cache: the answers of no cache")
struct HistoryCacheEquivalenceTests {
  private static let users = ["u0", "u1", "u2", "u3"]

  private static func open(_ dir: TemporaryDirectory, _ name: String, cacheBytes: Int) throws -> SQLiteStore {
    try SQLiteStore(
      configuration: .init(
        path: dir.file(name), keyring: testKeyring, readerCount: 2, historyCacheBytes: cacheBytes))
  }

  @Test(
    "random writes, notifications, erasures and reads: every cached read equals the uncached read",
    arguments: 0..<12)
  func interleavings(seed: Int) async throws {
    let dir = TemporaryDirectory()
    // A large cache keeps every user (hits); a tiny one evicts all the time (refills).
    let cached = try Self.open(dir, "cached.sqlite", cacheBytes: seed.isMultiple(of: 2) ? 32 << 20 : 24 << 10)
    let plain = try Self.open(dir, "plain.sqlite", cacheBytes: 0)
    defer {
      cached.close()
      plain.close()
    }
    try await Fixture.seed(cached)
    try await Fixture.seed(plain)
    var g = SeededGenerator(seed: UInt64(seed) &* 7_919 &+ 1)
    var copies = (0..<3).flatMap { CopyPermutationCase(seed: UInt64(seed * 3 + $0)).updates }[...]
    var operations = (writes: 0, erasures: 0, reads: 0)
    for step in 0..<60 {
      let userId = Self.users.randomElement(using: &g)!
      let user = Fixture.user(userId)
      switch Int.random(in: 0..<10, using: &g) {
      case 0..<4 where !copies.isEmpty:
        var update = copies.removeFirst()
        update.user = user
        if Bool.random(using: &g) {
          _ = try await cached.ingest([update], atMs: Fixture.now)
          _ = try await plain.ingest([update], atMs: Fixture.now)
        } else {
          let id = "n\(step)"
          _ = try await cached.applyNotification(appId: "a1", notificationId: id, receivedMs: 1, updates: [update])
          _ = try await plain.applyNotification(appId: "a1", notificationId: id, receivedMs: 1, updates: [update])
        }
        operations.writes += 1
      case 4:
        _ = try await cached.deleteUsers(appId: "a1", userIds: [userId])
        _ = try await plain.deleteUsers(appId: "a1", userIds: [userId])
        operations.erasures += 1
      default:
        let expected = try await plain.history(of: user)
        for attempt in 0..<3 {
          #expect(try await cached.history(of: user) == expected, "seed \(seed), step \(step), read \(attempt)")
        }
        let expectedAll = try await plain.histories(appId: "a1", environment: .production, userIds: Self.users)
        #expect(
          try await cached.histories(appId: "a1", environment: .production, userIds: Self.users) == expectedAll,
          "seed \(seed), step \(step)")
        operations.reads += 1
      }
    }
    #expect(operations.writes > 0 && operations.reads > 0, "\(operations)")
  }
}
