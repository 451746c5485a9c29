import Foundation
import SubstatusProcessTestKit
import Testing

/// Connect's GET form of unary calls on the HTTP/1.1 listener of a real `substatusd`, called by the
/// Python `connectrpc` client (Fixtures/connect_get.py): served for the RPCs that declare
/// `idempotency_level = NO_SIDE_EFFECTS`, 405 for the others.
@Suite(.serialized, .sharedServer)
struct ConnectGetInteropTests {
  @Test("connectrpc's GET calls a NO_SIDE_EFFECTS RPC; a GET of CreateTenant is refused")
  func connectGet() async throws {
    let server = try SharedServer.server()
    let run = try await runExecutable(
      venvBin.appendingPathComponent("python").path,
      [fixture("connect_get.py"), server.httpAddress, server.operatorKey, packageRoot.appendingPathComponent("Protos").path])
    #expect(run.status == 0 && run.stdout.contains(" passed, 0 failed"), "\(run.stdout)\n\(run.stderr)")
  }
}
