import SubscriptionDomain

/// The durable event log.
///
/// Writing: every write of purchase data (``PurchaseStore/ingest(_:atMs:)``, ``PurchaseStore/applyNotification(appId:notificationId:receivedMs:updates:)``)
/// derives the events of what it changed with the domain's pure derivation and appends them **in
/// the same commit**, deduplicated by ``SubscriptionDomain/SubscriptionEvent/eventId`` (an event
/// already in the log is never appended again: re-importing the same data appends nothing). The
/// same commit records the user's next transition by time alone (a period's end, a grace period's
/// end), which ``appendDueTransitionEvents(atMs:limit:)`` acts on.
public protocol EventLogStore: Sendable {
  /// The app's events after `afterSequence` (0: from the start) matching `query`, in log order, at
  /// most `limit` (clamped to 1...1000). An index range read.
  /// - Throws: `notFound` for an unknown app.
  func events(appId: String, query: EventQuery, afterSequence: Int64, limit: Int)
    async throws(StoreError) -> [LoggedEvent]
  /// The sequence of the store's last logged event (0 when the log is empty): a reader that wants
  /// only events written from now on starts after it.
  func lastEventSequence() async throws(StoreError) -> Int64
  /// How many of the app's events the log holds in (`afterSequence`, `throughSequence`]: an index
  /// range count. A copy of that range kept elsewhere (the WatchEvents feed) that holds more was
  /// made before an erasure removed some of them (a user's erasure deletes their events; nothing
  /// is ever inserted behind the log's end), on this instance or another sharing the database.
  func eventCount(appId: String, afterSequence: Int64, throughSequence: Int64) async throws(StoreError) -> Int
  /// Appends the events that became due by time alone: for users whose recorded next transition
  /// is at or before `atMs`, at most `limit` users per call, in one commit each batch, derives
  /// their events through `atMs` (``SubscriptionDomain/SubscriptionEvent/detectedMs`` is `atMs`),
  /// appends the new ones and records each user's following transition. Instances sharing a
  /// database never process the same user at once (claimed, like receipts).
  /// - Returns: the events appended (to wake watchers and the webhook dispatcher).
  func appendDueTransitionEvents(atMs: Int64, limit: Int) async throws(StoreError) -> [LoggedEvent]
  /// The earliest recorded next transition of any user, `nil` when none: the scheduler sleeps until
  /// then (at most its period).
  func nextTransitionDueMs() async throws(StoreError) -> Int64?
}
