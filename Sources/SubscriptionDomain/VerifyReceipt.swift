import SubstatusJSON

/// A verifyReceipt response body with `status` 0 or 21006, read into the model (rules 1, 20).
///
/// `receipt.in_app` ∪ `latest_receipt_info` become ``transactions`` (the `latest_receipt_info`
/// record wins on the same `transaction_id`); `pending_renewal_info` becomes ``pendingRenewalInfo``.
/// Another non-zero status is an error with Apple's code, meaning and action, never "no purchases".
/// An iOS 6-style transaction receipt's answer (the only kind Apple answers 21006 for) is read too:
/// its `receipt` is the transaction, `latest_receipt_info` / `latest_expired_receipt_info` objects.
///
/// ```swift
/// do {
///   let response = try VerifyReceiptResponse(parsing: body)
///   store(response.transactions, response.pendingRenewalInfo, response.renewalInfoSnapshot)
/// } catch let error where error.code == .verifyReceiptStatus {
///   switch error.verifyReceiptStatus!.action { case .retryInSandbox: ... }
/// }
/// ```
public struct VerifyReceiptResponse: Sendable, Hashable {
  /// Apple's `environment` value (`Production` or `Sandbox`).
  public var rawEnvironment: String?
  /// The receipt's `bundle_id`.
  public var bundleId: String?
  /// Every transaction of the body, deduplicated, ordered by purchase date then id.
  public var transactions: [Transaction]
  /// `pending_renewal_info`, ordered by original transaction id.
  public var pendingRenewalInfo: [RenewalInfo]
  /// `receipt.request_date_ms`: when Apple answered, on Apple's clock. Every transaction and
  /// renewal info of the body carries it as its `asOfDate` (rule 14); `nil` when absent.
  public var requestDate: Int64?
  /// What `pending_renewal_info` says of the body's subscriptions as a whole (rule 13): a stored
  /// renewal info of one of them that the body lacks is gone.
  public var renewalInfoSnapshot: RenewalInfoSnapshot {
    RenewalInfoSnapshot(receiptTransactions: transactions, asOfDate: requestDate)
  }
  /// `latest_receipt` (Base64), when present.
  public var latestReceipt: String?

  /// The environment; `nil` when absent or unknown (see ``rawEnvironment``).
  public var environment: Environment? { rawEnvironment.flatMap(Environment.init(appleValue:)) }

  /// Parses a verifyReceipt response body (UTF-8 JSON).
  ///
  /// - Throws: ``AppleDataError``: `invalidJSON`, `missingField` / `invalidValue` (with the
  ///   field's path), or `verifyReceiptStatus` for a status other than 0 and 21006 (see
  ///   ``AppleDataError/verifyReceiptStatus``).
  public init(parsing bytes: [UInt8]) throws(AppleDataError) {
    try self.init(json: try parseJSON(bytes))
  }

  /// Reads an already parsed verifyReceipt response body.
  /// - Throws: ``AppleDataError`` as ``init(parsing:)``.
  public init(json: JSONValue) throws(AppleDataError) {
    let body = try AppleObject(json, path: "")
    let receipt = try ReceiptReader(body, statusKey: "status")
    rawEnvironment = receipt.rawEnvironment
    let receiptObject = try body.object("receipt")
    bundleId = try receiptObject?.string("bundle_id")
    if bundleId == nil { bundleId = try receiptObject?.string("bid") }  // iOS 6-style receipts
    requestDate = try receiptObject?.date(ms: "request_date_ms", text: "request_date")
    latestReceipt = try body.string("latest_receipt")
    let iOS6 = try Self.iOS6Transactions(body, receipt: receiptObject, environment: rawEnvironment, bundleId: bundleId)
    var records: [Transaction] = iOS6?.receipt ?? []
    if iOS6 == nil, let inner = receiptObject {
      for element in try inner.objects("in_app") {
        records.append(
          try Transaction(receiptElement: element, environment: rawEnvironment, bundleId: bundleId))
      }
    }
    var latest: [Transaction] = iOS6?.latest ?? []
    for element in try iOS6 == nil ? body.objects("latest_receipt_info") : [] {
      latest.append(
        try Transaction(receiptElement: element, environment: rawEnvironment, bundleId: bundleId))
    }
    // latest_receipt_info wins over receipt.in_app on the same id.
    let latestIds = Set(latest.map(\.transactionId))
    records.removeAll { latestIds.contains($0.transactionId) }
    transactions = Transaction.merged(Transaction.merged(records) + Transaction.merged(latest))
    var renewals: [RenewalInfo] = []
    for element in try body.objects("pending_renewal_info") {
      renewals.append(try RenewalInfo(pendingRenewalElement: element, environment: rawEnvironment))
    }
    pendingRenewalInfo = RenewalInfo.merged(renewals)
    for i in transactions.indices { transactions[i].asOfDate = requestDate }
    for i in pendingRenewalInfo.indices { pendingRenewalInfo[i].asOfDate = requestDate }
  }
}

