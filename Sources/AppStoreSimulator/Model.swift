/// Which App Store environment a user, receipt or notification belongs to.
public enum StoreEnvironment: String, Sendable, CaseIterable, Codable {
  /// The live App Store (`buy.itunes.apple.com`).
  case production
  /// The sandbox (`sandbox.itunes.apple.com`), with compressed subscription periods.
  case sandbox

  /// The value of `environment` in a verifyReceipt response: `Production` or `Sandbox`.
  var receiptValue: String { self == .production ? "Production" : "Sandbox" }
  /// The value of `environment` in a V1 notification: `PROD` or `Sandbox`.
  var notificationValue: String { self == .production ? "PROD" : "Sandbox" }
}

/// Product types as App Store Connect names them.
enum ProductType: String, Sendable, Codable {
  case autoRenewable = "auto_renewable"
  case nonRenewing = "non_renewing"
  case nonConsumable = "non_consumable"
  case consumable = "consumable"
}

/// How an offer is priced.
enum OfferMode: String, Sendable, Codable {
  case freeTrial = "free_trial"
  case payAsYouGo = "pay_as_you_go"
  case payUpFront = "pay_up_front"
}

/// An introductory offer, promotional offer or offer code of a product.
struct Offer: Sendable, Equatable, Codable {
  var mode: OfferMode
  /// The discounted price per period in milliunits (V2 `price`); nil: 0 for a free trial, else
  /// the product's price.
  var price: Int64? = nil
  /// Free trial and pay up front: the one discounted period. Pay as you go: unused (each of
  /// `periods` periods has the product's duration).
  var duration: SubscriptionDuration?
  /// Pay as you go: the number of discounted periods.
  var periods: Int
}

struct Product: Sendable, Codable {
  var productID: String
  var type: ProductType
  var groupID: String?
  var duration: SubscriptionDuration?
  /// Service level within the group: 1 is the highest. Upgrades go to a lower number.
  var level: Int
  var familyShareable: Bool
  var introductoryOffer: Offer?
  var promotionalOffers: [String: Offer]
  var offerCodes: [String: Offer]
  /// Price in milliunits of `currency` (V2 `price`: 9.99 is 9990); nil is 0.
  var price: Int64? = nil
  /// ISO 4217 currency code (V2 `currency`); nil is USD.
  var currency: String? = nil
  /// Win-back offers configured for this subscription, best first: a lapsed customer of the
  /// group who qualifies gets them in renewal info's `eligibleWinBackOfferIds`.
  var winBackOfferIDs: [String]? = nil
  /// The price per month in milliunits of the product's second billing plan, monthly with a
  /// 12-month commitment (`billingPlanType` `MONTHLY`, App Store Server API 1.21); nil: the
  /// product is billed up front only. Only for a one-year auto-renewable.
  var commitmentMonthlyPrice: Int64? = nil
}

struct App: Sendable, Codable {
  var bundleID: String
  var appleAppID: Int64
  var sharedSecrets: [String]
  var products: [String: Product] = [:]
  var notificationURL: String?
  /// 0 (off), 3, 16 or 28 days.
  var gracePeriodDays: Int
  /// Retry delays are divided by this factor (1 = Apple's real schedule on the simulated clock).
  var notificationRetryCompression: Double
  /// Apple retries only in production; true retries sandbox notifications too.
  var sandboxNotificationRetries: Bool
  /// `v1` (nil) or `v2`: the notification format posted to `notificationURL`.
  var notificationVersion: NotificationVersion? = nil
  /// In-App Purchase keys that may sign App Store Server API requests for this app.
  var apiKeys: [InAppPurchaseKey]? = nil
  /// How JWS of this app are signed (nil: with the simulator's valid identity).
  var signing: SigningMode? = nil
  /// App Store Server API requests per second this app may make in production (nil: Apple's
  /// 50) and in the sandbox (nil: 5); past it, `429` with `Retry-After`.
  var serverAPIRatePerSecond: Double? = nil
  var sandboxServerAPIRatePerSecond: Double? = nil
  /// The developer's "Get Retention Message" endpoint (Retention Messaging API), where realtime
  /// requests go; nil: none configured.
  var retentionURL: String? = nil
}

