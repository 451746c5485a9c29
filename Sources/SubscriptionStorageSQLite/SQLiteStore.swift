import CSQLite
import Foundation
import SubscriptionStorage
import Synchronization
import SubstatusMetrics

/// The embedded SQLite ``Store``: one file, WAL mode, one writer thread with group commit, a pool of
/// reader threads.
///
/// Durability: `PRAGMA synchronous=FULL` in WAL mode fsyncs the WAL at every commit, so a write that
/// was acknowledged survives a process crash *and* a power loss (`NORMAL` would only survive a process
/// crash). The fsync cost is paid once per group commit, not per caller: the writer takes every
/// pending write, runs each in its own savepoint inside one transaction and acknowledges them all
/// after the single commit.
///
/// Threads: writes go to the writer thread, reads to an idle reader thread (each with its own
/// connection, so reads run concurrently with the writer and with each other, on WAL snapshots); the
/// caller awaits a continuation. The exception is the hot path's per-user reads (``history(of:)``,
/// ``histories(appId:environment:userIds:)``): bounded index lookups of tens of microseconds, which
/// run on the caller's own thread on a connection it borrows (``Configuration/inlineReaderCount``),
/// and go to the reader threads only when every such connection is in use. Their caller's thread is
/// busy meanwhile, as with any computation of that size.
///
/// ```swift
/// let store = try SQLiteStore(configuration: .init(path: "data/substatus.sqlite", keyring: keyring))
/// defer { store.close() }
/// ```
public final class SQLiteStore: Sendable {
  /// How the store opens its database.
  public struct Configuration: Sendable {
    /// The database file; created if missing (its directory must exist).
    public var path: String
    /// The master keys that seal shared secrets; without them secrets cannot be set or read.
    public var keyring: MasterKeyring?
    /// Reader connections (and threads). Default 4.
    public var readerCount: Int
    /// Connections for the per-user reads run on the caller's thread (see ``SQLiteStore``); 0 sends
    /// every read to the reader threads. Default: twice the active processor count, at least 4.
    public var inlineReaderCount: Int
    /// The `synchronous` pragma. Default `.full` (see ``SQLiteStore``).
    public var synchronous: Synchronous
    /// How long a connection waits for a lock before failing (ms). Default 10 s.
    public var busyTimeoutMs: Int
    /// Page cache per connection, KiB. Default 8 MiB for the writer, a quarter per reader.
    public var cacheSizeKiB: Int
    /// Users whose internal key is kept in memory, so that reading their history skips one index
    /// lookup. Default 131,072; 0 turns the cache off. Full, it holds about 14 MB for user ids of
    /// up to 15 bytes and about 27 MB for UUID-length ids (about 114 and 223 bytes per user,
    /// measured with a dictionary of the same key type).
    public var userKeyCacheCapacity: Int
    /// About how many bytes of decoded user histories are kept in memory, so that reading a user
    /// whose data has not changed skips SQLite (`docs/evaluation-cache.md`). Default 0 (off: on
    /// random reads it hits too rarely to pay for its memory). With the cache on, this store must be the only writer of its file
    /// (as substatusd runs): another store's writes would not invalidate it.
    public var historyCacheBytes: Int
    /// Whether writes derive and log their events (docs/architecture.md "Events"). Always `true` in
    /// service; `false` is for benchmarks only (`substatus-webhook-bench --ingest --no-events`
    /// measures what the log adds to ingest): writes then log no event and no schedule, and the
    /// store's log misses what they changed.
    public var logsEvents = true

    /// The database file name inside a data directory.
    public static let databaseFileName = "substatus.sqlite"

    /// The configuration for `substatusd --data-dir DIR`: `DIR/substatus.sqlite`.
    /// - Parameters:
    ///   - directory: the data directory (must exist).
    ///   - keyring: the master keys (see ``MasterKeyring/load(environment:)``).
    public static func dataDirectory(_ directory: String, keyring: MasterKeyring?) -> Configuration
    {
      Configuration(path: directory + "/" + databaseFileName, keyring: keyring)
    }

    /// The `synchronous` setting.
    public enum Synchronous: String, Sendable {
      /// fsync the WAL at every commit: acknowledged writes survive power loss.
      case full = "FULL"
      /// No fsync at commit: acknowledged writes survive a process crash but maybe not a power loss.
      case normal = "NORMAL"
    }

