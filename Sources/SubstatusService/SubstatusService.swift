import AppStoreSignedData
import Foundation
import RPCCore
import SubstatusAppleUpstream
import SubstatusBackgroundJobs
import SubstatusEventDelivery
import SubstatusServiceCore
import Synchronization
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusWire
import SubstatusMetrics

/// The substatus API: the handlers of every service in `Protos/substatus/v1`, over a ``Store``.
///
/// ```swift
/// let service = SubstatusService(store: store)
/// var router = RPCRouter()
/// service.register(in: &router)
/// let server = RPCServer(transport: transport, router: router, interceptors: service.interceptors())
/// ```
public final class SubstatusService: Sendable {
  /// Where state lives: the whole store, which the background jobs reach through ``IngestPath``.
  /// The handlers use the roles below instead (docs/architecture.md "Stores").
  public let store: any Store

  // The store by role, one per aggregate: a handler names the roles it touches (the table in
  // docs/architecture.md "Stores" lists them per handler file).
  /// API keys and tenants: authentication, TenantService, the key handlers.
  let tenantStore: any TenantStore
  /// The audit log.
  let auditStore: any AuditStore
  /// Apps, products, entitlements, policies, secrets and keys.
  let catalogStore: any CatalogStore
  /// Users' transactions, renewal infos, summaries and ownership.
  let purchaseStore: any PurchaseStore
  /// Receipts kept for the background refresh (SubmitReceipt saves them).
  let receiptStore: any ReceiptStore
  /// The event log (ListEvents, WatchEvents, trends).
  let eventLogStore: any EventLogStore
  /// Webhooks and their deliveries.
  let webhookStore: any WebhookStore
  /// App users' Apple Account links (rule 24).
  let appAccountStore: any AppAccountStore
  /// Server API sync states.
  let serverAPISyncStore: any ServerAPISyncStore
  /// Erasure of users.
  let erasureStore: any ErasureStore
  /// Kept notifications.
  let notificationLogStore: any NotificationLogStore
  /// Retention Messaging rules.
  let retentionRuleStore: any RetentionRuleStore
  /// Apple's refund requests (rule 27).
  let consumptionRequestStore: any ConsumptionRequestStore
  /// Time and randomness.
  public let environment: ServiceEnvironment
  /// Size and rate limits.
  public let limits: ServiceLimits
  /// The upstream to Apple (or the App Store simulator).
  public let verifyReceipt: VerifyReceiptClient
  /// Counters and histograms for `/metrics`.
  public let metrics: ServiceMetrics
  /// Where the one-line-per-RPC JSON log goes.
  public let log: LogSink
  /// The roots App Store signed data must chain to (Apple Root CA - G3 unless configured).
  public let appleRootCertificates: [X509Certificate]
  /// The App Store Server API (or the App Store simulator), for SyncTransactionHistory, SubmitReceipt's
  /// modern path and the reconciler.
  public let appStoreServerAPI: AppStoreServerAPIClient

  /// Wakes WatchEvents streams when events are appended (``eventsAppended(_:source:)``), and
  /// when the daemon polls for other instances' events.
  public let eventSignal = EventSignal()
  /// The recent events of each watched app, read once for all of its WatchEvents streams.
  let eventFeed: EventFeed
  /// Makes and reads the event log's cursors (opaque per app).
  public let eventCursors: EventCursors
  /// Events appended, webhook deliveries and watchers, for `/metrics`.
  public let eventMetrics: EventMetrics
  /// Delivers the event log to webhooks (the daemon runs it); `nil`: TestWebhook is UNAVAILABLE.
  public let webhookDispatcher: WebhookDispatcher?
  /// The URL rules of CreateWebhook: the dispatcher's (``WebhookDispatcher/Configuration-swift.struct/urlPolicy``).
  var webhookURLPolicy: WebhookURLPolicy { webhookDispatcher?.configuration.urlPolicy ?? WebhookURLPolicy() }

