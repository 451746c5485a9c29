import SubscriptionDomain

/// Argument checks every ``Store`` implementation applies before touching its data, so all of them
/// refuse the same input with the same ``StoreError/Code-swift.struct/invalidArgument`` message.
public enum StoreValidation {
  /// Checks named entitlement definitions: non-empty ids, each once, and every product id in the
  /// app's catalog (`catalog`).
  /// - Throws: `invalidArgument` naming the empty or repeated id, or every unknown product id.
  public static func validate(
    _ entitlements: [EntitlementDefinition], catalog: Set<String>
  ) throws(StoreError) {
    var seen = Set<String>()
    var unknown: [String] = []
    for (i, e) in entitlements.enumerated() {
      if e.entitlementId.isEmpty {
        throw StoreError(.invalidArgument, "entitlements[\(i)]: entitlement_id is empty")
      }
      if !seen.insert(e.entitlementId).inserted {
        throw StoreError(
          .invalidArgument, "entitlements[\(i)]: \"\(e.entitlementId)\" appears twice")
      }
      for p in e.productIds where !catalog.contains(p) && !unknown.contains(p) { unknown.append(p) }
    }
    if !unknown.isEmpty {
      throw StoreError(
        .invalidArgument,
        "products not in the catalog: \(unknown.map { "\"\($0)\"" }.joined(separator: ", "))")
    }
  }

  /// Checks a key: operator keys have no tenant, other keys have one, the hash is a SHA-256.
  /// - Throws: `invalidArgument` naming the problem.
  public static func validate(_ key: ApiKeyRecord) throws(StoreError) {
    if key.keyId.isEmpty { throw StoreError(.invalidArgument, "key_id is empty") }
    if key.role == .operator, key.tenantId != nil {
      throw StoreError(.invalidArgument, "an operator key belongs to no tenant")
    }
    if key.role != .operator, key.tenantId == nil {
      throw StoreError(.invalidArgument, "a \(key.role.rawValue) key needs a tenant")
    }
    if key.keyHash.count != 32 {
      throw StoreError(
        .invalidArgument, "key_hash must be a 32-byte SHA-256, got \(key.keyHash.count) bytes")
    }
  }

  /// Checks purchase data: app, user, transaction and original transaction ids are non-empty.
  /// - Throws: `invalidArgument` naming the first bad item by its position in the batch.
  public static func validate(_ batch: [UserPurchases]) throws(StoreError) {
    for (i, update) in batch.enumerated() {
      if update.user.appId.isEmpty {
        throw StoreError(.invalidArgument, "batch[\(i)]: app_id is empty")
      }
      if update.user.userId.isEmpty {
        throw StoreError(.invalidArgument, "batch[\(i)]: user_id is empty")
      }
      for (j, t) in update.transactions.enumerated()
      where t.transactionId.isEmpty || t.originalTransactionId.isEmpty {
        throw StoreError(
          .invalidArgument,
          "batch[\(i)].transactions[\(j)]: transaction_id and original_transaction_id are required")
      }
      for (j, r) in update.renewalInfos.enumerated() where r.originalTransactionId.isEmpty {
        throw StoreError(
          .invalidArgument, "batch[\(i)].renewal_infos[\(j)]: original_transaction_id is required")
      }
      if update.renewalInfoSnapshot?.originalTransactionIds.contains("") == true {
        throw StoreError(
          .invalidArgument, "batch[\(i)].renewal_info_snapshot: an original_transaction_id is empty")
      }
    }
  }

  /// Checks a receipt to store: app id, user id and receipt data are non-empty, the failure count
  /// is not negative.
  /// - Throws: `invalidArgument` naming the field.
  public static func validate(_ receipt: StoredReceipt) throws(StoreError) {
    if receipt.user.appId.isEmpty { throw StoreError(.invalidArgument, "receipt: app_id is empty") }
    if receipt.user.userId.isEmpty {
      throw StoreError(.invalidArgument, "receipt: user_id is empty")
    }
    if receipt.receiptData.isEmpty {
      throw StoreError(.invalidArgument, "receipt: receipt_data is empty")
    }
    if receipt.failureCount < 0 {
      throw StoreError(.invalidArgument, "receipt: failure_count is negative")
    }
  }

  /// Checks a claim's lease: it must end after the claim time.
  /// - Throws: `invalidArgument`.
  public static func validateLease(atMs: Int64, leaseUntilMs: Int64) throws(StoreError) {
    if leaseUntilMs <= atMs {
      throw StoreError(.invalidArgument, "claim: lease_until_ms must be after at_ms")
    }
  }
}
