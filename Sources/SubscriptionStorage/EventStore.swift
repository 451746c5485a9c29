import SubscriptionDomain

// The durable event log and the webhook deliveries fed from it (DESIGN.md "Events out").
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
  /// When it was created.
  public var createdMs: Int64
  /// The signing secret's fingerprint (filled by the store on reads).
  public var secretFingerprint: String

  /// Creates a record.
  public init(
    webhookId: String, appId: String, url: String, eventTypes: Set<SubscriptionEventType> = [],
    createdMs: Int64, secretFingerprint: String = ""
  ) {
    self.webhookId = webhookId
    self.appId = appId
    self.url = url
    self.eventTypes = eventTypes
    self.createdMs = createdMs
    self.secretFingerprint = secretFingerprint
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
/// deliveries of the events after that point whose type the webhook wants and moves the point, in
/// one commit, so no event is skipped or enqueued twice (events logged before the webhook was
/// created are not delivered, except by ``replay(appId:webhookId:afterSequence:atMs:)``).
public protocol WebhookStore: Sendable {
  /// Stores a webhook and its signing secret (sealed at rest).
  /// - Throws: `notFound` for an unknown app; `alreadyExists` for a taken id; `secretUnavailable`
  ///   without a master key.
  func createWebhook(_ webhook: WebhookRecord, signingSecret: String) async throws(StoreError)
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
  func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int,
    excludingWebhookIds: Set<String>, claimant: String
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
