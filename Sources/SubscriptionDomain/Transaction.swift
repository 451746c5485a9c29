/// One App Store transaction: a purchase, a renewal, a restore or a Family Sharing grant.
///
/// Built from a verifyReceipt `in_app`/`latest_receipt_info` element, a V1 notification's
/// `unified_receipt`, or a decoded `JWSTransactionDecodedPayload`. Times are milliseconds since the
/// epoch (Apple's unit). Enumerated fields keep Apple's raw value (`rawX`) next to the typed view
/// (`x`), so a value this module does not know survives storage and a round trip.
public struct Transaction: Sendable, Hashable, Codable {
  /// `transaction_id` / `transactionId`: unique per transaction; the key of the history.
  public var transactionId: String
  /// `original_transaction_id` / `originalTransactionId`: constant across renewals and restores.
  public var originalTransactionId: String
  /// `product_id` / `productId`.
  public var productId: String
  /// `subscription_group_identifier` / `subscriptionGroupIdentifier`, when Apple sent one.
  public var subscriptionGroupIdentifier: String?
  /// `purchase_date_ms` / `purchaseDate`: when the App Store charged the user (a period's start).
  public var purchaseDate: Int64
  /// `original_purchase_date_ms` / `originalPurchaseDate`.
  public var originalPurchaseDate: Int64?
  /// `expires_date_ms` / `expiresDate`: the end of an auto-renewable period (exclusive).
  public var expiresDate: Int64?
  /// `is_trial_period` (V1): the period is a free trial.
  public var isTrialPeriod: Bool
  /// `is_in_intro_offer_period` (V1): the period uses a paid introductory offer.
  public var isInIntroOfferPeriod: Bool
  /// Apple's `offerType` value (1 introductory, 2 promotional, 3 offer code, 4 win-back).
  public var rawOfferType: Int?
  /// `offerIdentifier` (V2), or V1's `promotional_offer_id` / `offer_code_ref_name`.
  public var offerIdentifier: String?
  /// Apple's `offerDiscountType` value.
  public var rawOfferDiscountType: String?
  /// `cancellation_date_ms` / `revocationDate`: from this instant the transaction grants nothing.
  public var revocationDate: Int64?
  /// Apple's `cancellation_reason` / `revocationReason` value.
  public var rawRevocationReason: Int?
  /// Apple's `revocationType` value.
  public var rawRevocationType: String?
  /// Apple's `in_app_ownership_type` / `inAppOwnershipType` value (absent means purchased).
  public var rawInAppOwnershipType: String?
  /// `is_upgraded` / `isUpgraded`: the system ended this transaction because the user upgraded.
  public var isUpgraded: Bool
  /// Apple's `environment` value.
  public var rawEnvironment: String?
  /// `web_order_line_item_id` / `webOrderLineItemId`.
  public var webOrderLineItemId: String?
  /// `quantity`.
  public var quantity: Int
  /// Apple's transaction `type` (`Auto-Renewable Subscription`, ...), V2 only.
  public var rawType: String?
  /// `bundleId` (V2) or the receipt's `bundle_id`, when known.
  public var bundleId: String?
  /// `app_account_token` / `appAccountToken`.
  public var appAccountToken: String?
  /// `signedDate` of the JWS this version came from (V2): when Apple signed it; `nil` for data
  /// that is not signed.
  public var signedDate: Int64?
  /// For a copy that is not signed: when Apple said what it says, the clock copies merge by (rule
  /// 14, see ``appleClock``). A verifyReceipt body's `receipt.request_date_ms`; for a V1
  /// notification, the latest instant its body records (``latestRecordedDate(in:otherDates:)``).
  /// `nil` when unknown, and for signed data, whose ``signedDate`` is that time.
  public var asOfDate: Int64?
  /// The notification type (V1 `notification_type` or V2 `notificationType`) that delivered this
  /// version, when it came from a notification: it helps classify a revocation (rule 7).
  public var notificationType: String?
  /// Apple's `price` (V2 only): what the user paid, in milliunits of ``currency`` (the price
  /// configured in App Store Connect, or the offer's, times 1000; 0 for a free trial). `nil` when
  /// the data carries none (verifyReceipt, V1 notifications).
  public var price: Int64?
  /// Apple's `currency` (V2 only): the ISO 4217 code of ``price``; `nil` when not known.
  public var currency: String?
  /// Apple's `appTransactionId` (signed data only, App Store Server API 1.20): the Apple Account
  /// that made or received the transaction, one id per account per app
  /// (https://developer.apple.com/documentation/appstoreserverapi/apptransactionid). `nil` when
  /// the data carries none (verifyReceipt, V1 notifications, older signed data).
  public var appTransactionId: String?
  /// Apple's `billingPlanType` value (API 1.21, rule 22): `MONTHLY` for a billing period of a
  /// 12-month commitment, `BILLED_UPFRONT` otherwise; `nil` when Apple sent none.
  public var rawBillingPlanType: String?
  /// `commitmentInfo` (`TransactionCommitmentInfo`, API 1.21): the commitment this billing
  /// period belongs to; `nil` outside a commitment.
  public var commitment: TransactionCommitmentInfo?

