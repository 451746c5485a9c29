import Foundation

/// A failure of a control operation: an HTTP status and a message naming the field or resource.
struct SimError: Error, Sendable {
  var status: Int
  var message: String
  static func badRequest(_ message: String) -> SimError { SimError(status: 400, message: message) }
  static func notFound(_ message: String) -> SimError { SimError(status: 404, message: message) }
  static func conflict(_ message: String) -> SimError { SimError(status: 409, message: message) }
}

/// What happened to a subscription, independent of the notification version that reports it.
/// V1 maps these to `notification_type` (``NotificationFormatV1``); V2 (a later issue) maps them
/// to `notificationType` + `subtype`.
enum SubscriptionEventKind: Sendable, Equatable {
  case initialBuy
  case resubscribe
  case renewed
  case autoRenewEnabled
  case autoRenewDisabled
  case upgraded
  case crossgradedImmediately
  case renewalPreferenceChanged(downgrade: Bool)
  case failedToRenew(inGracePeriod: Bool)
  case recovered
  case refunded(autoRenewable: Bool)
  case familyAccessRevoked
  case offerRedeemedForNextRenewal
  case expired(intent: String)
  /// The billing grace period ended while billing retry goes on (V2 only).
  case gracePeriodExpired
  /// A consumable, non-consumable or non-renewing purchase (V2 `ONE_TIME_CHARGE` only).
  case oneTimeCharge
  /// Requested through Request a Test Notification (V2 `TEST` only).
  case test
  /// The customer was told of a price increase of the renewal product: consent pending (V2
  /// `PRICE_INCREASE`/`PENDING`, V1 `PRICE_INCREASE_CONSENT`) or accepted, or one that needs no
  /// consent (`PRICE_INCREASE`/`ACCEPTED`; V1 nothing).
  case priceIncrease(accepted: Bool)
  /// The customer asked for a refund of a consumable or an auto-renewable subscription
  /// (`CONSUMPTION_REQUEST` with `consumptionRequestReason`).
  case consumptionRequest(reason: String)
  /// The App Store declined a refund request (V2 `REFUND_DECLINED` only).
  case refundDeclined
  /// The App Store reversed a refund it had granted (V2 `REFUND_REVERSED` only).
  case refundReversed
  /// A parent withdrew consent to a child's use of the app (V2 `RESCIND_CONSENT`, with `appData`).
  case rescindConsent
  /// An External Purchase token event (V2 `EXTERNAL_PURCHASE_TOKEN` with `externalPurchaseToken`;
  /// subtype `UNREPORTED`, `CREATED` or `ACTIVE_TOKEN_REMINDER`).
  case externalPurchaseToken(subtype: String, externalPurchaseID: String, createdMs: Int64)
  /// The developer extended one subscription's renewal date (V2 `RENEWAL_EXTENDED`).
  case renewalExtended
  /// Any other V2 type the control API was told to send about a transaction (the Advanced
  /// Commerce types `METADATA_UPDATE`, `MIGRATION`, `PRICE_CHANGE`, `RENEWAL_EXTENSION`…).
  case custom(type: String, subtype: String?)
  /// A renewal date extension for all active subscribers of a product finished (V2
  /// `RENEWAL_EXTENSION`/`SUMMARY`, with `summary` instead of `data`).
  case renewalExtensionSummary(MassExtension)
}

/// One Extend Subscription Renewal Dates for All Active Subscribers request, done at once.
struct MassExtension: Sendable, Equatable {
  var requestIdentifier: String
  var productID: String
  var storefrontCountryCodes: [String]
  var succeeded: Int
  var failed: Int
  var completeMs: Int64
}

/// One event to notify, rendered when it happens (its receipt reflects that instant).
struct NotificationEvent: Sendable {
  var kind: SubscriptionEventKind
  var bundleID: String
  var userID: String
  var environment: StoreEnvironment
  var originalTransactionID: String?
  var atMs: Int64
  /// The transaction the event is about (V2 `signedTransactionInfo`): the subscription's
  /// newest at the event, the refunded one, or the one-time purchase.
  var transactionID: String? = nil
}

/// A requested offer on a purchase.
enum OfferRequest: Sendable, Equatable {
  case introductory
  case promotional(String)
  case offerCode(String)
}

/// The simulated clock: `now = base + (wall elapsed) × scale`; scale 0 is a frozen clock that
/// moves only when told to.
struct SimClock: Sendable {
  var baseMs: Int64
  var baseWall: ContinuousClock.Instant
  var scale: Double

  init(startMs: Int64, scale: Double) {
    baseMs = startMs
    baseWall = ContinuousClock.now
    self.scale = scale
  }

  func now() -> Int64 {
    guard scale > 0 else { return baseMs }
    let elapsed = ContinuousClock.now - baseWall
    let elapsedMs =
      Double(elapsed.components.seconds) * 1000
      + Double(elapsed.components.attoseconds) / 1e15
    return baseMs + Int64(elapsedMs * scale)
  }

  mutating func set(_ ms: Int64) {
    baseMs = ms
    baseWall = ContinuousClock.now
  }
}

/// The whole simulated App Store: apps, users, transactions, subscriptions. Pure state; time
/// comes from its clock; ids from counters. Owned by ``AppStoreSimulator`` behind a mutex.
struct SimulatorState: Sendable {
  var clock: SimClock
  var apps: [String: App] = [:]
  var users: [String: User] = [:]
  var transactions: [String: Transaction] = [:]
  /// Transaction ids per `bundle \0 user`, in creation order.
  var transactionsByReceipt: [String: [String]] = [:]
  var subscriptions: [String: Subscription] = [:] {
    // Any change may move a subscription's next event (SE-0268: without `oldValue` this does not
    // copy the dictionary on an in-place change).
    didSet { earliestEventMs = nil }
  }
  /// The earliest ``nextEvent(_:)`` of all subscriptions (`Int64.max`: none) as ``advance(to:)``
  /// last found it, while `subscriptions` has not changed since; `nil`: unknown. Lets the
  /// `advance` every control call starts and ends with skip its scan of every subscription when
  /// nothing is due (the realtime requests of a performance test, thousands of them, change
  /// nothing).
  private(set) var earliestEventMs: Int64?
  /// `bundle \0 user \0 group` → original transaction id of the user's own subscription.
  var ownSubscriptionIndex: [String: String] = [:]
  /// Organizer's original transaction id → members' original transaction ids.
  var familyShares: [String: [String]] = [:]
  var nextSeq = 1
  var transactionCounter: Int64
  var webOrderCounter: Int64
  var userCounter = 0
  var pendingEvents: [NotificationEvent] = []
  /// Counts transaction creations and changes (``Transaction/revision``).
  var revisionCounter = 0
  /// `appTransactionId` per `bundle \0 user`, assigned at the app's download or the first
  /// transaction.
  var appTransactionIDs: [String: String] = [:]
  var appTransactionCounter: Int64
  /// The app downloads (`AppTransaction`) per `bundle \0 user`.
  var appDownloads: [String: AppDownload] = [:]

  static let maxFamilyMembers = 5
  static let sandboxMaxRenewals = 6

  init(startMs: Int64, timeScale: Double, idBase: Int64) {
    clock = SimClock(startMs: startMs, scale: timeScale)
    transactionCounter = idBase
    webOrderCounter = idBase / 10
    appTransactionCounter = idBase / 100 * 7
  }

  var now: Int64 { clock.now() }

  static func receiptKey(_ bundleID: String, _ userID: String) -> String {
    bundleID + "\u{0}" + userID
  }
  static func subscriptionKey(_ bundleID: String, _ userID: String, _ groupID: String) -> String {
    bundleID + "\u{0}" + userID + "\u{0}" + groupID
  }

