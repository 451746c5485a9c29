import SubscriptionDomain
import Synchronization
import SubstatusMetrics

/// Decoded user histories kept in memory, so that a read of a user whose data has not changed skips
/// the database read and the decoding of its rows (`docs/evaluation-cache.md`). Shared by the SQLite
/// and PostgreSQL stores.
///
/// Consistency, as for ``ReadCache`` and ``UserKeyCache``: every write that changes users' purchase
/// data invalidates them after its commit and before it returns, so a caller always reads its own
/// writes. A reader calls ``lookup(_:)`` before its read transaction; a miss hands it a
/// ``FillTicket`` holding the user's shard generation, and ``fill(_:_:payloadBytes:)`` keeps the
/// history only if no invalidation of that shard happened since: a history read from a snapshot
/// older than a write is never cached after the write's invalidation. The SQLite store assumes it is
/// the only writer of its file (how substatusd runs on SQLite); the PostgreSQL store also
/// invalidates what other instances changed, from its change feed, and calls ``clear()`` when it
/// may have missed some of it.
///
/// A miss costs what the read costs anyway plus one hash of the key and one lock: the key is hashed
/// once per call (the shard, the dictionary probe, the admission bit and the fill all use that
/// hash), and nothing is allocated. A history is kept only on its user's second miss within a
/// window of recent misses (a per-shard bit set, the "doorkeeper"): on reads without locality (each
/// user read once in a long while) the cache fills almost nothing, and the reads that would only
/// churn it cost no decoding estimate, no insert and no eviction.
///
/// Bounded in bytes (an estimate of the decoded values: their layout plus the encoded rows' size),
/// sharded by key hash so concurrent readers rarely meet on a lock. Each shard keeps two
/// generations: when the newer one exceeds half the shard's budget it becomes the older one and the
/// oldest is dropped (freed after the lock is released); a hit in the older generation moves the
/// entry to the newer one, so recently used histories stay.
package final class HistoryCache: Sendable {
  /// A key with its hash computed once (hashing a `UserKey` hashes its strings).
  package struct Key: Hashable, Sendable {
    package let user: UserKey
    package let hash: Int

    package init(_ user: UserKey) {
      self.user = user
      hash = user.hashValue
    }

    package static func == (a: Key, b: Key) -> Bool { a.hash == b.hash && a.user == b.user }
    package func hash(into hasher: inout Hasher) { hasher.combine(hash) }
  }

  /// What a miss hands to the reader: where to put the history it reads, if it should.
  package struct FillTicket: Sendable {
    package let key: Key
    /// The shard's generation when the cache was consulted (before the read's snapshot).
    package let generation: UInt64
  }

  /// The answer of ``lookup(_:)``.
  package enum Lookup: Sendable {
    /// The cached history.
    case hit(UserHistory)
    /// Not cached: read it, and fill with the ticket when there is one (the user's second miss).
    case miss(FillTicket?)
  }

  private struct Entry {
    var history: UserHistory
    var bytes: Int
  }

  private struct Shard {
    var current: [Key: Entry] = [:]
    var previous: [Key: Entry] = [:]
    var currentBytes = 0
    var previousBytes = 0
    var generation: UInt64 = 0
    /// The doorkeeper: one bit per hash slot, set by a user's first miss in this window.
    var seen: [UInt64]
    /// Bits set since the window began; at ``seenLimit`` the window restarts (cleared in place).
    var seenCount = 0

    init(seenWords: Int) { seen = Array(repeating: 0, count: seenWords) }

    /// Inserts; returns the generation it dropped, if any, to be freed outside the lock.
    mutating func insert(_ key: Key, _ entry: Entry, budget: Int) -> [Key: Entry]? {
      if let old = current.updateValue(entry, forKey: key) { currentBytes -= old.bytes }
      currentBytes += entry.bytes
      if let old = previous.removeValue(forKey: key) { previousBytes -= old.bytes }
      guard currentBytes > budget else { return nil }
      let dropped = previous
      previous = current
      previousBytes = currentBytes
      current = [:]
      currentBytes = 0
      return dropped
    }

    mutating func remove(_ key: Key) {
      if let old = current.removeValue(forKey: key) { currentBytes -= old.bytes }
      if let old = previous.removeValue(forKey: key) { previousBytes -= old.bytes }
    }

    /// Whether the slot's bit was already set (a second miss: admit); sets it otherwise.
    mutating func admits(_ slot: Int, limit: Int) -> Bool {
      let (word, bit) = (slot >> 6, UInt64(1) << UInt64(slot & 63))
      if seen[word] & bit != 0 {
        seen[word] &= ~bit
        return true
      }
      seen[word] |= bit
      seenCount += 1
      if seenCount >= limit {
        for i in seen.indices { seen[i] = 0 }
        seenCount = 0
      }
      return false
    }
  }

  /// What the cache did since the store opened, for `/metrics`.
  package struct Statistics: Sendable, Hashable {
    /// Reads answered from memory.
    package var hits: Int
    /// Reads that went to the database (the cache on).
    package var misses: Int
    /// Histories kept after a miss (a user's second miss in the doorkeeper's window).
    package var fills: Int
    /// Users invalidated by writes.
    package var invalidations: Int
    /// Whole clears (``HistoryCache/clear()``).
    package var clears: Int
    /// Histories held now.
    package var entries: Int
    /// Their estimated size.
    package var bytes: Int

    /// Counters and size as given.
    package init(hits: Int, misses: Int, fills: Int, invalidations: Int, clears: Int = 0, entries: Int, bytes: Int) {
      (self.hits, self.misses, self.fills, self.invalidations) = (hits, misses, fills, invalidations)
      (self.clears, self.entries, self.bytes) = (clears, entries, bytes)
    }
  }

  /// One shard's lock (a class: `Mutex` cannot be an array element).
  private final class ShardBox: Sendable {
    let state: Mutex<Shard>
    init(seenWords: Int) { state = Mutex(Shard(seenWords: seenWords)) }
  }

  private static let shardCount = 16
  /// The estimated size of a typical cached history, for sizing the doorkeeper's window: a little
  /// under `bench_e2e`'s (10 transactions and a renewal info: 6.7 KB estimated), so that the
  /// window errs on the long side.
  package static let typicalHistoryBytes = 4096
  private let shards: [ShardBox]
  private let hits = Atomic<Int>(0)
  private let misses = Atomic<Int>(0)
  private let fills = Atomic<Int>(0)
  private let invalidations = Atomic<Int>(0)
  private let clears = Atomic<Int>(0)
  /// Half a shard's share of the budget: the size of one generation.
  private let generationBudget: Int
  /// Bits of a shard's doorkeeper (a power of two) and how many are set before it restarts.
  private let seenSlots: Int
  private let seenLimit: Int
  /// Whether the cache is on (a budget above 0).
  package let isEnabled: Bool

  /// A cache of about `capacityBytes` (0 turns it off).
  package init(capacityBytes: Int) {
    let enabled = capacityBytes > 0
    isEnabled = enabled
    generationBudget = max(0, capacityBytes) / (2 * Self.shardCount)
    // The window: about as many first misses as the shard holds typical histories, so a user read
    // again while its history would still be cached gets in. Four bits per first miss of that
    // window keep false admissions (two users on one bit) rare.
    let window = max(64, max(0, capacityBytes) / Self.shardCount / Self.typicalHistoryBytes)
    var slots = 64
    while slots < 4 * window { slots <<= 1 }
    seenSlots = enabled ? slots : 64
    seenLimit = window
    let words = enabled ? slots / 64 : 1
    shards = (0..<Self.shardCount).map { _ in ShardBox(seenWords: words) }
  }

  private func shard(_ key: Key) -> ShardBox {
    shards[Int(UInt(bitPattern: key.hash) % UInt(Self.shardCount))]
  }

  /// The user's cached history, or on a miss the ticket for filling it (counted as a hit or a miss).
  /// Call it before the read transaction whose history may fill the cache. Turned off: a miss
  /// without a ticket, no lock taken.
  package func lookup(_ user: UserKey) -> Lookup {
    guard isEnabled else { return .miss(nil) }
    let key = Key(user)
    let budget = generationBudget
    let slot = Int((UInt(bitPattern: key.hash) >> 8) & UInt(seenSlots - 1))
    let limit = seenLimit
    var dropped: [Key: Entry]?
    let found = shard(key).state.withLock { s -> Lookup in
      if let entry = s.current[key] { return .hit(entry.history) }
      if let entry = s.previous[key] {
        dropped = s.insert(key, entry, budget: budget)
        return .hit(entry.history)
      }
      return .miss(s.admits(slot, limit: limit) ? FillTicket(key: key, generation: s.generation) : nil)
    }
    _ = dropped
    if case .hit = found {
      hits.wrappingAdd(1, ordering: .relaxed)
    } else {
      misses.wrappingAdd(1, ordering: .relaxed)
    }
    return found
  }

  /// The user's cached history, if any (counted as a hit or a miss; a miss may admit the user).
  package func history(of user: UserKey) -> UserHistory? {
    if case .hit(let history) = lookup(user) { return history }
    return nil
  }

  /// Keeps a history read in a snapshot taken after the ticket's lookup, unless the user's shard
  /// was invalidated since, or it alone exceeds a generation's budget.
  /// - Parameter payloadBytes: the size of its rows' payloads (for the size estimate).
  package func fill(_ ticket: FillTicket, _ history: UserHistory, payloadBytes: Int) {
    let bytes = Self.estimatedBytes(history, payloadBytes: payloadBytes)
    guard isEnabled, bytes <= generationBudget else { return }
    let budget = generationBudget
    var dropped: [Key: Entry]?
    let kept = shard(ticket.key).state.withLock { s -> Bool in
      guard s.generation == ticket.generation else { return false }
      dropped = s.insert(ticket.key, Entry(history: history, bytes: bytes), budget: budget)
      return true
    }
    _ = dropped  // the dropped generation is freed here, after the lock
    if kept { fills.wrappingAdd(1, ordering: .relaxed) }
  }

  /// Forgets users whose data a committed write changed (call after the commit, before returning).
  package func invalidate(_ users: some Sequence<UserKey>) {
    guard isEnabled else { return }
    var count = 0
    for user in users {
      count += 1
      let key = Key(user)
      shard(key).state.withLock { s in
        s.generation &+= 1
        s.remove(key)
      }
    }
    invalidations.wrappingAdd(count, ordering: .relaxed)
  }

  /// Forgets every history and refuses every fill whose ticket predates the call (the PostgreSQL
  /// store, when it may have missed other instances' changes).
  package func clear() {
    guard isEnabled else { return }
    for shard in shards {
      var dropped: (current: [Key: Entry], previous: [Key: Entry])?
      shard.state.withLock { s in
        s.generation &+= 1
        dropped = (s.current, s.previous)
        (s.current, s.previous, s.currentBytes, s.previousBytes) = ([:], [:], 0, 0)
      }
      _ = dropped  // freed here, after the lock
    }
    clears.wrappingAdd(1, ordering: .relaxed)
  }

  /// Forgets every user of `appId` named in `userIds`, in every environment (erasure).
  package func invalidate(appId: String, userIds: [String]) {
    invalidate(
      userIds.flatMap { id in
        Environment.allCases.map { UserKey(appId: appId, environment: $0, userId: id) }
      })
  }

  /// The counters and the current size.
  package var statistics: Statistics {
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
      fills: fills.load(ordering: .relaxed), invalidations: invalidations.load(ordering: .relaxed),
      clears: clears.load(ordering: .relaxed), entries: entries, bytes: bytes)
  }

  /// The counters and the size as metric families (for `/metrics`).
  /// - Parameter database: the store's database, named in the help of the misses.
  package func metricFamilies(database: String) -> [MetricFamily] {
    let s = statistics
    return [
      .counter("substatus_history_cache_hits_total", "User history reads answered from memory.", s.hits),
      .counter("substatus_history_cache_misses_total", "User history reads that went to \(database).", s.misses),
      .counter(
        "substatus_history_cache_fills_total",
        "User histories kept after a miss (a user's second miss within the admission window).", s.fills),
      .counter(
        "substatus_history_cache_invalidations_total",
        "Users dropped from the history cache by writes (PostgreSQL: also other instances' writes).", s.invalidations),
      .counter(
        "substatus_history_cache_clears_total",
        "Whole clears of the history cache (PostgreSQL: its change feed lost its connection or missed pruned changes).",
        s.clears),
      .gauge("substatus_history_cache_entries", "User histories held in memory.", s.entries),
      .gauge("substatus_history_cache_bytes", "Estimated size of the user histories held in memory.", s.bytes),
    ]
  }

  /// The estimated in-memory size of a decoded history whose rows' payloads held `payloadBytes`.
  package static func estimatedBytes(_ history: UserHistory, payloadBytes: Int) -> Int {
    MemoryLayout<UserHistory>.stride + 3 * (history.user.appId.utf8.count + history.user.userId.utf8.count)
      + history.transactions.count * MemoryLayout<Transaction>.stride
      + history.renewalInfos.count * MemoryLayout<RenewalInfo>.stride + 2 * payloadBytes
  }
}
