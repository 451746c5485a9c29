import SubscriptionDomain
import SubscriptionStorage
import Synchronization

/// The webhooks and deliveries of an ``InMemoryStore`` (its own lock: the log is read through
/// ``EventLogStore``, and fan-out commits by compare and set on each webhook's read position).
struct InMemoryWebhooks: Sendable {
  var webhooks: [String: WebhookRecord] = [:]
  /// Signing secrets by webhook id (plaintext: nothing of an in-memory store is at rest).
  var secrets: [String: String] = [:]
  /// How far each webhook has read the log.
  var positions: [String: Int64] = [:]
  /// Each webhook's tenant (its app's): the per-tenant cap and fair claims.
  var tenants: [String: String] = [:]
  var deliveries: [String: DeliveryRecord] = [:]
  /// Creation order of each delivery (its id's number): newest first in listings, ties in claims.
  var order: [String: Int64] = [:]
  var lastDelivery: Int64 = 0
  /// Who holds each claimed delivery (until its attempt is recorded).
  var claimants: [String: String] = [:]

  /// Drops the deliveries of the users' events (their erasure).
  mutating func erase(appId: String, userIds: Set<String>) {
    for (id, d) in deliveries where d.event.event.appId == appId && userIds.contains(d.event.event.userId) {
      deliveries[id] = nil
      order[id] = nil
      claimants[id] = nil
    }
  }

  mutating func add(webhookId: String, event: LoggedEvent, atMs: Int64) {
    lastDelivery += 1
    let id = WebhookRowCoding.deliveryId(lastDelivery)
    deliveries[id] = DeliveryRecord(
      deliveryId: id, webhookId: webhookId, event: event, state: .pending, nextAttemptMs: atMs,
      createdMs: atMs)
    order[id] = lastDelivery
  }
}

extension InMemoryStore {
  /// See ``WebhookStore/createWebhook(_:signingSecret:limits:)``: the counts and the insert under
  /// one lock.
  public func createWebhook(_ webhook: WebhookRecord, signingSecret: String, limits: WebhookLimits)
    async throws(StoreError)
  {
    try WebhookFanOut.validate(webhook, signingSecret: signingSecret)
    let tenantId = try await app(id: webhook.appId).tenantId
    let position = try await lastEventSequence()
    try withWebhooks { (w: inout InMemoryWebhooks) throws(StoreError) in
      guard w.webhooks[webhook.webhookId] == nil else {
        throw StoreError(.alreadyExists, "webhook \"\(webhook.webhookId)\" already exists")
      }
      let appCount = w.webhooks.values.count { $0.appId == webhook.appId }
      let tenantCount = w.tenants.values.count { $0 == tenantId }
      if let refusal = limits.refusal(appCount: appCount, tenantCount: tenantCount) { throw refusal }
      w.tenants[webhook.webhookId] = tenantId
      var stored = webhook
      stored.secretFingerprint = SecretFingerprint.of(signingSecret)
      w.webhooks[webhook.webhookId] = stored
      w.secrets[webhook.webhookId] = signingSecret
      w.positions[webhook.webhookId] = position
    }
  }

  /// See ``WebhookStore/webhooks(appId:)``.
  public func webhooks(appId: String) async throws(StoreError) -> [WebhookRecord] {
    _ = try await app(id: appId)
    return webhookState.withLock { w in
      w.webhooks.values.filter { $0.appId == appId }.sorted { $0.webhookId < $1.webhookId }
    }
  }

  /// See ``WebhookStore/webhook(id:)``.
  public func webhook(id webhookId: String) async throws(StoreError) -> WebhookRecord {
    try withWebhooks { (w: inout InMemoryWebhooks) throws(StoreError) in
      guard var webhook = w.webhooks[webhookId] else { throw StoreError.notFound("webhook", webhookId) }
      webhook.tenantId = w.tenants[webhookId] ?? ""
      return webhook
    }
  }

