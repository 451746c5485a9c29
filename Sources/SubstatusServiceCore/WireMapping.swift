// Conversions between the wire types of Protos/substatus/v1 and the domain model. Validation of
// caller input happens here, so handlers see only well-formed domain values; every failure names
// the field, as INVALID_ARGUMENT with a google.rpc.BadRequest field violation.
import RPCCore
import SubscriptionDomain
import SubstatusWire

// MARK: Environment

extension SubscriptionDomain.Environment {
  /// The domain environment of a request: unspecified means production
  /// (docs/architecture.md "The API").
  package init(wire: Substatus_V1_Environment) throws(RPCError) {
    switch wire {
    case .unspecified, .production: self = .production
    case .sandbox: self = .sandbox
    case .UNRECOGNIZED(let n): throw invalidArgument("environment", "unknown environment \(n)")
    }
  }

  package var wire: Substatus_V1_Environment { self == .sandbox ? .sandbox : .production }
}

// MARK: Catalog

extension Product {
  /// Validates and converts a catalog entry; `field` prefixes the field names in errors.
  package init(wire p: Substatus_V1_Product, field: String) throws(RPCError) {
    guard !p.productID.isEmpty else { throw invalidArgument("\(field).product_id", "must not be empty") }
    guard p.productID.utf8.count <= 255 else { throw invalidArgument("\(field).product_id", "longer than 255 bytes") }
    try Product.requireNoControl(p.productID, "\(field).product_id")
    try Product.requireNoControl(p.subscriptionGroupID, "\(field).subscription_group_id")
    let type: ProductType
    switch p.type {
    case .autoRenewable: type = .autoRenewable
    case .nonRenewing: type = .nonRenewing
    case .nonConsumable: type = .nonConsumable
    case .consumable: type = .consumable
    case .freeSubscription: type = .freeSubscription
    case .unspecified, .UNRECOGNIZED:
      throw invalidArgument("\(field).type", "must be one of AUTO_RENEWABLE, NON_RENEWING, NON_CONSUMABLE, CONSUMABLE, FREE_SUBSCRIPTION")
    }
    var duration: ISO8601Duration? = nil
    if !p.duration.isEmpty {
      do { duration = try ISO8601Duration(parsing: p.duration) } catch {
        throw invalidArgument("\(field).duration", "\(ErrorText.quoted(p.duration)) is not an ISO-8601 duration such as P1M: \(error.message)")
      }
    }
    if type == .autoRenewable && p.subscriptionGroupID.isEmpty {
      throw invalidArgument("\(field).subscription_group_id", "required for AUTO_RENEWABLE products")
    }
    if type == .nonRenewing && duration == nil {
      throw invalidArgument("\(field).duration", "required for NON_RENEWING products")
    }
    try Product.validateOfferIds(p.promotionalOfferIDs, field: "\(field).promotional_offer_ids")
    try Product.validateOfferIds(p.winBackOfferIDs, field: "\(field).win_back_offer_ids")
    if type != .autoRenewable && !p.winBackOfferIDs.isEmpty {
      throw invalidArgument("\(field).win_back_offer_ids", "only AUTO_RENEWABLE products have win-back offers")
    }
    self.init(
      productId: p.productID, type: type,
      subscriptionGroupId: p.subscriptionGroupID.isEmpty ? nil : p.subscriptionGroupID,
      duration: duration, hasIntroductoryOffer: p.hasIntroductoryOffer,
      promotionalOfferIds: p.promotionalOfferIDs, winBackOfferIds: p.winBackOfferIDs)
  }

  /// The most offer ids of one kind per product: App Store Connect's limit of win-back offers per
  /// subscription, far above its promotional-offer limit.
  static let maxOfferIds = 350

  /// Identifiers of the catalog hold no control character (README "Request limits and whole
  /// strings"), as ``requireID`` checks the others.
  private static func requireNoControl(_ id: String, _ field: String) throws(RPCError) {
    guard !DisplayText.hasControl(id) else { throw invalidArgument(field, "contains control characters") }
  }

  /// Offer ids of one kind: each 1 to 255 bytes, no duplicates, at most ``maxOfferIds``.
  private static func validateOfferIds(_ ids: [String], field: String) throws(RPCError) {
    guard ids.count <= maxOfferIds else {
      throw invalidArgument(field, "at most \(maxOfferIds) offer ids, got \(ids.count)")
    }
    var seen = Set<String>()
    for (n, id) in ids.enumerated() {
      guard !id.isEmpty else { throw invalidArgument("\(field)[\(n)]", "must not be empty") }
      guard id.utf8.count <= 255 else { throw invalidArgument("\(field)[\(n)]", "longer than 255 bytes") }
      try requireNoControl(id, "\(field)[\(n)]")
      guard seen.insert(id).inserted else {
        throw invalidArgument("\(field)[\(n)]", "\(ErrorText.quoted(id)) appears twice")
      }
    }
  }

