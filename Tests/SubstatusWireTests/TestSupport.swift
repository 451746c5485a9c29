import Foundation
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

/// Runs a program to completion; returns its standard output, throws with its standard error on
/// a non-zero exit.
@discardableResult
func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> String {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
  let out = Pipe()
  let err = Pipe()
  process.standardOutput = out
  process.standardError = err
  try process.run()
  // Read both pipes before waiting so that a large output cannot block the child.
  let group = DispatchGroup()
  nonisolated(unsafe) var errData = Data()
  group.enter()
  DispatchQueue.global().async {
    errData = err.fileHandleForReading.readDataToEndOfFile()
    group.leave()
  }
  let outData = out.fileHandleForReading.readDataToEndOfFile()
  group.wait()
  process.waitUntilExit()
  let stdout = String(decoding: outData, as: UTF8.self)
  guard process.terminationStatus == 0 else {
    throw TestFailure(
      "\(executable) \(arguments.joined(separator: " ")) exited \(process.terminationStatus): "
        + String(decoding: errData, as: UTF8.self) + stdout)
  }
  return stdout
}

/// A temporary directory removed by the caller.
func makeTemporaryDirectory() throws -> URL {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent("substatus-test-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url
}
