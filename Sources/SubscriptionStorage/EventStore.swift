import SubscriptionDomain

// The durable event log and the webhook deliveries fed from it (docs/architecture.md "Events").
//
// Two protocols, because two parts of the service use them: the log is written by every write of
// purchase data (in the same commit) and by the transition scheduler, and read by ListEvents,
// WatchEvents and trends; the webhook store fans the log out to webhooks and records deliveries.
// Every ``Store`` implementation (``InMemoryStore``, `SQLiteStore`, `PostgresStore`) conforms to both
// and passes the contract suite for them.

/// An event as the log keeps it: the event and its position in the log.
public struct LoggedEvent: Sendable, Hashable {
  /// The event's position: strictly increasing in the order events become visible to readers
  /// (commit order), unique in the store, never reused. Readers continue after it (cursors).
  public var sequence: Int64
  /// The event.
  public var event: SubscriptionEvent

  /// Creates a logged event.
  public init(sequence: Int64, event: SubscriptionEvent) {
    self.sequence = sequence
    self.event = event
  }
}

/// Which events of an app's log to read.
public struct EventQuery: Sendable, Hashable {
  /// Only this user's events; `nil`: every user.
  public var userId: String?
  /// Only these types; empty: all.
  public var types: Set<SubscriptionEventType>
  /// Only this environment; `nil`: both.
  public var environment: Environment?
  /// Only events that occurred (Apple's clock) at or after this instant; `nil`: no bound (trends).
  public var occurredFromMs: Int64?
  /// Only events that occurred before this instant; `nil`: no bound (trends).
  public var occurredBeforeMs: Int64?

  /// Creates a query.
  public init(
    userId: String? = nil, types: Set<SubscriptionEventType> = [], environment: Environment? = nil,
    occurredFromMs: Int64? = nil, occurredBeforeMs: Int64? = nil
  ) {
    self.userId = userId
    self.types = types
    self.environment = environment
    self.occurredFromMs = occurredFromMs
    self.occurredBeforeMs = occurredBeforeMs
  }
}

/// The durable event log.
///
/// Writing: every write of purchase data (``Store/ingest(_:atMs:)``, ``Store/applyNotification(appId:notificationId:receivedMs:updates:)``)
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

/// A URL subscribed to an app's events. The signing secret is sealed at rest and not part of the
/// record.
public struct WebhookRecord: Sendable, Hashable {
  /// The webhook's id (chosen by the service).
  public var webhookId: String
  /// The app.
  public var appId: String
  /// Where events are POSTed.
  public var url: String
  /// The types sent; empty: all.
  public var eventTypes: Set<SubscriptionEventType>
  /// The environment of the events sent; `nil`: both.
  public var environment: Environment?
  /// When it was created.
  public var createdMs: Int64
  /// The signing secret's fingerprint (filled by the store on reads).
  public var secretFingerprint: String
  /// The tenant of the webhook's app (filled by ``WebhookStore/webhook(id:)``; empty elsewhere):
  /// the dispatcher shares its slots by tenant.
  public var tenantId: String = ""

  /// Creates a record.
  public init(
    webhookId: String, appId: String, url: String, eventTypes: Set<SubscriptionEventType> = [],
    environment: Environment? = nil, createdMs: Int64, secretFingerprint: String = ""
  ) {
    self.webhookId = webhookId
    self.appId = appId
    self.url = url
    self.eventTypes = eventTypes
    self.environment = environment
    self.createdMs = createdMs
    self.secretFingerprint = secretFingerprint
  }
}

/// How one claim of due deliveries is shared among tenants
/// (``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:perWebhookLimit:excludingWebhookIds:claimant:shares:)``).
public struct DeliveryClaimShares: Sendable, Hashable {
  /// At most this many deliveries of one tenant in the claim.
  public var perTenantLimit: Int
  /// Tenants whose deliveries are left out (the dispatcher holds their share already).
  public var excludingTenantIds: Set<String>