  package var wire: Substatus_V1_Product {
    var p = Substatus_V1_Product()
    p.productID = productId
    p.type = type.wire
    p.subscriptionGroupID = subscriptionGroupId ?? ""
    p.duration = duration?.description ?? ""
    p.hasIntroductoryOffer = hasIntroductoryOffer
    p.promotionalOfferIDs = promotionalOfferIds
    p.winBackOfferIDs = winBackOfferIds
    return p
  }
}

extension ProductType {
  package var wire: Substatus_V1_ProductType {
    switch self {
    case .autoRenewable: .autoRenewable
    case .nonRenewing: .nonRenewing
    case .nonConsumable: .nonConsumable
    case .consumable: .consumable
    case .freeSubscription: .freeSubscription
    }
  }

  package init?(wire: Substatus_V1_ProductType) {
    switch wire {
    case .autoRenewable: self = .autoRenewable
    case .nonRenewing: self = .nonRenewing
    case .nonConsumable: self = .nonConsumable
    case .consumable: self = .consumable
    case .freeSubscription: self = .freeSubscription
    case .unspecified, .UNRECOGNIZED: return nil
    }
  }
}

// MARK: Policy

extension EligibilityPolicy {
  package var wire: Substatus_V1_EligibilityPolicy {
    var p = Substatus_V1_EligibilityPolicy()
    p.refundsBlockIntro = refundsBlockIntro
    p.lapsedSubscribersGetIntro = lapsedSubscribersGetIntro
    p.billingRetryEntitled = billingRetryEntitled
    p.promoScope = promoScope == .app ? .app : .group
    p.purchaseSharing = purchaseSharing.wire
    p.eraseOnRescindConsent = eraseOnRescindConsent
    p.purchaseSharingSandbox = purchaseSharingSandbox?.wire ?? .unspecified
    p.appAccountTokenIsUserID = appAccountTokenIsUserId
    if let paid = paidAppEntitlement {
      p.paidAppEntitlementID = paid.entitlementId
      p.paidAppBefore = PaidAppEntitlement.text(of: paid.before)
    }
    p.consumptionPolicy = consumptionPolicy?.wire
    return p
  }

  /// Applies a SetPolicy request: the fields named in `mask`, or the whole policy when it is empty.
  package func updated(with wire: Substatus_V1_EligibilityPolicy, mask: [String]) throws(RPCError) -> EligibilityPolicy {
    var out = self
    let all = [
      "refunds_block_intro", "lapsed_subscribers_get_intro", "billing_retry_entitled", "promo_scope", "purchase_sharing",
      "purchase_sharing_sandbox", "erase_on_rescind_consent", "app_account_token_is_user_id", "consumption_policy",
      "paid_app_entitlement_id", "paid_app_before",
    ]
    var paidApp = false
    let fields = mask.isEmpty ? all : mask
    for (n, f) in fields.enumerated() {
      switch f {
      case "refunds_block_intro", "refundsBlockIntro": out.refundsBlockIntro = wire.refundsBlockIntro
      case "lapsed_subscribers_get_intro", "lapsedSubscribersGetIntro":
        out.lapsedSubscribersGetIntro = wire.lapsedSubscribersGetIntro
      case "billing_retry_entitled", "billingRetryEntitled": out.billingRetryEntitled = wire.billingRetryEntitled
      case "promo_scope", "promoScope":
        switch wire.promoScope {
        case .group, .unspecified: out.promoScope = .group
        case .app: out.promoScope = .app
        case .UNRECOGNIZED(let v): throw invalidArgument("policy.promo_scope", "unknown value \(v)")
        }
      case "purchase_sharing", "purchaseSharing":
        out.purchaseSharing = try PurchaseSharing(wire: wire.purchaseSharing)
      case "app_account_token_is_user_id", "appAccountTokenIsUserId":
        out.appAccountTokenIsUserId = wire.appAccountTokenIsUserID
      case "purchase_sharing_sandbox", "purchaseSharingSandbox":
        // UNSPECIFIED: the sandbox follows `purchase_sharing`.
        out.purchaseSharingSandbox =
          wire.purchaseSharingSandbox == .unspecified
          ? nil : try PurchaseSharing(wire: wire.purchaseSharingSandbox, field: "policy.purchase_sharing_sandbox")
      case "paid_app_entitlement_id", "paidAppEntitlementId", "paid_app_before", "paidAppBefore": paidApp = true
      case "erase_on_rescind_consent", "eraseOnRescindConsent": out.eraseOnRescindConsent = wire.eraseOnRescindConsent
      case "consumption_policy", "consumptionPolicy":
        out.consumptionPolicy = try wire.consumptionPolicy.map { (p) throws(RPCError) in try ConsumptionPolicy(wire: p) }
      default:
        throw invalidArgument("update_mask[\(n)]", "unknown policy field \(ErrorText.quoted(f)); known: \(all.joined(separator: ", "))")
      }
    }
    // The entitlement and its cutoff are one setting: either names both (an empty id clears it).
    if paidApp { out.paidAppEntitlement = try PaidAppEntitlement(wire: wire) }
    return out
  }
}

