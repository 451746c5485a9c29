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
}

/// A renewal info ready to write.
package struct EncodedRenewalInfo: Sendable {
  package var originalTransactionId: String
  package var signedMs: Int64?
  package var payload: [UInt8]
}

/// One user's encoded update.
package struct EncodedPurchases: Sendable {
  package var user: UserKey
  package var transactions: [EncodedTransaction]
  package var renewalInfos: [EncodedRenewalInfo]

  package init(_ update: UserPurchases) {
    user = update.user
    transactions = update.transactions.map {
      EncodedTransaction(
        transactionId: $0.transactionId, originalTransactionId: $0.originalTransactionId,
        purchaseMs: $0.purchaseDate, signedMs: $0.signedDate, payload: PayloadCodec.encode($0),
        transaction: $0)
    }
    renewalInfos = update.renewalInfos.map {
      EncodedRenewalInfo(
        originalTransactionId: $0.originalTransactionId, signedMs: $0.signedDate,
        payload: PayloadCodec.encode($0))
    }
  }
}
