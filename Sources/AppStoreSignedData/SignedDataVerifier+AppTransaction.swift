// The device's signed `AppTransaction` (docs/architecture.md rule 24), verified as Apple's
// SignedDataVerifier.verifyAndDecodeAppTransaction does
// (apple/app-store-server-library-swift `Sources/AppStoreServerLibrary/SignedDataVerifier.swift`):
// the chain and signature like every JWS, then the bundle id, in Production the app's Apple id,
// and the environment, which an app transaction names in `receiptType`
// (https://developer.apple.com/documentation/appstoreserverapi/jwsapptransactiondecodedpayload).
import SubscriptionDomain

extension SignedDataVerifier {
  /// Verifies a signed `AppTransaction` (StoreKit's `AppTransaction.shared` JWS, or the
  /// `signedAppTransactionInfo` of Get App Transaction Info) and decodes it.
  /// - Throws: ``SignedDataVerificationError``; after a valid signature `wrongBundleId`,
  ///   `wrongAppAppleId` (Production only), `wrongEnvironment` / `unsupportedEnvironment` (from
  ///   `receiptType`), `malformed` without an `appTransactionId`.
  public func verifyAndDecodeAppTransaction(_ signedAppTransaction: String)
    throws(SignedDataVerificationError) -> AppTransaction
  {
    try decodeAppTransaction(verified: verify(signedAppTransaction))
  }

  /// Applies the app checks of ``verifyAndDecodeAppTransaction(_:)`` to data verified already.
  /// - Throws: ``SignedDataVerificationError``.
  public func decodeAppTransaction(verified: VerifiedSignedData) throws(SignedDataVerificationError) -> AppTransaction {
    let appTransaction: AppTransaction
    do { appTransaction = try AppTransaction(jwsAppTransactionPayload: verified.payload) } catch {
      throw .malformed("app transaction payload: \(error)")
    }
    guard appTransaction.bundleId == bundleId else {
      throw .wrongBundleId(expected: bundleId, found: appTransaction.bundleId)
    }
    if environment == .production {
      guard let appAppleId, appTransaction.appAppleId == appAppleId else { throw .wrongAppAppleId }
    }
    guard let raw = appTransaction.rawReceiptType else {
      throw .wrongEnvironment(expected: environment.rawValue, found: nil)
    }
    guard let found = appTransaction.environment else { throw .unsupportedEnvironment(raw) }
    guard found == environment else { throw .wrongEnvironment(expected: environment.rawValue, found: raw) }
    return appTransaction
  }
}

extension VerifiedSignedData {
  /// The environment an app transaction names (`receiptType`), for picking the app's verifier
  /// before ``SignedDataVerifier/decodeAppTransaction(verified:)``; `nil` when it names none Apple
  /// signs.
  public var appTransactionEnvironment: Environment? {
    payload["receiptType"]?.stringValue.flatMap(Environment.init(appleValue:))
  }
}