  // MARK: Lookups

  func app(_ bundleID: String) throws(SimError) -> App {
    guard let app = apps[bundleID] else { throw .notFound("app '\(bundleID)' is not registered") }
    return app
  }

  func user(_ userID: String) throws(SimError) -> User {
    guard let user = users[userID], !user.deleted else {
      throw .notFound("user '\(userID)' does not exist")
    }
    return user
  }

  func product(_ app: App, _ productID: String) throws(SimError) -> Product {
    guard let product = app.products[productID] else {
      throw .notFound("product '\(productID)' is not in app '\(app.bundleID)'")
    }
    return product
  }

  func ownSubscription(_ bundleID: String, _ userID: String, group: String) -> Subscription? {
    ownSubscriptionIndex[Self.subscriptionKey(bundleID, userID, group)].flatMap {
      subscriptions[$0]
    }
  }

  func requireOwnSubscription(_ bundleID: String, _ userID: String, group: String) throws(SimError)
    -> Subscription
  {
    guard let subscription = ownSubscription(bundleID, userID, group: group) else {
      throw .notFound("user '\(userID)' has no subscription in group '\(group)' of '\(bundleID)'")
    }
    return subscription
  }

  func receiptTransactions(_ bundleID: String, _ userID: String) -> [Transaction] {
    (transactionsByReceipt[Self.receiptKey(bundleID, userID)] ?? []).compactMap { transactions[$0] }
  }

  /// Ids of transactions created at or after sequence number `seq`, in creation order.
  func transactions(since seq: Int) -> [String] {
    transactions.values.filter { $0.seq >= seq }.sorted { $0.seq < $1.seq }.map(\.transactionID)
  }

  func isActive(_ subscription: Subscription, at now: Int64) -> Bool {
    !subscription.revoked && now < subscription.expiresMs
  }

  func periodEnd(start: Int64, duration: SubscriptionDuration, environment: StoreEnvironment)
    -> Int64
  {
    environment == .sandbox ? start + duration.sandboxMs : duration.end(from: start)
  }

  /// Billing retry lasts 60 days; the sandbox compresses it like a month (30 days → 5 minutes).
  func billingRetryMs(_ environment: StoreEnvironment) -> Int64 {
    environment == .sandbox ? 10 * AppleTime.minuteMs : 60 * AppleTime.dayMs
  }

  /// Grace period length; the sandbox compresses days like a month (30 days → 5 minutes).
  func gracePeriodMs(days: Int, _ environment: StoreEnvironment) -> Int64 {
    environment == .sandbox ? Int64(days) * 10 * AppleTime.secondMs : Int64(days) * AppleTime.dayMs
  }

  // MARK: Mutations: helpers

  mutating func emit(
    _ kind: SubscriptionEventKind, _ subscription: Subscription, at: Int64
  ) {
    pendingEvents.append(
      NotificationEvent(
        kind: kind, bundleID: subscription.bundleID, userID: subscription.userID,
        environment: subscription.environment,
        originalTransactionID: subscription.originalTransactionID, atMs: at,
        transactionID: subscription.latestTransactionID))
  }

  /// Emits `kind` for `subscription` and each family share of it that is not revoked.
  mutating func emitToFamily(_ kind: SubscriptionEventKind, _ subscription: Subscription, at: Int64)
  {
    emit(kind, subscription, at: at)
    for memberID in familyShares[subscription.originalTransactionID] ?? [] {
      guard let member = subscriptions[memberID], !member.revoked else { continue }
      emit(kind, member, at: at)
    }
  }

  mutating func nextTransactionID() -> String {
    transactionCounter += 1
    return String(transactionCounter)
  }

  mutating func nextWebOrderID() -> String {
    webOrderCounter += 1
    return String(webOrderCounter)
  }

  @discardableResult
  mutating func record(_ transaction: Transaction) -> Transaction {
    var transaction = transaction
    revisionCounter += 1
    transaction.revision = revisionCounter
    transactions[transaction.transactionID] = transaction
    let key = Self.receiptKey(transaction.bundleID, transaction.userID)
    transactionsByReceipt[key, default: []].append(transaction.transactionID)
    ensureAppDownload(transaction.bundleID, transaction.userID, at: transaction.purchaseMs)
    return transaction
  }

  /// Stores a changed transaction; it moves to the end of the modification order.
  mutating func update(_ transaction: Transaction) {
    var transaction = transaction
    revisionCounter += 1
    transaction.revision = revisionCounter
    transactions[transaction.transactionID] = transaction
  }

  mutating func newTransaction(
    bundleID: String, userID: String, product: Product, originalTransactionID: String?,
    originalPurchaseMs: Int64?, purchaseMs: Int64, expiresMs: Int64?,
    ownership: Ownership = .purchased
  ) -> Transaction {
    let id = nextTransactionID()
    defer { nextSeq += 1 }
    var transaction = Transaction(
      seq: nextSeq, transactionID: id, originalTransactionID: originalTransactionID ?? id,
      webOrderLineItemID: product.type == .autoRenewable ? nextWebOrderID() : nil,
      bundleID: bundleID, userID: userID, productID: product.productID, productType: product.type,
      groupID: product.groupID, purchaseMs: purchaseMs,
      originalPurchaseMs: originalPurchaseMs ?? purchaseMs, expiresMs: expiresMs,
      ownership: ownership)
    transaction.price = product.price ?? 0
    transaction.currency = product.currency ?? "USD"
    transaction.storefront = users[userID]?.storefront ?? "USA"
    if let original = originalTransactionID {
      transaction.appAccountToken = subscriptions[original]?.appAccountToken
    }
    return transaction
  }

  /// Applies the next period of `subscription`'s offer in progress (if any) to `transaction`
  /// and returns the period's duration.
  mutating func applyOfferPeriod(
    _ subscription: inout Subscription, _ transaction: inout Transaction, product: Product
  ) -> SubscriptionDuration {
    var duration = product.duration ?? SubscriptionDuration(count: 1, unit: .month)
    guard var offer = subscription.offerInProgress, offer.periodsLeft > 0 else {
      subscription.offerInProgress = nil
      return duration
    }
    if offer.offer.mode != .payAsYouGo, let offerDuration = offer.offer.duration {
      duration = offerDuration
    }
    transaction.offerDiscountType = offer.offer.mode.discountType
    transaction.offerPeriod =
      offer.offer.mode == .payAsYouGo
      ? SubscriptionDuration(
        count: duration.count * Int64(offer.offer.periods), unit: duration.unit
      ).description
      : duration.description
    transaction.price =
      offer.offer.price ?? (offer.offer.mode == .freeTrial ? 0 : transaction.price)
    switch offer.kind {
    case .introductory:
      if offer.offer.mode == .freeTrial {
        transaction.isTrialPeriod = true
      } else {
        transaction.isInIntroOfferPeriod = true
      }
    case .promotional(let id): transaction.promotionalOfferID = id
    case .offerCode(let name): transaction.offerCodeRefName = name
    }
    offer.periodsLeft -= 1
    subscription.offerInProgress = offer.periodsLeft > 0 ? offer : nil
    return duration
  }

  // MARK: Registration

  mutating func register(_ app: App) {
    apps[app.bundleID] = app
  }

  mutating func createUser(id: String?, environment: StoreEnvironment) throws(SimError) -> User {
    let userID: String
    if let id {
      guard users[id] == nil else { throw .conflict("user '\(id)' already exists") }
      userID = id
    } else {
      repeat {
        userCounter += 1
      } while users["user-\(userCounter)"] != nil
      userID = "user-\(userCounter)"
    }
    let user = User(userID: userID, environment: environment, createdMs: now)
    users[userID] = user
    return user
  }

