// History merging: one record per transaction id (renewal infos: per original transaction id),
// the newest data winning, independent of input order.

extension Transaction {
  /// Whether this record of a transaction carries newer data than `other` (same transaction id).
  ///
  /// "Newest" is a deterministic total order, so merging never depends on arrival order:
  /// 1. the larger `signedDate` (V2 signed data; absent is oldest), so a `REFUND_REVERSED`
  ///    payload signed later can restore a transaction;
  /// 2. then the record that knows more: has a revocation date, then a revocation type, then a
  ///    notification type, then `is_upgraded`; then the later `expiresDate` (renewal extensions);
  /// 3. then, only for records that differ but tie on all of that, a fixed order of their contents.
  /// Apple only ever adds these facts to a transaction, except a reversed refund, which comes
  /// with a newer `signedDate`.
  public func supersedes(_ other: Transaction) -> Bool {
    let a = signedDate ?? .min
    let b = other.signedDate ?? .min
    if a != b { return a > b }
    if (revocationDate != nil) != (other.revocationDate != nil) { return revocationDate != nil }
    if (rawRevocationType != nil) != (other.rawRevocationType != nil) {
      return rawRevocationType != nil
    }
    if (notificationType != nil) != (other.notificationType != nil) {
      return notificationType != nil
    }
    if isUpgraded != other.isUpgraded { return isUpgraded }
    let ea = expiresDate ?? .min
    let eb = other.expiresDate ?? .min
    if ea != eb { return ea > eb }
    if self == other { return false }
    return String(describing: self) > String(describing: other)
  }

  /// Deduplicates a history by `transactionId`, keeping the newest data per id (see
  /// ``supersedes(_:)``), ordered by purchase date then transaction id. The result does not
  /// depend on the input's order.
  public static func merged(_ transactions: some Sequence<Transaction>) -> [Transaction] {
    var position: [String: Int] = [:]
    var result: [Transaction] = []
    for transaction in transactions {
      if let existing = position[transaction.transactionId] {
        if transaction.supersedes(result[existing]) { result[existing] = transaction }
      } else {
        position[transaction.transactionId] = result.count
        result.append(transaction)
      }
    }
    result.sort {
      $0.purchaseDate != $1.purchaseDate
        ? $0.purchaseDate < $1.purchaseDate : $0.transactionId < $1.transactionId
    }
    return result
  }
}

extension RenewalInfo {
  /// Whether this renewal info carries newer data than `other` (same original transaction id):
  /// the larger `signedDate` wins (absent is oldest); otherwise a fixed order of the contents.
  public func supersedes(_ other: RenewalInfo) -> Bool {
    let a = signedDate ?? .min
    let b = other.signedDate ?? .min
    if a != b { return a > b }
    if self == other { return false }
    return String(describing: self) > String(describing: other)
  }

  /// Deduplicates renewal infos by `originalTransactionId`, keeping the newest data (see
  /// ``supersedes(_:)``), ordered by original transaction id.
  public static func merged(_ renewals: some Sequence<RenewalInfo>) -> [RenewalInfo] {
    var result: [RenewalInfo] = []
    for renewal in renewals {
      if let existing = result.firstIndex(where: {
        $0.originalTransactionId == renewal.originalTransactionId
      }) {
        if renewal.supersedes(result[existing]) { result[existing] = renewal }
      } else {
        result.append(renewal)
      }
    }
    result.sort { $0.originalTransactionId < $1.originalTransactionId }
    return result
  }
}
