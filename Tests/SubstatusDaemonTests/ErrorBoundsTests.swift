import Foundation
import Testing

/// Issue 30, attack 3 (and the JSON part of attack 8) against a real substatusd: errors whose
/// message or details would not fit a header block are cut to their bounds and answered at once;
/// no call is left open holding its slot. The clients are `Fixtures/error_bounds.py` (raw `h2`,
/// grpcio, and HTTP for Connect and gRPC-Web).
@Suite(.serialized) struct ErrorBoundsTests {
  /// Runs one scenario against a fresh daemon, off the cooperative pool; returns its output and
  /// the daemon's log.
  func run(_ scenario: String) async throws -> (out: String, log: String) {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let daemon = try await RunningDaemon(extraArguments: ["--refresh-interval", "0"])
    let arguments = [
      packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures/error_bounds.py").path, scenario,
      daemon.grpc, daemon.http, daemon.operatorKey, packageRoot.appendingPathComponent("Protos").path,
    ]
    let (status, out, err) = try await runProcess(python, arguments)
    let (exit, log) = await daemon.stop()
    #expect(status == 0, "error_bounds.py \(scenario) failed:\n\(err.suffix(4000))\n\(out.suffix(4000))")
    #expect(out.contains("PASS \(scenario)"))
    #expect(exit == 0, "substatusd exited \(exit):\n\(log.suffix(2000))")
    return (out, log)
  }

  /// A 70,000-digit asOfMs in the gRPC JSON codec and over Connect: INVALID_ARGUMENT at once, with
  /// a message that quotes 64 bytes of the value and its length; the log line is as short.
  @Test func hugeJSONNumberIsAnsweredWithAShortMessage() async throws {
    let (_, log) = try await run("json_number")
    let rpcLines = log.split(separator: "\n").filter { $0.contains(#""msg":"rpc""#) && $0.contains("GetStatus") }
    #expect(rpcLines.count >= 2)
    for line in rpcLines { #expect(line.utf8.count < 4096, "a log line of \(line.utf8.count) bytes") }
  }

  /// 2 connections x 520 such calls against the 1,024 call slots: all answered, slots free, and
  /// another client is served.
  @Test func floodOfHugeErrorsLeavesTheCallSlotsFree() async throws {
    _ = try await run("slot_flood")
  }

  /// PutEntitlements with 300 violations: INVALID_ARGUMENT with the first violations and the count
  /// of the rest, over gRPC, Connect and gRPC-Web.
  @Test func threeHundredViolationsAreCappedWithTheCountOfTheRest() async throws {
    _ = try await run("violations")
  }
}