  let apps = Mutex<[String: CachedApp]>([:])
  /// Hits and fallbacks of the per-user summaries (``answers(of:environment:_:at:rewrite:)``).
  let summaryMetrics = SummaryMetrics()
  /// V2 notification types this build does not know (rule 25), for `/metrics`.
  let notificationTypeMetrics = NotificationTypeMetrics()
  /// Resolved API keys by the `authorization` header's text that presented them
  /// (``lookUpKey(authorization:)``).
  let keys = Mutex<[String: CachedKey]>([:])
  let rateLimiter: TenantRateLimiter
  /// The in-flight budget of heavy calls' estimated working sets (``ServiceLimits/maxWorkingSetBytes``).
  public let workingSetBudget: WorkingSetBudget
  /// Server API token signers per app id (replaced when the app's key changes).
  let serverAPIAuthorizers = Mutex<[String: InAppPurchaseKeyAuthorizer]>([:])
  /// In-App Purchase keys parsed for signing, per app id (replaced when the app's key changes;
  /// ``signingKey(_:)``).
  let signingKeys = Mutex<[String: CachedSigningKey]>([:])
  /// Decoded retention rules per app id, as the app cache keeps apps (``cachedRetentionRules(appId:)``).
  let retentionRuleCache = Mutex(RetentionRuleCache())
  /// The Server API syncs V2 REFUND and REVOKE notifications trigger, one at a time per user.
  package let revocationSyncs = RevocationSyncScheduler()
  /// Wakes the ``ConsumptionResponder`` when a refund request is recorded (rule 27).
  public let consumptionSignal = EventSignal()
  /// Refund requests recorded and answered, for `/metrics`.
  public let consumptionMetrics = ConsumptionMetrics()

  struct CachedKey {
    var record: ApiKeyRecord
    var tenantDisabled: Bool
    var fetchedMs: Int64
  }

  /// Creates the service.
  public init(
    store: any Store, environment: ServiceEnvironment = .live, limits: ServiceLimits = ServiceLimits(),
    verifyReceipt: VerifyReceiptClient = VerifyReceiptClient(), metrics: ServiceMetrics = ServiceMetrics(),
    log: LogSink = .standardError, appleRootCertificates: [X509Certificate] = [X509Certificate.appleRootCAG3],
    appStoreServerAPI: AppStoreServerAPIClient = AppStoreServerAPIClient(), eventMetrics: EventMetrics = EventMetrics(),
    webhookDispatcher: WebhookDispatcher? = nil, eventCursors: EventCursors? = nil
  ) {
    // The dispatcher's cursors by default: a webhook's body and ListEvents show the same cursor.
    self.eventCursors = eventCursors ?? webhookDispatcher?.cursors ?? EventCursors()
    self.eventFeed = EventFeed(cursors: self.eventCursors)
    self.store = store
    self.tenantStore = store
    self.auditStore = store
    self.catalogStore = store
    self.purchaseStore = store
    self.receiptStore = store
    self.eventLogStore = store
    self.webhookStore = store
    self.appAccountStore = store
    self.serverAPISyncStore = store
    self.erasureStore = store
    self.notificationLogStore = store
    self.retentionRuleStore = store
    self.consumptionRequestStore = store
    self.environment = environment
    self.limits = limits
    self.verifyReceipt = verifyReceipt
    self.metrics = metrics
    self.log = log
    self.appleRootCertificates = appleRootCertificates
    self.appStoreServerAPI = appStoreServerAPI
    self.rateLimiter = TenantRateLimiter(rate: limits.tenantRequestsPerSecond, burst: limits.tenantBurst)
    self.workingSetBudget = WorkingSetBudget(limitBytes: limits.maxWorkingSetBytes)
    self.eventMetrics = eventMetrics
    self.webhookDispatcher = webhookDispatcher
    let workingSetBudget = self.workingSetBudget
    metrics.registry.register(eventMetrics)
    metrics.registry.register(workingSetBudget)
    eventMetrics.setWebhookLimits(limits.webhooks)
    if let webhookDispatcher { metrics.registry.register(webhookDispatcher) }
    metrics.registry.register(appStoreServerAPI.rateLimiter)
    metrics.registry.register(summaryMetrics)
    metrics.registry.register(notificationTypeMetrics)
    metrics.registry.register(consumptionMetrics)
  }

