import Foundation
import RPCCore
import SubscriptionStorage
import SubstatusWire
import Synchronization
import Testing
@testable import SubstatusService

/// EventService over the in-memory store: the log read in pages and as a stream, webhooks
/// managed, the precise errors (docs/architecture.md "Events").
@Suite struct EventServiceTests {
  /// Imports purchases: alice buys `lifetime`, bob a `coins.100` and a `premium.monthly` period.
  static func importPurchases(_ h: Harness, admin: String, app: String) async throws {
    func purchase(_ user: String, _ id: String, _ product: String, expires: Int64 = 0) async throws {
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = app
      request.userID = user
      var t = Substatus_V1_Transaction()
      t.transactionID = id
      t.originalTransactionID = id
      t.productID = product
      t.purchaseDateMs = 1_711_000_000_000
      t.expiresDateMs = expires
      request.transactions = [t]
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
    }
    try await purchase("alice", "1000", "lifetime")
    try await purchase("bob", "2000", "coins.100")
    try await purchase("bob", "3000", "premium.monthly", expires: 1_711_000_000_000 + 30 * 86_400_000)
  }

  static func list(
    _ h: Harness, _ key: String, _ app: String, build: (inout Substatus_V1_ListEventsRequest) -> Void = { _ in }
  ) async throws -> Substatus_V1_ListEventsResponse {
    var request = Substatus_V1_ListEventsRequest()
    request.appID = app
    build(&request)
    return try await h.call(Substatus_V1_EventService.listEvents, request, key: key)
  }

  @Test func listEventsPagesTheLogInOrderWithFilters() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      try await Self.importPurchases(h, admin: admin, app: app)
      let all = try await Self.list(h, admin, app).events
      #expect(all.contains { $0.userID == "alice" && $0.type == .oneTimePurchased && $0.productID == "lifetime" })
      #expect(all.contains { $0.userID == "bob" && $0.type == .subscriptionStarted && $0.productID == "premium.monthly" })
      #expect(all.allSatisfy { $0.appID == app && !$0.eventID.isEmpty && !$0.cursor.isEmpty })

      // Filters: a user, types.
      let alice = try await Self.list(h, admin, app) { $0.userID = "alice" }.events
      #expect(!alice.isEmpty && alice.allSatisfy { $0.userID == "alice" })
      let oneTime = try await Self.list(h, admin, app) { $0.types = [.oneTimePurchased] }.events
      #expect(Set(oneTime.map(\.productID)) == ["lifetime", "coins.100"])

      // Pages of one, by cursor, give the same events in the same order; the end is empty.
      var paged: [Substatus_V1_Event] = []
      var cursor = ""
      for _ in 0...all.count {
        let page = try await Self.list(h, admin, app) {
          $0.sinceCursor = cursor
          $0.limit = 1
        }
        paged += page.events
        #expect(!page.nextCursor.isEmpty)
        cursor = page.nextCursor
        if page.events.isEmpty { break }
      }
      #expect(paged.map(\.eventID) == all.map(\.eventID))
      // Re-importing the same data appends nothing.
      try await Self.importPurchases(h, admin: admin, app: app)
      #expect(try await Self.list(h, admin, app) { $0.sinceCursor = cursor }.events.isEmpty)

