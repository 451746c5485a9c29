import SubscriptionDomain
import SubscriptionStorage
import Synchronization

/// A ``Store`` in memory: the test kit the service's tests use. It behaves like the SQLite store
/// (same contract suite) but keeps nothing across restarts; secrets are kept in plaintext memory.
///
/// ```swift
/// let store = InMemoryStore()
/// try await store.createTenant(TenantRecord(tenantId: "t1", name: "Acme", createdMs: 0))
/// ```
public final class InMemoryStore: Store {
  struct State {
    var tenants: [String: TenantRecord] = [:]
    var apps: [String: AppRecord] = [:]
    var secrets: [String: SharedSecrets] = [:]
    var products: [String: [String: Product]] = [:]
    var entitlements: [String: [String: EntitlementDefinition]] = [:]
    var keys: [String: ApiKeyRecord] = [:]
    var users: [UserKey: UserPurchaseState] = [:]
    var notifications: [[String]: Int64] = [:]
    var audit: [AuditEntry] = []
    var receipts: [UserKey: StoredReceipt] = [:]
    var inAppPurchaseKeys: [String: InAppPurchaseKey] = [:]
    var historySyncs: [UserKey: TransactionHistorySyncState] = [:]
    /// Each user's Apple Account (``AppAccountStore``).
    var appAccounts: [UserKey: AppAccountLink] = [:]
    /// Every kept V2 notification (``NotificationLogStore``), in the order kept.
    var keptNotifications = InMemoryNotificationLog()
    /// Each app's retention rules (``RetentionRuleStore``).
    var retentionRules: [String: StoredRetentionRules] = [:]
    /// Refund requests by [app id, notification id] (``ConsumptionRequestStore``).
    var consumptionRequests: [[String]: ConsumptionRequest] = [:]
    var reconciliations: [String: Reconciliation] = [:]
    /// Purchase sharing: each user's ownership gaps, and every transfer in commit order.
    var gaps: [UserKey: [OwnershipGap]] = [:]
    var transfers: [OwnershipTransfer] = []
    /// Set App Account Token writes owed to Apple by [app id, environment, original transaction id]
    /// (``AppAccountTokenWriteStore``).
    var appAccountTokenWrites: [[String]: AppAccountTokenWrite] = [:]
    var eventLog = InMemoryEventLog()
    /// Each user's summary row: the stamp of its last write and the encoded summary.
    var summaries: [UserKey: (stamp: Int64, bytes: [UInt8])] = [:]
  }

  /// The ownership rows of one app and environment, over the state's users (read only).
  private struct Ledger: OwnershipLedger {
    let appId: String
    let environment: Environment
    let users: [UserKey: UserPurchaseState]
    var gaps: [UserKey: [OwnershipGap]]
    var transfers: [OwnershipTransfer]
    /// The state's Set App Account Token writes, moved in for the step.
    var tokenWrites: [[String]: AppAccountTokenWrite] = [:]
    /// The app's catalog and policy (``OwnershipLedger/evaluationInputs()``).
    let catalog: Catalog
    let policy: EligibilityPolicy

    private func key(_ userId: String) -> UserKey {
      UserKey(appId: appId, environment: environment, userId: userId)
    }

    func holders(of originalTransactionId: String) -> Set<String> {
      Set(
        users.compactMap { key, data in
          key.appId == appId && key.environment == environment
            && data.transactions.values.contains { $0.originalTransactionId == originalTransactionId }
            ? key.userId : nil
        })
    }

    func usersWithOpenGap(on originalTransactionId: String) -> Set<String> {
      Set(
        gaps.compactMap { key, gaps in
          key.appId == appId && key.environment == environment
            && gaps.contains { $0.originalTransactionId == originalTransactionId && $0.untilMs == nil }
            ? key.userId : nil
        })
    }

    mutating func insertGap(userId: String, _ gap: OwnershipGap) {
      gaps[key(userId), default: []].append(gap)
    }

    mutating func closeGap(userId: String, originalTransactionId: String, atMs: Int64) {
      guard var list = gaps[key(userId)] else { return }
      for i in list.indices where list[i].originalTransactionId == originalTransactionId && list[i].untilMs == nil {
        list[i].untilMs = atMs
      }
      gaps[key(userId)] = list
    }

    mutating func recordTransfer(_ transfer: OwnershipTransfer) { transfers.append(transfer) }

    mutating func saveAppAccountTokenWrite(for transfer: OwnershipTransfer) {
      let key = [transfer.appId, transfer.environment.rawValue, transfer.originalTransactionId]
      tokenWrites[key] = AppAccountTokenWrite.replacing(tokenWrites[key], by: transfer)
    }

    func purchases(of userId: String, originalTransactionId: String) -> (
      transactions: [Transaction], renewals: [RenewalInfo]
    ) {
      guard let state = users[key(userId)] else { return ([], []) }
      return (
        state.transactions.values.filter { $0.originalTransactionId == originalTransactionId },
        state.renewalInfos[originalTransactionId]?.renewalInfo.map { [$0] } ?? []
      )
    }

