/// The pending renewal of one auto-renewable subscription (one per `original_transaction_id`).
///
/// Built from a verifyReceipt / V1 `pending_renewal_info` element or a decoded
/// `JWSRenewalInfoDecodedPayload`. It describes the upcoming period: auto-renew preference, billing
/// retry and grace. Enumerated fields keep Apple's raw value next to the typed view.
public struct RenewalInfo: Sendable, Hashable, Codable {
  /// `original_transaction_id` / `originalTransactionId`: the subscription this renewal continues.
  public var originalTransactionId: String
  /// `product_id` / `productId`: the product of the current (or lapsed) period.
  public var productId: String
  /// `auto_renew_product_id` / `autoRenewProductId`: the product that renews next (differs after a
  /// downgrade or crossgrade).
  public var autoRenewProductId: String?
  /// Apple's `auto_renew_status` / `autoRenewStatus` value (0 off, 1 on).
  public var rawAutoRenewStatus: Int?
  /// Apple's `expiration_intent` / `expirationIntent` value.
  public var rawExpirationIntent: Int?
  /// `is_in_billing_retry_period` / `isInBillingRetryPeriod`: Apple still tries to charge.
  public var isInBillingRetryPeriod: Bool
  /// `grace_period_expires_date_ms` / `gracePeriodExpiresDate`: the end of the billing grace
  /// period (exclusive). Its length is read from here, never assumed.
  public var gracePeriodExpiresDate: Int64?
  /// Apple's `price_consent_status` (V1) / `priceIncreaseStatus` (V2) value.
  public var rawPriceConsentStatus: Int?
  /// Apple's renewal `offerType` value.
  public var rawOfferType: Int?
  /// The renewal's `offerIdentifier` (V1 `promotional_offer_id` / `offer_code_ref_name`).
  public var offerIdentifier: String?
  /// Apple's `environment` value.
  public var rawEnvironment: String?
  /// `renewalDate` (V2): the next (or last) renewal.
  public var renewalDate: Int64?
  /// `recentSubscriptionStartDate` (V2).
  public var recentSubscriptionStartDate: Int64?
  /// `eligibleWinBackOfferIds` (V2), best first.
  public var eligibleWinBackOfferIds: [String]
  /// `signedDate` of the JWS this version came from (V2): when Apple signed it; `nil` for data
  /// that is not signed.
  public var signedDate: Int64?
  /// For a copy that is not signed: when Apple said what it says (rules 13, 14, see
  /// ``appleClock``): a verifyReceipt body's `receipt.request_date_ms`, the latest instant a V1
  /// notification's body records. `nil` when unknown, and for signed data (its ``signedDate`` is that time).
  public var asOfDate: Int64?
  /// Apple's `appTransactionId` (V2, App Store Server API 1.20): the Apple Account of the
  /// subscription (https://developer.apple.com/documentation/appstoreserverapi/apptransactionid);
  /// `nil` when the data carries none.
  public var appTransactionId: String?
  /// Apple's `renewalBillingPlanType` value (API 1.21, rule 22): how the next billing period is
  /// billed; `nil` when Apple sent none.
  public var rawRenewalBillingPlanType: String?
  /// `commitmentInfo` (`RenewalCommitmentInfo`, API 1.21): what follows the current 12-month
  /// commitment; `nil` outside a commitment.
  public var commitment: RenewalCommitmentInfo?
  /// Apple's `appAccountToken` of the renewal info: the token "that applies to the upcoming renewal
  /// transaction", given in the purchase options of the purchase or of a plan change
  /// (https://developer.apple.com/documentation/appstoreserverapi/jwsrenewalinfodecodedpayload);
  /// rule 26 reads it where the transaction carries none. `nil` when Apple sent none.
  public var appAccountToken: String?

