import SubstatusJSON

/// `notificationType` of an App Store Server Notification V2 (`NotificationTypeV2`).
public enum NotificationTypeV2: String, Sendable, Hashable, Codable, CaseIterable {
  /// First purchase or resubscription in a group (also first Family Sharing access).
  case subscribed = "SUBSCRIBED"
  /// The user changed the renewal product (upgrade immediate, downgrade at renewal).
  case didChangeRenewalPref = "DID_CHANGE_RENEWAL_PREF"
  /// Auto-renew was turned on or off.
  case didChangeRenewalStatus = "DID_CHANGE_RENEWAL_STATUS"
  /// A promotional offer or offer code was redeemed.
  case offerRedeemed = "OFFER_REDEEMED"
  /// The subscription renewed.
  case didRenew = "DID_RENEW"
  /// The subscription expired.
  case expired = "EXPIRED"
  /// A renewal failed for a billing issue (subtype `GRACE_PERIOD` when in grace).
  case didFailToRenew = "DID_FAIL_TO_RENEW"
  /// The billing grace period ended without renewal.
  case gracePeriodExpired = "GRACE_PERIOD_EXPIRED"
  /// A price increase was announced or accepted.
  case priceIncrease = "PRICE_INCREASE"
  /// The App Store refunded a transaction.
  case refund = "REFUND"
  /// A refund request was declined.
  case refundDeclined = "REFUND_DECLINED"
  /// A refund request needs consumption information.
  case consumptionRequest = "CONSUMPTION_REQUEST"
  /// One subscription's renewal date was extended.
  case renewalExtended = "RENEWAL_EXTENDED"
  /// Family Sharing access ended.
  case revoke = "REVOKE"
  /// A test notification.
  case test = "TEST"
  /// A mass renewal extension finished or failed.
  case renewalExtension = "RENEWAL_EXTENSION"
  /// A granted refund was reversed: restore the content.
  case refundReversed = "REFUND_REVERSED"
  /// External Purchase API token event.
  case externalPurchaseToken = "EXTERNAL_PURCHASE_TOKEN"
  /// A consumable, non-consumable or non-renewing purchase.
  case oneTimeCharge = "ONE_TIME_CHARGE"
  /// Advanced Commerce metadata update.
  case metadataUpdate = "METADATA_UPDATE"
  /// Advanced Commerce migration.
  case migration = "MIGRATION"
  /// Advanced Commerce price change.
  case priceChange = "PRICE_CHANGE"
  /// A parent withdrew consent for a child's app use.
  case rescindConsent = "RESCIND_CONSENT"
}

/// `subtype` of an App Store Server Notification V2.
public enum NotificationSubtypeV2: String, Sendable, Hashable, Codable, CaseIterable {
  /// First purchase in the group.
  case initialBuy = "INITIAL_BUY"
  /// Resubscription in the group.
  case resubscribe = "RESUBSCRIBE"
  /// Downgrade.
  case downgrade = "DOWNGRADE"
  /// Upgrade.
  case upgrade = "UPGRADE"
  /// Auto-renew enabled.
  case autoRenewEnabled = "AUTO_RENEW_ENABLED"
  /// Auto-renew disabled.
  case autoRenewDisabled = "AUTO_RENEW_DISABLED"
  /// Expired voluntarily.
  case voluntary = "VOLUNTARY"
  /// Expired after billing retry ended.
  case billingRetry = "BILLING_RETRY"
  /// Expired for a refused price increase.
  case priceIncrease = "PRICE_INCREASE"
  /// In the billing grace period.
  case gracePeriod = "GRACE_PERIOD"
  /// Price increase pending.
  case pending = "PENDING"
  /// Price increase accepted.
  case accepted = "ACCEPTED"
  /// Renewed after a billing failure.
  case billingRecovery = "BILLING_RECOVERY"
  /// Expired: the product was not for sale.
  case productNotForSale = "PRODUCT_NOT_FOR_SALE"
  /// Mass extension summary.
  case summary = "SUMMARY"
  /// Mass extension failure.
  case failure = "FAILURE"
  /// External purchase token unreported.
  case unreported = "UNREPORTED"
  /// External purchase token created.
  case created = "CREATED"
  /// External purchase token reminder.
  case activeTokenReminder = "ACTIVE_TOKEN_REMINDER"
}

