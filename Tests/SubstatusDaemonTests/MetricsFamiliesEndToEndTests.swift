import Foundation
import SubstatusWire
import Testing

/// The `/metrics` families of a real substatusd (SQLite store, default flags) after a few RPCs:
/// every family's name, type and HELP text, and every series it shows (its name and labels, not
/// its value), equal to `Fixtures/metrics-families.txt`. Dashboards, alerts and independent suites
/// read these names: a change to one is a change of the interface, made here on purpose.
///
/// To re-record after such a change: `SUBSTATUS_RECORD_METRICS_FAMILIES=1 swift test --skip-build
/// --filter MetricsFamiliesEndToEndTests` writes the fixture (and the test then fails, so a record
/// is never mistaken for a pass).
@Suite struct MetricsFamiliesEndToEndTests {
  static let fixture = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures/metrics-families.txt")

  /// The families of a `/metrics` text, one line each: `TYPE name type`, `HELP name text`, then the
  /// family's series sorted (`SERIES name{labels}`), families in the order they are exposed.
  static func families(_ text: String) -> [String] {
    var out: [String] = []
    var series: [String] = []
    func flush() {
      out += series.sorted().map { "SERIES \($0)" }
      series = []
    }
    for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
      if line.hasPrefix("# HELP ") {
        flush()
        out.append("HELP " + line.dropFirst("# HELP ".count))
      } else if line.hasPrefix("# TYPE ") {
        out.append("TYPE " + line.dropFirst("# TYPE ".count))
      } else if let space = line.lastIndex(of: " ") {
        series.append(String(line[..<space]))
      } else {
        series.append("MALFORMED " + line)
      }
    }
    flush()
    return out
  }

  @Test func metricsFamiliesNamesTypesHelpAndSeriesAreUnchanged() async throws {
    let daemon = try await RunningDaemon()
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    // A few calls, each method once with OK: CreateTenant, RegisterApp, PutProducts, CheckEligibility.
    let (admin, app) = try await client.makeApp(
      operatorKey: daemon.operatorKey, bundleID: "com.example.metrics", appleAppID: 0)
    _ = try await SummaryEndToEndTests.eligibility(client, key: admin, app: app, user: "ann")
    let text = try await WebhookLimitsEndToEndTests.metrics(daemon)
    let got = Self.families(text)
    #expect(got.count > 100, "\(text)")
    if ProcessInfo.processInfo.environment["SUBSTATUS_RECORD_METRICS_FAMILIES"] == "1" {
      try (got.joined(separator: "\n") + "\n").write(to: Self.fixture, atomically: true, encoding: .utf8)
      Issue.record("recorded \(Self.fixture.path); run again without SUBSTATUS_RECORD_METRICS_FAMILIES")
      return
    }
    let want = try String(contentsOf: Self.fixture, encoding: .utf8).split(separator: "\n").map(String.init)
    #expect(got.count == want.count)
    for (i, (g, w)) in zip(got, want).enumerated() where g != w {
      Issue.record("line \(i + 1): got \(g), want \(w)")
    }
    for extra in got.dropFirst(want.count) { Issue.record("extra: \(extra)") }
    for missing in want.dropFirst(got.count) { Issue.record("missing: \(missing)") }
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }
}
