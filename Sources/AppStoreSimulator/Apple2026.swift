import Foundation
import SubstatusJSON

// What the App Store added in 2025-2026 (App Store Server API 1.16-1.22, Notifications 2.15-2.21):
// monthly subscriptions with a 12-month commitment, `ASSIGNED` ownership, the app download
// (`AppTransaction`, `appTransactionId`), Set App Account Token, Send Consumption Information
// (V2), renewal date extensions, `RESCIND_CONSENT` and `EXTERNAL_PURCHASE_TOKEN`.

extension SimulatorState {
  // MARK: Monthly subscriptions with a 12-month commitment

  /// The number of monthly billing periods of a commitment.
  static let commitmentPeriods = 12

  /// The end of billing period `k` of a commitment that started at `startMs`: `k` calendar months
  /// in UTC (the sandbox compresses a month to 5 minutes, so a commitment lasts an hour, like a
  /// sandbox year).
  func commitmentPeriodEnd(startMs: Int64, period k: Int, environment: StoreEnvironment) -> Int64 {
    environment == .sandbox
      ? startMs + Int64(k) * SubscriptionDuration(count: 1, unit: .month).sandboxMs
      : AppleTime.addingMonths(Int64(k), to: startMs)
  }

  /// Starts a new 12-month commitment at `at`: billing period 1, billed `monthly`
  /// (https://developer.apple.com/documentation/storekit/supporting-monthly-subscriptions-with-a-12-month-commitment:
  /// "each period produces an independent transaction and grants one month of access").
  /// Returns the period's nominal duration.
  mutating func startCommitment(
    _ subscription: inout Subscription, _ transaction: inout Transaction, product: Product,
    monthly: Int64, at: Int64
  ) -> SubscriptionDuration {
    let total = Self.commitmentPeriods
    let expires = commitmentPeriodEnd(startMs: at, period: total, environment: subscription.environment)
    let renewsAgain = subscription.commitment?.autoRenew ?? true
    subscription.commitment = CommitmentState(
      periodNumber: 1, totalPeriods: total, startMs: at, expiresMs: expires, monthlyPrice: monthly,
      autoRenew: renewsAgain, renewalBillingPlan: "MONTHLY")
    stampCommitment(subscription, &transaction)
    return SubscriptionDuration(count: 1, unit: .month)
  }

  /// The next billing period of the current commitment.
  mutating func continueCommitment(_ subscription: inout Subscription, _ transaction: inout Transaction)
    -> SubscriptionDuration
  {
    subscription.commitment?.periodNumber += 1
    stampCommitment(subscription, &transaction)
    return SubscriptionDuration(count: 1, unit: .month)
  }

  /// `billingPlanType` `MONTHLY`, the monthly price and `commitmentInfo` on a commitment's transaction.
  func stampCommitment(_ subscription: Subscription, _ transaction: inout Transaction) {
    guard let commitment = subscription.commitment else { return }
    transaction.billingPlanType = "MONTHLY"
    transaction.price = commitment.monthlyPrice
    transaction.commitment = TransactionCommitment(
      billingPeriodNumber: commitment.periodNumber, totalBillingPeriods: commitment.totalPeriods,
      commitmentExpiresMs: commitment.expiresMs,
      commitmentPrice: commitment.monthlyPrice * Int64(commitment.totalPeriods))
  }

  /// A commitment transaction's `expiresDate`: the end of its billing period on the commitment's
  /// calendar (nil for other transactions, or when a late recovery already passed that end).
  func commitmentTransactionEnd(_ subscription: Subscription, _ transaction: Transaction) -> Int64? {
    guard let info = transaction.commitment, let commitment = subscription.commitment else { return nil }
    let end = commitmentPeriodEnd(
      startMs: commitment.startMs, period: info.billingPeriodNumber, environment: subscription.environment)
    return end > transaction.purchaseMs ? end : nil
  }