    func evaluationInputs() -> (catalog: Catalog, policy: EligibilityPolicy) { (catalog, policy) }
  }

  /// What the `OWNERSHIP_TRANSFERRED` events of one app and environment read and write: the
  /// state's users and gaps (read only), and its event log, moved in for the step.
  private struct TransferEventLog: OwnershipEventLog {
    let appId: String
    let environment: Environment
    let users: [UserKey: UserPurchaseState]
    let allGaps: [UserKey: [OwnershipGap]]
    var eventLog: InMemoryEventLog
    var appended = 0

    private func key(_ userId: String) -> UserKey {
      UserKey(appId: appId, environment: environment, userId: userId)
    }

    func purchaseState(of userId: String) -> UserPurchaseState { users[key(userId)] ?? UserPurchaseState() }
    func gaps(of userId: String) -> [OwnershipGap] { allGaps[key(userId)] ?? [] }
    func schedule(of userId: String) -> EventSchedule? { eventLog.schedules[key(userId)] }
    mutating func saveSchedule(_ schedule: EventSchedule, of userId: String) {
      eventLog.schedules[key(userId)] = schedule
    }
    mutating func append(_ events: [SubscriptionEvent], of userId: String) {
      appended += eventLog.append(events).count
    }
  }

  struct Reconciliation {
    var reconciledThroughMs: Int64?
    var owner: String?
    var leaseUntilMs: Int64 = 0
  }

  let state = Mutex(State())
  /// Webhooks and deliveries (`InMemoryStore+Webhooks.swift`).
  let webhookState = Mutex(InMemoryWebhooks())

  /// An empty store.
  public init() {}

  private static func page<T, K: Comparable>(
    _ items: [T], key: (T) -> K, cursor: (T) -> String, decode: (String) -> K?, request: PageRequest
  ) throws(StoreError) -> Page<T> {
    var start: K?
    if let c = request.cursor {
      guard let k = decode(c) else { throw StoreError(.invalidArgument, "invalid page cursor") }
      start = k
    }
    let sorted = items.sorted { key($0) < key($1) }
    let rest = start.map { s in sorted.filter { key($0) > s } } ?? sorted
    let taken = Array(rest.prefix(request.limit))
    let next = rest.count > taken.count ? taken.last.map(cursor) : nil
    return Page(items: taken, nextCursor: next)
  }

  /// Runs `body` under the lock. Every body validates before it mutates, so a thrown error leaves
  /// the state untouched (all-or-nothing, like a transaction) without copying the whole state.
  func withState<T>(_ body: (inout State) throws(StoreError) -> T) throws(StoreError) -> T {
    let result: Result<T, StoreError> = state.withLock { s in
      do throws(StoreError) {
        return .success(try body(&s))
      } catch {
        return .failure(error)
      }
    }
    return try result.get()
  }

  // MARK: Tenants

  /// See ``TenantStore/createTenant(_:)``.
  public func createTenant(_ tenant: TenantRecord) async throws(StoreError) {
    try withState { (s: inout State) throws(StoreError) in
      guard s.tenants[tenant.tenantId] == nil else {
        throw StoreError(.alreadyExists, "tenant \"\(tenant.tenantId)\" already exists")
      }
      s.tenants[tenant.tenantId] = tenant
    }
  }

  /// See ``TenantStore/tenant(id:)``.
  public func tenant(id tenantId: String) async throws(StoreError) -> TenantRecord {
    try withState { (s: inout State) throws(StoreError) in
      guard let t = s.tenants[tenantId] else { throw StoreError.notFound("tenant", tenantId) }
      return t
    }
  }

  /// See ``TenantStore/listTenants(page:)``.
  public func listTenants(page: PageRequest) async throws(StoreError) -> Page<TenantRecord> {
    let all = state.withLock { Array($0.tenants.values) }
    return try Self.page(all, key: \.tenantId, cursor: \.tenantId, decode: { $0 }, request: page)
  }

  /// See ``TenantStore/setTenantDisabled(id:disabled:)``.
  public func setTenantDisabled(id tenantId: String, disabled: Bool) async throws(StoreError)
    -> TenantRecord
  {
    try withState { (s: inout State) throws(StoreError) in
      guard var t = s.tenants[tenantId] else { throw StoreError.notFound("tenant", tenantId) }
      t.disabled = disabled
      s.tenants[tenantId] = t
      return t
    }
  }

  // MARK: Apps

  private static func filled(_ app: AppRecord, _ s: State) -> AppRecord {
    var a = app
    a.sharedSecretFingerprint = s.secrets[app.appId]?.current.fingerprint
    a.inAppPurchaseKey = s.inAppPurchaseKeys[app.appId]?.info
    return a
  }