/// Apple's own subscription status (`status` in notification data and subscription statuses).
public enum AppleSubscriptionStatus: Int, Sendable, Hashable, Codable, CaseIterable {
  /// Active.
  case active = 1
  /// Expired.
  case expired = 2
  /// In billing retry.
  case billingRetry = 3
  /// In the billing grace period.
  case billingGracePeriod = 4
  /// Refunded or revoked from Family Sharing.
  case revoked = 5
}

/// A decoded `ResponseBodyV2DecodedPayload` (the payload of a V2 notification's `signedPayload`,
/// whose signature another component verified).
public struct NotificationV2: Sendable, Hashable {
  /// Apple's `notificationType` value.
  public var rawNotificationType: String
  /// Apple's `subtype` value.
  public var rawSubtype: String?
  /// `notificationUUID`: deduplicate notifications by it.
  public var notificationUUID: String
  /// `version` (`2.0`).
  public var version: String?
  /// `signedDate`.
  public var signedDate: Int64?
  /// `data`, for notifications about a transaction.
  public var data: Data?
  /// `summary`, for mass renewal extensions, as received.
  public var summary: JSONValue?
  /// `appData`, for `RESCIND_CONSENT` (App Store Server Notifications 2.19:
  /// https://developer.apple.com/documentation/appstoreservernotifications/appdata).
  public var appData: AppData? = nil
  /// `externalPurchaseToken`, for `EXTERNAL_PURCHASE_TOKEN`
  /// (https://developer.apple.com/documentation/appstoreservernotifications/externalpurchasetoken).
  public var externalPurchaseToken: ExternalPurchaseToken? = nil

  /// The notification's `appData`: the app and the signed `AppTransaction` of the Apple Account
  /// the notification concerns.
  public struct AppData: Sendable, Hashable {
    /// `appAppleId`.
    public var appAppleId: Int64?
    /// `bundleId`.
    public var bundleId: String?
    /// Apple's `environment` value.
    public var rawEnvironment: String?
    /// `signedAppTransactionInfo`: a JWS whose payload is a `JWSAppTransactionDecodedPayload`.
    public var signedAppTransactionInfo: String?
  }

  /// The notification's `externalPurchaseToken` (External Purchase API).
  public struct ExternalPurchaseToken: Sendable, Hashable {
    /// `externalPurchaseId`.
    public var externalPurchaseId: String?
    /// `tokenCreationDate`, in milliseconds since the epoch.
    public var tokenCreationDate: Int64?
    /// `appAppleId`.
    public var appAppleId: Int64?
    /// `bundleId`.
    public var bundleId: String?
  }

  /// The notification's `data`.
  public struct Data: Sendable, Hashable {
    /// `appAppleId`.
    public var appAppleId: Int64?
    /// `bundleId`.
    public var bundleId: String?
    /// `bundleVersion`.
    public var bundleVersion: String?
    /// Apple's `environment` value.
    public var rawEnvironment: String?
    /// `signedTransactionInfo`: a JWS whose payload is a `JWSTransactionDecodedPayload`.
    public var signedTransactionInfo: String?
    /// `signedRenewalInfo`: a JWS whose payload is a `JWSRenewalInfoDecodedPayload`.
    public var signedRenewalInfo: String?
    /// Apple's `status` value (1-5).
    public var rawStatus: Int?
    /// `consumptionRequestReason`.
    public var consumptionRequestReason: String?

    /// The environment; `nil` when absent or unknown.
    public var environment: Environment? { rawEnvironment.flatMap(Environment.init(appleValue:)) }
    /// Apple's status; `nil` when absent or unknown.
    public var status: AppleSubscriptionStatus? { rawStatus.flatMap(AppleSubscriptionStatus.init) }
  }

  /// The notification type; `nil` when this module does not know it.
  public var notificationType: NotificationTypeV2? { NotificationTypeV2(rawValue: rawNotificationType) }
  /// The subtype; `nil` when absent or unknown.
  public var subtype: NotificationSubtypeV2? { rawSubtype.flatMap(NotificationSubtypeV2.init) }

  /// Parses a decoded `ResponseBodyV2DecodedPayload` (UTF-8 JSON).
  /// - Throws: ``AppleDataError`` naming the field.
  public init(parsing bytes: [UInt8]) throws(AppleDataError) {
    try self.init(json: try parseJSON(bytes))
  }

