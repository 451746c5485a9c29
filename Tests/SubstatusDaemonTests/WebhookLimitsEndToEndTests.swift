import Foundation
import Glibc
import RPCCore
import SubstatusWire
import Synchronization
import Testing

/// Issue 30's attacks on webhooks and the live stream, against a real substatusd: webhooks past
/// the per-app and per-tenant caps are refused (also when created at once), one tenant's backlog
/// to a slow receiver does not hold another tenant's deliveries, and an erased user's events never
/// reach a new WatchEvents stream, whether or not another stream of the app is open.
@Suite(.serialized) struct WebhookLimitsEndToEndTests {
  static let daemonArguments = ["--allow-private-webhooks", "--refresh-interval", "0", "--reconcile-interval", "0"]

  /// A tenant; returns its admin key.
  static func tenant(_ client: DaemonClient, operatorKey: String, name: String) async throws -> String {
    var request = Substatus_V1_CreateTenantRequest()
    request.name = name
    return try await client.call(Substatus_V1_TenantService.createTenant, request, key: operatorKey).adminKey
  }

  /// An app of the admin key's tenant with a lifetime product; returns its id.
  static func app(_ client: DaemonClient, admin: String, bundleID: String) async throws -> String {
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = bundleID
    let app = try #require(try await client.call(Substatus_V1_AdminService.registerApp, register, key: admin).app?.appID)
    try await EventsEndToEndTests.putLifetime(client, key: admin, app: app)
    return app
  }

  /// Creates a webhook; returns its signing secret, or the status code it was refused with.
  static func createWebhook(_ client: DaemonClient, admin: String, app: String, url: String) async throws
    -> Result<String, RPCError>
  {
    var request = Substatus_V1_CreateWebhookRequest()
    request.appID = app
    request.url = url
    do {
      return .success(try await client.call(Substatus_V1_EventService.createWebhook, request, key: admin).signingSecret)
    } catch let error as RPCError {
      return .failure(error)
    }
  }

  /// `count` creates at once.
  static func createConcurrently(_ client: DaemonClient, admin: String, app: String, count: Int) async throws
    -> [Result<String, RPCError>]
  {
    try await withThrowingTaskGroup(of: Result<String, RPCError>.self) { group in
      for i in 0..<count {
        group.addTask { try await createWebhook(client, admin: admin, app: app, url: "http://127.0.0.1:9/hook/\(i)") }
      }
      var out: [Result<String, RPCError>] = []
      for try await result in group { out.append(result) }
      return out
    }
  }

  static func lifetimePurchase(_ client: DaemonClient, admin: String, app: String, user: String, id: String) async throws {
    try await EventsEndToEndTests.purchase(
      client, key: admin, app: app, user: user, id: id, product: "lifetime",
      purchasedMs: Int64(Date().timeIntervalSince1970 * 1000) - 60_000)
  }

  /// `/metrics`, read with curl (off the cooperative pool).
  static func metrics(_ daemon: RunningDaemon) async throws -> String {
    let url = "http://\(daemon.http)/metrics"
    return try await runProcess("/usr/bin/curl", ["-sS", "--max-time", "10", url]).1
  }

  // MARK: Attack 4: webhooks per app and per tenant

  @Test func webhooksPastThePerAppAndPerTenantCapsAreRefusedEvenWhenCreatedAtOnce() async throws {
    let daemon = try await RunningDaemon(
        extraArguments: Self.daemonArguments + ["--max-webhooks-per-app", "4", "--max-webhooks-per-tenant", "6"])
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let admin = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "many-hooks")
    let first = try await Self.app(client, admin: admin, bundleID: "com.example.hooks.one")
    let second = try await Self.app(client, admin: admin, bundleID: "com.example.hooks.two")

