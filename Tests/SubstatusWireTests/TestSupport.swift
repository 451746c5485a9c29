import Foundation
import SubstatusProcessTestKit
import Testing

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent()

/// The Python with grpcio and protobuf that `scripts/install-deps --test` prepares.
func testPython() throws -> String {
  let path = packageRoot.appendingPathComponent(".venv/bin/python").path
  guard FileManager.default.isExecutableFile(atPath: path) else {
    throw TestFailure("\(path) is missing: run scripts/install-deps --test (make test does)")
  }
  return path
}

/// A failure with a message.
struct TestFailure: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// Runs a program to completion (``runExecutable``: never blocking the cooperative pool); returns
/// its standard output, throws with its standard error on a non-zero exit.
@discardableResult
func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> String {
  let result = try await runExecutable(
    executable, arguments, environment: environment.map { ProcessInfo.processInfo.environment.merging($0) { $1 } })
  guard result.status == 0 else {
    throw TestFailure(
      "\(executable) \(arguments.joined(separator: " ")) exited \(result.status): " + result.stderr + result.stdout)
  }
  return result.stdout
}

/// A temporary directory removed by the caller.
func makeTemporaryDirectory() throws -> URL {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent("substatus-test-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url
}
