// The thin layer that talks to libsqlite3. Only this file touches sqlite3 pointers.
import CSQLite
import SubscriptionStorage

/// A value bound to a statement parameter.
enum SQLValue {
  case int(Int64)
  case text(String)
  case blob([UInt8])
  case null

  /// `.int` or `.null`.
  static func optional(_ value: Int64?) -> SQLValue { value.map { .int($0) } ?? .null }
  /// `.text` or `.null`.
  static func optional(_ value: String?) -> SQLValue { value.map { .text($0) } ?? .null }
  /// A boolean as 0/1.
  static func bool(_ value: Bool) -> SQLValue { .int(value ? 1 : 0) }
}

/// A row of a stepping statement; valid only inside the row callback. A ``StoreRow``, so the
/// decoders the two SQL stores share read it.
struct SQLRow: StoreRow {
  fileprivate let statement: OpaquePointer

  /// Column `index` as an integer (0 for NULL).
  func int(_ index: Int) -> Int64 { sqlite3_column_int64(statement, Int32(index)) }
  /// Column `index` as an optional integer.
  func optionalInt(_ index: Int) -> Int64? {
    sqlite3_column_type(statement, Int32(index)) == SQLITE_NULL
      ? nil : sqlite3_column_int64(statement, Int32(index))
  }
  /// Column `index` as a boolean.
  func bool(_ index: Int) -> Bool { sqlite3_column_int64(statement, Int32(index)) != 0 }
  /// Column `index` as text ("" for NULL).
  func text(_ index: Int) -> String {
    guard let p = sqlite3_column_text(statement, Int32(index)) else { return "" }
    let n = Int(sqlite3_column_bytes(statement, Int32(index)))
    return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
  }
  /// Column `index` as optional text.
  func optionalText(_ index: Int) -> String? {
    sqlite3_column_type(statement, Int32(index)) == SQLITE_NULL ? nil : text(index)
  }
  /// Column `index` as bytes (empty for NULL).
  func blob(_ index: Int) -> [UInt8] {
    let n = Int(sqlite3_column_bytes(statement, Int32(index)))
    guard n > 0, let p = sqlite3_column_blob(statement, Int32(index)) else { return [] }
    return Array(UnsafeRawBufferPointer(start: p, count: n))
  }
  /// Column `index` as bytes (``blob(_:)``).
  func bytes(_ index: Int) -> [UInt8] { blob(index) }
}

/// One SQLite connection with its prepared-statement cache.
///
/// Not thread-safe: it is opened by the store and handed either to exactly one worker thread (the
/// writer or a reader), which from then on is the only one to use it, or to
/// ``SQLiteInlineReaders``, which lends it to one thread at a time under a lock. `@unchecked
/// Sendable` covers those hand-overs.
final class SQLiteConnection: @unchecked Sendable {
  private var handle: OpaquePointer?
  private var statements: [String: OpaquePointer] = [:]
  /// The file path, for messages.
  let path: String

  /// Opens (creating if `create`) the database at `path`.
  /// - Throws: `StoreError.unavailable` when it cannot be opened.
  init(path: String, readOnly: Bool, create: Bool) throws(StoreError) {
    self.path = path
    var db: OpaquePointer?
    var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE
    flags |= readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
    if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
    let rc = sqlite3_open_v2(path, &db, flags, nil)
    guard rc == SQLITE_OK, let db else {
      let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
      if let db { sqlite3_close_v2(db) }
      throw SQLiteConnection.error(code: rc, message: "cannot open database \(path): \(message)")
    }
    handle = db
    sqlite3_extended_result_codes(db, 1)
  }

  /// Finalizes the cached statements and closes the connection (the last connection to close
  /// checkpoints the WAL). Idempotent; any later use fails with `unavailable`.
  func close() {
    for (_, statement) in statements { sqlite3_finalize(statement) }
    statements = [:]
    if let handle { sqlite3_close_v2(handle) }
    handle = nil
  }

  deinit { close() }

  private func open() throws(StoreError) -> OpaquePointer {
    guard let handle else { throw StoreError(.unavailable, "the connection to \(path) is closed") }
    return handle
  }

  /// Maps an SQLite result code to a ``StoreError``.
  static func error(code: Int32, message: String) -> StoreError {
    switch code & 0xff {
    case SQLITE_CONSTRAINT: return StoreError(.alreadyExists, message)
    case SQLITE_CORRUPT, SQLITE_NOTADB: return StoreError(.corrupt, message)
    case SQLITE_FULL, SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY,
      SQLITE_NOMEM, SQLITE_PERM, SQLITE_PROTOCOL, SQLITE_NOLFS, SQLITE_AUTH:
      return StoreError(.unavailable, message)
    default: return StoreError(.internalError, message)
    }
  }

  private func fail(_ rc: Int32, _ context: String) -> StoreError {
    let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
    return SQLiteConnection.error(code: rc, message: "\(context): \(message) (\(path))")
  }