  /// A write appended `count` events to the log (after its commit; `count` 0 when the write
  /// cannot tell and may have): counts them and wakes WatchEvents streams, the transition
  /// scheduler and the webhook dispatcher.
  public func eventsAppended(_ count: Int, source: String) {
    eventMetrics.appended(count, source: source)
    eventSignal.signal()
    webhookDispatcher?.notifyEventsAppended()
  }

  /// The interceptors to install, outermost first: access log and metrics, then authentication,
  /// authorization and the per-tenant rate limit.
  public func interceptors() -> [any ServerInterceptor] {
    [AccessLogInterceptor(service: self), AuthInterceptor(service: self)]
  }

  /// The methods that run on the transport's I/O thread (``HandlerExecution/transportThread``).
  ///
  /// The read-only hot path (CheckEligibility, GetStatus, GetEntitlements): a call is a cached key
  /// and app lookup, the store's per-user read and an evaluation, tens of microseconds without
  /// waiting on anything, so the hand-over to the shared pool and back would cost more than the
  /// work. Whatever such a call awaits (a cache miss going to the store, a store that does I/O on
  /// its own threads) suspends it without blocking the thread. Every other method may wait on the
  /// writer or on Apple and runs on the pool.
  public static let transportThreadMethods: Set<String> = [
    Substatus_V1_EligibilityService.checkEligibility.path, Substatus_V1_StatusService.getStatus.path,
    Substatus_V1_StatusService.getEntitlements.path,
  ]

  /// Registers every method of the substatus.v1 services through their generated registrations
  /// (each service's `ServiceProtocol`, which this class implements beside the handlers), the
  /// ``transportThreadMethods`` on the transport's I/O thread and the others on the pool.
  ///
  /// - Parameter router: The router to add the methods to.
  public func register(in router: inout RPCRouter) {
    let execution: (String) -> HandlerExecution = { Self.transportThreadMethods.contains($0) ? .transportThread : .pool }
    Substatus_V1_TenantService.register(self, in: &router, execution: execution)
    Substatus_V1_AdminService.register(self, in: &router, execution: execution)
    Substatus_V1_IngestService.register(self, in: &router, execution: execution)
    Substatus_V1_EligibilityService.register(self, in: &router, execution: execution)
    Substatus_V1_StatusService.register(self, in: &router, execution: execution)
    Substatus_V1_ReportService.register(self, in: &router, execution: execution)
    Substatus_V1_EventService.register(self, in: &router, execution: execution)
  }

  // MARK: Shared lookups

  func principal(_ context: ServerContext) throws(RPCError) -> Principal {
    guard let p = context[PrincipalKey.self] else {
      throw RPCError(code: .unauthenticated, message: "missing authorization")
    }
    return p
  }

  func tenantID(_ context: ServerContext) throws(RPCError) -> (Principal, String) {
    let p = try principal(context)
    guard let tenant = p.tenantId else {
      throw RPCError(code: .permissionDenied, message: "the operator key manages tenants, not what is inside them")
    }
    return (p, tenant)
  }

  /// The app if the caller's tenant owns it and the key's scope includes it; otherwise NOT_FOUND,
  /// as if it did not exist (one tenant never learns about another's apps).
  func app(_ appId: String, _ context: ServerContext) async throws(RPCError) -> CachedApp {
    try requireID(appId, "app_id", limits: limits)
    let (p, tenant) = try tenantID(context)
    let cached = try await loadApp(appId)
    guard let cached, cached.app.tenantId == tenant, p.mayAccess(appId: appId) else {
      throw RPCError(code: .notFound, message: "app \(ErrorText.quoted(appId)) not found")
    }
    return cached
  }

