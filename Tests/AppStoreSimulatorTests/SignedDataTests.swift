import AppStoreSignedData
import AppStoreSimulator
import Foundation
import SubstatusProcessTestKit
import HTTPServer
import SubscriptionDomain
import SubstatusJSON
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

private let bundle = "com.example.v2"
private let app = "/control/apps/\(bundle)"

@Suite("Signed transactions and renewal info")
struct SignedTransactionTests {
  @Test func everyTransactionIsSignedWithApplesShapeAndParses() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogV2())
    try await sim.ok(
      "POST", "/control/users", #"{"user_id":"ann","environment":"production","storefront":"GBR"}"#)
    let token = "3F2504E0-4F89-41D3-9A0C-0305E82C3301"
    try await sim.ok(
      "POST", "\(app)/users/ann/purchase",
      #"{"product_id":"pro.monthly","offer":{"type":"introductory"},"app_account_token":"\#(token)"}"#
    )
    try await sim.ok("POST", "\(app)/users/ann/purchase", #"{"product_id":"lifetime"}"#)
    try await sim.advance(#"{"days":7}"#)  // the trial renews into a paid month
    try await sim.ok("POST", "\(app)/users/ann/cancel-auto-renew", #"{"group_id":"pro"}"#)
    let root = try await rootCertificate(sim)

    let signed = try await sim.ok("GET", "\(app)/users/ann/signed-transactions")
    #expect(signed["environment"]?.string == "Production")
    let jwsList = try #require(strings(signed["signed_transactions"]))
    #expect(jwsList.count == 3)
    let payloads = try jwsList.map { try verifiedPayload($0, root: root) }
    #expect(payloads == signed["transactions"]?.arrayValue)

    let trial = payloads[0]
    #expect(trial["type"]?.string == "Auto-Renewable Subscription")
    #expect(trial["purchaseDate"] == .integer(startMs))
    #expect(trial["originalPurchaseDate"] == .integer(startMs))
    #expect(trial["expiresDate"] == .integer(startMs + 7 * dayMs))
    #expect(trial["quantity"] == .integer(1))
    #expect(trial["price"] == .integer(0))
    #expect(trial["currency"]?.string == "USD")
    #expect(trial["offerType"] == .integer(1))
    #expect(trial["offerDiscountType"]?.string == "FREE_TRIAL")
    #expect(trial["offerPeriod"]?.string == "P1W")
    #expect(trial["transactionReason"]?.string == "PURCHASE")
    #expect(trial["storefront"]?.string == "GBR")
    #expect(trial["storefrontId"]?.string == "143444")
    #expect(trial["environment"]?.string == "Production")
    #expect(trial["inAppOwnershipType"]?.string == "PURCHASED")
    #expect(trial["appAccountToken"]?.string == token.lowercased())
    #expect(trial["subscriptionGroupIdentifier"]?.string == "pro")
    #expect(trial["webOrderLineItemId"]?.string?.isEmpty == false)
    #expect(trial["appTransactionId"]?.string == signed["app_transaction_id"]?.string)
    #expect(trial["signedDate"]?.int64Value != nil)

    let lifetime = payloads[1]
    #expect(lifetime["type"]?.string == "Non-Consumable")
    #expect(lifetime["price"] == .integer(49_990))
    #expect(lifetime["expiresDate"] == nil)
    #expect(lifetime["webOrderLineItemId"] == nil)

    let renewal = payloads[2]
    #expect(renewal["transactionReason"]?.string == "RENEWAL")
    #expect(renewal["price"] == .integer(9_990))
    #expect(renewal["offerType"] == nil)
    #expect(renewal["originalTransactionId"] == trial["transactionId"])
    #expect(renewal["appAccountToken"]?.string == token.lowercased())

    // The jws verifier accepts them against the simulator's root, and nothing else.
    let verifier = SignedDataVerifier(
      trustedRoots: [root], bundleId: bundle, appAppleId: 6_400_000_001, environment: .production)
    for jws in jwsList { _ = try verifier.verifyAndDecodeTransaction(jws) }
    #expect(throws: SignedDataVerificationError.untrustedRoot) {
      try SignedDataVerifier(bundleId: bundle, appAppleId: 6_400_000_001, environment: .production)
        .verifyAndDecodeTransaction(jwsList[0])
    }

    // Our own domain layer reads them.
    let domain = try payloads.map { try SubscriptionDomain.Transaction(jwsTransactionPayload: $0) }
    #expect(domain[0].offerType == .introductory)
    #expect(domain[0].environment == .production)
    #expect(domain[1].type == .nonConsumable)
    #expect(domain[2].expiresDate == AppleTimeTestValues.feb8)

    let renewals = try #require(strings(signed["signed_renewal_info"]))
    #expect(renewals.count == 1)
    let renewalPayload = try verifiedPayload(renewals[0], root: root)
    #expect(
      try verifier.verifyAndDecodeRenewalInfo(renewals[0]).originalTransactionId
        == trial["transactionId"]?.string)
    #expect(renewalPayload["autoRenewStatus"] == .integer(0))
    #expect(renewalPayload["autoRenewProductId"]?.string == "pro.monthly")
    #expect(renewalPayload["renewalDate"] == .integer(AppleTimeTestValues.feb8))
    #expect(renewalPayload["recentSubscriptionStartDate"] == .integer(startMs))
    #expect(renewalPayload["isInBillingRetryPeriod"] == .bool(false))
    #expect(renewalPayload["renewalPrice"] == .integer(9_990))
    let info = try RenewalInfo(jwsRenewalInfoPayload: renewalPayload)
    #expect(info.willAutoRenew == false)
    #expect(info.environment == .production)
    await sim.stop()
  }

  @Test func refundsRevocationsAndUpgradesShowInThePayload() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogV2())
    for user in ["org", "kid"] {
      try await sim.ok("POST", "/control/users", #"{"user_id":"\#(user)","environment":"sandbox"}"#)
    }
    try await sim.ok("POST", "/control/users/org/family/members", #"{"user_id":"kid"}"#)
    try await sim.ok("POST", "\(app)/users/org/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "\(app)/users/org/change-product", #"{"product_id":"pro.yearly"}"#)
    try await sim.ok(
      "POST", "\(app)/users/org/refund", #"{"group_id":"pro","cancellation_reason":"1"}"#)
    let org = try #require(
      try await sim.ok("GET", "\(app)/users/org/signed-transactions")["transactions"]?.arrayValue)
    #expect(org.count == 2)
    #expect(org[0]["isUpgraded"] == .bool(true))
    #expect(org[0]["revocationDate"] == nil)
    #expect(org[1]["productId"]?.string == "pro.yearly")
    #expect(org[1]["revocationReason"] == .integer(1))
    #expect(org[1]["revocationDate"]?.int64Value != nil)
    #expect(org[1]["environment"]?.string == "Sandbox")
    let kid = try #require(
      try await sim.ok("GET", "\(app)/users/kid/signed-transactions")["transactions"]?.arrayValue)
    #expect(kid.allSatisfy { $0["inAppOwnershipType"]?.string == "FAMILY_SHARED" })
    // Apple: when the purchaser is refunded, the members' revocation reason matches the purchaser's.
    #expect(kid.last?["revocationReason"] == .integer(1))
    #expect(kid.last?["revocationType"]?.string == "FAMILY_REVOKE")
    #expect(org[1]["revocationType"]?.string == "REFUND_FULL")
    for payload in org + kid {
      _ = try SubscriptionDomain.Transaction(jwsTransactionPayload: payload)
    }
    await sim.stop()
  }

  @Test(
    arguments: [
      (
        "leaf_without_oid",
        SignedDataVerificationError.missingAppleMarkerOID("1.2.840.113635.100.6.11.1")
      ),
      ("intermediate_without_oid", .missingAppleMarkerOID("1.2.840.113635.100.6.2.1")),
      ("intermediate_not_ca", nil),
      ("untrusted_root", .untrustedRoot),
      ("wrong_key", .invalidSignature),
      ("expired_leaf", .certificateNotValidAtSignedDate),
    ] as [(String, SignedDataVerificationError?)])
  func brokenChainKnobs(mode: String, expected: SignedDataVerificationError?) async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogV2())
    try await sim.ok("PATCH", app, #"{"signing":"\#(mode)"}"#)
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"sandbox"}"#)
    try await sim.ok("POST", "\(app)/users/u/purchase", #"{"product_id":"lifetime"}"#)
    let root = try await rootCertificate(sim)
    let jws = try #require(
      try await sim.ok("GET", "\(app)/users/u/signed-transactions")["signed_transactions"]?[0]?
        .string)
    let parsed = try JWS.CompactJWS(parsing: jws)
    let chain = try (parsed.header["x5c"]?.arrayValue ?? []).map {
      try X509Certificate(der: Array(try #require(Data(base64Encoded: $0.stringValue ?? ""))))
    }
    #expect(chain.count == 3)
    let signatureValid = try chain[0].es256PublicKey().isValidSignature(
      parsed.signature, for: parsed.signingInput)
    let verifier = SignedDataVerifier(
      trustedRoots: [root], bundleId: bundle, appAppleId: nil, environment: .sandbox)
    do {
      _ = try verifier.verifyAndDecodeTransaction(jws)
      Issue.record("a '\(mode)' chain must be refused")
    } catch {
      if let expected {
        #expect(error == expected)
      } else if case .invalidCertificateChain = error {
      } else {
        Issue.record("'\(mode)': \(error)")
      }
    }
    switch mode {
    case "leaf_without_oid":
      #expect(!chain[0].hasExtension(oid: "1.2.840.113635.100.6.11.1"))
      #expect(chain[1].hasExtension(oid: "1.2.840.113635.100.6.2.1"))
      #expect(signatureValid)
    case "intermediate_without_oid":
      #expect(chain[0].hasExtension(oid: "1.2.840.113635.100.6.11.1"))
      #expect(!chain[1].hasExtension(oid: "1.2.840.113635.100.6.2.1"))
    case "untrusted_root":
      #expect(chain[2] != root)
      #expect(signatureValid)
    case "wrong_key":
      #expect(chain[2] == root)
      #expect(!signatureValid)
    case "intermediate_not_ca":
      #expect(signatureValid)
    default:
      #expect(chain[0].notAfter < Int64(Date().timeIntervalSince1970 * 1000))
    }
    try await sim.fails(400, "PATCH", app, #"{"signing":"nonsense"}"#)
    await sim.stop()
  }
}

/// Instants used across the V2 tests.
enum AppleTimeTestValues {
  /// 2026-02-08: a week of trial plus a month from 2026-01-01.
  static let feb8: Int64 = 1_770_508_800_000
}

@Suite("appstore-sim signing options")
struct SigningCommandLineTests {
  @Test func caDirKeepsTheRootAcrossRestartsAndRootCAOutWritesIt() async throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
      .deletingLastPathComponent()
      .deletingLastPathComponent()
    let binary = root.appendingPathComponent(".build/debug/appstore-sim")
    try #require(
      FileManager.default.isExecutableFile(atPath: binary.path), "build appstore-sim first")
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "appstore-sim-ca-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let caDirectory = directory.appendingPathComponent("ca").path

    func run() async throws -> (served: String, written: String) {
      let ready = directory.appendingPathComponent("ready-\(UUID()).json")
      let out = directory.appendingPathComponent("root-\(UUID()).pem")
      // Killed when the function returns (ChildProcess).
      let child = try ChildProcess(
        binary.path,
        [
          "--listen", "127.0.0.1:0", "--ready-file", ready.path, "--time-scale", "0",
          "--ca-dir", caDirectory, "--root-ca-out", out.path,
        ])
      let address = try #require(try await child.readyFile(ready, timeout: .seconds(10))["http"])
      var request = URLRequest(url: URL(string: "http://\(address)/control/root-ca.pem")!)
      request.httpMethod = "GET"
      let (data, _) = try await session.data(for: request)
      return (String(decoding: data, as: UTF8.self), try String(contentsOf: out, encoding: .utf8))
    }

    let first = try await run()
    #expect(first.served == first.written)
    #expect(first.served.hasPrefix("-----BEGIN CERTIFICATE-----"))
    _ = try X509Certificate(pem: first.written)
    let keyFile = URL(fileURLWithPath: caDirectory).appendingPathComponent("root-ca-key.pem").path
    let permissions =
      try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int
    #expect(permissions == 0o600)
    let second = try await run()
    #expect(second.served == first.served)
  }

  @Test func aBrokenCADirectoryStopsTheStartWithAMessage() async throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
      .deletingLastPathComponent()
      .deletingLastPathComponent()
    let binary = root.appendingPathComponent(".build/debug/appstore-sim")
    try #require(
      FileManager.default.isExecutableFile(atPath: binary.path), "build appstore-sim first")
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "appstore-sim-ca-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    try Data("not a certificate".utf8).write(to: directory.appendingPathComponent("root-ca.pem"))
    try Data("not a key".utf8).write(to: directory.appendingPathComponent("root-ca-key.pem"))
    let run = try await runExecutable(binary.path, ["--listen", "127.0.0.1:0", "--ca-dir", directory.path], timeout: .seconds(30))
    #expect(run.status == 2)
    #expect(run.stderr.contains("cannot load the CA from"))
    #expect(throws: HTTPServerError.self) { try SimulatorCommandLine(arguments: ["--ca-dir"]) }
    #expect(throws: HTTPServerError.self) { try SimulatorCommandLine(arguments: ["--root-ca-out"]) }
  }
}
