// The part of webhook fan-out every store shares: reading a webhook's next events from the log
// through ``EventLogStore/events(appId:query:afterSequence:limit:)``. Each store then commits the
// deliveries and the webhook's new read position in one step, and only if the position is still the
// one read (compare and set), so two dispatchers (or two instances) never enqueue an event twice and
// never skip one.

/// What a webhook reads next from the log.
public struct WebhookFanOutBatch: Sendable {
  /// The events after the webhook's position that it wants, in log order.
  public var events: [LoggedEvent]
  /// The position the webhook has read through once these are enqueued.
  public var readThrough: Int64
}

/// Reads webhooks' next events from the log (used by the stores' `enqueueDeliveries`).
public enum WebhookFanOut {
  /// The events after `position` that `webhook` wants, at most `limit`, and how far the log was
  /// read: the last event returned when the batch is full, otherwise the log's end as it was before
  /// the read (events become visible in sequence order, so none at or below it can appear later).
  /// - Parameters:
  ///   - lastSequence: ``EventLogStore/lastEventSequence()`` read before this call.
  public static func next(
    for webhook: WebhookRecord, after position: Int64, lastSequence: Int64, limit: Int,
    log: any EventLogStore
  ) async throws(StoreError) -> WebhookFanOutBatch {
    let n = min(max(limit, 1), 1000)
    guard lastSequence > position else { return WebhookFanOutBatch(events: [], readThrough: position) }
    let events = try await log.events(
      appId: webhook.appId, query: query(of: webhook), afterSequence: position,
      limit: n)
    // Only what the log held when `lastSequence` was read: a later event waits for the next call.
    let seen = events.filter { $0.sequence <= lastSequence }
    if seen.count >= n, let last = seen.last {
      return WebhookFanOutBatch(events: seen, readThrough: last.sequence)
    }
    return WebhookFanOutBatch(events: seen, readThrough: lastSequence)
  }

  /// Every event of the app after `afterSequence` that `webhook` wants, page by page (replay).
  /// - Parameter page: called with each page of at most 1000 events, in log order.
  public static func replay(
    for webhook: WebhookRecord, afterSequence: Int64, log: any EventLogStore,
    page: ([LoggedEvent]) async throws(StoreError) -> Void
  ) async throws(StoreError) {
    var position = afterSequence
    while true {
      let events = try await log.events(
        appId: webhook.appId, query: query(of: webhook), afterSequence: position,
        limit: 1000)
      guard let last = events.last else { return }
      try await page(events)
      position = last.sequence
      if events.count < 1000 { return }
    }
  }

  /// The events a webhook wants: its types (empty: all) of its environment (`nil`: both).
  public static func query(of webhook: WebhookRecord) -> EventQuery {
    EventQuery(types: webhook.eventTypes, environment: webhook.environment)
  }

  /// Checks a webhook before it is stored.
  /// - Throws: `invalidArgument` for an empty id, URL or secret.
  public static func validate(_ webhook: WebhookRecord, signingSecret: String) throws(StoreError) {
    guard !webhook.webhookId.isEmpty else { throw StoreError(.invalidArgument, "webhook: webhook_id is empty") }
    guard !webhook.url.isEmpty else { throw StoreError(.invalidArgument, "webhook: url is empty") }
    guard !signingSecret.isEmpty else { throw StoreError(.invalidArgument, "webhook: signing secret is empty") }
  }

  /// The context that binds a sealed signing secret to its webhook (a box copied to another row
  /// does not open).
  public static func secretContext(_ webhookId: String) -> String { "substatus/webhook-secret/" + webhookId }

  /// Seals a signing secret for storage.
  /// - Throws: `secretUnavailable` when it cannot be sealed.
  public static func seal(_ secret: String, webhookId: String, keyring: MasterKeyring)
    throws(StoreError) -> SealedSecret
  {
    do {
      return try SecretBox.seal(Array(secret.utf8), context: secretContext(webhookId), keyring: keyring)
    } catch {
      throw StoreError(.secretUnavailable, "cannot seal the webhook signing secret: \(error.message)")
    }
  }

  /// Opens a stored signing secret.
  /// - Throws: `secretUnavailable` when the keyring cannot open it.
  public static func open(_ sealed: SealedSecret, webhookId: String, keyring: MasterKeyring)
    throws(StoreError) -> String
  {
    do {
      return String(
        decoding: try SecretBox.open(sealed, context: secretContext(webhookId), keyring: keyring),
        as: UTF8.self)
    } catch {
      throw StoreError(.secretUnavailable, "signing secret of webhook \"\(webhookId)\": \(error.message)")
    }
  }
}
