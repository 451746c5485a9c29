/// What kind of change a ``SubscriptionEvent`` reports (docs/architecture.md "Events"; the proto's
/// `EventType` without its prefix).
public enum SubscriptionEventType: String, Sendable, Hashable, Codable, CaseIterable {
  /// A first purchase of an auto-renewable subscription in a group.
  case subscriptionStarted = "SUBSCRIPTION_STARTED"
  /// A paid period followed a free trial of the same subscription.
  case trialConverted = "TRIAL_CONVERTED"
  /// A paid period followed a paid period of the same subscription without a lapse.
  case renewed = "RENEWED"
  /// An upgrade, downgrade or crossgrade took effect.
  case productChanged = "PRODUCT_CHANGED"
  /// The user turned off auto-renewal.
  case autoRenewDisabled = "AUTO_RENEW_DISABLED"
  /// The user turned auto-renewal back on.
  case autoRenewEnabled = "AUTO_RENEW_ENABLED"
  /// The group entered the billing grace period or billing retry.
  case billingIssue = "BILLING_ISSUE"
  /// A charge succeeded after a billing issue.
  case billingRecovered = "BILLING_RECOVERED"
  /// The billing grace period ended without recovery.
  case gracePeriodExpired = "GRACE_PERIOD_EXPIRED"
  /// The subscription lapsed.
  case expired = "EXPIRED"
  /// Apple refunded a transaction.
  case refunded = "REFUNDED"
  /// Apple reversed a refund.
  case refundReversed = "REFUND_REVERSED"
  /// Family Sharing access was removed.
  case familyAccessRevoked = "FAMILY_ACCESS_REVOKED"
  /// A purchase in a group after it had lapsed.
  case resubscribed = "RESUBSCRIBED"
  /// A non-renewing subscription was bought.
  case nonRenewingPurchased = "NON_RENEWING_PURCHASED"
  /// A consumable or non-consumable was bought.
  case oneTimePurchased = "ONE_TIME_PURCHASED"
  /// The purchase sharing policy moved an original transaction from one user to another (both
  /// users get the event).
  case ownershipTransferred = "OWNERSHIP_TRANSFERRED"
  /// Apple extended one subscription's renewal date (V2 `RENEWAL_EXTENDED`).
  case subscriptionExtended = "SUBSCRIPTION_EXTENDED"
  /// A parent withdrew consent to a child's use of the app (V2 `RESCIND_CONSENT`), for a user
  /// linked to the notification's Apple Account.
  case consentRescinded = "CONSENT_RESCINDED"
  /// A V2 notification no other type carries (``NotificationV2/eventDisposition``), with its
  /// type and subtype.
  case appleNotification = "APPLE_NOTIFICATION"
  /// A 12-month commitment began (a first billing period after no commitment).
  case commitmentStarted = "COMMITMENT_STARTED"
  /// A commitment renewed into a new one.
  case commitmentRenewed = "COMMITMENT_RENEWED"
  /// A commitment ended (the subscription lapsed, or renewed into a period billed up front).
  case commitmentEnded = "COMMITMENT_ENDED"
  /// The server answered Apple's refund request by Send Consumption Information (rule 27).
  case consumptionInfoSent = "CONSUMPTION_INFO_SENT"
  /// The server could not answer a refund request (Apple refused, or the 12 hours passed).
  case consumptionInfoFailed = "CONSUMPTION_INFO_FAILED"
  /// The server did not answer a refund request, on purpose (``SubscriptionEvent/consumptionDetail``).
  case consumptionInfoNotSent = "CONSUMPTION_INFO_NOT_SENT"
  /// Apple asked the app's retention endpoint what to show a subscriber about to cancel, and it
  /// answered (``SubscriptionEvent/retention``); never derived from purchase data.
  case retentionOffered = "RETENTION_OFFERED"
}

/// How the period of a ``SubscriptionEvent`` was bought (the proto's `EventOffer`).
public enum SubscriptionEventOffer: String, Sendable, Hashable, Codable, CaseIterable {
  /// At the regular price.
  case none = "NONE"
  /// A free trial.
  case freeTrial = "FREE_TRIAL"
  /// A paid introductory offer.
  case introductory = "INTRODUCTORY"
  /// A promotional offer.
  case promotional = "PROMOTIONAL"
  /// A subscription offer code.
  case offerCode = "OFFER_CODE"
  /// A win-back offer.
  case winBack = "WIN_BACK"
}