  // MARK: Purchases

  /// Buys `productID`. Auto-renewables start (INITIAL_BUY), resubscribe after a lapse
  /// (INTERACTIVE_RENEWAL), or — when the user is subscribed in the group already — change
  /// plan (see ``changeProduct``) or redeem a promotional offer for the next renewal.
  mutating func purchase(
    bundleID: String, userID: String, productID: String, offer: OfferRequest?,
    appAccountToken: String? = nil, billingPlan: String? = nil
  ) throws(SimError) -> [String] {
    let app = try app(bundleID)
    let user = try user(userID)
    let product = try product(app, productID)
    let now = self.now
    if billingPlan == "MONTHLY" {
      guard product.commitmentMonthlyPrice != nil else {
        throw .conflict("product '\(productID)' has no monthly billing plan with a 12-month commitment")
      }
      guard offer == nil else {
        throw .conflict("the simulator does not model offers on a monthly plan with a commitment")
      }
    }
    guard product.type == .autoRenewable, let groupID = product.groupID else {
      guard offer == nil else {
        throw .badRequest("offers apply only to auto-renewable subscriptions")
      }
      if product.type == .nonConsumable,
        receiptTransactions(bundleID, userID).contains(where: {
          $0.productID == productID && $0.cancellationMs == nil
        })
      {
        throw .conflict("user '\(userID)' already owns non-consumable '\(productID)'")
      }
      var oneTime = newTransaction(
        bundleID: bundleID, userID: userID, product: product, originalTransactionID: nil,
        originalPurchaseMs: nil, purchaseMs: now, expiresMs: nil)
      oneTime.appAccountToken = appAccountToken
      let transaction = record(oneTime)
      pendingEvents.append(
        NotificationEvent(
          kind: .oneTimeCharge, bundleID: bundleID, userID: userID, environment: user.environment,
          originalTransactionID: transaction.originalTransactionID, atMs: now,
          transactionID: transaction.transactionID))
      return [transaction.transactionID]
    }
    let existing = ownSubscription(bundleID, userID, group: groupID)
    if let existing, isActive(existing, at: now) || existing.billingRetrySinceMs != nil {
      guard existing.commitment == nil, billingPlan != "MONTHLY" else {
        throw .conflict(
          "the simulator does not model plan changes into or during a 12-month commitment (group '\(groupID)')")
      }
      if case .promotional(let id)? = offer, existing.productID == productID {
        guard let promo = product.promotionalOffers[id] else {
          throw .notFound("product '\(productID)' has no promotional offer '\(id)'")
        }
        var subscription = existing
        subscription.pendingOffer = OfferInProgress(
          kind: .promotional(id), offer: promo,
          periodsLeft: promo.mode == .payAsYouGo ? promo.periods : 1)
        subscription.autoRenewEnabled = true
        subscriptions[subscription.originalTransactionID] = subscription
        emit(.offerRedeemedForNextRenewal, subscription, at: now)
        return []
      }
      guard existing.productID != productID || existing.autoRenewProductID != productID else {
        throw .conflict("user '\(userID)' is already subscribed to '\(productID)'")
      }
      guard offer == nil else {
        throw .conflict("offers cannot be redeemed on a plan change within group '\(groupID)'")
      }
      return try changeProduct(bundleID: bundleID, userID: userID, productID: productID)
    }

    let offerInProgress = try resolveOffer(offer, app: app, product: product, userID: userID)
    var subscription: Subscription
    let kind: SubscriptionEventKind
    var transaction: Transaction
    if var lapsed = existing {
      transaction = newTransaction(
        bundleID: bundleID, userID: userID, product: product,
        originalTransactionID: lapsed.originalTransactionID,
        originalPurchaseMs: lapsed.originalPurchaseMs, purchaseMs: now, expiresMs: nil)
      lapsed.productID = productID
      lapsed.autoRenewProductID = productID
      lapsed.autoRenewEnabled = true
      lapsed.renewals = 0
      lapsed.billingRetrySinceMs = nil
      lapsed.gracePeriodExpiresMs = nil
      lapsed.expirationIntent = nil
      lapsed.renewalStopped = false
      lapsed.revoked = false
      lapsed.pendingOffer = nil
      lapsed.graceExpiryNotified = nil
      lapsed.expiryNotified = nil
      lapsed.appAccountToken = appAccountToken ?? lapsed.appAccountToken
      subscription = lapsed
      transaction.appAccountToken = subscription.appAccountToken
      kind = .resubscribe
    } else {
      transaction = newTransaction(
        bundleID: bundleID, userID: userID, product: product, originalTransactionID: nil,
        originalPurchaseMs: nil, purchaseMs: now, expiresMs: nil)
      subscription = Subscription(
        originalTransactionID: transaction.originalTransactionID, bundleID: bundleID,
        userID: userID, groupID: groupID, environment: user.environment, ownership: .purchased,
        productID: productID, autoRenewProductID: productID, expiresMs: now,
        originalPurchaseMs: now, latestTransactionID: transaction.transactionID)
      subscription.appAccountToken = appAccountToken
      transaction.appAccountToken = appAccountToken
      ownSubscriptionIndex[Self.subscriptionKey(bundleID, userID, groupID)] =
        transaction.originalTransactionID
      kind = .initialBuy
    }
    subscription.offerInProgress = offerInProgress
    subscription.commitment = nil
    var duration = applyOfferPeriod(&subscription, &transaction, product: product)
    if billingPlan == "MONTHLY", let monthly = product.commitmentMonthlyPrice {
      duration = startCommitment(&subscription, &transaction, product: product, monthly: monthly, at: now)
    } else if product.commitmentMonthlyPrice != nil {
      transaction.billingPlanType = "BILLED_UPFRONT"
    }
    transaction.expiresMs = periodEnd(start: now, duration: duration, environment: user.environment)
    if let end = commitmentTransactionEnd(subscription, transaction) { transaction.expiresMs = end }
    subscription.expiresMs = transaction.expiresMs!
    subscription.latestTransactionID = transaction.transactionID
    record(transaction)
    subscriptions[subscription.originalTransactionID] = subscription
    emit(kind, subscription, at: now)
    var changed = [transaction.transactionID]
    if product.familyShareable {
      changed += shareWithFamily(subscription, organizer: user, kind: .initialBuy, at: now)
    }
    return changed
  }

  func resolveOffer(_ request: OfferRequest?, app: App, product: Product, userID: String)
    throws(SimError) -> OfferInProgress?
  {
    guard let request, let groupID = product.groupID else { return nil }
    let history = receiptTransactions(app.bundleID, userID).filter { $0.groupID == groupID }
    switch request {
    case .introductory:
      guard let intro = product.introductoryOffer else {
        throw .conflict("product '\(product.productID)' has no introductory offer")
      }
      if let used = history.first(where: { $0.isTrialPeriod || $0.isInIntroOfferPeriod }) {
        throw .conflict(
          "user '\(userID)' is not eligible for an introductory offer in group '\(groupID)' "
            + "(used in transaction \(used.transactionID))")
      }
      return OfferInProgress(
        kind: .introductory, offer: intro,
        periodsLeft: intro.mode == .payAsYouGo ? intro.periods : 1)
    case .promotional(let id):
      guard let promo = product.promotionalOffers[id] else {
        throw .notFound("product '\(product.productID)' has no promotional offer '\(id)'")
      }
      guard !history.isEmpty else {
        throw .conflict(
          "user '\(userID)' is not eligible for promotional offer '\(id)': promotional offers are "
            + "for existing or lapsed subscribers of group '\(groupID)'")
      }
      return OfferInProgress(
        kind: .promotional(id), offer: promo,
        periodsLeft: promo.mode == .payAsYouGo ? promo.periods : 1)
    case .offerCode(let name):
      guard let code = product.offerCodes[name] else {
        throw .notFound("product '\(product.productID)' has no offer code '\(name)'")
      }
      return OfferInProgress(
        kind: .offerCode(name), offer: code,
        periodsLeft: code.mode == .payAsYouGo ? code.periods : 1)
    }
  }

