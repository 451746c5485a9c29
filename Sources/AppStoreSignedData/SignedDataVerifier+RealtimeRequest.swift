// Apple's Retention Messaging realtime request (the body Apple POSTs to the app's "Get Retention
// Message" endpoint is `{"signedPayload": JWS}`, RealtimeRequestBody), decoded as
// apple/app-store-server-library-python's `SignedDataVerifier.verify_and_decode_realtime_request`
// does: chain and signature first, then the app's Apple id (in Production) and the environment.
// https://developer.apple.com/documentation/retentionmessaging/decodedrealtimerequestbody
import SubscriptionDomain
import SubstatusJSON

/// The decoded realtime request (Apple's `DecodedRealtimeRequestBody`).
public struct RealtimeRetentionRequest: Sendable, Hashable {
  /// The original transaction id of the customer's subscription.
  public var originalTransactionId: String
  /// The app's Apple id.
  public var appAppleId: Int64?
  /// The auto-renewable subscription the customer is looking at.
  public var productId: String
  /// The device's locale (`en-US`).
  public var userLocale: String?
  /// The UUID Apple gives each request.
  public var requestIdentifier: String
  /// When Apple signed it, in milliseconds since 1970.
  public var signedDate: Int64
  /// Apple's `environment` text (`Sandbox`, `Production`).
  public var rawEnvironment: String?

  /// Reads the payload's fields.
  /// - Throws: `malformed` naming a missing or mistyped required field.
  public init(payload: JSONValue) throws(SignedDataVerificationError) {
    func string(_ key: String) throws(SignedDataVerificationError) -> String {
      guard let value = payload[key]?.stringValue, !value.isEmpty else {
        throw .malformed("realtime request payload: \(key) is missing or not a string")
      }
      return value
    }
    originalTransactionId = try string("originalTransactionId")
    productId = try string("productId")
    requestIdentifier = try string("requestIdentifier")
    guard let signed = payload["signedDate"]?.int64Value else {
      throw .malformed("realtime request payload: signedDate is missing or not an integer")
    }
    signedDate = signed
    appAppleId = payload["appAppleId"]?.int64Value
    userLocale = payload["userLocale"]?.stringValue
    rawEnvironment = payload["environment"]?.stringValue
  }
}

extension SignedDataVerifier {
  /// Verifies a realtime request's `signedPayload` and decodes it.
  /// - Throws: ``SignedDataVerificationError``: those of ``verify(_:)``, then `wrongAppAppleId`
  ///   (Production: not this verifier's app), `wrongEnvironment` / `unsupportedEnvironment`.
  public func verifyAndDecodeRealtimeRequest(_ signedPayload: String) throws(SignedDataVerificationError)
    -> RealtimeRetentionRequest
  {
    try decodeRealtimeRequest(verified: verify(signedPayload))
  }

  /// Applies the app checks of ``verifyAndDecodeRealtimeRequest(_:)`` to data verified already.
  /// The request carries no bundle id: in Production its `appAppleId` must be this verifier's
  /// (as Apple's library checks); its environment must be this verifier's.
  /// - Throws: ``SignedDataVerificationError``.
  public func decodeRealtimeRequest(verified: VerifiedSignedData) throws(SignedDataVerificationError)
    -> RealtimeRetentionRequest
  {
    let request = try RealtimeRetentionRequest(payload: verified.payload)
    if environment == .production {
      guard let appAppleId, request.appAppleId == appAppleId else { throw .wrongAppAppleId }
    }
    try checkEnvironment(request.rawEnvironment)
    return request
  }
}