  /// Reads an already parsed `ResponseBodyV2DecodedPayload`.
  /// - Throws: ``AppleDataError`` naming the field.
  public init(json: JSONValue) throws(AppleDataError) {
    let body = try AppleObject(json, path: "")
    rawNotificationType = try body.requiredString("notificationType")
    rawSubtype = try body.string("subtype")
    notificationUUID = try body.requiredString("notificationUUID")
    version = try body.string("version")
    signedDate = try body.int64("signedDate")
    summary = body.value("summary")
    if let d = try body.object("data") {
      data = Data(
        appAppleId: try d.int64("appAppleId"), bundleId: try d.string("bundleId"),
        bundleVersion: try d.string("bundleVersion"), rawEnvironment: try d.string("environment"),
        signedTransactionInfo: try d.string("signedTransactionInfo"),
        signedRenewalInfo: try d.string("signedRenewalInfo"), rawStatus: try d.int("status"),
        consumptionRequestReason: try d.string("consumptionRequestReason"))
    } else {
      data = nil
    }
    if let a = try body.object("appData") {
      appData = AppData(
        appAppleId: try a.int64("appAppleId"), bundleId: try a.string("bundleId"),
        rawEnvironment: try a.string("environment"),
        signedAppTransactionInfo: try a.string("signedAppTransactionInfo"))
    }
    if let t = try body.object("externalPurchaseToken") {
      externalPurchaseToken = ExternalPurchaseToken(
        externalPurchaseId: try t.string("externalPurchaseId"), tokenCreationDate: try t.int64("tokenCreationDate"),
        appAppleId: try t.int64("appAppleId"), bundleId: try t.string("bundleId"))
    }
  }
}

extension Transaction {
  /// Reads a decoded `JWSTransactionDecodedPayload` (UTF-8 JSON).
  ///
  /// - Parameters:
  ///   - bytes: the JWS payload, already verified and Base64URL-decoded.
  ///   - notificationType: the V2 `notificationType` that delivered it, if any (rule 7).
  /// - Throws: ``AppleDataError`` naming the field.
  public init(jwsTransactionPayload bytes: [UInt8], notificationType: String? = nil)
    throws(AppleDataError)
  {
    try self.init(jwsTransactionPayload: try parseJSON(bytes), notificationType: notificationType)
  }

  /// Reads an already parsed `JWSTransactionDecodedPayload`.
  /// - Throws: ``AppleDataError`` naming the field.
  public init(jwsTransactionPayload json: JSONValue, notificationType: String? = nil)
    throws(AppleDataError)
  {
    let e = try AppleObject(json, path: "")
    let transactionId = try e.requiredString("transactionId")
    guard let purchase = try e.int64("purchaseDate") else { throw e.missing("purchaseDate") }
    self.init(
      transactionId: transactionId, originalTransactionId: try e.string("originalTransactionId"),
      productId: try e.requiredString("productId"), purchaseDate: purchase)
    subscriptionGroupIdentifier = try e.string("subscriptionGroupIdentifier")
    originalPurchaseDate = try e.int64("originalPurchaseDate")
    expiresDate = try e.int64("expiresDate")
    rawOfferType = try e.int("offerType")
    offerIdentifier = try e.string("offerIdentifier")
    rawOfferDiscountType = try e.string("offerDiscountType")
    revocationDate = try e.int64("revocationDate")
    rawRevocationReason = try e.int("revocationReason")
    rawRevocationType = try e.string("revocationType")
    rawInAppOwnershipType = try e.string("inAppOwnershipType")
    isUpgraded = try e.bool("isUpgraded") ?? false
    rawEnvironment = try e.string("environment")
    webOrderLineItemId = try e.string("webOrderLineItemId")
    quantity = try e.int("quantity") ?? 1
    rawType = try e.string("type")
    bundleId = try e.string("bundleId")
    appAccountToken = try e.string("appAccountToken")
    signedDate = try e.int64("signedDate")
    price = try e.int64("price")
    currency = try e.string("currency")
    appTransactionId = try e.string("appTransactionId")
    // App Store Server API 1.21 (rule 22):
    // https://developer.apple.com/documentation/appstoreserverapi/billingplantype,
    // https://developer.apple.com/documentation/appstoreserverapi/transactioncommitmentinfo.
    rawBillingPlanType = try e.string("billingPlanType")
    if let c = try e.object("commitmentInfo") {
      commitment = TransactionCommitmentInfo(
        billingPeriodNumber: try c.int("billingPeriodNumber"), totalBillingPeriods: try c.int("totalBillingPeriods"),
        commitmentExpiresDate: try c.int64("commitmentExpiresDate"), commitmentPrice: try c.int64("commitmentPrice"))
    }
    self.notificationType = notificationType
  }
}