      // Precise errors.
      let badCursor = await expectStatus(.invalidArgument) {
        _ = try await Self.list(h, admin, app) { $0.sinceCursor = "not-a-cursor" }
      }
      #expect(badCursor?.message.contains("since_cursor") == true)
      let badLimit = await expectStatus(.invalidArgument) { _ = try await Self.list(h, admin, app) { $0.limit = 1001 } }
      #expect(badLimit?.message.contains("limit") == true)
      let badType = await expectStatus(.invalidArgument) {
        _ = try await Self.list(h, admin, app) { $0.types = [.unspecified] }
      }
      #expect(badType?.message.contains("types[0]") == true)
    }
  }

  @Test func watchEventsStreamsFromTheCursorThroughTheLogThenLive() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      try await Self.importPurchases(h, admin: admin, app: app)
      let logged = try await Self.list(h, admin, app).events
      var request = Substatus_V1_WatchEventsRequest()
      request.appID = app
      request.sinceCursor = logged[0].cursor
      var metadata: Metadata = [:]
      metadata.addString("Bearer \(admin)", forKey: "authorization")
      let stream = try await h.client.serverStreaming(
        method: Substatus_V1_EventService.watchEvents.path, request: request,
        response: Substatus_V1_WatchEventsResponse.self, metadata: metadata)
      var iterator = stream.makeAsyncIterator()
      // The log after the cursor first...
      for expected in logged.dropFirst() {
        let got = try await iterator.next()
        #expect(got?.event?.eventID == expected.eventID)
      }
      #expect(h.service.eventMetrics.openWatchers == 1)
      // ...then what is written from now on.
      var more = Substatus_V1_ImportTransactionsRequest()
      more.appID = app
      more.userID = "carol"
      var t = Substatus_V1_Transaction()
      t.transactionID = "4000"
      t.originalTransactionID = "4000"
      t.productID = "lifetime"
      t.purchaseDateMs = 1_711_000_100_000
      more.transactions = [t]
      _ = try await h.call(Substatus_V1_IngestService.importTransactions, more, key: admin)
      let live = try await iterator.next()
      #expect(live?.event?.userID == "carol")
      #expect(live?.event?.type == .oneTimePurchased)
    }
  }

  @Test func theSchedulerAppendsAnExpiryByTimeAloneOnceAndWakesWatchers() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let now = h.world.clock.wallMs
      // A monthly period that ends in a day, auto-renew turned off: it lapses by time alone.
      try await EventTransitionSchedulerTests.importLapsing(h, admin, app, endsIn: 86_400_000)
      let scheduler = EventTransitionScheduler(service: h.service)
      let next = await scheduler.appendDue()
      #expect(next == now + 86_400_000, "the next transition is the period's end")
      #expect(try await Self.list(h, admin, app) { $0.types = [.expired] }.events.isEmpty)

      let seen = h.service.eventSignal.generation
      h.world.now.withLock { $0 += 2 * 86_400_000 }
      await scheduler.appendDue()
      #expect(h.service.eventSignal.generation > seen, "watchers and the dispatcher are woken")
      let expired = try await Self.list(h, admin, app) { $0.types = [.expired] }.events
      #expect(expired.count == 1)
      #expect(expired.first?.userID == "dana")
      #expect(expired.first?.occurredMs == now + 86_400_000, "Apple's time: the period's end")
      #expect(expired.first?.detectedMs == now + 2 * 86_400_000, "detected by the scheduler's run")
      // Again: nothing more (no transition is appended twice).
      await scheduler.appendDue()
      #expect(try await Self.list(h, admin, app) { $0.types = [.expired] }.events.count == 1)
    }
  }

  @Test func webhooksShowTheirSecretOnceAndRefusePrivateURLs() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      func create(_ url: String, _ types: [Substatus_V1_EventType] = []) async throws -> Substatus_V1_CreateWebhookResponse {
        var request = Substatus_V1_CreateWebhookRequest()
        request.appID = app
        request.url = url
        request.eventTypes = types
        return try await h.call(Substatus_V1_EventService.createWebhook, request, key: admin)
      }
      for url in ["http://127.0.0.1:9000/hook", "http://localhost/hook", "http://10.1.2.3/hook", "ftp://example.com/", ""] {
        let error = await expectStatus(.invalidArgument, url) { _ = try await create(url) }
        #expect(error?.message.contains("url") == true, "\(url): \(error?.message ?? "")")
      }
      let created = try await create("https://hooks.example.com/substatus", [.expired, .billingIssue])
      #expect(created.signingSecret.hasPrefix("whsec_") && created.signingSecret.count == 6 + 64)
      let webhook = try #require(created.webhook)
      #expect(webhook.url == "https://hooks.example.com/substatus")
      #expect(webhook.eventTypes == [.billingIssue, .expired])
      #expect(!webhook.secretFingerprint.isEmpty)

      var listRequest = Substatus_V1_ListWebhooksRequest()
      listRequest.appID = app
      let listed = try await h.call(Substatus_V1_EventService.listWebhooks, listRequest, key: admin)
      #expect(listed.webhooks == [webhook])
      #expect(!listed.serializedBytes().containsSubsequence(Array(created.signingSecret.utf8)))

      var deliveries = Substatus_V1_ListDeliveriesRequest()
      deliveries.appID = app
      deliveries.webhookID = webhook.webhookID
      #expect(try await h.call(Substatus_V1_EventService.listDeliveries, deliveries, key: admin).deliveries.isEmpty)

      var replay = Substatus_V1_ReplayEventsRequest()
      replay.appID = app
      replay.webhookID = webhook.webhookID
      _ = try await h.call(Substatus_V1_EventService.replayEvents, replay, key: admin)

      var delete = Substatus_V1_DeleteWebhookRequest()
      delete.appID = app
      delete.webhookID = webhook.webhookID
      _ = try await h.call(Substatus_V1_EventService.deleteWebhook, delete, key: admin)
      await expectStatus(.notFound) { _ = try await h.call(Substatus_V1_EventService.deleteWebhook, delete, key: admin) }
      #expect(try await h.call(Substatus_V1_EventService.listWebhooks, listRequest, key: admin).webhooks.isEmpty)

      // The audit log names the creation, the replay and the deletion, never the secret.
      let tenant = try await h.service.store.app(id: app).tenantId
      let audit = try await h.service.store.auditLog(tenantId: tenant, page: PageRequest(size: 1000)).items
      let mine = audit.filter { $0.resource.contains(webhook.webhookID) }
      #expect(Set(mine.map(\.action)) == ["CreateWebhook", "ReplayEvents", "DeleteWebhook"])
      let everything = audit.map { "\($0.action) \($0.resource) \($0.details)" }.joined(separator: "\n")
      #expect(!everything.contains(created.signingSecret))
      #expect(!everything.contains(String(created.signingSecret.dropFirst(6))))
    }
  }
}

extension Array where Element: Equatable {
  /// Whether `needle` occurs in the array as consecutive elements.
  func containsSubsequence(_ needle: [Element]) -> Bool {
    guard !needle.isEmpty, needle.count <= count else { return needle.isEmpty }
    return (0...(count - needle.count)).contains { self[$0..<($0 + needle.count)].elementsEqual(needle) }
  }
}
