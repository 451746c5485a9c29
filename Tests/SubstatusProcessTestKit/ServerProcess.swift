import Foundation

/// A `substatusd` started by a test on free ports, in its own temporary data directory.
final class ServerProcess: @unchecked Sendable {
  /// The gRPC address, `127.0.0.1:PORT`.
  let grpcAddress: String
  /// The HTTP address, `127.0.0.1:PORT`.
  let httpAddress: String
  /// The operator key written to the operator key file on first start.
  let operatorKey: String
  /// The data directory (removed by ``stop()``).
  let directory: URL
  private let process: Process
  private let log: URL

  /// The directory holding the built products (`substatusd`, `substatus`): the test bundle's.
  static var binDirectory: URL {
    Bundle.module.bundleURL.deletingLastPathComponent()
  }

  /// Starts `substatusd --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0` and waits for its
  /// ready file.
  /// - Parameters:
  ///   - extraArguments: More flags, such as `--verify-receipt-production-url`.
  ///   - timeout: How long to wait for the ready file.
  init(extraArguments: [String] = [], timeout: Duration = .seconds(30)) async throws {
    let fileManager = FileManager.default
    directory = fileManager.temporaryDirectory.appendingPathComponent(
      "substatus-e2e-\(UUID().uuidString)")
    try fileManager.createDirectory(at: directory, withIntermediateDirectories: true)
    let ready = directory.appendingPathComponent("ready.json")
    let keyFile = directory.appendingPathComponent("operator.key")
    log = directory.appendingPathComponent("substatusd.log")
    _ = fileManager.createFile(atPath: log.path, contents: nil)
    process = Process()
    process.executableURL = Self.binDirectory.appendingPathComponent("substatusd")
    process.arguments =
      [
        "--data-dir", directory.appendingPathComponent("data").path,
        "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        "--ready-file", ready.path, "--operator-key-file", keyFile.path,
      ] + extraArguments
    let handle = try FileHandle(forWritingTo: log)
    process.standardOutput = handle
    process.standardError = handle
    try process.run()
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    var addresses: [String: String]?
    while clock.now < deadline {
      if let data = try? Data(contentsOf: ready), !data.isEmpty,
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: String]
      {
        addresses = object
        break
      }
      guard process.isRunning else { break }
      try await Task.sleep(for: .milliseconds(20))
    }
    guard let addresses, let grpc = addresses["grpc"], let http = addresses["http"] else {
      let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
      if process.isRunning { process.terminate() }
      throw ServerProcessError(message: "substatusd did not become ready:\n\(output)")
    }
    grpcAddress = grpc
    httpAddress = http
    operatorKey = (try String(contentsOf: keyFile, encoding: .utf8)).trimmingCharacters(
      in: .whitespacesAndNewlines)
  }

  /// What the server printed so far.
  var output: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

  /// Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its directory.
  func stop() async {
    if process.isRunning {
      process.terminate()
      let clock = ContinuousClock()
      let deadline = clock.now + .seconds(5)
      while process.isRunning && clock.now < deadline {
        try? await Task.sleep(for: .milliseconds(20))
      }
      if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
    try? FileManager.default.removeItem(at: directory)
  }
}

struct ServerProcessError: Error, CustomStringConvertible {
  let message: String
  var description: String { message }
}

/// The result of running the `substatus` executable.
struct ProcessRun: Sendable {
  var status: Int32
  var stdout: String
  var stderr: String
}

/// Runs the built `substatus` executable with arguments and standard input.
///
/// The blocking reads and wait happen on a thread of their own: blocking one of the few threads
/// of Swift's cooperative pool would starve the in-process servers the executable talks to.
func runSubstatusBinary(
  _ arguments: [String], stdin: [UInt8] = [], environment: [String: String] = [:]
)
  async throws -> ProcessRun
{
  try await withCheckedThrowingContinuation { continuation in
    let thread = Thread {
      continuation.resume(
        with: Result {
          try runSubstatusBinaryBlocking(arguments, stdin: stdin, environment: environment)
        })
    }
    thread.start()
  }
}

private func runSubstatusBinaryBlocking(
  _ arguments: [String], stdin: [UInt8], environment: [String: String]
) throws
  -> ProcessRun
{
  let process = Process()
  process.executableURL = ServerProcess.binDirectory.appendingPathComponent("substatus")
  process.arguments = arguments
  process.environment = environment
  let input = Pipe()
  let output = Pipe()
  let error = Pipe()
  process.standardInput = input
  process.standardOutput = output
  process.standardError = error
  try process.run()
  input.fileHandleForWriting.write(Data(stdin))
  try input.fileHandleForWriting.close()
  let out = output.fileHandleForReading.readDataToEndOfFile()
  let err = error.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  return ProcessRun(
    status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self),
    stderr: String(decoding: err, as: UTF8.self))
}

/// The path of a test fixture.
func fixture(_ name: String) -> String {
  Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)?.path
    ?? "missing-fixture-\(name)"
}