  /// No per-tenant bound, no tenant left out (tenants still take turns).
  public static let unbounded = DeliveryClaimShares(perTenantLimit: .max)

  /// Creates shares; `perTenantLimit` is at least 1.
  public init(perTenantLimit: Int, excludingTenantIds: Set<String> = []) {
    self.perTenantLimit = max(1, perTenantLimit)
    self.excludingTenantIds = excludingTenantIds
  }
}

/// The rule every store's claim of due deliveries follows (SQL stores say the same in their
/// dialect): tenants take turns.
public enum FairClaim {
  /// A due head: the oldest pending delivery of its webhook and user.
  public struct Candidate: Sendable, Hashable {
    /// The tenant of the webhook's app.
    public var tenantId: String
    /// The webhook.
    public var webhookId: String
    /// The event's log position.
    public var sequence: Int64
    /// The delivery's creation order (ties of `sequence`).
    public var key: Int64

    /// Creates a candidate.
    public init(tenantId: String, webhookId: String, sequence: Int64, key: Int64) {
      self.tenantId = tenantId
      self.webhookId = webhookId
      self.sequence = sequence
      self.key = key
    }
  }

  /// The candidates one claim takes: each webhook's oldest `perWebhook`, then of those each
  /// tenant's oldest `perTenant`, ordered by their rank within their tenant and then by log
  /// order (round robin: every tenant's first before any tenant's second), the first `limit`.
  public static func pick(_ candidates: [Candidate], limit: Int, perWebhook: Int, perTenant: Int) -> [Candidate] {
    let inLogOrder = candidates.sorted { ($0.sequence, $0.key) < ($1.sequence, $1.key) }
    var perWebhookCount: [String: Int] = [:]
    var perTenantCount: [String: Int] = [:]
    var ranked: [(rank: Int, candidate: Candidate)] = []
    for candidate in inLogOrder {
      guard perWebhookCount[candidate.webhookId, default: 0] < max(perWebhook, 1) else { continue }
      perWebhookCount[candidate.webhookId, default: 0] += 1
      let rank = perTenantCount[candidate.tenantId, default: 0]
      guard rank < max(perTenant, 1) else { continue }
      perTenantCount[candidate.tenantId] = rank + 1
      ranked.append((rank, candidate))
    }
    return ranked.sorted {
      ($0.rank, $0.candidate.sequence, $0.candidate.key) < ($1.rank, $1.candidate.sequence, $1.candidate.key)
    }.prefix(max(limit, 0)).map(\.candidate)
  }
}

/// Caps on the webhooks an app and a tenant may have (README "Limits"): each webhook multiplies
/// every event of its app into a delivery, so the count bounds the work one event can cause.
public struct WebhookLimits: Sendable, Hashable {
  /// Webhooks per app.
  public var perApp: Int
  /// Webhooks over all apps of one tenant.
  public var perTenant: Int

  /// No cap (tools and tests that create webhooks directly).
  public static let unlimited = WebhookLimits(perApp: .max, perTenant: .max)

  /// Creates caps; each is at least 1.
  public init(perApp: Int = 16, perTenant: Int = 256) {
    self.perApp = max(1, perApp)
    self.perTenant = max(1, perTenant)
  }

  /// The error of a create refused at a cap: `resourceExhausted`, naming the cap and its value.
  /// - Parameters:
  ///   - appCount: the app's webhooks now.
  ///   - tenantCount: the tenant's webhooks now.
  /// - Returns: `nil` when one more webhook fits under both caps.
  public func refusal(appCount: Int, tenantCount: Int) -> StoreError? {
    if appCount >= perApp {
      return StoreError(
        .resourceExhausted, "the app has \(appCount) webhooks, the most allowed per app (max-webhooks-per-app \(perApp))")
    }
    if tenantCount >= perTenant {
      return StoreError(
        .resourceExhausted,
        "the tenant has \(tenantCount) webhooks, the most allowed per tenant (max-webhooks-per-tenant \(perTenant))")
    }
    return nil
  }
}

