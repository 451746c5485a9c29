import Foundation

/// The store a user-level test runs `substatusd` on: SQLite in its data directory (the default), or
/// PostgreSQL (`--store postgres://…`, a fresh database of ``PostgresTestServer/shared()``). Suites
/// take it as a Swift Testing argument (`@Test(arguments: TestStore.userLevel)`) to run each test on
/// both.
public enum TestStore: String, CaseIterable, Sendable, CustomStringConvertible {
  /// `substatusd`'s default: `DATA_DIR/substatus.sqlite`.
  case sqlite
  /// A fresh database of the test process's PostgreSQL server.
  case postgres

  /// The stores the user-level suites run on: both, unless `SUBSTATUS_TEST_STORES` names some
  /// (`sqlite`, `postgres`, comma-separated), as on a machine without PostgreSQL.
  public static var userLevel: [TestStore] {
    guard let names = ProcessInfo.processInfo.environment["SUBSTATUS_TEST_STORES"], !names.isEmpty else {
      return allCases
    }
    return allCases.filter { store in
      names.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == store.rawValue }
    }
  }

  /// The store's name, as test reports show the argument.
  public var description: String { rawValue }

  /// A new, empty store of this kind for one `substatusd` (and its restarts).
  public func make() async throws -> DaemonStore {
    switch self {
    case .sqlite:
      return .sqlite
    case .postgres:
      let url = try await PostgresTestServer.shared().createDatabase()
      var key = [UInt8](repeating: 0, count: 32)
      for i in key.indices { key[i] = UInt8.random(in: 0...255) }
      return DaemonStore(kind: self, postgresURL: url, masterKey: key.map { String(format: "%02x", $0) }.joined())
    }
  }
}

/// One test's store: the flags and environment that point `substatusd` at it, and a way to read its
/// tables with the store's own client (`sqlite3` or `psql`), as an operator would.
public struct DaemonStore: Sendable {
  /// Which store.
  public let kind: TestStore
  /// The database's URL (PostgreSQL only).
  public let postgresURL: String?
  /// The master key every instance on the database shares (PostgreSQL only: with SQLite,
  /// `substatusd` makes one in its data directory).
  let masterKey: String?

  /// `substatusd`'s default store: SQLite in its data directory.
  public static let sqlite = DaemonStore(kind: .sqlite, postgresURL: nil, masterKey: nil)

  /// `substatusd`'s flags for this store (none for SQLite).
  public var arguments: [String] { postgresURL.map { ["--store", $0] } ?? [] }
  /// Variables to add to `substatusd`'s environment (`SUBSTATUS_MASTER_KEY` for PostgreSQL).
  public var environment: [String: String] { masterKey.map { ["SUBSTATUS_MASTER_KEY": $0] } ?? [:] }

  /// Runs `sql` on the store of the `substatusd` whose data directory is `dataDirectory` (SQLite:
  /// `sqlite3` on its file, read while it runs thanks to WAL; PostgreSQL: `psql` on the
  /// database); the rows, one a line, columns joined by `|`. Write queries both stores read alike
  /// (`coalesce`, not `ifnull`).
  /// - Throws: when the client fails, with its message.
  public func query(_ sql: String, dataDirectory: URL) async throws -> [String] {
    if let postgresURL {
      return try await PostgresTestServer.shared().query(postgresURL, sql)
    }
    let database = dataDirectory.appendingPathComponent("substatus.sqlite").path
    let run = try await runExecutable("/usr/bin/sqlite3", [database, sql])
    guard run.status == 0 else { throw ServerProcessError(message: "sqlite3 \(sql): \(run.stderr)") }
    return run.stdout.split(separator: "\n").map(String.init)
  }
}
