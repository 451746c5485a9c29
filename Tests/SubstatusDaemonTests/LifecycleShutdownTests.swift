import Foundation
import SubstatusProcessTestKit
import Testing

/// substatusd's lifecycle seen from outside: one process per SQLite data directory, and SIGTERM
/// drains the calls in flight before the process exits 0, losing nothing it acknowledged.
@Suite struct LifecycleShutdownTests {
  @Test("a second substatusd on the same SQLite data directory is refused (exit status 3, naming the first); after the first ends, even by SIGKILL, it starts")
  func dataDirectoryLock() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-lock-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    let first = try await RunningDaemon(reusing: directory)
    defer { first.abandon() }
    let (status, _, err) = try await runProcess(
      try builtExecutable("substatusd"),
      ["--data-dir", directory.appendingPathComponent("data").path, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
    #expect(status == 3, "\(err)")
    #expect(err.contains("another substatusd (pid \(first.pid)) is using this data directory"), "\(err)")
    #expect(first.isRunning)
    await first.kill()
    let second = try await RunningDaemon(reusing: directory)
    let (secondStatus, log) = await second.stop()
    #expect(secondStatus == 0, "\(log.suffix(2000))")
  }

  @Test("SIGTERM: a call in flight finishes (OK), the process exits 0, and the tenant it created is there after a restart")
  func sigtermDrainsACallInFlight() async throws {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-drain-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    let daemon = try await RunningDaemon(extraArguments: ["--refresh-interval", "0", "--reconcile-interval", "0"], reusing: directory)
    defer { daemon.abandon() }
    let script = try #require(Bundle.module.url(forResource: "Fixtures/drain_client", withExtension: "py"))
    let name = "drained-\(UUID().uuidString.prefix(8))"
    let client = try ChildProcess(python, [script.path, daemon.grpc, daemon.operatorKey, name], standardInput: true)
    #expect(try await client.firstLine() == "SENT")
    // The call's headers are in; the daemon is told to stop and starts draining.
    daemon.child.send(SIGTERM)
    #expect(await waitUntil { daemon.log.contains("draining: finishing in-flight calls") }, "\(daemon.log.suffix(2000))")
    try client.writeLine("GO")
    let answer = await waitForValue(timeout: .seconds(30)) { () -> [String: Any]? in
      let lines = client.standardOutput.split(separator: "\n")
      guard lines.count >= 2 else { return nil }
      return try? JSONSerialization.jsonObject(with: Data(lines[1].utf8)) as? [String: Any]
    }
    #expect(answer?["status"] as? Int == 0, "\(client.output)")
    #expect((answer?["message_bytes"] as? Int ?? 0) > 5, "the answer carries the new tenant: \(client.output)")
    let exit = await daemon.child.waitForExit(timeout: .seconds(30))
    #expect(exit == .init(status: 0, signaled: false), "\(daemon.log.suffix(2000))")
    #expect(daemon.log.contains(#""msg":"stopped""#))

    // Acknowledged, so stored: a restart on the same data lists it.
    let restarted = try await RunningDaemon(reusing: directory)
    defer { restarted.abandon() }
    let (status, out, err) = try await runProcess(
      try builtExecutable("substatus"), ["tenant", "list", "--addr", restarted.grpc, "--key", restarted.operatorKey])
    #expect(status == 0, "\(err)")
    #expect(out.contains(name), "\(out)")
    _ = await restarted.stop()
  }
}
