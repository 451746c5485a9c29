import AppStoreSignedData
import Foundation
import HTTPServer
import RPCCore
import SubstatusJSON
import SubstatusWire
import Testing

@testable import SubstatusService

/// Retention rules through the service (docs/architecture.md "Retention Messaging"): stored and
/// validated by AdminService, tested per user, and answered to Apple's signed realtime requests on
/// `POST /v1/apps/{app_id}/apple/retention`.
@Suite struct RetentionServiceTests {
  static let fallback = "00000000-0000-4000-8000-000000000000"
  static let day = TestApple.day
  static let t0 = TestApple.t0

  static func rules() throws -> Substatus_V1_RetentionRules {
    try Substatus_V1_RetentionRules(jsonString: try fixture("retention-rules.json"))
  }

  static func put(_ h: Harness, _ app: String, _ rules: Substatus_V1_RetentionRules, key: String) async throws
    -> Substatus_V1_PutRetentionRulesResponse
  {
    var request = Substatus_V1_PutRetentionRulesRequest()
    request.appID = app
    request.rules = rules
    return try await h.call(Substatus_V1_AdminService.putRetentionRules, request, key: key)
  }

  static func test(_ h: Harness, _ app: String, _ user: String, product: String = "", key: String) async throws
    -> Substatus_V1_TestRetentionRulesResponse
  {
    var request = Substatus_V1_TestRetentionRulesRequest()
    request.appID = app
    request.userID = user
    request.productID = product
    request.environment = .sandbox
    return try await h.call(Substatus_V1_AdminService.testRetentionRules, request, key: key)
  }

  /// `months` paid months of premium.monthly under original transaction `original`, the last
  /// one current at t0.
  static func months(_ apple: TestApple, _ original: String, _ months: Int) throws -> [String] {
    try (0..<months).map { i in
      let start = t0 - Int64(months - i) * 30 * day + day
      return try apple.sign(
        TestApple.transaction(id: "\(original)-\(i)", original: original, purchase: start, expires: start + 30 * day))
    }
  }

