import AppStoreSignedData
import Foundation
import RPCCore
import SubstatusJSON
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Apple's Retention Messaging against a real `substatusd`, both sides real processes: the App
/// Store simulator's subscribers reach substatusd through signed V2 notifications, the rules are
/// put with the CLI (`substatus retention put`), and the simulator sends Apple's signed realtime
/// request to `POST /v1/apps/{app_id}/apple/retention` and judges the answer as Apple does (the
/// promotional offer's signature against the In-App Purchase key's public half; the test checks it
/// with the key too). Rules pick each answer: a promotional offer, an alternate product, a message,
/// and the default; each request is a `RETENTION_OFFERED` event in the log.
@Suite(.serialized) struct RetentionSimulatorEndToEndTests {
  static let defaultMessage = "7a1e0000-0000-4000-8000-000000000000"
  static let offerMessage = "7a1e0000-0000-4000-8000-000000000001"
  static let switchMessage = "7a1e0000-0000-4000-8000-000000000002"
  static let thanksMessage = "7a1e0000-0000-4000-8000-000000000003"

  static func cli(_ daemon: RunningDaemon, key: String, _ arguments: [String]) async throws -> String {
    let (status, out, err) = try await runProcess(
      try builtExecutable("substatus"), arguments + ["--json", "--addr", daemon.grpc, "--key", key, "--timeout", "10"])
    guard status == 0 else { throw DaemonFailure("substatus \(arguments.joined(separator: " ")) exited \(status): \(err)") }
    return out
  }

