import Foundation
import Synchronization

/// A `substatusd` started by a test on free ports, in its own temporary data directory.
public final class ServerProcess: @unchecked Sendable {
  /// The gRPC address, `127.0.0.1:PORT`.
  public let grpcAddress: String
  /// The HTTP address, `127.0.0.1:PORT`.
  public let httpAddress: String
  /// The operator key written to the operator key file on first start.
  public let operatorKey: String
  /// The data directory (removed by ``stop()``).
  public let directory: URL
  private let process: Process
  private let log: URL

  /// The directory holding the built products (`substatusd`, `substatus`): the test bundle's
  /// (`swift build --build-tests` builds the executables next to it), or `SUBSTATUS_TEST_BIN_DIR`
  /// when set (for example `.build/release`, to run the suites against a release build).
  public static var binDirectory: URL {
    if let directory = ProcessInfo.processInfo.environment["SUBSTATUS_TEST_BIN_DIR"], !directory.isEmpty {
      return URL(fileURLWithPath: directory, isDirectory: true)
    }
    return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
  }

  /// Starts `substatusd --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0` and waits for its
  /// ready file.
  /// - Parameters:
  ///   - extraArguments: More flags, such as `--verify-receipt-production-url`.
  ///   - timeout: How long to wait for the ready file.
  public init(extraArguments: [String] = [], timeout: Duration = .seconds(30)) async throws {
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
  public var output: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

  /// Whether the server process is still running.
  public var isRunning: Bool { process.isRunning }

  /// Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its directory.
  public func stop() async {
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

/// Why a ``ServerProcess`` could not start.
public struct ServerProcessError: Error, CustomStringConvertible {
  /// What went wrong, with the server's output.
  public let message: String
  /// The message.
  public var description: String { message }
}

/// The result of running an executable.
public struct ProcessRun: Sendable {
  /// The exit status.
  public var status: Int32
  /// Everything written to standard output.
  public var stdout: String
  /// Everything written to standard error.
  public var stderr: String
}

/// Runs the built `substatus` executable with arguments and standard input.
public func runSubstatusBinary(
  _ arguments: [String], stdin: [UInt8] = [], environment: [String: String] = [:]
)
  async throws -> ProcessRun
{
  try await runExecutable(
    ServerProcess.binDirectory.appendingPathComponent("substatus").path, arguments, stdin: stdin,
    environment: environment)
}

/// Runs an executable to its end with arguments, standard input and an environment (`nil`: this
/// process's).
///
/// The blocking reads and wait happen on a thread of their own: blocking one of the few threads
/// of Swift's cooperative pool would starve the in-process servers the executable talks to.
public func runExecutable(
  _ path: String, _ arguments: [String], stdin: [UInt8] = [], environment: [String: String]? = nil,
  currentDirectory: URL? = nil
)
  async throws -> ProcessRun
{
  try await withCheckedThrowingContinuation { continuation in
    let thread = Thread {
      continuation.resume(
        with: Result {
          try runExecutableBlocking(
            path, arguments, stdin: stdin, environment: environment,
            currentDirectory: currentDirectory)
        })
    }
    thread.start()
  }
}

private func runExecutableBlocking(
  _ path: String, _ arguments: [String], stdin: [UInt8], environment: [String: String]?,
  currentDirectory: URL?
) throws
  -> ProcessRun
{
  let process = Process()
  process.executableURL = URL(fileURLWithPath: path)
  process.arguments = arguments
  if let environment { process.environment = environment }
  if let currentDirectory { process.currentDirectoryURL = currentDirectory }
  let input = Pipe()
  let output = Pipe()
  let error = Pipe()
  process.standardInput = input
  process.standardOutput = output
  process.standardError = error
  try process.run()
  input.fileHandleForWriting.write(Data(stdin))
  try input.fileHandleForWriting.close()
  // Standard error is read on another thread: a child that fills one pipe while we wait on the
  // other would never finish.
  let errorData = Mutex(Data())
  let errorDone = DispatchSemaphore(value: 0)
  DispatchQueue.global().async {
    let data = error.fileHandleForReading.readDataToEndOfFile()
    errorData.withLock { $0 = data }
    errorDone.signal()
  }
  let out = output.fileHandleForReading.readDataToEndOfFile()
  errorDone.wait()
  process.waitUntilExit()
  return ProcessRun(
    status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self),
    stderr: String(decoding: errorData.withLock { $0 }, as: UTF8.self))
}
