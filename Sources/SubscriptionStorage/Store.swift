import SubscriptionDomain

/// An app registered by a tenant.
public struct AppRecord: Sendable, Hashable {
  /// The app id (chosen by the service).
  public var appId: String
  /// The owning tenant.
  public var tenantId: String
  /// The bundle identifier; unique within the tenant.
  public var bundleId: String
  /// Apple's numeric app id, if known.
  public var appleAppId: Int64?
  /// A display name.
  public var displayName: String
  /// The app's eligibility policy.
  public var policy: EligibilityPolicy
  /// When it was registered.
  public var createdMs: Int64
  /// The current shared secret's fingerprint, if a secret is set (filled by the store on reads).
  public var sharedSecretFingerprint: String?
  /// What may be shown of the app's In-App Purchase key, if one is set (filled by the store on
  /// reads).
  public var inAppPurchaseKey: InAppPurchaseKeyInfo?
  /// Whether the app's purchase sharing was ever other than SHARE (kept by the store: set by
  /// ``Store/createApp(_:)`` and ``Store/setPolicy(appId:policy:)``, never cleared). Only then can
  /// its users have ``SubscriptionDomain/OwnershipGap``s, so only then do evaluations read them.
  public var ownershipTracked: Bool
  /// Whether the app's developer is in the App Store Small Business Program (Apple's commission
  /// 15 % on every sale; charts' proceeds).
  public var smallBusinessProgram: Bool

  /// Creates an app record.
  public init(
    appId: String, tenantId: String, bundleId: String, appleAppId: Int64? = nil,
    displayName: String = "", policy: EligibilityPolicy = .default, createdMs: Int64,
    sharedSecretFingerprint: String? = nil, inAppPurchaseKey: InAppPurchaseKeyInfo? = nil,
    ownershipTracked: Bool? = nil, smallBusinessProgram: Bool = false
  ) {
    self.appId = appId
    self.tenantId = tenantId
    self.bundleId = bundleId
    self.appleAppId = appleAppId
    self.displayName = displayName
    self.policy = policy
    self.createdMs = createdMs
    self.sharedSecretFingerprint = sharedSecretFingerprint
    self.inAppPurchaseKey = inAppPurchaseKey
    self.ownershipTracked = ownershipTracked ?? !policy.sharesInEveryEnvironment
    self.smallBusinessProgram = smallBusinessProgram
  }
}

/// Identifies one user's purchase history: an app, an App Store environment, the app's user id.
public struct UserKey: Sendable, Hashable {
  /// The app.
  public var appId: String
  /// Production or sandbox: the two histories are kept apart.
  public var environment: Environment
  /// The app's own id for the user.
  public var userId: String

  /// Creates a key.
  public init(appId: String, environment: Environment, userId: String) {
    self.appId = appId
    self.environment = environment
    self.userId = userId
  }
}

/// New or updated purchase data for one user: what an ingest or a notification brings.
///
/// ```swift
/// // A verifyReceipt body: its pending_renewal_info is the whole truth about its subscriptions.
/// UserPurchases(
///   user: user, transactions: response.transactions, renewalInfos: response.pendingRenewalInfo,
///   renewalInfoSnapshot: response.renewalInfoSnapshot)
/// ```
public struct UserPurchases: Sendable, Hashable {
  /// Whose data it is.
  public var user: UserKey
  /// Transactions to upsert (by transaction id).
  public var transactions: [Transaction]
  /// Renewal infos to upsert (by original transaction id).
  public var renewalInfos: [RenewalInfo]
  /// When set, ``renewalInfos`` is Apple's whole current renewal info for the snapshot's original
  /// transactions (rule 13): the stored renewal info of each of them that ``renewalInfos`` lacks is
  /// removed, unless it is newer on Apple's clock than the snapshot. `nil`: the renewal infos
  /// replace only their own (a signed renewal info, a V2 notification).
  public var renewalInfoSnapshot: RenewalInfoSnapshot?
  /// When set, the update is a *submission* by the user at this instant (the server's clock at
  /// ingest): the app's purchase sharing policy applies to its original transactions
  /// (``PurchaseOwnership``). `nil`: a write that changes no owner (a notification, the background
  /// refresh of a stored receipt).
  public var submittedMs: Int64?

  /// Creates an update.
  public init(
    user: UserKey, transactions: [Transaction] = [], renewalInfos: [RenewalInfo] = [],
    renewalInfoSnapshot: RenewalInfoSnapshot? = nil, submittedMs: Int64? = nil
  ) {
    self.user = user
    self.transactions = transactions
    self.renewalInfos = renewalInfos
    self.renewalInfoSnapshot = renewalInfoSnapshot
    self.submittedMs = submittedMs
  }

