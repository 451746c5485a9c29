import SubstatusJSON

/// `notification_type` of an App Store Server Notification V1.
public enum NotificationTypeV1: String, Sendable, Hashable, Codable, CaseIterable {
  /// First purchase of a subscription.
  case initialBuy = "INITIAL_BUY"
  /// Apple Support cancelled and refunded a subscription (older docs: or the user upgraded).
  case cancel = "CANCEL"
  /// The user changed the renewal product.
  case didChangeRenewalPref = "DID_CHANGE_RENEWAL_PREF"
  /// The user turned auto-renew on or off.
  case didChangeRenewalStatus = "DID_CHANGE_RENEWAL_STATUS"
  /// A renewal failed because of a billing issue.
  case didFailToRenew = "DID_FAIL_TO_RENEW"
  /// An expired subscription recovered through billing retry.
  case didRecover = "DID_RECOVER"
  /// A subscription renewed.
  case didRenew = "DID_RENEW"
  /// The customer renewed interactively.
  case interactiveRenewal = "INTERACTIVE_RENEWAL"
  /// The customer consented to a price increase.
  case priceIncreaseConsent = "PRICE_INCREASE_CONSENT"
  /// The App Store refunded a purchase.
  case refund = "REFUND"
  /// Family Sharing access ended.
  case revoke = "REVOKE"
  /// A refund request needs consumption information.
  case consumptionRequest = "CONSUMPTION_REQUEST"
  /// Retired in 2021: use `DID_RECOVER`.
  case renewal = "RENEWAL"
}

/// An App Store Server Notification V1 body (`responseBodyV1`), read into the model.
///
/// ``password`` is the shared secret Apple echoes back: compare it (in constant time) with the
/// app's secret to authenticate the post. ``description`` never shows it.
public struct NotificationV1: Sendable, Hashable, CustomStringConvertible {
  /// Apple's `notification_type` value.
  public var rawNotificationType: String
  /// `password`: the app's shared secret, for authentication. Never log it.
  public var password: String?
  /// Apple's `environment` value (`PROD` or `Sandbox`).
  public var rawEnvironment: String?
  /// `unified_receipt.environment`.
  public var unifiedReceiptRawEnvironment: String?
  /// `unified_receipt.latest_receipt_info`, deduplicated, ordered by purchase date then id.
  /// For a `REFUND`, `REVOKE` or `CANCEL`, the transactions it revoked (the newest cancellation
  /// date of the body) carry the notification type, which classifies their revocation (rule 17).
  public var transactions: [Transaction]
  /// `unified_receipt.pending_renewal_info`, ordered by original transaction id.
  public var pendingRenewalInfo: [RenewalInfo]
  /// `unified_receipt.latest_receipt` (Base64).
  public var latestReceipt: String?
  /// `auto_renew_status` (`"true"`/`"false"` here).
  public var autoRenewStatus: Bool?
  /// `auto_renew_status_change_date_ms`.
  public var autoRenewStatusChangeDate: Int64?
  /// `auto_renew_product_id`.
  public var autoRenewProductId: String?
  /// `expiration_intent`.
  public var rawExpirationIntent: Int?
  /// `bid`: the bundle id.
  public var bid: String?
  /// `bvrs`: the bundle version.
  public var bvrs: String?

  /// The notification type; `nil` when this module does not know it (see ``rawNotificationType``).
  public var notificationType: NotificationTypeV1? { NotificationTypeV1(rawValue: rawNotificationType) }

  /// The environment (`PROD` reads as production); `nil` when absent or unknown.
  public var environment: Environment? {
    (rawEnvironment ?? unifiedReceiptRawEnvironment).flatMap(Environment.init(appleValue:))
  }

  /// Parses a V1 notification body (UTF-8 JSON).
  /// - Throws: ``AppleDataError``; a non-zero `unified_receipt.status` is `verifyReceiptStatus`.
  public init(parsing bytes: [UInt8]) throws(AppleDataError) {
    try self.init(json: try parseJSON(bytes))
  }

  /// Reads an already parsed V1 notification body.
  /// - Throws: ``AppleDataError`` as ``init(parsing:)``.
  public init(json: JSONValue) throws(AppleDataError) {
    let body = try AppleObject(json, path: "")
    rawNotificationType = try body.requiredString("notification_type")
    password = try body.string("password")
    rawEnvironment = try body.string("environment")
    autoRenewStatus = try body.bool("auto_renew_status")
    autoRenewStatusChangeDate = try body.date(
      ms: "auto_renew_status_change_date_ms", text: "auto_renew_status_change_date")
    autoRenewProductId = try body.string("auto_renew_product_id")
    rawExpirationIntent = try body.int("expiration_intent")
    bid = try body.string("bid")
    bvrs = try body.string("bvrs")
    transactions = []
    pendingRenewalInfo = []
    guard let unified = try body.object("unified_receipt") else {
      unifiedReceiptRawEnvironment = nil
      return
    }
    let receipt = try ReceiptReader(unified, statusKey: "status")
    unifiedReceiptRawEnvironment = receipt.rawEnvironment
    latestReceipt = try unified.string("latest_receipt")
    let environment = rawEnvironment.flatMap(Environment.init(appleValue:))?.rawValue
      ?? receipt.rawEnvironment
    var records: [Transaction] = []
    for element in try unified.objects("latest_receipt_info") {
      records.append(try Transaction(receiptElement: element, environment: environment, bundleId: bid))
    }
    // A V1 body names no transaction: the ones a REFUND, REVOKE or CANCEL revokes are those with
    // the body's newest cancellation date, and only they carry its type (rule 17); older
    // revocations in the same receipt keep their own classification.
    if ["REFUND", "REVOKE", "CANCEL"].contains(rawNotificationType),
      let newest = records.lazy.compactMap(\.revocationDate).max()
    {
      for i in records.indices where records[i].revocationDate == newest {
        records[i].notificationType = rawNotificationType
      }
    }
    transactions = Transaction.merged(records)
    var renewals: [RenewalInfo] = []
    for element in try unified.objects("pending_renewal_info") {
      renewals.append(try RenewalInfo(pendingRenewalElement: element, environment: environment))
    }
    pendingRenewalInfo = RenewalInfo.merged(renewals)
  }

  /// A summary without the password.
  public var description: String {
    "NotificationV1(\(rawNotificationType), environment: \(rawEnvironment ?? "-"), "
      + "\(transactions.count) transactions, \(pendingRenewalInfo.count) renewals, password: "
      + (password == nil ? "absent" : "<redacted>") + ")"
  }
}
