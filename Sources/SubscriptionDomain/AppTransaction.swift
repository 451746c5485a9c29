// The app download behind an app user: StoreKit's `AppTransaction`, signed by the App Store
// (docs/architecture.md rule 24). Apple's page:
// https://developer.apple.com/documentation/appstoreserverapi/jwsapptransactiondecodedpayload
// (apple/app-store-server-library-swift `Models/AppTransaction.swift`).
import SubstatusJSON

/// A decoded `JWSAppTransactionDecodedPayload`: one Apple Account's download of one app.
///
/// `appTransactionId` is "the unique identifier of the app download transaction", one per Apple
/// Account per app; the App Store Server API (1.20) answers Get Transaction History for it as for
/// any transaction id of the customer, so a server that knows it can fetch that account's whole
/// history, purchases made on other devices or never submitted included.
public struct AppTransaction: Sendable, Hashable, Codable {
  /// `appTransactionId`.
  public var appTransactionId: String
  /// `bundleId`.
  public var bundleId: String?
  /// `appAppleId` (absent in sandbox).
  public var appAppleId: Int64?
  /// `receiptType`: the environment that signed it (`Production`, `Sandbox`, ...), as Apple sent it.
  public var rawReceiptType: String?
  /// `originalPurchaseDate` (ms): when the Apple Account first got the app.
  public var originalPurchaseDate: Int64?
  /// `originalApplicationVersion`: the version (`CFBundleVersion` on iOS) first got.
  public var originalApplicationVersion: String?
  /// `applicationVersion`: the version the device runs.
  public var applicationVersion: String?
  /// `preorderDate` (ms), for a pre-order.
  public var preorderDate: Int64?
  /// `signedDate` (ms): when the App Store signed it.
  public var signedDate: Int64?

  /// An app transaction from its parts.
  public init(
    appTransactionId: String, bundleId: String? = nil, appAppleId: Int64? = nil, rawReceiptType: String? = nil,
    originalPurchaseDate: Int64? = nil, originalApplicationVersion: String? = nil, applicationVersion: String? = nil,
    preorderDate: Int64? = nil, signedDate: Int64? = nil
  ) {
    self.appTransactionId = appTransactionId
    self.bundleId = bundleId
    self.appAppleId = appAppleId
    self.rawReceiptType = rawReceiptType
    self.originalPurchaseDate = originalPurchaseDate
    self.originalApplicationVersion = originalApplicationVersion
    self.applicationVersion = applicationVersion
    self.preorderDate = preorderDate
    self.signedDate = signedDate
  }

  /// Reads an already parsed (and verified) `JWSAppTransactionDecodedPayload`.
  /// - Throws: ``AppleDataError`` naming the field; `appTransactionId` is required (an app
  ///   transaction signed before Apple added it names no Apple Account).
  public init(jwsAppTransactionPayload json: JSONValue) throws(AppleDataError) {
    let e = try AppleObject(json, path: "")
    self.init(appTransactionId: try e.requiredString("appTransactionId"))
    bundleId = try e.string("bundleId")
    appAppleId = try e.int64("appAppleId")
    rawReceiptType = try e.string("receiptType")
    originalPurchaseDate = try e.int64("originalPurchaseDate")
    originalApplicationVersion = try e.string("originalApplicationVersion")
    applicationVersion = try e.string("applicationVersion")
    preorderDate = try e.int64("preorderDate")
    signedDate = try e.int64("signedDate")
  }

  /// The environment that signed it; `nil` for any other than Production and Sandbox.
  public var environment: Environment? { rawReceiptType.flatMap(Environment.init(appleValue:)) }
}