    /// Creates a configuration.
    public init(
      path: String, keyring: MasterKeyring? = nil, readerCount: Int = 4,
      inlineReaderCount: Int = max(4, 2 * ProcessInfo.processInfo.activeProcessorCount),
      synchronous: Synchronous = .full, busyTimeoutMs: Int = 10_000, cacheSizeKiB: Int = 8192,
      userKeyCacheCapacity: Int = 131_072, historyCacheBytes: Int = 0
    ) {
      self.path = path
      self.keyring = keyring
      self.readerCount = readerCount
      self.inlineReaderCount = inlineReaderCount
      self.synchronous = synchronous
      self.busyTimeoutMs = busyTimeoutMs
      self.cacheSizeKiB = cacheSizeKiB
      self.userKeyCacheCapacity = userKeyCacheCapacity
      self.historyCacheBytes = historyCacheBytes
    }
  }

  /// The configuration it was opened with.
  public let configuration: Configuration
  /// The schema version of the open database.
  public let schemaVersion: Int
  let writer: SQLiteWriter
  let readers: SQLiteReaderPool
  let inlineReaders: SQLiteInlineReaders
  private let closed = Mutex(false)
  /// Last-used times already written per key id, so `touchApiKey` writes at most once a minute.
  let touchedKeys = Mutex<[String: Int64]>([:])
  /// Tenants, apps, catalogs and keys read on every RPC (see ``ReadCache``).
  let cache = ReadCache()
  /// The `user_key`s of users already read (see ``UserKeyCache``).
  let userKeys: UserKeyCache
  /// Decoded histories of users whose data has not changed since they were read.
  let historyCache: HistoryCache
  /// Catalogs for the event derivation of writes (see `EventCatalogCache`).
  let eventCatalogs = EventCatalogCache()
  /// The apps' policies for the per-user summaries of writes (see `PolicyCache`).
  let summaryPolicies = PolicyCache()

  /// Opens (creating if needed) the database, applies pending migrations and starts the threads.
  /// - Throws: `StoreError.newerSchema` for a database of a newer substatus, `.corrupt` for a file
  ///   that is not a database, `.unavailable` when it cannot be opened.
  public init(configuration: Configuration) throws(StoreError) {
    self.configuration = configuration
    userKeys = UserKeyCache(capacity: configuration.userKeyCacheCapacity)
    historyCache = HistoryCache(capacityBytes: configuration.historyCacheBytes)
    let writerConnection = try SQLiteConnection(
      path: configuration.path, readOnly: false, create: true)
    try Self.configure(writerConnection, configuration, cacheKiB: configuration.cacheSizeKiB)
    let mode = try writerConnection.first("PRAGMA journal_mode=WAL") { $0.text(0) }
    guard mode?.lowercased() == "wal" else {
      throw StoreError(
        .unavailable, "cannot enable WAL mode on \(configuration.path) (got \(mode ?? "nothing"))")
    }
    try writerConnection.execute("PRAGMA foreign_keys=ON")
    // After a burst the WAL is truncated back to this size when it restarts (64 MiB).
    try writerConnection.execute("PRAGMA journal_size_limit=67108864")
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    schemaVersion = try Schema.migrate(writerConnection, now: now)
    func readerConnections(_ count: Int) throws(StoreError) -> [SQLiteConnection] {
      var connections: [SQLiteConnection] = []
      for _ in 0..<count {
        let reader = try SQLiteConnection(path: configuration.path, readOnly: false, create: false)
        try Self.configure(reader, configuration, cacheKiB: max(1024, configuration.cacheSizeKiB / 4))
        try reader.execute("PRAGMA query_only=1")
        connections.append(reader)
      }
      return connections
    }
    let threadConnections = try readerConnections(max(1, configuration.readerCount))
    inlineReaders = SQLiteInlineReaders(connections: try readerConnections(max(0, configuration.inlineReaderCount)))
    writer = SQLiteWriter(connection: writerConnection, synchronous: configuration.synchronous.rawValue)
    readers = SQLiteReaderPool(connections: threadConnections)
  }

