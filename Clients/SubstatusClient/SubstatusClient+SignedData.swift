public import RPCCore
public import SubstatusWire
import SubstatusServiceAPI

// MARK: - In-App Purchase key (ADMIN key) and offer signatures (READ, INGEST or ADMIN key)

extension SubstatusClient {
  /// Sets the app's In-App Purchase key from App Store Connect
  /// (`AdminService.SetInAppPurchaseKey`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// The private key is write-only: the app that comes back shows only the key id, the issuer id
  /// and the public key with its fingerprint. Never log the private key.
  ///
  /// ```swift
  /// let p8 = try String(contentsOfFile: "SubscriptionKey_2X9R4HXF34.p8", encoding: .utf8)
  /// let app = try await admin.setInAppPurchaseKey(
  ///   appID: app, issuerID: "57246542-96fe-1a63-e053-0824d011072a", keyID: "2X9R4HXF34",
  ///   privateKeyPEM: p8)
  /// print(app.inAppPurchaseKey?.publicKeyFingerprint ?? "")
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - issuerID: The App Store Connect team's issuer id (a UUID).
  ///   - keyID: The key's id: 10 uppercase letters and digits.
  ///   - privateKeyPEM: The `.p8` file's contents (PKCS#8 PEM of a P-256 key).
  ///   - options: Deadline and metadata.
  /// - Returns: The app, with `inAppPurchaseKey` set.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `issuer_id`, `key_id` or
  ///   `private_key_pem`).
  public func setInAppPurchaseKey(
    appID: String, issuerID: String, keyID: String, privateKeyPEM: String,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_App {
    var request = Substatus_V1_SetInAppPurchaseKeyRequest()
    request.appID = appID
    request.issuerID = issuerID
    request.keyID = keyID
    request.privateKeyPem = privateKeyPEM
    let response = try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).setInAppPurchaseKey(request)
    return response.app ?? Substatus_V1_App()
  }

  /// Signs a promotional offer for one user and product, when the user is eligible for it now
  /// (`EligibilityService.SignPromotionalOffer`). Idempotent (a retry signs again, with a new nonce
  /// unless one was given).
  ///
  /// ```swift
  /// let offer = try await client.signPromotionalOffer(
  ///   appID: app, userID: "user-42", productID: "pro.monthly", offerID: "winback")
  /// // StoreKit 2: .promotionalOffer(offerID, compactJWS: offer.compactJws)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - productID: The auto-renewable product.
  ///   - offerID: One of the product's promotional offer ids.
  ///   - appAccountToken: The purchase's app account token (a UUID); empty: none.
  ///   - nonce: A UUID; empty: the server makes one.
  ///   - transactionID: A transaction id of the user for the V2 JWS; empty: the server's choice.
  ///   - environment: Whose purchases decide eligibility; `.unspecified` means production.
  ///   - options: Deadline and metadata.
  /// - Returns: The V1 signature with its nonce and timestamp, and the V2 compact JWS.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming the field;
  ///   `FAILED_PRECONDITION` without a key or when the user is not eligible, with an `ErrorInfo`).
  public func signPromotionalOffer(
    appID: String, userID: String, productID: String, offerID: String,
    appAccountToken: String = "", nonce: String = "", transactionID: String = "",
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SignPromotionalOfferResponse {
    var request = Substatus_V1_SignPromotionalOfferRequest()
    request.appID = appID
    request.userID = userID
    request.productID = productID
    request.offerID = offerID
    request.appAccountToken = appAccountToken
    request.nonce = nonce
    request.transactionID = transactionID
    request.environment = environment
    return try await service(
      Substatus_V1_EligibilityService.Client.self, options: options
    ).signPromotionalOffer(request)
  }

  /// Signs an introductory-offer eligibility JWS for one user and product, when the user is
  /// eligible for the introductory offer now (`EligibilityService.SignIntroductoryOfferEligibility`).
  /// Idempotent.
  ///
  /// ```swift
  /// let intro = try await client.signIntroductoryOfferEligibility(
  ///   appID: app, userID: "user-42", productID: "pro.monthly")
  /// // StoreKit 2: .introductoryOfferEligibility(compactJWS: intro.compactJws)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - productID: The auto-renewable product.
  ///   - transactionID: A transaction id of the user (for a new customer, StoreKit's
  ///     `AppTransaction.appTransactionID`); empty: the user's most recent stored one.
  ///   - nonce: A UUID; empty: the server makes one.
  ///   - environment: Whose purchases decide eligibility; `.unspecified` means production.
  ///   - options: Deadline and metadata.
  /// - Returns: The compact JWS with its nonce and issue time.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming the field;
  ///   `FAILED_PRECONDITION` without a key or when the user is not eligible, with an `ErrorInfo`).
  public func signIntroductoryOfferEligibility(
    appID: String, userID: String, productID: String, transactionID: String = "",
    nonce: String = "", environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SignIntroductoryOfferEligibilityResponse {
    var request = Substatus_V1_SignIntroductoryOfferEligibilityRequest()
    request.appID = appID
    request.userID = userID
    request.productID = productID
    request.transactionID = transactionID
    request.nonce = nonce
    request.environment = environment
    return try await service(
      Substatus_V1_EligibilityService.Client.self, options: options
    ).signIntroductoryOfferEligibility(request)
  }
}
