import AppStoreSignedData
import Foundation
import SubstatusJSON
import SubstatusWire
import Testing

/// The upgrade and REVOKE stories of issue 17 (rules 12 and 15) as a user meets them: a real
/// substatusd trusting a test root (`--apple-root-ca`), Apple's V2 notifications posted to its
/// HTTP endpoint, StoreKit 2 data handed over with `substatus signed submit`, and the answers read
/// with `substatus status` / `substatus eligibility` (`--as-of` for later instants).
@Suite(.serialized) struct DomainRulesEndToEndTests {
  static let bundleID = "com.example.rules"
  static let appleAppID: Int64 = 556_677_889
  static let day: Int64 = 86_400_000

  /// A signed transaction payload of group `main`.
  static func transaction(
    _ id: String, original: String, product: String, purchase: Int64, expires: Int64, now: Int64,
    extra: JSONObject = [:]
  ) -> JSONValue {
    var o: JSONObject = [
      "transactionId": .string(id), "originalTransactionId": .string(original), "bundleId": .string(bundleID),
      "productId": .string(product), "subscriptionGroupIdentifier": .string("main"), "purchaseDate": .integer(Int(purchase)),
      "originalPurchaseDate": .integer(Int(purchase)), "expiresDate": .integer(Int(expires)),
      "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
      "signedDate": .integer(Int(now)), "environment": .string("Production"),
    ]
    for (key, value) in extra { o[key] = value }
    return .object(o)
  }

  @Test func upgradeAndRevokeStoriesThroughTheDaemonAndTheCLI() async throws {
    let ca = try TestCertificateAuthority.make()
    let identity = try ca.issueSigningIdentity()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rules-e2e-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let root = directory.appendingPathComponent("root.pem").path
    try ca.root.pem.write(toFile: root, atomically: true, encoding: .utf8)
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", root])
    do {
      try await stories(daemon, identity, directory)
    } catch {
      let (_, log) = await daemon.stop()
      Issue.record("substatusd:\n\(log)")
      throw error
    }
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }

