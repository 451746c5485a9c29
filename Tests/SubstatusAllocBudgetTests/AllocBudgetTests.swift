import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import Testing

/// The checked-in budgets: `alloc-budgets.json` beside this file (its header says how to raise one).
struct AllocBudgets: Sendable {
  /// A path's budget: allocations per call in each build configuration, and why it is what it is.
  struct Entry: Sendable {
    var debug: Double
    var release: Double
    var comment: String

    func budget(build: String) -> Double? {
      switch build {
      case "debug": debug
      case "release": release
      default: nil
      }
    }
  }

  /// How far over its budget a count may be before the test fails (0.10: 10 %).
  var tolerance: Double
  /// Below this share of its budget a count is reported (not failed) so the budget gets lowered.
  var lowerBelow: Double
  var paths: [String: Entry]

  init(json: JSONValue) throws {
    guard let tolerance = json["tolerance"]?.doubleValue, let lowerBelow = json["lower_below"]?.doubleValue,
      let paths = json["paths"]?.objectValue
    else { throw BudgetFileError("alloc-budgets.json needs tolerance, lower_below and paths") }
    self.tolerance = tolerance
    self.lowerBelow = lowerBelow
    self.paths = [:]
    for (name, value) in paths {
      guard let debug = value["debug"]?.doubleValue, let release = value["release"]?.doubleValue,
        let comment = value["comment"]?.stringValue, !comment.isEmpty
      else { throw BudgetFileError("alloc-budgets.json: \(name) needs debug, release and a comment") }
      self.paths[name] = Entry(debug: debug, release: release, comment: comment)
    }
  }

  static func load() throws -> AllocBudgets {
    let url = try #require(Bundle.module.url(forResource: "alloc-budgets", withExtension: "json"))
    return try AllocBudgets(json: try JSONValue(parsing: try String(contentsOf: url, encoding: .utf8)))
  }

  /// The path names, for the parameterized test.
  static var pathNames: [String] { ((try? load())?.paths.keys).map { $0.sorted() } ?? [] }
}

struct BudgetFileError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// What a count means against its budget.
enum BudgetVerdict: Equatable, Sendable {
  /// More than the tolerance over the budget: the test fails.
  case over(percent: Double)
  /// Within the tolerance, and not far below.
  case within
  /// Below `lowerBelow` of the budget: reported so that the budget is lowered to the new count.
  case farBelow(percent: Double)

  init(count: Double, budget: Double, tolerance: Double, lowerBelow: Double) {
    let percent = budget > 0 ? (count / budget - 1) * 100 : (count > 0 ? .infinity : 0)
    if count > budget * (1 + tolerance) {
      self = .over(percent: percent)
    } else if count < budget * lowerBelow {
      self = .farBelow(percent: percent)
    } else {
      self = .within
    }
  }
}

/// One run of `substatus-alloc-budget`: per path, the allocations per call of each counted round.
struct AllocMeasurement: Sendable {
  struct Path: Sendable {
    var allocationsPerCall: [Double]
    var bytesPerCall: [Double]
    /// The count checked against the budget: the smallest round (the runtime's own background
    /// allocations only ever add to a round; the path's own count is in every round).
    var count: Double { allocationsPerCall.min() ?? .infinity }
  }

  var build: String
  var paths: [String: Path]

  init(json: JSONValue) throws {
    guard let build = json["build"]?.stringValue, let paths = json["paths"]?.arrayValue else {
      throw BudgetFileError("substatus-alloc-budget's output has no build or paths: \(json.serialized())")
    }
    self.build = build
    self.paths = [:]
    for path in paths {
      guard let name = path["path"]?.stringValue,
        let allocations = path["allocations_per_call"]?.arrayValue?.compactMap(\.doubleValue), !allocations.isEmpty,
        let bytes = path["bytes_per_call"]?.arrayValue?.compactMap(\.doubleValue)
      else { throw BudgetFileError("substatus-alloc-budget: a malformed path: \(path.serialized())") }
      self.paths[name] = Path(allocationsPerCall: allocations, bytesPerCall: bytes)
    }
  }

  /// The executable's directory: the test binary's, or `SUBSTATUS_TEST_BIN_DIR` (`.build/release`
  /// to check the release budgets).
  static var executable: URL { ServerProcess.binDirectory.appendingPathComponent("substatus-alloc-budget") }