  /// The customer chooses what follows the current commitment: another 12-month commitment
  /// (`MONTHLY`) or a year billed at once (`BILLED_UPFRONT`): `commitmentRenewalBillingPlanType`.
  /// Apple's pages do not say which notification reports this change; the simulator sends
  /// `DID_CHANGE_RENEWAL_PREF` without a subtype.
  mutating func setCommitmentRenewalPlan(bundleID: String, userID: String, groupID: String, plan: String)
    throws(SimError)
  {
    _ = try app(bundleID)
    _ = try user(userID)
    var subscription = try requireOwnSubscription(bundleID, userID, group: groupID)
    guard var commitment = subscription.commitment, isActive(subscription, at: now) else {
      throw .conflict("the subscription in group '\(groupID)' is not in a 12-month commitment")
    }
    guard commitment.renewalBillingPlan != plan else {
      throw .conflict("the commitment in group '\(groupID)' already renews as \(plan)")
    }
    commitment.renewalBillingPlan = plan
    subscription.commitment = commitment
    subscriptions[subscription.originalTransactionID] = subscription
    emit(.renewalPreferenceChanged(downgrade: false), subscription, at: now)
  }

  // MARK: The app download (AppTransaction)

  /// The app download of a customer, made at `at` (with version 1.0) unless it exists.
  @discardableResult
  mutating func ensureAppDownload(_ bundleID: String, _ userID: String, at: Int64) -> AppDownload {
    let key = Self.receiptKey(bundleID, userID)
    if let download = appDownloads[key] { return download }
    let id: String
    if let existing = appTransactionIDs[key] {
      id = existing
    } else {
      appTransactionCounter += 1
      id = String(appTransactionCounter)
      appTransactionIDs[key] = id
    }
    let download = AppDownload(
      appTransactionID: id, originalPurchaseMs: at, originalApplicationVersion: "1.0",
      applicationVersion: "1.0")
    appDownloads[key] = download
    return download
  }

  /// The customer downloads (or updates) the app: its `AppTransaction` exists from then on. A
  /// first download sets the original version and date; later calls change the current version
  /// (and the original ones only when given).
  mutating func downloadApp(
    bundleID: String, userID: String, version: String?, originalVersion: String?,
    originalPurchaseMs: Int64?, preorderMs: Int64?
  ) throws(SimError) -> AppDownload {
    _ = try app(bundleID)
    _ = try user(userID)
    let key = Self.receiptKey(bundleID, userID)
    let existed = appDownloads[key] != nil
    var download = ensureAppDownload(bundleID, userID, at: originalPurchaseMs ?? now)
    if let version {
      download.applicationVersion = version
      if !existed { download.originalApplicationVersion = version }
    }
    if let originalVersion { download.originalApplicationVersion = originalVersion }
    if let originalPurchaseMs { download.originalPurchaseMs = originalPurchaseMs }
    if let preorderMs { download.preorderMs = preorderMs }
    appDownloads[key] = download
    return download
  }

  /// `JWSAppTransactionDecodedPayload` of a customer's app download
  /// (https://developer.apple.com/documentation/appstoreserverapi/jwsapptransactiondecodedpayload).
  func appTransactionPayload(bundleID: String, userID: String, signedDate: Int64) -> JSONValue? {
    guard let download = appDownloads[Self.receiptKey(bundleID, userID)],
      let app = apps[bundleID], let user = users[userID]
    else { return nil }
    var object = JSONObject()
    object.append("receiptType", .string(user.environment.receiptValue))
    object.append("appAppleId", .integer(app.appleAppID))
    object.append("bundleId", .string(bundleID))
    object.append("applicationVersion", .string(download.applicationVersion))
    object.append("receiptCreationDate", .integer(signedDate))
    object.append("originalPurchaseDate", .integer(download.originalPurchaseMs))
    object.append("originalApplicationVersion", .string(download.originalApplicationVersion))
    object.append("deviceVerification", .string(Data("sim-\(userID)".utf8).base64EncodedString()))
    object.append("deviceVerificationNonce", .string(UUID().uuidString.lowercased()))
    if let preorder = download.preorderMs { object.append("preorderDate", .integer(preorder)) }
    object.append("appTransactionId", .string(download.appTransactionID))
    object.append("originalPlatform", .string("iOS"))
    object.append("signedDate", .integer(signedDate))
    return .object(object)
  }

  // MARK: Assigned access (ASSIGNED)