  /// See ``CatalogStore/createApp(_:)``.
  public func createApp(_ app: AppRecord) async throws(StoreError) {
    try withState { (s: inout State) throws(StoreError) in
      guard s.tenants[app.tenantId] != nil else {
        throw StoreError.notFound("tenant", app.tenantId)
      }
      guard s.apps[app.appId] == nil else {
        throw StoreError(.alreadyExists, "app \"\(app.appId)\" already exists")
      }
      if s.apps.values.contains(where: {
        $0.tenantId == app.tenantId && $0.bundleId == app.bundleId
      }) {
        throw StoreError(.alreadyExists, "bundle id \"\(app.bundleId)\" is already registered")
      }
      var stored = app
      stored.sharedSecretFingerprint = nil
      stored.inAppPurchaseKey = nil
      stored.ownershipTracked = !app.policy.sharesInEveryEnvironment
      s.apps[app.appId] = stored
    }
  }

  /// See ``CatalogStore/app(id:)``.
  public func app(id appId: String) async throws(StoreError) -> AppRecord {
    try withState { (s: inout State) throws(StoreError) in
      guard let a = s.apps[appId] else { throw StoreError.notFound("app", appId) }
      return Self.filled(a, s)
    }
  }

  /// See ``CatalogStore/app(tenantId:appId:)``.
  public func app(tenantId: String, appId: String) async throws(StoreError) -> AppRecord {
    try withState { (s: inout State) throws(StoreError) in
      guard let a = s.apps[appId], a.tenantId == tenantId else {
        throw StoreError.notFound("app", appId)
      }
      return Self.filled(a, s)
    }
  }

  /// See ``CatalogStore/listApps(tenantId:page:)``.
  public func listApps(tenantId: String, page: PageRequest) async throws(StoreError) -> Page<
    AppRecord
  > {
    let all = state.withLock { s in
      s.apps.values.filter { $0.tenantId == tenantId }.map { Self.filled($0, s) }
    }
    return try Self.page(all, key: \.appId, cursor: \.appId, decode: { $0 }, request: page)
  }

  /// See ``CatalogStore/setPolicy(appId:policy:)``.
  public func setPolicy(appId: String, policy: EligibilityPolicy) async throws(StoreError)
    -> AppRecord
  {
    try withState { (s: inout State) throws(StoreError) in
      guard var a = s.apps[appId] else { throw StoreError.notFound("app", appId) }
      a.policy = policy
      a.ownershipTracked = a.ownershipTracked || !policy.sharesInEveryEnvironment
      s.apps[appId] = a
      return Self.filled(a, s)
    }
  }

  /// See ``CatalogStore/updateApp(appId:appleAppId:displayName:)``.
  public func updateApp(appId: String, appleAppId: Int64?, displayName: String)
    async throws(StoreError) -> AppRecord
  {
    try withState { (s: inout State) throws(StoreError) in
      guard var a = s.apps[appId] else { throw StoreError.notFound("app", appId) }
      a.appleAppId = appleAppId
      a.displayName = displayName
      s.apps[appId] = a
      return Self.filled(a, s)
    }
  }

  /// See ``CatalogStore/setSmallBusinessProgram(appId:_:)``.
  public func setSmallBusinessProgram(appId: String, _ member: Bool) async throws(StoreError) -> AppRecord {
    try withState { (s: inout State) throws(StoreError) in
      guard var a = s.apps[appId] else { throw StoreError.notFound("app", appId) }
      a.smallBusinessProgram = member
      s.apps[appId] = a
      return Self.filled(a, s)
    }
  }

  // MARK: Shared secrets

