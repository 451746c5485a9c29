import SubscriptionDomain

/// Where the last App Store Server API sync of one user's history left off: the revision of Get
/// Transaction History to resume from (Apple returns only what changed after it) and the
/// transaction id the user is known to Apple by.
public struct TransactionHistorySyncState: Sendable, Hashable {
  /// Whose history.
  public var user: UserKey
  /// A transaction id of the user that Apple knows (what the last sync asked with).
  public var transactionId: String
  /// Apple's `revision` after the last sync (sorted ASCENDING); `nil`: sync from the start.
  public var revision: String?
  /// When the last sync finished, in milliseconds since 1970.
  public var lastSyncMs: Int64

  /// Creates a sync state.
  public init(user: UserKey, transactionId: String, revision: String?, lastSyncMs: Int64) {
    self.user = user
    self.transactionId = transactionId
    self.revision = revision
    self.lastSyncMs = lastSyncMs
  }
}

/// A lease on the reconciliation of one app and environment, granted by
/// ``ServerAPISyncStore/claimReconciliation(appId:environment:owner:atMs:leaseUntilMs:)``: while it holds, no
/// other instance reconciles the same app and environment.
public struct ReconciliationClaim: Sendable, Hashable {
  /// The app.
  public var appId: String
  /// The environment.
  public var environment: Environment
  /// Until when the previous completed reconciliation covered Apple's notification history; `nil`
  /// when the app was never reconciled.
  public var reconciledThroughMs: Int64?

  /// Creates a claim.
  public init(appId: String, environment: Environment, reconciledThroughMs: Int64?) {
    self.appId = appId
    self.environment = environment
    self.reconciledThroughMs = reconciledThroughMs
  }
}

extension StoreValidation {
  /// Checks a sync state: app, user and transaction ids are non-empty.
  /// - Throws: `invalidArgument` naming the problem.
  public static func validate(_ state: TransactionHistorySyncState) throws(StoreError) {
    if state.user.appId.isEmpty { throw StoreError(.invalidArgument, "sync state: app_id is empty") }
    if state.user.userId.isEmpty { throw StoreError(.invalidArgument, "sync state: user_id is empty") }
    if state.transactionId.isEmpty {
      throw StoreError(.invalidArgument, "sync state: transaction_id is empty")
    }
  }

  /// Checks a reconciliation claim's owner and lease.
  /// - Throws: `invalidArgument` naming the problem.
  public static func validateClaim(owner: String, atMs: Int64, leaseUntilMs: Int64) throws(StoreError) {
    if owner.isEmpty { throw StoreError(.invalidArgument, "reconciliation: owner is empty") }
    if leaseUntilMs <= atMs {
      throw StoreError(.invalidArgument, "reconciliation: the lease must end after it starts")
    }
  }
}