  static func patch(_ sim: RunningSimulator, _ path: String, _ body: [String: Any]) async throws {
    var request = URLRequest(url: try #require(URL(string: "http://\(sim.address)\(path)")))
    request.httpMethod = "PATCH"
    request.httpBody = try JSONSerialization.data(withJSONObject: body)
    let (data, response) = try await URLSession.shared.data(for: request)
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    guard (200..<300).contains(status) else {
      throw DaemonFailure("appstore-sim PATCH \(path) answered \(status): \(String(decoding: data, as: UTF8.self))")
    }
  }

  @Test func realtimeRequestsGetEachRulesAnswerAsAppleChecksIt() async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("retention-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let rootPath = scratch.appendingPathComponent("root.pem").path
    let day: Int64 = 86_400_000
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    // The simulated App Store starts 100 days ago, so that a subscriber can have paid 4 months.
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootPath, "--start-ms", String(now - 100 * day)])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(extraArguments: sim.serverAPIArguments(rootCA: rootPath) + ["--refresh-interval", "0"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }

    let bundle = "com.example.retention"
    let appleAppID: Int64 = 6_400_000_035
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundle, appleAppID: appleAppID)
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    for (id, duration, offers) in [("pro.monthly", "P1M", ["comeback"]), ("pro.yearly", "P1Y", []), ("pro.weekly", "P1W", [])] {
      var product = Substatus_V1_Product()
      product.productID = id
      product.type = .autoRenewable
      product.subscriptionGroupID = "pro"
      product.duration = duration
      product.promotionalOfferIDs = offers
      put.products.append(product)
    }
    _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)
    // The app's In-App Purchase key: its private half signs offers in substatusd, its public half is
    // what Apple (the simulator) checks them with.
    let key = ES256PrivateKey.generate()
    let keyFile = scratch.appendingPathComponent("key.p8")
    try Data(key.pkcs8PEM.utf8).write(to: keyFile)
    let issuer = "57246542-96fe-1a63-e053-0824d011072a"
    _ = try await Self.cli(
      daemon, key: admin,
      ["app", "set-iap-key", appID, "--issuer-id", issuer, "--key-id", "RETENTION1", "--key-file", keyFile.path])

    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundle, "apple_app_id": appleAppID, "shared_secret": "0123456789abcdef",
        "notification_version": "v2",
        "notification_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications",
        "retention_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/retention",
        "products": [
          [
            "product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M",
            "level": 2, "price": 9.99,
            "promotional_offers": [["id": "comeback", "type": "pay_as_you_go", "periods": 2, "price": 4.99]],
          ],
          ["product_id": "pro.yearly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1Y", "level": 1],
          ["product_id": "pro.weekly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1W", "level": 3],
        ],
      ])
    _ = try await sim.post(
      "/control/apps/\(bundle)/api-keys", ["issuer_id": issuer, "key_id": "RETENTION1", "public_key_pem": key.publicKey.pem])

    // loyal pays pro.monthly for 4 months, yearly bought a year 100 days ago; fresh (one month of
    // pro.monthly) and weekly (pro.weekly) buy just now.
    let users = ["loyal": "pro.monthly", "yearly": "pro.yearly", "fresh": "pro.monthly", "weekly": "pro.weekly"]
    var originals: [String: String] = [:]
    for user in ["loyal", "yearly", "fresh", "weekly"] {
      _ = try await sim.post("/control/users", ["user_id": user, "environment": "production"])
    }
    func buy(_ user: String) async throws {
      let bought = try await sim.post("/control/apps/\(bundle)/users/\(user)/purchase", ["product_id": users[user]!])
      let first = (bought["transactions"] as? [[String: Any]])?.first
      originals[user] = try #require(first?["original_transaction_id"] as? String)
    }
    try await buy("loyal")
    try await buy("yearly")
    _ = try await sim.post("/control/clock/advance", ["ms": 100 * day - 600_000])
    try await buy("fresh")
    try await buy("weekly")
    try await sim.drain()

    let rules: JSONValue = .object([
      "defaultMessageIdentifier": .string(Self.defaultMessage),
      "rules": .array([
        .object([
          "ruleId": .string("loyal-offer"),
          "when": .object(["productIds": .array([.string("pro.monthly")]), "minPaidPeriods": .integer(3)]),
          "promotionalOffer": .object(["messageIdentifier": .string(Self.offerMessage), "offerId": .string("comeback")]),
        ]),
        .object([
          "ruleId": .string("switch"),
          "when": .object(["productIds": .array([.string("pro.monthly")]), "maxPaidPeriods": .integer(1)]),
          "alternateProduct": .object(["messageIdentifier": .string(Self.switchMessage), "productId": .string("pro.yearly")]),
        ]),
        .object([
          "ruleId": .string("thanks"), "when": .object(["productIds": .array([.string("pro.yearly")])]),
          "message": .object(["messageIdentifier": .string(Self.thanksMessage)]),
        ]),
      ]),
    ])
    let rulesFile = scratch.appendingPathComponent("rules.json")
    try Data(rules.serializedBytes()).write(to: rulesFile)
    _ = try await Self.cli(daemon, key: admin, ["retention", "put", appID, "--file", rulesFile.path])

    // Apple asks about each subscriber; the simulator judges each answer as Apple would.
    let expected: [(user: String, shown: String, rule: String)] = [
      ("loyal", "promotional_offer", "loyal-offer"), ("fresh", "alternate_product", "switch"),
      ("yearly", "message", "thanks"), ("weekly", "message", ""),
    ]
    for (user, shown, rule) in expected {
      let result = try await sim.post("/control/apps/\(bundle)/users/\(user)/retention-request", ["group_id": "pro"])
      let answer = result["answer"] as? [String: Any]
      #expect(result["http_status"] as? Int == 200, "\(user): \(result)")
      #expect(result["valid"] as? Bool == true, "\(user): \(result)")
      #expect(result["shown"] as? String == shown, "\(user) (rule '\(rule)'): \(result)")
      switch user {
      case "loyal":
        let offer = try #require(answer?["promotionalOffer"] as? [String: Any])
        #expect(offer["messageIdentifier"] as? String == Self.offerMessage)
        // The offer's signature, checked here too with the key's public half and Apple's claims.
        let jws = try JWS.CompactJWS(parsing: try #require(offer["promotionalOfferSignatureV2"] as? String))
        #expect(key.publicKey.isValidSignature(jws.signature, for: jws.signingInput))
        #expect(jws.header["kid"]?.stringValue == "RETENTION1" && jws.header["alg"]?.stringValue == "ES256")
        let claims = try JSONValue(parsing: jws.payload)
        #expect(claims["aud"]?.stringValue == "promotional-offer")
        #expect(claims["iss"]?.stringValue == issuer)
        #expect(claims["bid"]?.stringValue == bundle)
        #expect(claims["productId"]?.stringValue == "pro.monthly")
        #expect(claims["offerIdentifier"]?.stringValue == "comeback")
        let nonce = claims["nonce"]?.stringValue ?? ""
        #expect(!nonce.isEmpty)
      case "fresh":
        let alternate = try #require(answer?["alternateProduct"] as? [String: Any])
        #expect(alternate["productId"] as? String == "pro.yearly")
        #expect(alternate["messageIdentifier"] as? String == Self.switchMessage)
      case "yearly":
        #expect((answer?["message"] as? [String: Any])?["messageIdentifier"] as? String == Self.thanksMessage)
      default:
        #expect((answer?["message"] as? [String: Any])?["messageIdentifier"] as? String == Self.defaultMessage)
      }
    }

    // Each request and its answer is a RETENTION_OFFERED event.
    var list = Substatus_V1_ListEventsRequest()
    list.appID = appID
    list.limit = 1000
    let offered = try await client.call(Substatus_V1_EventService.listEvents, list, key: admin).events
      .filter { $0.type == .retentionOffered }
    #expect(offered.count == 4, "\(offered)")
    for (user, _, rule) in expected {
      let event = offered.first { $0.originalTransactionID == originals[user] }
      #expect(event?.retentionRuleID == rule, "\(user): \(String(describing: event))")
    }
    #expect(offered.first { $0.retentionRuleID == "loyal-offer" }?.retentionAnswer == .promotionalOffer)
    #expect(offered.first { $0.retentionRuleID == "switch" }?.retentionAnswer == .alternateProduct)
    #expect(offered.first { $0.retentionRuleID == "thanks" }?.retentionAnswer == .message)
    #expect(offered.first { $0.retentionRuleID.isEmpty }?.retentionAnswer == .defaultMessage)

    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    #expect(!log.contains("PRIVATE KEY"))
  }
}