  /// An organization or group assigns a product to the customer: a transaction with
  /// `inAppOwnershipType` `ASSIGNED` (https://developer.apple.com/documentation/storekit/transaction/ownershiptype-swift.struct/assigned:
  /// "The user has access to this transaction through an organization"). An assigned
  /// subscription renews as long as the assignment lasts (the organization pays: the customer's
  /// billing failures do not touch it). Refunds, refund requests, consumption information and
  /// Set App Account Token do not apply to it.
  mutating func assign(bundleID: String, userID: String, productID: String) throws(SimError) -> [String] {
    let app = try app(bundleID)
    let user = try user(userID)
    let product = try product(app, productID)
    let now = self.now
    guard product.type == .autoRenewable, let groupID = product.groupID else {
      guard product.type == .nonConsumable else {
        throw .badRequest("only non-consumables and auto-renewable subscriptions are assigned")
      }
      var transaction = newTransaction(
        bundleID: bundleID, userID: userID, product: product, originalTransactionID: nil,
        originalPurchaseMs: nil, purchaseMs: now, expiresMs: nil, ownership: .assigned)
      transaction.price = 0
      transaction = record(transaction)
      pendingEvents.append(
        NotificationEvent(
          kind: .oneTimeCharge, bundleID: bundleID, userID: userID, environment: user.environment,
          originalTransactionID: transaction.originalTransactionID, atMs: now,
          transactionID: transaction.transactionID))
      return [transaction.transactionID]
    }
    let key = Self.subscriptionKey(bundleID, userID, groupID) + "\u{0}ASSIGNED"
    if let id = ownSubscriptionIndex[key], let existing = subscriptions[id], isActive(existing, at: now) {
      throw .conflict("user '\(userID)' already has an assigned subscription in group '\(groupID)'")
    }
    var transaction = newTransaction(
      bundleID: bundleID, userID: userID, product: product,
      originalTransactionID: ownSubscriptionIndex[key],
      originalPurchaseMs: ownSubscriptionIndex[key].flatMap { subscriptions[$0]?.originalPurchaseMs },
      purchaseMs: now, expiresMs: nil, ownership: .assigned)
    let duration = product.duration ?? SubscriptionDuration(count: 1, unit: .month)
    transaction.expiresMs = periodEnd(start: now, duration: duration, environment: user.environment)
    transaction.price = 0
    record(transaction)
    var subscription = Subscription(
      originalTransactionID: transaction.originalTransactionID, bundleID: bundleID, userID: userID,
      groupID: groupID, environment: user.environment, ownership: .assigned, productID: productID,
      autoRenewProductID: productID, expiresMs: transaction.expiresMs!,
      originalPurchaseMs: transaction.originalPurchaseMs, latestTransactionID: transaction.transactionID)
    subscription.renewals = 0
    subscriptions[subscription.originalTransactionID] = subscription
    ownSubscriptionIndex[key] = subscription.originalTransactionID
    emit(ownSubscriptionIndex[key] == transaction.transactionID ? .initialBuy : .resubscribe, subscription, at: now)
    return [transaction.transactionID]
  }

  /// The organization ends the assignment of the subscription in `groupID`: it does not renew
  /// and its period ends now (`EXPIRED`/`VOLUNTARY`).
  mutating func unassign(bundleID: String, userID: String, groupID: String) throws(SimError) -> [String] {
    _ = try app(bundleID)
    _ = try user(userID)
    let key = Self.subscriptionKey(bundleID, userID, groupID) + "\u{0}ASSIGNED"
    guard let id = ownSubscriptionIndex[key], var subscription = subscriptions[id] else {
      throw .notFound("user '\(userID)' has no assigned subscription in group '\(groupID)'")
    }
    let now = self.now
    guard isActive(subscription, at: now) else {
      throw .conflict("the assigned subscription in group '\(groupID)' has ended")
    }
    subscription.autoRenewEnabled = false
    subscription.renewalStopped = true
    subscription.expirationIntent = "1"
    subscription.expiryNotified = true
    subscription.expiresMs = now
    var changed: [String] = []
    if var transaction = transactions[subscription.latestTransactionID], let expires = transaction.expiresMs,
      now < expires
    {
      transaction.expiresMs = now
      update(transaction)
      changed.append(transaction.transactionID)
    }
    subscriptions[id] = subscription
    emit(.expired(intent: "1"), subscription, at: now)
    return changed
  }

