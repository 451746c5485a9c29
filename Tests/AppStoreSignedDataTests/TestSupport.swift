import Foundation
import SubstatusProcessTestKit
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
  let run = try await runExecutable(python, [script.path], stdin: input)
  guard run.status == 0 else { throw TestFailure("\(python) exited \(run.status): \(run.stderr)") }
  let results = try JSONValue(parsing: Array(run.stdout.utf8))
  guard let array = results.arrayValue, array.count == checks.count else {
    throw TestFailure("the Python verifier answered \(results.serialized())")
  }
  return array
}

extension JSONValue {
  /// `.string`, for building checks.
  static func text(_ value: String) -> JSONValue { .string(value) }
}
