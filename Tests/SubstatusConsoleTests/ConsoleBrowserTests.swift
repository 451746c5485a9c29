import Foundation
import SubstatusProcessTestKit
import Testing

/// The web console in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven
/// by selenium from `.venv`), against a real `substatusd` whose verifyReceipt is a real
/// `appstore-sim` with a frozen clock. `Fixtures/console_browser.py` holds the story: sign in,
/// register an app, set its secret and policy (purchase sharing included), edit the catalog, create
/// and revoke keys, add, test, replay to and remove webhooks (a receiver in the script checks the
/// signatures with the secret shown once) and read their deliveries, look a user up and check the
/// timeline against the history (as-of line moved by keyboard) and the user's events against
/// ListEvents, the report and trend charts against GetReport and GetTrends, a READ key without
/// admin actions but with the whole catalog's eligibility, axe-core on every page at 1280 and
/// 390 px, and no request beyond the server nor any Content-Security-Policy violation.
@Suite struct ConsoleBrowserTests {
  static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

  @Test(.timeLimit(.minutes(2))) func adminAndSupportStoriesInChromium() async throws {
    // The simulated App Store's history ends before now: it starts 130 days ago.
    let start = (Int64(Date().timeIntervalSince1970 * 1000) / 86_400_000 - 130) * 86_400_000
    let simulator = try await SimulatorProcess(startMs: start)
    let server: ServerProcess
    do { server = try await ServerProcess(extraArguments: simulator.verifyReceiptArguments + ["--allow-private-webhooks"]) } catch {
      await simulator.stop()
      throw error
    }
    let script = try #require(Bundle.module.url(forResource: "Fixtures/console_browser.py", withExtension: nil))
    let run = try await runExecutable(
      Self.packageRoot.appendingPathComponent(".venv/bin/python").path,
      [script.path, "http://\(server.httpAddress)", server.operatorKey, "http://\(simulator.address)"])
    #expect(run.status == 0 && run.stdout.contains(" passed, 0 failed"), "\(run.stdout)\n\(run.stderr)\n\(server.output)")
    #expect(server.isRunning)
    await server.stop()
    await simulator.stop()
  }
}
