import Foundation

/// A `substatusd` started by a test on free ports, in its own temporary data directory.
public final class ServerProcess: Sendable {
  /// The gRPC address, `127.0.0.1:PORT`.
  public let grpcAddress: String
  /// The HTTP address, `127.0.0.1:PORT`.
  public let httpAddress: String
  /// The operator key written to the operator key file on first start.
  public let operatorKey: String
  /// The data directory (removed by ``stop()``).
  public let directory: URL
  /// The process.
  public let child: ChildProcess

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
  ///   - environment: Variables added to this process's environment (such as
  ///     `SUBSTATUS_MASTER_KEY` for `--store postgres://…`).
  ///   - timeout: How long to wait for the ready file.
  public init(
    extraArguments: [String] = [], environment: [String: String] = [:], timeout: Duration = .seconds(30)
  ) async throws {
    let fileManager = FileManager.default
    directory = fileManager.temporaryDirectory.appendingPathComponent(
      "substatus-e2e-\(UUID().uuidString)")
    try fileManager.createDirectory(at: directory, withIntermediateDirectories: true)
    let ready = directory.appendingPathComponent("ready.json")
    let keyFile = directory.appendingPathComponent("operator.key")
    child = try ChildProcess(
      Self.binDirectory.appendingPathComponent("substatusd").path,
      [
        "--data-dir", directory.appendingPathComponent("data").path,
        "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        "--ready-file", ready.path, "--operator-key-file", keyFile.path,
      ] + extraArguments, environment: environment, directory: directory)
    let addresses: [String: String]
    do { addresses = try await child.readyFile(ready, timeout: timeout) } catch {
      await child.stop()
      throw ServerProcessError(message: "substatusd did not become ready: \(error)")
    }
    guard let grpc = addresses["grpc"], let http = addresses["http"] else {
      await child.stop()
      throw ServerProcessError(message: "substatusd's ready file names no addresses: \(addresses)")
    }
    grpcAddress = grpc
    httpAddress = http
    operatorKey = (try String(contentsOf: keyFile, encoding: .utf8)).trimmingCharacters(
      in: .whitespacesAndNewlines)
  }

  /// What the server printed so far.
  public var output: String { child.output }

  /// Whether the server process is still running.
  public var isRunning: Bool { child.isRunning }

  /// Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its directory.
  public func stop() async {
    await child.stop(killingAfter: .seconds(5))
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
/// process's), through ``ChildProcess``: its output goes to files and its exit is awaited without
/// blocking a thread of Swift's cooperative pool (which would starve the in-process servers the
/// executable talks to). One that runs longer than `timeout` is killed.
public func runExecutable(
  _ path: String, _ arguments: [String], stdin: [UInt8] = [], environment: [String: String]? = nil,
  currentDirectory: URL? = nil, timeout: Duration = .seconds(300)
)
  async throws -> ProcessRun
{
  let child = try ChildProcess(
    path, arguments, environment: environment ?? [:], inheritingEnvironment: environment == nil,
    currentDirectory: currentDirectory, standardInput: true)
  if !stdin.isEmpty { try child.write(stdin) }
  child.closeInput()
  var exit = await child.waitForExit(timeout: timeout)
  if exit == nil { exit = await child.stop(signal: SIGKILL) }
  guard let exit else { throw ChildProcessError(message: "\(path) could not be stopped") }
  return ProcessRun(
    status: exit.signaled ? 128 + exit.status : exit.status, stdout: child.standardOutput, stderr: child.standardError)
}
