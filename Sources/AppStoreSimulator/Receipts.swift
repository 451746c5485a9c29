import Foundation
import SubstatusJSON

/// The opaque receipt an app would send: base64 of
/// `asim1:<env>:<seq>:<issued ms>:<bundle>:<user>` for an app receipt, whose `seq` is the snapshot
/// (`receipt.in_app` lists the transactions that existed when it was issued), or of
/// `asim1t:<env>:<seq>:<issued ms>:<bundle>:<user>:<transaction id>` for an iOS 6-style
/// transaction receipt. Bundle and user ids never contain `:`.
struct ReceiptToken: Sendable, Equatable {
  static let prefix = "asim1"
  static let transactionPrefix = "asim1t"
  var environment: StoreEnvironment
  var snapshotSeq: Int
  var issuedMs: Int64
  var bundleID: String
  var userID: String
  /// Set for an iOS 6-style transaction receipt.
  var transactionID: String?

  var encoded: String {
    var text = "\(transactionID == nil ? Self.prefix : Self.transactionPrefix):\(environment.rawValue):"
      + "\(snapshotSeq):\(issuedMs):\(bundleID):\(userID)"
    if let transactionID { text += ":\(transactionID)" }
    return Data(text.utf8).base64EncodedString()
  }

  /// Decodes a token; nil when it is not base64 or not one of ours (Apple's 21002).
  init?(decoding text: String) {
    guard let data = Data(base64Encoded: text, options: .ignoreUnknownCharacters),
      let string = String(data: data, encoding: .utf8)
    else { return nil }
    let parts = string.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
    let isTransaction = parts.first == Self.transactionPrefix
    guard parts.count == (isTransaction ? 7 : 6), isTransaction || parts[0] == Self.prefix,
      let environment = StoreEnvironment(rawValue: parts[1]),
      let seq = Int(parts[2]), let issued = Int64(parts[3]), !parts[4].isEmpty, !parts[5].isEmpty
    else { return nil }
    self.init(
      environment: environment, snapshotSeq: seq, issuedMs: issued, bundleID: parts[4],
      userID: parts[5], transactionID: isTransaction ? parts[6] : nil)
  }

  init(
    environment: StoreEnvironment, snapshotSeq: Int, issuedMs: Int64, bundleID: String, userID: String,
    transactionID: String? = nil
  ) {
    self.environment = environment
    self.snapshotSeq = snapshotSeq
    self.issuedMs = issuedMs
    self.bundleID = bundleID
    self.userID = userID
    self.transactionID = transactionID
  }
}

/// Apple's string forms of a date: `<name>`, `<name>_ms`, `<name>_pst`.
func appendDate(_ object: inout JSONObject, _ name: String, _ ms: Int64) {
  object.append(name, .string(AppleTime.gmt(ms)))
  object.append(name + "_ms", .string(String(ms)))
  object.append(name + "_pst", .string(AppleTime.pst(ms)))
}

extension SimulatorState {
  func currentToken(bundleID: String, userID: String) -> ReceiptToken? {
    guard let user = users[userID] else { return nil }
    return ReceiptToken(
      environment: user.environment, snapshotSeq: nextSeq - 1, issuedMs: now, bundleID: bundleID,
      userID: userID)
  }

  /// A transaction in the form of `in_app` / `latest_receipt_info` entries: every value a string.
  func render(_ transaction: Transaction) -> JSONValue {
    var object = JSONObject()
    object.append("quantity", .string("1"))
    object.append("product_id", .string(transaction.productID))
    object.append("transaction_id", .string(transaction.transactionID))
    object.append("original_transaction_id", .string(transaction.originalTransactionID))
    appendDate(&object, "purchase_date", transaction.purchaseMs)
    appendDate(&object, "original_purchase_date", transaction.originalPurchaseMs)
    if let expires = transaction.expiresMs { appendDate(&object, "expires_date", expires) }
    if let web = transaction.webOrderLineItemID { object.append("web_order_line_item_id", .string(web)) }
    object.append("is_trial_period", .string(transaction.isTrialPeriod ? "true" : "false"))
    if transaction.productType == .autoRenewable {
      object.append(
        "is_in_intro_offer_period", .string(transaction.isInIntroOfferPeriod ? "true" : "false"))
    }
    if let cancelled = transaction.cancellationMs {
      appendDate(&object, "cancellation_date", cancelled)
      if let reason = transaction.cancellationReason { object.append("cancellation_reason", .string(reason)) }
    }
    if transaction.isUpgraded { object.append("is_upgraded", .string("true")) }
    object.append("in_app_ownership_type", .string(transaction.ownership.rawValue))
    if let group = transaction.groupID { object.append("subscription_group_identifier", .string(group)) }
    if let promo = transaction.promotionalOfferID { object.append("promotional_offer_id", .string(promo)) }
    if let code = transaction.offerCodeRefName { object.append("offer_code_ref_name", .string(code)) }
    return .object(object)
  }

