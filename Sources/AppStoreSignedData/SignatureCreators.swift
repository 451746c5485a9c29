// What the server signs for Apple: the App Store Server API bearer token and the offer signatures
// the app passes to StoreKit. Every function is pure: time and nonces are passed in.
//
// Claim names and values follow apple/app-store-server-library-swift:
// - AppStoreServerAPIClient.swift `generateToken()`: header {typ: JWT, kid}, claims exp (5 minutes),
//   iss, bid, aud "appstoreconnect-v1", iat.
// - PromotionalOfferSignatureCreator.swift `createSignature(...)`: the V1 string
//   bundleId⁣keyId⁣productId⁣offerId⁣lowercase(applicationUsername)⁣lowercase(nonce)⁣timestamp
//   (U+2063 INVISIBLE SEPARATOR), ECDSA P-256 SHA-256, DER, Base64.
// - JWSSignatureCreator.swift: header {typ: JWT, kid}, ES256; base claims nonce, iss, bid, aud, iat;
//   PromotionalOfferV2SignatureCreator adds productId, offerIdentifier, transactionId (optional) with
//   aud "promotional-offer"; IntroductoryOfferEligibilitySignatureCreator adds productId,
//   allowIntroductoryOffer, transactionId (required) with aud "introductory-offer-eligibility".
// Apple: https://developer.apple.com/documentation/storekit/generating-jws-to-sign-app-store-requests
import SubstatusJSON

/// The bearer token of App Store Server API requests: an ES256 JWT signed with an In-App Purchase key.
///
/// ```swift
/// let token = try AppStoreServerAPIToken.make(
///   key: key, keyId: "2X9R4HXF34", issuerId: "57246542-96fe-1a63-e053-0824d011072a",
///   bundleId: "com.example", issuedAt: nowMs)
/// request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
/// ```
public enum AppStoreServerAPIToken {
  /// The audience of App Store Server API tokens.
  public static let audience = "appstoreconnect-v1"

  /// A signed token.
  /// - Parameters:
  ///   - key: the In-App Purchase key (`.p8`).
  ///   - keyId: its key id (`kid`).
  ///   - issuerId: the issuer id from App Store Connect (`iss`).
  ///   - bundleId: the app's bundle id (`bid`).
  ///   - issuedAt: the current time in milliseconds since 1970; `iat` is its whole seconds.
  ///   - lifetime: how long the token is valid (`exp` = `iat` + lifetime, in whole seconds); Apple's
  ///     library uses 5 minutes, Apple refuses tokens living more than 60 minutes.
  /// - Throws: `AppStoreCryptoError` for a lifetime outside 1 s…60 min, or if signing fails.
  public static func make(
    key: ES256PrivateKey, keyId: String, issuerId: String, bundleId: String, issuedAt: Int64,
    lifetime: Duration = .seconds(300)
  ) throws(AppStoreCryptoError) -> String {
    let seconds = lifetime.components.seconds
    guard seconds >= 1, seconds <= 3600 else {
      throw AppStoreCryptoError("an App Store Server API token lives 1 second to 60 minutes")
    }
    let iat = floorSeconds(issuedAt)
    let claims: JSONValue = .object([
      "iss": .string(issuerId), "iat": .integer(iat), "exp": .integer(iat + seconds),
      "aud": .string(audience),
      "bid": .string(bundleId),
    ])
    return try JWS.sign(header: jwtHeader(keyId: keyId), claims: claims, key: key)
  }
}

/// Promotional offer signatures, for StoreKit's `Product.PurchaseOption.promotionalOffer` (V2, a
/// compact JWS) and the original `SKPaymentDiscount` / `promotionalOffer(offerID:keyID:nonce:signature:timestamp:)` (V1).
public enum PromotionalOfferSignature {
  /// The audience of V2 promotional offer signatures.
  public static let audience = "promotional-offer"

  /// The V1 signature: Base64 of the DER ECDSA-SHA256 signature of
  /// `bundleId⁣keyId⁣productId⁣offerId⁣appAccountToken⁣nonce⁣timestamp` joined by U+2063, with
  /// `appAccountToken` and `nonce` lowercased.
  /// - Parameters:
  ///   - key: the subscription offer key (`.p8`).
  ///   - keyId: its key id.
  ///   - bundleId: the app's bundle id.
  ///   - productId: the subscription's product id.
  ///   - offerId: the promotional offer's identifier.
  ///   - appAccountToken: the `applicationUsername` / app account token; may be empty.
  ///   - nonce: a fresh UUID for this signature (any case).
  ///   - timestampMs: the current time in milliseconds; the offer stays valid 24 hours.
  /// - Throws: `AppStoreCryptoError` when `nonce` is not a UUID, or if signing fails.
  public static func v1(
    key: ES256PrivateKey, keyId: String, bundleId: String, productId: String, offerId: String,
    appAccountToken: String, nonce: String, timestampMs: Int64
  ) throws(AppStoreCryptoError) -> String {
    guard isUUID(nonce) else { throw AppStoreCryptoError("the nonce must be a UUID") }
    let message = [
      bundleId, keyId, productId, offerId, appAccountToken.lowercased(), nonce.lowercased(),
      String(timestampMs),
    ].joined(separator: "\u{2063}")
    return Base64Codec.encodeStandard(try key.derSignature(for: Array(message.utf8)))
  }