  // MARK: Consent, external purchases, extensions, other types

  /// A parent withdraws consent to the app's use by this (child's) account
  /// (https://developer.apple.com/documentation/appstoreservernotifications/notificationtype:
  /// `RESCIND_CONSENT`, notifications 2.19+): a V2 notification with `appData` carrying the
  /// signed `AppTransaction`.
  mutating func rescindConsent(bundleID: String, userID: String) throws(SimError) {
    _ = try app(bundleID)
    var user = try user(userID)
    ensureAppDownload(bundleID, userID, at: now)
    var rescinded = user.consentRescinded ?? []
    if !rescinded.contains(bundleID) { rescinded.append(bundleID) }
    user.consentRescinded = rescinded
    users[userID] = user
    pendingEvents.append(
      NotificationEvent(
        kind: .rescindConsent, bundleID: bundleID, userID: userID, environment: user.environment,
        originalTransactionID: nil, atMs: now))
  }

  /// An External Purchase token event: `UNREPORTED` (a token created but not reported),
  /// `CREATED` or `ACTIVE_TOKEN_REMINDER` (notifications 2.15+). Sandbox tokens' ids start with
  /// `SANDBOX`, as Apple's library expects.
  mutating func externalPurchaseToken(
    bundleID: String, environment: StoreEnvironment, subtype: String, externalPurchaseID: String?
  ) throws(SimError) -> String {
    _ = try app(bundleID)
    let id =
      externalPurchaseID
      ?? (environment == .sandbox ? "SANDBOX_" : "") + UUID().uuidString.lowercased()
    pendingEvents.append(
      NotificationEvent(
        kind: .externalPurchaseToken(subtype: subtype, externalPurchaseID: id, createdMs: now),
        bundleID: bundleID, userID: "", environment: environment, originalTransactionID: nil,
        atMs: now))
    return id
  }

  /// Extend a Subscription Renewal Date: the current period of the subscription ends `days`
  /// later (https://developer.apple.com/documentation/appstoreserverapi/extend-a-subscription-renewal-date;
  /// `RENEWAL_EXTENDED`). Returns the changed transaction.
  mutating func extendRenewal(originalTransactionID: String, days: Int) throws(ServerAPIError) -> Transaction {
    guard var subscription = subscriptions[originalTransactionID],
      var transaction = transactions[subscription.latestTransactionID]
    else { throw .originalTransactionIDNotFound }
    guard subscription.ownership == .purchased else { throw .familySharedExtensionIneligible }
    guard !subscription.revoked, isActive(subscription, at: now) || subscription.billingRetrySinceMs != nil
    else { throw .subscriptionNotEligibleForExtension }
    let extra = Int64(days) * (subscription.environment == .sandbox ? 10 * AppleTime.secondMs : AppleTime.dayMs)
    transaction.expiresMs = (transaction.expiresMs ?? subscription.expiresMs) + extra
    update(transaction)
    subscription.expiresMs = transaction.expiresMs!
    subscriptions[originalTransactionID] = subscription
    for memberID in familyShares[originalTransactionID] ?? [] {
      guard var member = subscriptions[memberID], !member.revoked,
        var copy = transactions[member.latestTransactionID]
      else { continue }
      copy.expiresMs = transaction.expiresMs
      update(copy)
      member.expiresMs = transaction.expiresMs!
      subscriptions[memberID] = member
    }
    emitToFamily(.renewalExtended, subscription, at: now)
    return transaction
  }

