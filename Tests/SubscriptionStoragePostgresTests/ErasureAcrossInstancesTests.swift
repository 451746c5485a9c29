import Foundation
import SubscriptionStorage
import Testing

/// Issue 30, attacks 5 and 8 with two substatusd instances sharing one PostgreSQL database: an
/// erasure through one instance reaches the other's WatchEvents window (a new watch from the start
/// through the other never shows the erased user's events), and event cursors are per app and
/// read by every instance with the master key (`Fixtures/erasure_two_instances.py`).
@Suite("erasure and cursors across instances sharing one PostgreSQL database", .serialized)
struct ErasureAcrossInstancesTests {
  @Test func anErasureThroughOneInstanceReachesTheOthersWatchWindowAndCursorsArePerApp() async throws {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let masterKey = MasterKey.generate().hexEncoded
    let a = try await blocking { try Instance(store: url, masterKey: masterKey) }
    let b = try await blocking { try Instance(store: url, masterKey: masterKey) }
    let operatorKey = try #require(a.operatorKey)
    let output = FileManager.default.temporaryDirectory
      .appendingPathComponent("erasure-two-instances-\(UUID().uuidString).log").path
    defer { unlink(output) }
    let script = packageRoot.appendingPathComponent(
      "Tests/SubscriptionStoragePostgresTests/Fixtures/erasure_two_instances.py").path
    let arguments = [python, script, a.grpc, b.grpc, operatorKey, packageRoot.appendingPathComponent("Protos").path]
    let status = try await blocking {
      waitForExit(try spawn(arguments, output: output, environment: childEnvironment([:])))
    }
    let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    _ = try await blocking { a.stop() }
    _ = try await blocking { b.stop() }
    #expect(status == 0, "erasure_two_instances.py failed:\n\(printed)\nA:\n\(a.log)\nB:\n\(b.log)")
    #expect(printed.contains(" passed, 0 failed"), "\(printed)")
  }
}