/// Where one delivery stands.
public enum DeliveryState: String, Sendable, Hashable, CaseIterable {
  /// Not delivered yet; due at ``DeliveryRecord/nextAttemptMs``.
  case pending = "PENDING"
  /// A 2xx answer was received.
  case delivered = "DELIVERED"
  /// Given up after 3 days of retries; a replay sends it again.
  case failed = "FAILED"
}

/// One HTTP attempt of a delivery.
public struct DeliveryAttemptRecord: Sendable, Hashable {
  /// When it was sent.
  public var attemptedMs: Int64
  /// The HTTP status answered; `nil` when none.
  public var httpStatus: Int?
  /// What went wrong, for people; `nil` on success.
  public var error: String?
  /// How long the receiver took.
  public var durationMs: Int64

  /// Creates an attempt.
  public init(attemptedMs: Int64, httpStatus: Int?, error: String?, durationMs: Int64) {
    self.attemptedMs = attemptedMs
    self.httpStatus = httpStatus
    self.error = error
    self.durationMs = durationMs
  }
}

/// One event's delivery to one webhook.
public struct DeliveryRecord: Sendable, Hashable {
  /// The delivery's id (chosen by the store: unique, stable).
  public var deliveryId: String
  /// The webhook.
  public var webhookId: String
  /// The event, with its log position.
  public var event: LoggedEvent
  /// Where it stands.
  public var state: DeliveryState
  /// Attempts so far, oldest first.
  public var attempts: [DeliveryAttemptRecord]
  /// When the next attempt is due (pending only).
  public var nextAttemptMs: Int64?
  /// When the delivery was created.
  public var createdMs: Int64

  /// Creates a record.
  public init(
    deliveryId: String, webhookId: String, event: LoggedEvent, state: DeliveryState,
    attempts: [DeliveryAttemptRecord] = [], nextAttemptMs: Int64?, createdMs: Int64
  ) {
    self.deliveryId = deliveryId
    self.webhookId = webhookId
    self.event = event
    self.state = state
    self.attempts = attempts
    self.nextAttemptMs = nextAttemptMs
    self.createdMs = createdMs
  }
}

