// The thin layer over libpq: one connection, prepared statements, binary results.
// Every call blocks, so a connection is only ever used on the pool thread that owns it.
import CLibPQ
import Foundation
import SubscriptionStorage

/// A statement parameter. Text, integers and booleans travel in libpq's text format; bytes in the
/// binary format (no escaping).
enum PGValue: Sendable {
  case null
  case text(String)
  case int(Int64)
  case bool(Bool)
  case bytes([UInt8])

  /// `.int` or `.null`.
  static func optional(_ value: Int64?) -> PGValue { value.map(PGValue.int) ?? .null }
  /// `.text` or `.null`.
  static func optional(_ value: String?) -> PGValue { value.map(PGValue.text) ?? .null }

  /// A `text[]` literal (`{"a","b"}`), for `= ANY($n)`.
  static func textArray(_ values: [String]) -> PGValue {
    let items = values.map { v -> String in
      var escaped = "\""
      for ch in v.unicodeScalars {
        if ch == "\"" || ch == "\\" { escaped.unicodeScalars.append("\\") }
        escaped.unicodeScalars.append(ch)
      }
      return escaped + "\""
    }
    return .text("{" + items.joined(separator: ",") + "}")
  }
}

/// One result row, decoded from libpq's binary format by column type. A ``StoreRow``, so the
/// decoders the two SQL stores share read it.
struct PGRow: StoreRow {
  /// Raw cell bytes; `nil` for SQL NULL.
  let cells: [[UInt8]?]
  /// Column type OIDs.
  let types: [UInt32]

  private static let bool: UInt32 = 16, bytea: UInt32 = 17, int8: UInt32 = 20, int2: UInt32 = 21
  private static let int4: UInt32 = 23

  func isNull(_ i: Int) -> Bool { cells[i] == nil }
  func text(_ i: Int) -> String { String(decoding: cells[i] ?? [], as: UTF8.self) }
  func optionalText(_ i: Int) -> String? { cells[i].map { String(decoding: $0, as: UTF8.self) } }
  func bytes(_ i: Int) -> [UInt8] { cells[i] ?? [] }
  func optionalInt(_ i: Int) -> Int64? { cells[i] == nil ? nil : int(i) }
  func bool(_ i: Int) -> Bool { (cells[i]?.first ?? 0) != 0 }

  /// An integer column (int2, int4 or int8, big-endian in the binary format).
  func int(_ i: Int) -> Int64 {
    guard let b = cells[i] else { return 0 }
    var v: Int64 = 0
    for byte in b { v = (v << 8) | Int64(byte) }
    switch b.count {
    case 2: return Int64(Int16(truncatingIfNeeded: v))
    case 4: return Int64(Int32(truncatingIfNeeded: v))
    default: return v
    }
  }
}

/// A libpq connection owned by one pool thread. `@unchecked Sendable` covers the single hand-over
/// from the creating thread to its owner thread.
final class PGConnection: @unchecked Sendable {
  private let handle: OpaquePointer
  /// Statements this connection has run (each a round trip; preparing one is not counted): what
  /// tests count to keep a write's round trips few.
  private(set) var statementsRun = 0
  /// SQL text to prepared statement name, for this session.
  private var prepared: [String: String] = [:]
  /// The SQLSTATE of the last failed statement (e.g. `40P01` deadlock), `nil` after a success.
  private(set) var lastSQLState: String?

  /// The seconds a connection attempt (and a reconnect, which reuses its parameters) may take
  /// unless the connection string sets `connect_timeout` itself. libpq's own default is to wait
  /// forever: a server that accepts and never answers would hold a pool thread, the change feed's
  /// thread, or the store's `close()` for good.
  static let defaultConnectTimeoutSeconds = 10

