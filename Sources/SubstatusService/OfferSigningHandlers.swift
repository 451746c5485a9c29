import AppStoreSignedData
import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

// MARK: EligibilityService.SignPromotionalOffer and SignIntroductoryOfferEligibility
//
// Both answer only an eligible user: the user's history is evaluated by the same evaluator
// CheckEligibility uses (`evaluate(_:_:at:)` then `eligibility(for:)`), at the server's now, and
// a new customer whose Apple Account Apple answered is NEW_CUSTOMER_VERIFIED as there (rule 24,
// `verifyingNewCustomers`).

extension SubstatusService {
  public func signPromotionalOffer(_ request: Substatus_V1_SignPromotionalOfferRequest, _ context: ServerContext) async throws -> Substatus_V1_SignPromotionalOfferResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    let product = try subscriptionProduct(request.productID, cached)
    try requireID(request.offerID, "offer_id", limits: limits)
    guard product.promotionalOfferIds.contains(request.offerID) else {
      throw invalidArgument("offer_id", "\(ErrorText.quoted(request.offerID)) is not one of the promotional offers of \(ErrorText.quoted(product.productId))")
    }
    guard request.appAccountToken.isEmpty || isUUID(request.appAccountToken) else {
      throw invalidArgument("app_account_token", "must be a UUID or empty")
    }
    let (key, privateKey, nonce, now, history, answer) = try await signingContext(
      cached, userID: request.userID, productID: product.productId, nonce: request.nonce,
      transactionID: request.transactionID, environment: request.environment)
    guard answer.promotional.eligible else {
      throw notEligible(answer.promotional.reason, offer: "promotional offers", userID: request.userID, productID: product.productId)
    }
    let transactionID = request.transactionID.isEmpty ? history.transactions.last?.transactionId : request.transactionID
    var response = Substatus_V1_SignPromotionalOfferResponse()
    do {
      response.signature = try PromotionalOfferSignature.v1(
        key: privateKey, keyId: key.keyId, bundleId: cached.app.bundleId, productId: product.productId,
        offerId: request.offerID, appAccountToken: request.appAccountToken, nonce: nonce, timestampMs: now)
      response.compactJws = try PromotionalOfferSignature.v2(
        key: privateKey, keyId: key.keyId, issuerId: key.issuerId, bundleId: cached.app.bundleId,
        productId: product.productId, offerId: request.offerID, transactionId: transactionID, nonce: nonce, issuedAt: now)
    } catch {
      throw RPCError(code: .internal, message: "signing the promotional offer failed")
    }
    response.productID = product.productId
    response.offerID = request.offerID
    response.keyID = key.keyId
    response.nonce = nonce
    response.timestampMs = now
    response.reason = answer.promotional.reason.wire
    return response
  }

  public func signIntroductoryOfferEligibility(_ request: Substatus_V1_SignIntroductoryOfferEligibilityRequest, _ context: ServerContext) async throws -> Substatus_V1_SignIntroductoryOfferEligibilityResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    let product = try subscriptionProduct(request.productID, cached)
    let (key, privateKey, nonce, now, history, answer) = try await signingContext(
      cached, userID: request.userID, productID: product.productId, nonce: request.nonce,
      transactionID: request.transactionID, environment: request.environment)
    guard let transactionID = request.transactionID.isEmpty ? history.transactions.last?.transactionId : request.transactionID else {
      throw invalidArgument(
        "transaction_id", "no transaction is stored for the user: pass one (for a new customer, StoreKit's AppTransaction.appTransactionID)")
    }
    guard answer.introductory.eligible else {
      throw notEligible(answer.introductory.reason, offer: "the introductory offer", userID: request.userID, productID: product.productId)
    }
    var response = Substatus_V1_SignIntroductoryOfferEligibilityResponse()
    do {
      response.compactJws = try IntroductoryOfferEligibilitySignature.make(
        key: privateKey, keyId: key.keyId, issuerId: key.issuerId, bundleId: cached.app.bundleId,
        productId: product.productId, allowIntroductoryOffer: true, transactionId: transactionID, nonce: nonce, issuedAt: now)
    } catch {
      throw RPCError(code: .internal, message: "signing the introductory offer eligibility failed")
    }
    response.productID = product.productId
    response.keyID = key.keyId
    response.nonce = nonce
    response.issuedAtMs = now
    response.reason = answer.introductory.reason.wire
    return response
  }

  /// The catalog's auto-renewable product `productID`; INVALID_ARGUMENT naming `product_id`
  /// otherwise.
  private func subscriptionProduct(_ productID: String, _ cached: CachedApp) throws(RPCError) -> Product {
    try requireID(productID, "product_id", limits: limits)
    guard let product = cached.catalog[productID] else {
      throw invalidArgument("product_id", "\(ErrorText.quoted(productID)) is not in the app's catalog")
    }
    guard product.type == .autoRenewable else {
      throw invalidArgument("product_id", "\(ErrorText.quoted(productID)) is not an auto-renewable subscription")
    }
    return product
  }

  /// The nonce to sign: the caller's UUID in lowercase, or a random (version 4) UUID.
  private func nonce(_ given: String) throws(RPCError) -> String {
    if !given.isEmpty {
      guard isUUID(given) else { throw invalidArgument("nonce", "must be a UUID or empty") }
      return given.lowercased()
    }
    var bytes = environment.randomBytes(16)
    bytes[6] = bytes[6] & 0x0F | 0x40
    bytes[8] = bytes[8] & 0x3F | 0x80
    let hex = Array(Hex.encode(bytes))
    return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(hex[$0]) }.joined(separator: "-")
  }

  /// What both signing RPCs need once their own fields are checked: the nonce, the app's key,
  /// the signing time, and the user's history with the product's answer at that time, as
  /// CheckEligibility gives it.
  private func signingContext(
    _ cached: CachedApp, userID: String, productID: String, nonce given: String, transactionID: String,
    environment wire: Substatus_V1_Environment
  ) async throws(RPCError) -> (
    key: InAppPurchaseKey, privateKey: ES256PrivateKey, nonce: String, now: Int64, history: UserHistory,
    answer: ProductEligibility
  ) {
    let nonce = try self.nonce(given)
    if !transactionID.isEmpty { try requireID(transactionID, "transaction_id", limits: limits) }
    let environment = try SubscriptionDomain.Environment(wire: wire)
    let (key, privateKey) = try await signingKey(cached)
    let now = self.environment.now()
    let history = try await owning(
      try await stored { () throws(StoreError) in
        try await purchaseStore.history(of: UserKey(appId: cached.app.appId, environment: environment, userId: userID))
      }, cached
    ).owned(at: now)
    let answers = try await verifyingNewCustomers(
      [userID: evaluate(history, cached, at: now).eligibilityAnswers], environment: environment, cached, at: now)
    guard let answer = answers[userID]?.eligibility(for: [productID]).first else {
      throw RPCError(code: .internal, message: "the evaluator gave no answer for \(ErrorText.quoted(productID))")
    }
    return (key, privateKey, nonce, now, history, answer)
  }

  /// FAILED_PRECONDITION with an ErrorInfo whose reason is the EligibilityReason's name.
  private func notEligible(_ reason: EligibilityReason, offer: String, userID: String, productID: String) -> RPCError {
    let name = reason.wire.protoName ?? "ELIGIBILITY_REASON_UNSPECIFIED"
    var info = Google_Rpc_ErrorInfo()
    info.reason = name
    info.domain = "substatus.v1"
    info.metadata = ["productId": productID]
    var status = Google_Rpc_Status()
    status.code = Int32(RPCError.Code.failedPrecondition.rawValue)
    status.message = "user \(ErrorText.quoted(userID)) is not eligible for \(offer) of \(ErrorText.quoted(productID)): \(name)"
    status.details = [Google_Protobuf_Any(packing: info)]
    var error = RPCError(code: .failedPrecondition, message: status.message)
    error.metadata.addBinary(status.serializedBytes(), forKey: "grpc-status-details-bin")
    return error
  }
}
