import AppStoreSignedData
import Foundation
import RPCCore
import SubscriptionStorage
import SubstatusJSON
import SubstatusWire
import Testing

@testable import SubstatusService

/// One day in milliseconds.
private let day: Int64 = 86_400_000

/// A transaction of the test catalog, purchased and expiring relative to the test clock.
private func transaction(
  _ id: String, product: String = "premium.monthly", purchasedDaysAgo: Int64, expiresInDays: Int64,
  trial: Bool = false, refunded: Bool = false, now: Int64
) -> Substatus_V1_Transaction {
  var t = Substatus_V1_Transaction()
  t.transactionID = id
  t.originalTransactionID = "o-" + id
  t.productID = product
  t.purchaseDateMs = now - purchasedDaysAgo * day
  t.expiresDateMs = now + expiresInDays * day
  t.isTrialPeriod = trial
  if refunded { t.revocationDateMs = now - (purchasedDaysAgo - 1) * day }
  return t
}

/// Users whose histories give each answer, set up in the app of `h`.
private func seedUsers(_ h: Harness, admin: String, app: String, environment: Substatus_V1_Environment = .production) async throws {
  let now = h.world.now.withLock { $0 }
  func put(_ user: String, _ transactions: [Substatus_V1_Transaction], renewals: [Substatus_V1_RenewalInfo] = []) async throws {
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = app
    request.userID = user
    request.transactions = transactions.map {
      var t = $0
      t.environment = environment
      return t
    }
    request.renewalInfos = renewals
    _ = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
  }
  // Active, no trial: promotional EXISTING_SUBSCRIBER; introductory ACTIVE_SUBSCRIPTION.
  try await put("active", [
    transaction("a1", purchasedDaysAgo: 40, expiresInDays: -10, now: now),
    transaction("a2", purchasedDaysAgo: 10, expiresInDays: 20, now: now),
  ])
  // Lapsed, no trial: promotional LAPSED_SUBSCRIBER; introductory LAPSED_NO_INTRO_USED (policy).
  try await put("lapsed", [transaction("l1", purchasedDaysAgo: 60, expiresInDays: -30, now: now)])
  // Lapsed after a trial: introductory INTRO_ALREADY_USED.
  try await put("trial-used", [transaction("t1", purchasedDaysAgo: 60, expiresInDays: -30, trial: true, now: now)])
  // Refunded: introductory REFUNDED_IN_GROUP when the policy says so.
  try await put("refunded", [transaction("r1", purchasedDaysAgo: 20, expiresInDays: 10, refunded: true, now: now)])
  // Expired in billing retry: IN_BILLING_RETRY; in grace: IN_GRACE_PERIOD.
  var retry = Substatus_V1_RenewalInfo()
  retry.originalTransactionID = "o-b1"
  retry.productID = "premium.monthly"
  retry.autoRenewProductID = "premium.monthly"
  retry.autoRenewEnabled = true
  retry.isInBillingRetryPeriod = true
  retry.environment = environment
  try await put("retry", [transaction("b1", purchasedDaysAgo: 35, expiresInDays: -5, now: now)], renewals: [retry])
  var grace = retry
  grace.originalTransactionID = "o-g1"
  grace.gracePeriodExpiresDateMs = now + 3 * day
  try await put("grace", [transaction("g1", purchasedDaysAgo: 31, expiresInDays: -1, now: now)], renewals: [grace])
}

/// The ErrorInfo of a failed call.
private func errorInfo(_ error: RPCError?) throws -> Google_Rpc_ErrorInfo? {
  guard let details = error?.metadata.firstBinary(forKey: "grpc-status-details-bin") else { return nil }
  return try Google_Rpc_Status(serializedBytes: details).details.lazy
    .compactMap { try $0.unpack(Google_Rpc_ErrorInfo.self) }.first
}

/// A compact JWS checked with `key`: its header and claims.
private func verifiedJWS(_ text: String, key: ES256PublicKey) throws -> (header: JSONValue, claims: JSONValue) {
  let jws = try JWS.CompactJWS(parsing: text)
  #expect(key.isValidSignature(jws.signature, for: jws.signingInput), "the JWS signature does not verify")
  return (jws.header, try JSONValue(parsing: jws.payload))
}

private func promo(
  _ app: String, user: String, product: String = "premium.monthly", offer: String = "premium.winback",
  token: String = "", nonce: String = "", transaction: String = ""
) -> Substatus_V1_SignPromotionalOfferRequest {
  var r = Substatus_V1_SignPromotionalOfferRequest()
  r.appID = app
  r.userID = user
  r.productID = product
  r.offerID = offer
  r.appAccountToken = token
  r.nonce = nonce
  r.transactionID = transaction
  return r
}

