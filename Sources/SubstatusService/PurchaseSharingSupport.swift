import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire

// Purchase sharing in the service (docs/architecture.md "Access model"): which writes are
// submissions, the ownership gaps read for evaluation, and the per-item refusal.
//
// Submissions (`UserPurchases.submittedMs` = the server's clock at ingest): SubmitReceipt (both
// paths), ImportReceiptResponse, ImportTransactions, SubmitSignedTransactions and
// SyncTransactionHistory. Not submissions: V1 and V2 notifications (routed to the original
// transaction's current owners only, `Store.users`), the background refresh of a stored receipt,
// the Server API reconciliation and revocation syncs. Those change no owner.
extension SubstatusService {
  /// The histories with their ownership gaps, for an app whose purchase sharing ever left SHARE;
  /// unchanged (and no read) for the others.
  func owning(_ histories: [UserHistory], _ cached: CachedApp) async throws(RPCError) -> [UserHistory] {
    guard cached.app.ownershipTracked, let first = histories.first else { return histories }
    let gaps = try await stored { () throws(StoreError) in
      try await purchaseStore.ownershipGaps(
        appId: first.user.appId, environment: first.user.environment, userIds: histories.map(\.user.userId))
    }
    if gaps.isEmpty { return histories }
    return histories.map { h in
      var h = h
      h.ownershipGaps = gaps[h.user.userId] ?? []
      return h
    }
  }

  /// One history with its ownership gaps (see ``owning(_:_:)-([UserHistory],_)``).
  func owning(_ history: UserHistory, _ cached: CachedApp) async throws(RPCError) -> UserHistory {
    try await owning([history], cached)[0]
  }

  /// The item error of an original transaction that another user owns under KEEP_FIRST.
  static func ownedByAnotherUser(_ originalTransactionId: String) -> Substatus_V1_ItemError {
    var e = Substatus_V1_ItemError()
    e.code = Int32(RPCError.Code.failedPrecondition.rawValue)
    e.reason = "OWNED_BY_ANOTHER_USER"
    e.message =
      "original transaction \(originalTransactionId) is owned by another user of the app (purchase sharing KEEP_FIRST); nothing of it was stored for this user"
    return e
  }

  /// A refused original transaction as SubmitReceipt, ImportReceiptResponse and
  /// SyncTransactionHistory answer it.
  static func refusedOriginalTransaction(_ originalTransactionId: String) -> Substatus_V1_RefusedOriginalTransaction {
    var r = Substatus_V1_RefusedOriginalTransaction()
    r.originalTransactionID = originalTransactionId
    r.error = ownedByAnotherUser(originalTransactionId)
    return r
  }
}
