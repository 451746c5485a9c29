import SubscriptionDomain

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
  /// until then (at-least-once, like ``ReceiptStore/claimDueReceipts(atMs:limit:leaseUntilMs:)``).
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
