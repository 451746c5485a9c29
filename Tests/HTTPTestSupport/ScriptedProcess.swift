import Foundation
@_exported import SubstatusProcessTestKit
import Synchronization

/// A child process driven by lines: commands on its stdin, one answer line each on its stdout,
/// read by a thread of its own (never a thread of the cooperative pool).
public final class ScriptedProcess: Sendable {
  private let process: Process
  private let input: FileHandle
  private let lines = Mutex<[String]>([])

  /// Starts `executable` with `arguments`.
  public init(_ executable: String, _ arguments: [String]) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let stdin = Pipe()
    let stdout = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    try process.run()
    self.process = process
    self.input = stdin.fileHandleForWriting
    let handle = stdout.fileHandleForReading
    Thread { [self] in
      var bytes = [UInt8]()
      while let chunk = try? handle.read(upToCount: 1), let byte = chunk.first {
        if byte == UInt8(ascii: "\n") {
          let line = String(decoding: bytes, as: UTF8.self)
          self.lines.withLock { $0.append(line) }
          bytes = []
        } else {
          bytes.append(byte)
        }
      }
    }.start()
  }

  /// Sends one command line.
  public func send(_ command: String) { try? input.write(contentsOf: Data((command + "\n").utf8)) }

  /// The next answer line, or `nil` after `timeout`.
  public func nextLine(timeout: Duration = .seconds(20)) async -> String? {
    var line: String?
    _ = await waitUntil(timeout: timeout) {
      line = lines.withLock { $0.isEmpty ? nil : $0.removeFirst() }
      return line != nil
    }
    return line
  }

  /// Sends `command` and returns the answer.
  public func ask(_ command: String) async -> String? {
    send(command)
    return await nextLine()
  }

  /// Closes stdin, so the script ends, and kills it if it has not.
  public func stop() {
    try? input.close()
    if process.isRunning { process.terminate() }
  }
}
