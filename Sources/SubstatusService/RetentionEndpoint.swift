import AppStoreSignedData
import Foundation
import HTTPServer
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusJSON

// MARK: Apple's Retention Messaging realtime requests (docs/architecture.md "Retention Messaging")
//
// `POST /v1/apps/{app_id}/apple/retention`: Apple's "Get Retention Message" call
// (https://developer.apple.com/documentation/retentionmessaging/responding-to-realtime-retention-messaging-requests),
// answered with a RealtimeResponseBody
// (https://developer.apple.com/documentation/retentionmessaging/realtimeresponsebody) chosen by
// the app's retention rules over the subscriber's summary. Apple shows the default message it was
// configured with when the answer fails or is late (about 700 ms), so every failure here is a
// precise 4xx/5xx and never a guess.

extension SubstatusService {
  /// Answers one realtime request:
  /// - 400 the body is not `{"signedPayload": JWS}`, or the payload is for another app
  ///   (`appAppleId` in production), another environment, or malformed; 401 the signature or
  ///   chain does not verify (as V2 notifications: ``rejectedNotification(_:appID:)``'s body);
  /// - 404 unknown app, or the app has no retention rules (Apple then shows its default message);
  /// - 200 with the rules' answer: the first rule that holds for the user of the request's
  ///   `originalTransactionId` (the user with the most paid periods when several share it), else
  ///   `defaultMessageIdentifier`; an original transaction no user has submitted gets the default
  ///   message. A promotional offer is signed (`promotionalOfferSignatureV2`) with the app's In-App
  ///   Purchase key; without a key the default message answers.
  /// Every 200 answer is logged as a `RETENTION_OFFERED` event.
  func receiveRetentionRequest(appID: String, body: [UInt8]) async throws -> HTTPResponse {
    let json: JSONValue
    do { json = try JSONValue(parsing: body) } catch {
      metrics.notification(outcome: "retention_malformed")
      throw HTTPError(status: 400, message: "the body is not JSON: \(error)")
    }
    guard let jws = json["signedPayload"]?.stringValue, !jws.isEmpty else {
      metrics.notification(outcome: "retention_malformed")
      throw HTTPError(status: 400, message: "signedPayload must be a compact JWS string")
    }
    guard !appID.isEmpty, let cached = try await loadApp(appID) else {
      metrics.notification(outcome: "retention_unknown_app")
      throw HTTPError(status: 404, message: "app \(ErrorText.quoted(appID)) not found")
    }
    let verifiers = AppSignedDataVerifiers(roots: appleRootCertificates, app: cached.app)
    let request: RealtimeRetentionRequest
    let environment: SubscriptionDomain.Environment
    do throws(SignedDataFailure) {
      (request, environment) = try verifiers.realtimeRequest(jws)
    } catch {
      return rejectedNotification(error, appID: appID)
    }
    guard let rules = try await cachedRetentionRules(appId: appID) else {
      metrics.notification(outcome: "retention_no_rules")
      throw HTTPError(status: 404, message: "app \(ErrorText.quoted(appID)) has no retention rules")
    }
    let now = self.environment.now()
    let users = try await stored { () throws(StoreError) in
      try await purchaseStore.users(appId: appID, environment: environment, originalTransactionId: request.originalTransactionId)
    }
    var userId = Self.unclaimedUserID(originalTransactionId: request.originalTransactionId)
    var decision = rules.ruleSet.defaultDecision
    var facts = RetentionFacts(productId: request.productId)
    if !users.isEmpty {
      let all = try await retentionFacts(
        userIds: users, productId: request.productId, environment: environment, cached, at: now)
      // The subscriber who pays: the most paid periods, then the first user id.
      for user in users.sorted() {
        guard let f = all[user] else { continue }
        if userId.hasPrefix("apple:") || f.paidPeriods > facts.paidPeriods {
          userId = user
          facts = f
        }
      }
      decision = rules.ruleSet.decide(facts)
    }
    var answer: JSONObject
    switch decision.answer {
    case .message(let id):
      answer = ["message": .object(["messageIdentifier": .string(id)])]
    case .alternateProduct(let id, let productId):
      answer = ["alternateProduct": .object(["messageIdentifier": .string(id), "productId": .string(productId)])]
    case .promotionalOffer(let id, let offerId, let productId):
      if let signature = try await retentionOfferSignature(
        cached, productId: productId ?? request.productId, offerId: offerId,
        transactionId: request.originalTransactionId, at: now)
      {
        answer = ["promotionalOffer": .object(["messageIdentifier": .string(id), "promotionalOfferSignatureV2": .string(signature)])]
      } else {
        decision = rules.ruleSet.defaultDecision
        answer = ["message": .object(["messageIdentifier": .string(rules.ruleSet.defaultMessageIdentifier)])]
      }
    }
    await logRetentionOffered(
      cached, userId: userId, environment: environment, request: request, decision: decision, facts: facts, at: now)
    metrics.notification(outcome: "retention_answered")
    log.info("retention request", [
      ("app_id", .string(appID)), ("environment", .string(environment.rawValue)),
      ("rule_id", .string(decision.ruleId ?? "")), ("users", .integer(users.count)),
    ])
    return HTTPResponse.json(answer)
  }

