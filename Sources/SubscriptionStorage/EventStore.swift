import SubscriptionDomain

// The types of the durable event log and of the webhook deliveries fed from it
// (docs/architecture.md "Events"). Their role protocols are ``EventLogStore`` (EventLogStore.swift:
// written by every write of purchase data in the same commit and by the transition scheduler, read
// by ListEvents, WatchEvents and trends) and ``WebhookStore`` (WebhookStore.swift: fans the log out
// to webhooks and records deliveries). Every ``Store`` implementation (`InMemoryStore`,
// `SQLiteStore`, `PostgresStore`) conforms to both and passes the contract suite for them.

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