private func intro(
  _ app: String, user: String, product: String = "premium.monthly", nonce: String = "", transaction: String = ""
) -> Substatus_V1_SignIntroductoryOfferEligibilityRequest {
  var r = Substatus_V1_SignIntroductoryOfferEligibilityRequest()
  r.appID = app
  r.userID = user
  r.productID = product
  r.nonce = nonce
  r.transactionID = transaction
  return r
}

/// Sets up a tenant, its app with the test key and the seeded users; returns (admin key, read
/// key, app id, public key).
private func setUp(_ h: Harness) async throws -> (String, String, String, ES256PublicKey) {
  let (admin, app) = try await h.makeTenantWithApp()
  let info = try #require(try await h.setInAppPurchaseKey(app, key: admin).app?.inAppPurchaseKey)
  try await seedUsers(h, admin: admin, app: app)
  var create = Substatus_V1_CreateApiKeyRequest()
  create.role = .read
  let read = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: admin).key
  return (admin, read, app, try ES256PublicKey(pem: info.publicKeyPem))
}

@Suite("EligibilityService.SignPromotionalOffer and SignIntroductoryOfferEligibility")
struct OfferSigningTests {
  @Test("an eligible user gets a V1 signature and a V2 JWS that verify with the app's public key")
  func promotionalOffer() async throws {
    try await withService { h in
      let (_, read, app, publicKey) = try await setUp(h)
      let now = h.world.now.withLock { $0 }
      let token = "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE"
      let nonce = "0F0E0D0C-0B0A-4908-8706-050403020100"
      let response = try await h.call(
        Substatus_V1_EligibilityService.signPromotionalOffer,
        promo(app, user: "lapsed", token: token, nonce: nonce), key: read)
      #expect(response.productID == "premium.monthly" && response.offerID == "premium.winback")
      #expect(response.keyID == "2X9R4HXF34")
      #expect(response.nonce == nonce.lowercased())
      #expect(response.timestampMs == now)
      #expect(response.reason == .lapsedSubscriber)
      // V1: bundleId⁣keyId⁣productId⁣offerId⁣appAccountToken⁣nonce⁣timestamp, lowercase UUIDs.
      let message = [
        "com.example.app", "2X9R4HXF34", "premium.monthly", "premium.winback", token.lowercased(),
        nonce.lowercased(), String(now),
      ].joined(separator: "\u{2063}")
      let der = try #require(Data(base64Encoded: response.signature))
      #expect(publicKey.isValidDERSignature(Array(der), for: Array(message.utf8)))
      #expect(!publicKey.isValidDERSignature(Array(der), for: Array((message + "0").utf8)))
      // V2.
      let (header, claims) = try verifiedJWS(response.compactJws, key: publicKey)
      #expect(header["alg"]?.stringValue == "ES256" && header["kid"]?.stringValue == "2X9R4HXF34")
      #expect(claims["aud"]?.stringValue == "promotional-offer")
      #expect(claims["iss"]?.stringValue == testIssuerID)
      #expect(claims["bid"]?.stringValue == "com.example.app")
      #expect(claims["nonce"]?.stringValue == nonce.lowercased())
      #expect(claims["iat"]?.int64Value == now / 1000)
      #expect(claims["productId"]?.stringValue == "premium.monthly")
      #expect(claims["offerIdentifier"]?.stringValue == "premium.winback")
      // The transaction id defaults to the user's most recently purchased transaction.
      #expect(claims["transactionId"]?.stringValue == "l1")

      // An active subscriber is eligible too; a given transaction id is signed as given.
      let active = try await h.call(
        Substatus_V1_EligibilityService.signPromotionalOffer,
        promo(app, user: "active", transaction: "2000000123"), key: read)
      #expect(active.reason == .existingSubscriber)
      #expect(try verifiedJWS(active.compactJws, key: publicKey).claims["transactionId"]?.stringValue == "2000000123")
    }
  }

