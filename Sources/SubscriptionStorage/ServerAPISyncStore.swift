import SubscriptionDomain

/// App Store Server API sync state: where each user's Get Transaction History sync left off, and the
/// per-app, per-environment reconciliation lease of Apple's notification history (one instance
/// reconciles at a time).
///
/// Part of ``Store``; a handler or job that needs only this asks for `any ServerAPISyncStore`.
public protocol ServerAPISyncStore: Sendable {
  // MARK: App Store Server API sync

  /// Inserts or replaces the user's Server API sync state (one per ``UserKey``).
  /// - Throws: `notFound` if the app does not exist; `invalidArgument` for an empty user or
  ///   transaction id.
  func saveTransactionHistorySync(_ state: TransactionHistorySyncState) async throws(StoreError)
  /// The user's Server API sync state; `nil` if the user was never synced.
  func transactionHistorySync(of user: UserKey) async throws(StoreError) -> TransactionHistorySyncState?
  /// Claims the reconciliation of an app and environment for `owner` until `leaseUntilMs`: granted
  /// when nobody holds it, the holder's lease ended (`<= atMs`), or `owner` holds it already.
  /// - Returns: the claim (with the last reconciled time); `nil` when another owner holds it.
  /// - Throws: `notFound` if the app does not exist.
  func claimReconciliation(
    appId: String, environment: Environment, owner: String, atMs: Int64, leaseUntilMs: Int64
  ) async throws(StoreError) -> ReconciliationClaim?
  /// Ends `owner`'s claim and records that Apple's notification history is reconciled through
  /// `reconciledThroughMs` (`nil`: release the claim without moving the time).
  /// - Throws: `notFound` when `owner` does not hold the claim (it expired and was taken over).
  func completeReconciliation(
    appId: String, environment: Environment, owner: String, reconciledThroughMs: Int64?
  ) async throws(StoreError)
}
