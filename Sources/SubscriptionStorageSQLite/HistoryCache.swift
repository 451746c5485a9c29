import SubscriptionDomain
import SubscriptionStorage
import Synchronization

/// Decoded user histories kept in memory, so that a read of a user whose data has not changed skips
/// the SQLite read and the decoding of its rows (`docs/evaluation-cache.md`).
///
/// Consistency, as for ``ReadCache`` and ``UserKeyCache``: every write that changes users' purchase
/// data invalidates them after its commit and before it returns, so a caller always reads its own
/// writes. A reader takes the ``generation(of:)`` of a user before its read transaction and passes
/// it to ``fill(_:_:bytes:generation:)``, which keeps the history only if no invalidation of that
/// user's shard happened since: a history read from a snapshot older than a write is never cached
/// after the write's invalidation. The store assumes it is the only writer of its file (how
/// substatusd runs on SQLite).
///
/// Bounded in bytes (an estimate of the decoded values: their layout plus the encoded rows' size),
/// sharded by key hash so concurrent readers rarely meet on a lock. Each shard keeps two
/// generations: when the newer one exceeds half the shard's budget it becomes the older one and the
/// oldest is dropped; a hit in the older generation moves the entry to the newer one, so recently
/// used histories stay.
final class HistoryCache: Sendable {
  private struct Entry {
    var history: UserHistory
    var bytes: Int
  }

  private struct Shard {
    var current: [UserKey: Entry] = [:]
    var previous: [UserKey: Entry] = [:]
    var currentBytes = 0
    var previousBytes = 0
    var generation: UInt64 = 0

    mutating func insert(_ user: UserKey, _ entry: Entry, budget: Int) {
      if let old = current.updateValue(entry, forKey: user) { currentBytes -= old.bytes }
      currentBytes += entry.bytes
      if let old = previous.removeValue(forKey: user) { previousBytes -= old.bytes }
      if currentBytes > budget {
        previous = current
        previousBytes = currentBytes
        current = [:]
        currentBytes = 0
      }
    }

    mutating func remove(_ user: UserKey) {
      if let old = current.removeValue(forKey: user) { currentBytes -= old.bytes }
      if let old = previous.removeValue(forKey: user) { previousBytes -= old.bytes }
    }
  }

  /// What the cache did since the store opened, for `/metrics`.
  struct Statistics: Sendable, Hashable {
    /// Reads answered from memory.
    var hits: Int
    /// Reads that went to SQLite (the cache on).
    var misses: Int
    /// Users invalidated by writes.
    var invalidations: Int
    /// Histories held now.
    var entries: Int
    /// Their estimated size.
    var bytes: Int
  }

  /// One shard's lock (a class: `Mutex` cannot be an array element).
  private final class ShardBox: Sendable {
    let state = Mutex(Shard())
  }

  private static let shardCount = 16
  private let shards: [ShardBox]
  private let hits = Atomic<Int>(0)
  private let misses = Atomic<Int>(0)
  private let invalidations = Atomic<Int>(0)
  /// Half a shard's share of the budget: the size of one generation.
  private let generationBudget: Int
  /// Whether the cache is on (a budget above 0).
  let isEnabled: Bool

  /// A cache of about `capacityBytes` (0 turns it off).
  init(capacityBytes: Int) {
    isEnabled = capacityBytes > 0
    generationBudget = max(0, capacityBytes) / (2 * Self.shardCount)
    shards = (0..<Self.shardCount).map { _ in ShardBox() }
  }

  private func shard(_ user: UserKey) -> ShardBox {
    shards[Int(UInt(bitPattern: user.hashValue) % UInt(Self.shardCount))]
  }

  /// The user's cached history, if any (counted as a hit or a miss).
  func history(of user: UserKey) -> UserHistory? {
    guard isEnabled else { return nil }
    let budget = generationBudget
    let found = shard(user).state.withLock { s -> UserHistory? in
      if let entry = s.current[user] { return entry.history }
      guard let entry = s.previous[user] else { return nil }
      s.insert(user, entry, budget: budget)
      return entry.history
    }
    if found == nil {
      misses.wrappingAdd(1, ordering: .relaxed)
    } else {
      hits.wrappingAdd(1, ordering: .relaxed)
    }
    return found
  }

  /// The generation of the user's shard: read it before the read transaction whose history may fill
  /// the cache.
  func generation(of user: UserKey) -> UInt64 {
    guard isEnabled else { return 0 }
    return shard(user).state.withLock { $0.generation }
  }

  /// Keeps a history read in a snapshot taken after `generation` was read, unless the user's shard
  /// was invalidated since, or it alone exceeds a generation's budget.
  func fill(_ user: UserKey, _ history: UserHistory, bytes: Int, generation: UInt64) {
    guard isEnabled, bytes <= generationBudget else { return }
    let budget = generationBudget
    shard(user).state.withLock { s in
      if s.generation == generation { s.insert(user, Entry(history: history, bytes: bytes), budget: budget) }
    }
  }

  /// Forgets users whose data a committed write changed (call after the commit, before returning).
  func invalidate(_ users: some Sequence<UserKey>) {
    guard isEnabled else { return }
    var count = 0
    for user in users {
      count += 1
      shard(user).state.withLock { s in
        s.generation &+= 1
        s.remove(user)
      }
    }
    invalidations.wrappingAdd(count, ordering: .relaxed)
  }

  /// Forgets every user of `appId` named in `userIds`, in every environment (erasure).
  func invalidate(appId: String, userIds: [String]) {
    invalidate(
      userIds.flatMap { id in
        Environment.allCases.map { UserKey(appId: appId, environment: $0, userId: id) }
      })
  }

  /// The counters and the current size.
  var statistics: Statistics {
    var entries = 0
    var bytes = 0
    for shard in shards {
      shard.state.withLock { s in
        entries += s.current.count + s.previous.count
        bytes += s.currentBytes + s.previousBytes
      }
    }
    return Statistics(
      hits: hits.load(ordering: .relaxed), misses: misses.load(ordering: .relaxed),
      invalidations: invalidations.load(ordering: .relaxed), entries: entries, bytes: bytes)
  }

  /// The estimated in-memory size of a decoded history whose rows' payloads held `payloadBytes`.
  static func estimatedBytes(_ history: UserHistory, payloadBytes: Int) -> Int {
    MemoryLayout<UserHistory>.stride + 3 * (history.user.appId.utf8.count + history.user.userId.utf8.count)
      + history.transactions.count * MemoryLayout<Transaction>.stride
      + history.renewalInfos.count * MemoryLayout<RenewalInfo>.stride + 2 * payloadBytes
  }
}
