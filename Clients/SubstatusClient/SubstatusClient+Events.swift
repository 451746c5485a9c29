public import RPCCore
public import SubstatusWire

// MARK: - Events out (issue 21): the event log, its live stream, webhooks

extension SubstatusClient {
  /// Reads the app's events in log order after a cursor (`EventService.ListEvents`). Idempotent.
  ///
  /// ```swift
  /// var cursor = ""
  /// repeat {
  ///   let page = try await client.listEvents(appID: app, sinceCursor: cursor, limit: 500)
  ///   for event in page.events { handle(event) }
  ///   cursor = page.nextCursor
  /// } while !page.events.isEmpty
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: Only this user's events; empty for every user.
  ///   - types: Only these types; empty for all.
  ///   - sinceCursor: An `Event.cursor` or `nextCursor`; empty for the start of the log.
  ///   - limit: At most this many (1 to 1000); 0 for the server's default (100).
  ///   - environment: The environment; `.unspecified` for both.
  ///   - options: Deadline and metadata.
  /// - Returns: The events and the cursor to continue from.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `since_cursor`, `limit` or `types`).
  public func listEvents(
    appID: String, userID: String = "", types: [Substatus_V1_EventType] = [], sinceCursor: String = "",
    limit: Int32 = 0, environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListEventsResponse {
    var request = Substatus_V1_ListEventsRequest()
    request.appID = appID
    request.userID = userID
    request.types = types
    request.sinceCursor = sinceCursor
    request.limit = limit
    request.environment = environment
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .listEvents(request)
  }

  /// Streams the app's events after a cursor, then each new one as it is written
  /// (`EventService.WatchEvents`), until the iterating task is cancelled. The client's default
  /// deadline does not apply; a timeout in `options` does. `UNAVAILABLE` is retried (idempotent)
  /// only until the stream has started.
  ///
  /// ```swift
  /// for try await message in try await client.watchEvents(appID: app, sinceCursor: saved) {
  ///   handle(message.event)
  ///   saved = message.event.cursor   // resume here after a disconnect
  /// }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: Only this user's events; empty for every user.
  ///   - types: Only these types; empty for all.
  ///   - sinceCursor: Start after this cursor; empty for only events written from now on.
  ///   - environment: The environment; `.unspecified` for both.
  ///   - options: Timeout and metadata.
  /// - Returns: The stream, once the server has accepted the call.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `since_cursor` or `types`).
  public func watchEvents(
    appID: String, userID: String = "", types: [Substatus_V1_EventType] = [], sinceCursor: String = "",
    environment: Substatus_V1_Environment = .unspecified, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> ServerStreamingResponse<Substatus_V1_WatchEventsResponse> {
    var request = Substatus_V1_WatchEventsRequest()
    request.appID = appID
    request.userID = userID
    request.types = types
    request.sinceCursor = sinceCursor
    request.environment = environment
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .watchEvents(request)
  }

  /// Subscribes a URL to the app's events (`EventService.CreateWebhook`). Not retried. The
  /// response's `signingSecret` is shown only here.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - url: An `https://` or `http://` URL.
  ///   - eventTypes: The types to send; empty for all.
  ///   - environment: Only events of this environment; `.unspecified` for both.
  ///   - options: Deadline and metadata.
  /// - Returns: The webhook and its signing secret.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `url` or `event_types`).
  public func createWebhook(
    appID: String, url: String, eventTypes: [Substatus_V1_EventType] = [],
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_CreateWebhookResponse {
    var request = Substatus_V1_CreateWebhookRequest()
    request.appID = appID
    request.url = url
    request.eventTypes = eventTypes
    request.environment = environment
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .createWebhook(request)
  }

  /// The app's webhooks, ordered by id (`EventService.ListWebhooks`). Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - options: Deadline and metadata.
  /// - Returns: The webhooks.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func listWebhooks(appID: String, options: SubstatusCallOptions = SubstatusCallOptions())
    async throws(RPCError) -> Substatus_V1_ListWebhooksResponse
  {
    var request = Substatus_V1_ListWebhooksRequest()
    request.appID = appID
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .listWebhooks(request)
  }

  /// Removes a webhook and its pending deliveries (`EventService.DeleteWebhook`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - webhookID: The webhook.
  ///   - options: Deadline and metadata.
  /// - Returns: The (empty) response.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func deleteWebhook(
    appID: String, webhookID: String, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_DeleteWebhookResponse {
    var request = Substatus_V1_DeleteWebhookRequest()
    request.appID = appID
    request.webhookID = webhookID
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .deleteWebhook(request)
  }

  /// Sends a test event to a webhook now and answers with the attempt (`EventService.TestWebhook`).
  /// Not retried.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - webhookID: The webhook.
  ///   - options: Deadline and metadata.
  /// - Returns: The attempt and whether the receiver answered 2xx.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func testWebhook(
    appID: String, webhookID: String, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_TestWebhookResponse {
    var request = Substatus_V1_TestWebhookRequest()
    request.appID = appID
    request.webhookID = webhookID
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .testWebhook(request)
  }

  /// A webhook's deliveries, newest first, with their attempts (`EventService.ListDeliveries`).
  /// Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - webhookID: The webhook.
  ///   - failedOnly: Only deliveries that were given up.
  ///   - pageSize: 1 to 1000; 0 for the server's default (100).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page of deliveries.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func listDeliveries(
    appID: String, webhookID: String, failedOnly: Bool = false, pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListDeliveriesResponse {
    var request = Substatus_V1_ListDeliveriesRequest()
    request.appID = appID
    request.webhookID = webhookID
    request.failedOnly = failedOnly
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .listDeliveries(request)
  }

  /// Delivers the app's events after a cursor again, as new deliveries, to one webhook or all
  /// (`EventService.ReplayEvents`). Not retried (a retry would deliver them once more).
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - sinceCursor: Replay the events after this cursor; empty for the whole log.
  ///   - webhookID: Only to this webhook; empty for every webhook of the app.
  ///   - options: Deadline and metadata.
  /// - Returns: How many deliveries were created.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `since_cursor`).
  public func replayEvents(
    appID: String, sinceCursor: String, webhookID: String = "", options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ReplayEventsResponse {
    var request = Substatus_V1_ReplayEventsRequest()
    request.appID = appID
    request.sinceCursor = sinceCursor
    request.webhookID = webhookID
    return try await service(Substatus_V1_EventService.Client.self, options: options)
      .replayEvents(request)
  }
}
