import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

private let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent().deletingLastPathComponent()

/// Apple's App Store Server Library (Python) against what the simulator models of App Store
/// Server API 1.16-1.22 and Notifications 2.15-2.21: its models decode the commitment fields
/// (`billingPlanType`, `TransactionCommitmentInfo`, `RenewalCommitmentInfo`) as typed values,
/// `ASSIGNED` as the raw ownership it keeps for values newer than the library, the
/// `AppTransaction` of Get App Transaction Info and of `RESCIND_CONSENT`'s `appData`,
/// `EXTERNAL_PURCHASE_TOKEN`'s token; its client gets history by `appTransactionId`, sets an app
/// account token, sends consumption information (refused as Apple refuses a bad body) and meets
/// the rate limit's `429` (`RateLimitExceededError`).
@Suite("Apple's App Store Server Library: 2025-2026")
struct AppleServerLibrary2026Tests {
  /// Values the installed library (3.1.x) has no case for; it keeps them raw.
  static let newerThanTheLibrary: Set<String> = ["UNRECOGNIZED:ASSIGNED", "UNRECOGNIZED:CREATED"]

  func peer(sim: Sim, key: APIKey, directory: URL, config extra: JSONObject) async throws -> JSONValue {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let root = directory.appendingPathComponent("root.pem")
    try Data(sim.simulator.rootCertificatePEM.utf8).write(to: root)
    let privateKey = directory.appendingPathComponent("key.p8")
    try Data(key.key.pkcs8PEM.utf8).write(to: privateKey)
    var config: JSONObject = [
      "base_url": .string("http://\(sim.base)"), "root_ca_path": .string(root.path),
      "private_key_path": .string(privateKey.path), "key_id": .string(key.keyID),
      "issuer_id": .string(key.issuer), "bundle_id": .string(key.bundle),
      "app_apple_id": .integer(6_400_000_001), "environment": .string("Production"),
    ]
    for (name, value) in extra { config[name] = value }
    let path = directory.appendingPathComponent("config-\(UUID().uuidString).json")
    try Data(JSONValue.object(config).serialized().utf8).write(to: path)
    let script = packageRoot.appendingPathComponent(
      "Tests/AppStoreSimulatorTests/Fixtures/apple_library_2026_peer.py"
    ).path
    let (status, out, err) = try await runPeer(python, [script, path.path])
    try #require(status == 0, "apple_library_2026_peer.py failed: \(err)")
    var unknown = Set<String>()
    var rest = Substring(out)
    while let range = rest.range(of: "\"UNRECOGNIZED:") {
      let tail = rest[range.upperBound...]
      let end = tail.firstIndex(of: "\"") ?? tail.endIndex
      unknown.insert("UNRECOGNIZED:" + tail[..<end])
      rest = tail[end...]
    }
    #expect(unknown.isSubset(of: Self.newerThanTheLibrary), "values Apple's library does not know: \(unknown)")
    return try JSONValue(parsing: Array(out.utf8))
  }