  /// Extend Subscription Renewal Dates for All Active Subscribers: every active own subscription
  /// of `productID` in `environment` (of the storefronts given, else all) ends `days` later
  /// (`RENEWAL_EXTENDED` each), then `RENEWAL_EXTENSION`/`SUMMARY`
  /// (https://developer.apple.com/documentation/appstoreserverapi/extend-subscription-renewal-dates-for-all-active-subscribers).
  mutating func extendAll(
    bundleID: String, environment: StoreEnvironment, productID: String, days: Int, storefronts: [String],
    requestIdentifier: String
  ) -> MassExtension {
    let now = self.now
    let targets = subscriptions.values.filter {
      $0.bundleID == bundleID && $0.environment == environment && $0.ownership == .purchased
        && $0.productID == productID && isActive($0, at: now)
        && (storefronts.isEmpty || storefronts.contains(users[$0.userID]?.storefront ?? "USA"))
    }.map(\.originalTransactionID).sorted()
    var succeeded = 0
    var failed = 0
    for id in targets {
      do throws(ServerAPIError) {
        _ = try extendRenewal(originalTransactionID: id, days: days)
        succeeded += 1
      } catch {
        failed += 1
      }
    }
    let mass = MassExtension(
      requestIdentifier: requestIdentifier, productID: productID, storefrontCountryCodes: storefronts,
      succeeded: succeeded, failed: failed, completeMs: now)
    pendingEvents.append(
      NotificationEvent(
        kind: .renewalExtensionSummary(mass), bundleID: bundleID, userID: "", environment: environment,
        originalTransactionID: nil, atMs: now))
    return mass
  }

  /// Set App Account Token: the token of an original transaction's purchase and its renewals
  /// (https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token, API 1.16).
  mutating func setAppAccountToken(originalTransactionID id: String, bundleID: String, token: String)
    throws(ServerAPIError) -> [String]
  {
    guard let target = transactions[id], target.bundleID == bundleID else {
      throw .transactionIDNotFound
    }
    guard target.originalTransactionID == id else { throw .transactionIDIsNotOriginalTransactionID }
    guard target.ownership != .familyShared else { throw .familyTransactionNotSupported }
    guard target.ownership != .assigned else { throw .assignedTransactionNotSupported }
    var changed: [String] = []
    for transaction in receiptTransactions(bundleID, target.userID)
    where transaction.originalTransactionID == id {
      var copy = transaction
      copy.appAccountToken = token
      update(copy)
      changed.append(copy.transactionID)
    }
    if var subscription = subscriptions[id] {
      subscription.appAccountToken = token
      subscriptions[id] = subscription
    }
    return changed
  }
}

/// An answer to Send Consumption Information (V2) the simulator accepted.
struct ConsumptionAnswer: Sendable {
  var bundleID: String
  var environment: StoreEnvironment
  var transactionID: String
  var receivedMs: Int64
  /// Whether a refund request of that transaction was open and at most 12 hours old.
  var withinRequestWindow: Bool
  var body: JSONValue

  var json: JSONValue {
    var object = JSONObject()
    object.append("bundle_id", .string(bundleID))
    object.append("environment", .string(environment.rawValue))
    object.append("transaction_id", .string(transactionID))
    object.append("received_ms", .integer(receivedMs))
    object.append("within_request_window", .bool(withinRequestWindow))
    object.append("body", body)
    return .object(object)
  }
}

/// Checks a Send Consumption Information (V2) body as Apple documents it
/// (https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest,
/// https://developer.apple.com/documentation/appstoreserverapi/refundpreference,
/// https://developer.apple.com/documentation/appstoreserverapi/consumptionpercentage):
/// `customerConsented` must be `true` (else `InvalidCustomerConsentedError`), `sampleContentProvided`
/// a Boolean, `deliveryStatus` one of Apple's values, `refundPreference` one of Apple's values;
/// `consumptionPercentage` 0...100000 milliunits, never for an auto-renewable subscription (Apple
/// computes it from elapsed time: `ConsumptionPercentageAutoRenewableSubscriptionError`), 0 when
/// `deliveryStatus` is not `DELIVERED` (`UndeliveredConsumptionPercentageNonZeroError`), and with
/// `GRANT_PRORATED` required for another product, above 0 and below 100000.
func validateConsumptionRequest(_ body: JSONObject, productType: ProductType) throws(ServerAPIError) {
  guard body["customerConsented"]?.boolValue == true else { throw .invalidCustomerConsented }
  guard body["sampleContentProvided"]?.boolValue != nil else { throw .invalidSampleContentProvided }
  let statuses = [
    "DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE",
    "UNDELIVERED_OTHER",
  ]
  guard let status = body["deliveryStatus"]?.stringValue, statuses.contains(status) else {
    throw .invalidDeliveryStatus
  }
  var preference: String?
  if let value = body["refundPreference"], !value.isNull {
    guard let text = value.stringValue, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(text) else {
      throw .invalidRefundPreference
    }
    preference = text
  }
  if let value = body["consumptionPercentage"], !value.isNull {
    guard let percentage = value.int64Value, (0...100_000).contains(percentage) else {
      throw .invalidConsumptionPercentage
    }
    if productType == .autoRenewable { throw .consumptionPercentageAutoRenewableSubscription }
    if status != "DELIVERED" && percentage != 0 { throw .undeliveredConsumptionPercentageNonZero }
    if preference == "GRANT_PRORATED" && !(1..<100_000).contains(percentage) { throw .invalidConsumptionPercentage }
  } else if preference == "GRANT_PRORATED" && productType != .autoRenewable {
    throw .invalidConsumptionPercentage
  }
}