  /// The original transactions of its transactions and renewal infos (removals included).
  public var originalTransactionIds: Set<String> {
    Set(transactions.map(\.originalTransactionId)).union(renewalInfoVersions.map(\.originalTransactionId))
  }

  /// The update without the transactions and renewal infos of `originalTransactionIds`.
  public func removing(originalTransactionIds ids: Set<String>) -> UserPurchases {
    if ids.isEmpty { return self }
    var out = self
    out.transactions.removeAll { ids.contains($0.originalTransactionId) }
    out.renewalInfos.removeAll { ids.contains($0.originalTransactionId) }
    out.renewalInfoSnapshot = renewalInfoSnapshot.map { $0.restricted(to: Set($0.originalTransactionIds).subtracting(ids)) }
    return out
  }

  /// What the update says of each original transaction's renewal: ``renewalInfos`` as present,
  /// and the snapshot's original transactions they lack as removed.
  public var renewalInfoVersions: [RenewalInfoVersion] {
    renewalInfoSnapshot?.versions(of: renewalInfos) ?? renewalInfos.map(RenewalInfoVersion.present)
  }
}

/// A user's whole stored history: every transaction (deduplicated by id) and renewal info.
public struct UserHistory: Sendable, Hashable {
  /// Whose history it is.
  public var user: UserKey
  /// Every stored transaction, in purchase order (then by transaction id).
  public var transactions: [Transaction]
  /// Every stored renewal info, ordered by original transaction id.
  public var renewalInfos: [RenewalInfo]
  /// The intervals during which the user did not own original transactions of the history
  /// (purchase sharing); filled only by ``Store/ownershipGaps(appId:environment:userIds:)``'s
  /// callers, empty from the history reads.
  public var ownershipGaps: [OwnershipGap]

  /// Creates a history.
  public init(
    user: UserKey, transactions: [Transaction] = [], renewalInfos: [RenewalInfo] = [],
    ownershipGaps: [OwnershipGap] = []
  ) {
    self.user = user
    self.transactions = transactions
    self.renewalInfos = renewalInfos
    self.ownershipGaps = ownershipGaps
  }

  /// The history as the user owned it at `time`: without the original transactions an ownership
  /// gap covers then (``SubscriptionDomain/OwnershipGap/owned(transactions:renewals:gaps:at:)``).
  public func owned(at time: Int64) -> UserHistory {
    if ownershipGaps.isEmpty { return self }
    let (t, r) = OwnershipGap.owned(
      transactions: transactions, renewals: renewalInfos, gaps: ownershipGaps, at: time)
    return UserHistory(user: user, transactions: t, renewalInfos: r, ownershipGaps: ownershipGaps)
  }
}

/// What an erasure removed (``Store/deleteUsers(appId:userIds:)``).
public struct UserErasure: Sendable, Hashable {
  /// The (user, environment) histories erased.
  public var histories: Int
  /// Transactions erased.
  public var transactions: Int
  /// Renewal infos erased (removals recorded by snapshots not counted).
  public var renewalInfos: Int
  /// Stored receipts erased.
  public var receipts: Int

  /// Creates a summary.
  public init(histories: Int = 0, transactions: Int = 0, renewalInfos: Int = 0, receipts: Int = 0) {
    self.histories = histories
    self.transactions = transactions
    self.renewalInfos = renewalInfos
    self.receipts = receipts
  }
}

/// What an ingest changed.
public struct IngestSummary: Sendable, Hashable {
  /// Transactions inserted or replaced by a copy that says something new (identical or older
  /// copies, and newer ones that say the same, are not counted).
  public var transactionsWritten: Int
  /// Renewal infos inserted, replaced or removed (likewise).
  public var renewalInfosWritten: Int
  /// Original transactions not stored for their user because another user owns them (purchase
  /// sharing), in the order of the batch, then by id.
  public var refused: [OwnershipRefusal]
  /// The ownership transfers the commit made (stored with it), in the order of the batch.
  public var transfers: [OwnershipTransfer]
  /// Events appended to the log in the same commit (``EventLogStore``): when positive, watchers
  /// and the webhook dispatcher have something new to read.
  public var eventsAppended: Int

  /// Creates a summary.
  public init(
    transactionsWritten: Int = 0, renewalInfosWritten: Int = 0, refused: [OwnershipRefusal] = [],
    transfers: [OwnershipTransfer] = [], eventsAppended: Int = 0
  ) {
    self.transactionsWritten = transactionsWritten
    self.renewalInfosWritten = renewalInfosWritten
    self.refused = refused
    self.transfers = transfers
    self.eventsAppended = eventsAppended
  }
}

