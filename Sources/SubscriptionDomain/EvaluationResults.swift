/// The state of one subscription group at an instant (rule 5), in the API's vocabulary.
public enum SubscriptionState: String, Sendable, Hashable, Codable, CaseIterable {
  /// A non-revoked, non-upgraded transaction covers the instant (a later purchase of the same
  /// subscription ends an earlier period: rule 12).
  case active = "ACTIVE"
  /// Lapsed, but a renewal info's grace period has not ended: still entitled.
  case gracePeriod = "GRACE_PERIOD"
  /// Lapsed, Apple is retrying the charge: not entitled unless the policy says so. Apple retries for
  /// at most 60 days after the last period: later the group is expired (rule 18).
  case billingRetry = "BILLING_RETRY"
  /// Lapsed, and the newest non-upgraded transaction was revoked (refund or Family Sharing).
  case revoked = "REVOKED"
  /// Lapsed.
  case expired = "EXPIRED"
  /// No transaction in the group.
  case neverSubscribed = "NEVER_SUBSCRIBED"
}

/// One subscription group's status at an instant (the API's `GroupStatus`).
public struct GroupStatus: Sendable, Hashable, Codable {
  /// The group.
  public var subscriptionGroupId: String
  /// The state (rule 5).
  public var state: SubscriptionState
  /// The product of the covering transaction (active; when several cover, the one that expires
  /// last: rule 16) or of the lapsed one (otherwise).
  public var productId: String?
  /// The transaction that decided the state: covering, lapsed, or newest non-upgraded.
  public var transactionId: String?
  /// Its original transaction id.
  public var originalTransactionId: String?
  /// Its expires date.
  public var expiresDate: Int64?
  /// The grace period's end: in grace, and in billing retry when the renewal info still carries
  /// the (past) date.
  public var gracePeriodExpiresDate: Int64?
  /// Whether the subscription renews (from its renewal info; `false` without one).
  public var autoRenewEnabled: Bool
  /// The product that renews next (`auto_renew_product_id`), when known.
  public var autoRenewProductId: String?
  /// The ownership of the deciding transaction.
  public var ownership: OwnershipType?
  /// Apple cannot charge the user (grace period or billing retry): show "update your payment".
  public var billingIssue: Bool
  /// The covering period is a free trial.
  public var inTrial: Bool
  /// The covering period uses a paid introductory offer.
  public var inIntroOffer: Bool
  /// How the deciding transaction is billed (its `billingPlanType`, rule 22); `nil` when Apple
  /// did not say (every subscription before App Store Server API 1.21: billed up front).
  public var billingPlan: BillingPlanType? = nil
  /// The deciding transaction's 12-month commitment (billing period k of n, its end, whether a new
  /// one follows), with what the renewal info that describes the instant says; `nil` outside a
  /// commitment (rule 22).
  public var commitment: CommitmentStatus? = nil

  /// Creates a group status.
  public init(
    subscriptionGroupId: String, state: SubscriptionState, productId: String? = nil,
    transactionId: String? = nil, originalTransactionId: String? = nil,
    expiresDate: Int64? = nil, gracePeriodExpiresDate: Int64? = nil,
    autoRenewEnabled: Bool = false, autoRenewProductId: String? = nil,
    ownership: OwnershipType? = nil, billingIssue: Bool = false, inTrial: Bool = false,
    inIntroOffer: Bool = false
  ) {
    self.subscriptionGroupId = subscriptionGroupId
    self.state = state
    self.productId = productId
    self.transactionId = transactionId
    self.originalTransactionId = originalTransactionId
    self.expiresDate = expiresDate
    self.gracePeriodExpiresDate = gracePeriodExpiresDate
    self.autoRenewEnabled = autoRenewEnabled
    self.autoRenewProductId = autoRenewProductId
    self.ownership = ownership
    self.billingIssue = billingIssue
    self.inTrial = inTrial
    self.inIntroOffer = inIntroOffer
  }
}

/// Something the user may use right now (rule 6). Every covering subscription entitles its
/// product (rule 16): an own and a family-shared subscription of one group are two entitlements.
public struct Entitlement: Sendable, Hashable, Codable {
  /// The entitled product.
  public var productId: String
  /// Its kind.
  public var type: ProductType
  /// When access ends (exclusive); `nil`: no known end (non-consumables, free subscriptions,
  /// billing retry when the policy entitles it).
  public var expiresDate: Int64?
  /// Whether the user bought it or has it through Family Sharing.
  public var ownership: OwnershipType
  /// The transaction that grants it.
  public var transactionId: String
  /// The subscription group, for auto-renewables.
  public var subscriptionGroupId: String?

  /// Creates an entitlement.
  public init(
    productId: String, type: ProductType, expiresDate: Int64?, ownership: OwnershipType,
    transactionId: String, subscriptionGroupId: String? = nil
  ) {
    self.productId = productId
    self.type = type
    self.expiresDate = expiresDate
    self.ownership = ownership
    self.transactionId = transactionId
    self.subscriptionGroupId = subscriptionGroupId
  }
}

