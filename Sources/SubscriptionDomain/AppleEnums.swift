// Apple's enumerations, each with Apple's raw value so unknown values survive a round trip:
// model types store the raw value (`rawX`) and expose the typed view (`x`) next to it.

/// The App Store environment a transaction, receipt or notification belongs to.
///
/// Apple spells it `"Production"` or `"Sandbox"` (verifyReceipt, V2 payloads) and `"PROD"` in V1
/// notifications; ``init(appleValue:)`` accepts every spelling.
public enum Environment: String, Sendable, Hashable, Codable, CaseIterable {
  /// The live App Store.
  case production = "Production"
  /// The sandbox (TestFlight, App Review, sandbox accounts).
  case sandbox = "Sandbox"

  /// Reads Apple's spelling of an environment: `Production`, `PROD`, `Sandbox` (any case).
  ///
  /// Returns `nil` for values such as `Xcode` or `LocalTesting`, which Apple does not sign and
  /// which the caller must keep as raw text.
  public init?(appleValue: String) {
    switch appleValue.lowercased() {
    case "production", "prod": self = .production
    case "sandbox": self = .sandbox
    default: return nil
    }
  }
}

/// Whether the user bought the item, received it through Family Sharing, or was assigned it by
/// an organization (`in_app_ownership_type`, `inAppOwnershipType`;
/// https://developer.apple.com/documentation/appstoreserverapi/inappownershiptype).
public enum OwnershipType: String, Sendable, Hashable, Codable, CaseIterable {
  /// The user bought it (`PURCHASED`).
  case purchased = "PURCHASED"
  /// A family member shared it with the user (`FAMILY_SHARED`).
  case familyShared = "FAMILY_SHARED"
  /// An organization or group gave the user access (`ASSIGNED`, App Store Server API 1.22): it
  /// entitles like a purchase, is never moved between app users by purchase sharing, takes no
  /// refund or consumption request, and is reported apart (rule 23).
  case assigned = "ASSIGNED"
}

/// The kind of subscription offer a transaction used (`offerType`; V1 receipts imply it from
/// `promotional_offer_id`, `offer_code_ref_name` and the intro flags).
public enum OfferType: Int, Sendable, Hashable, Codable, CaseIterable {
  /// An introductory offer (free trial, pay as you go, pay up front).
  case introductory = 1
  /// A promotional offer.
  case promotional = 2
  /// An offer code.
  case offerCode = 3
  /// A win-back offer.
  case winBack = 4
}

/// How an offer discounts the price (`offerDiscountType`).
public enum OfferDiscountType: String, Sendable, Hashable, Codable, CaseIterable {
  /// A free trial.
  case freeTrial = "FREE_TRIAL"
  /// A discounted price for each of several periods.
  case payAsYouGo = "PAY_AS_YOU_GO"
  /// One discounted payment for several periods.
  case payUpFront = "PAY_UP_FRONT"
  /// A one-time discount (Advanced Commerce).
  case oneTime = "ONE_TIME"
}

/// Why the App Store refunded a transaction (`cancellation_reason`, `revocationReason`).
public enum RevocationReason: Int, Sendable, Hashable, Codable, CaseIterable {
  /// Another reason, e.g. an accidental purchase; also Family Sharing removal (`0`).
  case other = 0
  /// An actual or perceived issue in the app (`1`).
  case appIssue = 1
}

/// How the App Store revoked a transaction (`revocationType`, App Store Server API 2.19+).
public enum RevocationType: String, Sendable, Hashable, Codable, CaseIterable {
  /// A full refund.
  case refundFull = "REFUND_FULL"
  /// A prorated refund.
  case refundProrated = "REFUND_PRORATED"
  /// Family Sharing access ended.
  case familyRevoke = "FAMILY_REVOKE"
}

/// Whether a subscription will renew (`auto_renew_status`, `autoRenewStatus`).
public enum AutoRenewStatus: Int, Sendable, Hashable, Codable, CaseIterable {
  /// The customer turned auto-renew off (`0`).
  case off = 0
  /// The subscription renews at the end of the period (`1`).
  case on = 1
}

/// Why a subscription expired (`expiration_intent`, `expirationIntent`).
public enum ExpirationIntent: Int, Sendable, Hashable, Codable, CaseIterable {
  /// The customer cancelled (`1`).
  case customerCancelled = 1
  /// A billing error (`2`).
  case billingError = 2
  /// The customer did not consent to a price increase (`3`).
  case didNotConsentToPriceIncrease = 3
  /// The product was not available at renewal (`4`).
  case productNotAvailable = 4
  /// Another reason (`5`).
  case other = 5
}

/// Whether the customer consented to a price increase (`price_consent_status`,
/// `priceIncreaseStatus`).
public enum PriceConsentStatus: Int, Sendable, Hashable, Codable, CaseIterable {
  /// The customer has not yet responded (`0`).
  case notConsented = 0
  /// The customer consented, or no consent was needed (`1`).
  case consented = 1
}

/// The kind of an in-app product, in the catalog's vocabulary (the API's `ProductType`).
public enum ProductType: String, Sendable, Hashable, Codable, CaseIterable {
  /// An auto-renewable subscription.
  case autoRenewable = "AUTO_RENEWABLE"
  /// A non-renewing subscription: the catalog's duration defines each term.
  case nonRenewing = "NON_RENEWING"
  /// A non-consumable: owned once bought.
  case nonConsumable = "NON_CONSUMABLE"
  /// A consumable: never an entitlement.
  case consumable = "CONSUMABLE"
  /// A free subscription: entitled until revoked.
  case freeSubscription = "FREE_SUBSCRIPTION"

  /// Reads Apple's transaction `type` (`Auto-Renewable Subscription`, `Non-Renewing Subscription`,
  /// `Non-Consumable`, `Consumable`), the App Store Server API query names (`AUTO_RENEWABLE`,
  /// `NON_RENEWABLE`, ...) or this enum's own raw values.
  public init?(appleValue: String) {
    switch appleValue {
    case "Auto-Renewable Subscription", "AUTO_RENEWABLE": self = .autoRenewable
    case "Non-Renewing Subscription", "NON_RENEWABLE", "NON_RENEWING": self = .nonRenewing
    case "Non-Consumable", "NON_CONSUMABLE": self = .nonConsumable
    case "Consumable", "CONSUMABLE": self = .consumable
    case "FREE_SUBSCRIPTION", "Free Subscription": self = .freeSubscription
    default: return nil
    }
  }
}
