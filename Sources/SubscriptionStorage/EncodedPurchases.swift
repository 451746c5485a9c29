// Purchase data encoded for a store's writer: key columns plus the compact payload, encoded on the
// caller's thread before the write reaches a writer or pool thread. Shared by the SQL stores.
import SubscriptionDomain

/// A transaction ready to write.
package struct EncodedTransaction: Sendable {
  package var transactionId: String
  package var originalTransactionId: String
  package var purchaseMs: Int64
  package var signedMs: Int64?
  package var payload: [UInt8]
  /// The decoded value, compared with a stored version by ``Transaction/supersedes(_:)``.
  package var transaction: Transaction

  /// `transaction` encoded.
  package init(_ transaction: Transaction) {
    transactionId = transaction.transactionId
    originalTransactionId = transaction.originalTransactionId
    purchaseMs = transaction.purchaseDate
    signedMs = transaction.signedDate
    payload = PayloadCodec.encode(transaction)
    self.transaction = transaction
  }

  /// The row to write when a merge stores `stored` (``UserPurchaseState/merge(_:)``: this copy, or
  /// the winner of it and the stored one with the price either carries): this one when it is
  /// `stored`, else `stored` encoded.
  package func row(storing stored: Transaction) -> EncodedTransaction {
    stored == transaction ? self : EncodedTransaction(stored)
  }
}

/// A renewal info, or its removal by a snapshot, ready to write.
package struct EncodedRenewalInfo: Sendable {
  package var originalTransactionId: String
  package var signedMs: Int64?
  /// The payload of a present renewal info; `nil` for a removal.
  package var payload: [UInt8]?
  /// The version, compared with the stored one by ``RenewalInfoVersion/supersedes(_:)``.
  package var version: RenewalInfoVersion
}

/// One user's encoded update.
package struct EncodedPurchases: Sendable {
  package var user: UserKey
  package var transactions: [EncodedTransaction]
  /// Renewal infos and the removals of the update's snapshot (``UserPurchases/renewalInfoVersions``).
  package var renewalInfos: [EncodedRenewalInfo]
  /// ``UserPurchases/submittedMs``.
  package var submittedMs: Int64?
  /// ``UserPurchases/onlyIfStored``.
  package var onlyIfStored: Bool

  package init(_ update: UserPurchases) {
    user = update.user
    submittedMs = update.submittedMs
    onlyIfStored = update.onlyIfStored
    transactions = update.transactions.map(EncodedTransaction.init)
    renewalInfos = update.renewalInfoVersions.map {
      EncodedRenewalInfo(
        originalTransactionId: $0.originalTransactionId, signedMs: $0.renewalInfo?.signedDate,
        payload: $0.renewalInfo.map(PayloadCodec.encode), version: $0)
    }
  }

  /// The update without the data of `ids` (refused by ``PurchaseOwnership``).
  package func removing(originalTransactionIds ids: [String]) -> EncodedPurchases {
    if ids.isEmpty { return self }
    let gone = Set(ids)
    var out = self
    out.transactions.removeAll { gone.contains($0.originalTransactionId) }
    out.renewalInfos.removeAll { gone.contains($0.originalTransactionId) }
    return out
  }

  /// ``UserPurchases/originalTransactionIds``: computed only for apps whose purchase sharing
  /// needs it.
  package var originalTransactionIds: Set<String> {
    Set(transactions.map(\.originalTransactionId)).union(renewalInfos.map(\.originalTransactionId))
  }

  /// The update's data as ``PurchaseOwnership`` reads it (``SubmittedPurchases``).
  package var submittedPurchases: SubmittedPurchases {
    SubmittedPurchases(transactions: transactions.map(\.transaction), renewals: renewalInfos.compactMap(\.version.renewalInfo))
  }

  /// The original transactions of the update's `ASSIGNED` transactions (rule 23).
  package var assignedOriginalTransactionIds: Set<String> {
    Set(transactions.lazy.filter { $0.transaction.ownership == .assigned }.map(\.originalTransactionId))
  }

  /// Whether the update carries nothing to store.
  package var isEmpty: Bool { transactions.isEmpty && renewalInfos.isEmpty }
}

/// Whether replacing `old` by `new` is a change worth counting in an ``IngestSummary``: a new
/// record, or one that says something new (not only a newer time).
package func isCountedChange(_ new: Transaction, replacing old: Transaction?) -> Bool {
  old.map { !$0.saysSame(as: new) } ?? true
}

/// The same for renewal infos: a removal of nothing, or of a removal, is not counted.
package func isCountedChange(_ new: RenewalInfoVersion, replacing old: RenewalInfoVersion?) -> Bool {
  old.map { !$0.saysSame(as: new) } ?? (new.renewalInfo != nil)
}