extension ServerAPIError {
  static let originalTransactionIDNotFound = ServerAPIError(
    httpStatus: 404, errorCode: 4_040_005, errorMessage: "Original transaction id not found.")
  static let appTransactionDoesNotExist = ServerAPIError(
    httpStatus: 404, errorCode: 4_040_019, errorMessage: "App transaction does not exist.")
  static let invalidAppAccountToken = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_183, errorMessage: "Invalid app account token: not a UUID.")
  static let familyTransactionNotSupported = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_185,
    errorMessage: "The transaction is family-shared, which this endpoint does not support.")
  static let transactionIDIsNotOriginalTransactionID = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_187, errorMessage: "The transaction id is not an original transaction id.")
  /// `InvalidAssignedTransactionNotSupportedError` (API 1.22): Apple's page names the error but
  /// its numeric code was not in the reference corpus; the simulator answers 4000188.
  static let assignedTransactionNotSupported = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_188,
    errorMessage: "The transaction is assigned by an organization or group, which this endpoint does not support.")
  static let invalidCustomerConsented = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_035, errorMessage: "Invalid customerConsented: must be true.")
  static let invalidDeliveryStatus = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_036, errorMessage: "Invalid deliveryStatus.")
  static let invalidSampleContentProvided = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_041, errorMessage: "Invalid sampleContentProvided.")
  /// No dedicated code in Apple's library for these: the general bad request.
  static let invalidConsumptionPercentage = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_000, errorMessage: "Invalid consumptionPercentage.")
  /// `ConsumptionPercentageAutoRenewableSubscriptionError` and
  /// `UndeliveredConsumptionPercentageNonZeroError` (API 1.19): Apple's pages name the errors but
  /// not their numeric codes, which Apple's libraries do not list either; the general bad request.
  static let consumptionPercentageAutoRenewableSubscription = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_000,
    errorMessage: "consumptionPercentage is unsupported for auto-renewable subscription transactions.")
  static let undeliveredConsumptionPercentageNonZero = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_000,
    errorMessage: "consumptionPercentage must be 0 for the provided deliveryStatus.")
  static let invalidRefundPreference = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_000, errorMessage: "Invalid refundPreference.")
  static let invalidProductID = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_023, errorMessage: "Invalid product id.")
  static let invalidStorefrontCountryCode = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_028, errorMessage: "Invalid storefront country code.")
  static let invalidExtendByDays = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_009, errorMessage: "Invalid extendByDays: 1...90.")
  static let invalidExtendReasonCode = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_010, errorMessage: "Invalid extendReasonCode: 0...3.")
  static let invalidRequestIdentifier = ServerAPIError(
    httpStatus: 400, errorCode: 4_000_011, errorMessage: "Invalid requestIdentifier.")
  static let familySharedExtensionIneligible = ServerAPIError(
    httpStatus: 403, errorCode: 4_030_007,
    errorMessage: "Family-shared subscriptions are extended through the purchaser's.")
  static let subscriptionNotEligibleForExtension = ServerAPIError(
    httpStatus: 403, errorCode: 4_030_004, errorMessage: "The subscription is not active.")
  static let rateLimitExceeded = ServerAPIError(
    httpStatus: 429, errorCode: 4_290_000, errorMessage: "Rate limit exceeded.")
}