  /// `latest_receipt_info`: every non-consumable transaction of the receipt, newest first; with
  /// `excludeOld`, only the newest transaction of each subscription.
  func latestReceiptInfo(bundleID: String, userID: String, excludeOld: Bool) -> [JSONValue] {
    var list = receiptTransactions(bundleID, userID).filter { $0.productType != .consumable }
    list.sort {
      $0.purchaseMs != $1.purchaseMs ? $0.purchaseMs > $1.purchaseMs : $0.seq > $1.seq
    }
    if excludeOld {
      var seen = Set<String>()
      list = list.filter { transaction in
        guard transaction.productType == .autoRenewable else { return true }
        return seen.insert(transaction.originalTransactionID).inserted
      }
    }
    return list.map(render)
  }

  /// `pending_renewal_info`: one entry per subscription of the receipt.
  func pendingRenewalInfo(bundleID: String, userID: String) -> [JSONValue] {
    let now = self.now
    return subscriptions.values
      .filter { $0.bundleID == bundleID && $0.userID == userID }
      .sorted { $0.originalTransactionID < $1.originalTransactionID }
      .map { subscription in
        var object = JSONObject()
        let expired = now >= subscription.expiresMs || subscription.revoked
        if expired, let intent = subscription.expirationIntent ?? (subscription.autoRenewEnabled ? nil : "1") {
          object.append("expiration_intent", .string(intent))
        }
        object.append("auto_renew_product_id", .string(subscription.autoRenewProductID))
        object.append("original_transaction_id", .string(subscription.originalTransactionID))
        object.append("product_id", .string(subscription.productID))
        object.append("auto_renew_status", .string(subscription.autoRenewEnabled ? "1" : "0"))
        if subscription.billingRetrySinceMs != nil {
          object.append("is_in_billing_retry_period", .string("1"))
        } else if expired {
          object.append("is_in_billing_retry_period", .string("0"))
        }
        if let grace = subscription.gracePeriodExpiresMs, subscription.billingRetrySinceMs != nil {
          appendDate(&object, "grace_period_expires_date", grace)
        }
        if let increase = subscription.priceIncrease {
          object.append("price_consent_status", .string(increase.accepted ? "1" : "0"))
        }
        if let pending = subscription.pendingOffer {
          switch pending.kind {
          case .promotional(let id): object.append("promotional_offer_id", .string(id))
          case .offerCode(let name): object.append("offer_code_ref_name", .string(name))
          case .introductory: break
          }
        }
        return .object(object)
      }
  }