/// Webhooks and their deliveries, fed from the ``EventLogStore`` log.
///
/// Each webhook keeps how far it has read the log; ``enqueueDeliveries(atMs:limit:)`` creates the
/// deliveries of the events after that point whose type and environment the webhook wants
/// (``WebhookRecord/eventTypes``, ``WebhookRecord/environment``) and moves the point, in
/// one commit, so no event is skipped or enqueued twice (events logged before the webhook was
/// created are not delivered, except by ``replay(appId:webhookId:afterSequence:atMs:)``).
public protocol WebhookStore: Sendable {
  /// Stores a webhook and its signing secret (sealed at rest), unless its app or its app's tenant
  /// already has as many webhooks as `limits` allow: the count and the insert are one atomic step,
  /// so concurrent creates (on any instance sharing the database) never pass a cap together.
  /// - Throws: `notFound` for an unknown app; `alreadyExists` for a taken id; `resourceExhausted`
  ///   naming the cap when the app or tenant is at it; `secretUnavailable` without a master key.
  func createWebhook(_ webhook: WebhookRecord, signingSecret: String, limits: WebhookLimits)
    async throws(StoreError)
  /// The app's webhooks, ordered by id.
  /// - Throws: `notFound` for an unknown app.
  func webhooks(appId: String) async throws(StoreError) -> [WebhookRecord]
  /// Deletes a webhook, its deliveries and its secret, in one commit.
  /// - Throws: `notFound` for an unknown app or webhook (or a webhook of another app).
  func deleteWebhook(appId: String, webhookId: String) async throws(StoreError)
  /// The webhook's signing secret, opened.
  /// - Throws: `notFound`; `secretUnavailable` when it cannot be opened.
  func webhookSigningSecret(webhookId: String) async throws(StoreError) -> String
  /// Creates the pending deliveries (due at `atMs`) of logged events not yet read by each webhook,
  /// at most `limit` events per webhook per call.
  /// - Returns: how many deliveries were created.
  func enqueueDeliveries(atMs: Int64, limit: Int) async throws(StoreError) -> Int
  /// Claims pending deliveries due at `atMs` for one dispatcher: in log order, and per webhook
  /// and user only the oldest pending delivery (so one user's events reach a webhook in order);
  /// in the same atomic step their due time becomes `leaseUntilMs`, so no other claim returns them
  /// until then (at-least-once, like ``Store/claimDueReceipts(atMs:limit:leaseUntilMs:)``).
  /// - Throws: `invalidArgument` unless `leaseUntilMs > atMs`.
  func claimDueDeliveries(atMs: Int64, limit: Int, leaseUntilMs: Int64)
    async throws(StoreError) -> [DeliveryRecord]
  /// ``claimDueDeliveries(atMs:limit:leaseUntilMs:)`` for a dispatcher that bounds what it holds
  /// per webhook: at most `perWebhookLimit` deliveries of one webhook, none of the webhooks in
  /// `excludingWebhookIds` (those it is busy with), so one slow receiver's backlog never fills a
  /// claim meant for the others. `claimant` names the dispatcher's run (new at each start), for
  /// ``releaseClaims(notMadeBy:atMs:)``.
  /// - Throws: `invalidArgument` unless `leaseUntilMs > atMs`.
  ///
  /// Shared fairly across tenants: the claim takes each tenant's oldest due heads in turn (every
  /// tenant's first before any tenant's second, each round in log order; ``FairClaim``), at most
  /// `shares.perTenantLimit` of one tenant, none of `shares.excludingTenantIds`; so one tenant's
  /// backlog, however old and large, never fills a claim another tenant's deliveries wait for.
  func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int,
    excludingWebhookIds: Set<String>, claimant: String, shares: DeliveryClaimShares
  ) async throws(StoreError) -> [DeliveryRecord]
  /// Makes the deliveries still claimed by an earlier run of a dispatcher due at `atMs`, where the
  /// store can know that run has ended (a dispatcher calls it as it starts, with its own
  /// `claimant`): a store only one process serves (SQLite: substatusd's data directory is its
  /// alone; in memory) releases every claim not made by `claimant`, so a restart after SIGKILL
  /// redelivers at once instead of after the lease; a database other instances share (PostgreSQL)
  /// releases none, since their claimants may be alive, and the lease decides. A delivery waiting
  /// for a retry is not a claim and keeps its due time.
  /// - Returns: how many deliveries were released.
  func releaseClaims(notMadeBy claimant: String, atMs: Int64) async throws(StoreError) -> Int
  /// One webhook by id, whatever its app (the dispatcher's look-up for a claimed delivery).
  /// - Throws: `notFound`.
  func webhook(id webhookId: String) async throws(StoreError) -> WebhookRecord
  /// Records attempts and the deliveries' new states (each `delivered`, `pending` again, due at its
  /// `nextAttemptMs`, or `failed`) in one commit: the dispatcher's group commit of what its POSTs
  /// answered.
  /// - Returns: the ids of the outcomes not recorded because their delivery is unknown (its
  ///   webhook was deleted meanwhile); every other outcome is recorded.
  func recordDeliveryAttempts(_ outcomes: [DeliveryOutcome]) async throws(StoreError) -> Set<String>
  /// The webhook's deliveries, newest first, optionally only failed ones.
  /// - Throws: `notFound` for an unknown app or webhook.
  func deliveries(appId: String, webhookId: String, failedOnly: Bool, page: PageRequest)
    async throws(StoreError) -> Page<DeliveryRecord>
  /// Creates new pending deliveries (due at `atMs`) of the app's logged events after
  /// `afterSequence` to one webhook (`nil`: each webhook of the app, for the types it wants).
  /// - Returns: how many were created.
  /// - Throws: `notFound` for an unknown app or webhook.
  func replay(appId: String, webhookId: String?, afterSequence: Int64, atMs: Int64)
    async throws(StoreError) -> Int
}

