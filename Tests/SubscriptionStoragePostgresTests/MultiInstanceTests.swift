import Foundation
import Glibc
import StoreContractTesting
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent().deletingLastPathComponent()

/// A built executable of this package (`swift build --build-tests` builds them next to the tests).
func builtExecutable(_ name: String) throws -> String {
  let binDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
  let candidates = [binDir, binDir.deletingLastPathComponent()].map {
    $0.appendingPathComponent(name).path
  }
  return try #require(
    candidates.first(where: FileManager.default.isExecutableFile(atPath:)), "\(name) is not built")
}

/// The environment for a child: ours without substatus settings, plus `extra`.
func childEnvironment(_ extra: [String: String]) -> [String: String] {
  ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SUBSTATUS_") }
    .merging(extra) { $1 }
}

/// A substatusd on free ports with `--store postgres://…`.
final class Instance: Sendable {
  let pid: pid_t
  let directory: String
  let grpc: String
  let http: String
  let operatorKey: String?

  init(store: String, masterKey: String, extraArguments: [String] = []) throws {
    directory = FileManager.default.temporaryDirectory
      .appendingPathComponent("substatusd-pg-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let ready = directory + "/ready.json"
    let keyFile = directory + "/operator.key"
    pid = try spawn(
      [
        try builtExecutable("substatusd"), "--data-dir", directory + "/data", "--store", store,
        "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--ready-file", ready,
        "--operator-key-file", keyFile,
      ] + extraArguments, output: directory + "/stderr.log",
      environment: childEnvironment(["SUBSTATUS_MASTER_KEY": masterKey]))
    let deadline = Date().addingTimeInterval(30)
    while !FileManager.default.fileExists(atPath: ready) {
      var status: Int32 = 0
      if waitpid(pid, &status, WNOHANG) == pid || Date() > deadline {
        throw PostgresFailure("substatusd did not become ready:\n\(Self.log(directory))")
      }
      usleep(20_000)
    }
    let json =
      try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: ready)))
      as? [String: String]
    grpc = try #require(json?["grpc"])
    http = try #require(json?["http"])
    operatorKey = (try? String(contentsOfFile: keyFile, encoding: .utf8))?
      .trimmingCharacters(in: .whitespacesAndNewlines)
  }

  static func log(_ directory: String) -> String {
    (try? String(contentsOfFile: directory + "/stderr.log", encoding: .utf8)) ?? ""
  }

  var log: String { Self.log(directory) }

  /// Sends `signal`, waits, returns the exit status (128 + signal when killed).
  func stop(_ signal: Int32 = SIGTERM) -> Int32 {
    kill(pid, signal)
    return waitForExit(pid)
  }

  deinit { try? FileManager.default.removeItem(atPath: directory) }
}

@Suite("substatusd instances sharing one PostgreSQL database", .serialized)
struct MultiInstanceTests {
  /// With `historyCacheMB` above 0 both instances cache histories and follow each other's writes
  /// through the change feed (the script reads each user through B after writing it through A).
  @Test(arguments: [0, 16])
  func writesReadsOneNotificationAppliedOnceAndNoAcknowledgedWriteLostToSIGKILL(historyCacheMB: Int)
    async throws
  {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(
      FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    // Durable server settings (fsync on): this test is about acknowledged writes.
    let url = try await blocking { try PostgresServer.durable.get().createDatabase() }
    let masterKey = MasterKey.generate().hexEncoded
    let cache = ["--history-cache-mb", String(historyCacheMB)]
    let a = try await blocking { try Instance(store: url, masterKey: masterKey, extraArguments: cache) }
    let b = try await blocking { try Instance(store: url, masterKey: masterKey, extraArguments: cache) }
    let operatorKey = try #require(a.operatorKey, "the first instance creates the operator key")
    #expect(b.operatorKey == nil, "the second instance finds it in the shared database")

    let output = FileManager.default.temporaryDirectory
      .appendingPathComponent("two-instances-\(UUID().uuidString).log").path
    defer { unlink(output) }
    let script = packageRoot.appendingPathComponent(
      "Tests/SubscriptionStoragePostgresTests/Fixtures/two_instances.py").path
    let arguments = [
      python, script, a.grpc, a.http, b.grpc, b.http, operatorKey, String(a.pid),
      packageRoot.appendingPathComponent("Protos").path,
    ]
    let status = try await blocking {
      waitForExit(try spawn(arguments, output: output, environment: childEnvironment([:])))
    }
    let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    // The script killed A; if it failed before that, kill it now.
    _ = try await blocking { a.stop(SIGKILL) }
    let bStatus = try await blocking { b.stop() }
    #expect(status == 0, "two_instances.py failed:\n\(printed)\nA:\n\(a.log)\nB:\n\(b.log)")
    #expect(printed.contains(" passed, 0 failed"), "\(printed)")
    if let line = printed.split(separator: "\n").first(where: { $0.hasPrefix("acked ") }) {
      print("two instances: \(line) (A killed with SIGKILL mid-ingest)")
    }
    #expect(bStatus == 0, "B exits cleanly on SIGTERM:\n\(b.log)")
    // Secrets never reach the logs.
    for log in [a.log, b.log] {
      #expect(!log.contains("0123456789abcdef0123456789abcdef"))
      #expect(!log.contains(masterKey))
      #expect(!log.contains(operatorKey))
    }
  }

  @Test func withoutASharedMasterKeyTheDaemonRefusesPostgres() async throws {
    let url = try await blocking { try PostgresServer.fast.get().url("postgres") }
    let directory = FileManager.default.temporaryDirectory
      .appendingPathComponent("substatusd-nokey-\(UUID().uuidString.prefix(8))").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let arguments = [
      try builtExecutable("substatusd"), "--data-dir", directory + "/data", "--store", url,
    ]
    let status = try await blocking {
      waitForExit(
        try spawn(arguments, output: directory + "/log", environment: childEnvironment([:])))
    }
    let log = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
    #expect(status == 2)
    #expect(log.contains("every instance needs the same master key"), "\(log)")
    #expect(!FileManager.default.fileExists(atPath: directory + "/data/master.key"))
  }

  @Test func theDaemonRefusesADatabaseOfANewerSchema() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    PostgresStoreTestSupport.migrate(url)
    let db = try PGConnection(conninfo: url)
    try db.run(
      "INSERT INTO schema_version(version, description, applied_ms) VALUES($1, 'future', 0)",
      [.int(Int64(PostgresStore.latestSchemaVersion + 1))])
    let directory = FileManager.default.temporaryDirectory
      .appendingPathComponent("substatusd-newer-\(UUID().uuidString.prefix(8))").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let arguments = [
      try builtExecutable("substatusd"), "--data-dir", directory + "/data", "--store", url,
    ]
    let environment = childEnvironment(["SUBSTATUS_MASTER_KEY": MasterKey.generate().hexEncoded])
    let status = try await blocking {
      waitForExit(try spawn(arguments, output: directory + "/log", environment: environment))
    }
    let log = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
    #expect(status == 1)
    #expect(log.contains("newerSchema"), "\(log)")
  }
}

/// Helpers the tests share.
enum PostgresStoreTestSupport {
  /// Opens and closes a store on `url`, leaving a migrated database.
  static func migrate(_ url: String) {
    (try? PostgresStore(configuration: .init(url: url, poolSize: 1)))?.close()
  }
}