  /// Connects with a libpq connection string or `postgres://` URI.
  /// - Parameters:
  ///   - conninfo: the connection string; its `connect_timeout`, if any, wins over the default,
  ///     and so does the environment's `PGCONNECT_TIMEOUT`.
  ///   - connectTimeoutSeconds: the timeout when neither sets one.
  /// - Throws: `unavailable` when the server cannot be reached in time or refuses the login.
  init(conninfo: String, connectTimeoutSeconds: Int = defaultConnectTimeoutSeconds) throws(StoreError) {
    // Later parameters override earlier ones, and `dbname` is expanded into the connection
    // string's parameters (expand_dbname = 1): the default goes first.
    let timeoutSetting = getenv("PGCONNECT_TIMEOUT").map { String(cString: $0) } ?? "\(connectTimeoutSeconds)"
    let connection = "connect_timeout".withCString { timeoutKey in
      timeoutSetting.withCString { timeout in
        "dbname".withCString { dbnameKey in
          conninfo.withCString { dbname in
            PQconnectdbParams([timeoutKey, dbnameKey, nil], [timeout, dbname, nil], 1)
          }
        }
      }
    }
    guard let conn = connection else {
      throw StoreError(.unavailable, "cannot allocate a PostgreSQL connection")
    }
    guard PQstatus(conn) == CONNECTION_OK else {
      let message = Self.trimmed(PQerrorMessage(conn))
      PQfinish(conn)
      throw StoreError(.unavailable, "cannot connect to PostgreSQL: \(message)")
    }
    handle = conn
    try configureSession()
  }

  deinit { PQfinish(handle) }

  /// Whether the session was lost (server restart, network): the pool reconnects before next use.
  var isBroken: Bool { PQstatus(handle) != CONNECTION_OK }

  /// The session's socket, for waiting on notifications (`poll`); -1 without a session.
  var socket: Int32 { PQsocket(handle) }

  /// Reads what the server sent (after the socket became readable).
  /// - Returns: `false` when the session was lost.
  func consumeInput() -> Bool {
    PQconsumeInput(handle) != 0 && !isBroken
  }

  /// Takes the `NOTIFY` messages received (by ``consumeInput()`` or with a statement's results)
  /// and returns how many there were: their arrival is the news, the change feed's rows are the
  /// content.
  func takeNotifications() -> Int {
    var count = 0
    while let notification = PQnotifies(handle) {
      PQfreemem(notification)
      count += 1
    }
    return count
  }

  /// Whether a transaction block is open (or failed and awaiting ROLLBACK).
  var inTransaction: Bool {
    let s = PQtransactionStatus(handle)
    return s == PQTRANS_INTRANS || s == PQTRANS_INERROR
  }

  /// Re-establishes a lost session; prepared statements are prepared again on demand.
  func reconnect() throws(StoreError) {
    PQreset(handle)
    prepared = [:]
    guard !isBroken else {
      throw StoreError(
        .unavailable, "cannot reconnect to PostgreSQL: \(Self.trimmed(PQerrorMessage(handle)))")
    }
    try configureSession()
  }

  /// UTF-8, and no NOTICE chatter on stderr (e.g. "relation already exists, skipping").
  private func configureSession() throws(StoreError) {
    try execute("SET client_encoding TO 'UTF8'; SET client_min_messages TO warning")
  }