  /// See ``CatalogStore/setSharedSecret(appId:secret:atMs:previousValidUntilMs:)``.
  public func setSharedSecret(
    appId: String, secret: String, atMs: Int64, previousValidUntilMs: Int64
  ) async throws(StoreError) -> String {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      let version = SharedSecretVersion(
        secret: secret, fingerprint: SecretFingerprint.of(secret), setMs: atMs)
      let old = s.secrets[appId]?.current
      s.secrets[appId] = SharedSecrets(
        current: version, previous: old,
        previousValidUntilMs: old == nil ? nil : previousValidUntilMs)
      return version.fingerprint
    }
  }

  /// See ``CatalogStore/sharedSecrets(appId:)``.
  public func sharedSecrets(appId: String) async throws(StoreError) -> SharedSecrets? {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      return s.secrets[appId]
    }
  }

  // MARK: Catalog

  /// See ``CatalogStore/putProducts(appId:products:)``.
  public func putProducts(appId: String, products: [Product]) async throws(StoreError) {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      for p in products { s.products[appId, default: [:]][p.productId] = p }
    }
  }

  /// See ``CatalogStore/products(appId:)``.
  public func products(appId: String) async throws(StoreError) -> [Product] {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      return (s.products[appId] ?? [:]).values.sorted { $0.productId < $1.productId }
    }
  }

  // MARK: Named entitlements

  /// See ``CatalogStore/putEntitlements(appId:entitlements:)``.
  public func putEntitlements(appId: String, entitlements: [EntitlementDefinition])
    async throws(StoreError)
  {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      try StoreValidation.validate(entitlements, catalog: Set((s.products[appId] ?? [:]).keys))
      for e in entitlements { s.entitlements[appId, default: [:]][e.entitlementId] = e }
    }
  }

  /// See ``CatalogStore/entitlements(appId:)``.
  public func entitlements(appId: String) async throws(StoreError) -> [EntitlementDefinition] {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      return (s.entitlements[appId] ?? [:]).values.sorted { $0.entitlementId < $1.entitlementId }
    }
  }

  /// See ``CatalogStore/deleteEntitlements(appId:entitlementIds:)``.
  public func deleteEntitlements(appId: String, entitlementIds: [String]) async throws(StoreError)
    -> [String]
  {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      var deleted: [String] = []
      for id in entitlementIds where s.entitlements[appId]?.removeValue(forKey: id) != nil {
        deleted.append(id)
      }
      return deleted
    }
  }

  // MARK: Erasure

  /// See ``CatalogStore/deleteProducts(appId:productIds:)``.
  public func deleteProducts(appId: String, productIds: [String]) async throws(StoreError)
    -> [String]
  {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      var deleted: [String] = []
      for id in productIds where s.products[appId]?.removeValue(forKey: id) != nil {
        deleted.append(id)
      }
      let gone = Set(deleted)
      for (id, var e) in s.entitlements[appId] ?? [:] where e.productIds.contains(where: gone.contains) {
        e.productIds.removeAll(where: gone.contains)
        s.entitlements[appId]?[id] = e
      }
      return deleted
    }
  }

  /// See ``ErasureStore/deleteUsers(appId:userIds:)``.
  public func deleteUsers(appId: String, userIds: [String]) async throws(StoreError) -> UserErasure {
    defer { webhookState.withLock { $0.erase(appId: appId, userIds: Set(userIds)) } }
    return try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      guard !userIds.contains("") else { throw StoreError(.invalidArgument, "user_id is empty") }
      var erased = UserErasure()
      let erasedIds = Set(userIds)
      s.transfers.removeAll {
        $0.appId == appId && (erasedIds.contains($0.previousUserId) || erasedIds.contains($0.newUserId))
      }
      s.appAccountTokenWrites = s.appAccountTokenWrites.filter { !($0.value.appId == appId && erasedIds.contains($0.value.userId)) }
      for userId in Set(userIds) {
        for environment in Environment.allCases {
          let user = UserKey(appId: appId, environment: environment, userId: userId)
          if let data = s.users.removeValue(forKey: user) {
            erased.histories += 1
            erased.transactions += data.transactions.count
            erased.renewalInfos += data.renewalInfos.values.count {
              if case .present = $0 { true } else { false }
            }
          }
          if s.receipts.removeValue(forKey: user) != nil { erased.receipts += 1 }
          s.historySyncs[user] = nil
          s.appAccounts[user] = nil
          s.gaps[user] = nil
          s.summaries[user] = nil
          s.eventLog.erase(user)
        }
      }
      return erased
    }
  }

  // MARK: API keys

  /// See ``TenantStore/createApiKey(_:)``.
  public func createApiKey(_ key: ApiKeyRecord) async throws(StoreError) {
    try StoreValidation.validate(key)
    try withState { (s: inout State) throws(StoreError) in
      if let t = key.tenantId, s.tenants[t] == nil { throw StoreError.notFound("tenant", t) }
      guard s.keys[key.keyId] == nil else {
        throw StoreError(.alreadyExists, "API key \"\(key.keyId)\" already exists")
      }
      if s.keys.values.contains(where: { $0.keyHash == key.keyHash }) {
        throw StoreError(.alreadyExists, "an API key with this hash already exists")
      }
      s.keys[key.keyId] = key
    }
  }

  /// See ``TenantStore/apiKey(hash:)``.
  public func apiKey(hash: [UInt8]) async throws(StoreError) -> ApiKeyRecord? {
    state.withLock { s in s.keys.values.first { ConstantTime.equals($0.keyHash, hash) } }
  }

  /// See ``TenantStore/listApiKeys(tenantId:page:)``.
  public func listApiKeys(tenantId: String?, page: PageRequest) async throws(StoreError)
    -> Page<ApiKeyRecord>
  {
    let all = state.withLock { s in s.keys.values.filter { $0.tenantId == tenantId } }
    return try Self.page(all, key: \.keyId, cursor: \.keyId, decode: { $0 }, request: page)
  }

  /// See ``TenantStore/revokeApiKey(tenantId:keyId:atMs:)``.
  public func revokeApiKey(tenantId: String?, keyId: String, atMs: Int64) async throws(StoreError)
    -> ApiKeyRecord
  {
    try withState { (s: inout State) throws(StoreError) in
      guard var k = s.keys[keyId], k.tenantId == tenantId else {
        throw StoreError.notFound("API key", keyId)
      }
      if k.revokedMs == nil { k.revokedMs = atMs }
      s.keys[keyId] = k
      return k
    }
  }

  /// See ``TenantStore/touchApiKey(keyId:atMs:)``.
  public func touchApiKey(keyId: String, atMs: Int64) async throws(StoreError) {
    state.withLock { s in
      guard var k = s.keys[keyId] else { return }
      if (k.lastUsedMs ?? Int64.min) < atMs {
        k.lastUsedMs = atMs
        s.keys[keyId] = k
      }
    }
  }

  // MARK: Purchase data

  private static func apply(_ batch: [UserPurchases], atMs: Int64, to s: inout State)
    throws(StoreError) -> IngestSummary
  {
    for update in batch where s.apps[update.user.appId] == nil {
      throw StoreError.notFound("app", update.user.appId)
    }
    var summary = IngestSummary()
    for submitted in batch {
      if submitted.onlyIfStored, s.users[submitted.user] == nil, s.receipts[submitted.user] == nil {
        summary.erasedMeanwhile.append(submitted.user)
        continue
      }
      let madeBefore = summary.transfers.count
      let gapsBefore = s.gaps[submitted.user] ?? []
      let update = try settleOwnership(submitted, &s, &summary)
      let before = s.users[update.user] ?? UserPurchaseState()
      var data = before
      var changed = false
      // The domain's merge decides (rules 13, 14); see the Store protocol.
      for t in update.transactions {
        guard let (stored, old) = data.merge(t) else { continue }
        changed = true
        if isCountedChange(stored, replacing: old) { summary.transactionsWritten += 1 }
      }
      for version in update.renewalInfoVersions {
        guard let old = data.merge(version) else { continue }
        changed = true
        if isCountedChange(version, replacing: old) { summary.renewalInfosWritten += 1 }
      }
      if changed {
        if !data.transactions.isEmpty || !data.renewalInfos.isEmpty { s.users[update.user] = data }
        summary.eventsAppended +=
          logEvents(of: update.user, before: before, after: data, atMs: atMs, gapsBefore: gapsBefore, in: &s).count
      }
      let made = summary.transfers[madeBefore...]
      // The summaries of every user whose data or ownership the update changed, in its step.
      var summarized: Set<String> = [update.user.userId]
      storeSummary(of: update.user, atMs: atMs, in: &s)
      for transfer in made {
        for userId in [transfer.previousUserId, transfer.newUserId] where summarized.insert(userId).inserted {
          storeSummary(
            of: UserKey(appId: transfer.appId, environment: transfer.environment, userId: userId), atMs: atMs, in: &s)
        }
      }
      if !made.isEmpty {
        var log = TransferEventLog(
          appId: update.user.appId, environment: update.user.environment, users: s.users, allGaps: s.gaps,
          eventLog: InMemoryEventLog())
        swap(&log.eventLog, &s.eventLog)
        defer { swap(&log.eventLog, &s.eventLog) }
        try PurchaseOwnership.logTransferEvents(made, catalog: catalog(update.user.appId, s), log: &log)
        summary.eventsAppended += log.appended
      }
    }
    return summary
  }

  /// Stores the user's summary of its data and gaps in the state at `atMs`, with a new stamp (a
  /// user without data has none).
  static func storeSummary(of user: UserKey, atMs: Int64, in s: inout State) {
    guard let data = s.users[user], let app = s.apps[user.appId] else {
      s.summaries[user] = nil
      return
    }
    let summary = UserSummaryRows.summary(
      of: data, gaps: s.gaps[user] ?? [], catalog: catalog(user.appId, s), policy: app.policy, atMs: atMs)
    s.summaries[user] = (UserSummaryRows.newStamp(), summary.encoded())
  }

  /// See ``PurchaseStore/summaries(appId:environment:userIds:)``.
  public func summaries(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: StoredSummary] {
    let rows = state.withLock { s in
      userIds.compactMap { userId in
        s.summaries[UserKey(appId: appId, environment: environment, userId: userId)].map { (userId, $0) }
      }
    }
    var out: [String: StoredSummary] = [:]
    for (userId, row) in rows {
      out[userId] = StoredSummary(stamp: row.stamp, encoded: UserSummaryRows.decode(row.bytes))
    }
    return out
  }

  /// See ``PurchaseStore/rewriteSummaries(appId:environment:_:)``.
  public func rewriteSummaries(
    appId: String, environment: Environment, _ rewrites: [SummaryRewrite]
  ) async throws(StoreError) -> Int {
    let encoded = rewrites.map { ($0, $0.summary.encoded()) }
    return state.withLock { s in
      var stored = 0
      for (rewrite, bytes) in encoded {
        let user = UserKey(appId: appId, environment: environment, userId: rewrite.userId)
        if let expected = rewrite.expectedStamp {
          guard let row = s.summaries[user], row.stamp == expected else { continue }
          s.summaries[user] = (expected, bytes)
        } else {
          guard s.summaries[user] == nil, s.users[user] != nil else { continue }
          s.summaries[user] = (UserSummaryRows.newStamp(), bytes)
        }
        stored += 1
      }
      return stored
    }
  }

  /// Applies purchase sharing to one update (``PurchaseOwnership``) and returns what to store.
  private static func settleOwnership(
    _ update: UserPurchases, _ s: inout State, _ summary: inout IngestSummary
  ) throws(StoreError) -> UserPurchases {
    guard let app = s.apps[update.user.appId] else { throw StoreError.notFound("app", update.user.appId) }
    let sharing = app.policy.purchaseSharing(in: update.user.environment)
    var ledger = Ledger(
      appId: update.user.appId, environment: update.user.environment, users: s.users, gaps: s.gaps,
      transfers: [], tokenWrites: s.appAccountTokenWrites,
      catalog: sharing == .transferIfNoActive ? catalog(update.user.appId, s) : Catalog(products: []),
      policy: app.policy)
    s.gaps = [:]
    let (refused, transfers) = try PurchaseOwnership.settle(
      user: update.user, originalTransactionIds: update.originalTransactionIds,
      submittedMs: update.submittedMs, sharing: sharing,
      tracked: app.ownershipTracked, ledger: &ledger,
      assigned: Set(update.transactions.lazy.filter { $0.ownership == .assigned }.map(\.originalTransactionId)),
      submitted: SubmittedPurchases(transactions: update.transactions, renewals: update.renewalInfos))
    s.gaps = ledger.gaps
    s.transfers += ledger.transfers
    s.appAccountTokenWrites = ledger.tokenWrites
    summary.transfers += transfers
    summary.refused += refused.map { OwnershipRefusal(user: update.user, originalTransactionId: $0) }
    return update.removing(originalTransactionIds: Set(refused))
  }

  /// See ``PurchaseStore/ingest(_:atMs:)``.
  public func ingest(_ batch: [UserPurchases], atMs: Int64) async throws(StoreError)
    -> IngestSummary
  {
    try StoreValidation.validate(batch)
    return try withState { (s: inout State) throws(StoreError) in
      try Self.apply(batch, atMs: atMs, to: &s)
    }
  }

  /// See ``PurchaseStore/applyNotification(appId:notificationId:receivedMs:updates:)``.
  public func applyNotification(
    appId: String, notificationId: String, receivedMs: Int64, updates: [UserPurchases]
  ) async throws(StoreError) -> IngestSummary? {
    try StoreValidation.validate(updates)
    return try withState { (s: inout State) throws(StoreError) -> IngestSummary? in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      if s.notifications[[appId, notificationId]] != nil { return nil }
      let summary = try Self.apply(updates, atMs: receivedMs, to: &s)
      s.notifications[[appId, notificationId]] = receivedMs
      return summary
    }
  }

  /// See ``PurchaseStore/isNotificationProcessed(appId:notificationId:)``.
  public func isNotificationProcessed(appId: String, notificationId: String)
    async throws(StoreError)
    -> Bool
  {
    state.withLock { $0.notifications[[appId, notificationId]] != nil }
  }

  /// See ``PurchaseStore/pruneNotifications(receivedBeforeMs:)``.
  public func pruneNotifications(receivedBeforeMs: Int64) async throws(StoreError) -> Int {
    state.withLock { s in
      let old = s.notifications.filter { $0.value < receivedBeforeMs }.keys
      for key in old { s.notifications[key] = nil }
      return old.count
    }
  }

  static func history(_ user: UserKey, _ s: State) -> UserHistory {
    (s.users[user] ?? UserPurchaseState()).history(of: user)
  }

  /// See ``PurchaseStore/history(of:)``.
  public func history(of user: UserKey) async throws(StoreError) -> UserHistory {
    state.withLock { Self.history(user, $0) }
  }

  /// See ``PurchaseStore/histories(appId:environment:userIds:)``.
  public func histories(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [UserHistory] {
    state.withLock { s in
      userIds.map { Self.history(UserKey(appId: appId, environment: environment, userId: $0), s) }
    }
  }

  /// See ``PurchaseStore/transactions(of:page:)``.
  public func transactions(of user: UserKey, page: PageRequest) async throws(StoreError)
    -> Page<Transaction>
  {
    let all = state.withLock { Self.history(user, $0).transactions }
    struct Position: Comparable {
      var ms: Int64
      var id: String
      static func < (a: Position, b: Position) -> Bool { (a.ms, a.id) < (b.ms, b.id) }
    }
    return try Self.page(
      all, key: { Position(ms: $0.purchaseDate, id: $0.transactionId) },
      cursor: { "\($0.purchaseDate):\($0.transactionId)" },
      decode: { c in
        guard let colon = c.firstIndex(of: ":"), let ms = Int64(c[..<colon]) else { return nil }
        return Position(ms: ms, id: String(c[c.index(after: colon)...]))
      }, request: page)
  }

  /// See ``PurchaseStore/users(appId:environment:originalTransactionId:)``.
  public func users(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [String] {
    state.withLock { s in
      s.users.compactMap { key, data -> String? in
        guard key.appId == appId, key.environment == environment,
          data.transactions.values.contains(where: {
            $0.originalTransactionId == originalTransactionId
          }),
          !(s.gaps[key] ?? []).contains(where: {
            $0.originalTransactionId == originalTransactionId && $0.untilMs == nil
          })
        else { return nil }
        return key.userId
      }.sorted()
    }
  }

  /// See ``PurchaseStore/ownershipGaps(appId:environment:userIds:)``.
  public func ownershipGaps(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: [OwnershipGap]] {
    state.withLock { s in
      var out: [String: [OwnershipGap]] = [:]
      for id in userIds {
        guard let gaps = s.gaps[UserKey(appId: appId, environment: environment, userId: id)], !gaps.isEmpty
        else { continue }
        out[id] = gaps.sorted { ($0.originalTransactionId, $0.fromMs ?? .min) < ($1.originalTransactionId, $1.fromMs ?? .min) }
      }
      return out
    }
  }

  /// See ``PurchaseStore/ownershipTransfers(appId:environment:originalTransactionId:)``.
  public func ownershipTransfers(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [OwnershipTransfer] {
    state.withLock { s in
      s.transfers.enumerated().filter {
        $0.element.appId == appId && $0.element.environment == environment
          && $0.element.originalTransactionId == originalTransactionId
      }.sorted { ($0.element.atMs, $0.element.previousUserId, $0.offset) < ($1.element.atMs, $1.element.previousUserId, $1.offset) }
      .map(\.element)
    }
  }

  /// See ``PurchaseStore/listUsers(appId:environment:page:)``.
  public func listUsers(
    appId: String, environment: Environment, page: PageRequest
  ) async throws(StoreError) -> Page<String> {
    let all = state.withLock { s in
      s.users.keys.filter { $0.appId == appId && $0.environment == environment }.map(\.userId)
    }
    return try Self.page(all, key: { $0 }, cursor: { $0 }, decode: { $0 }, request: page)
  }

  // MARK: Stored receipts

  /// See ``ReceiptStore/saveReceipt(_:)``.
  public func saveReceipt(_ receipt: StoredReceipt) async throws(StoreError) {
    try StoreValidation.validate(receipt)
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[receipt.user.appId] != nil else {
        throw StoreError.notFound("app", receipt.user.appId)
      }
      s.receipts[receipt.user] = receipt
    }
  }

  /// See ``ReceiptStore/receipt(of:)``.
  public func receipt(of user: UserKey) async throws(StoreError) -> StoredReceipt? {
    state.withLock { $0.receipts[user] }
  }

  /// See ``ReceiptStore/dueReceipts(atMs:limit:)``.
  public func dueReceipts(atMs: Int64, limit: Int) async throws(StoreError) -> [StoredReceipt] {
    let due = state.withLock { s in
      s.receipts.values.compactMap { r in r.nextDueMs.flatMap { $0 <= atMs ? ($0, r) : nil } }
    }
    let sorted = due.sorted {
      ($0.0, $0.1.user.appId, $0.1.user.environment.rawValue, $0.1.user.userId)
        < ($1.0, $1.1.user.appId, $1.1.user.environment.rawValue, $1.1.user.userId)
    }
    return sorted.prefix(min(max(limit, 1), 1000)).map(\.1)
  }

  /// See ``ReceiptStore/claimDueReceipts(atMs:limit:leaseUntilMs:)``: one locked step.
  public func claimDueReceipts(atMs: Int64, limit: Int, leaseUntilMs: Int64)
    async throws(StoreError) -> [StoredReceipt]
  {
    try StoreValidation.validateLease(atMs: atMs, leaseUntilMs: leaseUntilMs)
    return state.withLock { s in
      let due = s.receipts.values.compactMap { r in
        r.nextDueMs.flatMap { $0 <= atMs ? ($0, r) : nil }
      }
      let claimed = due.sorted {
        ($0.0, $0.1.user.appId, $0.1.user.environment.rawValue, $0.1.user.userId)
          < ($1.0, $1.1.user.appId, $1.1.user.environment.rawValue, $1.1.user.userId)
      }.prefix(min(max(limit, 1), 1000)).map(\.1)
      for r in claimed { s.receipts[r.user]?.nextDueMs = leaseUntilMs }
      return claimed
    }
  }

  /// See ``ReceiptStore/markReceiptVerified(user:atMs:nextDueMs:receiptData:)``.
  public func markReceiptVerified(
    user: UserKey, atMs: Int64, nextDueMs: Int64?, receiptData: String?
  ) async throws(StoreError) {
    if let receiptData, receiptData.isEmpty {
      throw StoreError(.invalidArgument, "receipt: receipt_data is empty")
    }
    try withState { (s: inout State) throws(StoreError) in
      guard var r = s.receipts[user] else {
        throw StoreError.notFound("receipt of user", user.userId)
      }
      r.lastVerifiedMs = atMs
      r.nextDueMs = nextDueMs
      r.failureCount = 0
      if let receiptData { r.receiptData = receiptData }
      s.receipts[user] = r
    }
  }

  /// See ``ReceiptStore/rescheduleReceipt(user:nextDueMs:failureCount:)``.
  public func rescheduleReceipt(user: UserKey, nextDueMs: Int64?, failureCount: Int)
    async throws(StoreError)
  {
    if failureCount < 0 { throw StoreError(.invalidArgument, "receipt: failure_count is negative") }
    try withState { (s: inout State) throws(StoreError) in
      guard var r = s.receipts[user] else {
        throw StoreError.notFound("receipt of user", user.userId)
      }
      r.nextDueMs = nextDueMs
      r.failureCount = failureCount
      s.receipts[user] = r
    }
  }

  // MARK: Audit

  /// See ``AuditStore/appendAudit(_:)``.
  public func appendAudit(_ entry: AuditEntry) async throws(StoreError) -> AuditEntry {
    state.withLock { s in
      var e = entry
      e.sequence = Int64(s.audit.count + 1)
      s.audit.append(e)
      return e
    }
  }

  /// See ``AuditStore/auditLog(tenantId:page:)``.
  public func auditLog(tenantId: String?, page: PageRequest) async throws(StoreError) -> Page<
    AuditEntry
  > {
    let all = state.withLock { s in s.audit.filter { $0.tenantId == tenantId } }
    return try Self.page(
      all, key: \.sequence, cursor: { String($0.sequence) }, decode: { Int64($0) }, request: page)
  }

  // MARK: In-App Purchase keys

  /// See ``CatalogStore/setInAppPurchaseKey(appId:key:)``.
  public func setInAppPurchaseKey(appId: String, key: InAppPurchaseKey) async throws(StoreError) {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      s.inAppPurchaseKeys[appId] = key
    }
  }

  /// See ``CatalogStore/inAppPurchaseKey(appId:)``.
  public func inAppPurchaseKey(appId: String) async throws(StoreError) -> InAppPurchaseKey? {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      return s.inAppPurchaseKeys[appId]
    }
  }

  // MARK: App Store Server API sync

  /// See ``ServerAPISyncStore/saveTransactionHistorySync(_:)``.
  public func saveTransactionHistorySync(_ sync: TransactionHistorySyncState) async throws(StoreError) {
    try StoreValidation.validate(sync)
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[sync.user.appId] != nil else { throw StoreError.notFound("app", sync.user.appId) }
      s.historySyncs[sync.user] = sync
    }
  }

  /// See ``ServerAPISyncStore/transactionHistorySync(of:)``.
  public func transactionHistorySync(of user: UserKey) async throws(StoreError) -> TransactionHistorySyncState? {
    state.withLock { $0.historySyncs[user] }
  }

  /// See ``ServerAPISyncStore/claimReconciliation(appId:environment:owner:atMs:leaseUntilMs:)``.
  public func claimReconciliation(
    appId: String, environment: Environment, owner: String, atMs: Int64, leaseUntilMs: Int64
  ) async throws(StoreError) -> ReconciliationClaim? {
    try StoreValidation.validateClaim(owner: owner, atMs: atMs, leaseUntilMs: leaseUntilMs)
    return try withState { (s: inout State) throws(StoreError) -> ReconciliationClaim? in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      let key = appId + "\u{0}" + environment.rawValue
      var row = s.reconciliations[key] ?? Reconciliation()
      if let holder = row.owner, holder != owner, row.leaseUntilMs > atMs { return nil }
      row.owner = owner
      row.leaseUntilMs = leaseUntilMs
      s.reconciliations[key] = row
      return ReconciliationClaim(appId: appId, environment: environment, reconciledThroughMs: row.reconciledThroughMs)
    }
  }

  /// See ``ServerAPISyncStore/completeReconciliation(appId:environment:owner:reconciledThroughMs:)``.
  public func completeReconciliation(
    appId: String, environment: Environment, owner: String, reconciledThroughMs: Int64?
  ) async throws(StoreError) {
    try withState { (s: inout State) throws(StoreError) in
      let key = appId + "\u{0}" + environment.rawValue
      guard var row = s.reconciliations[key], row.owner == owner else {
        throw StoreError.notFound("reconciliation claim of app", appId)
      }
      if let reconciledThroughMs { row.reconciledThroughMs = reconciledThroughMs }
      row.owner = nil
      row.leaseUntilMs = 0
      s.reconciliations[key] = row
    }
  }
}