  /// Runs a short read on the caller's thread when an inline connection is idle, otherwise on a
  /// reader thread (see ``SQLiteStore``).
  ///
  /// On Swift's shared cooperative pool the task then yields: a task that reads in a loop would
  /// otherwise never suspend and keep its thread from every other task (4 such readers on 2 cores
  /// left writers waiting for their commit acknowledgment almost no turn: 267 instead of over
  /// 100,000 transactions/s in the storage benchmark). A task with an executor of its own (an
  /// event loop, for the RPCs placed there) does not: that executor serves one call after another
  /// and polls its sockets between them, and a yield would cost each call a few microseconds.
  func readInline<T: Sendable>(
    _ body: @escaping @Sendable (SQLiteConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    guard let result = try inlineReaders.read(body) else { return try await readers.read(body) }
    await yieldOnSharedPool()
    return result
  }

  /// Yields when the current task runs on Swift's shared cooperative pool (see
  /// ``readInline(_:)``): a read answered without suspending (inline, or from the history cache)
  /// must not let a task that reads in a loop keep its thread from writers.
  func yieldOnSharedPool() async {
    if withUnsafeCurrentTask(body: { $0?.unownedTaskExecutor == nil }) { await Task.yield() }
  }

  private static func configure(
    _ connection: SQLiteConnection, _ configuration: Configuration, cacheKiB: Int
  ) throws(StoreError) {
    try connection.execute("PRAGMA busy_timeout=\(configuration.busyTimeoutMs)")
    try connection.execute("PRAGMA synchronous=\(configuration.synchronous.rawValue)")
    try connection.execute("PRAGMA cache_size=-\(cacheKiB)")
    try connection.execute("PRAGMA temp_store=MEMORY")
  }

  /// Finishes queued work, stops the threads and closes the connections. Idempotent.
  public func close() {
    let wasClosed = closed.withLock { c -> Bool in
      defer { c = true }
      return c
    }
    if wasClosed { return }
    // Readers first: the writer's connection closes last and checkpoints the WAL into the file.
    readers.close()
    inlineReaders.close()
    writer.close()
  }

  /// Without an explicit ``close()``, the threads are told to finish but not waited for: the last
  /// reference may be dropped on a worker thread itself, which must not wait for its own end.
  deinit {
    if closed.withLock({ $0 }) { return }
    readers.close(wait: false)
    writer.close(wait: false)
  }

  /// Commits and writes acknowledged so far (writes per commit shows group commit at work).
  public var groupCommitStatistics: (commits: Int, writes: Int) { writer.statistics }

  /// The history cache's counters and size, as metric families (for `/metrics`).
  public func historyCacheMetricFamilies() -> [MetricFamily] { historyCache.metricFamilies(database: "SQLite") }

  /// ``historyCacheMetricFamilies()`` in Prometheus text format.
  public func historyCacheMetrics() -> String { PrometheusText.render(historyCacheMetricFamilies()) }

  /// What the store holds in memory besides the history cache, as metric families (for
  /// `/metrics`): SQLite's own heap (the connections' page caches, schemas and statements) and the
  /// user-key cache's entries.
  public func memoryMetricFamilies() -> [MetricFamily] {
    [
      .gauge(
        "substatus_sqlite_memory_bytes",
        "Heap memory held by SQLite (page caches of every connection, schemas, statements).",
        Int(sqlite3_memory_used())),
      .gauge("substatus_user_key_cache_entries", "Users whose internal key is held in memory.", userKeys.count),
    ]
  }

  /// ``memoryMetricFamilies()`` in Prometheus text format.
  public func memoryMetrics() -> String { PrometheusText.render(memoryMetricFamilies()) }

  /// Runs `PRAGMA integrity_check` and returns its rows (`["ok"]` for a sound database).
  public func integrityCheck() async throws(StoreError) -> [String] {
    try await readers.read { db throws(StoreError) in
      try db.all("PRAGMA integrity_check") { $0.text(0) }
    }
  }

  /// `EXPLAIN QUERY PLAN` details for `sql` (used by tests to prove hot reads use indexes).
  func queryPlan(_ sql: String) async throws(StoreError) -> [String] {
    try await readers.read { db throws(StoreError) in
      try db.all("EXPLAIN QUERY PLAN " + sql) { $0.text(3) }
    }
  }
}