  private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
    guard let message else { return "unknown error" }
    return String(cString: message).trimmingCharacters(in: [" ", "\n"])
  }

  /// Runs one or more statements without parameters (simple protocol): DDL, BEGIN/COMMIT.
  func execute(_ sql: String) throws(StoreError) {
    statementsRun += 1
    let result = PQexec(handle, sql)
    defer { PQclear(result) }
    try check(result, sql)
  }

  /// Runs a statement (prepared on first use in this session) and returns its rows.
  @discardableResult
  func query(_ sql: String, _ values: [PGValue] = []) throws(StoreError) -> [PGRow] {
    try withResult(sql, values) { result in
      let rows = Int(PQntuples(result))
      let columns = Int(PQnfields(result))
      let types = (0..<columns).map { UInt32(PQftype(result, Int32($0))) }
      var out: [PGRow] = []
      out.reserveCapacity(rows)
      for r in 0..<rows {
        var cells: [[UInt8]?] = []
        cells.reserveCapacity(columns)
        for c in 0..<columns {
          if PQgetisnull(result, Int32(r), Int32(c)) != 0 {
            cells.append(nil)
            continue
          }
          let length = Int(PQgetlength(result, Int32(r), Int32(c)))
          guard let value = PQgetvalue(result, Int32(r), Int32(c)) else {
            cells.append([])
            continue
          }
          cells.append(
            value.withMemoryRebound(to: UInt8.self, capacity: length) {
              Array(UnsafeBufferPointer(start: $0, count: length))
            })
        }
        out.append(PGRow(cells: cells, types: types))
      }
      return out
    }
  }

  /// The first row, if any.
  func first(_ sql: String, _ values: [PGValue] = []) throws(StoreError) -> PGRow? {
    try query(sql, values).first
  }

  /// Runs a statement and returns how many rows it inserted, updated or deleted.
  @discardableResult
  func run(_ sql: String, _ values: [PGValue] = []) throws(StoreError) -> Int {
    try withResult(sql, values) { result in
      guard let text = PQcmdTuples(result) else { return 0 }
      return Int(String(cString: text)) ?? 0
    }
  }

  private func statementName(_ sql: String) throws(StoreError) -> String {
    if let name = prepared[sql] { return name }
    let name = "s\(prepared.count)"
    let result = PQprepare(handle, name, sql, 0, nil)
    defer { PQclear(result) }
    try check(result, sql)
    prepared[sql] = name
    return name
  }

  private func withResult<T>(
    _ sql: String, _ values: [PGValue], _ body: (OpaquePointer) -> T
  ) throws(StoreError) -> T {
    let name = try statementName(sql)
    statementsRun += 1
    var buffers: [UnsafeMutablePointer<CChar>?] = []
    var lengths: [Int32] = []
    var formats: [Int32] = []
    defer { for b in buffers { b?.deallocate() } }
    for value in values {
      let bytes: [UInt8]?
      var format: Int32 = 0
      switch value {
      case .null: bytes = nil
      case .text(let s): bytes = Array(s.utf8)
      case .int(let i): bytes = Array(String(i).utf8)
      case .bool(let b): bytes = b ? [0x74] : [0x66]
      case .bytes(let b):
        bytes = b
        format = 1
      }
      if let bytes {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
        bytes.withUnsafeBufferPointer { src in
          src.withMemoryRebound(to: CChar.self) { buffer.update(from: $0.baseAddress!, count: bytes.count) }
        }
        buffer[bytes.count] = 0
        buffers.append(buffer)
        lengths.append(Int32(bytes.count))
      } else {
        buffers.append(nil)
        lengths.append(0)
      }
      formats.append(format)
    }
    let result = buffers.withUnsafeBufferPointer { b in
      b.withMemoryRebound(to: UnsafePointer<CChar>?.self) { params in
        PQexecPrepared(
          handle, name, Int32(values.count), params.baseAddress, lengths, formats, 1)
      }
    }
    defer { PQclear(result) }
    try check(result, sql)
    return body(result!)
  }

  private func check(_ result: OpaquePointer?, _ sql: String) throws(StoreError) {
    let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
    if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK {
      lastSQLState = nil
      return
    }
    var state: String?
    var message = Self.trimmed(PQerrorMessage(handle))
    if let result {
      if let s = PQresultErrorField(result, Int32(UInt8(ascii: "C"))) { state = String(cString: s) }
      // The primary message only: DETAIL may quote row values (key hashes).
      if let m = PQresultErrorField(result, Int32(UInt8(ascii: "M"))) { message = String(cString: m) }
    }
    lastSQLState = state
    throw Self.storeError(state: state, message: message, broken: isBroken)
  }

  /// Maps a SQLSTATE to a ``StoreError`` code.
  static func storeError(state: String?, message: String, broken: Bool) -> StoreError {
    let text = "PostgreSQL: \(message)" + (state.map { " (SQLSTATE \($0))" } ?? "")
    if broken { return StoreError(.unavailable, text) }
    guard let state else { return StoreError(.unavailable, text) }
    switch state {
    case "23505": return StoreError(.alreadyExists, text)
    case "23503": return StoreError(.notFound, text)
    case "40001", "40P01", "57P01", "57P02", "57P03", "55P03": return StoreError(.unavailable, text)
    default:
      if state.hasPrefix("08") || state.hasPrefix("53") { return StoreError(.unavailable, text) }
      if state.hasPrefix("22") { return StoreError(.invalidArgument, text) }
      return StoreError(.internalError, text)
    }
  }
}