  @Test func rulesAreStoredReadBackAndReplaced() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var get = Substatus_V1_GetRetentionRulesRequest()
      get.appID = app
      await expectStatus(.notFound, "no rules yet") { _ = try await h.call(Substatus_V1_AdminService.getRetentionRules, get, key: admin) }
      let rules = try Self.rules()
      let stored = try #require(try await Self.put(h, app, rules, key: admin).rules)
      #expect(stored.rules == rules.rules && stored.defaultMessageIdentifier == Self.fallback)
      #expect(stored.updatedMs == Self.t0)
      #expect(try await h.call(Substatus_V1_AdminService.getRetentionRules, get, key: admin).rules == stored)
      // Replaced whole.
      var fewer = rules
      fewer.rules = [rules.rules[2]]
      _ = try await Self.put(h, app, fewer, key: admin)
      #expect(try await h.call(Substatus_V1_AdminService.getRetentionRules, get, key: admin).rules?.rules.map(\.ruleID) == ["switch"])
      // Another tenant's key does not see the app.
      let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.example.other")
      await expectStatus(.notFound) { _ = try await Self.put(h, app, rules, key: otherAdmin) }
    }
  }

  @Test func validationNamesTheBadRule() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var rules = try Self.rules()
      rules.defaultMessageIdentifier = "not-a-uuid"
      rules.rules[1].answer = .promotionalOffer(Substatus_V1_RetentionPromotionalOffer())
      rules.rules[2].ruleID = "billing"
      var bad = Substatus_V1_RetentionRule()
      bad.ruleID = "x"
      var when = Substatus_V1_RetentionCondition()
      when.billingPlanTypes = ["YEARLY"]
      when.minPaidPeriods = 4
      when.maxPaidPeriodsSet = .maxPaidPeriods(2)
      bad.when = when
      rules.rules.append(bad)
      let error = await expectStatus(.invalidArgument) { _ = try await Self.put(h, app, rules, key: admin) }
      let violations = (error?.fieldViolations ?? []).map { "\($0.field): \($0.description)" }
      #expect(violations.first?.hasPrefix("default_message_identifier: must be a UUID") == true, "\(violations)")
      #expect(violations.contains("rules[1] (ruleId \"loyal-monthly\"): promotional_offer.message_identifier is required"))
      #expect(violations.contains("rules[1] (ruleId \"loyal-monthly\"): promotional_offer.offer_id is required"))
      #expect(violations.contains("rules[2] (ruleId \"billing\"): rule_id appears twice"))
      #expect(violations.contains { $0.hasPrefix("rules[3] (ruleId \"x\"): when.billing_plan_types[0] must be BILLED_UPFRONT or MONTHLY") })
      #expect(violations.contains("rules[3] (ruleId \"x\"): when.max_paid_periods is below min_paid_periods"))
      #expect(violations.contains("rules[3] (ruleId \"x\"): answer is required: one of message, alternate_product, promotional_offer"))
      // Nothing was stored.
      await expectStatus(.notFound) { _ = try await Self.test(h, app, "anyone", key: admin) }
      // Too many rules: RESOURCE_EXHAUSTED.
      var many = try Self.rules()
      many.rules = (0...SubstatusService.maxRetentionRules).map { i in
        var r = many.rules[2]
        r.ruleID = "r\(i)"
        return r
      }
      await expectStatus(.resourceExhausted) { _ = try await Self.put(h, app, many, key: admin) }
    }
  }

  @Test func testRetentionRulesSaysWhatAndWhichRule() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      _ = try await Self.put(h, app, try Self.rules(), key: admin)
      _ = try await h.submitSigned(app, "loyal", key: admin, transactions: try Self.months(apple, "100", 4))
      _ = try await h.submitSigned(app, "newer", key: admin, transactions: try Self.months(apple, "200", 1))
      let loyal = try await Self.test(h, app, "loyal", key: admin)
      #expect(loyal.answer?.ruleID == "loyal-monthly")
      #expect(loyal.answer?.promotionalOffer?.offerID == "premium.winback")
      #expect(loyal.answer?.promotionalOffer?.productID == "premium.monthly")
      let facts = try #require(loyal.facts)
      #expect(facts.productID == "premium.monthly" && facts.known && facts.paidPeriods == 4)
      #expect(facts.tenureDays == 119 && facts.promotionalOfferEligible && !facts.billingIssue)
      #expect(facts.billingPlanType == "BILLED_UPFRONT")
      let newer = try await Self.test(h, app, "newer", key: admin)
      #expect(newer.answer?.ruleID == "switch")
      #expect(newer.answer?.alternateProduct?.productID == "premium.yearly")
      // Another product of the group than the rules name: the default message.
      let yearly = try await Self.test(h, app, "newer", product: "premium.yearly", key: admin)
      #expect(yearly.answer?.ruleID == "" && yearly.answer?.message?.messageIdentifier == Self.fallback)
      let stranger = try await Self.test(h, app, "stranger", key: admin)
      #expect(stranger.answer?.message?.messageIdentifier == Self.fallback && stranger.facts?.known == false)
      await expectStatus(.invalidArgument) { _ = try await Self.test(h, app, "", key: admin) }
    }
  }

  /// Apple's realtime request, signed by the test CA.
  static func realtimeRequest(
    _ apple: TestApple, original: String, product: String = "premium.monthly", environment: String = "Sandbox",
    request: String = "3db5c98d-8acf-4e29-831e-8e1f82f9f6e9"
  ) throws -> [UInt8] {
    let payload: JSONValue = .object([
      "originalTransactionId": .string(original), "appAppleId": .integer(TestApple.appleAppID),
      "productId": .string(product), "userLocale": .string("en-US"), "requestIdentifier": .string(request),
      "environment": .string(environment), "signedDate": .integer(t0 - 100),
    ])
    return JSONValue.object(["signedPayload": .string(try apple.sign(payload))]).serializedBytes()
  }

  static func post(_ h: Harness, _ app: String, _ body: [UInt8]) async -> (Int, JSONValue?) {
    let response = await h.service.httpRouter().respond(
      to: HTTPRequest(method: "POST", path: "/v1/apps/\(app)/apple/retention", body: body))
    return (response.status, try? JSONValue(parsing: response.body))
  }

  @Test func theEndpointAnswersApplesSignedRequests() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      // No rules yet: 404 (Apple shows its default message).
      #expect(await Self.post(h, app, try Self.realtimeRequest(apple, original: "100")).0 == 404)
      _ = try await Self.put(h, app, try Self.rules(), key: admin)
      _ = try await h.submitSigned(app, "loyal", key: admin, transactions: try Self.months(apple, "100", 4))
      _ = try await h.submitSigned(app, "newer", key: admin, transactions: try Self.months(apple, "200", 1))

      // The promotional offer needs the In-App Purchase key: without one, the default message.
      let (status, unsigned) = await Self.post(h, app, try Self.realtimeRequest(apple, original: "100"))
      #expect(status == 200)
      #expect(unsigned?["message"]?["messageIdentifier"]?.stringValue == Self.fallback)
      let info = try #require(try await h.setInAppPurchaseKey(app, key: admin).app?.inAppPurchaseKey)
      let publicKey = try ES256PublicKey(pem: info.publicKeyPem)
      let (_, offer) = await Self.post(h, app, try Self.realtimeRequest(apple, original: "100", request: "a1"))
      let promotional = try #require(offer?["promotionalOffer"])
      #expect(promotional["messageIdentifier"]?.stringValue == "11111111-1111-4111-8111-111111111111")
      let jws = try #require(promotional["promotionalOfferSignatureV2"]?.stringValue)
      let (header, claims) = try retentionJWS(jws, key: publicKey)
      #expect(header["alg"]?.stringValue == "ES256" && header["kid"]?.stringValue == "2X9R4HXF34")
      #expect(claims["aud"]?.stringValue == "promotional-offer" && claims["bid"]?.stringValue == TestApple.bundleID)
      #expect(claims["iss"]?.stringValue == testIssuerID)
      #expect(claims["productId"]?.stringValue == "premium.monthly")
      #expect(claims["offerIdentifier"]?.stringValue == "premium.winback")
      #expect(claims["transactionId"]?.stringValue == "100")
      #expect(claims["iat"]?.int64Value == Self.t0 / 1000)
      #expect(offer?.objectValue?.count == 1)

      let (_, alternate) = await Self.post(h, app, try Self.realtimeRequest(apple, original: "200", request: "a2"))
      #expect(alternate?["alternateProduct"]?["productId"]?.stringValue == "premium.yearly")
      #expect(alternate?["alternateProduct"]?["messageIdentifier"]?.stringValue == "22222222-2222-4222-8222-222222222222")
      // An original transaction no user submitted: the default message.
      let (_, unknown) = await Self.post(h, app, try Self.realtimeRequest(apple, original: "999", request: "a3"))
      #expect(unknown?["message"]?["messageIdentifier"]?.stringValue == Self.fallback)

      // Refused like V2 notifications: another environment (400), a stranger's chain (401), no JWS (400).
      let (production, refused) = await Self.post(h, app, try Self.realtimeRequest(apple, original: "100", environment: "Xcode"))
      #expect(production == 400 && refused?["error"]?["reason"]?.stringValue == "WRONG_ENVIRONMENT")
      let stranger = try TestApple()
      let (forged, forgedBody) = await Self.post(h, app, try Self.realtimeRequest(stranger, original: "100"))
      #expect(forged == 401 && forgedBody?["error"]?["reason"]?.stringValue == "UNTRUSTED_CHAIN")
      #expect(await Self.post(h, app, Array(#"{"signedPayload": 1}"#.utf8)).0 == 400)
      #expect(await Self.post(h, "app_nope", try Self.realtimeRequest(apple, original: "100")).0 == 404)

      // Every answer is a RETENTION_OFFERED event.
      var list = Substatus_V1_ListEventsRequest()
      list.appID = app
      list.types = [.retentionOffered]
      let events = try await h.call(Substatus_V1_EventService.listEvents, list, key: admin).events
      #expect(events.map(\.userID) == ["loyal", "loyal", "newer", "apple:999"])
      #expect(events.map(\.retentionRuleID) == ["", "loyal-monthly", "switch", ""])
      #expect(events.map(\.retentionAnswer) == [.defaultMessage, .promotionalOffer, .alternateProduct, .defaultMessage])
      #expect(events.map(\.retentionOfferedID) == ["", "premium.winback", "premium.yearly", ""])
      #expect(events.allSatisfy { $0.productID == "premium.monthly" && $0.environment == .sandbox && $0.occurredMs == Self.t0 - 100 })
      #expect(events[1].retentionMessageIdentifier == "11111111-1111-4111-8111-111111111111")

      // GetTrends counts them per rule in the bucket they occurred in (no decision yet).
      var trends = Substatus_V1_GetTrendsRequest()
      trends.appID = app
      trends.fromMs = Self.t0 - Self.day
      trends.toMs = Self.t0 + Self.day
      trends.interval = .day
      trends.environment = .sandbox
      let buckets = try await h.call(Substatus_V1_ReportService.getTrends, trends, key: admin).buckets
      #expect(buckets.count == 2)
      #expect(buckets.first?.retention.map(\.ruleID) == ["", "loyal-monthly", "switch"])
      #expect(buckets.first?.retention.map(\.offered) == [2, 1, 1])
      #expect(buckets.first?.retention.allSatisfy { $0.stayed == 0 && $0.expired == 0 } == true)
      #expect(buckets.last?.retention.isEmpty == true)
    }
  }
}

/// A compact JWS checked with `key` as Apple checks a promotional offer signature: its header and
/// claims.
private func retentionJWS(_ text: String, key: ES256PublicKey) throws -> (header: JSONValue, claims: JSONValue) {
  let jws = try JWS.CompactJWS(parsing: text)
  #expect(key.isValidSignature(jws.signature, for: jws.signingInput), "the JWS signature does not verify")
  return (jws.header, try JSONValue(parsing: jws.payload))
}
