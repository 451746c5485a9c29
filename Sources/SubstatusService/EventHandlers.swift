import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusEventDelivery
import SubstatusServiceAPI
import SubstatusServiceCore
import SubstatusWire

// EventService (docs/architecture.md "Events"): the event log read in pages and as a live stream,
// and the app's webhooks. READ keys may list and watch; the webhook RPCs and ReplayEvents need
// ADMIN (MethodPolicy). Every call is scoped to the key's tenant and apps: another tenant's app is
// NOT_FOUND.

extension SubstatusService: Substatus_V1_EventService.ServiceProtocol {
  /// Events read from the log per store call by ListEvents' default and by WatchEvents.
  static let eventBatch = 100

  public func listEvents(_ request: Substatus_V1_ListEventsRequest, _ context: ServerContext) async throws
    -> Substatus_V1_ListEventsResponse
  {
    _ = try await app(request.appID, context)
    let query = try eventQuery(userID: request.userID, types: request.types, environment: request.environment)
    guard (0...1000).contains(request.limit) else { throw invalidArgument("limit", "must be 1 to 1000 (0: 100)") }
    let limit = request.limit == 0 ? Self.eventBatch : Int(request.limit)
    let after = try eventCursors.decode(request.sinceCursor, appId: request.appID)
    // The log's end before the read: when the read returns fewer than asked, every event up to it
    // was scanned, so the next cursor may skip the events of other users, types and apps.
    let end = try await stored { () throws(StoreError) in try await eventLogStore.lastEventSequence() }
    let batch = try await stored { () throws(StoreError) in
      try await eventLogStore.events(appId: request.appID, query: query, afterSequence: after, limit: limit)
    }
    var response = Substatus_V1_ListEventsResponse()
    response.events = batch.map { $0.wire(eventCursors) }
    let last = batch.last?.sequence ?? after
    response.nextCursor = eventCursors.encode(
      appId: request.appID, sequence: batch.count < limit ? max(last, end, after) : last)
    return response
  }

  public func watchEvents(
    _ request: Substatus_V1_WatchEventsRequest, _ responses: RPCMessageWriter<Substatus_V1_WatchEventsResponse>,
    _ context: ServerContext
  ) async throws {
    _ = try await app(request.appID, context)
    let query = try eventQuery(userID: request.userID, types: request.types, environment: request.environment)
    var after =
      request.sinceCursor.isEmpty
      ? try await stored { () throws(StoreError) in try await eventLogStore.lastEventSequence() }
      : try eventCursors.decode(request.sinceCursor, appId: request.appID)
    eventMetrics.watcherStarted()
    defer { eventMetrics.watcherEnded() }
    // The app's streams share one read of the log (EventFeed); a stream behind its window reads
    // the store itself until it catches up.
    eventFeed.join(appId: request.appID, at: after)
    defer { eventFeed.leave(appId: request.appID) }
    // The headers now: the client knows the watch is on before the first event.
    responses.sendHeaders()
    // The store is the buffer: the next batch is read only once the stream has room for it
    // (send waits while the transport holds more than its bound), so a slow watcher costs the
    // server one batch, and continues from the log where it left off.
    var first = true
    while !Task.isCancelled {
      guard !eventSignal.isClosed else {
        throw RPCError(code: .unavailable, message: "the server is shutting down: watch again from the last event's cursor")
      }
      let seen = eventSignal.generation
      let shared = try await stored { () throws(StoreError) in
        try await eventFeed.read(
          appId: request.appID, query: query, after: after, limit: Self.eventBatch, seen: seen, signal: eventSignal,
          store: eventLogStore, first: first)
      }
      first = false
      if let shared {
        for entry in shared.entries {
          await responses.send(entry.message)
          after = entry.sequence
          if Task.isCancelled { return }
        }
        if shared.entries.count < Self.eventBatch {
          after = max(after, shared.through)
          await eventSignal.wait(after: seen)
        }
        continue
      }
      let batch = try await stored { () throws(StoreError) in
        try await eventLogStore.events(appId: request.appID, query: query, afterSequence: after, limit: Self.eventBatch)
      }
      for logged in batch {
        var message = Substatus_V1_WatchEventsResponse()
        message.event = logged.wire(eventCursors)
        await responses.send(message)
        after = logged.sequence
        if Task.isCancelled { return }
      }
      if batch.count < Self.eventBatch { await eventSignal.wait(after: seen) }
    }
  }

  public func createWebhook(_ request: Substatus_V1_CreateWebhookRequest, _ context: ServerContext) async throws
    -> Substatus_V1_CreateWebhookResponse
  {
    let app = try await app(request.appID, context)
    do { _ = try webhookURLPolicy.check(request.url) } catch { throw invalidArgument("url", error.reason) }
    guard request.eventTypes.count <= 32 else { throw invalidArgument("event_types", "at most 32 types") }
    let types = try SubscriptionEventType.set(wire: request.eventTypes, field: "event_types")
    let only: SubscriptionDomain.Environment? =
      request.environment == .unspecified ? nil : try SubscriptionDomain.Environment(wire: request.environment)
    let secret = WebhookSigning.newSecret(randomBytes: environment.randomBytes)
    let webhook = WebhookRecord(
      webhookId: Identifiers.make("wh", environment), appId: request.appID, url: request.url, eventTypes: types,
      environment: only, createdMs: environment.now(), secretFingerprint: WebhookSigning.fingerprint(secret))
    // RESOURCE_EXHAUSTED at a cap (README "Limits"): the quota code, as for other per-tenant
    // limits; nothing is created, and deleting a webhook makes room.
    do {
      try await webhookStore.createWebhook(webhook, signingSecret: secret, limits: limits.webhooks)
    } catch {
      if error.code == .resourceExhausted {
        eventMetrics.webhookCreateRefused(cap: error.message.contains("per-app") ? "app" : "tenant")
      }
      throw RPCError(store: error)
    }
    // The audit names the webhook and its secret's fingerprint, never the secret.
    await audit(
      context, tenant: app.app.tenantId, action: "CreateWebhook",
      resource: "apps/\(request.appID)/webhooks/\(webhook.webhookId)",
      details: "secret_fingerprint=\(webhook.secretFingerprint)")
    var response = Substatus_V1_CreateWebhookResponse()
    response.webhook = webhook.wire
    response.signingSecret = secret
    return response
  }

