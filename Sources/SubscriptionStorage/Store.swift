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
  /// ``CatalogStore/createApp(_:)`` and ``CatalogStore/setPolicy(appId:policy:)``, never cleared). Only then can
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
  /// When `true`, the update applies only if its user is still stored when the write commits: a
  /// background job (a receipt refresh, a Server API sync, a notification routed to the users
  /// that held its original transaction) read the user before a network call, and an erasure in
  /// between must not be undone by its write. The store decides in the write's own transaction and
  /// reports the dropped users in ``IngestSummary/erasedMeanwhile`` (docs/architecture.md,
  /// "Erasure").
  public var onlyIfStored: Bool

  /// Creates an update.
  public init(
    user: UserKey, transactions: [Transaction] = [], renewalInfos: [RenewalInfo] = [],
    renewalInfoSnapshot: RenewalInfoSnapshot? = nil, submittedMs: Int64? = nil, onlyIfStored: Bool = false
  ) {
    self.user = user
    self.transactions = transactions
    self.renewalInfos = renewalInfos
    self.renewalInfoSnapshot = renewalInfoSnapshot
    self.submittedMs = submittedMs
    self.onlyIfStored = onlyIfStored
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
  /// (purchase sharing); filled only by ``PurchaseStore/ownershipGaps(appId:environment:userIds:)``'s
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

/// What an erasure removed (``ErasureStore/deleteUsers(appId:userIds:)``).
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
  /// Users of ``UserPurchases/onlyIfStored`` updates that were no longer stored (erased since the
  /// job read them): nothing of theirs was written.
  public var erasedMeanwhile: [UserKey]

  /// Creates a summary.
  public init(
    transactionsWritten: Int = 0, renewalInfosWritten: Int = 0, refused: [OwnershipRefusal] = [],
    transfers: [OwnershipTransfer] = [], eventsAppended: Int = 0, erasedMeanwhile: [UserKey] = []
  ) {
    self.transactionsWritten = transactionsWritten
    self.renewalInfosWritten = renewalInfosWritten
    self.refused = refused
    self.transfers = transfers
    self.eventsAppended = eventsAppended
    self.erasedMeanwhile = erasedMeanwhile
  }
}

/// Where substatus keeps its state: every role protocol of the stores together. Implementations:
/// `InMemoryStore` (tests: module `SubscriptionStorageTesting`), `SQLiteStore` (default), `PostgresStore`
/// (several instances on one database). Every implementation must pass the contract suite
/// `StoreContract` in `Tests/StoreContractTesting`.
///
/// The requirements are grouped by aggregate into role protocols, each in its own file: ``TenantStore``
/// (tenants, API keys), ``AuditStore``, ``CatalogStore`` (apps, policy, secrets, catalog, named
/// entitlements), ``PurchaseStore`` (purchase data, ownership, summaries), ``ReceiptStore``,
/// ``EventLogStore``, ``WebhookStore``, ``AppAccountStore``, ``ServerAPISyncStore`` and
/// ``ErasureStore``. Code that needs a few of them asks for those (`any PurchaseStore & EventLogStore`);
/// only the service as a whole and the executables that pick a store hold an `any Store`. A new
/// requirement goes in a new role protocol that `Store` then refines.
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
public protocol Store:
  TenantStore, AuditStore, CatalogStore, PurchaseStore, ReceiptStore, EventLogStore, WebhookStore, AppAccountStore,
  ServerAPISyncStore, ErasureStore, NotificationLogStore, RetentionRuleStore, ConsumptionRequestStore,
  AppAccountTokenWriteStore, KeptNotificationRetentionStore
{}
