import AppStoreSignedData
import Foundation
import HTTPServer
import SubscriptionStorageTesting
import SubstatusJSON
import SubstatusWire
import Testing

@testable import SubstatusService

/// The retention endpoint's per-app caches (docs/architecture.md "The flow of a retention
/// request"): the decoded rules and the parsed In-App Purchase key are kept between requests, and
/// what the admin RPCs change is answered by the next request on this instance, and within the
/// cache TTL on another instance sharing the store.
@Suite struct RetentionCacheTests {
  typealias R = RetentionServiceTests

  /// The fixture's rules with the "switch" rule answering a message instead of an alternate product.
  static func switchedToMessage() throws -> Substatus_V1_RetentionRules {
    var rules = try R.rules()
    var message = Substatus_V1_RetentionMessage()
    message.messageIdentifier = "44444444-4444-4444-8444-444444444444"
    rules.rules[2].answer = .message(message)
    return rules
  }

  static func answer(_ service: SubstatusService, _ app: String, _ body: [UInt8]) async -> JSONValue? {
    let response = await service.httpRouter().respond(
      to: HTTPRequest(method: "POST", path: "/v1/apps/\(app)/apple/retention", body: body))
    #expect(response.status == 200)
    return try? JSONValue(parsing: response.body)
  }

  /// The key id of a promotional offer's signature, after checking the signature with `publicKeyPEM`.
  static func offerKey(_ answer: JSONValue?, publicKeyPEM: String) throws -> String? {
    let text = try #require(answer?["promotionalOffer"]?["promotionalOfferSignatureV2"]?.stringValue)
    let jws = try JWS.CompactJWS(parsing: text)
    #expect(try ES256PublicKey(pem: publicKeyPEM).isValidSignature(jws.signature, for: jws.signingInput))
    return jws.header["kid"]?.stringValue
  }

  @Test func rulesPutThroughTheAdminRPCAnswerTheNextRequest() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      _ = try await h.submitSigned(app, "newer", key: admin, transactions: try R.months(apple, "200", 1))
      // No rules: 404, and the next request after the put sees them (the clock does not move).
      #expect(await R.post(h, app, try R.realtimeRequest(apple, original: "200", request: "b0")).0 == 404)
      _ = try await R.put(h, app, try R.rules(), key: admin)
      let first = await Self.answer(h.service, app, try R.realtimeRequest(apple, original: "200", request: "b1"))
      #expect(first?["alternateProduct"]?["productId"]?.stringValue == "premium.yearly")
      _ = try await R.put(h, app, try Self.switchedToMessage(), key: admin)
      let second = await Self.answer(h.service, app, try R.realtimeRequest(apple, original: "200", request: "b2"))
      #expect(second?["message"]?["messageIdentifier"]?.stringValue == "44444444-4444-4444-8444-444444444444")
    }
  }

  @Test func anotherInstancesPutIsAnsweredWithinTheCacheTTL() async throws {
    let apple = try TestApple()
    let store = InMemoryStore()
    let world = TestWorld()
    let limits = ServiceLimits()
    try await withService(appleRootCertificates: [apple.ca.root], store: store, world: world) { h in
      let other = SubstatusService(
        store: store, environment: world.environment, limits: limits, log: world.log,
        appleRootCertificates: [apple.ca.root])
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      _ = try await h.submitSigned(app, "newer", key: admin, transactions: try R.months(apple, "200", 1))
      _ = try await R.put(h, app, try R.rules(), key: admin)
      let first = await Self.answer(other, app, try R.realtimeRequest(apple, original: "200", request: "c1"))
      #expect(first?["alternateProduct"]?["productId"]?.stringValue == "premium.yearly")
      // Put through this instance: the other one still answers from its cache...
      _ = try await R.put(h, app, try Self.switchedToMessage(), key: admin)
      let cached = await Self.answer(other, app, try R.realtimeRequest(apple, original: "200", request: "c2"))
      #expect(cached?["alternateProduct"]?["productId"]?.stringValue == "premium.yearly")
      // ...until its entry is older than the TTL.
      world.clock.advance(by: .milliseconds(limits.cacheTTLMilliseconds))
      let fresh = await Self.answer(other, app, try R.realtimeRequest(apple, original: "200", request: "c3"))
      #expect(fresh?["message"]?["messageIdentifier"]?.stringValue == "44444444-4444-4444-8444-444444444444")
    }
  }

  @Test func aNewInAppPurchaseKeySignsTheNextOffer() async throws {
    let apple = try TestApple()
    let store = InMemoryStore()
    let world = TestWorld()
    let limits = ServiceLimits()
    try await withService(appleRootCertificates: [apple.ca.root], store: store, world: world) { h in
      let other = SubstatusService(
        store: store, environment: world.environment, limits: limits, log: world.log,
        appleRootCertificates: [apple.ca.root])
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      _ = try await R.put(h, app, try R.rules(), key: admin)
      _ = try await h.submitSigned(app, "loyal", key: admin, transactions: try R.months(apple, "100", 4))
      let firstKey = try #require(try await h.setInAppPurchaseKey(app, key: admin).app?.inAppPurchaseKey)
      for (service, request) in [(h.service, "d1"), (other, "d2")] {
        let offer = await Self.answer(service, app, try R.realtimeRequest(apple, original: "100", request: request))
        #expect(try Self.offerKey(offer, publicKeyPEM: firstKey.publicKeyPem) == "2X9R4HXF34")
      }
      // Another key, set through this instance: its next offer is signed with it.
      let pem = ES256PrivateKey.generate().pkcs8PEM
      let secondKey = try #require(
        try await h.setInAppPurchaseKey(app, key: admin, pem: pem, keyID: "SECOND0KEY").app?.inAppPurchaseKey)
      let offer = await Self.answer(h.service, app, try R.realtimeRequest(apple, original: "100", request: "d3"))
      #expect(try Self.offerKey(offer, publicKeyPEM: secondKey.publicKeyPem) == "SECOND0KEY")
      // The other instance: once its app cache has read the new key (within the TTL).
      world.clock.advance(by: .milliseconds(limits.cacheTTLMilliseconds))
      let later = await Self.answer(other, app, try R.realtimeRequest(apple, original: "100", request: "d4"))
      #expect(try Self.offerKey(later, publicKeyPEM: secondKey.publicKeyPem) == "SECOND0KEY")
    }
  }
}