  public func testWebhook(_ request: Substatus_V1_TestWebhookRequest, _ context: ServerContext) async throws
    -> Substatus_V1_TestWebhookResponse
  {
    _ = try await app(request.appID, context)
    try requireID(request.webhookID, "webhook_id", limits: limits)
    let webhooks = try await stored { () throws(StoreError) in try await webhookStore.webhooks(appId: request.appID) }
    guard webhooks.contains(where: { $0.webhookId == request.webhookID }) else {
      throw RPCError(code: .notFound, message: "webhook \(ErrorText.quoted(request.webhookID)) not found")
    }
    guard let dispatcher = webhookDispatcher else {
      throw RPCError(code: .unavailable, message: "webhook delivery is not running on this server")
    }
    let result = try await stored { () throws(StoreError) in
      try await dispatcher.test(appId: request.appID, webhookId: request.webhookID)
    }
    var response = Substatus_V1_TestWebhookResponse()
    response.attempt = result.attempt.wire
    response.delivered = result.delivered
    return response
  }

  public func listWebhooks(_ request: Substatus_V1_ListWebhooksRequest, _ context: ServerContext) async throws
    -> Substatus_V1_ListWebhooksResponse
  {
    _ = try await app(request.appID, context)
    let webhooks = try await stored { () throws(StoreError) in try await webhookStore.webhooks(appId: request.appID) }
    var response = Substatus_V1_ListWebhooksResponse()
    response.webhooks = webhooks.map(\.wire)
    return response
  }

  public func deleteWebhook(_ request: Substatus_V1_DeleteWebhookRequest, _ context: ServerContext) async throws
    -> Substatus_V1_DeleteWebhookResponse
  {
    let app = try await app(request.appID, context)
    try requireID(request.webhookID, "webhook_id", limits: limits)
    try await stored { () throws(StoreError) in
      try await webhookStore.deleteWebhook(appId: request.appID, webhookId: request.webhookID)
    }
    await audit(
      context, tenant: app.app.tenantId, action: "DeleteWebhook",
      resource: "apps/\(request.appID)/webhooks/\(request.webhookID)")
    return Substatus_V1_DeleteWebhookResponse()
  }

  public func listDeliveries(_ request: Substatus_V1_ListDeliveriesRequest, _ context: ServerContext) async throws
    -> Substatus_V1_ListDeliveriesResponse
  {
    _ = try await app(request.appID, context)
    try requireID(request.webhookID, "webhook_id", limits: limits)
    guard (0...1000).contains(request.pageSize) else {
      throw invalidArgument("page_size", "must be 1 to 1000 (0: 100)")
    }
    let page = PageRequest(
      size: request.pageSize == 0 ? Self.eventBatch : Int(request.pageSize),
      cursor: try PageToken.decode(request.pageToken))
    let result = try await stored { () throws(StoreError) in
      try await webhookStore.deliveries(
        appId: request.appID, webhookId: request.webhookID, failedOnly: request.failedOnly, page: page)
    }
    var response = Substatus_V1_ListDeliveriesResponse()
    response.deliveries = result.items.map { $0.wire(eventCursors) }
    response.nextPageToken = PageToken.encode(result.nextCursor)
    return response
  }

  public func replayEvents(_ request: Substatus_V1_ReplayEventsRequest, _ context: ServerContext) async throws
    -> Substatus_V1_ReplayEventsResponse
  {
    let app = try await app(request.appID, context)
    if !request.webhookID.isEmpty { try requireID(request.webhookID, "webhook_id", limits: limits) }
    let after = try eventCursors.decode(request.sinceCursor, appId: request.appID)
    let webhook = request.webhookID.isEmpty ? nil : request.webhookID
    let created = try await stored { () throws(StoreError) in
      try await webhookStore.replay(appId: request.appID, webhookId: webhook, afterSequence: after, atMs: environment.now())
    }
    await audit(
      context, tenant: app.app.tenantId, action: "ReplayEvents",
      resource: "apps/\(request.appID)/webhooks/\(webhook ?? "*")",
      details: "since_cursor=\(request.sinceCursor.isEmpty ? "start" : request.sinceCursor) deliveries=\(created)")
    webhookDispatcher?.notifyEventsAppended()  // the new deliveries are due now
    var response = Substatus_V1_ReplayEventsResponse()
    response.deliveriesCreated = Int64(created)
    return response
  }

  /// The log query of a request's filters.
  func eventQuery(userID: String, types: [Substatus_V1_EventType], environment: Substatus_V1_Environment)
    throws(RPCError) -> EventQuery
  {
    if !userID.isEmpty { try requireID(userID, "user_id", limits: limits) }
    guard types.count <= 32 else { throw invalidArgument("types", "at most 32 types") }
    return EventQuery(
      userId: userID.isEmpty ? nil : userID, types: try SubscriptionEventType.set(wire: types, field: "types"),
      environment: environment == .unspecified ? nil : try SubscriptionDomain.Environment(wire: environment))
  }
}