  /// The verifyReceipt response body for `token` at the endpoint of `endpoint`.
  func verifyReceipt(
    receiptData: String?, password: String?, excludeOldTransactions: Bool,
    endpoint: StoreEnvironment
  ) -> JSONValue {
    func status(_ code: Int, _ environment: StoreEnvironment = endpoint) -> JSONValue {
      .object(["status": .integer(code), "environment": .string(environment.receiptValue)])
    }
    guard let receiptData, let token = ReceiptToken(decoding: receiptData) else { return status(21002) }
    if token.environment == .sandbox && endpoint == .production { return status(21007) }
    if token.environment == .production && endpoint == .sandbox { return status(21008) }
    guard let user = users[token.userID], let app = apps[token.bundleID] else { return status(21003) }
    if user.deleted { return status(21010) }
    let all = receiptTransactions(token.bundleID, token.userID)
    var hasAutoRenewable = all.contains { $0.productType == .autoRenewable }
    if let id = token.transactionID {
      guard let transaction = transactions[id], transaction.userID == user.userID,
        transaction.bundleID == app.bundleID
      else { return status(21003) }
      hasAutoRenewable = transaction.productType == .autoRenewable
    }
    if hasAutoRenewable {
      guard let password, !password.isEmpty else { return status(21003) }
      guard app.sharedSecrets.contains(password) else { return status(21004) }
    } else if let password, !password.isEmpty, !app.sharedSecrets.contains(password) {
      return status(21004)
    }
    let now = self.now
    if let id = token.transactionID, let transaction = transactions[id] {
      return transactionReceiptResponse(transaction, app: app, endpoint: endpoint, now: now)
    }
    var receipt = JSONObject()
    receipt.append("receipt_type", .string(endpoint == .production ? "Production" : "ProductionSandbox"))
    receipt.append("adam_id", .integer(endpoint == .production ? app.appleAppID : 0))
    receipt.append("app_item_id", .integer(endpoint == .production ? app.appleAppID : 0))
    receipt.append("bundle_id", .string(app.bundleID))
    receipt.append("application_version", .string("1"))
    receipt.append("download_id", .integer(0))
    receipt.append("version_external_identifier", .integer(0))
    appendDate(&receipt, "receipt_creation_date", token.issuedMs)
    appendDate(&receipt, "request_date", now)
    appendDate(&receipt, "original_purchase_date", user.createdMs)
    receipt.append("original_application_version", .string("1.0"))
    receipt.append(
      "in_app",
      .array(all.filter { $0.seq <= token.snapshotSeq }.sorted { $0.seq < $1.seq }.map(render)))
    var body: JSONObject = [
      "status": .integer(0), "environment": .string(endpoint.receiptValue), "receipt": .object(receipt),
    ]
    if hasAutoRenewable {
      body.append(
        "latest_receipt_info",
        .array(latestReceiptInfo(bundleID: app.bundleID, userID: user.userID, excludeOld: excludeOldTransactions)))
      body.append(
        "latest_receipt",
        .string(currentToken(bundleID: app.bundleID, userID: user.userID)?.encoded ?? receiptData))
      body.append("pending_renewal_info", .array(pendingRenewalInfo(bundleID: app.bundleID, userID: user.userID)))
    }
    return .object(body)
  }
}

extension SimulatorState {
  /// A transaction in the flat iOS 6 receipt form: `bid`, `bvrs`, `item_id`, `expires_date` in
  /// ms, `expires_date_formatted`.
  func renderIOS6(_ transaction: Transaction, app: App) -> JSONValue {
    var object = JSONObject()
    object.append("quantity", .string("1"))
    object.append("product_id", .string(transaction.productID))
    object.append("transaction_id", .string(transaction.transactionID))
    object.append("original_transaction_id", .string(transaction.originalTransactionID))
    appendDate(&object, "purchase_date", transaction.purchaseMs)
    appendDate(&object, "original_purchase_date", transaction.originalPurchaseMs)
    if let expires = transaction.expiresMs {
      object.append("expires_date", .string(String(expires)))
      object.append("expires_date_formatted", .string(AppleTime.gmt(expires)))
      object.append("expires_date_formatted_pst", .string(AppleTime.pst(expires)))
    }
    if let web = transaction.webOrderLineItemID { object.append("web_order_line_item_id", .string(web)) }
    object.append("is_trial_period", .string(transaction.isTrialPeriod ? "true" : "false"))
    if let cancelled = transaction.cancellationMs { appendDate(&object, "cancellation_date", cancelled) }
    object.append("item_id", .string(String(app.appleAppID)))
    object.append("bid", .string(app.bundleID))
    object.append("bvrs", .string("1"))
    return .object(object)
  }

  /// verifyReceipt for an iOS 6-style transaction receipt: status 0 with `latest_receipt_info`
  /// while the subscription is active, 21006 with `latest_expired_receipt_info` once it expired
  /// (the receipt is still decoded and returned, as Apple documents).
  func transactionReceiptResponse(
    _ transaction: Transaction, app: App, endpoint: StoreEnvironment, now: Int64
  ) -> JSONValue {
    var body: JSONObject = ["status": .integer(0), "environment": .string(endpoint.receiptValue)]
    body.append("receipt", renderIOS6(transaction, app: app))
    guard transaction.productType == .autoRenewable,
      let subscription = subscriptions[transaction.originalTransactionID],
      let latest = transactions[subscription.latestTransactionID]
    else { return .object(body) }
    let expired = latest.cancellationMs != nil || now >= (latest.expiresMs ?? 0)
    if expired {
      body["status"] = .integer(21006)
      body.append("latest_expired_receipt_info", renderIOS6(latest, app: app))
    } else {
      body.append("latest_receipt_info", renderIOS6(latest, app: app))
      let token = ReceiptToken(
        environment: subscription.environment, snapshotSeq: latest.seq, issuedMs: now,
        bundleID: app.bundleID, userID: latest.userID, transactionID: latest.transactionID)
      body.append("latest_receipt", .string(token.encoded))
    }
    return .object(body)
  }
}
