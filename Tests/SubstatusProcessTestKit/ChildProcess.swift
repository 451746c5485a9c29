import Foundation
import Synchronization

/// A child process started by a test: its output in files (a pipe nobody reads would fill up and
/// stall it), its exit seen by Foundation's termination handler (no thread of Swift's cooperative
/// pool ever blocks on it), stopped with SIGTERM then SIGKILL after a bound, and killed when the
/// test drops it.
///
/// ```swift
/// let child = try ChildProcess(executable, ["--ready-file", ready.path])
/// let addresses = try await child.readyFile(ready)
/// let status = await child.stop()
/// ```
public final class ChildProcess: Sendable {
  /// How a child ended.
  public struct Exit: Sendable, Equatable {
    /// The exit status, or the signal's number when ``signaled``.
    public var status: Int32
    /// Whether a signal ended it.
    public var signaled: Bool

    /// An exit with `status`, or by signal `status` when `signaled`.
    public init(status: Int32, signaled: Bool) {
      self.status = status
      self.signaled = signaled
    }
  }

  /// The process identifier.
  public let pid: Int32
  /// The directory holding its output files (removed when the child is dropped, unless given).
  public let directory: URL
  private let ownsDirectory: Bool
  /// The executable's file name, for messages.
  private let name: String
  // Kept so that Foundation keeps watching it.
  private let process: Process
  private let input: FileHandle?
  /// How it ended, set by Foundation's termination handler.
  private final class Ending: Sendable { let value = Mutex<Exit?>(nil) }
  private let ending = Ending()

