import SubscriptionDomain

/// Stored receipts and their refresh schedule: what the background receipt refresher claims,
/// verifies again with Apple and reschedules (docs/architecture.md "Background jobs").
///
/// Part of ``Store``; a handler or job that needs only this asks for `any ReceiptStore`.
public protocol ReceiptStore: Sendable {
  // MARK: Stored receipts (background refresh)

  /// Inserts or replaces the user's stored receipt (one per ``UserKey``).
  /// - Throws: `notFound` if the app does not exist; `invalidArgument` for an empty user id or
  ///   receipt.
  func saveReceipt(_ receipt: StoredReceipt) async throws(StoreError)
  /// The user's stored receipt; `nil` if none was saved.
  func receipt(of user: UserKey) async throws(StoreError) -> StoredReceipt?
  /// Receipts whose ``StoredReceipt/nextDueMs`` is at or before `atMs`, most overdue first (then by
  /// app, environment, user), at most `limit` (clamped to 1...1000). Receipts without a due time
  /// are never listed. An index range read: cheap however many receipts are stored.
  func dueReceipts(atMs: Int64, limit: Int) async throws(StoreError) -> [StoredReceipt]
  /// Claims receipts due at `atMs` for one refresher, so that instances sharing a database each
  /// verify a different receipt: the same selection and order as ``dueReceipts(atMs:limit:)``, and in
  /// the same atomic step every claimed receipt's due time becomes `leaseUntilMs` (a lease). Until
  /// the lease expires no other claim returns the receipt; the claimant then records the outcome
  /// with ``markReceiptVerified(user:atMs:nextDueMs:receiptData:)`` or
  /// ``rescheduleReceipt(user:nextDueMs:failureCount:)``, which sets the real next due time. If the
  /// claimant dies first, the receipt is due again when the lease expires and another instance
  /// claims it (at-least-once: a claimant slower than its lease may overlap the next one).
  ///
  /// ```swift
  /// let batch = try await store.claimDueReceipts(atMs: now, limit: 200, leaseUntilMs: now + 300_000)
  /// ```
  /// - Parameters:
  ///   - atMs: the current time; receipts due at or before it are claimed.
  ///   - limit: how many at most (clamped to 1...1000).
  ///   - leaseUntilMs: when the claim expires; must be after `atMs`.
  /// - Returns: the claimed receipts as they were before the claim (``StoredReceipt/nextDueMs`` is
  ///   the due time that made them due), most overdue first.
  /// - Throws: `invalidArgument` unless `leaseUntilMs > atMs`.
  func claimDueReceipts(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [StoredReceipt]
  /// Records a successful verification: sets the last verified time, the next due time (`nil`: not
  /// due), resets the failure count and, when `receiptData` is given, replaces the receipt (Apple's
  /// fresher `latest_receipt`).
  /// - Throws: `notFound` if the user has no stored receipt.
  func markReceiptVerified(
    user: UserKey, atMs: Int64, nextDueMs: Int64?, receiptData: String?
  ) async throws(StoreError)
  /// Records a failed refresh: sets the next due time (`nil`: stop) and the failure count; the
  /// receipt and its last verified time stay.
  /// - Throws: `notFound` if the user has no stored receipt.
  func rescheduleReceipt(user: UserKey, nextDueMs: Int64?, failureCount: Int)
    async throws(StoreError)
}
