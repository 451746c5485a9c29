import AppStoreSignedData
import Foundation
import RPCCore
import SubstatusJSON
import SubstatusWire
import Testing

/// Apple's Retention Messaging realtime requests against a real substatusd (SQLite file, real gRPC
/// and HTTP) trusting a test root: the test signs Apple's request itself, and checks the
/// promotional offer signature with the app's public key as Apple does.
@Suite(.serialized) struct RetentionEndToEndTests {
  @Test func realtimeRequestsThroughTheDaemon() async throws {
    let ca = try TestCertificateAuthority.make()
    let identity = try ca.issueSigningIdentity()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("retention-e2e-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let roots = directory.appendingPathComponent("roots.pem").path
    try ca.root.pem.write(toFile: roots, atomically: true, encoding: .utf8)
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", roots])
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let bundleID = "com.example.retention"
    let appleAppID: Int64 = 555_000_111
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundleID, appleAppID: appleAppID)
    var setKey = Substatus_V1_SetInAppPurchaseKeyRequest()
    setKey.appID = appID
    setKey.issuerID = "57246542-96fe-1a63-e053-0824d011072a"
    setKey.keyID = "2X9R4HXF34"
    setKey.privateKeyPem = try String(
      contentsOf: packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures/iap-key-p256.p8"), encoding: .utf8)
    let keyInfo = try #require(
      try await client.call(Substatus_V1_AdminService.setInAppPurchaseKey, setKey, key: admin).app?.inAppPurchaseKey)
    let publicKey = try ES256PublicKey(pem: keyInfo.publicKeyPem)

    // "ann" paid three months of pro.monthly, the last one current.
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let day: Int64 = 86_400_000
    var submit = Substatus_V1_SubmitSignedTransactionsRequest()
    submit.appID = appID
    submit.userID = "ann"
    submit.signedTransactions = try (0..<3).map { i in
      let start = now - Int64(3 - i) * 30 * day + day
      return try identity.signedJWS(payload: .object([
        "transactionId": .string("700\(i)"), "originalTransactionId": .string("7000"), "bundleId": .string(bundleID),
        "productId": .string("pro.monthly"), "subscriptionGroupIdentifier": .string("pro"), "purchaseDate": .integer(start),
        "originalPurchaseDate": .integer(now - 89 * day), "expiresDate": .integer(start + 30 * day),
        "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
        "signedDate": .integer(now), "environment": .string("Production"),
      ]))
    }
    #expect(try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin).environment == .production)

    var put = Substatus_V1_PutRetentionRulesRequest()
    put.appID = appID
    put.rules = try Substatus_V1_RetentionRules(jsonString: """
      {"defaultMessageIdentifier": "00000000-0000-4000-8000-000000000000",
       "rules": [{"ruleId": "loyal", "when": {"minPaidPeriods": 3, "billingIssue": false},
                  "promotionalOffer": {"messageIdentifier": "11111111-1111-4111-8111-111111111111", "offerId": "pro.retain"}}]}
      """)
    _ = try await client.call(Substatus_V1_AdminService.putRetentionRules, put, key: admin)

    func request(appAppleId: Int64 = appleAppID, original: String = "7000", id: String = UUID().uuidString) throws -> JSONValue {
      .object(["signedPayload": .string(try identity.signedJWS(payload: .object([
        "originalTransactionId": .string(original), "appAppleId": .integer(appAppleId), "productId": .string("pro.monthly"),
        "userLocale": .string("en-US"), "requestIdentifier": .string(id), "environment": .string("Production"),
        "signedDate": .integer(now),
      ])))])
    }
    let url = "http://\(daemon.http)/v1/apps/\(appID)/apple/retention"
    let (status, answer) = try await postJSON(url, try request())
    #expect(status == 200, "\(String(describing: answer))")
    let offer = try #require(answer?["promotionalOffer"])
    #expect(offer["messageIdentifier"]?.stringValue == "11111111-1111-4111-8111-111111111111")
    let jws = try JWS.CompactJWS(parsing: try #require(offer["promotionalOfferSignatureV2"]?.stringValue))
    #expect(publicKey.isValidSignature(jws.signature, for: jws.signingInput))
    let claims = try JSONValue(parsing: jws.payload)
    #expect(jws.header["kid"]?.stringValue == "2X9R4HXF34" && jws.header["alg"]?.stringValue == "ES256")
    #expect(claims["aud"]?.stringValue == "promotional-offer" && claims["bid"]?.stringValue == bundleID)
    #expect(claims["productId"]?.stringValue == "pro.monthly" && claims["offerIdentifier"]?.stringValue == "pro.retain")
    #expect(claims["transactionId"]?.stringValue == "7000")

    // Unknown subscriber: the default message. Another app's request: 400 WRONG_APP.
    let (_, unknown) = try await postJSON(url, try request(original: "8000"))
    #expect(unknown?["message"]?["messageIdentifier"]?.stringValue == "00000000-0000-4000-8000-000000000000")
    let (wrongStatus, wrong) = try await postJSON(url, try request(appAppleId: 1))
    #expect(wrongStatus == 400 && wrong?["error"]?["reason"]?.stringValue == "WRONG_APP")

    var list = Substatus_V1_ListEventsRequest()
    list.appID = appID
    list.types = [.retentionOffered]
    let events = try await client.call(Substatus_V1_EventService.listEvents, list, key: admin).events
    #expect(events.map(\.retentionRuleID) == ["loyal", ""])
    #expect(events.map(\.userID) == ["ann", "apple:8000"])

    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    #expect(log.contains("\"rule_id\":\"loyal\""))
  }
}