/// The version of App Store Server Notifications an app receives.
enum NotificationVersion: String, Sendable, Codable {
  case v1
  case v2
}

/// An App Store Connect In-App Purchase key: its public half, to check the ES256 JWTs that
/// authorize App Store Server API requests.
struct InAppPurchaseKey: Sendable, Codable, Equatable {
  var issuerID: String
  var keyID: String
  var publicKeyPEM: String
}

struct User: Sendable, Codable {
  var userID: String
  var environment: StoreEnvironment
  var createdMs: Int64
  var deleted = false
  /// When true, renewals fail (billing retry) until the user recovers.
  var billingFails = false
  /// The organizer of the family this user belongs to, if a member.
  var familyOrganizer: String?
  /// The members of this user's family, if an organizer.
  var familyMembers: [String] = []
  /// The App Store storefront (ISO 3166-1 alpha-3, V2 `storefront`); nil is USA.
  var storefront: String? = nil
  /// Parental consent to the app's use was withdrawn (`RESCIND_CONSENT`), per bundle id.
  var consentRescinded: [String]? = nil
}

/// The app download of one customer (Apple Account) in one app: what `AppTransaction` describes.
struct AppDownload: Sendable, Codable {
  /// `appTransactionId`: one per Apple Account per app.
  var appTransactionID: String
  /// `originalPurchaseDate`: when the customer first got the app.
  var originalPurchaseMs: Int64
  /// `originalApplicationVersion`: the app version first downloaded.
  var originalApplicationVersion: String
  /// `applicationVersion`: the version installed now.
  var applicationVersion: String
  /// `preorderDate`, when the app was pre-ordered.
  var preorderMs: Int64? = nil
}

enum Ownership: String, Sendable, Codable {
  case purchased = "PURCHASED"
  case familyShared = "FAMILY_SHARED"
  /// Access an organization or group assigns to the customer (App Store Server API 1.22).
  case assigned = "ASSIGNED"
}

/// A transaction's place in a 12-month commitment (`TransactionCommitmentInfo`).
struct TransactionCommitment: Sendable, Codable, Equatable {
  /// `billingPeriodNumber`: 1...12.
  var billingPeriodNumber: Int
  /// `totalBillingPeriods`: 12.
  var totalBillingPeriods: Int
  /// `commitmentExpiresDate`: the end of the commitment.
  var commitmentExpiresMs: Int64
  /// `commitmentPrice`: the total price of the commitment, in milliunits.
  var commitmentPrice: Int64
}

/// A subscription's current 12-month commitment (monthly billing plan).
struct CommitmentState: Sendable, Codable, Equatable {
  /// The billing period of the current transaction, 1...12.
  var periodNumber: Int
  var totalPeriods: Int
  var startMs: Int64
  var expiresMs: Int64
  /// The monthly price, milliunits.
  var monthlyPrice: Int64
  /// Whether a new commitment (or plan) follows when this one ends (`commitmentAutoRenewStatus`).
  var autoRenew: Bool
  /// The billing plan of what follows: `MONTHLY` (another commitment) or `BILLED_UPFRONT` (a
  /// year paid at once) (`commitmentRenewalBillingPlanType`).
  var renewalBillingPlan: String
}