  /// The app and catalog by id, cached for `cacheTTLMilliseconds`; `nil` if it does not exist.
  package func loadApp(_ appId: String) async throws(RPCError) -> CachedApp? {
    let now = environment.now()
    if let hit = apps.withLock({ $0[appId] }), now - hit.fetchedMs < limits.cacheTTLMilliseconds { return hit }
    do {
      let record = try await catalogStore.app(id: appId)
      let products = try await catalogStore.products(appId: appId)
      let entitlements = try await catalogStore.entitlements(appId: appId)
      let entry = CachedApp(app: record, catalog: Catalog(products: products), entitlements: entitlements, fetchedMs: now)
      apps.withLock { $0[appId] = entry }
      return entry
    } catch {
      if error.code == .notFound { return nil }
      throw RPCError(store: error)
    }
  }

  func invalidateApp(_ appId: String) {
    _ = apps.withLock { $0.removeValue(forKey: appId) }
    invalidateRetentionRules(appId)
  }

  func audit(_ context: ServerContext, tenant: String?, action: String, resource: String, details: String = "") async {
    guard let p = context[PrincipalKey.self] else { return }
    _ = try? await auditStore.appendAudit(
      AuditEntry(tenantId: tenant, atMs: environment.now(), actorKeyId: p.keyId, action: action, resource: resource, details: details))
  }

  func asOf(_ ms: Int64) throws(RPCError) -> Int64 {
    guard ms >= 0 else { throw invalidArgument("as_of_ms", "must not be negative") }
    return ms == 0 ? environment.now() : ms
  }

  /// Evaluates a history at `time` as the user owned it then (its ownership gaps, when
  /// ``owning(_:_:)-(UserHistory,_)`` filled them: purchase sharing).
  func evaluate(_ history: UserHistory, _ app: CachedApp, at time: Int64) -> SubscriptionEvaluation {
    let owned = history.owned(at: time)
    return SubscriptionEvaluator.evaluate(
      history: owned.transactions, renewals: owned.renewalInfos, catalog: app.catalog, policy: app.app.policy, at: time)
  }
}

// MARK: The background jobs' view

/// The background jobs (`SubstatusBackgroundJobs`) reach the service through ``IngestPath`` only.
extension SubstatusService: IngestPath {
  package var receiptRefreshPolicy: ReceiptRefreshPolicy { limits.receiptRefresh }
}

// MARK: TenantService

extension SubstatusService: Substatus_V1_TenantService.ServiceProtocol {
  public func createTenant(_ request: Substatus_V1_CreateTenantRequest, _ context: ServerContext) async throws -> Substatus_V1_CreateTenantResponse {
    try requireOperator(context)
    let name = request.name.trimmingCharacters(in: .whitespaces)
    guard !name.isEmpty else { throw invalidArgument("name", "must not be empty") }
    guard name.utf8.count <= 200 else { throw invalidArgument("name", "longer than 200 bytes") }
    // Control characters (Unicode Cc: C0, DEL, C1) would forge lines and escapes in listings,
    // logs and terminals; bidirectional overrides would reorder what a reader sees.
    if let problem = DisplayText.problem(in: name) { throw invalidArgument("name", problem) }
    let now = environment.now()
    let tenant = TenantRecord(tenantId: Identifiers.make("tn", environment), name: name, createdMs: now)
    try await stored { () throws(StoreError) in try await tenantStore.createTenant(tenant) }
    let (key, record) = try await newKey(tenant: tenant.tenantId, role: .admin, appIds: [], description: "first admin key", now: now)
    await audit(context, tenant: tenant.tenantId, action: "CreateTenant", resource: "tenants/\(tenant.tenantId)")
    var response = Substatus_V1_CreateTenantResponse()
    response.tenant = tenant.wire
    response.adminKey = key
    response.adminKeyInfo = record.wire
    return response
  }

  public func listTenants(_ request: Substatus_V1_ListTenantsRequest, _ context: ServerContext) async throws -> Substatus_V1_ListTenantsResponse {
    try requireOperator(context)
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    let result = try await stored { () throws(StoreError) in try await tenantStore.listTenants(page: page) }
    var response = Substatus_V1_ListTenantsResponse()
    response.tenants = result.items.map(\.wire)
    response.nextPageToken = PageToken.encode(result.nextCursor)
    return response
  }

