import SubscriptionDomain

// The webhook logic the SQL stores share, over their rows and values: how a webhook and a
// delivery are read from a row (the same columns in both schemas), how the deliveries listing is
// paged, which outcomes of a batch were not recorded. The dialect files keep the SQL and the
// binding of values (docs/architecture.md "Stores").

extension WebhookRowCoding {
  /// A webhook's columns, in the order ``webhook(_:)`` reads them.
  public static let webhookColumns = "webhook_id, app_id, url, event_types, created_ms, secret_fingerprint, environment"

  /// A webhook from a row whose first columns are ``webhookColumns``.
  public static func webhook(_ row: some StoreRow) -> WebhookRecord {
    WebhookRecord(
      webhookId: row.text(0), appId: row.text(1), url: row.text(2), eventTypes: types(row.text(3)),
      environment: environment(row.text(6)), createdMs: row.int(4), secretFingerprint: row.text(5))
  }

  /// A delivery from a row of `delivery_key, webhook_id, sequence, event, state, next_attempt_ms,
  /// created_ms, attempts` (the event and the attempts in their stored forms: ``decodeEvent(_:)``,
  /// ``decodeAttempts(_:)``). A delivery that is not pending has no due time.
  /// - Throws: `corrupt` when the event or the attempts cannot be read.
  public static func delivery(_ row: some StoreRow) throws(StoreError) -> DeliveryRecord {
    let state = DeliveryState(rawValue: row.text(4)) ?? .pending
    return DeliveryRecord(
      deliveryId: deliveryId(row.int(0)), webhookId: row.text(1),
      event: LoggedEvent(sequence: row.int(2), event: try decodeEvent(row.bytes(3))),
      state: state, attempts: try decodeAttempts(row.bytes(7)),
      nextAttemptMs: state == .pending ? row.optionalInt(5) : nil, createdMs: row.int(6))
  }

  /// Claimed deliveries in log order (then by id), the order their selection was made in
  /// (`RETURNING` keeps none).
  public static func inLogOrder(_ claimed: [DeliveryRecord]) -> [DeliveryRecord] {
    claimed.sorted { ($0.event.sequence, $0.deliveryId) < ($1.event.sequence, $1.deliveryId) }
  }

  /// Where a page of a webhook's deliveries (newest first) starts: below the row key of the page
  /// cursor, `Int64.max` for the first page.
  /// - Throws: `invalidArgument` for a cursor no listing made.
  public static func listingBound(_ page: PageRequest) throws(StoreError) -> Int64 {
    guard let cursor = page.cursor else { return .max }
    guard let key = Int64(cursor) else { throw StoreError(.invalidArgument, "invalid page cursor") }
    return key
  }

  /// A page of the deliveries listing from the rows read for it (at most `limit + 1`, newest
  /// first): the first `limit`, and a cursor after the last of them when there were more.
  public static func listingPage(_ rows: [DeliveryRecord], limit: Int) -> Page<DeliveryRecord> {
    guard rows.count > limit else { return Page(items: rows, nextCursor: nil) }
    let items = Array(rows.prefix(limit))
    return Page(items: items, nextCursor: items.last.flatMap { deliveryKey($0.deliveryId) }.map(String.init))
  }

  /// The ids of the outcomes whose delivery a batch did not find (its webhook was deleted
  /// meanwhile), given the row keys it recorded (``WebhookStore/recordDeliveryAttempts(_:)``).
  public static func unrecorded(_ outcomes: [DeliveryOutcome], recorded: Set<Int64>) -> Set<String> {
    Set(
      outcomes.filter { outcome in
        deliveryKey(outcome.deliveryId).map { !recorded.contains($0) } ?? true
      }.map(\.deliveryId))
  }
}

extension WebhookFanOut {
  /// ``WebhookStore/enqueueDeliveries(atMs:limit:)`` but for the store's commit: for each webhook
  /// behind the log's end, its next batch (``next(for:after:lastSequence:limit:log:)``), handed to
  /// `commit` with the position it was read from; `commit` stores the deliveries and moves the
  /// position only if it is still the one read (compare and set), and says how many it created.
  /// - Parameters:
  ///   - webhooks: every webhook with its read position.
  ///   - lastSequence: ``EventLogStore/lastEventSequence()`` read before the webhooks.
  /// - Returns: how many deliveries were created.
  public static func enqueue(
    _ webhooks: [(webhook: WebhookRecord, position: Int64)], lastSequence: Int64, limit: Int, log: any EventLogStore,
    commit: (_ webhook: WebhookRecord, _ position: Int64, _ batch: WebhookFanOutBatch) async throws(StoreError) -> Int
  ) async throws(StoreError) -> Int {
    var created = 0
    for (webhook, position) in webhooks where position < lastSequence {
      let batch = try await next(for: webhook, after: position, lastSequence: lastSequence, limit: limit, log: log)
      guard batch.readThrough > position else { continue }
      created += try await commit(webhook, position, batch)
    }
    return created
  }

  /// ``WebhookStore/replay(appId:webhookId:afterSequence:atMs:)`` but for the store's insert: the
  /// target webhooks (`webhookId`'s, or each of the app's), and for each, its events after
  /// `afterSequence` page by page, handed to `insert`, which creates their deliveries unless the
  /// webhook was deleted meanwhile and says how many it created.
  /// - Parameter webhooks: the app's webhooks (``WebhookStore/webhooks(appId:)``).
  /// - Returns: how many deliveries were created.
  /// - Throws: `notFound` when `webhookId` is not one of `webhooks`.
  public static func replay(
    _ webhooks: [WebhookRecord], webhookId: String?, afterSequence: Int64, log: any EventLogStore,
    insert: (_ webhook: WebhookRecord, _ events: [LoggedEvent]) async throws(StoreError) -> Int
  ) async throws(StoreError) -> Int {
    let targets = webhooks.filter { webhookId == nil || $0.webhookId == webhookId }
    if let webhookId, targets.isEmpty { throw StoreError.notFound("webhook", webhookId) }
    var created = 0
    for webhook in targets {
      try await replay(for: webhook, afterSequence: afterSequence, log: log) {
        (events: [LoggedEvent]) throws(StoreError) in
        created += try await insert(webhook, events)
      }
    }
    return created
  }
}