/// Why an offer is or is not available (the API's `EligibilityReason`).
public enum EligibilityReason: String, Sendable, Hashable, Codable, CaseIterable {
  /// Intro eligible: no transaction in the group.
  case newCustomer = "NEW_CUSTOMER"
  /// Intro eligible: lapsed subscriber who never used an intro offer in the group.
  case lapsedNoIntroUsed = "LAPSED_NO_INTRO_USED"
  /// Intro ineligible: a transaction of the group used an intro offer.
  case introAlreadyUsed = "INTRO_ALREADY_USED"
  /// Intro ineligible: a subscription of the group is active.
  case activeSubscription = "ACTIVE_SUBSCRIPTION"
  /// Intro ineligible: the group is in its billing grace period.
  case inGracePeriod = "IN_GRACE_PERIOD"
  /// Intro ineligible: the group is in billing retry.
  case inBillingRetry = "IN_BILLING_RETRY"
  /// Intro ineligible under `refundsBlockIntro`: a transaction of the group was refunded.
  case refundedInGroup = "REFUNDED_IN_GROUP"
  /// Intro ineligible: the catalog says the product has no introductory offer.
  case noIntroOffer = "NO_INTRO_OFFER"
  /// Promotional eligible: a subscription of the group (or app) is active, in grace or retry.
  case existingSubscriber = "EXISTING_SUBSCRIBER"
  /// Promotional eligible: the user subscribed before and lapsed. Also the intro answer (not
  /// eligible) when `lapsedSubscribersGetIntro` is off.
  case lapsedSubscriber = "LAPSED_SUBSCRIBER"
  /// Promotional ineligible: no auto-renewable transaction in the group (or app).
  case neverSubscribed = "NEVER_SUBSCRIBED"
  /// Neither offer: the product is not an auto-renewable subscription.
  case notASubscription = "NOT_A_SUBSCRIPTION"
  /// Neither offer: the product is not in the catalog.
  case unknownProduct = "UNKNOWN_PRODUCT"
  /// Win-back eligible: the group's latest renewal info lists the offer in
  /// `eligibleWinBackOfferIds` (rule 19).
  case winBackOffered = "WIN_BACK_OFFERED"
  /// Win-back ineligible: the group's latest renewal info does not list the offer, or the group
  /// has none.
  case winBackNotOffered = "WIN_BACK_NOT_OFFERED"
  /// Intro eligible, confirmed by Apple (rule 24): as ``newCustomer``, and the user's Apple
  /// Account is known and its whole history, fetched from the App Store Server API by its
  /// `appTransactionId`, is stored: no transaction of that account is in the group.
  case newCustomerVerified = "NEW_CUSTOMER_VERIFIED"
}

/// One offer's answer: eligible or not, why, and the transaction that decided it.
public struct OfferEligibility: Sendable, Hashable, Codable {
  /// Whether the user may buy with the offer.
  public var eligible: Bool
  /// Why.
  public var reason: EligibilityReason
  /// The transaction that decided it, where one did.
  public var evidenceTransactionId: String?

  /// Creates an answer.
  public init(eligible: Bool, reason: EligibilityReason, evidenceTransactionId: String? = nil) {
    self.eligible = eligible
    self.reason = reason
    self.evidenceTransactionId = evidenceTransactionId
  }
}

/// Intro, promotional and win-back eligibility for one requested product.
public struct ProductEligibility: Sendable, Hashable, Codable {
  /// The requested product.
  public var productId: String
  /// Its subscription group, when it is an auto-renewable of the catalog.
  public var subscriptionGroupId: String?
  /// Introductory-offer answer (rules 8, 10).
  public var introductory: OfferEligibility
  /// Promotional-offer answer (rules 9, 10).
  public var promotional: OfferEligibility
  /// One answer per catalog win-back offer of the product, in catalog order (rule 19); empty for
  /// products that are not auto-renewable or unknown.
  public var winBackOffers: [WinBackOfferEligibility]

  /// Creates an answer.
  public init(
    productId: String, subscriptionGroupId: String?, introductory: OfferEligibility,
    promotional: OfferEligibility, winBackOffers: [WinBackOfferEligibility] = []
  ) {
    self.productId = productId
    self.subscriptionGroupId = subscriptionGroupId
    self.introductory = introductory
    self.promotional = promotional
    self.winBackOffers = winBackOffers
  }
}

/// What a revocation was (rules 7, 17); every kind ends access.
public enum RevocationKind: String, Sendable, Hashable, Codable, CaseIterable {
  /// The App Store refunded the purchase (or the purchaser's refund reached a family member).
  case refund = "REFUND"
  /// Family Sharing access ended: purchaser stopped sharing, or someone left the family.
  case familyRemoval = "FAMILY_REMOVAL"
  /// The system ended the transaction because the user upgraded.
  case upgrade = "UPGRADE"

