// Refund requests (docs/architecture.md rule 27): what the server tells Apple when a customer asks
// for a refund and Apple sends `CONSUMPTION_REQUEST`, decided here as pure functions of the app's
// consumption policy, the transaction and the user's history. The body follows Apple's
// ConsumptionRequest (https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest)
// and the constraints of its fields' pages, cited where each applies.

/// Apple's `deliveryStatus`: whether the app delivered the purchase and it works
/// (https://developer.apple.com/documentation/appstoreserverapi/deliverystatus).
public enum ConsumptionDeliveryStatus: String, Sendable, Hashable, Codable, CaseIterable {
  /// Delivered and working.
  case delivered = "DELIVERED"
  /// Not delivered: a quality issue.
  case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
  /// Not delivered: the wrong item.
  case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
  /// Not delivered: a server outage.
  case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
  /// Not delivered: another reason.
  case undeliveredOther = "UNDELIVERED_OTHER"
}

/// Apple's `refundPreference`: the app's preferred outcome of the refund request
/// (https://developer.apple.com/documentation/appstoreserverapi/refundpreference).
public enum RefundPreference: String, Sendable, Hashable, Codable, CaseIterable {
  /// Decline the refund.
  case decline = "DECLINE"
  /// Grant a full refund.
  case grantFull = "GRANT_FULL"
  /// Grant a prorated refund.
  case grantProrated = "GRANT_PRORATED"
}

/// How an app answers Apple's refund requests (the policy's `consumption_policy`): what it
/// declares about consent, delivery and its preference. The consumption percentage is computed
/// (``ConsumptionShare``), never declared.
public struct ConsumptionPolicy: Sendable, Hashable, Codable {
  /// The app obtained its customers' consent to share consumption data (Apple's
  /// `customerConsented`, which Apple requires to be `true`).
  public var customerConsented: Bool
  /// The app offered a free sample, trial or description before the purchase (Apple's
  /// `sampleContentProvided`).
  public var sampleContentProvided: Bool
  /// Apple's `deliveryStatus`.
  public var deliveryStatus: ConsumptionDeliveryStatus
  /// Apple's optional `refundPreference`; `nil` sends none.
  public var refundPreference: RefundPreference?

  /// Creates a policy.
  public init(
    customerConsented: Bool, sampleContentProvided: Bool, deliveryStatus: ConsumptionDeliveryStatus,
    refundPreference: RefundPreference? = nil
  ) {
    self.customerConsented = customerConsented
    self.sampleContentProvided = sampleContentProvided
    self.deliveryStatus = deliveryStatus
    self.refundPreference = refundPreference
  }
}

/// The share of a transaction's period the customer used, the basis of Apple's
/// `consumptionPercentage` (milliunits: 100000 is 100 %).
public enum ConsumptionShare {
  /// 100 %, in milliunits.
  public static let whole: Int64 = 100_000

  /// The share of `transaction`'s period used at `time`, in milliunits (0...100000): the time
  /// from the period's start to `time` (or to the revocation, when it came first) over the
  /// period's length. The period of an auto-renewable is `[purchaseDate, expiresDate)` (rule 4),
  /// ended earlier by a later purchase of the same subscription (an upgrade, rule 12); a
  /// non-renewing subscription's is its term (rule 6: terms of one product chain, each lasting the
  /// catalog's duration, else until Apple's `expiresDate`). `nil` for a product without a period
  /// (a consumable or a non-consumable: how much of it was consumed is the app's knowledge, not
  /// the history's) or a period that cannot be known.
  /// - Parameters:
  ///   - transaction: the transaction the refund request is about.
  ///   - history: the user's transactions (any order); the transaction itself may be among them.
  ///   - catalog: the app's catalog (the product's type and a non-renewing term's duration).
  ///   - time: the instant of the answer.
  public static func usedMilliunits(
    of transaction: Transaction, history: [Transaction], catalog: Catalog, at time: Int64
  ) -> Int64? {
    let type = catalog.productType(of: transaction.productId) ?? transaction.type
    let start: Int64
    var end: Int64
    switch type {
    case .autoRenewable, .freeSubscription:
      guard let expires = transaction.expiresDate else { return nil }
      start = transaction.purchaseDate
      end = expires
      // Rule 12: a later purchase of the same subscription ends this period at its purchase.
      for other in history
      where other.originalTransactionId == transaction.originalTransactionId
        && other.transactionId != transaction.transactionId && other.purchaseDate > start && other.purchaseDate < end
      {
        end = other.purchaseDate
      }
    case .nonRenewing:
      guard let term = nonRenewingTerm(of: transaction, history: history, catalog: catalog) else { return nil }
      (start, end) = term
    case .consumable, .nonConsumable, nil:
      return nil
    }
    guard end > start else { return whole }
    let used = min(max(min(time, transaction.revocationDate ?? time), start), end) - start
    // (used × 100000) / length without overflow for any realistic length (periods are < 2^40 ms).
    return Int64((Double(used) * Double(whole) / Double(end - start)).rounded(.down))
  }