extension PurchaseSharing {
  package var wire: Substatus_V1_PurchaseSharing {
    switch self {
    case .share: .share
    case .transfer: .transfer
    case .keepFirst: .keepFirst
    case .transferIfNoActive: .transferIfNoActive
    }
  }

  /// UNSPECIFIED is SHARE; an unknown value is INVALID_ARGUMENT naming `field`.
  package init(wire: Substatus_V1_PurchaseSharing, field: String = "policy.purchase_sharing") throws(RPCError) {
    switch wire {
    case .share, .unspecified: self = .share
    case .transfer: self = .transfer
    case .keepFirst: self = .keepFirst
    case .transferIfNoActive: self = .transferIfNoActive
    case .UNRECOGNIZED(let v): throw invalidArgument(field, "unknown value \(v)")
    }
  }
}

// MARK: Transactions and renewal infos

extension SubscriptionDomain.Transaction {
  /// Validates and converts an imported transaction; `field` prefixes field names in errors.
  package init(wire t: Substatus_V1_Transaction, environment: SubscriptionDomain.Environment, field: String) throws(RPCError) {
    guard !t.transactionID.isEmpty else { throw invalidArgument("\(field).transaction_id", "must not be empty") }
    guard t.transactionID.utf8.count <= 64 else { throw invalidArgument("\(field).transaction_id", "longer than 64 bytes") }
    guard !t.productID.isEmpty else { throw invalidArgument("\(field).product_id", "must not be empty") }
    guard t.purchaseDateMs > 0 else { throw invalidArgument("\(field).purchase_date_ms", "must be a positive time in milliseconds") }
    if t.expiresDateMs < 0 { throw invalidArgument("\(field).expires_date_ms", "must not be negative") }
    if t.environment != .unspecified, (try? SubscriptionDomain.Environment(wire: t.environment)) != environment {
      throw invalidArgument("\(field).environment", "does not match the request's environment")
    }
    if t.priceMilliunits < 0 { throw invalidArgument("\(field).price_milliunits", "must not be negative") }
    if t.currency.isEmpty {
      if t.priceMilliunits != 0 { throw invalidArgument("\(field).currency", "required with a price") }
    } else if t.currency.utf8.count != 3 || !t.currency.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) {
      throw invalidArgument("\(field).currency", "must be an ISO 4217 code such as USD")
    }
    if !t.appTransactionID.isEmpty {
      guard t.appTransactionID.utf8.count <= 64, t.appTransactionID.utf8.allSatisfy(Self.isASCIIAlphanumeric) else {
        throw invalidArgument("\(field).app_transaction_id", "must be an App Store id (ASCII letters and digits, at most 64)")
      }
    }
    self.init(
      transactionId: t.transactionID,
      originalTransactionId: t.originalTransactionID.isEmpty ? nil : t.originalTransactionID,
      productId: t.productID,
      subscriptionGroupIdentifier: t.subscriptionGroupID.isEmpty ? nil : t.subscriptionGroupID,
      purchaseDate: t.purchaseDateMs,
      originalPurchaseDate: t.originalPurchaseDateMs == 0 ? nil : t.originalPurchaseDateMs,
      expiresDate: t.expiresDateMs == 0 ? nil : t.expiresDateMs,
      isTrialPeriod: t.isTrialPeriod, isInIntroOfferPeriod: t.isInIntroOfferPeriod,
      offerType: OfferType(rawValue: Int(t.offerType.rawValue)),
      offerIdentifier: t.offerID.isEmpty ? nil : t.offerID,
      offerDiscountType: t.offerDiscountType.domain,
      revocationDate: t.revocationDateMs == 0 ? nil : t.revocationDateMs,
      revocationReason: t.revocationReason.domain,
      revocationType: t.revocationType.domain,
      inAppOwnershipType: t.ownership.domain,
      isUpgraded: t.isUpgraded,
      environment: environment,
      webOrderLineItemId: t.webOrderLineItemID.isEmpty ? nil : t.webOrderLineItemID,
      quantity: t.quantity == 0 ? 1 : Int(t.quantity),
      type: ProductType(wire: t.type),
      appAccountToken: t.appAccountToken.isEmpty ? nil : t.appAccountToken,
      signedDate: t.signedDateMs == 0 ? nil : t.signedDateMs,
      price: t.currency.isEmpty ? nil : t.priceMilliunits,
      currency: t.currency.isEmpty ? nil : t.currency,
      appTransactionId: t.appTransactionID.isEmpty ? nil : t.appTransactionID)
  }

  /// A byte of an App Store id: `0-9`, `A-Z`, `a-z`.
  static func isASCIIAlphanumeric(_ byte: UInt8) -> Bool {
    (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
  }

  package var wire: Substatus_V1_Transaction {
    var t = Substatus_V1_Transaction()
    t.transactionID = transactionId
    t.originalTransactionID = originalTransactionId
    t.productID = productId
    t.subscriptionGroupID = subscriptionGroupIdentifier ?? ""
    t.purchaseDateMs = purchaseDate
    t.originalPurchaseDateMs = originalPurchaseDate ?? 0
    t.expiresDateMs = expiresDate ?? 0
    t.isTrialPeriod = isTrialPeriod
    t.isInIntroOfferPeriod = isInIntroOfferPeriod
    t.offerType = rawOfferType.map { Substatus_V1_OfferType(rawValue: Int32(truncatingIfNeeded: $0)) } ?? .unspecified
    t.offerID = offerIdentifier ?? ""
    t.offerDiscountType = offerDiscountType?.wire ?? .unspecified
    t.revocationDateMs = revocationDate ?? 0
    t.revocationReason = revocationReason?.wire ?? .unspecified
    t.revocationType = revocationType?.wire ?? .unspecified
    t.ownership = ownership.wire
    t.isUpgraded = isUpgraded
    t.environment = environment?.wire ?? .unspecified
    t.webOrderLineItemID = webOrderLineItemId ?? ""
    t.quantity = Int32(clamping: quantity)
    t.type = type?.wire ?? .unspecified
    t.appAccountToken = appAccountToken ?? ""
    t.signedDateMs = signedDate ?? 0
    t.appTransactionID = appTransactionId ?? ""
    // On the wire a price is known only with its currency: both, or neither.
    if let price, let currency {
      t.priceMilliunits = price
      t.currency = currency
    }
    return t
  }
}

