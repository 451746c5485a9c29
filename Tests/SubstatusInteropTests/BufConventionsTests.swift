import Foundation
import SubstatusProcessTestKit
import Testing

/// A change to one file of a copy of Protos/, and what scripts/check-buf must say of it.
struct ProtoChange: Sendable, CustomTestStringConvertible {
  var testDescription: String
  var file: String
  var replacing: String
  var with: String
  /// Text check-buf's output must hold (empty: the copy passes).
  var refusal: String

  static let all: [ProtoChange] = [
    ProtoChange(
      testDescription: "none: the copy passes", file: "substatus/v1/report_service.proto",
      replacing: "", with: "", refusal: ""),
    ProtoChange(
      testDescription: "a field renumbered", file: "substatus/v1/eligibility_service.proto",
      replacing: "repeated EligibilityQuery queries = 2;", with: "repeated EligibilityQuery queries = 5;",
      refusal: #"Previously present field "2" with name "queries" on message "CheckEligibilityRequest" was deleted."#),
    ProtoChange(
      testDescription: "a method removed", file: "substatus/v1/report_service.proto",
      replacing: """
        rpc GetReport(GetReportRequest) returns (GetReportResponse) {
            option (required_role) = REQUIRED_ROLE_ADMIN;
            option idempotency_level = NO_SIDE_EFFECTS;
          }
        """, with: "",
      refusal: #"Previously present RPC "GetReport" on service "ReportService" was deleted."#),
    ProtoChange(
      testDescription: "an idempotency level changed", file: "substatus/v1/report_service.proto",
      replacing: "option idempotency_level = NO_SIDE_EFFECTS;\n  }\n  // Returns the app's series",
      with: "option idempotency_level = IDEMPOTENT;\n  }\n  // Returns the app's series",
      refusal: #"RPC "GetReport" on service "ReportService" changed option "idempotency_level" from "NO_SIDE_EFFECTS" to "IDEMPOTENT"."#),
    ProtoChange(
      testDescription: "an idempotency level removed", file: "substatus/v1/report_service.proto",
      replacing: "option idempotency_level = NO_SIDE_EFFECTS;\n  }\n  // Returns the app's series",
      with: "}\n  // Returns the app's series",
      refusal: #"changed option "idempotency_level" from "NO_SIDE_EFFECTS" to "IDEMPOTENCY_UNKNOWN"."#),
    ProtoChange(
      testDescription: "an idempotency level declared where none was: passes", file: "substatus/v1/tenant_service.proto",
      replacing: "option (required_role) = REQUIRED_ROLE_OPERATOR;\n  }",
      with: "option (required_role) = REQUIRED_ROLE_OPERATOR;\n    option idempotency_level = IDEMPOTENT;\n  }",
      refusal: ""),
    ProtoChange(
      testDescription: "a STANDARD lint rule broken (enum zero value)", file: "substatus/v1/report_service.proto",
      replacing: "service ReportService {", with: "enum Shade { SHADE_DARK = 0; }\nservice ReportService {",
      refusal: #"Enum zero value name "SHADE_DARK" should be suffixed with "_UNSPECIFIED"."#),
  ]
}

/// scripts/check-buf, which `make test` runs: `buf lint` and `buf breaking` against the previous
/// commit's Protos/. These tests show it refuses what it must, and says why it skips when git
/// cannot give the previous commit.
@Suite(.serialized)
struct BufConventionsTests {
  let script = packageRoot.appendingPathComponent("scripts/check-buf").path

  /// A temporary workspace: the repository's buf.yaml and a copy of its Protos/.
  func workspace() throws -> URL {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "check-buf-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    for item in ["buf.yaml", "Protos"] {
      try FileManager.default.copyItem(
        at: packageRoot.appendingPathComponent(item), to: directory.appendingPathComponent(item))
    }
    return directory
  }

  /// Applies `change` to the workspace's Protos/.
  func apply(_ change: ProtoChange, in directory: URL) throws {
    guard !change.replacing.isEmpty else { return }
    let file = directory.appendingPathComponent("Protos/" + change.file)
    let text = try String(contentsOf: file, encoding: .utf8)
    try #require(text.contains(change.replacing), "\(change.file) no longer holds \(change.replacing)")
    try text.replacingOccurrences(of: change.replacing, with: change.with)
      .write(to: file, atomically: true, encoding: .utf8)
  }

  @Test("a copy of Protos/ against the original", arguments: ProtoChange.all)
  func changeAgainstTheOriginal(_ change: ProtoChange) async throws {
    let directory = try workspace()
    defer { try? FileManager.default.removeItem(at: directory) }
    try apply(change, in: directory)
    let run = try await runExecutable(
      script, ["--against", packageRoot.appendingPathComponent("Protos").path, directory.path])
    let output = run.stdout + run.stderr
    if change.refusal.isEmpty {
      #expect(run.status == 0, "\(output)")
      #expect(output.contains("check-buf: breaking ok"), "\(output)")
    } else {
      #expect(run.status != 0, "check-buf passed:\n\(output)")
      #expect(output.contains(change.refusal), "\(output)")
    }
  }

  /// Runs git in `directory`.
  func git(_ arguments: [String], in directory: URL) async throws {
    let run = try await runExecutable(
      "/usr/bin/git",
      ["-C", directory.path, "-c", "user.name=test", "-c", "user.email=test@example.com"] + arguments)
    try #require(run.status == 0, "git \(arguments): \(run.stderr)")
  }

  @Test("against the previous commit: skipped on the first commit and in a shallow clone, refused after a breaking commit")
  func againstThePreviousCommit() async throws {
    let directory = try workspace()
    let shallow = directory.appendingPathExtension("shallow")
    defer {
      try? FileManager.default.removeItem(at: directory)
      try? FileManager.default.removeItem(at: shallow)
    }
    try await git(["init", "-q"], in: directory)
    try await git(["add", "-A"], in: directory)
    try await git(["commit", "-qm", "first"], in: directory)
    let first = try await runExecutable(script, [directory.path])
    #expect(first.status == 0, "\(first.stderr)")
    #expect(
      first.stdout.contains("check-buf: breaking: SKIPPED: HEAD is the first commit"), "\(first.stdout)")

    try apply(ProtoChange.all[2], in: directory)
    try await git(["commit", "-qam", "remove GetReport"], in: directory)
    let second = try await runExecutable(script, [directory.path])
    #expect(second.status != 0, "check-buf passed:\n\(second.stdout)")
    #expect(second.stdout.contains(ProtoChange.all[2].refusal), "\(second.stdout)")
    #expect(second.stderr.contains("breaks clients built from the previous commit"), "\(second.stderr)")

    try await git(["clone", "-q", "--depth", "1", "file://" + directory.path, shallow.path], in: directory)
    let clone = try await runExecutable(script, [shallow.path])
    #expect(clone.status == 0, "\(clone.stderr)")
    #expect(
      clone.stdout.contains("check-buf: breaking: SKIPPED: a shallow clone without the previous commit"),
      "\(clone.stdout)")
  }
}
