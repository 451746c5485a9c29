import Foundation
import SubstatusProcessTestKit
import Testing
@testable import SubstatusDaemon

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent()

/// A built executable of this package (`swift build --build-tests` builds them next to the tests).
func builtExecutable(_ name: String) throws -> String {
  let binDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
  let candidates = [binDir, binDir.deletingLastPathComponent()].map { $0.appendingPathComponent(name).path }
  return try #require(candidates.first(where: FileManager.default.isExecutableFile(atPath:)), "\(name) is not built")
}

/// A running substatusd on free ports, stopped with SIGTERM; killed if a test drops it running
/// (``ChildProcess``).
final class RunningDaemon: Sendable {
  let child: ChildProcess
  let directory: URL
  let grpc: String
  let http: String
  let operatorKey: String
  /// Its store (SQLite in its data directory unless a test gave another).
  let store: DaemonStore

  /// Starts substatusd on `store` (its flags and environment are added); with `openFilesLimit`, under that RLIMIT_NOFILE (soft and hard, set by
  /// `prlimit`, which then runs substatusd in its place). Its output goes to files in its
  /// directory (a pipe nobody reads fills up under load). With `reusing`, a restart on the
  /// directory (data, keys) of an earlier run (after ``kill()``). `environment` is added to the
  /// test process's own.
  init(
    store: DaemonStore = .sqlite, extraArguments: [String] = [], openFilesLimit: Int? = nil, reusing: URL? = nil,
    environment: [String: String] = [:]
  ) async throws {
    self.store = store
    let environment = environment.merging(store.environment) { $1 }
    directory = reusing ?? FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let ready = directory.appendingPathComponent("ready.json")
    try? FileManager.default.removeItem(at: ready)
    let keyFile = directory.appendingPathComponent("operator.key").path
    let arguments = [
      "--data-dir", directory.appendingPathComponent("data").path, "--grpc-listen", "127.0.0.1:0",
      "--http-listen", "127.0.0.1:0", "--ready-file", ready.path, "--operator-key-file", keyFile,
    ] + store.arguments + extraArguments
    if let openFilesLimit {
      child = try ChildProcess(
        "/usr/bin/prlimit",
        ["--nofile=\(openFilesLimit):\(openFilesLimit)", "--", try builtExecutable("substatusd")] + arguments,
        environment: environment, directory: directory)
    } else {
      child = try ChildProcess(try builtExecutable("substatusd"), arguments, environment: environment, directory: directory)
    }
    let json = try await child.readyFile(ready)
    grpc = try #require(json["grpc"])
    http = try #require(json["http"])
    operatorKey = try String(contentsOfFile: keyFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    let mode = try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int
    #expect(mode == 0o600)
  }

  /// Its process identifier.
  var pid: Int32 { child.pid }
  /// Whether it still runs.
  var isRunning: Bool { child.isRunning }
  /// Everything it wrote to stderr so far.
  var log: String { child.standardError }

  /// Runs `query` on its store with the store's own client (`sqlite3` on the file, read while it
  /// runs: WAL; `psql` on the PostgreSQL database); the rows, columns joined by `|`.
  func sql(_ query: String) async throws -> [String] {
    try await store.query(query, dataDirectory: directory.appendingPathComponent("data"))
  }

  /// Sends SIGKILL without waiting, for a test's `defer` (which cannot wait); the data directory
  /// stays.
  func abandon() { child.send(SIGKILL) }

  /// Sends SIGKILL and waits; the data directory stays for a restart.
  func kill() async {
    await child.stop(signal: SIGKILL)
  }

  /// Sends SIGTERM, waits, returns the exit status and everything written to stderr. A process
  /// still running `killingAfter` seconds after SIGTERM gets SIGKILL (its status then says so), so
  /// that a hang at exit fails the test that looks at the status instead of holding the whole run
  /// (seen once under `--clock-url`: the process logged "stopped", then never exited).
  func stop(killingAfter limit: Double = 20) async -> (Int32, String) {
    let exit = await child.stop(killingAfter: .milliseconds(Int64(limit * 1000)))
    let log = child.standardError
    try? FileManager.default.removeItem(at: directory)
    return (exit.signaled ? 128 + exit.status : exit.status, log)
  }
}

struct DaemonFailure: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// Runs a program to its end (``runExecutable``: never on the cooperative pool); returns its exit
/// status and output.
func runProcess(_ path: String, _ arguments: [String]) async throws -> (Int32, String, String) {
  let run = try await runExecutable(path, arguments)
  return (run.status, run.stdout, run.stderr)
}

@Suite(.serialized) struct DaemonTests {
  @Test func wholeFlowOverRealGRPCAndHTTPWithPythonGrpcio() async throws {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let daemon = try await RunningDaemon()
    let fixtures = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures").path
    let result = try await runProcess(python, [
      fixtures + "/e2e.py", daemon.grpc, daemon.http, daemon.operatorKey, fixtures,
      packageRoot.appendingPathComponent("Protos").path,
    ])
    let (status, log) = await daemon.stop()
    #expect(result.0 == 0, "e2e.py failed:\n\(result.2)\n\(result.1)")
    #expect(result.1.contains(" passed, 0 failed"))
    #expect(status == 0, "substatusd exited \(status)")
    // One JSON log line per RPC, and no key or secret anywhere in the log.
    let secrets = result.1.split(separator: "\n").first { $0.hasPrefix("SECRETS ") }?.split(separator: " ").dropFirst() ?? []
    #expect(secrets.count >= 5)
    for secret in secrets { #expect(!log.contains(secret), "the log contains a secret") }
    #expect(log.contains("\"method\":\"/substatus.v1.EligibilityService/CheckEligibility\""))
    #expect(log.contains("\"msg\":\"stopped\""))
  }

  @Test func restartKeepsStateAndDoesNotRecreateTheOperatorKey() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-restart-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    let binary = try builtExecutable("substatusd")
    let arguments = ["--data-dir", directory.path, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"]
    for round in 0..<2 {
      let ready = directory.appendingPathComponent("ready\(round)")
      let child = try ChildProcess(binary, arguments + ["--ready-file", ready.path])
      _ = try await child.readyFile(ready)
      let exit = await child.stop(signal: SIGINT)
      let printed = child.standardOutput
      #expect(exit == .init(status: 0, signaled: false))
      // The key is printed on the first start only.
      #expect(printed.contains("sk_") == (round == 0), "round \(round): \(printed)")
    }
  }

  @Test(arguments: [
    (["--help"], Int32(0), "usage: substatusd"),
    ([], 2, "--data-dir is required"),
    (["--data-dir", "/tmp/x", "--bogus"], 2, "unknown option --bogus"),
    (["--data-dir", "/tmp/x", "--grpc-listen", "nope"], 2, "--grpc-listen must be HOST:PORT"),
    (["--data-dir", "/tmp/x", "--store", "mysql://x"], 2, "--store must be sqlite"),
  ])
  func commandLine(arguments: [String], status: Int32, message: String) async throws {
    let (code, out, err) = try await runProcess(try builtExecutable("substatusd"), arguments)
    #expect(code == status)
    #expect((out + err).contains(message), "\(out)\(err)")
  }

  @Test func configFileThenEnvironmentThenFlags() throws {
    let file: [UInt8] = Array(#"{"data_dir": "/from/file", "grpc_listen": "0.0.0.0:1", "http_listen": "0.0.0.0:2", "tenant_rate_limit": 5}"#.utf8)
    let c = try #require(try DaemonConfiguration.parse(
      arguments: ["--config", "c.json", "--grpc-listen", "127.0.0.1:3"],
      environment: ["SUBSTATUS_GRPC_LISTEN": "127.0.0.1:4", "SUBSTATUS_HTTP_LISTEN": "127.0.0.1:5"],
      readFile: { _ in file }))
    #expect(c.dataDirectory == "/from/file")
    #expect(c.grpcListen == "127.0.0.1:3")  // flag over environment over file
    #expect(c.httpListen == "127.0.0.1:5")  // environment over file
    #expect(c.tenantRateLimit == 5)
    #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--config", "c.json"], environment: [:], readFile: { _ in Array(#"{"bogus": 1}"#.utf8) })
    }
  }
}
