// The change feed that keeps each instance's history cache in step with the other instances'
// writes (docs/evaluation-cache.md, "Other instances").
//
// Every transaction that changes users' histories, on any instance, inserts one `user_changes` row
// per user as its last step, under the event log's advisory lock (so sequences become visible in
// increasing order, as the event log's do), and `NOTIFY substatus_user_changes`. An instance with a
// history cache listens on a connection of its own: on a notification, or after `pollInterval` at
// the latest, it reads the rows after the last sequence it saw and invalidates those users. When it
// may have missed rows (its connection was lost, or rows it had not read were pruned) or cannot
// name a row's user (erased since: rows hold user keys, never ids), it clears its whole cache. Staleness across instances is thus bounded by the poll interval (about one
// second); within an instance there is none (its writes invalidate after their commit).
import CLibPQ
import Dispatch
import Foundation
import Glibc
import SubscriptionDomain
import SubscriptionStorage
import Synchronization

/// The change feed's statements.
enum PostgresChangeQueries {
  /// The channel every instance listens on.
  static let channel = "substatus_user_changes"
  /// Records the changed users' keys ($1) after taking the event log's advisory lock ($2; held
  /// until commit, so the sequences become visible in order), and notifies the listeners at
  /// commit. Returns the last sequence taken.
  static let record = """
    WITH changed AS (
      INSERT INTO user_changes(user_key)
      SELECT c.user_key FROM (SELECT pg_advisory_xact_lock($2)) AS l, unnest($1::bigint[]) AS c(user_key)
      RETURNING sequence)
    SELECT MAX(sequence), pg_notify('substatus_user_changes', '') IS NULL FROM changed
    """
  /// Deletes the rows older than $1 seconds and raises the watermark of what was pruned.
  static let prune = """
    WITH pruned AS (
      DELETE FROM user_changes WHERE changed_at <= now() - make_interval(secs => $1) RETURNING sequence)
    UPDATE user_changes_pruned SET through = GREATEST(through, (SELECT COALESCE(MAX(sequence), 0) FROM pruned))
    """
  /// Where a new listener starts: the last sequence recorded or pruned.
  static let start = """
    SELECT GREATEST((SELECT through FROM user_changes_pruned),
      (SELECT COALESCE(MAX(sequence), 0) FROM user_changes))::BIGINT
    """
  /// The pruning watermark and the rows after sequence $1 (at most $2), with their users' ids, in
  /// one snapshot. A row whose user is gone (erased since) has no ids.
  static let read = """
    SELECT p.through, c.sequence, u.app_id, u.environment, u.user_id
    FROM user_changes_pruned p LEFT JOIN LATERAL (
      SELECT sequence, user_key FROM user_changes WHERE sequence > $1 ORDER BY sequence LIMIT $2) c ON true
    LEFT JOIN users u ON u.user_key = c.user_key
    ORDER BY c.sequence
    """
}

extension PostgresStore {
  /// How often, in sequences, a writer prunes the feed (in its transaction): about once per this
  /// many changed users.
  static let userChangesPruneEvery: Int64 = 4096
  /// How long change rows are kept: far beyond the poll interval, so that only an instance stalled
  /// for minutes misses some (and then clears its cache).
  static let userChangesRetentionSeconds = 300

  /// Records the users of `userKeys` as changed by the current transaction (its last step; see the
  /// file's comment) and, about once every ``userChangesPruneEvery`` sequences, prunes the rows
  /// older than ``userChangesRetentionSeconds``. Every instance records, its own cache on or off.
  static func recordUserChanges(_ db: PGConnection, _ userKeys: [Int64]) throws(StoreError) {
    if userKeys.isEmpty { return }
    let last = try db.first(
      PostgresChangeQueries.record, [.intArray(userKeys), .int(PostgresSchema.eventLogLock)])?.int(0) ?? 0
    let first = last - Int64(userKeys.count) + 1
    if (first - 1) / userChangesPruneEvery != last / userChangesPruneEvery {
      try db.run(PostgresChangeQueries.prune, [.int(Int64(userChangesRetentionSeconds))])
    }
  }

  /// Prunes the change feed's rows older than `olderThanSeconds` now (writers do it as they go).
  func pruneUserChanges(olderThanSeconds: Int) async throws(StoreError) {
    try await pool.run { db throws(StoreError) in
      _ = try db.run(PostgresChangeQueries.prune, [.int(Int64(olderThanSeconds))])
    }
  }
}

/// The listening side of the change feed: one thread owning one connection, invalidating the
/// history cache of its store.
final class UserChangeFeed: Sendable {
  /// What the feed has done (for tests; `/metrics` shows the cache's own counters).
  struct Statistics: Sendable, Hashable {
    /// Change rows read (each invalidates its user, or clears the cache when the user is gone).
    var changesRead: Int
    /// Whole-cache clears (start and reconnects, lost connection, pruned rows not read, erased
    /// users).
    var clears: Int
    /// The last sequence read.
    var lastSequence: Int64
  }