/// One change of one user's state, derived from Apple's data by the pure domain
/// (docs/architecture.md "Events"; the proto's `Event` without the log position, which the store
/// assigns).
///
/// Derivation is deterministic: the same history gives the same events with the same
/// ``eventId``s, so re-importing data emits nothing new and a store deduplicates by id.
public struct SubscriptionEvent: Sendable, Hashable, Codable {
  /// Deterministic id: a function of the app, environment, user, type and the cause (the
  /// transaction, renewal info version or transition instant), never of when it was derived.
  public var eventId: String
  /// The app.
  public var appId: String
  /// The app's user id.
  public var userId: String
  /// The environment of the data.
  public var environment: Environment
  /// What happened.
  public var type: SubscriptionEventType
  /// When it happened, on Apple's clock.
  public var occurredMs: Int64
  /// When substatus learned it (the deriving write, or the scheduler run).
  public var detectedMs: Int64
  /// The subscription group; `nil` for products outside one.
  public var subscriptionGroupId: String?
  /// The product (after a product change, the new one).
  public var productId: String?
  /// The transaction that caused the event; `nil` when a renewal info or time caused it.
  public var transactionId: String?
  /// The original transaction id.
  public var originalTransactionId: String?
  /// The group's state just before; `nil` for one-time products.
  public var stateBefore: SubscriptionState?
  /// The group's state just after; `nil` for one-time products.
  public var stateAfter: SubscriptionState?
  /// How the period was bought; `nil` when the event has no purchase.
  public var offer: SubscriptionEventOffer?
  /// Apple's offer identifier, where given.
  public var offerId: String?
  /// The price in milliunits of ``currency`` (Apple's `price`), when known.
  public var priceMilliunits: Int64?
  /// ISO 4217 currency code of the price, when known.
  public var currency: String?
  /// For ``SubscriptionEventType/expired``: why, lower case (`voluntary`, `billing_error`,
  /// `price_increase`, `product_unavailable`, `other`), when Apple says.
  public var expirationReason: String?
  /// For ``SubscriptionEventType/productChanged``: the product before.
  public var previousProductId: String?
  /// For ``SubscriptionEventType/ownershipTransferred``: the user who had the original
  /// transaction before the transfer (the previous owner's own event has it as its user too).
  public var previousUserId: String?
  /// Whether the subscription or purchase is the user's own (``OwnershipType/purchased``) or
  /// shared with them through Family Sharing (``OwnershipType/familyShared``: an entitlement, not a
  /// purchase of this user), from Apple's `inAppOwnershipType` of its transactions; `nil` when no
  /// transaction of it is known (or for an event logged before events carried it).
  public var ownershipType: OwnershipType?
  /// How the transaction that caused the event is billed (its `billingPlanType`, rule 22):
  /// ``BillingPlanType/monthly`` makes ``priceMilliunits`` a monthly charge of a 12-month
  /// commitment (trends count it as a month of MRR, whatever the product's duration); `nil`
  /// when Apple did not say.
  public var billingPlanType: BillingPlanType? = nil
  /// For the events a V2 notification causes by itself (``SubscriptionEventType/appleNotification``,
  /// ``SubscriptionEventType/subscriptionExtended``, ``SubscriptionEventType/consentRescinded``):
  /// Apple's `notificationType` as sent.
  public var notificationType: String? = nil
  /// With ``notificationType``: Apple's `subtype`, when it has one.
  public var notificationSubtype: String? = nil
  /// The 12-month commitment the event's transaction is a billing period of (k of n, its end;
  /// never ``CommitmentStatus/willRenew``); `nil` outside one (rule 22).
  public var commitment: CommitmentStatus? = nil
  /// For ``SubscriptionEventType/consumptionInfoSent``: the JSON body Apple accepted.
  public var consumptionBody: String? = nil
  /// For ``SubscriptionEventType/consumptionInfoFailed`` and
  /// ``SubscriptionEventType/consumptionInfoNotSent``: why (a lower-case word, then details).
  public var consumptionDetail: String? = nil
  /// For the consumption events: Apple's `consumptionRequestReason`, when given.
  public var refundRequestReason: String? = nil
  /// For ``SubscriptionEventType/retentionOffered``: what was answered, and which rule decided.
  public var retention: RetentionOfferRecord? = nil

  /// Creates an event.
  public init(
    eventId: String, appId: String, userId: String, environment: Environment,
    type: SubscriptionEventType, occurredMs: Int64, detectedMs: Int64,
    subscriptionGroupId: String? = nil, productId: String? = nil, transactionId: String? = nil,
    originalTransactionId: String? = nil, stateBefore: SubscriptionState? = nil,
    stateAfter: SubscriptionState? = nil, offer: SubscriptionEventOffer? = nil,
    offerId: String? = nil, priceMilliunits: Int64? = nil, currency: String? = nil,
    expirationReason: String? = nil, previousProductId: String? = nil,
    previousUserId: String? = nil, ownershipType: OwnershipType? = nil
  ) {
    self.eventId = eventId
    self.appId = appId
    self.userId = userId
    self.environment = environment
    self.type = type
    self.occurredMs = occurredMs
    self.detectedMs = detectedMs
    self.subscriptionGroupId = subscriptionGroupId
    self.productId = productId
    self.transactionId = transactionId
    self.originalTransactionId = originalTransactionId
    self.stateBefore = stateBefore
    self.stateAfter = stateAfter
    self.offer = offer
    self.offerId = offerId
    self.priceMilliunits = priceMilliunits
    self.currency = currency
    self.expirationReason = expirationReason
    self.previousProductId = previousProductId
    self.previousUserId = previousUserId
    self.ownershipType = ownershipType
  }
}