  /// See ``WebhookStore/deleteWebhook(appId:webhookId:)``.
  public func deleteWebhook(appId: String, webhookId: String) async throws(StoreError) {
    _ = try await app(id: appId)
    try withWebhooks { (w: inout InMemoryWebhooks) throws(StoreError) in
      guard w.webhooks[webhookId]?.appId == appId else { throw StoreError.notFound("webhook", webhookId) }
      w.webhooks[webhookId] = nil
      w.tenants[webhookId] = nil
      w.secrets[webhookId] = nil
      w.positions[webhookId] = nil
      for (id, d) in w.deliveries where d.webhookId == webhookId {
        w.deliveries[id] = nil
        w.order[id] = nil
        w.claimants[id] = nil
      }
    }
  }

  /// See ``WebhookStore/webhookSigningSecret(webhookId:)``.
  public func webhookSigningSecret(webhookId: String) async throws(StoreError) -> String {
    try withWebhooks { (w: inout InMemoryWebhooks) throws(StoreError) in
      guard let secret = w.secrets[webhookId] else { throw StoreError.notFound("webhook", webhookId) }
      return secret
    }
  }

  /// See ``WebhookStore/enqueueDeliveries(atMs:limit:)``.
  public func enqueueDeliveries(atMs: Int64, limit: Int) async throws(StoreError) -> Int {
    let last = try await lastEventSequence()
    let hooks = webhookState.withLock { w in
      w.webhooks.values.map { ($0, w.positions[$0.webhookId] ?? 0) }
    }
    let ordered = hooks.sorted(by: { $0.0.webhookId < $1.0.webhookId }).map { (webhook: $0.0, position: $0.1) }
    return try await WebhookFanOut.enqueue(ordered, lastSequence: last, limit: limit, log: self) {
      (webhook, position, batch) throws(StoreError) -> Int in
      webhookState.withLock { w -> Int in
        // Compare and set: another enqueue (or a delete) got there first.
        guard w.webhooks[webhook.webhookId] != nil, w.positions[webhook.webhookId] == position else {
          return 0
        }
        for event in batch.events { w.add(webhookId: webhook.webhookId, event: event, atMs: atMs) }
        w.positions[webhook.webhookId] = batch.readThrough
        return batch.events.count
      }
    }
  }