/// What one attempt of a delivery ended with, to record (``WebhookStore/recordDeliveryAttempts(_:)``).
public struct DeliveryOutcome: Sendable, Hashable {
  /// The delivery.
  public var deliveryId: String
  /// The attempt.
  public var attempt: DeliveryAttemptRecord
  /// The delivery's state after it.
  public var state: DeliveryState
  /// When it is due again (`pending` only; `nil` means at once).
  public var nextAttemptMs: Int64?

  /// Creates an outcome.
  public init(deliveryId: String, attempt: DeliveryAttemptRecord, state: DeliveryState, nextAttemptMs: Int64?) {
    self.deliveryId = deliveryId
    self.attempt = attempt
    self.state = state
    self.nextAttemptMs = nextAttemptMs
  }

  /// The due time stored: `nextAttemptMs` (or the attempt's time) while pending, none after.
  public var storedNextAttemptMs: Int64? { state == .pending ? nextAttemptMs ?? attempt.attemptedMs : nil }
}

extension WebhookStore {
  /// Stores a webhook with no cap (``createWebhook(_:signingSecret:limits:)`` with
  /// ``WebhookLimits/unlimited``): tools and tests.
  public func createWebhook(_ webhook: WebhookRecord, signingSecret: String) async throws(StoreError) {
    try await createWebhook(webhook, signingSecret: signingSecret, limits: .unlimited)
  }

  /// Records one attempt and the delivery's new state (``recordDeliveryAttempts(_:)`` of one).
  /// - Throws: `notFound` for an unknown delivery (its webhook was deleted meanwhile).
  public func recordDeliveryAttempt(
    deliveryId: String, attempt: DeliveryAttemptRecord, state: DeliveryState, nextAttemptMs: Int64?
  ) async throws(StoreError) {
    let missing = try await recordDeliveryAttempts([
      DeliveryOutcome(deliveryId: deliveryId, attempt: attempt, state: state, nextAttemptMs: nextAttemptMs)
    ])
    if !missing.isEmpty { throw StoreError.notFound("delivery", deliveryId) }
  }

  /// See ``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:perWebhookLimit:excludingWebhookIds:claimant:shares:)``,
  /// with no per-tenant bound (tenants still in turn).
  public func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int,
    excludingWebhookIds: Set<String>, claimant: String
  ) async throws(StoreError) -> [DeliveryRecord] {
    try await claimDueDeliveries(
      atMs: atMs, limit: limit, leaseUntilMs: leaseUntilMs, perWebhookLimit: perWebhookLimit,
      excludingWebhookIds: excludingWebhookIds, claimant: claimant, shares: .unbounded)
  }

  /// See ``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:)``: no per-webhook bound.
  public func claimDueDeliveries(atMs: Int64, limit: Int, leaseUntilMs: Int64)
    async throws(StoreError) -> [DeliveryRecord]
  {
    try await claimDueDeliveries(
      atMs: atMs, limit: limit, leaseUntilMs: leaseUntilMs, perWebhookLimit: limit,
      excludingWebhookIds: [])
  }

  /// See ``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:perWebhookLimit:excludingWebhookIds:claimant:)``,
  /// by an unnamed claimant (tools and tests; any dispatcher's start releases its claims where the
  /// store allows).
  public func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int, excludingWebhookIds: Set<String>
  ) async throws(StoreError) -> [DeliveryRecord] {
    try await claimDueDeliveries(
      atMs: atMs, limit: limit, leaseUntilMs: leaseUntilMs, perWebhookLimit: perWebhookLimit,
      excludingWebhookIds: excludingWebhookIds, claimant: "")
  }
}
