import SubstatusJSON
import Testing

@testable import AppStoreSignedData

@Suite("Signature creators (checked by pyca/cryptography)")
struct SignatureCreatorTests {
  let key: ES256PrivateKey
  let publicKeyPEM: String
  /// 2026-11-30T01:00:00.123Z.
  let now: Int64 = 1_795_999_200_123
  let issuerId = "57246542-96fe-1a63-e053-0824d011072a"
  let bundleId = "com.example.substatus"

  init() throws {
    key = try ES256PrivateKey(pkcs8PEM: fixture("p256-key.p8"))
    publicKeyPEM = key.publicKey.pem
  }

  func jwsCheck(_ jws: String) -> JSONValue {
    .object(["kind": .string("jws"), "publicKeyPEM": .string(publicKeyPEM), "jws": .string(jws)])
  }

  func header(_ keyId: String) -> JSONValue {
    .object(["typ": .string("JWT"), "alg": .string("ES256"), "kid": .string(keyId)])
  }

  @Test(
    "the App Store Server API token, V2 promotional offer and intro eligibility JWS verify with exact claims"
  )
  func jwsSignatures() async throws {
    let token = try AppStoreServerAPIToken.make(
      key: key, keyId: "2X9R4HXF34", issuerId: issuerId, bundleId: bundleId, issuedAt: now)
    let promo = try PromotionalOfferSignature.v2(
      key: key, keyId: "KEY2", issuerId: issuerId, bundleId: bundleId,
      productId: "com.example.monthly",
      offerId: "WINBACK50", transactionId: "2000000847061981",
      nonce: "9D2E0C67-8F4F-4A9A-9F0B-0D6A0C1B2E3F",
      issuedAt: now)
    let promoWithoutTransaction = try PromotionalOfferSignature.v2(
      key: key, keyId: "KEY2", issuerId: issuerId, bundleId: bundleId,
      productId: "com.example.monthly",
      offerId: "WINBACK50", transactionId: nil, nonce: "n-1", issuedAt: now)
    let intro = try IntroductoryOfferEligibilitySignature.make(
      key: key, keyId: "KEY3", issuerId: issuerId, bundleId: bundleId,
      productId: "com.example.yearly",
      allowIntroductoryOffer: false, transactionId: "2000000000000001", nonce: "n-2", issuedAt: now)
    let results = try await pythonChecks(
      [token, promo, promoWithoutTransaction, intro].map(jwsCheck))
    for result in results { #expect(result["ok"] == .bool(true), "\(result.serialized())") }

    let iat = JSONValue.integer(now / 1000)
    #expect(results[0]["header"] == header("2X9R4HXF34"))
    #expect(
      results[0]["payload"]
        == .object([
          "iss": .string(issuerId), "iat": iat, "exp": .integer(now / 1000 + 300),
          "aud": .string("appstoreconnect-v1"), "bid": .string(bundleId),
        ]))
    #expect(results[1]["header"] == header("KEY2"))
    #expect(
      results[1]["payload"]
        == .object([
          "nonce": .string("9D2E0C67-8F4F-4A9A-9F0B-0D6A0C1B2E3F"), "iss": .string(issuerId),
          "bid": .string(bundleId),
          "aud": .string("promotional-offer"), "iat": iat,
          "productId": .string("com.example.monthly"),
          "offerIdentifier": .string("WINBACK50"), "transactionId": .string("2000000847061981"),
        ]))
    #expect(results[2]["payload"]?["transactionId"] == nil)
    #expect(results[2]["payload"]?["offerIdentifier"] == .string("WINBACK50"))
    #expect(results[3]["header"] == header("KEY3"))
    #expect(
      results[3]["payload"]
        == .object([
          "nonce": .string("n-2"), "iss": .string(issuerId), "bid": .string(bundleId),
          "aud": .string("introductory-offer-eligibility"), "iat": iat,
          "productId": .string("com.example.yearly"),
          "allowIntroductoryOffer": .bool(false), "transactionId": .string("2000000000000001"),
        ]))
  }

  @Test("the V1 promotional offer signature verifies over the string Python builds itself")
  func v1Signature() async throws {
    let fields: JSONObject = [
      "bundleId": .string(bundleId), "keyId": .string("KEY1"),
      "productId": .string("com.example.monthly"),
      "offerId": .string("PROMO1"),
      "appAccountToken": .string("0D6A0C1B-2E3F-4A9A-9F0B-9D2E0C678F4F"),
      "nonce": .string("9D2E0C67-8F4F-4A9A-9F0B-0D6A0C1B2E3F"), "timestamp": .integer(now),
    ]
    let signature = try PromotionalOfferSignature.v1(
      key: key, keyId: "KEY1", bundleId: bundleId, productId: "com.example.monthly",
      offerId: "PROMO1",
      appAccountToken: "0D6A0C1B-2E3F-4A9A-9F0B-9D2E0C678F4F",
      nonce: "9D2E0C67-8F4F-4A9A-9F0B-0D6A0C1B2E3F",
      timestampMs: now)
    let empty = try PromotionalOfferSignature.v1(
      key: key, keyId: "KEY1", bundleId: bundleId, productId: "com.example.monthly",
      offerId: "PROMO1",
      appAccountToken: "", nonce: "9d2e0c67-8f4f-4a9a-9f0b-0d6a0c1b2e3f", timestampMs: now)
    func check(_ fields: JSONObject, _ signature: String) -> JSONValue {
      .object([
        "kind": .string("promo_v1"), "publicKeyPEM": .string(publicKeyPEM),
        "fields": .object(fields),
        "signatureB64": .string(signature),
      ])
    }
    var emptyFields = fields
    emptyFields["appAccountToken"] = .string("")
    emptyFields["nonce"] = .string("9d2e0c67-8f4f-4a9a-9f0b-0d6a0c1b2e3f")
    var wrongTimestamp = fields
    wrongTimestamp["timestamp"] = .integer(now + 1)
    let results = try await pythonChecks([
      check(fields, signature), check(emptyFields, empty), check(wrongTimestamp, signature),
    ])
    #expect(results[0]["ok"] == .bool(true), "\(results[0].serialized())")
    #expect(results[1]["ok"] == .bool(true), "\(results[1].serialized())")
    #expect(results[2]["ok"] == .bool(false))
  }

  @Test(
    "bad inputs are refused",
    arguments: [
      "", "not-a-uuid", "9D2E0C67-8F4F-4A9A-9F0B-0D6A0C1B2E3",
      "9D2E0C67x8F4F-4A9A-9F0B-0D6A0C1B2E3F",
    ])
  func v1BadNonce(nonce: String) {
    #expect(throws: AppStoreCryptoError.self) {
      try PromotionalOfferSignature.v1(
        key: key, keyId: "K", bundleId: bundleId, productId: "p", offerId: "o", appAccountToken: "",
        nonce: nonce,
        timestampMs: now)
    }
  }

  @Test(
    "an API token lives 1 second to 60 minutes",
    arguments: [Duration.zero, .milliseconds(500), .seconds(3601)])
  func tokenLifetime(lifetime: Duration) {
    #expect(throws: AppStoreCryptoError.self) {
      try AppStoreServerAPIToken.make(
        key: key, keyId: "K", issuerId: issuerId, bundleId: bundleId, issuedAt: now,
        lifetime: lifetime)
    }
  }

  @Test("a JWS signed by Python verifies with ES256PublicKey")
  func pythonSignedJWS() async throws {
    let header = JSONValue.object(["alg": .string("ES256"), "kid": .string("PY")])
    let payload = JSONValue.object(["signedDate": .integer(now)])
    let results = try await pythonChecks([
      .object([
        "kind": .string("sign_jws"), "privateKeyPEM": .string(key.pkcs8PEM), "header": header,
        "payload": payload,
      ])
    ])
    let jws = try #require(results[0]["jws"]?.stringValue)
    let parsed = try JWS.CompactJWS(parsing: jws)
    #expect(parsed.header == header)
    #expect(key.publicKey.isValidSignature(parsed.signature, for: parsed.signingInput))
    #expect(
      !ES256PrivateKey.generate().publicKey.isValidSignature(
        parsed.signature, for: parsed.signingInput))
  }
}
