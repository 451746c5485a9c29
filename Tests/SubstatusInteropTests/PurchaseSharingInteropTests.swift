import Foundation
import SubstatusProcessTestKit
import Testing

/// Purchase sharing KEEP_FIRST seen by a real grpcio client (Fixtures/purchase_sharing.py): the
/// per-item `OWNED_BY_ANOTHER_USER` of ImportTransactions (transactions and renewal infos) and the
/// refused original transactions of ImportReceiptResponse, with their code and reason.
@Suite(.serialized, .sharedServer)
struct PurchaseSharingInteropTests {
  @Test("KEEP_FIRST: grpcio sees OWNED_BY_ANOTHER_USER per item")
  func keepFirst() async throws {
    let server = try SharedServer.server()
    let run = try await runExecutable(
      venvBin.appendingPathComponent("python").path,
      [fixture("purchase_sharing.py"), server.grpcAddress, server.operatorKey, packageRoot.appendingPathComponent("Protos").path])
    #expect(run.status == 0 && run.stdout.contains(" passed, 0 failed"), "\(run.stdout)\n\(run.stderr)")
  }
}