  /// Upgrade (immediate; the current transaction is marked `is_upgraded` and cancelled),
  /// crossgrade of the same duration (immediate), downgrade or crossgrade of another duration
  /// (at the next renewal, through `auto_renew_product_id`).
  /// - Parameter appAccountToken: the token of the change's purchase options: it applies to the
  ///   upcoming renewal, so the subscription (its renewal info, its next transactions) carries it
  ///   while the current transaction keeps its own, as Apple's `JWSRenewalInfoDecodedPayload`
  ///   `appAccountToken` documents
  ///   (https://developer.apple.com/documentation/appstoreserverapi/jwsrenewalinfodecodedpayload).
  mutating func changeProduct(
    bundleID: String, userID: String, productID: String, appAccountToken: String? = nil
  ) throws(SimError) -> [String] {
    let app = try app(bundleID)
    _ = try user(userID)
    let target = try product(app, productID)
    guard target.type == .autoRenewable, let groupID = target.groupID else {
      throw .badRequest("'\(productID)' is not an auto-renewable subscription")
    }
    var subscription = try requireOwnSubscription(bundleID, userID, group: groupID)
    let now = self.now
    guard isActive(subscription, at: now) else {
      throw .conflict("the subscription in group '\(groupID)' is not active; purchase instead")
    }
    guard subscription.commitment == nil else {
      throw .conflict(
        "the simulator does not model plan changes during a 12-month commitment (group '\(groupID)')")
    }
    let current = try product(app, subscription.productID)
    // A price increase is of the renewal product; another renewal product has its own price.
    subscription.priceIncrease = nil
    if productID == subscription.productID {
      guard subscription.autoRenewProductID != productID else {
        throw .conflict("user '\(userID)' is already subscribed to '\(productID)'")
      }
      subscription.autoRenewProductID = productID
      subscriptions[subscription.originalTransactionID] = subscription
      emit(.renewalPreferenceChanged(downgrade: false), subscription, at: now)
      return []
    }
    guard subscription.autoRenewProductID != productID else {
      throw .conflict("the subscription in group '\(groupID)' already renews to '\(productID)'")
    }
    if let appAccountToken {
      subscription.appAccountToken = appAccountToken
      subscriptions[subscription.originalTransactionID]?.appAccountToken = appAccountToken
    }
    let immediate =
      target.level < current.level
      || (target.level == current.level && target.duration == current.duration)
    guard immediate else {
      subscription.autoRenewProductID = productID
      subscription.autoRenewEnabled = true
      subscriptions[subscription.originalTransactionID] = subscription
      // A downgrade or a crossgrade to another duration (both take effect at renewal).
      emit(.renewalPreferenceChanged(downgrade: true), subscription, at: now)
      for memberID in familyShares[subscription.originalTransactionID] ?? [] {
        guard var member = subscriptions[memberID], !member.revoked else { continue }
        member.autoRenewProductID = productID
        subscriptions[memberID] = member
      }
      return []
    }
    let kind: SubscriptionEventKind =
      target.level < current.level ? .upgraded : .crossgradedImmediately
    var changed = upgradeTransaction(&subscription, to: target, at: now)
    subscriptions[subscription.originalTransactionID] = subscription
    emit(kind, subscription, at: now)
    for memberID in familyShares[subscription.originalTransactionID] ?? [] {
      guard var member = subscriptions[memberID], !member.revoked else { continue }
      changed += upgradeTransaction(&member, to: target, at: now, mirroring: subscription)
      subscriptions[memberID] = member
      emit(kind, member, at: now)
    }
    return changed
  }

  private mutating func upgradeTransaction(
    _ subscription: inout Subscription, to target: Product, at now: Int64,
    mirroring organizer: Subscription? = nil
  ) -> [String] {
    var changed: [String] = []
    if var old = transactions[subscription.latestTransactionID] {
      old.isUpgraded = true
      old.cancellationMs = now
      update(old)
      changed.append(old.transactionID)
    }
    var transaction = newTransaction(
      bundleID: subscription.bundleID, userID: subscription.userID, product: target,
      originalTransactionID: subscription.originalTransactionID,
      originalPurchaseMs: subscription.originalPurchaseMs, purchaseMs: now, expiresMs: nil,
      ownership: subscription.ownership)
    let duration = target.duration ?? SubscriptionDuration(count: 1, unit: .month)
    transaction.expiresMs =
      organizer?.expiresMs
      ?? periodEnd(start: now, duration: duration, environment: subscription.environment)
    record(transaction)
    subscription.productID = target.productID
    subscription.autoRenewProductID = target.productID
    subscription.autoRenewEnabled = organizer?.autoRenewEnabled ?? true
    subscription.offerInProgress = nil
    subscription.expiresMs = transaction.expiresMs!
    subscription.latestTransactionID = transaction.transactionID
    changed.append(transaction.transactionID)
    return changed
  }

  mutating func setAutoRenew(bundleID: String, userID: String, groupID: String, enabled: Bool)
    throws(SimError)
  {
    _ = try app(bundleID)
    _ = try user(userID)
    var subscription = try requireOwnSubscription(bundleID, userID, group: groupID)
    let now = self.now
    if var commitment = subscription.commitment, commitment.periodNumber < commitment.totalPeriods {
      // Within a 12-month commitment the customer can only cancel the commitment's renewal:
      // "billing continues through all 12 periods even if the customer cancels the commitment
      // renewal early" (https://developer.apple.com/documentation/storekit/supporting-monthly-subscriptions-with-a-12-month-commitment).
      // The renewal info's `autoRenewStatus` (the next billing period) stays 1;
      // `commitmentInfo.commitmentAutoRenewStatus` changes.
      guard commitment.autoRenew != enabled else {
        throw .conflict(
          "the commitment's renewal is already \(enabled ? "on" : "off") for group '\(groupID)'")
      }
      commitment.autoRenew = enabled
      subscription.commitment = commitment
      subscriptions[subscription.originalTransactionID] = subscription
      emit(enabled ? .autoRenewEnabled : .autoRenewDisabled, subscription, at: now)
      return
    }
    guard subscription.autoRenewEnabled != enabled else {
      throw .conflict("auto-renew is already \(enabled ? "on" : "off") for group '\(groupID)'")
    }
    subscription.commitment?.autoRenew = enabled
    if enabled {
      guard isActive(subscription, at: now) || subscription.billingRetrySinceMs != nil else {
        throw .conflict("the subscription in group '\(groupID)' has expired; purchase again")
      }
      subscription.autoRenewEnabled = true
      subscription.renewalStopped = false
      subscription.expirationIntent = nil
    } else {
      subscription.autoRenewEnabled = false
      subscription.expirationIntent = "1"
      if subscription.billingRetrySinceMs != nil {
        // Cancelling during billing retry stops the retry.
        subscription.billingRetrySinceMs = nil
        subscription.gracePeriodExpiresMs = nil
        subscription.renewalStopped = true
      }
    }
    subscriptions[subscription.originalTransactionID] = subscription
    emit(enabled ? .autoRenewEnabled : .autoRenewDisabled, subscription, at: now)
    mirrorRenewalState(subscription)
  }

