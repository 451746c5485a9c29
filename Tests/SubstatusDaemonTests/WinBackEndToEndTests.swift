import AppStoreSignedData
import Foundation
import SubstatusJSON
import Testing

/// Win-back offers (docs/architecture.md rule 19) as a user meets them: a real substatusd (SQLite
/// file, real gRPC and HTTP) trusting a test root given with `--apple-root-ca`, driven by the real
/// `substatus`; the test signs Apple's renewal infos itself.
@Suite(.serialized) struct WinBackEndToEndTests {
  @Test func eligibilityShowsWhatAppleOffersInTheLatestRenewalInfo() async throws {
    let ca = try TestCertificateAuthority.make()
    let identity = try ca.issueSigningIdentity()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("winback-e2e-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let roots = directory.appendingPathComponent("root.pem").path
    try ca.root.pem.write(toFile: roots, atomically: true, encoding: .utf8)
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", roots])
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let bundleID = "com.example.winback"
    let appleAppID: Int64 = 555_000_111
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundleID, appleAppID: appleAppID)
    let substatus = try builtExecutable("substatus")
    let global = ["--addr", daemon.grpc, "--key", admin]
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let day: Int64 = 86_400_000

    // The catalog, with the product's win-back offers, through `substatus product put`.
    let catalog = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures/catalog_win_back.json").path
    let put = try await run(substatus, ["product", "put", appID, "--file", catalog] + global)
    #expect(put.0 == 0, "\(put.2)")
    #expect(put.1.contains("pro.comeback,pro.halfoff"), "\(put.1)")

    // A lapsed subscriber's StoreKit 2 transaction and renewal info: Apple offers one win-back offer.
    let lapsed = try identity.signedJWS(payload: .object([
      "transactionId": .string("6000"), "originalTransactionId": .string("6000"), "bundleId": .string(bundleID),
      "productId": .string("pro.monthly"), "subscriptionGroupIdentifier": .string("pro"),
      "purchaseDate": .integer(now - 40 * day), "originalPurchaseDate": .integer(now - 40 * day),
      "expiresDate": .integer(now - 10 * day), "type": .string("Auto-Renewable Subscription"),
      "inAppOwnershipType": .string("PURCHASED"), "signedDate": .integer(now - 3000),
      "environment": .string("Production"),
    ]))
    func renewalInfo(eligible: [String]?, signed: Int64) throws -> String {
      var o: JSONObject = [
        "originalTransactionId": .string("6000"), "productId": .string("pro.monthly"),
        "autoRenewProductId": .string("pro.monthly"), "autoRenewStatus": .integer(0), "expirationIntent": .integer(1),
        "signedDate": .integer(signed), "environment": .string("Production"), "renewalDate": .integer(now - 10 * day),
      ]
      if let eligible { o["eligibleWinBackOfferIds"] = .array(eligible.map { .string($0) }) }
      return try identity.signedJWS(payload: .object(o))
    }
    let submission = directory.appendingPathComponent("signed.json")
    try Data(JSONValue.object([
      "signedTransactions": .array([.string(lapsed)]),
      "signedRenewalInfos": .array([.string(try renewalInfo(eligible: ["pro.halfoff"], signed: now - 2000))]),
    ]).serializedBytes()).write(to: submission)
    let submitted = try await run(substatus, ["signed", "submit", appID, "bob", "--file", submission.path] + global)
    #expect(submitted.0 == 0, "\(submitted.2)")

    // `substatus eligibility` shows the win-back offers beside intro and promotional ones.
    let table = try await run(substatus, ["eligibility", appID, "bob", "pro.monthly", "pro.yearly"] + global)
    #expect(table.0 == 0, "\(table.2)")
    #expect(table.1.contains("WIN-BACK"), "\(table.1)")
    #expect(table.1.contains("LAPSED_NO_INTRO_USED  yes    LAPSED_SUBSCRIBER  pro.comeback:no,pro.halfoff:yes  6000"), "\(table.1)")
    // `--json`: the proto3 JSON mapping.
    let json = try await run(substatus, ["eligibility", appID, "bob", "pro.monthly", "--json"] + global)
    #expect(json.0 == 0, "\(json.2)")
    let product = try JSONValue(parsing: Array(json.1.utf8))["users"]?.arrayValue?.first?["products"]?.arrayValue?.first
    let offers = try #require(product?["winBackOffers"]?.arrayValue, "\(json.1)")
    #expect(offers.map { $0["offerId"]?.stringValue } == ["pro.comeback", "pro.halfoff"])
    #expect(offers.map { $0["eligible"]?.boolValue } == [nil, true])  // proto3 JSON omits false
    #expect(offers.map { $0["reason"]?.stringValue } == [
      "ELIGIBILITY_REASON_WIN_BACK_NOT_OFFERED", "ELIGIBILITY_REASON_WIN_BACK_OFFERED",
    ])
    #expect(offers.map { $0["evidenceTransactionId"]?.stringValue } == ["6000", "6000"])

    // Apple's V2 notification brings a newer renewal info that no longer lists it: not offered.
    let notification = try identity.signedJWS(payload: .object([
      "notificationType": .string("DID_CHANGE_RENEWAL_PREF"), "notificationUUID": .string(UUID().uuidString),
      "version": .string("2.0"), "signedDate": .integer(now - 500),
      "data": .object([
        "appAppleId": .integer(appleAppID), "bundleId": .string(bundleID), "environment": .string("Production"),
        "signedTransactionInfo": .string(lapsed),
        "signedRenewalInfo": .string(try renewalInfo(eligible: nil, signed: now - 1000)), "status": .integer(2),
      ]),
    ]))
    let url = "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications"
    let (status, body) = try await postJSON(url, .object(["signedPayload": .string(notification)]))
    #expect(status == 200, "\(String(describing: body))")
    #expect(body?["status"]?.stringValue == "applied")
    let after = try await run(substatus, ["eligibility", appID, "bob", "pro.monthly"] + global)
    #expect(after.0 == 0, "\(after.2)")
    #expect(after.1.contains("pro.comeback:no,pro.halfoff:no"), "\(after.1)")

    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }
}