  /// Runs one or more statements without results (schema, pragmas).
  func execute(_ sql: String) throws(StoreError) {
    let rc = sqlite3_exec(try open(), sql, nil, nil, nil)
    guard rc == SQLITE_OK else { throw fail(rc, "executing \(sql.prefix(60))") }
  }

  /// The cached prepared statement for `sql`, reset and with bindings cleared.
  private func prepared(_ sql: String) throws(StoreError) -> OpaquePointer {
    if let cached = statements[sql] { return cached }
    var statement: OpaquePointer?
    let rc = sqlite3_prepare_v3(
      try open(), sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
    guard rc == SQLITE_OK, let statement else { throw fail(rc, "preparing \(sql.prefix(60))") }
    statements[sql] = statement
    return statement
  }

  /// Binds `values[index...]` to `statement` and runs `body` while they are bound. Text and blobs
  /// are bound `SQLITE_STATIC`, without a copy: each is bound inside the scope that lends its
  /// bytes, and `body` (which steps the statement) runs innermost, so the bytes outlive every step;
  /// the caller resets the statement and clears its bindings before anything else uses it.
  private func withBindings(
    _ statement: OpaquePointer, _ values: [SQLValue], from index: Int, _ body: () throws(StoreError) -> Void
  ) throws(StoreError) {
    guard index < values.count else { return try body() }
    let position = Int32(index + 1)
    var failure: StoreError?
    switch values[index] {
    case .int(let v):
      try check(sqlite3_bind_int64(statement, position, v), position)
      return try withBindings(statement, values, from: index + 1, body)
    case .null:
      try check(sqlite3_bind_null(statement, position), position)
      return try withBindings(statement, values, from: index + 1, body)
    case .text(var s):
      s.withUTF8 { utf8 in
        do throws(StoreError) {
          // An empty string still needs a non-NULL pointer to be text, not NULL.
          let bytes = UnsafeRawPointer(utf8.baseAddress ?? UnsafePointer(bitPattern: 1)!)
          try check(
            sqlite3_bind_text(
              statement, position, bytes.assumingMemoryBound(to: CChar.self), Int32(utf8.count),
              csqlite_static()), position)
          try withBindings(statement, values, from: index + 1, body)
        } catch { failure = error }
      }
    case .blob(let b):
      b.withUnsafeBytes { raw in
        do throws(StoreError) {
          // A zero-length blob still needs a non-NULL pointer to be a blob, not NULL.
          try check(
            sqlite3_bind_blob(
              statement, position, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(b.count),
              csqlite_static()), position)
          try withBindings(statement, values, from: index + 1, body)
        } catch { failure = error }
      }
    }
    if let failure { throw failure }
  }

  private func check(_ rc: Int32, _ position: Int32) throws(StoreError) {
    guard rc == SQLITE_OK else { throw fail(rc, "binding parameter \(position)") }
  }

  /// Runs `sql` with `values`, calling `row` for each result row.
  func query(
    _ sql: String, _ values: [SQLValue] = [], row: (SQLRow) throws(StoreError) -> Void
  ) throws(StoreError) {
    let statement = try prepared(sql)
    defer {
      // The bound bytes' scopes have ended: resetting and clearing read none of them.
      sqlite3_reset(statement)
      sqlite3_clear_bindings(statement)
    }
    try withBindings(statement, values, from: 0) { () throws(StoreError) in
      while true {
        let rc = sqlite3_step(statement)
        if rc == SQLITE_ROW {
          try row(SQLRow(statement: statement))
        } else if rc == SQLITE_DONE {
          return
        } else {
          throw fail(rc, "running \(sql.prefix(60))")
        }
      }
    }
  }

  /// Runs `sql` and maps every row.
  func all<T>(_ sql: String, _ values: [SQLValue] = [], _ map: (SQLRow) throws(StoreError) -> T)
    throws(StoreError) -> [T]
  {
    var out: [T] = []
    try query(sql, values) { (r: SQLRow) throws(StoreError) in out.append(try map(r)) }
    return out
  }

  /// Runs `sql` and maps the first row, if any.
  func first<T>(_ sql: String, _ values: [SQLValue] = [], _ map: (SQLRow) throws(StoreError) -> T)
    throws(StoreError) -> T?
  {
    var out: T?
    try query(sql, values) { (r: SQLRow) throws(StoreError) in
      if out == nil { out = try map(r) }
    }
    return out
  }

  /// Runs a statement without result rows.
  func run(_ sql: String, _ values: [SQLValue] = []) throws(StoreError) {
    try query(sql, values) { _ in }
  }

  /// Rows changed by the last INSERT/UPDATE/DELETE.
  var changes: Int { handle.map { Int(sqlite3_changes($0)) } ?? 0 }

  /// The rowid of the last INSERT.
  var lastInsertRowID: Int64 { handle.map { sqlite3_last_insert_rowid($0) } ?? 0 }

  /// Whether a transaction is open.
  var inTransaction: Bool { handle.map { sqlite3_get_autocommit($0) == 0 } ?? false }
}
