import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

private let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent().deletingLastPathComponent()

/// Apple's App Store Server Library (Python) on the simulator's Retention Messaging side: its
/// `verify_and_decode_realtime_request` verifies the simulator's signed realtime request (and
/// refuses it in the other environment), and a promotional offer signature made by its
/// `PromotionalOfferV2SignatureCreator` is one the simulator judges valid, as Apple would.
@Suite("Apple's App Store Server Library: Retention Messaging")
struct AppleServerLibraryRetentionTests {
  func peer(sim: Sim, key: APIKey, environment: String, config extra: JSONObject) async throws -> JSONValue {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apple-retention-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let root = directory.appendingPathComponent("root.pem")
    try Data(sim.simulator.rootCertificatePEM.utf8).write(to: root)
    let privateKey = directory.appendingPathComponent("key.p8")
    try Data(key.key.pkcs8PEM.utf8).write(to: privateKey)
    var config: JSONObject = [
      "root_ca_path": .string(root.path), "private_key_path": .string(privateKey.path),
      "key_id": .string(key.keyID), "issuer_id": .string(key.issuer), "bundle_id": .string(key.bundle),
      "app_apple_id": .integer(6_400_000_001), "environment": .string(environment),
    ]
    for (name, value) in extra { config[name] = value }
    let path = directory.appendingPathComponent("config.json")
    try Data(JSONValue.object(config).serialized().utf8).write(to: path)
    let script = packageRoot.appendingPathComponent(
      "Tests/AppStoreSimulatorTests/Fixtures/apple_library_retention_peer.py"
    ).path
    let (status, out, err) = try await runPeer(python, [script, path.path])
    try #require(status == 0, "apple_library_retention_peer.py failed: \(err)")
    return try JSONValue(parsing: Array(out.utf8))
  }

  @Test(arguments: ["production", "sandbox"])
  func libraryVerifiesTheRealtimeRequestAndItsOfferSignaturePasses(environment: String) async throws {
    let endpoint = try RetentionEndpoint()
    let sim = try Sim()
    defer { Task { await endpoint.stop(); await sim.stop() } }
    try await sim.ok("POST", "/control/apps", catalogV2())
    try await sim.ok("PATCH", "/control/apps/com.example.v2", #"{"retention_url":"\#(endpoint.url)"}"#)
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"\#(environment)"}"#)
    let bought = try await sim.ok(
      "POST", "/control/apps/com.example.v2/users/u/purchase", #"{"product_id":"pro.monthly"}"#)
    let original = try #require(bought["transactions"]?[0]?["original_transaction_id"]?.string)
    let libraryEnvironment = environment == "production" ? "Production" : "Sandbox"

    // The developer signs the offer with Apple's library and the app's In-App Purchase key.
    let signed = try await peer(
      sim: sim, key: key, environment: libraryEnvironment,
      config: [
        "offer": .object([
          "product_id": .string("pro.monthly"), "offer_id": .string("comeback"),
          "transaction_id": .string(original),
        ])
      ])
    let signature = try #require(signed["offer_signature"]?.string)
    endpoint.answer(
      #"{"promotionalOffer":{"messageIdentifier":"\#(messageID)","promotionalOfferSignatureV2":"\#(signature)"}}"#)
    let result = try await sim.ok(
      "POST", "/control/apps/com.example.v2/users/u/retention-request", #"{"group_id":"pro","user_locale":"de-DE"}"#)
    #expect(result["valid"] == .bool(true), "\(result.serialized())")
    #expect(result["shown"]?.string == "promotional_offer")

    // The library verifies what the simulator sent, in its environment only.
    let sent = try #require(endpoint.bodies.first?["signedPayload"]?.string)
    let decoded = try await peer(
      sim: sim, key: key, environment: libraryEnvironment, config: ["signed_payloads": .array([.string(sent)])])
    let request = try #require(decoded["requests"]?[0])
    #expect(request["originalTransactionId"]?.string == original)
    #expect(request["appAppleId"] == .integer(6_400_000_001))
    #expect(request["productId"]?.string == "pro.monthly")
    #expect(request["userLocale"]?.string == "de-DE")
    #expect(request["environment"]?.string == libraryEnvironment)
    #expect(request["requestIdentifier"]?.string == result["request_identifier"]?.string)
    #expect(request["signedDate"] == .integer(sim.simulator.nowMs))
    #expect(decoded["other_environment"]?[0]?.string == "INVALID_ENVIRONMENT")
  }
}
