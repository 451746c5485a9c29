import Foundation
import SubstatusProcessTestKit
import Testing

/// Errors on the wire, checked byte for byte against the specifications (Fixtures/wire_errors.py):
/// a bad key, a bad argument (a `google.rpc.BadRequest` naming the field), an unknown method, an
/// oversized body and a passed deadline, in Connect (JSON and binary: the HTTP status of the code,
/// Connect's JSON error body), gRPC-Web (binary and text: trailers last in the body) and gRPC, on
/// both listeners; plus Connect's 415 for an unknown codec and `unimplemented` for an unknown
/// content-encoding.
@Suite(.serialized, .sharedServer)
struct WireErrorTests {
  @Test("errors in every protocol", arguments: [Listener.grpcPort, .httpListener])
  func errors(_ listener: Listener) async throws {
    let server = try SharedServer.server()
    let run = try await runExecutable(
      venvBin.appendingPathComponent("python").path,
      [
        fixture("wire_errors.py"), server.grpcAddress, server.operatorKey,
        packageRoot.appendingPathComponent("Protos").path,
        listener.address(server), listener.rawValue,
      ])
    #expect(
      run.status == 0 && run.stdout.contains(" passed, 0 failed"),
      "\(listener.testDescription):\n\(run.stdout)\n\(run.stderr)")
  }
}
