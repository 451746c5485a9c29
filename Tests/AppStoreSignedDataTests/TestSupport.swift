import Foundation
import SubstatusJSON
import Testing

@testable import AppStoreSignedData

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent()
  .deletingLastPathComponent()

/// A failure with a message.
struct TestFailure: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// The text of a fixture file.
func fixture(_ name: String) throws -> String {
  guard let url = Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil) else {
    throw TestFailure("missing fixture \(name)")
  }
  return try String(contentsOf: url, encoding: .utf8)
}

/// Runs the independent Python verifier (Fixtures/verify_signatures.py, pyca/cryptography) over a
/// batch of checks and returns its results, one per check.
///
/// The blocking process I/O runs on a thread of its own, never on Swift's cooperative pool.
func pythonChecks(_ checks: [JSONValue]) async throws -> [JSONValue] {
  let python = packageRoot.appendingPathComponent(".venv/bin/python").path
  guard FileManager.default.isExecutableFile(atPath: python) else {
    throw TestFailure("\(python) is missing: run scripts/install-deps --test (make test does)")
  }
  guard
    let script = Bundle.module.url(forResource: "Fixtures/verify_signatures", withExtension: "py")
  else {
    throw TestFailure("missing Fixtures/verify_signatures.py")
  }
  let input = JSONValue.array(checks).serializedBytes()
  let output: [UInt8] = try await withCheckedThrowingContinuation { continuation in
    let thread = Thread {
      continuation.resume(with: Result { try runBlocking(python, [script.path], stdin: input) })
    }
    thread.start()
  }
  let results = try JSONValue(parsing: output)
  guard let array = results.arrayValue, array.count == checks.count else {
    throw TestFailure("the Python verifier answered \(results.serialized())")
  }
  return array
}

private func runBlocking(_ executable: String, _ arguments: [String], stdin: [UInt8]) throws
  -> [UInt8]
{
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  let input = Pipe()
  let output = Pipe()
  let error = Pipe()
  process.standardInput = input
  process.standardOutput = output
  process.standardError = error
  try process.run()
  let writer = Thread {
    input.fileHandleForWriting.write(Data(stdin))
    try? input.fileHandleForWriting.close()
  }
  writer.start()
  let errorReader = ErrorCollector(handle: error.fileHandleForReading)
  let out = output.fileHandleForReading.readDataToEndOfFile()
  let err = errorReader.wait()
  process.waitUntilExit()
  guard process.terminationStatus == 0 else {
    throw TestFailure(
      "\(executable) exited \(process.terminationStatus): \(String(decoding: err, as: UTF8.self))")
  }
  return Array(out)
}

/// Reads a pipe to its end on a thread of its own.
private final class ErrorCollector: @unchecked Sendable {
  private let done = DispatchSemaphore(value: 0)
  private var data = Data()
  init(handle: FileHandle) {
    Thread {
      self.data = handle.readDataToEndOfFile()
      self.done.signal()
    }.start()
  }
  func wait() -> Data {
    done.wait()
    return data
  }
}

extension JSONValue {
  /// `.string`, for building checks.
  static func text(_ value: String) -> JSONValue { .string(value) }
}