/// Where substatus keeps its state. Implementations: ``InMemoryStore`` (tests), `SQLiteStore`
/// (default), `PostgresStore` (several instances on one database). Every implementation must pass
/// the contract suite `StoreContract` in `Tests/StoreContractTesting`.
///
/// Rules every implementation follows:
/// - A method returns only after its change is durable (committed).
/// - Ids and times come from the caller; the store reads no clock and makes up no ids.
/// - Errors are ``StoreError``; "belongs to another tenant" is reported as ``StoreError/Code-swift.struct/notFound``.
/// - Upserts of purchase data deduplicate by transaction id (renewal infos by original transaction
///   id) and merge by Apple's clock (docs/architecture.md rules 13 and 14): an incoming record
///   replaces the stored one exactly when it ``SubscriptionDomain/Transaction/supersedes(_:)`` it
///   (``SubscriptionDomain/RenewalInfoVersion/supersedes(_:)`` for renewal infos and their
///   removals), the domain's rule, applied to the stored row, never re-implemented in SQL. So a
///   revocation is never lost, a refund is undone only by a copy that is newer on Apple's clock,
///   and any permutation of the same copies leaves the same history. A newer copy that says the
///   same is stored too (its time matters to later merges).
/// - A ``UserPurchases/renewalInfoSnapshot`` removes, in the same commit, the renewal infos its
///   original transactions lack, unless they are newer than the snapshot; the removal is
///   remembered with the snapshot's time (never returned by reads), so an older renewal info that
///   arrives later does not come back.
/// - Lists that can grow are paged with opaque cursors.
/// - Purchase sharing (docs/architecture.md "Access model"): an update with
///   ``UserPurchases/submittedMs`` is a submission; in its commit, under the app's policy read in
///   that commit, it may take original transactions from other users (recording an
///   ``OwnershipTransfer`` and the losers' ``SubscriptionDomain/OwnershipGap``s) or be refused them
///   (``IngestSummary/refused``: nothing of them is stored for the user). The rules are
///   ``PurchaseOwnership``'s, never re-implemented.
public protocol Store: EventLogStore {
  // MARK: Tenants

  /// Creates a tenant.
  /// - Throws: `alreadyExists` if the id is taken.
  func createTenant(_ tenant: TenantRecord) async throws(StoreError)
  /// The tenant with id `tenantId`.
  /// - Throws: `notFound`.
  func tenant(id tenantId: String) async throws(StoreError) -> TenantRecord
  /// Tenants ordered by id.
  func listTenants(page: PageRequest) async throws(StoreError) -> Page<TenantRecord>
  /// Disables or re-enables a tenant and returns it.
  /// - Throws: `notFound`.
  func setTenantDisabled(id tenantId: String, disabled: Bool) async throws(StoreError)
    -> TenantRecord

  // MARK: Apps

  /// Registers an app.
  /// - Throws: `notFound` if the tenant does not exist, `alreadyExists` if the app id or the bundle id
  ///   (within the tenant) is taken.
  func createApp(_ app: AppRecord) async throws(StoreError)
  /// The app with id `appId`, whatever its tenant (the notification endpoint has only the app id).
  /// - Throws: `notFound`.
  func app(id appId: String) async throws(StoreError) -> AppRecord
  /// The app with id `appId` if it belongs to `tenantId`.
  /// - Throws: `notFound` if it does not exist or belongs to another tenant.
  func app(tenantId: String, appId: String) async throws(StoreError) -> AppRecord
  /// The tenant's apps, ordered by app id.
  func listApps(tenantId: String, page: PageRequest) async throws(StoreError) -> Page<AppRecord>
  /// Replaces the app's eligibility policy and returns the app.
  /// - Throws: `notFound`.
  func setPolicy(appId: String, policy: EligibilityPolicy) async throws(StoreError) -> AppRecord
  /// Replaces the app's Apple ID and display name (the bundle id never changes).
  /// - Returns: the app after the change.
  /// - Throws: `notFound` for an unknown app.
  func updateApp(appId: String, appleAppId: Int64?, displayName: String) async throws(StoreError)
    -> AppRecord
  /// Sets whether the app's developer is in the App Store Small Business Program
  /// (``AppRecord/smallBusinessProgram``).
  /// - Returns: the app after the change.
  /// - Throws: `notFound` for an unknown app.
  func setSmallBusinessProgram(appId: String, _ member: Bool) async throws(StoreError)
    -> AppRecord

  // MARK: Shared secrets

  /// Sets the app's shared secret (sealed at rest). The current secret becomes the previous one,
  /// still accepted until `previousValidUntilMs`.
  /// - Returns: the new secret's fingerprint.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if the store has no master key.
  func setSharedSecret(
    appId: String, secret: String, atMs: Int64, previousValidUntilMs: Int64
  ) async throws(StoreError) -> String
  /// The app's secrets, opened; `nil` when none was ever set.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if a secret cannot be opened
  ///   (master key missing or wrong).
  func sharedSecrets(appId: String) async throws(StoreError) -> SharedSecrets?

  // MARK: Catalog