  @Test func libraryDecodesTheNewFieldsAndEndpoints() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apple-2026-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: receiver.url))
    let key = APIKey()
    try await key.register(sim)
    for user in ["c", "a", "k", "r", "n"] {
      try await sim.ok("POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
    }
    // n downloaded the app and bought nothing; c bought the app's version 1.0 long ago.
    let download = try await sim.ok("POST", "\(app)/users/n/app-download", #"{"version":"2.0"}"#)
    let newCustomer = try #require(download["app_transaction_id"]?.string)
    let deviceAppTransaction = try #require(download["signed_app_transaction"]?.string)
    let old = startMs - 400 * dayMs
    let cDownload = try await sim.ok(
      "POST", "\(app)/users/c/app-download", #"{"version":"1.0","original_purchase_ms":\#(old)}"#)
    let committed = try #require(cDownload["app_transaction_id"]?.string)
    let bought = try await sim.ok(
      "POST", "\(app)/users/c/purchase", #"{"product_id":"max.annual","billing_plan":"MONTHLY"}"#)
    let original = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    try await sim.advance(#"{"days":40}"#)
    try await sim.ok("POST", "\(app)/users/c/cancel-auto-renew", #"{"group_id":"max"}"#)
    // a: access assigned by an organization.
    let assigned = try #require(
      try await sim.ok("POST", "\(app)/users/a/assign", #"{"product_id":"lifetime"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    try await sim.ok("POST", "\(app)/users/a/assign", #"{"product_id":"pro.monthly"}"#)
    try await sim.fails(409, "POST", "\(app)/users/a/refund", #"{"transaction_id":"\#(assigned)"}"#)
    // k: a parent withdraws consent.
    try await sim.ok("POST", "\(app)/users/k/app-download", "{}")
    try await sim.ok("POST", "\(app)/users/k/rescind-consent")
    let token = try await sim.ok("POST", "\(app)/external-purchase-tokens", #"{"subtype":"CREATED"}"#)
    // r: a refund request for a consumable.
    let coins = try #require(
      try await sim.ok("POST", "\(app)/users/r/purchase", #"{"product_id":"coins"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    try await sim.ok("POST", "\(app)/users/r/refund-request", #"{"transaction_id":"\#(coins)"}"#)
    try await sim.ok(
      "POST", "\(app)/users/c/notify", #"{"notification_type":"METADATA_UPDATE","group_id":"max"}"#)
    let (extendStatus, extended, _) = try await api(
      "PUT", sim.base, "/inApps/v1/subscriptions/extend/\(original)", token: try key.token(),
      body: #"{"extendByDays":5,"extendReasonCode":1,"requestIdentifier":"r-1"}"#)
    #expect(extendStatus == 200)
    #expect(extended["success"] == .bool(true))
    let (massStatus, mass, _) = try await api(
      "POST", sim.base, "/inApps/v1/subscriptions/extend/mass", token: try key.token(),
      body: #"{"extendByDays":3,"extendReasonCode":0,"requestIdentifier":"mass-1","productId":"max.annual"}"#)
    #expect(massStatus == 200 && mass["requestIdentifier"]?.string == "mass-1")
    let (_, massState, _) = try await api(
      "GET", sim.base, "/inApps/v1/subscriptions/extend/mass/max.annual/mass-1", token: try key.token())
    #expect(massState["complete"] == .bool(true) && massState["succeededCount"] == .integer(1))
    try await sim.drain()
    let payloads = receiver.bodies.compactMap { $0["signedPayload"]?.stringValue }

    let appAccountToken = "7e3fb20b-4cdb-47cc-936d-99d65f608138"
    let consent: JSONObject = [
      "customerConsented": .bool(true), "sampleContentProvided": .bool(false),
      "deliveryStatus": .string("DELIVERED"), "consumptionPercentage": .integer(25_000),
      "refundPreference": .string("DECLINE"),
    ]
    var refused = consent
    refused["customerConsented"] = .bool(false)
    var prorated = consent
    prorated["refundPreference"] = .string("GRANT_PRORATED")
    prorated["consumptionPercentage"] = .null
    let decoded = try await peer(
      sim: sim, key: key, directory: directory,
      config: [
        "app_transaction_id": .string(committed), "signed_payloads": .array(payloads.map { .string($0) }),
        "set_app_account_token": .object([
          "original_transaction_id": .string(original), "token": .string(appAccountToken),
        ]),
        "consumption": .array(
          [(coins, consent), (coins, refused), (coins, prorated), (assigned, consent)].map {
            .object(["transaction_id": .string($0.0), "body": .object($0.1)])
          }),
      ])
    // History by the appTransactionId (API 1.20), commitment fields typed.
    let history = try #require(decoded["history"]?.arrayValue)
    #expect(history.count == 2)
    #expect(history.allSatisfy { $0["billingPlanType"]?.string == "MONTHLY" })
    #expect(history.allSatisfy { $0["appTransactionId"]?.string == committed })
    #expect(history.last?["commitmentInfo"]?["billingPeriodNumber"] == .integer(2))
    #expect(history.last?["commitmentInfo"]?["totalBillingPeriods"] == .integer(12))
    #expect(history.last?["commitmentInfo"]?["commitmentPrice"] == .integer(107_880))
    let appTransaction = try #require(decoded["app_transaction_info"])
    #expect(appTransaction["appTransactionId"]?.string == committed)
    #expect(appTransaction["originalApplicationVersion"]?.string == "1.0")
    #expect(appTransaction["originalPurchaseDate"] == .integer(old))
    #expect(appTransaction["receiptType"]?.string == "Production")
    #expect(decoded["set_app_account_token"]?.string == "ok")
    #expect(decoded["after_token"]?["appAccountToken"]?.string == appAccountToken)
    let answers = try #require(decoded["consumption"]?.arrayValue)
    #expect(answers.count == 4)
    #expect(answers.first?.string == "accepted")
    #expect(answers[1]["http"] == .integer(400) && answers[1]["api_error"] == .integer(4_000_035))
    #expect(answers[2]["http"] == .integer(400))
    #expect(answers[3]["http"] == .integer(400) && answers[3]["api_error"] == .integer(4_000_188))
    let recorded = try await sim.ok("GET", "/control/consumption-answers")["answers"]?.arrayValue ?? []
    #expect(recorded.count == 1)
    #expect(recorded.first?["within_request_window"] == .bool(true))

    let notifications = try #require(decoded["notifications"]?.arrayValue)
    #expect(notifications.count == payloads.count)
    func first(_ type: String, _ subtype: String? = nil) -> JSONValue? {
      notifications.first { $0["notificationType"]?.string == type && (subtype == nil || $0["subtype"]?.string == subtype) }
    }
    let cancelled = try #require(first("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED"))
    #expect(cancelled["renewal"]?["autoRenewStatus"] == .integer(1))
    #expect(cancelled["renewal"]?["renewalBillingPlanType"]?.string == "MONTHLY")
    #expect(cancelled["renewal"]?["commitmentInfo"]?["commitmentAutoRenewStatus"] == .integer(0))
    #expect(cancelled["renewal"]?["commitmentInfo"]?["commitmentRenewalBillingPlanType"]?.string == "MONTHLY")
    #expect(cancelled["renewal"]?["commitmentInfo"]?["commitmentRenewalDate"] == .integer(startMs + 365 * dayMs))
    let assignedCharge = notifications.first {
      $0["notificationType"]?.string == "ONE_TIME_CHARGE" && $0["transaction"]?["transactionId"]?.string == assigned
    }
    #expect(assignedCharge?["transaction"]?["inAppOwnershipType"]?.string == "UNRECOGNIZED:ASSIGNED")
    let assignedSubscription = notifications.first {
      $0["notificationType"]?.string == "SUBSCRIBED" && $0["transaction"]?["productId"]?.string == "pro.monthly"
    }
    #expect(assignedSubscription?["transaction"]?["inAppOwnershipType"]?.string == "UNRECOGNIZED:ASSIGNED")
    let rescinded = try #require(first("RESCIND_CONSENT"))
    #expect(rescinded["data"] == nil)
    #expect(rescinded["appData"]?["bundleId"]?.string == "com.example.v2")
    #expect(rescinded["app_transaction"]?["appTransactionId"] != nil)
    let external = try #require(first("EXTERNAL_PURCHASE_TOKEN"))
    #expect(external["subtype"]?.string == "UNRECOGNIZED:CREATED")
    #expect(
      external["externalPurchaseToken"]?["externalPurchaseId"]?.string == token["external_purchase_id"]?.string)
    #expect(first("CONSUMPTION_REQUEST")?["transaction"]?["transactionId"]?.string == coins)
    #expect(first("METADATA_UPDATE")?["transaction"]?["productId"]?.string == "max.annual")
    let summary = try #require(first("RENEWAL_EXTENSION", "SUMMARY"))
    #expect(summary["data"] == nil)
    #expect(summary["summary"]?["requestIdentifier"]?.string == "mass-1")
    #expect(summary["summary"]?["productId"]?.string == "max.annual")
    #expect(summary["summary"]?["succeededCount"] == .integer(1))
    #expect(summary["summary"]?["failedCount"] == .integer(0))
    let extension_ = try #require(first("RENEWAL_EXTENDED"))
    #expect(extension_["transaction"]?["expiresDate"] == .integer(startMs + (59 + 5) * dayMs))

    // A customer with no purchase: the history by appTransactionId is empty, not an error.
    let fresh = try await peer(
      sim: sim, key: key, directory: directory,
      config: ["app_transaction_id": .string(newCustomer), "signed_app_transaction": .string(deviceAppTransaction)])
    #expect(fresh["history"]?.arrayValue?.isEmpty == true)
    #expect(fresh["app_transaction_info"]?["applicationVersion"]?.string == "2.0")
    #expect(fresh["device_app_transaction"]?["appTransactionId"]?.string == newCustomer)

    // The rate limit: one request per 100 s, so the second one meets RateLimitExceededError.
    try await sim.ok("PATCH", app, #"{"server_api_rate_limit":0.01}"#)
    try await sim.ok("DELETE", "/control/server-api/rate-limit")
    let limited = try await peer(
      sim: sim, key: key, directory: directory,
      config: ["app_transaction_id": .string(newCustomer), "only_rate_limit": .bool(true), "rate_limit_calls": .integer(2)])
    let calls = try #require(limited["rate_limit_calls"]?.arrayValue)
    #expect(calls.first?.string == "ok")
    #expect(calls.last?["http"] == .integer(429) && calls.last?["api_error"] == .integer(4_290_000))
    await sim.stop()
    await receiver.stop()
  }
}
