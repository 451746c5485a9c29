import CSQLite
import Foundation
import SubstatusProcessTestKit
import RPCCore
import SubstatusClient
import SubstatusWire
import Synchronization
import Testing

/// `PRAGMA integrity_check` and `foreign_key_check` of a database file; "ok" when sound.
func integrityCheck(_ path: String) -> String {
  var db: OpaquePointer?
  guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK else {
    defer { sqlite3_close(db) }
    return "cannot open \(path): \(String(cString: sqlite3_errmsg(db)))"
  }
  defer { sqlite3_close(db) }
  var lines: [String] = []
  for pragma in ["PRAGMA integrity_check", "PRAGMA foreign_key_check"] {
    var statement: OpaquePointer?
    guard sqlite3_prepare_v2(db, pragma, -1, &statement, nil) == SQLITE_OK else {
      return "\(pragma): \(String(cString: sqlite3_errmsg(db)))"
    }
    defer { sqlite3_finalize(statement) }
    while sqlite3_step(statement) == SQLITE_ROW {
      lines.append(sqlite3_column_text(statement, 0).map { String(cString: $0) } ?? "NULL")
    }
  }
  return lines == ["ok"] ? "ok" : lines.joined(separator: "; ")
}

/// What the writers of the crash test share.
final class IngestLoad: Sendable {
  /// user -> acknowledged transaction ids.
  let acknowledged = Mutex<[String: Set<String>]>([:])
  let failures = Mutex<[String]>([])
  let killed = Atomic<Bool>(false)
}

@Suite(.serialized, .timeLimit(.minutes(1))) struct CrashRecoveryTests {
  /// Ingest writers record every transaction id acknowledged to them; substatusd is killed with
  /// SIGKILL mid-load; after a restart on the same data directory every acknowledged id is in the
  /// history and the database passes SQLite's integrity check.
  @Test func everyAcknowledgedTransactionSurvivesSIGKILLUnderIngestLoad() async throws {
    let work = try temporaryDirectory("substatus-crash")
    defer { try? FileManager.default.removeItem(at: work) }
    let data = work.appendingPathComponent("data")
    let first = try await startDaemon(dataDirectory: data, workDirectory: work, round: 0)
    defer { first.abandon() }
    let (adminKey, appID) = try await makeTenantAndApp(first, workDirectory: work)
    let writer = try client(first, key: adminKey)

    let writers = 4
    let load = IngestLoad()
    try await withThrowingTaskGroup(of: Void.self) { group in
      for w in 0..<writers {
        group.addTask {
          let user = "user-\(w)"
          var n = 0
          while !load.killed.load(ordering: .acquiring) {
            let batch = (0..<25).map { i in
              transaction("w\(w)-\(n + i)", original: "w\(w)-0", day: Int64((n + i) % 300))
            }
            n += batch.count
            do {
              let response = try await writer.importTransactions(
                appID: appID, userID: user, transactions: batch)
              guard response.transactionResults.count == batch.count else {
                load.failures.withLock {
                  $0.append(
                    "\(user): \(response.transactionResults.count) results for \(batch.count)")
                }
                return
              }
              load.acknowledged.withLock {
                $0[user, default: []].formUnion(batch.map(\.transactionID))
              }
            } catch {
              // Once the server is gone every call fails (UNAVAILABLE); before, none may.
              if !load.killed.load(ordering: .acquiring) {
                load.failures.withLock { $0.append("\(user): \(error) before the kill") }
              }
              return
            }
          }
        }
      }
      group.addTask {
        // Let the writers get going, then kill mid-load.
        _ = await waitUntil(timeout: .seconds(20), every: .milliseconds(20)) {
          load.acknowledged.withLock({ $0.values.reduce(0) { $0 + $1.count } }) >= 500
        }
        // Mid-load: the writers go on for a moment (a point in time, not a condition).
        try await Task.sleep(for: .milliseconds(300))
        load.killed.store(true, ordering: .releasing)
        kill(first.pid, SIGKILL)
      }
      try await group.waitForAll()
    }
    #expect(await first.child.waitForExit() == .init(status: SIGKILL, signaled: true))
    #expect(load.failures.withLock { $0 }.isEmpty, "\(load.failures.withLock { $0 })")
    let acked = load.acknowledged.withLock { $0 }
    let total = acked.values.reduce(0) { $0 + $1.count }
    #expect(total >= 500, "too few acknowledged writes before the kill: \(total)")

    // Restart on the same data directory: every acknowledged id is there.
    let second = try await startDaemon(dataDirectory: data, workDirectory: work, round: 1)
    defer { second.abandon() }
    let reader = try client(second, key: adminKey)
    var stored = 0
    for (user, ids) in acked {
      let history = try await storedTransactionIDs(reader, appID: appID, userID: user)
      let lost = ids.subtracting(history)
      #expect(
        lost.isEmpty,
        "\(user): \(lost.count) acknowledged transactions lost, e.g. \(lost.sorted().prefix(5))")
      stored += history.count
    }
    // The store still takes writes after the recovery.
    _ = try await reader.importTransactions(
      appID: appID, userID: "after-restart",
      transactions: [transaction("after-1", original: "after-1", day: 1)])
    #expect(
      try await storedTransactionIDs(reader, appID: appID, userID: "after-restart") == ["after-1"])
    #expect(
      await second.stop() == 0, "substatusd exited badly after recovery: \(second.log().suffix(2000))")
    #expect(integrityCheck(data.appendingPathComponent("substatus.sqlite").path) == "ok")
    print("crash test: \(total) acknowledged before SIGKILL, \(stored) stored after restart")
  }
}