  /// Creates a renewal info; every field but the identifiers is optional.
  public init(
    originalTransactionId: String,
    productId: String,
    autoRenewProductId: String? = nil,
    autoRenewStatus: AutoRenewStatus? = nil,
    expirationIntent: ExpirationIntent? = nil,
    isInBillingRetryPeriod: Bool = false,
    gracePeriodExpiresDate: Int64? = nil,
    priceConsentStatus: PriceConsentStatus? = nil,
    offerType: OfferType? = nil,
    offerIdentifier: String? = nil,
    environment: Environment? = nil,
    renewalDate: Int64? = nil,
    recentSubscriptionStartDate: Int64? = nil,
    eligibleWinBackOfferIds: [String] = [],
    signedDate: Int64? = nil,
    asOfDate: Int64? = nil,
    appTransactionId: String? = nil,
    renewalBillingPlanType: BillingPlanType? = nil,
    commitment: RenewalCommitmentInfo? = nil
  ) {
    self.originalTransactionId = originalTransactionId
    self.productId = productId
    self.autoRenewProductId = autoRenewProductId
    self.rawAutoRenewStatus = autoRenewStatus?.rawValue
    self.rawExpirationIntent = expirationIntent?.rawValue
    self.isInBillingRetryPeriod = isInBillingRetryPeriod
    self.gracePeriodExpiresDate = gracePeriodExpiresDate
    self.rawPriceConsentStatus = priceConsentStatus?.rawValue
    self.rawOfferType = offerType?.rawValue
    self.offerIdentifier = offerIdentifier
    self.rawEnvironment = environment?.rawValue
    self.renewalDate = renewalDate
    self.recentSubscriptionStartDate = recentSubscriptionStartDate
    self.eligibleWinBackOfferIds = eligibleWinBackOfferIds
    self.signedDate = signedDate
    self.asOfDate = asOfDate
    self.appTransactionId = appTransactionId
    self.rawRenewalBillingPlanType = renewalBillingPlanType?.rawValue
    self.commitment = commitment
  }

  /// How the next billing period is billed; `nil` when absent or unknown.
  public var renewalBillingPlanType: BillingPlanType? {
    get { rawRenewalBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }
    set { rawRenewalBillingPlanType = newValue?.rawValue }
  }

  /// The auto-renew status; `nil` when absent or unknown (see ``rawAutoRenewStatus``).
  public var autoRenewStatus: AutoRenewStatus? {
    get { rawAutoRenewStatus.flatMap(AutoRenewStatus.init(rawValue:)) }
    set { rawAutoRenewStatus = newValue?.rawValue }
  }

  /// The expiration intent; `nil` when absent or unknown (see ``rawExpirationIntent``).
  public var expirationIntent: ExpirationIntent? {
    get { rawExpirationIntent.flatMap(ExpirationIntent.init(rawValue:)) }
    set { rawExpirationIntent = newValue?.rawValue }
  }

  /// The price consent status; `nil` when absent or unknown (see ``rawPriceConsentStatus``).
  public var priceConsentStatus: PriceConsentStatus? {
    get { rawPriceConsentStatus.flatMap(PriceConsentStatus.init(rawValue:)) }
    set { rawPriceConsentStatus = newValue?.rawValue }
  }

  /// The renewal's offer type; `nil` when absent or unknown (see ``rawOfferType``).
  public var offerType: OfferType? {
    get { rawOfferType.flatMap(OfferType.init(rawValue:)) }
    set { rawOfferType = newValue?.rawValue }
  }

  /// The environment; `nil` when absent or not production/sandbox (see ``rawEnvironment``).
  public var environment: Environment? {
    get { rawEnvironment.flatMap(Environment.init(appleValue:)) }
    set { rawEnvironment = newValue?.rawValue }
  }

  /// Whether the subscription renews: `auto_renew_status` is 1.
  public var willAutoRenew: Bool { rawAutoRenewStatus == AutoRenewStatus.on.rawValue }

  /// Whether a renewal info describes instant `t`. Apple's renewal info tells the pending renewal
  /// when it was signed: what follows its subscription's last transaction. So it describes the
  /// instants from that transaction's purchase on, never earlier ones (evaluation at a past
  /// `as_of`, and event derivation's states at past instants, both read it through this rule).
  ///
  /// - Parameters:
  ///   - t: the instant.
  ///   - latestPurchase: the latest `purchaseDate` of any transaction of the renewal info's
  ///     subscription (its original transaction id); `nil` when it has none.
  @inlinable
  public static func describes(_ t: Int64, subscriptionLatestPurchase latestPurchase: Int64?) -> Bool {
    (latestPurchase ?? .min) <= t
  }
}