  /// See ``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:perWebhookLimit:excludingWebhookIds:claimant:shares:)``:
  /// one locked step, tenants in turn (``FairClaim``).
  public func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int,
    excludingWebhookIds: Set<String>, claimant: String, shares: DeliveryClaimShares
  ) async throws(StoreError) -> [DeliveryRecord] {
    try StoreValidation.validateLease(atMs: atMs, leaseUntilMs: leaseUntilMs)
    return webhookState.withLock { w in
      struct Head {
        var delivery: DeliveryRecord
        var order: Int64
      }
      // The oldest pending delivery per (webhook, environment, user), due or not.
      var heads: [[String]: Head] = [:]
      for d in w.deliveries.values where d.state == .pending {
        let key = [d.webhookId, d.event.event.environment.rawValue, d.event.event.userId]
        let head = Head(delivery: d, order: w.order[d.deliveryId] ?? 0)
        if let h = heads[key], (h.delivery.event.sequence, h.order) < (d.event.sequence, head.order) {
          continue
        }
        heads[key] = head
      }
      var byKey: [Int64: DeliveryRecord] = [:]
      var candidates: [FairClaim.Candidate] = []
      for head in heads.values where (head.delivery.nextAttemptMs ?? Int64.max) <= atMs
        && !excludingWebhookIds.contains(head.delivery.webhookId)
      {
        let tenantId = w.tenants[head.delivery.webhookId] ?? ""
        guard !shares.excludingTenantIds.contains(tenantId) else { continue }
        byKey[head.order] = head.delivery
        candidates.append(
          FairClaim.Candidate(
            tenantId: tenantId, webhookId: head.delivery.webhookId, sequence: head.delivery.event.sequence,
            key: head.order))
      }
      var claimed: [DeliveryRecord] = []
      for pick in FairClaim.pick(
        candidates, limit: min(max(limit, 1), 1000), perWebhook: perWebhookLimit, perTenant: shares.perTenantLimit)
      {
        guard let delivery = byKey[pick.key] else { continue }
        w.deliveries[delivery.deliveryId]?.nextAttemptMs = leaseUntilMs
        w.claimants[delivery.deliveryId] = claimant
        claimed.append(delivery)
      }
      return claimed
    }
  }

  /// See ``WebhookStore/releaseClaims(notMadeBy:atMs:)``: an in-memory store is one process's, so
  /// every other claimant's run has ended.
  public func releaseClaims(notMadeBy claimant: String, atMs: Int64) async throws(StoreError) -> Int {
    webhookState.withLock { w in
      let stale = w.claimants.filter { $0.value != claimant }.keys
      for id in stale {
        w.claimants[id] = nil
        if w.deliveries[id]?.state == .pending { w.deliveries[id]?.nextAttemptMs = atMs }
      }
      return stale.count
    }
  }

  /// See ``WebhookStore/recordDeliveryAttempts(_:)``: one locked step.
  public func recordDeliveryAttempts(_ outcomes: [DeliveryOutcome]) async throws(StoreError) -> Set<String> {
    webhookState.withLock { w in
      var missing = Set<String>()
      for outcome in outcomes {
        guard var d = w.deliveries[outcome.deliveryId] else {
          missing.insert(outcome.deliveryId)
          continue
        }
        d.attempts.append(outcome.attempt)
        d.state = outcome.state
        d.nextAttemptMs = outcome.storedNextAttemptMs
        w.deliveries[outcome.deliveryId] = d
        w.claimants[outcome.deliveryId] = nil
      }
      return missing
    }
  }

  /// See ``WebhookStore/deliveries(appId:webhookId:failedOnly:page:)``.
  public func deliveries(appId: String, webhookId: String, failedOnly: Bool, page: PageRequest)
    async throws(StoreError) -> Page<DeliveryRecord>
  {
    _ = try await app(id: appId)
    var after: Int64?
    if let cursor = page.cursor {
      guard let n = Int64(cursor) else { throw StoreError(.invalidArgument, "invalid page cursor") }
      after = n
    }
    return try withWebhooks { (w: inout InMemoryWebhooks) throws(StoreError) in
      guard w.webhooks[webhookId]?.appId == appId else { throw StoreError.notFound("webhook", webhookId) }
      let all = w.deliveries.values.filter { d in
        d.webhookId == webhookId && (!failedOnly || d.state == .failed)
          && (after.map { (w.order[d.deliveryId] ?? 0) < $0 } ?? true)
      }.sorted { (w.order[$0.deliveryId] ?? 0) > (w.order[$1.deliveryId] ?? 0) }
      let items = Array(all.prefix(page.limit))
      let next = all.count > items.count ? items.last.map { String(w.order[$0.deliveryId] ?? 0) } : nil
      return Page(items: items, nextCursor: next)
    }
  }

  /// See ``WebhookStore/replay(appId:webhookId:afterSequence:atMs:)``.
  public func replay(appId: String, webhookId: String?, afterSequence: Int64, atMs: Int64)
    async throws(StoreError) -> Int
  {
    try await WebhookFanOut.replay(
      try await webhooks(appId: appId), webhookId: webhookId, afterSequence: afterSequence, log: self
    ) { (webhook, events) throws(StoreError) -> Int in
      webhookState.withLock { w -> Int in
        guard w.webhooks[webhook.webhookId] != nil else { return 0 }
        for event in events { w.add(webhookId: webhook.webhookId, event: event, atMs: atMs) }
        return events.count
      }
    }
  }

  private func withWebhooks<T>(_ body: (inout InMemoryWebhooks) throws(StoreError) -> T)
    throws(StoreError) -> T
  {
    let result: Result<T, StoreError> = webhookState.withLock { w in
      do throws(StoreError) { return .success(try body(&w)) } catch { return .failure(error) }
    }
    return try result.get()
  }
}
