/// A user's latest App Store receipt, kept so the service can re-verify it in the background
/// (subscriptions near expiry, in billing grace or billing retry).
///
/// Receipts are not secrets, but they hold purchase data: stores keep them as they are and never
/// log them.
public struct StoredReceipt: Sendable, Hashable {
  /// Whose receipt it is (one per app, environment and user: a newer one replaces it).
  public var user: UserKey
  /// The base64 receipt: Apple's `latest_receipt` of the last verification, else the one submitted.
  public var receiptData: String
  /// When it was last verified successfully, ms since the epoch; `nil` before the first success.
  public var lastVerifiedMs: Int64?
  /// When it should be verified next, ms since the epoch; `nil`: not due (nothing to watch).
  public var nextDueMs: Int64?
  /// Failed refreshes since the last success (drives the exponential backoff).
  public var failureCount: Int

  /// Creates a stored receipt.
  public init(
    user: UserKey, receiptData: String, lastVerifiedMs: Int64? = nil, nextDueMs: Int64? = nil,
    failureCount: Int = 0
  ) {
    self.user = user
    self.receiptData = receiptData
    self.lastVerifiedMs = lastVerifiedMs
    self.nextDueMs = nextDueMs
    self.failureCount = failureCount
  }
}