  /// Classifies a revoked transaction, first evidence wins (rule 17):
  /// 1. `revocationType`: `FAMILY_REVOKE` is a family removal, `REFUND_*` a refund (so a V2
  ///    `REVOKE` that carries a refund is a refund);
  /// 2. `is_upgraded`: an upgrade;
  /// 3. the notification that revoked it: `REVOKE` is a family removal, `REFUND`/`CANCEL` a refund
  ///    (a V1 notification labels only the transactions it revokes, see ``NotificationV1``);
  /// 4. a `FAMILY_SHARED` transaction with `revocationReason` 1 (the purchaser's refund reason) is a
  ///    refund, otherwise a family removal (Apple sends 0 when the member leaves or sharing stops);
  /// 5. anything else is a refund.
  /// Returns `nil` when the transaction has no revocation date.
  public init?(classifying transaction: Transaction) {
    guard transaction.revocationDate != nil else { return nil }
    switch transaction.revocationType {
    case .familyRevoke?: self = .familyRemoval; return
    case .refundFull?, .refundProrated?: self = .refund; return
    case nil: break
    }
    if transaction.isUpgraded { self = .upgrade; return }
    switch transaction.notificationType {
    case "REVOKE"?: self = .familyRemoval; return
    case "REFUND"?, "CANCEL"?: self = .refund; return
    default: break
    }
    if transaction.ownership == .familyShared {
      self = transaction.rawRevocationReason == RevocationReason.appIssue.rawValue
        ? .refund : .familyRemoval
      return
    }
    self = .refund
  }
}

/// A revoked transaction of the history, classified (rule 7), kept for reports and explanations.
public struct Revocation: Sendable, Hashable, Codable {
  /// The revoked transaction.
  public var transactionId: String
  /// Its original transaction id.
  public var originalTransactionId: String
  /// Its product.
  public var productId: String
  /// When access ended.
  public var revocationDate: Int64
  /// Refund, family removal or upgrade.
  public var kind: RevocationKind
  /// The transaction's ownership.
  public var ownership: OwnershipType

  /// Creates a revocation record.
  public init(
    transactionId: String, originalTransactionId: String, productId: String,
    revocationDate: Int64, kind: RevocationKind, ownership: OwnershipType
  ) {
    self.transactionId = transactionId
    self.originalTransactionId = originalTransactionId
    self.productId = productId
    self.revocationDate = revocationDate
    self.kind = kind
    self.ownership = ownership
  }
}

/// One user's contribution to an app report at an instant; the ReportService sums them with `+`.
///
/// Each count is 0 or 1 for one user (the number of *users* in that situation):
/// - `active`: some group is `ACTIVE`; `inTrial` / `inIntroOffer`: some active group is in a free
///   trial / paid intro period;
/// - `inGracePeriod` / `inBillingRetry`: some group is in that state;
/// - `expired`: the user subscribed before but no group is active, in grace or in retry;
/// - `refunded`: some transaction was refunded by then;
/// - `familySharedBeneficiaries`: some current entitlement is `FAMILY_SHARED` (also beside an own
///   subscription of the same group, rule 16);
/// - `familyAccessRevoked`: some Family Sharing access was removed by then.
/// Refunds and family removals are told apart by ``RevocationKind/init(classifying:)`` (rule 17).
public struct ReportCounts: Sendable, Hashable, Codable {
  /// Users with an active subscription.
  public var active: Int = 0
  /// Users in a free trial.
  public var inTrial: Int = 0
  /// Users in a paid introductory period.
  public var inIntroOffer: Int = 0
  /// Users in a billing grace period.
  public var inGracePeriod: Int = 0
  /// Users in billing retry.
  public var inBillingRetry: Int = 0
  /// Users whose subscriptions all lapsed.
  public var expired: Int = 0
  /// Users with a refunded transaction.
  public var refunded: Int = 0
  /// Users entitled through Family Sharing.
  public var familySharedBeneficiaries: Int = 0
  /// Users whose Family Sharing access was removed.
  public var familyAccessRevoked: Int = 0
  /// Users entitled by an organization's assignment (`ASSIGNED`, rule 23): counted apart from
  /// purchases and Family Sharing.
  public var assignedBeneficiaries: Int = 0

  /// All zero.
  public init() {}

  /// The sum of two reports.
  public static func + (lhs: ReportCounts, rhs: ReportCounts) -> ReportCounts {
    var sum = lhs
    sum += rhs
    return sum
  }

  /// Adds another report.
  public static func += (lhs: inout ReportCounts, rhs: ReportCounts) {
    lhs.active += rhs.active
    lhs.inTrial += rhs.inTrial
    lhs.inIntroOffer += rhs.inIntroOffer
    lhs.inGracePeriod += rhs.inGracePeriod
    lhs.inBillingRetry += rhs.inBillingRetry
    lhs.expired += rhs.expired
    lhs.refunded += rhs.refunded
    lhs.familySharedBeneficiaries += rhs.familySharedBeneficiaries
    lhs.familyAccessRevoked += rhs.familyAccessRevoked
    lhs.assignedBeneficiaries += rhs.assignedBeneficiaries
  }
}
