import SubstatusJSON

// The decoded payloads of the App Store's signed data (JWS): `JWSTransactionDecodedPayload`,
// `JWSRenewalInfoDecodedPayload` and the `status` of Get All Subscription Statuses, rendered from
// the simulator's state with Apple's field names and types (dates in ms as numbers, price in
// milliunits, `environment` "Sandbox"/"Production").

extension ProductType {
  /// V2 `type`.
  var appleName: String {
    switch self {
    case .autoRenewable: "Auto-Renewable Subscription"
    case .nonRenewing: "Non-Renewing Subscription"
    case .nonConsumable: "Non-Consumable"
    case .consumable: "Consumable"
    }
  }

  /// The Server API's `productType` filter value.
  var historyFilterName: String {
    switch self {
    case .autoRenewable: "AUTO_RENEWABLE"
    case .nonRenewing: "NON_RENEWABLE"
    case .nonConsumable: "NON_CONSUMABLE"
    case .consumable: "CONSUMABLE"
    }
  }
}

extension OfferMode {
  /// V2 `offerDiscountType`.
  var discountType: String {
    switch self {
    case .freeTrial: "FREE_TRIAL"
    case .payAsYouGo: "PAY_AS_YOU_GO"
    case .payUpFront: "PAY_UP_FRONT"
    }
  }
}

/// Storefront country codes (ISO 3166-1 alpha-3) and Apple's storefront ids.
enum Storefront {
  static let ids: [String: String] = [
    "USA": "143441", "FRA": "143442", "DEU": "143443", "GBR": "143444", "ITA": "143450",
    "CAN": "143455", "AUS": "143460", "JPN": "143462", "ESP": "143454", "NLD": "143452",
    "BRA": "143503", "IND": "143467", "CHN": "143465",
  ]
}

extension SimulatorState {
  /// The customer's `appTransactionId` for an app (assigned at the first transaction).
  func appTransactionID(_ bundleID: String, _ userID: String) -> String? {
    appTransactionIDs[Self.receiptKey(bundleID, userID)]
  }

  /// Position of a transaction in modification order.
  func revision(of transaction: Transaction) -> Int { transaction.revision ?? transaction.seq }

