// Rule 25's kept notifications, read and pruned (docs/architecture.md "Stores", "Background
// jobs"): `AdminService.ListKeptNotifications` pages an app's kept notifications by received
// time; the daemon's pruner deletes those older than `--keep-notifications-days`, in bounded
// batches.
import SubscriptionDomain

/// A place in the listing of kept notifications: received time, then the order kept.
public struct KeptNotificationPosition: Sendable, Hashable {
  /// ``KeptNotification/receivedMs``.
  public var receivedMs: Int64
  /// ``KeptNotification/sequence``.
  public var sequence: Int64

  /// Creates a position.
  public init(receivedMs: Int64, sequence: Int64) {
    self.receivedMs = receivedMs
    self.sequence = sequence
  }
}

/// Which kept notifications of an app to list.
public struct KeptNotificationQuery: Sendable, Hashable {
  /// The app.
  public var appId: String
  /// Only this `notificationType` (as Apple sent it); `nil`: every type.
  public var notificationType: String?
  /// Only those received at or after this time; `nil`: no bound.
  public var receivedFromMs: Int64?
  /// Only those received before this time; `nil`: no bound.
  public var receivedBeforeMs: Int64?
  /// Only those after this position (the last one of the previous page); `nil`: from the start.
  public var after: KeptNotificationPosition?
  /// At most this many (clamped to 1...1000).
  public var limit: Int

  /// Creates a query.
  public init(
    appId: String, notificationType: String? = nil, receivedFromMs: Int64? = nil, receivedBeforeMs: Int64? = nil,
    after: KeptNotificationPosition? = nil, limit: Int = 100
  ) {
    self.appId = appId
    self.notificationType = notificationType
    self.receivedFromMs = receivedFromMs
    self.receivedBeforeMs = receivedBeforeMs
    self.after = after
    self.limit = limit
  }
}

/// Reading and pruning the kept notifications (``NotificationLogStore`` keeps them). The SQLite,
/// PostgreSQL and in-memory stores conform.
public protocol KeptNotificationRetentionStore: Sendable {
  /// The app's kept notifications that match `query`, ordered by received time, then by
  /// ``KeptNotification/sequence``; at most `query.limit` (clamped to 1...1000).
  func listKeptNotifications(_ query: KeptNotificationQuery) async throws(StoreError) -> [KeptNotification]

  /// Deletes at most `limit` (clamped to 1...10000) kept notifications, of any app, received
  /// before `receivedBeforeMs`, the oldest first. A notification's deduplication record is not
  /// touched (Apple's late retry of a pruned notification is still recognised and not applied
  /// twice).
  /// - Returns: how many were deleted (fewer than `limit`: none older is left).
  func pruneKeptNotifications(receivedBeforeMs: Int64, limit: Int) async throws(StoreError) -> Int
}

extension KeptNotificationQuery {
  /// The page size the stores use.
  package var pageSize: Int { min(max(1, limit), 1000) }

  /// Whether `n` matches the query's filters and comes after its position (the in-memory store's
  /// rule; the SQL stores say the same in SQL).
  package func matches(_ n: KeptNotification) -> Bool {
    guard n.appId == appId else { return false }
    if let notificationType, n.notificationType != notificationType { return false }
    if let receivedFromMs, n.receivedMs < receivedFromMs { return false }
    if let receivedBeforeMs, n.receivedMs >= receivedBeforeMs { return false }
    if let after, (n.receivedMs, n.sequence) <= (after.receivedMs, after.sequence) { return false }
    return true
  }
}