  /// Runs the executable once (a child process, off the cooperative pool); every test of the
  /// suite reads this one run.
  static let shared = Task<AllocMeasurement, any Error> {
    let path = executable.path
    guard FileManager.default.isExecutableFile(atPath: path) else {
      throw BudgetFileError("\(path) is missing: build it first (swift build --build-tests builds every product)")
    }
    let run = try await runExecutable(path, ["--rounds", "3"])
    guard run.status == 0 else {
      throw BudgetFileError("substatus-alloc-budget exited with \(run.status):\n\(run.stderr.suffix(4000))")
    }
    guard let line = run.stdout.split(separator: "\n").last else {
      throw BudgetFileError("substatus-alloc-budget printed nothing; stderr:\n\(run.stderr.suffix(4000))")
    }
    return try AllocMeasurement(json: try JSONValue(parsing: String(line)))
  }
}

/// Allocation budgets of the hot paths (README "Testing"): allocations per call counted by
/// `substatus-alloc-budget` against `alloc-budgets.json`. More than `tolerance` over a budget
/// fails; far below it is reported as a warning, to lower the budget.
@Suite(.serialized) struct AllocBudgetTests {
  @Test("within its allocation budget", arguments: AllocBudgets.pathNames)
  func withinBudget(path name: String) async throws {
    let budgets = try AllocBudgets.load()
    let measurement = try await AllocMeasurement.shared.value
    let entry = try #require(budgets.paths[name])
    let budget = try #require(entry.budget(build: measurement.build), "no budget for the \(measurement.build) build")
    let measured = try #require(measurement.paths[name], "substatus-alloc-budget did not measure \(name)")
    let rounds = measured.allocationsPerCall.map { String($0) }.joined(separator: ", ")
    let bytes = measured.bytesPerCall.min() ?? 0
    switch BudgetVerdict(count: measured.count, budget: budget, tolerance: budgets.tolerance, lowerBelow: budgets.lowerBelow) {
    case .over(let percent):
      Issue.record(
        """
        \(name) (\(measurement.build)): \(measured.count) allocations per call, budget \(budget) \
        (+\(String(format: "%.1f", percent)) %, over the \(Int(budgets.tolerance * 100)) % tolerance; rounds: \(rounds); \
        \(bytes) bytes per call). Remove the new allocations, or raise the budget in \
        Tests/SubstatusAllocBudgetTests/alloc-budgets.json with the reason in the commit message.
        """)
    case .farBelow(let percent):
      Issue.record(
        """
        \(name) (\(measurement.build)): \(measured.count) allocations per call, budget \(budget) \
        (\(String(format: "%.1f", percent)) %; rounds: \(rounds)): lower the budget in \
        Tests/SubstatusAllocBudgetTests/alloc-budgets.json to \(measured.count.rounded(.up)).
        """, severity: .warning)
    case .within:
      break
    }
  }

  @Test("the allocation counter keeps glibc's contracts and counts exactly")
  func counterSelfTest() async throws {
    let run = try await runExecutable(AllocMeasurement.executable.path, ["--self-test"])
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stdout == "ok\n")
  }

  @Test("every measured path has a budget")
  func everyPathHasABudget() async throws {
    let budgets = try AllocBudgets.load()
    let measurement = try await AllocMeasurement.shared.value
    #expect(Set(measurement.paths.keys) == Set(budgets.paths.keys))
  }

  @Test(
    "the verdict of a count against its budget",
    arguments: [
      (100.0, 100.0, BudgetVerdict.within), (110.0, 100.0, .within), (110.5, 100.0, .over(percent: 10.5)),
      (200.0, 100.0, .over(percent: 100)), (80.0, 100.0, .within), (79.0, 100.0, .farBelow(percent: -21)),
      (0.0, 0.0, .within), (1.0, 0.0, .over(percent: .infinity)),
    ])
  func verdict(count: Double, budget: Double, expected: BudgetVerdict) {
    let verdict = BudgetVerdict(count: count, budget: budget, tolerance: 0.10, lowerBelow: 0.80)
    switch (verdict, expected) {
    case (.over(let a), .over(let b)), (.farBelow(let a), .farBelow(let b)):
      #expect(a == b || abs(a - b) < 1e-9, "\(count) against \(budget)")
    default:
      #expect(verdict == expected, "\(count) against \(budget)")
    }
  }
}