  /// `JWSTransactionDecodedPayload` of `transaction`, signed at `signedDate`.
  func transactionPayload(_ transaction: Transaction, signedDate: Int64) -> JSONValue {
    let environment = users[transaction.userID]?.environment ?? .sandbox
    var object = JSONObject()
    object.append("transactionId", .string(transaction.transactionID))
    object.append("originalTransactionId", .string(transaction.originalTransactionID))
    if let web = transaction.webOrderLineItemID {
      object.append("webOrderLineItemId", .string(web))
    }
    object.append("bundleId", .string(transaction.bundleID))
    object.append("productId", .string(transaction.productID))
    if let group = transaction.groupID {
      object.append("subscriptionGroupIdentifier", .string(group))
    }
    object.append("purchaseDate", .integer(transaction.purchaseMs))
    object.append("originalPurchaseDate", .integer(transaction.originalPurchaseMs))
    if let expires = transaction.expiresMs { object.append("expiresDate", .integer(expires)) }
    object.append("quantity", .integer(1))
    object.append("type", .string(transaction.productType.appleName))
    if let token = transaction.appAccountToken { object.append("appAccountToken", .string(token)) }
    object.append("inAppOwnershipType", .string(transaction.ownership.rawValue))
    object.append("signedDate", .integer(signedDate))
    // An upgraded transaction keeps `isUpgraded`; revocation is only a refund or Family Sharing.
    if let revoked = transaction.cancellationMs, !transaction.isUpgraded {
      object.append("revocationReason", .integer(Int(transaction.cancellationReason ?? "0") ?? 0))
      object.append("revocationDate", .integer(revoked))
      let type =
        transaction.revocationType
        ?? (transaction.ownership == .familyShared ? "FAMILY_REVOKE" : "REFUND_FULL")
      object.append("revocationType", .string(type))
      // Apple: present for refunded transactions (a Family Sharing revocation is no refund).
      if type != "FAMILY_REVOKE" {
        object.append("revocationPercentage", .integer(transaction.revocationPercentage ?? 100_000))
      }
    }
    if transaction.isUpgraded { object.append("isUpgraded", .bool(true)) }
    if transaction.isTrialPeriod || transaction.isInIntroOfferPeriod {
      object.append("offerType", .integer(1))
    } else if let promo = transaction.promotionalOfferID {
      object.append("offerType", .integer(2))
      object.append("offerIdentifier", .string(promo))
    } else if let code = transaction.offerCodeRefName {
      object.append("offerType", .integer(3))
      object.append("offerIdentifier", .string(code))
    }
    object.append("environment", .string(environment.receiptValue))
    object.append("transactionReason", .string(transaction.transactionReason ?? "PURCHASE"))
    let storefront = transaction.storefront ?? "USA"
    object.append("storefront", .string(storefront))
    object.append("storefrontId", .string(Storefront.ids[storefront] ?? "143441"))
    object.append("price", .integer(transaction.price ?? 0))
    object.append("currency", .string(transaction.currency ?? "USD"))
    if let discount = transaction.offerDiscountType {
      object.append("offerDiscountType", .string(discount))
      if let period = transaction.offerPeriod { object.append("offerPeriod", .string(period)) }
    }
    if let app = appTransactionID(transaction.bundleID, transaction.userID) {
      object.append("appTransactionId", .string(app))
    }
    // App Store Server API 1.21: monthly subscriptions with a 12-month commitment
    // (https://developer.apple.com/documentation/appstoreserverapi/billingplantype,
    // https://developer.apple.com/documentation/appstoreserverapi/transactioncommitmentinfo).
    if let plan = transaction.billingPlanType { object.append("billingPlanType", .string(plan)) }
    if let commitment = transaction.commitment {
      object.append(
        "commitmentInfo",
        .object([
          "billingPeriodNumber": .integer(commitment.billingPeriodNumber),
          "totalBillingPeriods": .integer(commitment.totalBillingPeriods),
          "commitmentExpiresDate": .integer(commitment.commitmentExpiresMs),
          "commitmentPrice": .integer(commitment.commitmentPrice),
        ]))
    }
    return .object(object)
  }

  /// `JWSRenewalInfoDecodedPayload` of `subscription`, signed at `signedDate`.
  func renewalInfoPayload(_ subscription: Subscription, signedDate: Int64) -> JSONValue {
    let now = self.now
    var object = JSONObject()
    let expired = now >= subscription.expiresMs || subscription.revoked
    if expired,
      let intent = subscription.expirationIntent ?? (subscription.autoRenewEnabled ? nil : "1")
    {
      object.append("expirationIntent", .integer(Int(intent) ?? 5))
    }
    object.append("originalTransactionId", .string(subscription.originalTransactionID))
    object.append("autoRenewProductId", .string(subscription.autoRenewProductID))
    object.append("productId", .string(subscription.productID))
    object.append("autoRenewStatus", .integer(subscription.autoRenewEnabled ? 1 : 0))
    let inRetry = subscription.billingRetrySinceMs != nil && !subscription.renewalStopped
    object.append("isInBillingRetryPeriod", .bool(inRetry))
    if let increase = subscription.priceIncrease {
      object.append("priceIncreaseStatus", .integer(increase.accepted ? 1 : 0))
    }
    if inRetry, let grace = subscription.gracePeriodExpiresMs {
      object.append("gracePeriodExpiresDate", .integer(grace))
    }
    if let pending = subscription.pendingOffer {
      switch pending.kind {
      case .promotional(let id):
        object.append("offerType", .integer(2))
        object.append("offerIdentifier", .string(id))
      case .offerCode(let name):
        object.append("offerType", .integer(3))
        object.append("offerIdentifier", .string(name))
      case .introductory:
        object.append("offerType", .integer(1))
      }
      object.append("offerDiscountType", .string(pending.offer.mode.discountType))
    }
    object.append("signedDate", .integer(signedDate))
    object.append("environment", .string(subscription.environment.receiptValue))
    object.append("recentSubscriptionStartDate", .integer(recentSubscriptionStart(subscription)))
    object.append("renewalDate", .integer(subscription.expiresMs))
    let product = apps[subscription.bundleID]?.products[subscription.autoRenewProductID]
    var renewalPrice = subscription.priceIncrease?.price ?? product?.price ?? 0
    if let pending = subscription.pendingOffer ?? subscription.offerInProgress {
      renewalPrice = pending.offer.price ?? (pending.offer.mode == .freeTrial ? 0 : renewalPrice)
    }
    if let commitment = subscription.commitment,
      commitment.periodNumber < commitment.totalPeriods || commitment.renewalBillingPlan == "MONTHLY"
    {
      renewalPrice = product?.commitmentMonthlyPrice ?? commitment.monthlyPrice
    }
    object.append("renewalPrice", .integer(renewalPrice))
    object.append("currency", .string(product?.currency ?? "USD"))
    let winBack = eligibleWinBackOfferIDs(subscription, at: now)
    if !winBack.isEmpty {
      object.append("eligibleWinBackOfferIds", .array(winBack.map { .string($0) }))
    }
    if let token = subscription.appAccountToken { object.append("appAccountToken", .string(token)) }
    if let app = appTransactionID(subscription.bundleID, subscription.userID) {
      object.append("appTransactionId", .string(app))
    }
    appendCommitment(subscription, product: product, to: &object)
    return .object(object)
  }