extension RenewalInfo {
  /// Validates and converts an imported renewal info.
  package init(wire r: Substatus_V1_RenewalInfo, environment: SubscriptionDomain.Environment, field: String) throws(RPCError) {
    guard !r.originalTransactionID.isEmpty else {
      throw invalidArgument("\(field).original_transaction_id", "must not be empty")
    }
    guard !r.productID.isEmpty else { throw invalidArgument("\(field).product_id", "must not be empty") }
    if !r.appTransactionID.isEmpty {
      guard r.appTransactionID.utf8.count <= 64,
        r.appTransactionID.utf8.allSatisfy(SubscriptionDomain.Transaction.isASCIIAlphanumeric)
      else {
        throw invalidArgument("\(field).app_transaction_id", "must be an App Store id (ASCII letters and digits, at most 64)")
      }
    }
    self.init(
      originalTransactionId: r.originalTransactionID, productId: r.productID,
      autoRenewProductId: r.autoRenewProductID.isEmpty ? nil : r.autoRenewProductID,
      autoRenewStatus: r.autoRenewEnabled ? .on : .off,
      expirationIntent: ExpirationIntent(rawValue: Int(r.expirationIntent.rawValue)),
      isInBillingRetryPeriod: r.isInBillingRetryPeriod,
      gracePeriodExpiresDate: r.gracePeriodExpiresDateMs == 0 ? nil : r.gracePeriodExpiresDateMs,
      offerType: OfferType(rawValue: Int(r.offerType.rawValue)),
      offerIdentifier: r.offerID.isEmpty ? nil : r.offerID,
      environment: environment,
      renewalDate: r.renewalDateMs == 0 ? nil : r.renewalDateMs,
      recentSubscriptionStartDate: r.recentSubscriptionStartDateMs == 0 ? nil : r.recentSubscriptionStartDateMs,
      eligibleWinBackOfferIds: r.eligibleWinBackOfferIDs,
      signedDate: r.signedDateMs == 0 ? nil : r.signedDateMs,
      appTransactionId: r.appTransactionID.isEmpty ? nil : r.appTransactionID)
  }

