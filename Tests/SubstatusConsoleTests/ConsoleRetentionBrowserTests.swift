import Foundation
import SubstatusProcessTestKit
import Testing

/// The console's Retention page in a real headless Chromium against a real `substatusd`:
/// `Fixtures/console_retention_browser.py` saves rules from their JSON form (a bad set refused,
/// naming the rule), checks the rules table against GetRetentionRules, tests users in the "test a
/// user" box against TestRetentionRules, runs axe-core at 1280 and 390 px, and checks that nothing
/// but the server was requested and no Content-Security-Policy was violated.
@Suite struct ConsoleRetentionBrowserTests {
  static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

  @Test(.timeLimit(.minutes(2))) func retentionRulesAndTestAUserInChromium() async throws {
    let server = try await ServerProcess()
    let script = try #require(Bundle.module.url(forResource: "Fixtures/console_retention_browser.py", withExtension: nil))
    let run = try await runExecutable(
      Self.packageRoot.appendingPathComponent(".venv/bin/python").path,
      [script.path, "http://\(server.httpAddress)", server.operatorKey])
    #expect(run.status == 0 && run.stdout.contains(" passed, 0 failed"), "\(run.stdout)\n\(run.stderr)\n\(server.output)")
    #expect(server.isRunning)
    await server.stop()
  }
}
