import AppStoreSignedData
import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

/// The repository root, found from this file's path.
private let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent().deletingLastPathComponent()

/// Runs a program without blocking a thread of the cooperative pool: its output goes to files,
/// its end arrives through `terminationHandler`; killed after `timeout`.
func runPeer(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(60))
  async throws -> (status: Int32, stdout: String, stderr: String)
{
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
    "peer-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  defer { try? FileManager.default.removeItem(at: directory) }
  let outURL = directory.appendingPathComponent("out")
  let errURL = directory.appendingPathComponent("err")
  _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
  _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
  let out = try FileHandle(forWritingTo: outURL)
  let err = try FileHandle(forWritingTo: errURL)
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  process.standardOutput = out
  process.standardError = err
  process.standardInput = FileHandle.nullDevice
  let watchdog = Task {
    try await Task.sleep(for: timeout)
    process.terminate()
  }
  try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
    process.terminationHandler = { _ in continuation.resume() }
    do {
      try process.run()
    } catch {
      process.terminationHandler = nil
      continuation.resume(throwing: error)
    }
  }
  watchdog.cancel()
  try out.close()
  try err.close()
  return (
    process.terminationStatus, try String(contentsOf: outURL, encoding: .utf8),
    try String(contentsOf: errURL, encoding: .utf8)
  )
}

/// Apple's own App Store Server Library (PyPI `app-store-server-library`, in `.venv` from
/// `scripts/requirements-test.txt`) checks the simulator: its API client's tokens (no `iat`) are
/// accepted by every Server API endpoint it calls, and its `SignedDataVerifier`, trusting only
/// the simulator's root, verifies and decodes every signed transaction, renewal info and V2
/// notification into its typed models.
@Suite("Apple's App Store Server Library")
struct AppleServerLibraryTests {
  struct Peer {
    let sim: Sim
    let key: APIKey
    let directory: URL

    /// Runs `Fixtures/apple_library_peer.py` for `transactionID` with the V2 bodies received.
    func run(transactionID: String, signedPayloads: [String]) async throws -> JSONValue {
      let python = packageRoot.appendingPathComponent(".venv/bin/python").path
      try #require(
        FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
      let root = directory.appendingPathComponent("root.pem")
      try Data(sim.simulator.rootCertificatePEM.utf8).write(to: root)
      let privateKey = directory.appendingPathComponent("key.p8")
      try Data(key.key.pkcs8PEM.utf8).write(to: privateKey)
      let config: JSONValue = .object([
        "base_url": .string("http://\(sim.base)"), "root_ca_path": .string(root.path),
        "private_key_path": .string(privateKey.path), "key_id": .string(key.keyID),
        "issuer_id": .string(key.issuer), "bundle_id": .string(key.bundle),
        "app_apple_id": .integer(6_400_000_001), "environment": .string("Production"),
        "transaction_id": .string(transactionID), "notification_start_ms": .integer(startMs),
        "notification_end_ms": .integer(sim.simulator.nowMs + 1),
        "signed_payloads": .array(signedPayloads.map { .string($0) }),
      ])
      let configPath = directory.appendingPathComponent("config.json")
      try Data(config.serialized().utf8).write(to: configPath)
      let script = packageRoot.appendingPathComponent(
        "Tests/AppStoreSimulatorTests/Fixtures/apple_library_peer.py"
      ).path
      let (status, out, err) = try await runPeer(python, [script, configPath.path])
      #expect(status == 0, "apple_library_peer.py failed: \(err)")
      #expect(!out.contains("UNRECOGNIZED"), "a value Apple's library does not know: \(out)")
      return try JSONValue(parsing: Array(out.utf8))
    }
  }

  @Test func apiClientAndVerifierAcceptTheSimulatorsDataAndTokens() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "apple-library-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogV2(notificationURL: receiver.url))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    let bought = try await sim.ok(
      "POST", "\(app)/users/p/purchase",
      #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    let first = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    try await sim.advance(#"{"days":40}"#)  // the trial and one paid month renew
    try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"lifetime"}"#)
    try await sim.ok("POST", "\(app)/users/p/refund", #"{"group_id":"pro","cancellation_reason":"1"}"#)
    try await sim.drain()
    let payloads = receiver.bodies.compactMap { $0["signedPayload"]?.stringValue }
    #expect(payloads.count >= 5)

    let decoded = try await Peer(sim: sim, key: key, directory: directory).run(
      transactionID: first, signedPayloads: payloads)
    let history = try #require(decoded["history"]?.arrayValue)
    #expect(history.count == 4)  // trial, two renewals, the non-consumable
    #expect(history.allSatisfy { $0["bundleId"]?.string == "com.example.v2" })
    #expect(history.first?["offerType"] == .integer(1))
    #expect(history.first?["offerDiscountType"]?.string == "FREE_TRIAL")
    let refunded = try #require(history.last { $0["revocationDate"] != nil })
    #expect(refunded["revocationReason"] == .integer(1))
    #expect(decoded["transaction_info"]?["transactionId"]?.string == first)
    let status = try #require(decoded["statuses"]?[0])
    #expect(status["status"] == .integer(5))
    #expect(status["renewal"]?["autoRenewStatus"] == .integer(0))

    let notifications = try #require(decoded["notifications"]?.arrayValue)
    #expect(notifications.count == payloads.count)
    #expect(
      notifications.compactMap { $0["notificationType"]?.string } == [
        "SUBSCRIBED", "DID_RENEW", "DID_RENEW", "ONE_TIME_CHARGE", "REFUND",
      ])
    #expect(notifications.last?["transaction"]?["revocationReason"] == .integer(1))
    #expect(decoded["notification_history"]?.arrayValue?.count == payloads.count)
    await sim.stop()
    await receiver.stop()
  }
}
