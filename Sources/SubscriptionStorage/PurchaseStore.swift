import SubscriptionDomain

/// Users' purchase data and what is derived from it in the same commit: transactions and renewal
/// infos merged by Apple's clock, processed notification ids, purchase-sharing ownership (transfers
/// and gaps) and the per-user summaries the read path serves (see ``Store`` for the rules every
/// implementation follows).
///
/// Every write of purchase data also appends the events it causes to the ``EventLogStore`` log in
/// its commit, which is why the stores implement both. Part of ``Store``; a handler or job that
/// needs only this asks for `any PurchaseStore`.
public protocol PurchaseStore: Sendable {
  // MARK: Purchase data

  /// Upserts many users' transactions and renewal infos (and applies their renewal-info snapshots)
  /// in one durable commit, with the events they cause (``EventLogStore``: derived at `atMs`, the
  /// events' ``SubscriptionDomain/SubscriptionEvent/detectedMs``).
  /// - Throws: `notFound` if an app does not exist (nothing of the batch is stored).
  func ingest(_ batch: [UserPurchases], atMs: Int64) async throws(StoreError) -> IngestSummary
  /// Applies a notification exactly once: if `notificationId` is new for the app, records it and
  /// upserts `updates` atomically (with the events they cause, detected at `receivedMs`) and returns
  /// what the commit wrote (as ``ingest(_:atMs:)`` does: ``IngestSummary/eventsAppended`` counts
  /// its events); if it was seen before, changes nothing and returns `nil`.
  /// - Throws: `notFound` if an app does not exist.
  func applyNotification(
    appId: String, notificationId: String, receivedMs: Int64, updates: [UserPurchases]
  ) async throws(StoreError) -> IngestSummary?
  /// Forgets processed notification ids received before `receivedBeforeMs` (Apple stops retrying a
  /// notification after a few days; keep well beyond that, e.g. 30 days).
  /// - Returns: how many ids were forgotten.
  func pruneNotifications(receivedBeforeMs: Int64) async throws(StoreError) -> Int
  /// Whether a notification id was already processed for the app.
  func isNotificationProcessed(appId: String, notificationId: String) async throws(StoreError)
    -> Bool
  /// One user's whole history (empty for a user never seen).
  func history(of user: UserKey) async throws(StoreError) -> UserHistory
  /// Several users' histories of one app and environment in one read, in the order of `userIds`.
  func histories(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [UserHistory]
  /// One user's transactions, paged, in purchase order (then by transaction id).
  func transactions(of user: UserKey, page: PageRequest) async throws(StoreError) -> Page<
    Transaction
  >
  /// One user's renewal infos, ordered by original transaction id (``UserHistory/renewalInfos``),
  /// without decoding the user's transactions: a page of a long history needs only these.
  func renewalInfos(of user: UserKey) async throws(StoreError) -> [RenewalInfo]
  /// The users of an app and environment whose history holds `originalTransactionId` and who own
  /// it now (no open ownership gap: always, for an app that never left SHARE), ordered by user id.
  /// Notifications are routed to them.
  func users(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [String]
  /// The ownership gaps of users of an app and environment (purchase sharing), by user id; users
  /// without any are absent. Each user's gaps are ordered by original transaction id, then start.
  /// Read it only for apps with ``AppRecord/ownershipTracked``: the others have none.
  func ownershipGaps(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: [OwnershipGap]]
  /// Every ownership transfer of an original transaction, oldest first (then by previous owner).
  func ownershipTransfers(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [OwnershipTransfer]
  /// The stored per-user summaries of users of an app and environment, by user id, read in one
  /// statement; users without one are absent. Each write of a user's data or ownership stores the
  /// user's summary in its commit (at the write's time, with the app's catalog and policy then);
  /// erasure deletes it. See ``StoredSummary``.
  func summaries(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: StoredSummary]
  /// Stores summaries the read path computed from the history, each only if the user's stored
  /// stamp is still ``SummaryRewrite/expectedStamp`` (no write since the history was read; with no
  /// expected stamp: no summary is stored and the user has data). A refused rewrite is not an
  /// error.
  /// - Returns: how many were stored.
  func rewriteSummaries(
    appId: String, environment: Environment, _ rewrites: [SummaryRewrite]
  ) async throws(StoreError) -> Int
  /// The users of an app and environment that have any stored data, ordered by user id (reports).
  func listUsers(
    appId: String, environment: Environment, page: PageRequest
  ) async throws(StoreError) -> Page<String>
}

extension PurchaseStore {
  /// See ``PurchaseStore/renewalInfos(of:)``. This default reads the whole history; stores that can
  /// read the renewal infos alone do.
  public func renewalInfos(of user: UserKey) async throws(StoreError) -> [RenewalInfo] {
    try await history(of: user).renewalInfos
  }
}