  /// The `application_name` of the listening session (unique per store: tests find it by it).
  let applicationName = "substatus-feed-" + UUID().uuidString.prefix(8).lowercased()
  private let conninfo: String
  private let cache: HistoryCache
  private let pollInterval: Double
  private let state = Mutex(Statistics(changesRead: 0, clears: 0, lastSequence: 0))
  private let stopped = Atomic<Bool>(false)
  /// A pipe whose write end wakes the thread from its wait (close).
  private let wake: (read: Int32, write: Int32)
  private let finished = DispatchSemaphore(value: 0)
  /// Rows read per statement.
  private static let page: Int64 = 4096

  /// Connects, listens, reads where the feed stands and starts the thread.
  /// - Throws: `unavailable` when the server cannot be reached.
  init(conninfo: String, cache: HistoryCache, pollInterval: Double) throws(StoreError) {
    self.conninfo = conninfo
    self.cache = cache
    self.pollInterval = pollInterval
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw StoreError(.internalError, "pipe() failed: errno \(errno)") }
    wake = (fds[0], fds[1])
    let connection = try connect()  // on failure, deinit closes the pipe
    let thread = Thread { [self] in
      run(connection)
      finished.signal()
    }
    thread.start()
  }

  /// A listening session; the cache is cleared once the feed's position is read, so nothing cached
  /// before it (and no read whose fill ticket predates it) survives.
  private func connect() throws(StoreError) -> PGConnection {
    let connection = try PGConnection(conninfo: conninfo)
    try connection.execute("SET application_name TO '\(applicationName)'; LISTEN \(PostgresChangeQueries.channel)")
    let start = try connection.first(PostgresChangeQueries.start)?.int(0) ?? 0
    clear(at: start)
    return connection
  }

  /// Clears the cache (counted first: a test that sees the cache cleared sees the count).
  private func clear(at sequence: Int64?) {
    state.withLock { s in
      s.clears += 1
      if let sequence { s.lastSequence = sequence }
    }
    cache.clear()
  }

  var statistics: Statistics { state.withLock { $0 } }

  /// The thread: wait for a notification, the poll interval or the stop; read; on a lost session
  /// clear the cache, then reconnect (clearing again each poll interval until it succeeds).
  private func run(_ first: PGConnection) {
    var connection: PGConnection? = first
    // A notification that arrived during the last read was taken off the socket by libpq with
    // the read's results: the socket will not wake the wait for it, so read again at once.
    var notified = false
    while !stopped.load(ordering: .acquiring) {
      guard let db = connection else {
        clear(at: nil)
        connection = try? connect()
        if connection == nil { waitForWake(socket: -1) }
        continue
      }
      if !notified { waitForWake(socket: db.socket) }
      if stopped.load(ordering: .acquiring) { break }
      guard db.consumeInput() else {
        connection = nil
        clear(at: nil)
        continue
      }
      _ = db.takeNotifications()  // the read below covers them
      guard (try? read(db)) != nil else {
        connection = nil
        clear(at: nil)
        continue
      }
      notified = db.takeNotifications() > 0
    }
  }

  /// Reads the rows after the last sequence, page by page, and invalidates their users; clears the
  /// whole cache when rows it had not read were pruned, or when a row's user is gone (erased: its
  /// ids are no longer stored anywhere).
  private func read(_ db: PGConnection) throws(StoreError) {
    while true {
      let after = state.withLock { $0.lastSequence }
      let rows = try db.query(PostgresChangeQueries.read, [.int(after), .int(Self.page)])
      guard let through = rows.first?.int(0) else { return }
      let changes = rows.filter { !$0.isNull(1) }
      let newest = changes.last?.int(1) ?? after
      let users = changes.compactMap { r -> UserKey? in
        guard !r.isNull(2), let environment = Environment(rawValue: r.text(3)) else { return nil }
        return UserKey(appId: r.text(2), environment: environment, userId: r.text(4))
      }
      state.withLock { s in s.changesRead += changes.count }
      if through > after || users.count < changes.count {
        clear(at: max(through, newest))
      } else {
        state.withLock { s in s.lastSequence = newest }
        cache.invalidate(users)
      }
      if changes.count < Self.page { return }
    }
  }

  /// Waits until the socket is readable, the poll interval passes or the feed is stopped.
  private func waitForWake(socket: Int32) {
    var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
    if socket >= 0 { fds.append(pollfd(fd: socket, events: Int16(POLLIN), revents: 0)) }
    _ = poll(&fds, nfds_t(fds.count), Int32(pollInterval * 1000))
  }

  /// Stops the thread (waiting for it unless `wait` is false) and closes its connection.
  func stop(wait: Bool = true) {
    guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
    var byte: UInt8 = 1
    _ = Glibc.write(wake.write, &byte, 1)
    if wait { finished.wait() }
  }

  deinit {
    Glibc.close(wake.read)
    Glibc.close(wake.write)
  }
}