  /// Ends the subscription now (a simulator shortcut): auto-renew off, the current period cut
  /// at the current instant (for family shares too), `expiration_intent` set.
  mutating func expire(bundleID: String, userID: String, groupID: String, intent: String)
    throws(SimError) -> [String]
  {
    var subscription = try requireOwnSubscription(bundleID, userID, group: groupID)
    let now = self.now
    let wasOn = subscription.autoRenewEnabled
    subscription.autoRenewEnabled = false
    subscription.renewalStopped = true
    subscription.expirationIntent = intent
    subscription.expiryNotified = true
    subscription.billingRetrySinceMs = nil
    subscription.gracePeriodExpiresMs = nil
    var changed: [String] = []
    if now < subscription.expiresMs {
      subscription.expiresMs = now
      changed += truncate(subscription.latestTransactionID, at: now)
    }
    subscriptions[subscription.originalTransactionID] = subscription
    mirrorRenewalState(subscription)
    for memberID in familyShares[subscription.originalTransactionID] ?? [] {
      guard var member = subscriptions[memberID], !member.revoked, now < member.expiresMs else {
        continue
      }
      member.expiresMs = now
      changed += truncate(member.latestTransactionID, at: now)
      subscriptions[memberID] = member
    }
    if wasOn { emit(.autoRenewDisabled, subscription, at: now) }
    emitToFamily(.expired(intent: intent), subscription, at: now)
    return changed
  }

  private mutating func truncate(_ transactionID: String, at now: Int64) -> [String] {
    guard var transaction = transactions[transactionID], let expires = transaction.expiresMs,
      now < expires
    else { return [] }
    transaction.expiresMs = now
    update(transaction)
    return [transactionID]
  }

  // MARK: Billing

  mutating func setBillingFails(userID: String) throws(SimError) {
    _ = try user(userID)
    users[userID]!.billingFails = true
  }

  /// Fixes the user's payment method; every subscription of the user in billing retry renews
  /// now (DID_RECOVER). Within a grace period the renewal keeps its original date (no lost
  /// days); after it, the new period starts at recovery.
  mutating func recover(userID: String) throws(SimError) -> [String] {
    _ = try user(userID)
    users[userID]!.billingFails = false
    let now = self.now
    var changed: [String] = []
    let retrying = subscriptions.values
      .filter { $0.userID == userID && $0.ownership == .purchased && $0.billingRetrySinceMs != nil }
      .sorted { $0.originalTransactionID < $1.originalTransactionID }
    for var subscription in retrying {
      let inGrace = subscription.gracePeriodExpiresMs.map { now < $0 } ?? false
      changed += renew(
        &subscription, purchaseMs: inGrace ? subscription.expiresMs : now, kind: .recovered)
    }
    return changed
  }

  /// Renews `subscription` with a new transaction starting at `purchaseMs`, and its family shares.
  @discardableResult
  mutating func renew(
    _ subscription: inout Subscription, purchaseMs: Int64, kind: SubscriptionEventKind
  ) -> [String] {
    guard let app = apps[subscription.bundleID],
      let product = app.products[subscription.autoRenewProductID]
    else {
      // The product left the catalog: Apple cannot renew it ("product not available", intent 4).
      subscription.renewalStopped = true
      subscription.autoRenewEnabled = false
      subscription.expirationIntent = "4"
      subscriptions[subscription.originalTransactionID] = subscription
      return []
    }
    if let pending = subscription.pendingOffer {
      subscription.offerInProgress = pending
      subscription.pendingOffer = nil
    }
    var transaction = newTransaction(
      bundleID: subscription.bundleID, userID: subscription.userID, product: product,
      originalTransactionID: subscription.originalTransactionID,
      originalPurchaseMs: subscription.originalPurchaseMs, purchaseMs: purchaseMs, expiresMs: nil,
      ownership: subscription.ownership)
    // The organization pays for an assigned subscription, not the customer.
    if subscription.ownership == .assigned { transaction.price = 0 }
    var duration = applyOfferPeriod(&subscription, &transaction, product: product)
    var newCommitmentPeriod = true
    if let commitment = subscription.commitment {
      if commitment.periodNumber < commitment.totalPeriods {
        duration = continueCommitment(&subscription, &transaction)
        newCommitmentPeriod = false
      } else if commitment.renewalBillingPlan == "MONTHLY", let monthly = product.commitmentMonthlyPrice {
        // "When the 12th billing period completes ... period 1 of the new commitment begins"
        // (https://developer.apple.com/documentation/storekit/managing-lifecycle-of-monthly-subscriptions-with-a-12-month-commitment-).
        duration = startCommitment(&subscription, &transaction, product: product, monthly: monthly, at: purchaseMs)
      } else {
        subscription.commitment = nil
        transaction.billingPlanType = product.commitmentMonthlyPrice != nil ? "BILLED_UPFRONT" : nil
      }
    } else if product.commitmentMonthlyPrice != nil {
      transaction.billingPlanType = "BILLED_UPFRONT"
    }
    transaction.expiresMs = periodEnd(
      start: purchaseMs, duration: duration, environment: subscription.environment)
    if let end = commitmentTransactionEnd(subscription, transaction) { transaction.expiresMs = end }
    transaction.transactionReason = "RENEWAL"
    record(transaction)
    // A price increase the customer accepted is now the price paid.
    subscription.priceIncrease = nil
    subscription.graceExpiryNotified = nil
    subscription.expiryNotified = nil
    subscription.productID = product.productID
    subscription.expiresMs = transaction.expiresMs!
    subscription.latestTransactionID = transaction.transactionID
    if newCommitmentPeriod { subscription.renewals += 1 }
    if let commitment = subscription.commitment, commitment.periodNumber == commitment.totalPeriods {
      // The last billing period: whether the next one comes is the commitment's renewal.
      subscription.autoRenewEnabled = commitment.autoRenew
      if !commitment.autoRenew { subscription.expirationIntent = "1" }
    }
    subscription.billingRetrySinceMs = nil
    subscription.gracePeriodExpiresMs = nil
    if subscription.autoRenewEnabled { subscription.expirationIntent = nil }
    subscriptions[subscription.originalTransactionID] = subscription
    emit(kind, subscription, at: max(purchaseMs, kind == .recovered ? now : purchaseMs))
    var changed = [transaction.transactionID]
    for memberID in familyShares[subscription.originalTransactionID] ?? [] {
      guard var member = subscriptions[memberID], !member.revoked else { continue }
      changed.append(mirrorTransaction(into: &member, from: transaction))
      member.billingRetrySinceMs = nil
      member.gracePeriodExpiresMs = nil
      member.expirationIntent = nil
      subscriptions[memberID] = member
      emit(kind, member, at: max(purchaseMs, kind == .recovered ? now : purchaseMs))
    }
    return changed
  }

  // MARK: Time

  /// The instant of the next automatic event of an organizer's (or individual's) subscription.
  /// Besides renewals and billing events these are the end of a grace period and a lapse at
  /// `expires_date` (V2 `GRACE_PERIOD_EXPIRED`, `EXPIRED`; V1 sends nothing for them).
  func nextEvent(_ subscription: Subscription) -> Int64? {
    guard subscription.ownership != .familyShared, !subscription.revoked else { return nil }
    if let since = subscription.billingRetrySinceMs, !subscription.renewalStopped {
      let end = since + billingRetryMs(subscription.environment)
      if let grace = subscription.gracePeriodExpiresMs, subscription.graceExpiryNotified != true,
        grace < end
      {
        return grace
      }
      return end
    }
    if subscription.autoRenewEnabled && !subscription.renewalStopped {
      return subscription.expiresMs
    }
    return subscription.expiryNotified == true ? nil : subscription.expiresMs
  }

