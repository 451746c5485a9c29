import Foundation
import SubscriptionStorage
import Synchronization
import SubstatusMetrics

/// The PostgreSQL ``Store``, for deployments of several `substatusd` instances sharing one database.
///
/// - Threads: libpq calls block, so they run on a small pool of dedicated threads, each owning one
///   connection; callers await a continuation and never block their own thread. With two
///   connections or more, one serves only single statements (reads), so reads never queue behind
///   transactions.
/// - Statements are prepared once per connection; results come back in libpq's binary format.
/// - Durability: a method returns after `COMMIT`, which PostgreSQL makes durable (WAL flushed with the
///   server's default `synchronous_commit=on`).
/// - Concurrency across instances: every upsert runs in one READ COMMITTED transaction that first
///   locks the user's row `FOR NO KEY UPDATE`, then reads the user's stored data once: the domain's
///   ``SubscriptionDomain/Transaction/supersedes(_:)`` and
///   ``SubscriptionDomain/RenewalInfoVersion/supersedes(_:)`` decide on rows no other instance can
///   change meanwhile (an absent row cannot be locked, the user's row can), and the same data is
///   the "before" of the events the write logs; a notification id is claimed by the primary
///   key of `notifications` in the same transaction as its data, so one notification delivered to
///   two instances is applied once. Event sequences are taken last, under an advisory lock held
///   until commit, so they become visible in increasing order (see `PostgresStore+Events.swift`).
///   Deadlocks between instances are retried.
/// - No read cache of tenants, apps and keys: another instance may change any row, so they are read
///   from the database every time (primary-key lookups). User histories may be cached
///   (``Configuration/historyCacheBytes``): this instance's writes invalidate their users after the
///   commit, and every write records its users in the change feed (`user_changes`, `NOTIFY`), from
///   which the other instances invalidate theirs within about a second
///   (`PostgresStore+UserChanges.swift`).
/// - Schema: versioned migrations at start under an advisory lock; a newer schema is refused.
///
/// ```swift
/// let store = try PostgresStore(configuration: .init(url: "postgres://substatus@db:5432/substatus", keyring: keyring))
/// defer { store.close() }
/// ```
public final class PostgresStore: Sendable {
  /// How the store connects.
  public struct Configuration: Sendable {
    /// A libpq connection URI (`postgres://user@host:port/db?sslmode=require`) or key=value string.
    public var url: String
    /// The master keys that seal shared secrets; every instance of a deployment needs the same ones.
    public var keyring: MasterKeyring?
    /// Connections (and threads) per instance. Default 4.
    public var poolSize: Int
    /// Bytes of decoded user histories kept in memory (`docs/evaluation-cache.md`); 0, the
    /// default, turns the history cache off.
    public var historyCacheBytes: Int
    /// With the history cache on: the longest wait, in seconds, before another instance's change
    /// is read when its `NOTIFY` does not arrive (the bound on cross-instance staleness). Default 1.
    public var changePollInterval: Double = 1

    /// Creates a configuration.
    /// - Parameters:
    ///   - url: the libpq connection URI.
    ///   - keyring: the master keys.
    ///   - poolSize: connections per instance.
    ///   - historyCacheBytes: the history cache's budget (0: off).
    public init(url: String, keyring: MasterKeyring? = nil, poolSize: Int = 4, historyCacheBytes: Int = 0) {
      self.url = url
      self.keyring = keyring
      self.poolSize = poolSize
      self.historyCacheBytes = historyCacheBytes
    }
  }

  /// The configuration it was opened with.
  public let configuration: Configuration
  /// The schema version of the database.
  public let schemaVersion: Int
  /// The newest schema version this build knows.
  public static var latestSchemaVersion: Int { PostgresSchema.latestVersion }
  let pool: PGPool
  private let closed = Mutex(false)
  /// Last-used times already written per key id by this instance (`touchApiKey` coalescing).
  let touchedKeys = Mutex<[String: Int64]>([:])
  /// Catalogs for the event derivation of writes, checked against the stored bytes every time
  /// (another instance may change a catalog).
  let eventCatalogs = EventCatalogCache()
  /// Decoded histories of recently read users; every write of this instance invalidates its users
  /// after its commit, ``changeFeed`` those of the other instances' writes.
  let historyCache: HistoryCache
  /// With the history cache on: the listener of the other instances' changes.
  let changeFeed: UserChangeFeed?

  /// Connects, applies pending migrations and starts the pool threads.
  /// - Throws: `StoreError.unavailable` when the server cannot be reached, `.newerSchema` for a
  ///   database migrated by a newer substatus.
  public init(configuration: Configuration) throws(StoreError) {
    self.configuration = configuration
    historyCache = HistoryCache(capacityBytes: configuration.historyCacheBytes)
    var connections: [PGConnection] = []
    for _ in 0..<max(1, configuration.poolSize) {
      connections.append(try PGConnection(conninfo: configuration.url))
    }
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    schemaVersion = try PostgresSchema.migrate(connections[0], now: now)
    changeFeed =
      historyCache.isEnabled
      ? try UserChangeFeed(
        conninfo: configuration.url, cache: historyCache, pollInterval: configuration.changePollInterval)
      : nil
    pool = PGPool(connections: connections, conninfo: configuration.url)
  }

  /// The database's size on disk in bytes (`pg_database_size`: tables, indexes and the system
  /// catalogs, not the WAL), for benchmarks and capacity planning.
  public func databaseSize() async throws(StoreError) -> Int64 {
    try await pool.run { db throws(StoreError) in
      try db.first("SELECT pg_database_size(current_database())")?.int(0) ?? 0
    }
  }

  /// The history cache's counters and size, as metric families (for `/metrics`).
  public func historyCacheMetricFamilies() -> [MetricFamily] { historyCache.metricFamilies(database: "PostgreSQL") }

  /// ``historyCacheMetricFamilies()`` in Prometheus text format.
  public func historyCacheMetrics() -> String { PrometheusText.render(historyCacheMetricFamilies()) }

  /// Finishes queued work, stops the threads and closes the connections. Idempotent.
  public func close() {
    let wasClosed = closed.withLock { c -> Bool in
      defer { c = true }
      return c
    }
    if !wasClosed {
      changeFeed?.stop()
      pool.close()
    }
  }

  /// Without an explicit ``close()`` the threads are told to finish but not waited for.
  deinit {
    if closed.withLock({ $0 }) { return }
    changeFeed?.stop(wait: false)
    pool.close(wait: false)
  }
}