  package var wire: Substatus_V1_RenewalInfo {
    var r = Substatus_V1_RenewalInfo()
    r.originalTransactionID = originalTransactionId
    r.productID = productId
    r.autoRenewProductID = autoRenewProductId ?? ""
    r.autoRenewEnabled = autoRenewStatus == .on
    r.expirationIntent = rawExpirationIntent.map { Substatus_V1_ExpirationIntent(rawValue: Int32(truncatingIfNeeded: $0)) } ?? .unspecified
    r.isInBillingRetryPeriod = isInBillingRetryPeriod
    r.gracePeriodExpiresDateMs = gracePeriodExpiresDate ?? 0
    r.environment = environment?.wire ?? .unspecified
    r.signedDateMs = signedDate ?? 0
    r.renewalDateMs = renewalDate ?? 0
    r.offerType = rawOfferType.map { Substatus_V1_OfferType(rawValue: Int32(truncatingIfNeeded: $0)) } ?? .unspecified
    r.offerID = offerIdentifier ?? ""
    r.eligibleWinBackOfferIDs = eligibleWinBackOfferIds
    r.recentSubscriptionStartDateMs = recentSubscriptionStartDate ?? 0
    r.appTransactionID = appTransactionId ?? ""
    return r
  }
}

extension Substatus_V1_OfferDiscountType {
  package var domain: OfferDiscountType? {
    switch self {
    case .freeTrial: .freeTrial
    case .payAsYouGo: .payAsYouGo
    case .payUpFront: .payUpFront
    case .oneTime: .oneTime
    case .unspecified, .UNRECOGNIZED: nil
    }
  }
}

extension OfferDiscountType {
  package var wire: Substatus_V1_OfferDiscountType {
    switch self {
    case .freeTrial: .freeTrial
    case .payAsYouGo: .payAsYouGo
    case .payUpFront: .payUpFront
    case .oneTime: .oneTime
    }
  }
}

extension Substatus_V1_RevocationReason {
  // The wire numbers are Apple's plus one: proto3 needs 0 for "not set".
  package var domain: RevocationReason? {
    switch self {
    case .other: .other
    case .appIssue: .appIssue
    case .unspecified, .UNRECOGNIZED: nil
    }
  }
}

extension RevocationReason {
  package var wire: Substatus_V1_RevocationReason { self == .appIssue ? .appIssue : .other }
}

extension Substatus_V1_RevocationType {
  package var domain: RevocationType? {
    switch self {
    case .refundFull: .refundFull
    case .refundProrated: .refundProrated
    case .familyRevoke: .familyRevoke
    case .unspecified, .UNRECOGNIZED: nil
    }
  }
}

extension RevocationType {
  package var wire: Substatus_V1_RevocationType {
    switch self {
    case .refundFull: .refundFull
    case .refundProrated: .refundProrated
    case .familyRevoke: .familyRevoke
    }
  }
}

extension Substatus_V1_OwnershipType {
  package var domain: OwnershipType? {
    switch self {
    case .purchased: .purchased
    case .familyShared: .familyShared
    case .assigned: .assigned
    case .unspecified, .UNRECOGNIZED: nil
    }
  }
}

extension OwnershipType {
  package var wire: Substatus_V1_OwnershipType {
    switch self {
    case .purchased: .purchased
    case .familyShared: .familyShared
    case .assigned: .assigned
    }
  }
}

// MARK: Answers