  /// Creates a transaction from every stored property, raw values as stored (the stores' decoder:
  /// one initialization instead of a default one and 28 assignments).
  package init(
    transactionId: String, originalTransactionId: String, productId: String, subscriptionGroupIdentifier: String?,
    purchaseDate: Int64, originalPurchaseDate: Int64?, expiresDate: Int64?, isTrialPeriod: Bool,
    isInIntroOfferPeriod: Bool, rawOfferType: Int?, offerIdentifier: String?, rawOfferDiscountType: String?,
    revocationDate: Int64?, rawRevocationReason: Int?, rawRevocationType: String?, rawInAppOwnershipType: String?,
    isUpgraded: Bool, rawEnvironment: String?, webOrderLineItemId: String?, quantity: Int, rawType: String?,
    bundleId: String?, appAccountToken: String?, signedDate: Int64?, asOfDate: Int64?, notificationType: String?,
    price: Int64?, currency: String?, appTransactionId: String? = nil, rawBillingPlanType: String? = nil,
    commitment: TransactionCommitmentInfo? = nil
  ) {
    self.transactionId = transactionId
    self.originalTransactionId = originalTransactionId
    self.productId = productId
    self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
    self.purchaseDate = purchaseDate
    self.originalPurchaseDate = originalPurchaseDate
    self.expiresDate = expiresDate
    self.isTrialPeriod = isTrialPeriod
    self.isInIntroOfferPeriod = isInIntroOfferPeriod
    self.rawOfferType = rawOfferType
    self.offerIdentifier = offerIdentifier
    self.rawOfferDiscountType = rawOfferDiscountType
    self.revocationDate = revocationDate
    self.rawRevocationReason = rawRevocationReason
    self.rawRevocationType = rawRevocationType
    self.rawInAppOwnershipType = rawInAppOwnershipType
    self.isUpgraded = isUpgraded
    self.rawEnvironment = rawEnvironment
    self.webOrderLineItemId = webOrderLineItemId
    self.quantity = quantity
    self.rawType = rawType
    self.bundleId = bundleId
    self.appAccountToken = appAccountToken
    self.signedDate = signedDate
    self.asOfDate = asOfDate
    self.notificationType = notificationType
    self.price = price
    self.currency = currency
    self.appTransactionId = appTransactionId
    self.rawBillingPlanType = rawBillingPlanType
    self.commitment = commitment
  }

  /// Creates a transaction; every field but the identifiers and the purchase date is optional.
  public init(
    transactionId: String,
    originalTransactionId: String? = nil,
    productId: String,
    subscriptionGroupIdentifier: String? = nil,
    purchaseDate: Int64,
    originalPurchaseDate: Int64? = nil,
    expiresDate: Int64? = nil,
    isTrialPeriod: Bool = false,
    isInIntroOfferPeriod: Bool = false,
    offerType: OfferType? = nil,
    offerIdentifier: String? = nil,
    offerDiscountType: OfferDiscountType? = nil,
    revocationDate: Int64? = nil,
    revocationReason: RevocationReason? = nil,
    revocationType: RevocationType? = nil,
    inAppOwnershipType: OwnershipType? = nil,
    isUpgraded: Bool = false,
    environment: Environment? = nil,
    webOrderLineItemId: String? = nil,
    quantity: Int = 1,
    type: ProductType? = nil,
    bundleId: String? = nil,
    appAccountToken: String? = nil,
    signedDate: Int64? = nil,
    asOfDate: Int64? = nil,
    notificationType: String? = nil,
    price: Int64? = nil,
    currency: String? = nil,
    appTransactionId: String? = nil,
    billingPlanType: BillingPlanType? = nil,
    commitment: TransactionCommitmentInfo? = nil
  ) {
    self.init(
      transactionId: transactionId, originalTransactionId: originalTransactionId ?? transactionId, productId: productId,
      subscriptionGroupIdentifier: subscriptionGroupIdentifier, purchaseDate: purchaseDate,
      originalPurchaseDate: originalPurchaseDate, expiresDate: expiresDate, isTrialPeriod: isTrialPeriod,
      isInIntroOfferPeriod: isInIntroOfferPeriod, rawOfferType: offerType?.rawValue, offerIdentifier: offerIdentifier,
      rawOfferDiscountType: offerDiscountType?.rawValue, revocationDate: revocationDate,
      rawRevocationReason: revocationReason?.rawValue, rawRevocationType: revocationType?.rawValue,
      rawInAppOwnershipType: inAppOwnershipType?.rawValue, isUpgraded: isUpgraded, rawEnvironment: environment?.rawValue,
      webOrderLineItemId: webOrderLineItemId, quantity: quantity, rawType: type.map(Transaction.appleTypeName),
      bundleId: bundleId, appAccountToken: appAccountToken, signedDate: signedDate, asOfDate: asOfDate,
      notificationType: notificationType, price: price, currency: currency, appTransactionId: appTransactionId,
      rawBillingPlanType: billingPlanType?.rawValue, commitment: commitment)
  }