  /// Processes every automatic event (renewal, billing failure, end of billing retry) due at or
  /// before `target`, each at its own instant, then moves the clock to `target` if it is later.
  mutating func advance(to target: Int64) {
    while true {
      if let earliest = earliestEventMs, earliest > target { break }
      var due: (String, Int64)?
      var earliest = Int64.max
      for (id, subscription) in subscriptions {
        guard let at = nextEvent(subscription) else { continue }
        earliest = min(earliest, at)
        guard at <= target else { continue }
        if due == nil || at < due!.1 || (at == due!.1 && id < due!.0) { due = (id, at) }
      }
      guard let (id, at) = due, var subscription = subscriptions[id] else {
        earliestEventMs = earliest
        break
      }
      process(&subscription, at: at)
    }
    if target > clock.now() { clock.set(target) }
  }

  private mutating func process(_ subscription: inout Subscription, at: Int64) {
    if subscription.billingRetrySinceMs != nil && !subscription.renewalStopped {
      if let grace = subscription.gracePeriodExpiresMs, subscription.graceExpiryNotified != true,
        at == grace
      {
        // The grace period ended; billing retry goes on.
        subscription.graceExpiryNotified = true
        subscriptions[subscription.originalTransactionID] = subscription
        emitToFamily(.gracePeriodExpired, subscription, at: at)
        return
      }
      // Billing retry gave up (at since + retry period).
      subscription.billingRetrySinceMs = nil
      subscription.gracePeriodExpiresMs = nil
      subscription.expirationIntent = "2"
      subscription.renewalStopped = true
      subscription.expiryNotified = true
      subscriptions[subscription.originalTransactionID] = subscription
      mirrorRenewalState(subscription)
      emitToFamily(.expired(intent: "2"), subscription, at: at)
      return
    }
    if !subscription.autoRenewEnabled || subscription.renewalStopped {
      // The period ends without renewal.
      subscription.expiryNotified = true
      subscriptions[subscription.originalTransactionID] = subscription
      emitToFamily(.expired(intent: subscription.expirationIntent ?? "1"), subscription, at: at)
      return
    }
    if let increase = subscription.priceIncrease, !increase.accepted {
      // The customer did not consent to the price increase: no renewal (intent 3).
      subscription.autoRenewEnabled = false
      subscription.renewalStopped = true
      subscription.expirationIntent = "3"
      subscription.expiryNotified = true
      subscription.priceIncrease = nil
      subscriptions[subscription.originalTransactionID] = subscription
      mirrorRenewalState(subscription)
      emitToFamily(.expired(intent: "3"), subscription, at: at)
      return
    }
    if subscription.environment == .sandbox && subscription.renewals >= Self.sandboxMaxRenewals {
      subscription.autoRenewEnabled = false
      subscription.renewalStopped = true
      subscription.expirationIntent = "1"
      subscription.expiryNotified = true
      subscriptions[subscription.originalTransactionID] = subscription
      mirrorRenewalState(subscription)
      emitToFamily(.expired(intent: "1"), subscription, at: at)
      return
    }
    if users[subscription.userID]?.billingFails ?? false, subscription.ownership != .assigned {
      subscription.billingRetrySinceMs = subscription.expiresMs
      let graceDays = apps[subscription.bundleID]?.gracePeriodDays ?? 0
      subscription.gracePeriodExpiresMs =
        graceDays > 0
        ? subscription.expiresMs + gracePeriodMs(days: graceDays, subscription.environment) : nil
      subscriptions[subscription.originalTransactionID] = subscription
      let kind = SubscriptionEventKind.failedToRenew(inGracePeriod: graceDays > 0)
      emit(kind, subscription, at: at)
      mirrorRenewalState(subscription)
      for memberID in familyShares[subscription.originalTransactionID] ?? [] {
        guard let member = subscriptions[memberID], !member.revoked else { continue }
        emit(kind, member, at: at)
      }
      return
    }
    renew(&subscription, purchaseMs: subscription.expiresMs, kind: .renewed)
  }

  // MARK: Refunds

  /// The customer's own transaction a refund operation names: `transactionID`, or the latest
  /// of the subscription in `groupID`; it must not be revoked already.
  func refundableTransaction(
    bundleID: String, userID: String, transactionID: String?, groupID: String?
  ) throws(SimError) -> Transaction {
    _ = try app(bundleID)
    _ = try user(userID)
    let id: String
    if let transactionID {
      id = transactionID
    } else if let groupID {
      id = try requireOwnSubscription(bundleID, userID, group: groupID).latestTransactionID
    } else {
      throw .badRequest("a refund needs 'transaction_id' or 'group_id'")
    }
    guard let transaction = transactions[id], transaction.bundleID == bundleID,
      transaction.userID == userID
    else { throw .notFound("transaction '\(id)' is not in the receipt of '\(userID)'") }
    guard transaction.cancellationMs == nil else {
      throw .conflict("transaction '\(id)' is already refunded or revoked")
    }
    guard transaction.ownership != .assigned else {
      throw .conflict("assigned transaction '\(id)' takes no refund or refund request")
    }
    guard transaction.ownership == .purchased else {
      throw .conflict(
        "family-shared transaction '\(id)' cannot be refunded; refund the organizer's")
    }
    return transaction
  }

  /// The customer asks for a refund: for a consumable or an auto-renewable subscription the
  /// App Store asks the developer for consumption data (`CONSUMPTION_REQUEST` with
  /// `consumptionRequestReason`); the request stays open until ``refund`` grants it or
  /// ``declineRefund`` declines it.
  mutating func requestRefund(
    bundleID: String, userID: String, transactionID: String?, groupID: String?, reason: String
  ) throws(SimError) -> [String] {
    var transaction = try refundableTransaction(
      bundleID: bundleID, userID: userID, transactionID: transactionID, groupID: groupID)
    guard transaction.refundRequested != true else {
      throw .conflict("a refund request for transaction '\(transaction.transactionID)' is open")
    }
    // The signed transaction does not change: no new revision.
    transaction.refundRequested = true
    transaction.refundRequestedMs = now
    transactions[transaction.transactionID] = transaction
    if transaction.productType == .consumable || transaction.productType == .autoRenewable {
      emitAbout(transaction, .consumptionRequest(reason: reason))
    }
    return []
  }

  /// The App Store declines the open refund request of a transaction (`REFUND_DECLINED`).
  mutating func declineRefund(
    bundleID: String, userID: String, transactionID: String?, groupID: String?
  ) throws(SimError) -> [String] {
    var transaction = try refundableTransaction(
      bundleID: bundleID, userID: userID, transactionID: transactionID, groupID: groupID)
    guard transaction.refundRequested == true else {
      throw .conflict(
        "no refund request for transaction '\(transaction.transactionID)' is open; "
          + "POST …/refund-request first")
    }
    transaction.refundRequested = nil
    transactions[transaction.transactionID] = transaction
    emitAbout(transaction, .refundDeclined)
    return []
  }

  /// Queues `kind` about one transaction: for a subscription's transaction with the
  /// subscription's renewal info and status.
  private mutating func emitAbout(_ transaction: Transaction, _ kind: SubscriptionEventKind) {
    pendingEvents.append(
      NotificationEvent(
        kind: kind, bundleID: transaction.bundleID, userID: transaction.userID,
        environment: users[transaction.userID]?.environment ?? .sandbox,
        originalTransactionID: transaction.originalTransactionID, atMs: now,
        transactionID: transaction.transactionID))
  }