    // 12 creates at once in one app: 4 made, 8 refused naming the per-app cap.
    let results = try await Self.createConcurrently(client, admin: admin, app: first, count: 12)
    let made = results.filter { if case .success = $0 { true } else { false } }
    #expect(made.count == 4)
    for case .failure(let error) in results {
      #expect(error.code == .resourceExhausted)
      #expect(error.message.contains("max-webhooks-per-app 4"), "\(error.message)")
    }
    var list = Substatus_V1_ListWebhooksRequest()
    list.appID = first
    #expect(try await client.call(Substatus_V1_EventService.listWebhooks, list, key: admin).webhooks.count == 4)

    // The tenant's second app: 2 more fit under the tenant's 6, the rest are refused naming it.
    let more = try await Self.createConcurrently(client, admin: admin, app: second, count: 4)
    #expect(more.count { if case .success = $0 { true } else { false } } == 2)
    for case .failure(let error) in more {
      #expect(error.code == .resourceExhausted)
      #expect(error.message.contains("max-webhooks-per-tenant 6"), "\(error.message)")
    }

    // Another tenant is not affected; deleting a webhook makes room.
    let other = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "other")
    let otherApp = try await Self.app(client, admin: other, bundleID: "com.example.hooks.other")
    let otherResult = try await Self.createWebhook(client, admin: other, app: otherApp, url: "http://127.0.0.1:9/o")
    #expect((try? otherResult.get()) != nil)
    let hooks = try await client.call(Substatus_V1_EventService.listWebhooks, list, key: admin).webhooks
    var delete = Substatus_V1_DeleteWebhookRequest()
    delete.appID = first
    delete.webhookID = try #require(hooks.first?.webhookID)
    _ = try await client.call(Substatus_V1_EventService.deleteWebhook, delete, key: admin)
    let again = try await Self.createWebhook(client, admin: admin, app: first, url: "http://127.0.0.1:9/again")
    #expect((try? again.get()) != nil)

    let text = try await Self.metrics(daemon)
    #expect(text.contains("substatus_webhook_creates_refused_total{cap=\"app\"} 8"), "\(text)")
    #expect(text.contains("substatus_webhook_creates_refused_total{cap=\"tenant\"} 2"))
    #expect(text.contains("substatus_webhook_limit{cap=\"app\"} 4"))
    #expect(text.contains("substatus_webhook_limit{cap=\"tenant\"} 6"))
  }

  // MARK: Attack 4: one tenant's backlog and another tenant's deliveries

  @Test func oneTenantsBacklogToASlowReceiverDoesNotDelayAnotherTenantsEvents() async throws {
    let slow = try await EventReceiver(script: "slow_receiver.py")
    let receiver = try await EventReceiver()
    let daemon = try await RunningDaemon(extraArguments: Self.daemonArguments)
    let client = try DaemonClient(daemon)
    // Stopped off the cooperative pool (the daemon finishes the POSTs in flight to the slow
    // receiver first), whatever the test found.
    do { try await Self.backlog(daemon, client, slow: slow, receiver: receiver) } catch { Issue.record(error) }
    client.transport.close()
    _ = await daemon.stop()
    receiver.stop()
    slow.stop()
  }

  static func backlog(_ daemon: RunningDaemon, _ client: DaemonClient, slow: EventReceiver, receiver: EventReceiver)
    async throws
  {

    // Tenant A: 2 apps × 16 webhooks (the default cap per app) to a receiver that takes 2 s a POST.
    let busy = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "busy")
    var busyApps: [String] = []
    for n in 0..<2 {
      let app = try await Self.app(client, admin: busy, bundleID: "com.example.busy.\(n)")
      busyApps.append(app)
      for i in 0..<16 {
        let made = try await Self.createWebhook(
          client, admin: busy, app: app, url: "http://127.0.0.1:\(slow.port)/busy/\(n)/\(i)")
        _ = try made.get()
      }
    }
    // 100 events per app: 3,200 deliveries.
    try await withThrowingTaskGroup(of: Void.self) { group in
      for (n, app) in busyApps.enumerated() {
        group.addTask {
          for u in 0..<100 {
            try await Self.lifetimePurchase(client, admin: busy, app: app, user: "busy-\(u)", id: "\(n)\(10_000 + u)")
          }
        }
      }
      try await group.waitForAll()
    }
    // The backlog is under way.
    #expect(await slow.waitUntil(timeout: 20) { !$0.isEmpty })

    // Tenant B: one webhook, 4 events, sent after A's.
    let quiet = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "quiet")
    let quietApp = try await Self.app(client, admin: quiet, bundleID: "com.example.quiet")
    let secret = try await Self.createWebhook(
      client, admin: quiet, app: quietApp, url: "http://127.0.0.1:\(receiver.port)/quiet"
    ).get()
    try receiver.send("SECRET \(secret)")
    let sent = Date()
    for u in 0..<4 {
      try await Self.lifetimePurchase(client, admin: quiet, app: quietApp, user: "quiet-\(u)", id: "\(20_000 + u)")
    }
    let arrived = await receiver.waitUntil(timeout: 10) { records in
      Set(records.filter { $0.valid && $0.status == 200 }.map(\.userID)).count == 4
    }
    let took = Date().timeIntervalSince(sent)
    print("tenant B's 4 events arrived in \(String(format: "%.2f", took)) s; A's deliveries made meanwhile: \(slow.records.count) of 3,200")
    #expect(arrived, "tenant B's 4 events did not arrive within 10 s of A's backlog")
    // A's backlog was still there: most of its 3,200 deliveries not made yet.
    #expect(slow.records.count < 2_000, "\(slow.records.count) of A's deliveries made in \(took) s")
    let text = try await Self.metrics(daemon)
    #expect(text.contains("substatus_webhook_max_in_flight_per_tenant 32"))
    #expect(text.contains("substatus_webhook_deliveries_deferred_total"))
  }

  // MARK: Attack 5: erasure and the live stream

  @Test func anErasedUsersEventsNeverReachANewWatchWhileAnotherWatchIsOpen() async throws {
    let daemon = try await RunningDaemon(extraArguments: Self.daemonArguments)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let admin = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "erasure")
    let app = try await Self.app(client, admin: admin, bundleID: "com.example.erasure")
    var readKeyRequest = Substatus_V1_CreateApiKeyRequest()
    readKeyRequest.role = .read
    readKeyRequest.description = "watcher"
    let reader = try await client.call(Substatus_V1_AdminService.createApiKey, readKeyRequest, key: admin).key

    var start = Substatus_V1_ListEventsRequest()
    start.appID = app
    let startCursor = try await client.call(Substatus_V1_EventService.listEvents, start, key: reader).nextCursor
    try await Self.lifetimePurchase(client, admin: admin, app: app, user: "alice", id: "5001")
    try await Self.lifetimePurchase(client, admin: admin, app: app, user: "bob", id: "5002")

    func watch() async throws -> ServerStreamingResponse<Substatus_V1_WatchEventsResponse>.AsyncIterator {
      var request = Substatus_V1_WatchEventsRequest()
      request.appID = app
      request.sinceCursor = startCursor
      var metadata: Metadata = [:]
      metadata.addString("Bearer \(reader)", forKey: "authorization")
      return try await client.client.serverStreaming(
        method: Substatus_V1_EventService.watchEvents.path, request: request,
        response: Substatus_V1_WatchEventsResponse.self, metadata: metadata
      ).makeAsyncIterator()
    }
    // A watch from the start reads both users' events (the app's live window now holds them).
    var first = try await watch()
    var seen: [String] = []
    while seen.count < 2, let message = try await first.next() { seen.append(message.event?.userID ?? "") }
    #expect(Set(seen) == ["alice", "bob"])

    var erase = Substatus_V1_DeleteUserRequest()
    erase.appID = app
    erase.userID = "alice"
    _ = try await client.call(Substatus_V1_AdminService.deleteUser, erase, key: admin)

    // With the first watch still open, a new watch from the start: bob's event, then the next
    // event written, never alice's.
    var second = try await watch()
    try await Self.lifetimePurchase(client, admin: admin, app: app, user: "carol", id: "5003")
    var replayed: [String] = []
    while !replayed.contains("carol"), let message = try await second.next() {
      replayed.append(message.event?.userID ?? "")
    }
    #expect(replayed == ["bob", "carol"])
    // The first watch goes on with the new event.
    #expect(try await first.next()?.event?.userID == "carol")
  }

  // MARK: Attack 8: cursors tell nothing beyond their app

  @Test func cursorsAreOpaquePerAppAndAnotherAppsCursorIsRefused() async throws {
    let daemon = try await RunningDaemon(extraArguments: Self.daemonArguments)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let busy = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "busy")
    let busyApp = try await Self.app(client, admin: busy, bundleID: "com.example.cursor.busy")
    let quiet = try await Self.tenant(client, operatorKey: daemon.operatorKey, name: "quiet")
    let quietApp = try await Self.app(client, admin: quiet, bundleID: "com.example.cursor.quiet")

    func list(_ key: String, _ app: String, since: String = "") async throws -> Substatus_V1_ListEventsResponse {
      var request = Substatus_V1_ListEventsRequest()
      request.appID = app
      request.sinceCursor = since
      request.limit = 1000
      return try await client.call(Substatus_V1_EventService.listEvents, request, key: key)
    }
    // The quiet tenant's first event, then the busy tenant's volume, then the quiet one's second.
    try await Self.lifetimePurchase(client, admin: quiet, app: quietApp, user: "q1", id: "7001")
    let before = try #require(try await list(quiet, quietApp).events.last?.cursor)
    for u in 0..<120 {
      try await Self.lifetimePurchase(client, admin: busy, app: busyApp, user: "b\(u)", id: "\(8000 + u)")
    }
    try await Self.lifetimePurchase(client, admin: quiet, app: quietApp, user: "q2", id: "7002")
    let quietEvents = try await list(quiet, quietApp).events
    let busyEvents = try await list(busy, busyApp).events
    #expect(quietEvents.count == 2 && busyEvents.count == 120)
    // Every cursor has one length, whatever position it stands for: 22 base64url characters.
    let cursors = quietEvents.map(\.cursor) + busyEvents.map(\.cursor)
    #expect(Set(cursors.map(\.utf8.count)) == [22], "\(Set(cursors.map(\.utf8.count)))")
    #expect(quietEvents.first?.cursor == before, "the same position, the same cursor")
    // A cursor continues in its own app, through the CLI too.
    #expect(try await list(quiet, quietApp, since: before).events.map(\.userID) == ["q2"])
    let listed = try await EventsEndToEndTests.cli(daemon, key: quiet, ["events", "list", quietApp, "--since", before])
    #expect(listed.contains("q2") && !listed.contains("q1"))
    // Another app's cursor (here, of another tenant, given by its own key) is refused.
    for (key, app, cursor) in [(quiet, quietApp, busyEvents[60].cursor), (busy, busyApp, before)] {
      do {
        _ = try await list(key, app, since: cursor)
        Issue.record("another app's cursor was accepted")
      } catch let error as RPCError {
        #expect(error.code == .invalidArgument)
        #expect(error.message.contains("since_cursor"), "\(error.message)")
      }
    }
    var watch = Substatus_V1_WatchEventsRequest()
    watch.appID = quietApp
    watch.sinceCursor = busyEvents[0].cursor
    var metadata: Metadata = [:]
    metadata.addString("Bearer \(quiet)", forKey: "authorization")
    // The answer, or nil when the stream stays open (the cursor taken) for 5 s.
    let code = await withTaskGroup(of: RPCError.Code?.self) { group in
      group.addTask { [watch, metadata] in
        do {
          var stream = try await client.client.serverStreaming(
            method: Substatus_V1_EventService.watchEvents.path, request: watch,
            response: Substatus_V1_WatchEventsResponse.self, metadata: metadata
          ).makeAsyncIterator()
          _ = try await stream.next()
          return nil
        } catch let error as RPCError {
          return error.code
        } catch {
          return nil
        }
      }
      group.addTask {
        try? await Task.sleep(for: .seconds(5))
        return nil
      }
      let first = await group.next() ?? nil
      group.cancelAll()
      return first
    }
    #expect(code == .invalidArgument, "WatchEvents took another app's cursor")
  }
}
