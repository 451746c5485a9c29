import SubscriptionDomain
import SubscriptionStorage
import Synchronization

/// In-process cache of the small, hot, rarely changed records every RPC reads: tenants, apps (with
/// policy and secret fingerprint), catalogs, API keys by hash. Purchase data is never cached.
///
/// Consistency: every write through this store invalidates the entries it changes before the write
/// call returns, so a caller always reads its own writes. A read that raced with a write does not
/// fill the cache (a generation counter, bumped by each invalidation, must be unchanged between the
/// start of the read and the fill). The cache assumes this store is the only writer of its file,
/// which is how substatusd runs; another process's admin changes would only be seen after restart.
final class ReadCache: Sendable {
  private struct State {
    var generation: UInt64 = 0
    var tenants: [String: TenantRecord] = [:]
    var apps: [String: AppRecord] = [:]
    var products: [String: [Product]] = [:]
    var keysByHash: [[UInt8]: ApiKeyRecord] = [:]
  }
  private let state = Mutex(State())

  /// The generation to pass to a later fill.
  var generation: UInt64 { state.withLock { $0.generation } }

  func tenant(_ id: String) -> TenantRecord? { state.withLock { $0.tenants[id] } }
  func app(_ id: String) -> AppRecord? { state.withLock { $0.apps[id] } }
  func products(_ appId: String) -> [Product]? { state.withLock { $0.products[appId] } }
  func key(hash: [UInt8]) -> ApiKeyRecord? { state.withLock { $0.keysByHash[hash] } }

  private func fill(_ generation: UInt64, _ body: (inout State) -> Void) {
    state.withLock { s in
      if s.generation == generation { body(&s) }
    }
  }

  func fill(_ generation: UInt64, tenant: TenantRecord) {
    fill(generation) { $0.tenants[tenant.tenantId] = tenant }
  }
  func fill(_ generation: UInt64, app: AppRecord) { fill(generation) { $0.apps[app.appId] = app } }
  func fill(_ generation: UInt64, products: [Product], appId: String) {
    fill(generation) { $0.products[appId] = products }
  }
  func fill(_ generation: UInt64, key: ApiKeyRecord) {
    fill(generation) { $0.keysByHash[key.keyHash] = key }
  }

  func invalidate(tenant id: String) {
    state.withLock { s in
      s.generation &+= 1
      s.tenants[id] = nil
    }
  }

  func invalidate(app id: String) {
    state.withLock { s in
      s.generation &+= 1
      s.apps[id] = nil
      s.products[id] = nil
    }
  }

  func invalidateKeys() {
    state.withLock { s in
      s.generation &+= 1
      s.keysByHash = [:]
    }
  }
}

/// The `user_key` of users already read, so that the hot path's history read skips the `users`
/// index lookup. Only keys seen in a committed snapshot (by a reader) are added. A user's key never
/// changes; it is deleted only by an erasure (``SQLiteStore/deleteUsers(appId:userIds:)``), which
/// empties this cache after its commit and bumps ``epoch``: a reader passes the epoch it read
/// before its snapshot to ``insert(_:_:epoch:)``, so a key read from a snapshot older than the
/// erasure is never cached after it. Absent users are not cached: they may appear.
///
/// Bounded: two generations of at most `capacity / 2` entries each; when the newer one is full it
/// becomes the older one and the oldest generation is dropped, so recently used keys stay.
///
/// Compact: an entry holds its app as a small number (app ids are interned; apps are few) and a
/// user id that is a canonical lowercase UUID, what apps usually send, as its 16 bytes; any other
/// user id as its string. Both forms are exact (two users share an entry only when their ids are
/// equal), and an entry takes about a third of the memory of one keyed by the strings.
final class UserKeyCache: Sendable {
  private struct State {
    var current: [CompactUserKey: Int64] = [:]
    var previous: [CompactUserKey: Int64] = [:]
    var apps: [String: UInt32] = [:]
    var epoch: UInt64 = 0

    mutating func insert(_ user: CompactUserKey, _ key: Int64, _ generationSize: Int) {
      if current.count >= generationSize {
        previous = current
        current = [:]
        current.reserveCapacity(generationSize)
      }
      current[user] = key
    }

    /// The cache's form of `user`; `nil` when its app was never interned (nothing of it is held)
    /// and `intern` is false.
    mutating func compact(_ user: UserKey, intern: Bool) -> CompactUserKey? {
      let app: UInt32
      if let known = apps[user.appId] {
        app = known
      } else {
        guard intern else { return nil }
        app = UInt32(truncatingIfNeeded: apps.count)
        apps[user.appId] = app
      }
      return CompactUserKey(app: app, environment: user.environment, user: .init(user.userId))
    }
  }
  private let state = Mutex(State())
  private let generationSize: Int

  /// A cache of at most `capacity` keys; 0 disables it.
  init(capacity: Int) { generationSize = max(0, capacity / 2) }

  func key(of user: UserKey) -> Int64? {
    guard generationSize > 0 else { return nil }
    return state.withLock { s -> Int64? in
      guard let compact = s.compact(user, intern: false) else { return nil }
      if let key = s.current[compact] { return key }
      guard let key = s.previous[compact] else { return nil }
      s.insert(compact, key, generationSize)
      return key
    }
  }

  /// The current epoch: read it before a read transaction whose keys may be inserted.
  var epoch: UInt64 { state.withLock { $0.epoch } }

  /// Caches a key read in a snapshot taken after `epoch` was read, unless an erasure happened since.
  func insert(_ user: UserKey, _ key: Int64, epoch: UInt64) {
    guard generationSize > 0 else { return }
    state.withLock { s in
      if s.epoch == epoch, let compact = s.compact(user, intern: true) { s.insert(compact, key, generationSize) }
    }
  }

  /// Forgets every key and starts a new epoch (after users were deleted).
  func removeAll() {
    state.withLock { s in
      s.epoch &+= 1
      s.current = [:]
      s.previous = [:]
    }
  }

  /// Keys held now (both generations).
  var count: Int { state.withLock { $0.current.count + $0.previous.count } }
}


/// A ``SubscriptionStorage/UserKey`` in ``UserKeyCache``: the interned app, the environment and
/// the user id, 16 bytes when it is a canonical lowercase UUID.
struct CompactUserKey: Hashable, Sendable {
  /// A user id: a canonical lowercase UUID's 128 bits, or any other id's text.
  enum UserID: Hashable, Sendable {
    case uuid(UInt64, UInt64)
    case text(String)

    /// `id` as 16 bytes when it is exactly `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lowercase hex
    /// (so that no other text maps to the same bytes), else as text.
    init(_ id: String) {
      if let bits = Self.uuidBits(id) { self = .uuid(bits.0, bits.1) } else { self = .text(id) }
    }

    private static func uuidBits(_ id: String) -> (UInt64, UInt64)? {
      guard id.utf8.count == 36 else { return nil }
      var high: UInt64 = 0
      var low: UInt64 = 0
      var digits = 0
      for (index, byte) in id.utf8.enumerated() {
        if index == 8 || index == 13 || index == 18 || index == 23 {
          guard byte == UInt8(ascii: "-") else { return nil }
          continue
        }
        let value: UInt8
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): value = byte &- UInt8(ascii: "a") &+ 10
        default: return nil
        }
        if digits < 16 { high = high << 4 | UInt64(value) } else { low = low << 4 | UInt64(value) }
        digits += 1
      }
      return (high, low)
    }
  }

  /// The app's number in the cache's interning table.
  var app: UInt32
  /// Production or sandbox.
  var environment: Environment
  /// The user id.
  var user: UserID
}