extension GroupStatus {
  package var wire: Substatus_V1_GroupStatus {
    var g = Substatus_V1_GroupStatus()
    g.subscriptionGroupID = subscriptionGroupId
    g.state = state.wire
    g.productID = productId ?? ""
    g.expiresMs = expiresDate ?? 0
    g.gracePeriodExpiresMs = gracePeriodExpiresDate ?? 0
    g.autoRenewEnabled = autoRenewEnabled
    g.autoRenewProductID = autoRenewProductId ?? ""
    g.ownership = ownership?.wire ?? .unspecified
    g.billingIssue = billingIssue
    g.inTrial = inTrial
    g.inIntroOffer = inIntroOffer
    g.originalTransactionID = originalTransactionId ?? ""
    g.billingPlan = billingPlan.wire
    if let commitment {
      var c = Substatus_V1_Commitment()
      c.billingPeriodNumber = Int32(clamping: commitment.billingPeriodNumber)
      c.totalBillingPeriods = Int32(clamping: commitment.totalBillingPeriods)
      c.expiresMs = commitment.expiresDate ?? 0
      c.willRenew = commitment.willRenew
      c.renewalBillingPlan = commitment.renewalBillingPlan.wire
      g.commitment = c
    }
    return g
  }
}

extension Optional where Wrapped == BillingPlanType {
  package var wire: Substatus_V1_BillingPlanType {
    switch self {
    case nil: .unspecified
    case .billedUpfront?: .billedUpfront
    case .monthly?: .monthly
    }
  }
}

extension SubscriptionState {
  package var wire: Substatus_V1_SubscriptionState {
    switch self {
    case .active: .active
    case .gracePeriod: .gracePeriod
    case .billingRetry: .billingRetry
    case .expired: .expired
    case .revoked: .revoked
    case .neverSubscribed: .neverSubscribed
    }
  }
}

extension Entitlement {
  package var wire: Substatus_V1_Entitlement {
    var e = Substatus_V1_Entitlement()
    e.productID = productId
    e.type = type.wire
    e.expiresMs = expiresDate ?? 0
    e.ownership = ownership.wire
    e.transactionID = transactionId
    e.subscriptionGroupID = subscriptionGroupId ?? ""
    return e
  }
}

extension ProductEligibility {
  /// The answer's wire form, as ``write(to:type:)`` writes it.
  package func wire(type: ProductType?) -> Substatus_V1_ProductEligibility {
    var p = Substatus_V1_ProductEligibility()
    write(to: &p, type: type)
    return p
  }

  /// Writes the answer into `p`, a message in place in the response: building a message and
  /// appending it released a copy of the whole message (its strings one by one) per answer.
  package func write(to p: inout Substatus_V1_ProductEligibility, type: ProductType?) {
    p.productID = productId
    p.subscriptionGroupID = subscriptionGroupId ?? ""
    p.introductory = introductory.wire
    p.promotional = promotional.wire
    p.type = type?.wire ?? .unspecified
    if !winBackOffers.isEmpty { p.winBackOffers = winBackOffers.map(\.wire) }
  }
}

extension WinBackOfferEligibility {
  package var wire: Substatus_V1_WinBackOfferEligibility {
    var o = Substatus_V1_WinBackOfferEligibility()
    o.offerID = offerId
    o.eligible = eligible
    o.reason = reason.wire
    o.evidenceTransactionID = evidenceTransactionId ?? ""
    return o
  }
}

extension OfferEligibility {
  package var wire: Substatus_V1_OfferEligibility {
    var o = Substatus_V1_OfferEligibility()
    o.eligible = eligible
    o.reason = reason.wire
    o.evidenceTransactionID = evidenceTransactionId ?? ""
    return o
  }
}

extension EligibilityReason {
  package var wire: Substatus_V1_EligibilityReason {
    switch self {
    case .newCustomer: .newCustomer
    case .lapsedNoIntroUsed: .lapsedNoIntroUsed
    case .introAlreadyUsed: .introAlreadyUsed
    case .activeSubscription: .activeSubscription
    case .inGracePeriod: .inGracePeriod
    case .inBillingRetry: .inBillingRetry
    case .refundedInGroup: .refundedInGroup
    case .noIntroOffer: .noIntroOffer
    case .existingSubscriber: .existingSubscriber
    case .lapsedSubscriber: .lapsedSubscriber
    case .neverSubscribed: .neverSubscribed
    case .notASubscription: .notASubscription
    case .unknownProduct: .unknownProduct
    case .winBackOffered: .winBackOffered
    case .winBackNotOffered: .winBackNotOffered
    case .newCustomerVerified: .newCustomerVerified
    }
  }
}

// MARK: Errors

/// `INVALID_ARGUMENT` naming the field, with a `google.rpc.BadRequest` field violation in
/// `grpc-status-details-bin` (AIP-193).
package func invalidArgument(_ field: String, _ description: String) -> RPCError {
  RPCError.invalidArgument(field: field, description)
}