  /// Refunds a transaction (the latest of the group when `transactionID` is nil): it gets
  /// `cancellation_date`, `cancellation_reason`, `revocationType` (`REFUND_FULL`, or
  /// `REFUND_PRORATED` with `percentage` in milliunits); a refunded subscription stops; family
  /// members lose the shared access (REVOKE, `FAMILY_REVOKE` with the purchaser's reason).
  mutating func refund(
    bundleID: String, userID: String, transactionID: String?, groupID: String?, reason: String,
    proratedPercentage: Int? = nil
  ) throws(SimError) -> [String] {
    var transaction = try refundableTransaction(
      bundleID: bundleID, userID: userID, transactionID: transactionID, groupID: groupID)
    let now = self.now
    let id = transaction.transactionID
    transaction.cancellationMs = now
    transaction.cancellationReason = reason
    transaction.revocationType = proratedPercentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
    transaction.revocationPercentage = proratedPercentage ?? 100_000
    transaction.refundRequested = nil
    update(transaction)
    var changed = [id]
    guard transaction.productType == .autoRenewable,
      var subscription = subscriptions[transaction.originalTransactionID]
    else {
      emitAbout(transaction, .refunded(autoRenewable: false))
      return changed
    }
    if subscription.latestTransactionID == id {
      subscription.revoked = true
      subscription.autoRenewEnabled = false
      subscription.renewalStopped = true
      subscription.billingRetrySinceMs = nil
      subscription.gracePeriodExpiresMs = nil
    }
    subscriptions[subscription.originalTransactionID] = subscription
    emitAbout(transaction, .refunded(autoRenewable: true))
    for memberID in familyShares[subscription.originalTransactionID] ?? [] {
      changed += revokeMember(memberID, at: now, reason: reason)
    }
    return changed
  }

  /// Reverses the refund of a transaction (a dispute the customer won): it is re-signed without
  /// `revocationDate`, `revocationReason`, `revocationType` and `revocationPercentage`
  /// (`REFUND_REVERSED`). A refunded subscription's access comes back until its `expiresDate`;
  /// auto-renew stays off as the refund left it. Family members' revoked copies stay revoked.
  mutating func reverseRefund(bundleID: String, userID: String, transactionID: String)
    throws(SimError) -> [String]
  {
    _ = try app(bundleID)
    _ = try user(userID)
    guard var transaction = transactions[transactionID], transaction.bundleID == bundleID,
      transaction.userID == userID
    else {
      throw .notFound("transaction '\(transactionID)' is not in the receipt of '\(userID)'")
    }
    guard transaction.cancellationMs != nil, !transaction.isUpgraded,
      transaction.ownership == .purchased
    else { throw .conflict("transaction '\(transactionID)' was not refunded") }
    transaction.cancellationMs = nil
    transaction.cancellationReason = nil
    transaction.revocationType = nil
    transaction.revocationPercentage = nil
    update(transaction)
    if transaction.productType == .autoRenewable,
      var subscription = subscriptions[transaction.originalTransactionID],
      subscription.revoked, subscription.latestTransactionID == transactionID
    {
      subscription.revoked = false
      subscription.expirationIntent = "1"
      subscription.expiryNotified = now >= subscription.expiresMs ? true : nil
      subscriptions[subscription.originalTransactionID] = subscription
    }
    emitAbout(transaction, .refundReversed)
    return [transactionID]
  }

  // MARK: Price increases

  /// The developer raises the price of auto-renewable `productID` to `price` (milliunits): new
  /// purchases pay it at once; each current subscriber renewing to it is told
  /// (`PRICE_INCREASE`): with `requiresConsent` the renewal info's `priceIncreaseStatus` is 0
  /// until the customer consents (``consentToPriceIncrease``), and a subscription that renews
  /// without consent expires instead (`EXPIRED`/`PRICE_INCREASE`, intent 3); without consent
  /// needed it is 1 at once (`ACCEPTED`). The renewal after that is at the new price.
  mutating func increasePrice(
    bundleID: String, productID: String, price: Int64, requiresConsent: Bool
  ) throws(SimError) -> [String] {
    var app = try app(bundleID)
    var product = try product(app, productID)
    guard product.type == .autoRenewable else {
      throw .badRequest("'\(productID)' is not an auto-renewable subscription")
    }
    guard price > product.price ?? 0 else {
      throw .badRequest("field 'price' must be higher than the current price of '\(productID)'")
    }
    product.price = price
    app.products[productID] = product
    apps[bundleID] = app
    let now = self.now
    let affected = subscriptions.values.filter {
      $0.bundleID == bundleID && $0.ownership == .purchased && $0.autoRenewProductID == productID
        && $0.autoRenewEnabled && !$0.renewalStopped
        && (isActive($0, at: now) || $0.billingRetrySinceMs != nil)
    }.sorted { $0.originalTransactionID < $1.originalTransactionID }
    for var subscription in affected {
      subscription.priceIncrease = PriceIncrease(price: price, accepted: !requiresConsent)
      subscriptions[subscription.originalTransactionID] = subscription
      emit(.priceIncrease(accepted: !requiresConsent), subscription, at: now)
    }
    return []
  }

  /// The customer consents to the pending price increase of the subscription in `groupID`
  /// (`PRICE_INCREASE`/`ACCEPTED`, `priceIncreaseStatus` 1).
  mutating func consentToPriceIncrease(bundleID: String, userID: String, groupID: String)
    throws(SimError)
  {
    _ = try app(bundleID)
    _ = try user(userID)
    var subscription = try requireOwnSubscription(bundleID, userID, group: groupID)
    guard var increase = subscription.priceIncrease, !increase.accepted else {
      throw .conflict("no price increase awaits consent in group '\(groupID)'")
    }
    increase.accepted = true
    subscription.priceIncrease = increase
    subscriptions[subscription.originalTransactionID] = subscription
    emit(.priceIncrease(accepted: true), subscription, at: now)
  }

  // MARK: Win-back offers

  /// The win-back offers a lapsed customer may redeem in the group of `subscription`, best
  /// first: the offers of the product that lapsed, then those of the group's other products by
  /// level. Only for the customer's own subscription that expired and will not renew, that
  /// is not in billing retry or a grace period (Apple: those are not eligible), not refunded,
  /// and that had at least one paid (not free-trial) period.
  func eligibleWinBackOfferIDs(_ subscription: Subscription, at now: Int64) -> [String] {
    guard subscription.ownership == .purchased, !subscription.revoked,
      now >= subscription.expiresMs,
      !(subscription.autoRenewEnabled && !subscription.renewalStopped),
      subscription.billingRetrySinceMs == nil || subscription.renewalStopped,
      let app = apps[subscription.bundleID]
    else { return [] }
    let paid = receiptTransactions(subscription.bundleID, subscription.userID).contains {
      $0.originalTransactionID == subscription.originalTransactionID && !$0.isTrialPeriod
        && $0.cancellationMs == nil
    }
    guard paid else { return [] }
    let group = app.products.values.filter { $0.groupID == subscription.groupID }
      .sorted {
        ($0.productID == subscription.productID ? 0 : 1, $0.level, $0.productID)
          < ($1.productID == subscription.productID ? 0 : 1, $1.level, $1.productID)
      }
    var offers: [String] = []
    for product in group {
      for id in product.winBackOfferIDs ?? [] where !offers.contains(id) { offers.append(id) }
    }
    return offers
  }

  // MARK: Family Sharing

  /// Creates family-shared subscriptions mirroring `subscription` for each family member.
  mutating func shareWithFamily(
    _ subscription: Subscription, organizer: User, kind: SubscriptionEventKind, at now: Int64
  ) -> [String] {
    var changed: [String] = []
    for memberID in organizer.familyMembers {
      if let id = shareSubscription(subscription, with: memberID, at: now) { changed.append(id) }
    }
    return changed
  }

