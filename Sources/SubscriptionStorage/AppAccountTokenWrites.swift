// Rule 26's write-back, made durable (docs/architecture.md "Access model", "Background
// services"): when purchase sharing moves an original transaction to another app user, the commit
// that records the transfer also writes an outbox row, "tell Apple that this original
// transaction's appAccountToken is now this user's id". A background writer sends it with Set App
// Account Token and deletes the row; a crash or restart leaves the row to a later pass. One row per
// original transaction: a later transfer replaces an unsent one, so Apple ends with the last
// owner's token.
import SubscriptionDomain

/// One original transaction's `appAccountToken` to write to Apple (Set App Account Token, App
/// Store Server API 1.16) after purchase sharing moved it to ``userId``.
public struct AppAccountTokenWrite: Sendable, Hashable {
  /// The app.
  public var appId: String
  /// The environment of the original transaction.
  public var environment: Environment
  /// The original transaction whose token is written (the row's key with the app and environment).
  public var originalTransactionId: String
  /// The owner whose id is the token (Apple accepts a UUID only: the writer checks).
  public var userId: String
  /// The instant of the transfer that asked for the write (the server's clock).
  public var transferredMs: Int64
  /// Attempts made for this owner so far (a later transfer starts again at 0).
  public var attempts: Int
  /// When the next attempt is due (also a claim's lease end); `nil` once given up.
  public var nextAttemptMs: Int64?
  /// The last failure; once given up, why.
  public var detail: String?

  /// Creates a write, due at ``transferredMs`` unless `nextAttemptMs` says otherwise.
  public init(
    appId: String, environment: Environment, originalTransactionId: String, userId: String, transferredMs: Int64,
    attempts: Int = 0, nextAttemptMs: Int64? = nil, detail: String? = nil, givenUp: Bool = false
  ) {
    self.appId = appId
    self.environment = environment
    self.originalTransactionId = originalTransactionId
    self.userId = userId
    self.transferredMs = transferredMs
    self.attempts = attempts
    self.nextAttemptMs = givenUp ? nil : (nextAttemptMs ?? transferredMs)
    self.detail = detail
  }

  /// Whether the writer gave up on it (the row is kept with its reason until a later transfer).
  public var isGivenUp: Bool { nextAttemptMs == nil }
}

/// Where the stores keep ``AppAccountTokenWrite``s (the outbox of Set App Account Token). The
/// SQLite, PostgreSQL and in-memory stores conform.
///
/// Rows are written only by the ingest commit that records an ``OwnershipTransfer``
/// (``PurchaseOwnership``), never by a separate call, so an acknowledged transfer always has its
/// write. A new transfer of the same original transaction replaces the row: the new owner, 0
/// attempts, no detail, and due at the transfer's instant or the row's current due time,
/// whichever is later (a claimed row keeps its lease, so two writers never send one original
/// transaction's tokens at once and the older one can never land last). Erasing a user deletes
/// the rows that name them.
public protocol AppAccountTokenWriteStore: Sendable {
  /// Claims the writes due at `atMs` (oldest due first, at most `limit`, given-up ones never):
  /// each one's ``AppAccountTokenWrite/nextAttemptMs`` becomes `leaseUntilMs`, so another
  /// instance (or a later claim) takes it only after the lease, when the claimant did not finish
  /// or reschedule it. The returned rows carry their due time before the claim.
  func claimDueAppAccountTokenWrites(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [AppAccountTokenWrite]

  /// The earliest ``AppAccountTokenWrite/nextAttemptMs`` of a write not given up; `nil` when none.
  func nextAppAccountTokenWriteDueMs() async throws(StoreError) -> Int64?

  /// Ends `write` after an attempt: when the row still names `write.userId`, it is deleted
  /// (`givenUpDetail` nil: written, or nothing to write) or kept as given up with that reason.
  /// When a later transfer replaced it meanwhile, the row stays open and becomes due at
  /// `releaseAtMs` (the attempt is over: the new owner's write may go).
  /// - Returns: whether the row still named `write.userId` (`false`: superseded, or gone).
  @discardableResult
  func finishAppAccountTokenWrite(_ write: AppAccountTokenWrite, givenUpDetail: String?, releaseAtMs: Int64)
    async throws(StoreError) -> Bool

  /// After a failed attempt: when the row still names `write.userId`, it stays open with
  /// `attempts` and `detail`, due at `nextAttemptMs`. When a later transfer replaced it meanwhile,
  /// only the due time is set (the new owner's write waits out the same backoff: Apple's limits).
  /// - Returns: whether the row still named `write.userId`.
  @discardableResult
  func rescheduleAppAccountTokenWrite(
    _ write: AppAccountTokenWrite, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) -> Bool

  /// The write of one original transaction, open or given up; `nil` when none.
  func appAccountTokenWrite(appId: String, environment: Environment, originalTransactionId: String)
    async throws(StoreError) -> AppAccountTokenWrite?
}

extension AppAccountTokenWrite {
  /// The row a transfer asks for, replacing `existing` (the row of the same original transaction,
  /// if any): the rule of ``AppAccountTokenWriteStore`` once, for the stores' ledgers.
  package static func replacing(_ existing: AppAccountTokenWrite?, by transfer: OwnershipTransfer)
    -> AppAccountTokenWrite
  {
    let due = max(transfer.atMs, existing?.nextAttemptMs ?? transfer.atMs)
    return AppAccountTokenWrite(
      appId: transfer.appId, environment: transfer.environment, originalTransactionId: transfer.originalTransactionId,
      userId: transfer.newUserId, transferredMs: transfer.atMs, nextAttemptMs: due)
  }
}