  /// Starts `executable`.
  /// - Parameters:
  ///   - executable: The executable's path.
  ///   - arguments: Its arguments.
  ///   - environment: Variables added to this process's environment (with
  ///     `inheritingEnvironment: false`, its whole environment).
  ///   - inheritingEnvironment: Whether it starts from this process's environment.
  ///   - currentDirectory: Its working directory (default: this process's).
  ///   - directory: Where its output files go (default: a new temporary directory, removed when
  ///     the child is dropped).
  ///   - standardInput: Whether to give it a pipe on standard input (``write(_:)``,
  ///     ``closeInput()``); otherwise it reads `/dev/null`.
  /// - Throws: when it cannot be started.
  public init(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:],
    inheritingEnvironment: Bool = true, currentDirectory: URL? = nil, directory: URL? = nil, standardInput: Bool = false
  ) throws {
    let fileManager = FileManager.default
    self.ownsDirectory = directory == nil
    self.directory =
      directory ?? fileManager.temporaryDirectory.appendingPathComponent("child-\(UUID().uuidString)")
    try fileManager.createDirectory(at: self.directory, withIntermediateDirectories: true)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if !inheritingEnvironment {
      process.environment = environment
    } else if !environment.isEmpty {
      process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    if let currentDirectory { process.currentDirectoryURL = currentDirectory }
    let stdoutURL = self.directory.appendingPathComponent("stdout")
    let stderrURL = self.directory.appendingPathComponent("stderr")
    for url in [stdoutURL, stderrURL] { _ = fileManager.createFile(atPath: url.path, contents: nil) }
    process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
    process.standardError = try FileHandle(forWritingTo: stderrURL)
    if standardInput {
      let pipe = Pipe()
      process.standardInput = pipe
      input = pipe.fileHandleForWriting
    } else {
      process.standardInput = FileHandle.nullDevice
      input = nil
    }
    let ending = self.ending
    process.terminationHandler = { ended in
      ending.value.withLock {
        $0 = Exit(status: ended.terminationStatus, signaled: ended.terminationReason == .uncaughtSignal)
      }
    }
    try process.run()
    self.process = process
    self.pid = process.processIdentifier
    self.name = URL(fileURLWithPath: executable).lastPathComponent
  }

  deinit {
    if ending.value.withLock({ $0 }) == nil { kill(pid, SIGKILL) }
    try? input?.close()
    if ownsDirectory { try? FileManager.default.removeItem(at: directory) }
  }

  /// Everything it wrote to standard output so far.
  public var standardOutput: String { read("stdout") }
  /// Everything it wrote to standard error so far.
  public var standardError: String { read("stderr") }
  /// Standard output then standard error.
  public var output: String { standardOutput + standardError }

  private func read(_ name: String) -> String {
    (try? String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)) ?? ""
  }

  /// How it ended, or `nil` while it runs.
  ///
  /// Foundation's termination handler is the usual source. Under load on Linux it sometimes never
  /// runs: the child has ended and stays a zombie that Foundation does not reap (seen in the daemon
  /// suites: a CLI that had answered was waited on until its 300-s bound). So the kernel is asked
  /// too, without reaping (`WNOWAIT`: Foundation may still reap it and run its handler).
  public var exited: Exit? {
    if let exit = ending.value.withLock({ $0 }) { return exit }
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return nil }
    let child = info._sifields._sigchld
    guard child.si_pid == pid else { return nil }  // still running
    let exit = Exit(status: child.si_status, signaled: info.si_code != Int32(CLD_EXITED))
    ending.value.withLock { if $0 == nil { $0 = exit } }
    return exit
  }
  /// Whether it still runs.
  public var isRunning: Bool { exited == nil }

  /// Writes to its standard input (started with `standardInput: true`).
  public func write(_ bytes: [UInt8]) throws { try input?.write(contentsOf: Data(bytes)) }
  /// Writes a line to its standard input.
  public func writeLine(_ line: String) throws { try write(Array((line + "\n").utf8)) }
  /// Closes its standard input (it reads end of file).
  public func closeInput() { try? input?.close() }

  /// Sends `signal`.
  public func send(_ signal: Int32) { if isRunning { kill(pid, signal) } }

  /// Waits for it to end by itself.
  /// - Returns: how it ended, or `nil` after `timeout`.
  public func waitForExit(timeout: Duration = .seconds(60)) async -> Exit? {
    await waitForValue(timeout: timeout, every: .milliseconds(10)) { self.exited }
  }

  /// Stops it: `signal` (SIGTERM), then SIGKILL if it still runs after `limit`.
  /// - Returns: how it ended (a SIGKILL says so: `signaled`, status 9).
  @discardableResult
  public func stop(signal: Int32 = SIGTERM, killingAfter limit: Duration = .seconds(20)) async -> Exit {
    send(signal)
    if let exit = await waitForExit(timeout: limit) { return exit }
    kill(pid, SIGKILL)
    return await waitForExit(timeout: .seconds(30)) ?? Exit(status: SIGKILL, signaled: true)
  }

  /// Waits for `file` to hold a JSON object of strings (a ready file written atomically).
  /// - Throws: ``ChildProcessError`` with its output when it ends first or `timeout` passes.
  public func readyFile(_ file: URL, timeout: Duration = .seconds(30)) async throws -> [String: String] {
    let found = await waitForValue(timeout: timeout, every: .milliseconds(10)) { () -> [String: String]? in
      if let data = try? Data(contentsOf: file), !data.isEmpty,
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: String]
      {
        return object
      }
      // Ended without the file: stop waiting (the file may have come just before the end).
      return self.isRunning ? nil : [:]
    }
    guard let found, !found.isEmpty else {
      let why = isRunning ? "did not become ready in \(timeout)" : "ended (\(exited.map { "\($0)" } ?? ""))"
      throw ChildProcessError(message: "\(name) \(why):\n\(output)")
    }
    return found
  }

  /// Waits for its first line of standard output (or of standard error).
  /// - Throws: ``ChildProcessError`` with its output when it ends first or `timeout` passes.
  public func firstLine(ofStandardError: Bool = false, timeout: Duration = .seconds(30)) async throws -> String {
    let line = await waitForValue(timeout: timeout, every: .milliseconds(10)) { () -> String? in
      let text = ofStandardError ? self.standardError : self.standardOutput
      if let newline = text.firstIndex(of: "\n") { return String(text[..<newline]) }
      return self.isRunning ? nil : ""
    }
    guard let line, !line.isEmpty else {
      throw ChildProcessError(message: "\(name) printed no line:\n\(output)")
    }
    return line
  }
}

/// Why a child process did not do what a test waited for.
public struct ChildProcessError: Error, CustomStringConvertible {
  /// What went wrong, with the child's output.
  public let message: String
  /// The message.
  public var description: String { message }
  /// An error saying `message`.
  public init(message: String) { self.message = message }
}