  /// The V2 signature: a compact JWS (header `{typ: JWT, alg: ES256, kid}`) with claims `nonce`,
  /// `iss`, `bid`, `aud` = "promotional-offer", `iat`, `productId`, `offerIdentifier`, and
  /// `transactionId` when given.
  /// - Parameters:
  ///   - key: the In-App Purchase key (`.p8`).
  ///   - keyId: its key id (`kid`).
  ///   - issuerId: the issuer id (`iss`).
  ///   - bundleId: the app's bundle id (`bid`).
  ///   - productId: the subscription's product id.
  ///   - offerId: the promotional offer's identifier (`offerIdentifier`).
  ///   - transactionId: any transaction id of the customer (the appTransactionId works too);
  ///     optional but recommended by Apple.
  ///   - nonce: a fresh unique value (Apple's library uses a UUID).
  ///   - issuedAt: the current time in milliseconds; `iat` is its whole seconds.
  /// - Throws: `AppStoreCryptoError` if signing fails.
  public static func v2(
    key: ES256PrivateKey, keyId: String, issuerId: String, bundleId: String, productId: String,
    offerId: String,
    transactionId: String?, nonce: String, issuedAt: Int64
  ) throws(AppStoreCryptoError) -> String {
    var claims = baseClaims(
      nonce: nonce, issuerId: issuerId, bundleId: bundleId, audience: audience, issuedAt: issuedAt)
    claims.append("productId", .string(productId))
    claims.append("offerIdentifier", .string(offerId))
    if let transactionId { claims.append("transactionId", .string(transactionId)) }
    return try JWS.sign(header: jwtHeader(keyId: keyId), claims: .object(claims), key: key)
  }
}

/// Introductory offer eligibility signatures, for StoreKit's
/// `Product.PurchaseOption.introductoryOfferEligibility(compactJWS:)`: the server tells StoreKit
/// whether the customer may have the introductory offer.
public enum IntroductoryOfferEligibilitySignature {
  /// The audience of introductory offer eligibility signatures.
  public static let audience = "introductory-offer-eligibility"

  /// A compact JWS (header `{typ: JWT, alg: ES256, kid}`) with claims `nonce`, `iss`, `bid`, `aud` =
  /// "introductory-offer-eligibility", `iat`, `productId`, `allowIntroductoryOffer`, `transactionId`.
  /// - Parameters:
  ///   - key: the In-App Purchase key (`.p8`).
  ///   - keyId: its key id (`kid`).
  ///   - issuerId: the issuer id (`iss`).
  ///   - bundleId: the app's bundle id (`bid`).
  ///   - productId: the subscription's product id.
  ///   - allowIntroductoryOffer: whether the customer may redeem the introductory offer.
  ///   - transactionId: any transaction id of the customer (the appTransactionId works too).
  ///   - nonce: a fresh unique value (Apple's library uses a UUID).
  ///   - issuedAt: the current time in milliseconds; `iat` is its whole seconds.
  /// - Throws: `AppStoreCryptoError` if signing fails.
  public static func make(
    key: ES256PrivateKey, keyId: String, issuerId: String, bundleId: String, productId: String,
    allowIntroductoryOffer: Bool, transactionId: String, nonce: String, issuedAt: Int64
  ) throws(AppStoreCryptoError) -> String {
    var claims = baseClaims(
      nonce: nonce, issuerId: issuerId, bundleId: bundleId, audience: audience, issuedAt: issuedAt)
    claims.append("productId", .string(productId))
    claims.append("allowIntroductoryOffer", .bool(allowIntroductoryOffer))
    claims.append("transactionId", .string(transactionId))
    return try JWS.sign(header: jwtHeader(keyId: keyId), claims: .object(claims), key: key)
  }
}

/// `{"typ":"JWT","alg":"ES256","kid":…}`.
private func jwtHeader(keyId: String) -> JSONValue {
  .object(["typ": .string("JWT"), "alg": .string("ES256"), "kid": .string(keyId)])
}

/// The claims every App Store request signature carries (JWSSignatureCreator's BasePayload).
private func baseClaims(
  nonce: String, issuerId: String, bundleId: String, audience: String, issuedAt: Int64
)
  -> JSONObject
{
  [
    "nonce": .string(nonce), "iss": .string(issuerId), "bid": .string(bundleId),
    "aud": .string(audience),
    "iat": .integer(floorSeconds(issuedAt)),
  ]
}

/// Whole seconds of a millisecond time, rounded down.
private func floorSeconds(_ milliseconds: Int64) -> Int64 {
  milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
}

/// Whether `text` is a UUID in 8-4-4-4-12 hex form (either case).
private func isUUID(_ text: String) -> Bool {
  let bytes = Array(text.utf8)
  guard bytes.count == 36 else { return false }
  for (index, byte) in bytes.enumerated() {
    if [8, 13, 18, 23].contains(index) {
      guard byte == UInt8(ascii: "-") else { return false }
    } else {
      let isHex =
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
        || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
      guard isHex else { return false }
    }
  }
  return true
}