  /// The V2 promotional offer signature of the answer
  /// (https://developer.apple.com/documentation/retentionmessaging/promotionaloffersignaturev2:
  /// Apple's `PromotionalOfferV2SignatureCreator` claims, audience `promotional-offer`), or `nil`
  /// when the app has no In-App Purchase key (or it cannot be opened).
  func retentionOfferSignature(
    _ cached: CachedApp, productId: String, offerId: String, transactionId: String, at now: Int64
  ) async throws(RPCError) -> String? {
    let key: InAppPurchaseKey
    let privateKey: ES256PrivateKey
    do {
      (key, privateKey) = try await signingKey(cached)
    } catch where error.code == .failedPrecondition {
      log.info("retention promotional offer without an In-App Purchase key: answered the default message", [
        ("app_id", .string(cached.app.appId))
      ])
      return nil
    }
    do {
      return try PromotionalOfferSignature.v2(
        key: privateKey, keyId: key.keyId, issuerId: key.issuerId, bundleId: cached.app.bundleId, productId: productId,
        offerId: offerId, transactionId: transactionId, nonce: randomUUID(), issuedAt: now)
    } catch {
      log.info("signing a retention promotional offer failed", [("app_id", .string(cached.app.appId))])
      return nil
    }
  }

  /// A random (version 4) UUID, lowercase.
  func randomUUID() -> String {
    var bytes = environment.randomBytes(16)
    bytes[6] = bytes[6] & 0x0F | 0x40
    bytes[8] = bytes[8] & 0x3F | 0x80
    let hex = Array(Hex.encode(bytes))
    return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(hex[$0]) }.joined(separator: "-")
  }

  /// Appends the `RETENTION_OFFERED` event of an answer (its id: a hash of the app, environment
  /// and Apple's request identifier, so a repeated request logs once). A store failure is logged,
  /// never turned into a failed answer: Apple would show the default message instead.
  func logRetentionOffered(
    _ cached: CachedApp, userId: String, environment: SubscriptionDomain.Environment, request: RealtimeRetentionRequest,
    decision: RetentionDecision, facts: RetentionFacts, at now: Int64
  ) async {
    guard let log = store as? any EventLogAppending else { return }
    let seed = "retention|\(cached.app.appId)|\(environment.rawValue)|\(request.requestIdentifier)"
    var event = SubscriptionEvent(
      eventId: "evt_r" + Hex.encode(SHA256.hash(Array(seed.utf8))).prefix(31), appId: cached.app.appId, userId: userId,
      environment: environment, type: .retentionOffered, occurredMs: request.signedDate, detectedMs: now,
      subscriptionGroupId: facts.subscriptionGroupId, productId: request.productId,
      originalTransactionId: request.originalTransactionId)
    event.retention = RetentionOfferRecord(decision: decision, requestProductId: request.productId)
    do {
      let appended = try await log.appendEvents([event])
      eventsAppended(appended.count, source: "retention")
    } catch {
      self.log.info("logging a retention answer failed", [("app_id", .string(cached.app.appId)), ("error", .string(error.message))])
    }
  }
}

extension AppSignedDataVerifiers {
  /// Verifies a realtime request's `signedPayload` (signature and chain, then the environment it
  /// names and, in production, the app's Apple id, which must be set); returns it and that
  /// environment.
  func realtimeRequest(_ jws: String) throws(SignedDataFailure) -> (RealtimeRetentionRequest, SubscriptionDomain.Environment) {
    let (verified, environment) = try verified(jws)
    if environment == .production, app.appleAppId == nil {
      throw SignedDataFailure(
        .wrongApp, "production realtime requests are checked against the app's apple_app_id, and app \"\(app.appId)\" has none")
    }
    do {
      return (try verifier(environment).decodeRealtimeRequest(verified: verified), environment)
    } catch {
      throw SignedDataFailure(error)
    }
  }
}
