import Foundation
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

/// A running substatusd on free ports, stopped with SIGTERM.
final class RunningDaemon: @unchecked Sendable {
  let process = Process()
  let directory: URL
  let grpc: String
  let http: String
  let operatorKey: String
  let stderrPipe = Pipe()

  /// Starts substatusd; with `openFilesLimit`, under that RLIMIT_NOFILE (soft and hard, set by
  /// `prlimit`, which then runs substatusd in its place); with `logToFile`, its stderr goes to a
  /// file in its directory instead of a pipe (a pipe nobody reads fills up under load).
  /// With `reusing`, a restart on the directory (data, keys) of an earlier run (after ``kill()``).
  /// `environment` is added to the test process's own.
  init(
    extraArguments: [String] = [], openFilesLimit: Int? = nil, logToFile: Bool = false, reusing: URL? = nil,
    environment: [String: String] = [:]
  ) throws {
    directory = reusing ?? FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let ready = directory.appendingPathComponent("ready.json").path
    try? FileManager.default.removeItem(atPath: ready)
    let keyFile = directory.appendingPathComponent("operator.key").path
    let arguments = [
      "--data-dir", directory.appendingPathComponent("data").path, "--grpc-listen", "127.0.0.1:0",
      "--http-listen", "127.0.0.1:0", "--ready-file", ready, "--operator-key-file", keyFile,
    ] + extraArguments
    if let openFilesLimit {
      process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
      process.arguments = ["--nofile=\(openFilesLimit):\(openFilesLimit)", "--", try builtExecutable("substatusd")] + arguments
    } else {
      process.executableURL = URL(fileURLWithPath: try builtExecutable("substatusd"))
      process.arguments = arguments
    }
    if logToFile {
      let log = directory.appendingPathComponent("substatusd.log")
      _ = FileManager.default.createFile(atPath: log.path, contents: nil)
      process.standardError = try FileHandle(forWritingTo: log)
    } else {
      process.standardError = stderrPipe
    }
    process.standardOutput = FileHandle.nullDevice
    if !environment.isEmpty {
      process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    try process.run()
    let deadline = Date().addingTimeInterval(30)
    while !FileManager.default.fileExists(atPath: ready) {
      guard process.isRunning, Date() < deadline else { throw DaemonFailure("substatusd did not become ready") }
      Thread.sleep(forTimeInterval: 0.02)
    }
    let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: ready))) as? [String: String]
    grpc = try #require(json?["grpc"])
    http = try #require(json?["http"])
    operatorKey = try String(contentsOfFile: keyFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    let mode = try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int
    #expect(mode == 0o600)
  }

  /// Sends SIGKILL and waits; the data directory stays for a restart.
  func kill() {
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }

  /// Sends SIGTERM, waits, returns the exit status and everything written to stderr. A process
  /// still running `killingAfter` seconds after SIGTERM gets SIGKILL (its status then says so), so
  /// that a hang at exit fails the test that looks at the status instead of holding the whole run
  /// (seen once under `--clock-url`: the process logged "stopped", then never exited).
  func stop(killingAfter limit: Double = 20) -> (Int32, String) {
    process.terminate()
    let pid = process.processIdentifier
    let watchdog = DispatchWorkItem { Glibc.kill(pid, SIGKILL) }
    DispatchQueue.global().asyncAfter(deadline: .now() + limit, execute: watchdog)
    defer { watchdog.cancel() }
    let log: String
    if process.standardError is Pipe {
      log = String(decoding: stderrPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    } else {
      process.waitUntilExit()
      log = (try? String(contentsOf: directory.appendingPathComponent("substatusd.log"), encoding: .utf8)) ?? ""
    }
    process.waitUntilExit()
    try? FileManager.default.removeItem(at: directory)
    return (process.terminationStatus, log)
  }
}

struct DaemonFailure: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// Runs a program; returns its exit status and output.
func runProcess(_ path: String, _ arguments: [String]) throws -> (Int32, String, String) {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: path)
  process.arguments = arguments
  let out = Pipe()
  let err = Pipe()
  process.standardOutput = out
  process.standardError = err
  try process.run()
  nonisolated(unsafe) var errData = Data()
  let group = DispatchGroup()
  group.enter()
  DispatchQueue.global().async {
    errData = err.fileHandleForReading.readDataToEndOfFile()
    group.leave()
  }
  let outData = out.fileHandleForReading.readDataToEndOfFile()
  group.wait()
  process.waitUntilExit()
  return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
}

@Suite(.serialized) struct DaemonTests {
  @Test func wholeFlowOverRealGRPCAndHTTPWithPythonGrpcio() throws {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let daemon = try RunningDaemon()
    let fixtures = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures").path
    let result = try runProcess(python, [
      fixtures + "/e2e.py", daemon.grpc, daemon.http, daemon.operatorKey, fixtures,
      packageRoot.appendingPathComponent("Protos").path,
    ])
    let (status, log) = daemon.stop()
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

  @Test func restartKeepsStateAndDoesNotRecreateTheOperatorKey() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-restart-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    let binary = try builtExecutable("substatusd")
    let arguments = ["--data-dir", directory.path, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"]
    for round in 0..<2 {
      let process = Process()
      process.executableURL = URL(fileURLWithPath: binary)
      process.arguments = arguments + ["--ready-file", directory.path + "/ready\(round)"]
      let out = Pipe()
      process.standardOutput = out
      process.standardError = FileHandle.nullDevice
      try process.run()
      while !FileManager.default.fileExists(atPath: directory.path + "/ready\(round)") && process.isRunning {
        Thread.sleep(forTimeInterval: 0.02)
      }
      process.interrupt()
      let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      process.waitUntilExit()
      #expect(process.terminationStatus == 0)
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
  func commandLine(arguments: [String], status: Int32, message: String) throws {
    let (code, out, err) = try runProcess(try builtExecutable("substatusd"), arguments)
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