  /// Inserts or replaces products (by product id) in the app's catalog.
  /// - Throws: `notFound` for an unknown app.
  func putProducts(appId: String, products: [Product]) async throws(StoreError)
  /// The app's whole catalog, ordered by product id.
  /// - Throws: `notFound` for an unknown app.
  func products(appId: String) async throws(StoreError) -> [Product]

  // MARK: Named entitlements

  /// Inserts or replaces named entitlement definitions (by entitlement id) of the app; the others
  /// stay. All or nothing, in one commit, checked against the catalog in that commit.
  /// - Throws: `notFound` for an unknown app; `invalidArgument` when a definition has an empty id
  ///   or names a product the app's catalog lacks (the message names them; nothing is written).
  func putEntitlements(appId: String, entitlements: [EntitlementDefinition]) async throws(StoreError)
  /// The app's entitlement definitions, ordered by entitlement id.
  /// - Throws: `notFound` for an unknown app.
  func entitlements(appId: String) async throws(StoreError) -> [EntitlementDefinition]
  /// Deletes entitlement definitions of the app by id, in one commit.
  /// - Returns: the ids that existed and were deleted, in the order given (each once).
  /// - Throws: `notFound` for an unknown app.
  func deleteEntitlements(appId: String, entitlementIds: [String]) async throws(StoreError)
    -> [String]

  // MARK: Erasure

  /// Deletes products from the app's catalog, and from every named entitlement that lists them,
  /// in one commit. The transactions of those products stay in the users' histories (evaluation
  /// then treats them as unknown products, docs/architecture.md rule 2).
  /// - Returns: the product ids that existed and were deleted, in the order given (each once).
  /// - Throws: `notFound` for an unknown app.
  func deleteProducts(appId: String, productIds: [String]) async throws(StoreError) -> [String]
  /// Erases users of an app in every environment, in one commit: their transactions, renewal
  /// infos and the removals snapshots recorded for them, stored receipts, Server API sync states,
  /// ownership gaps and the ownership transfers that name them, and the users themselves. Nothing of them is left in any table; a user id with no data
  /// erases nothing.
  /// - Returns: how much was erased.
  /// - Throws: `notFound` for an unknown app; `invalidArgument` for an empty user id.
  func deleteUsers(appId: String, userIds: [String]) async throws(StoreError) -> UserErasure

  // MARK: API keys

  /// Stores a new key.
  /// - Throws: `alreadyExists` if the id or hash is taken; `notFound` if its tenant does not exist;
  ///   `invalidArgument` unless operator keys have no tenant and other keys have one.
  func createApiKey(_ key: ApiKeyRecord) async throws(StoreError)
  /// The key whose SHA-256 is `hash` (compared in constant time), revoked ones included; `nil` if none.
  func apiKey(hash: [UInt8]) async throws(StoreError) -> ApiKeyRecord?
  /// Keys of a tenant (or operator keys for `nil`), ordered by key id.
  func listApiKeys(tenantId: String?, page: PageRequest) async throws(StoreError) -> Page<
    ApiKeyRecord
  >
  /// Revokes a key of the tenant (`nil`: an operator key) and returns it; revoking twice keeps the
  /// first time.
  /// - Throws: `notFound` if it does not exist or belongs to another tenant.
  func revokeApiKey(tenantId: String?, keyId: String, atMs: Int64) async throws(StoreError)
    -> ApiKeyRecord
  /// Records that a key was used. Cheap and coalesced: implementations may skip the write when the
  /// stored time is less than a minute older.
  func touchApiKey(keyId: String, atMs: Int64) async throws(StoreError)

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

  // MARK: Audit

  /// Appends an entry and returns it with its sequence number.
  func appendAudit(_ entry: AuditEntry) async throws(StoreError) -> AuditEntry
  /// The tenant's audit entries (`nil`: operator entries), oldest first.
  func auditLog(tenantId: String?, page: PageRequest) async throws(StoreError) -> Page<AuditEntry>

  // MARK: In-App Purchase keys

  /// Sets the app's In-App Purchase key (the private key sealed at rest), replacing any previous
  /// one. ``AppRecord/inAppPurchaseKey`` shows its non-secret part afterwards.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if the store has no master key.
  func setInAppPurchaseKey(appId: String, key: InAppPurchaseKey) async throws(StoreError)
  /// The app's In-App Purchase key, its private key opened; `nil` when none was set.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if the key cannot be opened
  ///   (master key missing or wrong).
  func inAppPurchaseKey(appId: String) async throws(StoreError) -> InAppPurchaseKey?

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

extension Store {
  /// See ``Store/renewalInfos(of:)``. This default reads the whole history; stores that can read
  /// the renewal infos alone do.
  public func renewalInfos(of user: UserKey) async throws(StoreError) -> [RenewalInfo] {
    try await history(of: user).renewalInfos
  }
}
