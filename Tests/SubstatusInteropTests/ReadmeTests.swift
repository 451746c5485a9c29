import Foundation
import SubstatusProcessTestKit
import Testing

/// The README's "Calling it from any language", run as written (Fixtures/readme.py): the curl
/// one-liners, the one command that generates the Python code, the Connect and gRPC Python
/// examples and the `buf curl` lines, against a real `substatusd`.
@Suite(.serialized, .sharedServer)
struct ReadmeTests {
  @Test("every example of \"Calling it from any language\" works as written")
  func callingItFromAnyLanguage() async throws {
    let server = try SharedServer.server()
    let run = try await runExecutable(
      venvBin.appendingPathComponent("python").path,
      [
        fixture("readme.py"), server.grpcAddress, server.httpAddress, server.operatorKey,
        packageRoot.path,
      ])
    #expect(run.status == 0 && run.stdout.contains(" passed, 0 failed"), "\(run.stdout)\n\(run.stderr)")
  }
}