struct Transaction: Sendable, Codable {
  var seq: Int
  var transactionID: String
  var originalTransactionID: String
  var webOrderLineItemID: String?
  var bundleID: String
  var userID: String
  var productID: String
  var productType: ProductType
  var groupID: String?
  var purchaseMs: Int64
  var originalPurchaseMs: Int64
  var expiresMs: Int64?
  var isTrialPeriod = false
  var isInIntroOfferPeriod = false
  var cancellationMs: Int64?
  var cancellationReason: String?
  var isUpgraded = false
  var ownership: Ownership = .purchased
  var promotionalOfferID: String?
  var offerCodeRefName: String?
  /// V2 `transactionReason`: nil is PURCHASE, `RENEWAL` for automatic renewals.
  var transactionReason: String? = nil
  /// V2 `offerDiscountType` (FREE_TRIAL, PAY_AS_YOU_GO, PAY_UP_FRONT) when an offer applied.
  var offerDiscountType: String? = nil
  /// V2 `offerPeriod` (ISO 8601 duration) when an offer applied.
  var offerPeriod: String? = nil
  /// V2 `appAccountToken` given at purchase (a UUID), inherited by renewals.
  var appAccountToken: String? = nil
  /// V2 `price` in milliunits and `currency`, fixed at purchase.
  var price: Int64? = nil
  var currency: String? = nil
  /// V2 `storefront` (alpha-3) at purchase.
  var storefront: String? = nil
  /// Position in modification order (creation or last change): Get Transaction History's
  /// `revision` counts in it. nil in snapshots of older simulators (then `seq` stands in).
  var revision: Int? = nil
  /// V2 `revocationType` of a revoked transaction: `REFUND_FULL`, `REFUND_PRORATED` or
  /// `FAMILY_REVOKE` (nil in snapshots of older simulators: derived from the ownership).
  var revocationType: String? = nil
  /// V2 `revocationPercentage` of a refund, in milliunits (100000 is 100%).
  var revocationPercentage: Int? = nil
  /// A refund request the App Store has not decided yet (CONSUMPTION_REQUEST was sent).
  var refundRequested: Bool? = nil
  /// When the open refund request was made (Apple asks for consumption data within 12 hours).
  var refundRequestedMs: Int64? = nil
  /// V2 `billingPlanType`: `MONTHLY` (a 12-month commitment) or `BILLED_UPFRONT`, for products
  /// that offer both plans; nil otherwise.
  var billingPlanType: String? = nil
  /// V2 `commitmentInfo` of a commitment plan's monthly transaction.
  var commitment: TransactionCommitment? = nil
}

/// A price increase of a subscriber's renewal product, from `POST …/price-increase`.
struct PriceIncrease: Sendable, Codable, Equatable {
  /// The new price in milliunits: the renewal price from now on.
  var price: Int64
  /// Whether the customer consented, or was notified of an increase that needs no consent
  /// (`priceIncreaseStatus` 1); false: not responded yet (0).
  var accepted: Bool
}

/// An offer being applied over several renewals (pay as you go), or one redeemed for the next renewal.
struct OfferInProgress: Sendable, Codable {
  enum Kind: Sendable, Equatable, Codable {
    case introductory
    case promotional(String)
    case offerCode(String)
  }
  var kind: Kind
  var offer: Offer
  var periodsLeft: Int
}

/// One auto-renewable subscription: a chain of transactions sharing an original transaction id.
struct Subscription: Sendable, Codable {
  var originalTransactionID: String
  var bundleID: String
  var userID: String
  var groupID: String
  var environment: StoreEnvironment
  var ownership: Ownership
  /// For a family-shared subscription: the organizer's subscription it mirrors.
  var sharedFrom: String?
  var productID: String
  var autoRenewProductID: String
  var autoRenewEnabled = true
  var expiresMs: Int64
  var originalPurchaseMs: Int64
  var latestTransactionID: String
  var renewals = 0
  var offerInProgress: OfferInProgress?
  var pendingOffer: OfferInProgress?
  var billingRetrySinceMs: Int64?
  var gracePeriodExpiresMs: Int64?
  var expirationIntent: String?
  /// No further automatic renewal (billing retry gave up, refund, family access revoked,
  /// sandbox renewal limit); a new purchase starts it again.
  var renewalStopped = false
  /// Family access removed (members) or refunded.
  var revoked = false
  /// Organizer stopped sharing this subscription with the family.
  var sharingDisabled = false
  /// The app account token of the purchase, carried to renewals.
  var appAccountToken: String? = nil
  /// GRACE_PERIOD_EXPIRED was emitted for the current billing retry.
  var graceExpiryNotified: Bool? = nil
  /// EXPIRED was emitted for the current lapse.
  var expiryNotified: Bool? = nil
  /// A price increase of `autoRenewProductID` that applies at the next renewal.
  var priceIncrease: PriceIncrease? = nil
  /// The current 12-month commitment of a monthly billing plan; nil when billed up front.
  var commitment: CommitmentState? = nil
}