  /// `renewalBillingPlanType` and `commitmentInfo` (`RenewalCommitmentInfo`, API 1.21) of a
  /// subscription whose product has a monthly plan with a 12-month commitment. The renewal info's
  /// `autoRenewStatus` is about the next billing period and
  /// `commitmentInfo.commitmentAutoRenewStatus` about the end of the commitment
  /// (https://developer.apple.com/documentation/storekit/managing-lifecycle-of-monthly-subscriptions-with-a-12-month-commitment-).
  func appendCommitment(_ subscription: Subscription, product: Product?, to object: inout JSONObject) {
    guard let commitment = subscription.commitment else {
      if product?.commitmentMonthlyPrice != nil {
        object.append("renewalBillingPlanType", .string("BILLED_UPFRONT"))
      }
      return
    }
    let next = commitment.periodNumber < commitment.totalPeriods ? "MONTHLY" : commitment.renewalBillingPlan
    object.append("renewalBillingPlanType", .string(next))
    let monthly = product?.commitmentMonthlyPrice ?? commitment.monthlyPrice
    let renewalPrice =
      commitment.renewalBillingPlan == "MONTHLY"
      ? monthly * Int64(commitment.totalPeriods) : (product?.price ?? 0)
    object.append(
      "commitmentInfo",
      .object([
        "commitmentAutoRenewProductId": .string(subscription.autoRenewProductID),
        "commitmentAutoRenewStatus": .integer(commitment.autoRenew ? 1 : 0),
        "commitmentRenewalBillingPlanType": .string(commitment.renewalBillingPlan),
        "commitmentRenewalDate": .integer(commitment.expiresMs),
        "commitmentRenewalPrice": .integer(renewalPrice),
      ]))
  }

  /// The earliest start of paid service ignoring lapses shorter than 60 days.
  func recentSubscriptionStart(_ subscription: Subscription) -> Int64 {
    let chain = receiptTransactions(subscription.bundleID, subscription.userID)
      .filter { $0.originalTransactionID == subscription.originalTransactionID }
      .sorted { ($0.purchaseMs, $0.seq) < ($1.purchaseMs, $1.seq) }
    guard var start = chain.last?.purchaseMs else { return subscription.originalPurchaseMs }
    var index = chain.count - 1
    while index > 0 {
      let earlier = chain[index - 1]
      let gap = chain[index].purchaseMs - (earlier.expiresMs ?? earlier.purchaseMs)
      guard gap < 60 * AppleTime.dayMs else { break }
      start = earlier.purchaseMs
      index -= 1
    }
    return start
  }

  /// Apple's subscription `status`: 1 active, 2 expired, 3 billing retry, 4 billing grace
  /// period, 5 revoked.
  func appleStatus(_ subscription: Subscription, at now: Int64) -> Int {
    if subscription.revoked { return 5 }
    if subscription.billingRetrySinceMs != nil && !subscription.renewalStopped {
      if let grace = subscription.gracePeriodExpiresMs, now < grace { return 4 }
      return now < subscription.expiresMs ? 1 : 3
    }
    return now < subscription.expiresMs ? 1 : 2
  }
}