/// The `status`/`environment`/retry part shared by verifyReceipt bodies and V1 unified receipts.
struct ReceiptReader {
  let rawEnvironment: String?

  init(_ body: AppleObject, statusKey: String) throws(AppleDataError) {
    guard let status = try body.int(statusKey) else { throw body.missing(statusKey) }
    rawEnvironment = try body.string("environment")
    if status != 0 && !VerifyReceiptStatus(code: status).carriesReceipt {
      var retryable = try body.bool("is-retryable")
      if retryable == nil { retryable = try body.bool("is_retryable") }
      let described = VerifyReceiptStatus(
        code: status, isRetryable: retryable,
        environment: rawEnvironment.flatMap(Environment.init(appleValue:)))
      throw AppleDataError(
        code: .verifyReceiptStatus, field: body.fieldPath(statusKey),
        message: described.description, verifyReceiptStatus: described)
    }
  }
}

extension VerifyReceiptResponse {
  /// The transactions of an iOS 6-style transaction receipt's answer, `nil` for any other body:
  /// there `receipt` is the transaction itself (no `in_app`), and `latest_receipt_info` (active)
  /// or `latest_expired_receipt_info` (status 21006) the subscription's newest transaction.
  static func iOS6Transactions(
    _ body: AppleObject, receipt: AppleObject?, environment: String?, bundleId: String?
  ) throws(AppleDataError) -> (receipt: [Transaction], latest: [Transaction])? {
    guard let receipt, receipt.value("in_app") == nil, receipt.value("transaction_id") != nil
    else { return nil }
    let transaction = try Transaction(receiptElement: receipt, environment: environment, bundleId: bundleId)
    var latest: [Transaction] = []
    for key in ["latest_receipt_info", "latest_expired_receipt_info"] {
      if let element = try body.object(key) {
        latest.append(try Transaction(receiptElement: element, environment: environment, bundleId: bundleId))
      }
    }
    return ([transaction], latest)
  }
}

extension Transaction {
  /// Reads one `in_app` / `latest_receipt_info` element (V1 field names).
  init(receiptElement e: AppleObject, environment: String?, bundleId: String?)
    throws(AppleDataError)
  {
    let transactionId = try e.requiredString("transaction_id")
    guard let purchase = try e.date(ms: "purchase_date_ms", text: "purchase_date") else {
      throw e.missing("purchase_date_ms")
    }
    self.init(
      transactionId: transactionId,
      originalTransactionId: try e.string("original_transaction_id"),
      productId: try e.requiredString("product_id"),
      purchaseDate: purchase)
    subscriptionGroupIdentifier = try e.string("subscription_group_identifier")
    originalPurchaseDate = try e.date(ms: "original_purchase_date_ms", text: "original_purchase_date")
    expiresDate = try e.date(ms: "expires_date_ms", text: "expires_date")
    isTrialPeriod = try e.bool("is_trial_period") ?? false
    isInIntroOfferPeriod = try e.bool("is_in_intro_offer_period") ?? false
    if let promo = try e.string("promotional_offer_id") {
      rawOfferType = OfferType.promotional.rawValue
      offerIdentifier = promo
    } else if let code = try e.string("offer_code_ref_name") {
      rawOfferType = OfferType.offerCode.rawValue
      offerIdentifier = code
    }
    revocationDate = try e.date(ms: "cancellation_date_ms", text: "cancellation_date")
    rawRevocationReason = try e.int("cancellation_reason")
    rawInAppOwnershipType = try e.string("in_app_ownership_type")
    isUpgraded = try e.bool("is_upgraded") ?? false
    rawEnvironment = environment
    webOrderLineItemId = try e.string("web_order_line_item_id")
    quantity = try e.int("quantity") ?? 1
    self.bundleId = bundleId
    appAccountToken = try e.string("app_account_token")
  }
}

extension RenewalInfo {
  /// Reads one `pending_renewal_info` element (V1 field names).
  init(pendingRenewalElement e: AppleObject, environment: String?) throws(AppleDataError) {
    let autoRenewProductId = try e.string("auto_renew_product_id")
    guard let productId = try e.string("product_id") ?? autoRenewProductId else {
      throw e.missing("product_id")
    }
    self.init(
      originalTransactionId: try e.requiredString("original_transaction_id"),
      productId: productId)
    self.autoRenewProductId = autoRenewProductId
    rawAutoRenewStatus = try e.intOrBool("auto_renew_status")
    rawExpirationIntent = try e.int("expiration_intent")
    isInBillingRetryPeriod = try e.bool("is_in_billing_retry_period") ?? false
    gracePeriodExpiresDate = try e.date(
      ms: "grace_period_expires_date_ms", text: "grace_period_expires_date")
    rawPriceConsentStatus = try e.intOrBool("price_consent_status")
    if let promo = try e.string("promotional_offer_id") {
      rawOfferType = OfferType.promotional.rawValue
      offerIdentifier = promo
    } else if let code = try e.string("offer_code_ref_name") {
      rawOfferType = OfferType.offerCode.rawValue
      offerIdentifier = code
    }
    rawEnvironment = environment
  }
}
