// substatus-alloc-budget: counts the heap allocations per call of the service's hot paths, for
// the allocation budgets `make test` checks (Tests/SubstatusAllocBudgetTests, README "Testing").
//
// The counter is CAllocCounter, a malloc interposer linked into this executable only. The paths
// run through the real SubstatusService (interceptors, access log and metrics included) over a
// SQLite store in a temporary directory, on the in-process transport (the requests encoded
// before the counted window, the answers decoded and checked after it: the count is the
// transport's and the server's) or, for notifications, the service's HTTP router. Each path is warmed up with one uncounted round (caches, first-call work), then
// counted over `--rounds` rounds; the answer of every call is checked.
//
// Usage: substatus-alloc-budget [--rounds R] [--scale S] [--paths a,b] [--trace FILE]
//        (--trace: the counted allocations' call stacks, for scripts/alloc-sites)
//        substatus-alloc-budget --self-test   (the interposer against glibc's contracts)
// Prints one JSON object: {"build", "rounds", "paths": [{"path", "calls_per_round",
// "allocations_per_call": [per round], "bytes_per_call": [...], "frees_per_call": [...]}]}.
import CAllocCounter
import Foundation
import SubstatusJSON

@main
enum AllocBudget {
  static let usage =
    "usage: substatus-alloc-budget [--rounds R] [--scale S] [--paths name,name] [--trace FILE] | --self-test"

  static func main() async {
    do {
      try await run(arguments: Array(CommandLine.arguments.dropFirst()))
    } catch {
      FileHandle.standardError.write(Data("substatus-alloc-budget: \(error)\n".utf8))
      exit(1)
    }
  }

  static func run(arguments: [String]) async throws {
    var rounds = 3
    var scale = 1
    var only: Set<String>?
    var trace: String?
    if arguments == ["--self-test"] { return try selfTest() }
    var i = 0
    while i < arguments.count {
      let value = i + 1 < arguments.count ? arguments[i + 1] : nil
      switch (arguments[i], value) {
      case ("--rounds", let v?): rounds = Int(v) ?? 0
      case ("--scale", let v?): scale = Int(v) ?? 0
      case ("--paths", let v?): only = Set(v.split(separator: ",").map(String.init))
      case ("--trace", let v?): trace = v
      default: throw BudgetError(usage)
      }
      i += 2
    }
    guard rounds >= 1, scale >= 1 else { throw BudgetError(usage) }
    try checkInterposed()
    var traceFD: Int32 = -1
    if let trace {
      traceFD = open(trace, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0o644)
      guard traceFD >= 0 else { throw BudgetError("--trace \(trace): cannot open it (errno \(errno))") }
    }
    try await measure(rounds: rounds, scale: scale, only: only, traceFD: traceFD)
    if let trace {
      substatus_alloc_counter_trace_to(-1)
      close(traceFD)
      // The mappings, for scripts/alloc-sites to symbolize the addresses (read to the end: a
      // procfs file has no size, and one read returns only a page).
      let maps = open("/proc/self/maps", O_RDONLY)
      guard maps >= 0 else { throw BudgetError("cannot read /proc/self/maps") }
      defer { close(maps) }
      var text: [UInt8] = []
      var buffer = [UInt8](repeating: 0, count: 65536)
      while true {
        let n = buffer.withUnsafeMutableBytes { read(maps, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        text += buffer[0..<n]
      }
      try Data(text).write(to: URL(fileURLWithPath: trace + ".maps"))
    }
  }

  /// Sets up the world and prints the counts of each path; with `traceFD` (not -1), the counted
  /// rounds' allocations' call stacks go to it (``substatus_alloc_counter_trace_to``).
  static func measure(rounds: Int, scale: Int, only: Set<String>?, traceFD: Int32) async throws {

    let world = try BudgetWorld()
    let results = try await world.serving { () async throws -> [JSONValue] in
      // One subscription per notification (warm-up round included), unless it is not measured.
      let notifications = only.map { $0.contains("notification_v1") } ?? true
      let fixture = try await Fixture.make(in: world, chains: notifications ? (rounds + 1) * 50 * scale : 0)
      var paths = measuredPaths(world: world, fixture: fixture, scale: scale)
      if let only {
        let unknown = only.subtracting(paths.map(\.name))
        guard unknown.isEmpty else { throw BudgetError("unknown paths: \(unknown.sorted()); \(paths.map(\.name))") }
        paths = paths.filter { only.contains($0.name) }
      }
      var results: [JSONValue] = []
      for path in paths {
        // Warm-up: one uncounted round.
        substatus_alloc_counter_trace_to(-1)
        _ = try await path.round(0, path.calls)
        substatus_alloc_counter_trace_to(traceFD)
        var counted: [Counts] = []
        for r in 1...rounds { counted.append(try await path.round(r * path.calls, path.calls)) }
        substatus_alloc_counter_trace_to(-1)
        func perCall(_ value: (Counts) -> UInt64) -> JSONValue {
          .array(counted.map { .double((Double(value($0)) / Double($0.calls) * 100).rounded() / 100) })
        }
        results.append(
          .object([
            "path": .string(path.name), "calls_per_round": .integer(Int64(path.calls)),
            "allocations_per_call": perCall(\.allocations), "bytes_per_call": perCall(\.bytes),
            "frees_per_call": perCall(\.frees),
          ]))
      }
      return results
    }
    #if DEBUG
      let build = "debug"
    #else
      let build = "release"
    #endif
    let report: JSONValue = .object([
      "build": .string(build), "rounds": .integer(Int64(rounds)), "paths": .array(results),
    ])
    print(report.serialized())
    fflush(nil)
  }

  /// Runs the interposer's self-test (`substatus_alloc_counter_self_test`) and the check that it
  /// is interposed; prints `ok`.
  static func selfTest() throws {
    try checkInterposed()
    var message = [CChar](repeating: 0, count: 512)
    let failures = substatus_alloc_counter_self_test(&message, UInt(message.count))
    guard failures == 0 else {
      let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      throw BudgetError("self-test: \(failures) failures; the first: \(text)")
    }
    print("ok")
  }

  /// Fails unless the interposer sees the allocations of the C library and of the Swift runtime
  /// (it would not if the linker had not exported its `malloc`).
  static func checkInterposed() throws {
    let c = try counting {
      // realpath with no buffer: glibc mallocs the result (the optimizer does not know that, as
      // it knows strdup's, so it cannot remove the pair).
      guard let path = realpath("/", nil) else { return 0 }
      free(path)
      return 1
    }
    let swift = try counting {
      // A size the optimizer cannot know: the array is on the heap.
      let values = [Int](repeating: 7, count: Int.random(in: 1000...1001))
      return values.reduce(0, &+) > 0 ? 1 : 0
    }
    guard c.allocations >= 1, c.frees >= 1, swift.allocations >= 1 else {
      throw BudgetError(
        "the allocation counter is not interposed (C: \(c.allocations) allocations, Swift: \(swift.allocations))")
    }
  }

  static func counting(_ body: () throws -> Int) throws -> substatus_alloc_counts {
    substatus_alloc_counter_start()
    let result = try body()
    let counts = substatus_alloc_counter_stop()
    guard result == 1 else { throw BudgetError("the interposer check could not run") }
    return counts
  }
}