  @Test("without a nonce the server makes a random version-4 UUID from its randomness, a new one each time")
  func generatedNonce() async throws {
    try await withService { h in
      let (_, read, app, publicKey) = try await setUp(h)
      var nonces: Set<String> = []
      for _ in 0..<3 {
        let r = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, promo(app, user: "active"), key: read)
        #expect(isUUID(r.nonce) && r.nonce == r.nonce.lowercased())
        let chars = Array(r.nonce)
        #expect(chars[14] == "4" && "89ab".contains(chars[19]), "\(r.nonce)")
        #expect(try verifiedJWS(r.compactJws, key: publicKey).claims["nonce"]?.stringValue == r.nonce)
        nonces.insert(r.nonce)
        // The V1 signature without an app account token signs the empty string there.
        let message = ["com.example.app", "2X9R4HXF34", "premium.monthly", "premium.winback", "", r.nonce, String(r.timestampMs)]
          .joined(separator: "\u{2063}")
        #expect(publicKey.isValidDERSignature(Array(Data(base64Encoded: r.signature)!), for: Array(message.utf8)))
      }
      #expect(nonces.count == 3)
    }
  }

  @Test("an eligible user gets an introductory-offer eligibility JWS")
  func introductoryOffer() async throws {
    try await withService { h in
      let (_, read, app, publicKey) = try await setUp(h)
      let now = h.world.now.withLock { $0 }
      // A new customer has no stored transaction: the app passes its appTransactionID.
      let fresh = try await h.call(
        Substatus_V1_EligibilityService.signIntroductoryOfferEligibility,
        intro(app, user: "new", transaction: "704289572311575926"), key: read)
      #expect(fresh.reason == .newCustomer)
      #expect(fresh.keyID == "2X9R4HXF34" && fresh.productID == "premium.monthly" && fresh.issuedAtMs == now)
      let (header, claims) = try verifiedJWS(fresh.compactJws, key: publicKey)
      #expect(header["alg"]?.stringValue == "ES256" && header["kid"]?.stringValue == "2X9R4HXF34")
      #expect(claims["aud"]?.stringValue == "introductory-offer-eligibility")
      #expect(claims["iss"]?.stringValue == testIssuerID && claims["bid"]?.stringValue == "com.example.app")
      #expect(claims["nonce"]?.stringValue == fresh.nonce)
      #expect(claims["productId"]?.stringValue == "premium.monthly")
      #expect(claims["allowIntroductoryOffer"]?.boolValue == true)
      #expect(claims["transactionId"]?.stringValue == "704289572311575926")
      #expect(claims["iat"]?.int64Value == now / 1000)
      // A lapsed subscriber who never had an intro offer (the default policy): the transaction id
      // defaults to the stored one.
      let lapsed = try await h.call(
        Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, intro(app, user: "lapsed"), key: read)
      #expect(lapsed.reason == .lapsedNoIntroUsed)
      #expect(try verifiedJWS(lapsed.compactJws, key: publicKey).claims["transactionId"]?.stringValue == "l1")
    }
  }

  @Test(
    "an ineligible user is FAILED_PRECONDITION with the CheckEligibility reason in an ErrorInfo",
    arguments: [
      ("promo", "new", "premium.monthly", Substatus_V1_EligibilityReason.neverSubscribed),
      ("promo", "new", "pro.monthly", .neverSubscribed),
      ("intro", "active", "premium.monthly", .activeSubscription),
      ("intro", "trial-used", "premium.monthly", .introAlreadyUsed),
      ("intro", "trial-used", "premium.yearly", .introAlreadyUsed),
      ("intro", "retry", "premium.monthly", .inBillingRetry),
      ("intro", "grace", "premium.monthly", .inGracePeriod),
      ("intro", "refunded", "premium.monthly", .refundedInGroup),
      ("intro", "lapsed", "premium.monthly", .lapsedSubscriber),
      ("intro", "active", "premium.weekly", .noIntroOffer),
    ])
  func ineligible(kind: String, user: String, product: String, reason: Substatus_V1_EligibilityReason) async throws {
    try await withService { h in
      let (admin, read, app, _) = try await setUp(h)
      var policy = Substatus_V1_SetPolicyRequest()
      policy.appID = app
      policy.policy = Substatus_V1_EligibilityPolicy()
      policy.policy?.refundsBlockIntro = true
      policy.policy?.lapsedSubscribersGetIntro = false
      policy.updateMask = ["refunds_block_intro", "lapsed_subscribers_get_intro"]
      _ = try await h.call(Substatus_V1_AdminService.setPolicy, policy, key: admin)
      // CheckEligibility gives the same answer.
      var check = Substatus_V1_CheckEligibilityRequest()
      check.appID = app
      var query = Substatus_V1_EligibilityQuery()
      query.userID = user
      query.productIDs = [product]
      check.queries = [query]
      let answer = try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: read).users[0].products[0]
      let offer = kind == "promo" ? answer.promotional : answer.introductory
      #expect(offer?.eligible == false && offer?.reason == reason)

      let error = await expectStatus(.failedPrecondition) {
        if kind == "promo" {
          let offerID = product == "pro.monthly" ? "pro.retain" : "premium.winback"
          _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, promo(app, user: user, product: product, offer: offerID), key: read)
        } else {
          _ = try await h.call(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, intro(app, user: user, product: product, transaction: "1"), key: read)
        }
      }
      let info = try #require(try errorInfo(error))
      #expect(info.reason == reason.protoName)
      #expect(info.domain == "substatus.v1")
      #expect(error?.message.contains(reason.protoName ?? "?") == true)
    }
  }

  @Test("bad arguments are INVALID_ARGUMENT naming the field")
  func invalidArguments() async throws {
    try await withService { h in
      let (_, read, app, _) = try await setUp(h)
      let cases: [(String, Substatus_V1_SignPromotionalOfferRequest)] = [
        ("user_id", promo(app, user: "")),
        ("product_id", promo(app, user: "active", product: "")),
        ("product_id", promo(app, user: "active", product: "nope")),
        ("product_id", promo(app, user: "active", product: "lifetime")),
        ("product_id", promo(app, user: "active", product: "pass.30days")),
        ("offer_id", promo(app, user: "active", offer: "")),
        ("offer_id", promo(app, user: "active", offer: "pro.retain")),
        ("app_account_token", promo(app, user: "active", token: "user-42")),
        ("app_account_token", promo(app, user: "active", token: "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEEE")),
        ("nonce", promo(app, user: "active", nonce: "not-a-uuid")),
        ("nonce", promo(app, user: "active", nonce: "0f0e0d0c0b0a-4908-8706-0504030201000")),
      ]
      for (field, request) in cases {
        let error = await expectStatus(.invalidArgument, field) {
          _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, request, key: read)
        }
        #expect(try violatedField(error) == field, "\(request)")
      }
      var badEnvironment = promo(app, user: "active")
      badEnvironment.environment = Substatus_V1_Environment(rawValue: 9)
      #expect(try violatedField(await expectStatus(.invalidArgument) {
        _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, badEnvironment, key: read)
      }) == "environment")
      let introCases: [(String, Substatus_V1_SignIntroductoryOfferEligibilityRequest)] = [
        ("user_id", intro(app, user: "")),
        ("product_id", intro(app, user: "new", product: "coins.100")),
        ("nonce", intro(app, user: "new", nonce: "x")),
        // A new customer without a stored transaction must pass one.
        ("transaction_id", intro(app, user: "new")),
      ]
      for (field, request) in introCases {
        let error = await expectStatus(.invalidArgument, field) {
          _ = try await h.call(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, request, key: read)
        }
        #expect(try violatedField(error) == field, "\(request)")
      }
    }
  }

  @Test("without an In-App Purchase key both are FAILED_PRECONDITION; unknown and foreign apps NOT_FOUND")
  func noKeyAndAccess() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      try await seedUsers(h, admin: admin, app: app)
      let promoError = await expectStatus(.failedPrecondition) {
        _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, promo(app, user: "active"), key: admin)
      }
      #expect(promoError?.message.contains("In-App Purchase key") == true)
      #expect(try errorInfo(promoError) == nil)
      await expectStatus(.failedPrecondition) {
        _ = try await h.call(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, intro(app, user: "new", transaction: "1"), key: admin)
      }
      await expectStatus(.notFound) {
        _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, promo("app_none", user: "active"), key: admin)
      }
      let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.example.other")
      try await h.setInAppPurchaseKey(app, key: admin)
      await expectStatus(.notFound) {
        _ = try await h.call(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, intro(app, user: "new", transaction: "1"), key: otherAdmin)
      }
      await expectStatus(.unauthenticated) {
        _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, promo(app, user: "active"), key: nil)
      }
    }
  }

  @Test("the environment decides whose purchases count")
  func environments() async throws {
    try await withService { h in
      let (admin, read, app, _) = try await setUp(h)
      try await seedUsers(h, admin: admin, app: app, environment: .sandbox)
      var request = promo(app, user: "lapsed")
      request.environment = .sandbox
      #expect(try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, request, key: read).reason == .lapsedSubscriber)
      var sandboxOnly = Substatus_V1_ImportTransactionsRequest()
      sandboxOnly.appID = app
      sandboxOnly.userID = "sandbox-only"
      var t = transaction("s1", purchasedDaysAgo: 5, expiresInDays: 25, now: h.world.now.withLock { $0 })
      t.environment = .sandbox
      sandboxOnly.transactions = [t]
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, sandboxOnly, key: admin)
      var production = promo(app, user: "sandbox-only")
      production.environment = .production
      await expectStatus(.failedPrecondition) {
        _ = try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, production, key: read)
      }
      production.environment = .sandbox
      #expect(try await h.call(Substatus_V1_EligibilityService.signPromotionalOffer, production, key: read).reason == .existingSubscriber)
    }
  }
}