  /// The billing plan; `nil` when absent or unknown (see ``rawBillingPlanType``).
  public var billingPlanType: BillingPlanType? {
    get { rawBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }
    set { rawBillingPlanType = newValue?.rawValue }
  }

  /// The offer type; `nil` when absent or a value this module does not know (see ``rawOfferType``).
  public var offerType: OfferType? {
    get { rawOfferType.flatMap(OfferType.init(rawValue:)) }
    set { rawOfferType = newValue?.rawValue }
  }

  /// The offer discount type; `nil` when absent or unknown (see ``rawOfferDiscountType``).
  public var offerDiscountType: OfferDiscountType? {
    get { rawOfferDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
    set { rawOfferDiscountType = newValue?.rawValue }
  }

  /// The revocation reason; `nil` when absent or unknown (see ``rawRevocationReason``).
  public var revocationReason: RevocationReason? {
    get { rawRevocationReason.flatMap(RevocationReason.init(rawValue:)) }
    set { rawRevocationReason = newValue?.rawValue }
  }

  /// The revocation type; `nil` when absent or unknown (see ``rawRevocationType``), and while the
  /// transaction is not revoked: a merge keeps the type an older copy told (``merging(_:)``) after
  /// Apple reversed that refund, and it describes no revocation then.
  public var revocationType: RevocationType? {
    get { revocationDate == nil ? nil : rawRevocationType.flatMap(RevocationType.init(rawValue:)) }
    set { rawRevocationType = newValue?.rawValue }
  }

  /// The ownership type as Apple sent it; `nil` when absent or unknown.
  public var inAppOwnershipType: OwnershipType? {
    get { rawInAppOwnershipType.flatMap(OwnershipType.init(rawValue:)) }
    set { rawInAppOwnershipType = newValue?.rawValue }
  }

  /// The ownership evaluation uses: ``OwnershipType/familyShared`` or ``OwnershipType/assigned``
  /// only when Apple says so; any other value, known or not, is a purchase (rule 23: an unknown
  /// value is kept as given in ``rawInAppOwnershipType`` and counted, see
  /// ``hasUnknownOwnership``).
  public var ownership: OwnershipType {
    switch rawInAppOwnershipType {
    case OwnershipType.familyShared.rawValue?: .familyShared
    case OwnershipType.assigned.rawValue?: .assigned
    default: .purchased
    }
  }

  /// Whether Apple sent an `inAppOwnershipType` this module does not know (rule 23: treated as a
  /// purchase, counted as a warning).
  public var hasUnknownOwnership: Bool {
    rawInAppOwnershipType != nil && inAppOwnershipType == nil
  }

  /// The environment; `nil` when absent or not production/sandbox (see ``rawEnvironment``).
  public var environment: Environment? {
    get { rawEnvironment.flatMap(Environment.init(appleValue:)) }
    set { rawEnvironment = newValue?.rawValue }
  }

  /// Apple's transaction type, typed; `nil` when absent or unknown (see ``rawType``).
  public var type: ProductType? {
    get { rawType.flatMap(ProductType.init(appleValue:)) }
    set { rawType = newValue.map(Transaction.appleTypeName) }
  }

  /// Whether this transaction used up the group's introductory offer (rule 8): a trial or intro
  /// period (`is_trial_period`, `is_in_intro_offer_period`, `offerType` 1). Promotional offers,
  /// offer codes and win-back offers never do, even when their period is free.
  public var usesIntroductoryOffer: Bool {
    switch rawOfferType {
    case OfferType.introductory.rawValue?: return true
    case OfferType.promotional.rawValue?, OfferType.offerCode.rawValue?,
      OfferType.winBack.rawValue?:
      return false
    default: return isTrialPeriod || isInIntroOfferPeriod
    }
  }

  /// Whether the period is free: `is_trial_period`, or an offer whose discount is `FREE_TRIAL`.
  public var isFreeTrial: Bool {
    isTrialPeriod || rawOfferDiscountType == OfferDiscountType.freeTrial.rawValue
  }

  /// Whether the transaction is revoked at `time` (its revocation date is at or before `time`).
  @inlinable
  public func isRevoked(at time: Int64) -> Bool {
    if let revocationDate { return revocationDate <= time }
    return false
  }

  /// Apple's spelling of a product type in a transaction's `type` field.
  static func appleTypeName(_ type: ProductType) -> String {
    switch type {
    case .autoRenewable: return "Auto-Renewable Subscription"
    case .nonRenewing: return "Non-Renewing Subscription"
    case .nonConsumable: return "Non-Consumable"
    case .consumable: return "Consumable"
    case .freeSubscription: return "FREE_SUBSCRIPTION"
    }
  }
}