  private mutating func shareSubscription(
    _ organizer: Subscription, with memberID: String, at now: Int64
  )
    -> String?
  {
    guard let member = users[memberID], !member.deleted, !organizer.sharingDisabled,
      let product = apps[organizer.bundleID]?.products[organizer.productID]
    else { return nil }
    // An existing, revoked share of this organizer's subscription is restarted, not duplicated.
    let existingID = (familyShares[organizer.originalTransactionID] ?? []).first {
      subscriptions[$0]?.userID == memberID
    }
    var transaction = newTransaction(
      bundleID: organizer.bundleID, userID: memberID, product: product,
      originalTransactionID: existingID,
      originalPurchaseMs: existingID.flatMap { subscriptions[$0]?.originalPurchaseMs },
      purchaseMs: now, expiresMs: organizer.expiresMs, ownership: .familyShared)
    if let current = transactions[organizer.latestTransactionID] {
      transaction.isTrialPeriod = current.isTrialPeriod
      transaction.isInIntroOfferPeriod = current.isInIntroOfferPeriod
    }
    record(transaction)
    var share = Subscription(
      originalTransactionID: transaction.originalTransactionID, bundleID: organizer.bundleID,
      userID: memberID, groupID: organizer.groupID, environment: organizer.environment,
      ownership: .familyShared, sharedFrom: organizer.originalTransactionID,
      productID: organizer.productID, autoRenewProductID: organizer.autoRenewProductID,
      expiresMs: organizer.expiresMs, originalPurchaseMs: transaction.originalPurchaseMs,
      latestTransactionID: transaction.transactionID)
    share.autoRenewEnabled = organizer.autoRenewEnabled
    subscriptions[share.originalTransactionID] = share
    if existingID == nil {
      familyShares[organizer.originalTransactionID, default: []].append(share.originalTransactionID)
    }
    emit(.initialBuy, share, at: now)
    return transaction.transactionID
  }

  /// A member's transaction mirroring the organizer's `source` transaction (same product and period).
  private mutating func mirrorTransaction(into member: inout Subscription, from source: Transaction)
    -> String
  {
    guard let product = apps[member.bundleID]?.products[source.productID] else { return "" }
    var transaction = newTransaction(
      bundleID: member.bundleID, userID: member.userID, product: product,
      originalTransactionID: member.originalTransactionID,
      originalPurchaseMs: member.originalPurchaseMs,
      purchaseMs: source.purchaseMs, expiresMs: source.expiresMs, ownership: .familyShared)
    transaction.isTrialPeriod = source.isTrialPeriod
    transaction.isInIntroOfferPeriod = source.isInIntroOfferPeriod
    transaction.transactionReason = source.transactionReason
    record(transaction)
    member.productID = source.productID
    member.expiresMs = source.expiresMs ?? member.expiresMs
    member.latestTransactionID = transaction.transactionID
    return transaction.transactionID
  }

  /// Copies renewal state (auto-renew, billing retry, grace, intent) to the family shares.
  private mutating func mirrorRenewalState(_ organizer: Subscription) {
    for memberID in familyShares[organizer.originalTransactionID] ?? [] {
      guard var member = subscriptions[memberID], !member.revoked else { continue }
      member.autoRenewEnabled = organizer.autoRenewEnabled
      member.autoRenewProductID = organizer.autoRenewProductID
      member.billingRetrySinceMs = organizer.billingRetrySinceMs
      member.gracePeriodExpiresMs = organizer.gracePeriodExpiresMs
      member.expirationIntent = organizer.expirationIntent
      member.renewalStopped = organizer.renewalStopped
      subscriptions[memberID] = member
    }
  }

  /// Ends a member's family-shared access now: the current transaction gets `cancellation_date`
  /// with `reason` ("0" when the member leaves or sharing stops; the purchaser's reason when
  /// the purchaser was refunded) and `revocationType` `FAMILY_REVOKE`; the member gets REVOKE.
  private mutating func revokeMember(
    _ memberSubscriptionID: String, at now: Int64, reason: String = "0"
  ) -> [String] {
    guard var member = subscriptions[memberSubscriptionID], !member.revoked else { return [] }
    member.revoked = true
    member.autoRenewEnabled = false
    member.renewalStopped = true
    var changed: [String] = []
    if var transaction = transactions[member.latestTransactionID], transaction.cancellationMs == nil
    {
      transaction.cancellationMs = now
      transaction.cancellationReason = reason
      transaction.revocationType = "FAMILY_REVOKE"
      update(transaction)
      changed.append(transaction.transactionID)
    }
    subscriptions[memberSubscriptionID] = member
    emit(.familyAccessRevoked, member, at: now)
    return changed
  }

  mutating func addFamilyMember(organizerID: String, memberID: String) throws(SimError) -> [String]
  {
    var organizer = try user(organizerID)
    var member = try user(memberID)
    guard organizerID != memberID else { throw .badRequest("a user cannot join their own family") }
    guard organizer.familyOrganizer == nil else {
      throw .conflict("user '\(organizerID)' is a member of another family")
    }
    guard member.familyOrganizer == nil, member.familyMembers.isEmpty else {
      throw .conflict("user '\(memberID)' already belongs to a family")
    }
    guard member.environment == organizer.environment else {
      throw .conflict("family members must be in the same environment")
    }
    guard organizer.familyMembers.count < Self.maxFamilyMembers else {
      throw .conflict("a family has at most \(Self.maxFamilyMembers) members besides the organizer")
    }
    organizer.familyMembers.append(memberID)
    member.familyOrganizer = organizerID
    users[organizerID] = organizer
    users[memberID] = member
    let now = self.now
    var changed: [String] = []
    let shareable = subscriptions.values.filter { subscription in
      subscription.userID == organizerID && subscription.ownership == .purchased
        && isActive(subscription, at: now) && !subscription.sharingDisabled
        && (apps[subscription.bundleID]?.products[subscription.productID]?.familyShareable ?? false)
    }.sorted { $0.originalTransactionID < $1.originalTransactionID }
    for subscription in shareable {
      if let id = shareSubscription(subscription, with: memberID, at: now) { changed.append(id) }
    }
    return changed
  }

  /// Removes `memberID` from its family (the member leaves, or the organizer removes them):
  /// every family-shared subscription of the member is revoked.
  mutating func removeFamilyMember(memberID: String, organizerID: String?) throws(SimError)
    -> [String]
  {
    var member = try user(memberID)
    guard let familyOrganizer = member.familyOrganizer else {
      throw .conflict("user '\(memberID)' is not a family member")
    }
    if let organizerID, organizerID != familyOrganizer {
      throw .notFound("user '\(memberID)' is not in the family of '\(organizerID)'")
    }
    member.familyOrganizer = nil
    users[memberID] = member
    users[familyOrganizer]?.familyMembers.removeAll { $0 == memberID }
    let now = self.now
    var changed: [String] = []
    let shares = subscriptions.values
      .filter { $0.userID == memberID && $0.ownership == .familyShared && !$0.revoked }
      .map(\.originalTransactionID).sorted()
    for id in shares { changed += revokeMember(id, at: now) }
    return changed
  }

  /// The organizer stops sharing the subscription of `groupID`: every member loses access.
  mutating func stopFamilySharing(bundleID: String, organizerID: String, groupID: String)
    throws(SimError) -> [String]
  {
    var subscription = try requireOwnSubscription(bundleID, organizerID, group: groupID)
    subscription.sharingDisabled = true
    subscriptions[subscription.originalTransactionID] = subscription
    let now = self.now
    var changed: [String] = []
    for memberID in familyShares[subscription.originalTransactionID] ?? [] {
      changed += revokeMember(memberID, at: now)
    }
    return changed
  }
}