extension RenewalInfo {
  /// Reads a decoded `JWSRenewalInfoDecodedPayload` (UTF-8 JSON), already verified and decoded.
  /// - Throws: ``AppleDataError`` naming the field.
  public init(jwsRenewalInfoPayload bytes: [UInt8]) throws(AppleDataError) {
    try self.init(jwsRenewalInfoPayload: try parseJSON(bytes))
  }

  /// Reads an already parsed `JWSRenewalInfoDecodedPayload`.
  /// - Throws: ``AppleDataError`` naming the field.
  public init(jwsRenewalInfoPayload json: JSONValue) throws(AppleDataError) {
    let e = try AppleObject(json, path: "")
    let autoRenewProductId = try e.string("autoRenewProductId")
    guard let productId = try e.string("productId") ?? autoRenewProductId else {
      throw e.missing("productId")
    }
    self.init(
      originalTransactionId: try e.requiredString("originalTransactionId"), productId: productId)
    self.autoRenewProductId = autoRenewProductId
    rawAutoRenewStatus = try e.intOrBool("autoRenewStatus")
    rawExpirationIntent = try e.int("expirationIntent")
    isInBillingRetryPeriod = try e.bool("isInBillingRetryPeriod") ?? false
    gracePeriodExpiresDate = try e.int64("gracePeriodExpiresDate")
    rawPriceConsentStatus = try e.intOrBool("priceIncreaseStatus")
    rawOfferType = try e.int("offerType")
    offerIdentifier = try e.string("offerIdentifier")
    rawEnvironment = try e.string("environment")
    renewalDate = try e.int64("renewalDate")
    recentSubscriptionStartDate = try e.int64("recentSubscriptionStartDate")
    eligibleWinBackOfferIds = try e.strings("eligibleWinBackOfferIds")
    signedDate = try e.int64("signedDate")
    appTransactionId = try e.string("appTransactionId")
    appAccountToken = try e.string("appAccountToken")
    // App Store Server API 1.21 (rule 22):
    // https://developer.apple.com/documentation/appstoreserverapi/renewalbillingplantype,
    // https://developer.apple.com/documentation/appstoreserverapi/renewalcommitmentinfo.
    rawRenewalBillingPlanType = try e.string("renewalBillingPlanType")
    if let c = try e.object("commitmentInfo") {
      commitment = RenewalCommitmentInfo(
        commitmentAutoRenewProductId: try c.string("commitmentAutoRenewProductId"),
        rawCommitmentAutoRenewStatus: try c.intOrBool("commitmentAutoRenewStatus"),
        rawCommitmentRenewalBillingPlanType: try c.string("commitmentRenewalBillingPlanType"),
        commitmentRenewalDate: try c.int64("commitmentRenewalDate"),
        commitmentRenewalPrice: try c.int64("commitmentRenewalPrice"))
    }
  }
}

extension NotificationV2 {
  /// Whether this notification says the transaction it carries lost its access (rule 15): a
  /// `REVOKE` or `REFUND`, or any notification whose `data.status` is 5 (revoked: Apple
  /// "refunded the transaction or revoked it from Family Sharing").
  public var endsAccess: Bool {
    switch notificationType {
    case .revoke?, .refund?: return true
    default: return data?.status == .revoked
    }
  }

  /// The transaction this notification carries, as it must be stored (rule 15): when the
  /// notification ends access (``endsAccess``) but the payload has no `revocationDate`, access
  /// ends at the notification's `signedDate`, or when it arrived if it has none. A `REVOKE` ends
  /// access even when its `data.status` disagrees. Any other transaction is returned unchanged.
  ///
  /// - Parameters:
  ///   - transaction: the decoded `signedTransactionInfo`.
  ///   - receivedAt: when the notification arrived (ms since the epoch).
  public func applyingRevocation(to transaction: Transaction, receivedAt: Int64) -> Transaction {
    guard endsAccess, transaction.revocationDate == nil else { return transaction }
    var revoked = transaction
    revoked.revocationDate = signedDate ?? receivedAt
    return revoked
  }
}