  private func stories(_ daemon: RunningDaemon, _ identity: SigningIdentity, _ directory: URL) async throws {
    let cli = try builtExecutable("substatus")
    let bundleID = Self.bundleID
    let day = Self.day
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    func substatus(_ arguments: [String], key: String) async throws -> String {
      let (code, out, err) = try await run(cli, arguments + ["--addr", daemon.grpc, "--key", key, "--timeout", "10"])
      #expect(code == 0, "substatus \(arguments.joined(separator: " ")): \(err)")
      return out
    }

    // The operator's tenant; the admin registers the app and a group with two products.
    let tenant = try await substatus(["tenant", "create", "rules", "--json"], key: daemon.operatorKey)
    let admin = try Substatus_V1_CreateTenantResponse(jsonString: tenant).adminKey
    let registered = try await substatus(
      ["app", "register", "--bundle-id", bundleID, "--apple-app-id", String(Self.appleAppID), "--json"], key: admin)
    let app = try #require(try Substatus_V1_RegisterAppResponse(jsonString: registered).app?.appID)
    let catalog = directory.appendingPathComponent("catalog.json")
    try Data(
      #"""
      {"products":[
       {"productId":"basic.yearly","type":"PRODUCT_TYPE_AUTO_RENEWABLE","subscriptionGroupId":"main","duration":"P1Y","hasIntroductoryOffer":true},
       {"productId":"premium.monthly","type":"PRODUCT_TYPE_AUTO_RENEWABLE","subscriptionGroupId":"main","duration":"P1M","hasIntroductoryOffer":true}]}
      """#.utf8
    ).write(to: catalog)
    _ = try await substatus(["product", "put", app, "--file", catalog.path], key: admin)
    let url = "http://\(daemon.http)/v1/apps/\(app)/apple/notifications"

    func notify(_ type: String, subtype: String? = nil, transaction: JSONValue, status: Int) async throws {
      var o: JSONObject = [
        "notificationType": .string(type), "notificationUUID": .string(UUID().uuidString), "version": .string("2.0"),
        "signedDate": .integer(Int(now)),
        "data": .object([
          "appAppleId": .integer(Int(Self.appleAppID)), "bundleId": .string(bundleID), "environment": .string("Production"),
          "signedTransactionInfo": .string(try identity.signedJWS(payload: transaction)), "status": .integer(status),
        ]),
      ]
      if let subtype { o["subtype"] = .string(subtype) }
      let (code, answer) = try await postJSON(url, .object(["signedPayload": .string(try identity.signedJWS(payload: .object(o)))]))
      #expect(code == 200, "\(type): \(String(describing: answer))")
    }
    func submit(_ user: String, _ transactions: [JSONValue]) async throws {
      let file = directory.appendingPathComponent("signed-\(UUID().uuidString).json")
      let jws = try transactions.map { JSONValue.string(try identity.signedJWS(payload: $0)) }
      try Data(JSONValue.object(["signedTransactions": .array(jws)]).serializedBytes()).write(to: file)
      _ = try await substatus(["signed", "submit", app, user, "--file", file.path], key: admin)
    }
    func status(_ user: String, asOf: Int64? = nil) async throws -> Substatus_V1_GetStatusResponse {
      let extra = asOf.map { ["--as-of", String($0)] } ?? []
      return try Substatus_V1_GetStatusResponse(
        jsonString: try await substatus(["status", app, user, "--json"] + extra, key: admin))
    }
    func intro(_ user: String, asOf: Int64) async throws -> Substatus_V1_OfferEligibility? {
      let out = try await substatus(["eligibility", app, user, "basic.yearly", "--as-of", String(asOf), "--json"], key: admin)
      return try Substatus_V1_CheckEligibilityResponse(jsonString: out).users.first?.products.first?.introductory
    }

    // Story 1 (rule 12): basic.yearly bought 20 days ago, upgraded to premium.monthly an hour ago;
    // Apple's DID_CHANGE_RENEWAL_PREF/UPGRADE carries the new transaction only.
    let yearly = Self.transaction(
      "1000", original: "1000", product: "basic.yearly", purchase: now - 20 * day, expires: now + 345 * day, now: now)
    let monthly = Self.transaction(
      "1001", original: "1000", product: "premium.monthly", purchase: now - 3_600_000, expires: now + 30 * day, now: now)
    try await submit("ann", [yearly])
    try await notify("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", transaction: monthly, status: 1)
    let upgraded = try await status("ann")
    let group = try #require(upgraded.groups.first { $0.subscriptionGroupID == "main" })
    #expect(group.state == .active && group.productID == "premium.monthly")
    #expect(upgraded.entitlements.map(\.productID) == ["premium.monthly"])
    // The customer cancels; once the monthly expired: EXPIRED, nothing entitled, intro for a lapsed subscriber.
    let lapsed = try await status("ann", asOf: now + 31 * day)
    #expect(lapsed.groups.first { $0.subscriptionGroupID == "main" }?.state == .expired)
    #expect(lapsed.entitlements.isEmpty)
    let lapsedIntro = try #require(try await intro("ann", asOf: now + 31 * day))
    #expect(lapsedIntro.eligible && lapsedIntro.reason == .lapsedNoIntroUsed)
    #expect(try await intro("ann", asOf: now)?.reason == .activeSubscription)

    // Story 1b: the same with the old transaction re-submitted from StoreKit 2 with isUpgraded.
    try await submit("bob", [yearly, monthly])
    try await submit("bob", [Self.transaction(
      "1000", original: "1000", product: "basic.yearly", purchase: now - 20 * day, expires: now + 345 * day,
      now: now + 1, extra: ["isUpgraded": .bool(true)])])
    #expect(try await status("bob").entitlements.map(\.productID) == ["premium.monthly"])
    let bobLater = try await status("bob", asOf: now + 31 * day)
    #expect(bobLater.groups.first { $0.subscriptionGroupID == "main" }?.state == .expired)
    #expect(bobLater.entitlements.isEmpty)

    // Story 2 (rule 15): a family member's shared subscription; Apple's REVOKE carries a
    // transaction without revocationDate: access ends at the notification's signedDate.
    let shared = Self.transaction(
      "2000", original: "2000", product: "premium.monthly", purchase: now - 5 * day, expires: now + 25 * day, now: now,
      extra: ["inAppOwnershipType": .string("FAMILY_SHARED")])
    try await submit("kid", [shared])
    #expect(try await status("kid").entitlements.map(\.productID) == ["premium.monthly"])
    try await notify("REVOKE", transaction: shared, status: 5)
    let revoked = try await status("kid")
    #expect(revoked.groups.first { $0.subscriptionGroupID == "main" }?.state == .revoked)
    #expect(revoked.entitlements.isEmpty)
    let report = try Substatus_V1_GetReportResponse(jsonString: try await substatus(["report", app, "--json"], key: admin))
    #expect(report.report?.familyAccessRevoked == 1)
    #expect(report.report?.refunded == 0)

    // Rule 20: Apple's 21006 answer for an iOS 6-style receipt is stored like status 0.
    let expired = directory.appendingPathComponent("verify-21006.json")
    try Data(
      ###"{"status":21006,"environment":"Production","receipt":{"product_id":"basic.yearly","transaction_id":"3000","original_transaction_id":"3000","purchase_date_ms":"\###(now - 400 * day)","expires_date":"\###(now - 35 * day)","bid":"\###(bundleID)"},"latest_expired_receipt_info":{"product_id":"basic.yearly","transaction_id":"3000","original_transaction_id":"3000","purchase_date_ms":"\###(now - 400 * day)","expires_date":"\###(now - 35 * day)","bid":"\###(bundleID)"}}"###
        .utf8
    ).write(to: expired)
    _ = try await substatus(["receipt", "import", app, "old-timer", "--file", expired.path], key: admin)
    let oldTimer = try await status("old-timer")
    let oldGroup = try #require(oldTimer.groups.first { $0.subscriptionGroupID == "main" })
    #expect(oldGroup.state == .expired && oldGroup.productID == "basic.yearly" && oldGroup.originalTransactionID == "3000")
  }
}