  /// The term of a non-renewing transaction: the product's non-revoked purchases chain, each term
  /// starting at `max(purchase, end of the previous term)` and lasting the catalog's duration
  /// (rule 6); without a duration, `[purchaseDate, expiresDate)`.
  static func nonRenewingTerm(of transaction: Transaction, history: [Transaction], catalog: Catalog)
    -> (Int64, Int64)?
  {
    guard let duration = catalog[transaction.productId]?.duration else {
      guard let expires = transaction.expiresDate else { return nil }
      return (transaction.purchaseDate, expires)
    }
    var chain = history.filter {
      $0.productId == transaction.productId && $0.transactionId != transaction.transactionId
        && $0.revocationDate == nil
    }
    chain.append(transaction)
    chain.sort { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }
    var termEnd = Int64.min
    for t in chain {
      let termStart = max(t.purchaseDate, termEnd)
      termEnd = duration.added(to: termStart)
      if t.transactionId == transaction.transactionId { return (termStart, termEnd) }
    }
    return nil
  }
}

/// The body of one Send Consumption Information call (Apple's ConsumptionRequest), as sent.
public struct ConsumptionInformation: Sendable, Hashable {
  /// Always `true`: Apple refuses any other value (an answer without consent is not sent).
  public var customerConsented: Bool
  /// Apple's `sampleContentProvided`.
  public var sampleContentProvided: Bool
  /// Apple's `deliveryStatus`.
  public var deliveryStatus: ConsumptionDeliveryStatus
  /// Apple's `consumptionPercentage` in milliunits; `nil`: not sent.
  public var consumptionPercentage: Int64?
  /// Apple's `refundPreference`; `nil`: not sent.
  public var refundPreference: RefundPreference?

  /// Creates a body.
  public init(
    customerConsented: Bool = true, sampleContentProvided: Bool, deliveryStatus: ConsumptionDeliveryStatus,
    consumptionPercentage: Int64? = nil, refundPreference: RefundPreference? = nil
  ) {
    self.customerConsented = customerConsented
    self.sampleContentProvided = sampleContentProvided
    self.deliveryStatus = deliveryStatus
    self.consumptionPercentage = consumptionPercentage
    self.refundPreference = refundPreference
  }

  /// The JSON body, keys in Apple's order of the ConsumptionRequest page.
  public var json: String {
    var fields = [
      "\"customerConsented\":\(customerConsented)", "\"sampleContentProvided\":\(sampleContentProvided)",
      "\"deliveryStatus\":\"\(deliveryStatus.rawValue)\"",
    ]
    if let consumptionPercentage { fields.append("\"consumptionPercentage\":\(consumptionPercentage)") }
    if let refundPreference { fields.append("\"refundPreference\":\"\(refundPreference.rawValue)\"") }
    return "{" + fields.joined(separator: ",") + "}"
  }
}

/// What the server does with one refund request.
public enum ConsumptionDecision: Sendable, Hashable {
  /// Send this body.
  case send(ConsumptionInformation)
  /// Send nothing, for this reason (a lower-case word: `no_consumption_policy`, `assigned`,
  /// `no_customer_consent`).
  case notSent(String)

  /// Decides the answer to a refund request about `transaction` (rule 27):
  /// - no policy: nothing is sent (`no_consumption_policy`);
  /// - an `ASSIGNED` transaction: never answered (`assigned`, rule 23: Apple takes no consumption
  ///   request for it);
  /// - the policy does not declare consent: nothing is sent (`no_customer_consent`), because
  ///   "the App Store server rejects requests that have a customerConsented value other than true"
  ///   (https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest);
  /// - otherwise `customerConsented` true, `sampleContentProvided`, `deliveryStatus` and
  ///   `refundPreference` from the policy, and `consumptionPercentage` as
  ///   https://developer.apple.com/documentation/appstoreserverapi/consumptionpercentage allows:
  ///   none for an auto-renewable subscription (Apple computes it from elapsed time, and refuses
  ///   one with ConsumptionPercentageAutoRenewableSubscriptionError); 0 when the status is not
  ///   `DELIVERED` (else UndeliveredConsumptionPercentageNonZeroError); else `usedMilliunits`
  ///   when known (kept within 1...99999 with `GRANT_PRORATED`, which needs a value above 0 and
  ///   below 100000). `GRANT_PRORATED` needs a percentage above 0 for a product that is not an
  ///   auto-renewable (https://developer.apple.com/documentation/appstoreserverapi/refundpreference):
  ///   where none can be sent (unknown, or 0 for an undelivered purchase) no preference is sent.
  /// - Parameters:
  ///   - policy: the app's consumption policy, `nil` when none is set.
  ///   - transaction: the transaction of the request.
  ///   - productType: its type (the catalog's, else Apple's).
  ///   - usedMilliunits: ``ConsumptionShare/usedMilliunits(of:history:catalog:at:)``.
  public static func decide(
    policy: ConsumptionPolicy?, transaction: Transaction, productType: ProductType?, usedMilliunits: Int64?
  ) -> ConsumptionDecision {
    guard let policy else { return .notSent("no_consumption_policy") }
    if transaction.ownership == .assigned { return .notSent("assigned") }
    guard policy.customerConsented else { return .notSent("no_customer_consent") }
    var body = ConsumptionInformation(
      sampleContentProvided: policy.sampleContentProvided, deliveryStatus: policy.deliveryStatus,
      refundPreference: policy.refundPreference)
    if productType == .autoRenewable { return .send(body) }
    if policy.deliveryStatus != .delivered {
      body.consumptionPercentage = 0
    } else if let used = usedMilliunits {
      body.consumptionPercentage =
        policy.refundPreference == .grantProrated ? min(max(used, 1), ConsumptionShare.whole - 1) : used
    }
    if body.refundPreference == .grantProrated, (body.consumptionPercentage ?? 0) == 0 {
      body.refundPreference = nil
    }
    return .send(body)
  }
}
