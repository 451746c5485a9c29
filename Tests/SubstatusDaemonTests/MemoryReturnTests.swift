import Synchronization
import Testing

@testable import SubstatusDaemon

/// When ``MemoryReturn`` trims: after a storm has subsided, with the RSS grown past its threshold,
/// and only then, including a storm shorter than the interval between two checks.
@Suite struct MemoryReturnTests {
  static let mib = 1 << 20

  /// A `MemoryReturn` whose RSS readings are `rss` in MiB, one per reading; the last repeats.
  func memoryReturn(_ rss: [Int]) -> MemoryReturn {
    let readings = Mutex(rss.map { $0 * Self.mib }[...])
    return MemoryReturn(interval: 0) {
      readings.withLock { $0.count > 1 ? $0.removeFirst() : $0.first! }
    }
  }

  @Test func aBurstBetweenTwoChecksIsSeenThroughItsPeak() {
    // Resting at 50 MiB; a burst of 200 calls came and went between two checks (the load now is
    // 2 at both), leaving the RSS at 75 MiB.
    let memory = memoryReturn([50, 75, 50])
    memory.check(load: .init(now: 2, peak: 2))
    memory.check(load: .init(now: 2, peak: 202))
    #expect(memory.trims == 1)
  }

  @Test func aBurstSeenOnlyAsTheLoadNowIsMissed() {
    // The same readings without the peak: the load never looked like a storm.
    let memory = memoryReturn([50, 75, 50])
    memory.check(load: .init(now: 2, peak: 2))
    memory.check(load: .init(now: 2, peak: 2))
    #expect(memory.trims == 0)
  }

  @Test(arguments: [
    // (load now, RSS after the storm in MiB): still busy, or grown less than the threshold.
    (150, 75), (2, 55),
  ])
  func noTrimWhileBusyOrBelowTheThreshold(now: Int, rss: Int) {
    let memory = memoryReturn([50, rss])
    memory.check(load: .init(now: 2, peak: 2))
    memory.check(load: .init(now: now, peak: 202))
    #expect(memory.trims == 0)
  }

  @Test func oneTrimPerStorm() {
    // After a trim the storm's peak is forgotten: a steady RSS that stays high (a cache filling)
    // is not trimmed again at every check.
    let memory = memoryReturn([50, 75, 70, 70, 70])
    memory.check(load: .init(now: 2, peak: 2))
    memory.check(load: .init(now: 2, peak: 202))
    memory.check(load: .init(now: 2, peak: 2))
    memory.check(load: .init(now: 2, peak: 2))
    #expect(memory.trims == 1)
  }
}