  public func disableTenant(_ request: Substatus_V1_DisableTenantRequest, _ context: ServerContext) async throws -> Substatus_V1_DisableTenantResponse {
    try requireOperator(context)
    try requireID(request.tenantID, "tenant_id", limits: limits)
    let tenant = try await stored { () throws(StoreError) in try await tenantStore.setTenantDisabled(id: request.tenantID, disabled: true) }
    keys.withLock { $0 = $0.filter { $0.value.record.tenantId != request.tenantID } }
    await audit(context, tenant: tenant.tenantId, action: "DisableTenant", resource: "tenants/\(tenant.tenantId)")
    var response = Substatus_V1_DisableTenantResponse()
    response.tenant = tenant.wire
    return response
  }

  func requireOperator(_ context: ServerContext) throws(RPCError) {
    guard try principal(context).role == .operator else {
      throw RPCError(code: .permissionDenied, message: "only the operator key manages tenants")
    }
  }

  /// Creates and stores a new API key; returns the key (shown once) and its record.
  func newKey(tenant: String?, role: ApiKeyRecord.Role, appIds: [String], description: String, now: Int64) async throws(RPCError) -> (String, ApiKeyRecord) {
    let key = Identifiers.apiKey(environment)
    let record = ApiKeyRecord(
      keyId: Identifiers.make("key", environment), tenantId: tenant, role: role, appIds: appIds,
      description: description, keyHash: SHA256.hash(key), displayPrefix: Identifiers.displayPrefix(key), createdMs: now)
    try await stored { () throws(StoreError) in try await tenantStore.createApiKey(record) }
    return (key, record)
  }
}

extension TenantRecord {
  var wire: Substatus_V1_Tenant {
    var t = Substatus_V1_Tenant()
    t.tenantID = tenantId
    t.name = name
    t.disabled = disabled
    t.createdMs = createdMs
    return t
  }
}

extension ApiKeyRecord {
  var wire: Substatus_V1_ApiKeyInfo {
    var k = Substatus_V1_ApiKeyInfo()
    k.keyID = keyId
    k.role = role.wire
    k.appIDs = appIds
    k.description = description
    k.displayPrefix = displayPrefix
    k.createdMs = createdMs
    k.lastUsedMs = lastUsedMs ?? 0
    k.revoked = isRevoked
    k.revokedMs = revokedMs ?? 0
    return k
  }
}

extension ApiKeyRecord.Role {
  var wire: Substatus_V1_ApiKeyRole {
    switch self {
    case .admin: .admin
    case .ingest: .ingest
    case .read: .read
    case .operator: .unspecified
    }
  }
}

extension AppRecord {
  var wire: Substatus_V1_App {
    var a = Substatus_V1_App()
    a.appID = appId
    a.bundleID = bundleId
    a.appleAppID = appleAppId ?? 0
    a.displayName = displayName
    a.sharedSecretFingerprint = sharedSecretFingerprint ?? ""
    a.inAppPurchaseKey = inAppPurchaseKey?.wire
    a.policy = policy.wire
    a.createdMs = createdMs
    a.smallBusinessProgram = smallBusinessProgram
    return a
  }
}

// MARK: First start

extension SubstatusService {
  /// Creates the operator key on first start: when the store holds no operator key, makes one and
  /// returns it (the only time it is visible; only its hash is stored). Returns `nil` otherwise.
  /// - Throws: `RPCError` when the store fails.
  public func bootstrapOperatorKey() async throws(RPCError) -> String? {
    let existing = try await stored { () throws(StoreError) in try await tenantStore.listApiKeys(tenantId: nil, page: PageRequest(size: 1)) }
    guard existing.items.isEmpty else { return nil }
    let (key, _) = try await newKey(tenant: nil, role: .operator, appIds: [], description: "operator key (first start)", now: environment.now())
    return key
  }
}
