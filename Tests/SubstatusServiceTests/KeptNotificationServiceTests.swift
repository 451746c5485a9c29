import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire
import Testing

@testable import SubstatusService

/// Rule 25's kept notifications at the service: `AdminService.ListKeptNotifications` answers an
/// app's admin only (another tenant's admin gets NOT_FOUND, as if the app did not exist), pages
/// by opaque tokens with its filters, and validates its arguments; the pruner deletes by age on
/// the injected clock.
@Suite("Rule 25: kept notifications listed and pruned")
struct KeptNotificationServiceTests {
  static func keep(_ store: any Store, app: String, _ n: Int, type: String, receivedMs: Int64) async throws {
    _ = try await store.keepNotification(
      KeptNotification(
        appId: app, environment: .production, notificationUUID: "uuid-\(n)", notificationType: type,
        subtype: n == 2 ? "AUTO_RENEW_DISABLED" : nil, signedDateMs: receivedMs - 5, receivedMs: receivedMs,
        signedPayload: "header.payload-\(n).signature"), events: [])
  }

  @Test("the app's admin pages through its notifications with filters; another tenant's admin gets NOT_FOUND; bad arguments are INVALID_ARGUMENT")
  func pagingAndIsolation() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let (otherAdmin, otherApp) = try await h.makeTenantWithApp(name: "other", bundleID: "com.example.other")
      for n in 1...5 {
        try await Self.keep(h.service.store, app: app, n, type: n % 2 == 0 ? "DID_CHANGE_RENEWAL_STATUS" : "DID_RENEW", receivedMs: 1_000 * Int64(n))
      }
      try await Self.keep(h.service.store, app: otherApp, 9, type: "DID_RENEW", receivedMs: 1_500)

      func list(_ key: String, app: String, type: String = "", from: Int64 = 0, before: Int64 = 0, size: Int32 = 0, token: String = "")
        async throws -> Substatus_V1_ListKeptNotificationsResponse
      {
        var r = Substatus_V1_ListKeptNotificationsRequest()
        r.appID = app
        r.notificationType = type
        r.receivedFromMs = from
        r.receivedBeforeMs = before
        r.pageSize = size
        r.pageToken = token
        return try await h.call(Substatus_V1_AdminService.listKeptNotifications, r, key: key)
      }
      // Every page, in received order, with its payload and decoded fields.
      var seen: [String] = []
      var token = ""
      var pages = 0
      repeat {
        let page = try await list(admin, app: app, size: 2, token: token)
        seen += page.notifications.map(\.notificationUUID)
        token = page.nextPageToken
        pages += 1
      } while !token.isEmpty && pages < 10
      #expect(seen == ["uuid-1", "uuid-2", "uuid-3", "uuid-4", "uuid-5"])
      let second = try #require(try await list(admin, app: app, size: 2).notifications.last)
      #expect(second.notificationType == "DID_CHANGE_RENEWAL_STATUS" && second.subtype == "AUTO_RENEW_DISABLED")
      #expect(second.signedPayload == "header.payload-2.signature" && second.receivedMs == 2_000 && second.signedDateMs == 1_995)
      #expect(second.environment == .production)
      // Filters: type, received range.
      #expect(try await list(admin, app: app, type: "DID_RENEW").notifications.map(\.notificationUUID) == ["uuid-1", "uuid-3", "uuid-5"])
      #expect(try await list(admin, app: app, from: 2_000, before: 4_000).notifications.map(\.notificationUUID) == ["uuid-2", "uuid-3"])
      // The other tenant sees its own only, and not this app at all.
      #expect(try await list(otherAdmin, app: otherApp).notifications.map(\.notificationUUID) == ["uuid-9"])
      _ = await expectStatus(.notFound) { _ = try await list(otherAdmin, app: app) }
      _ = await expectStatus(.notFound) { _ = try await list(admin, app: otherApp) }
      // Bad arguments.
      let badToken = await expectStatus(.invalidArgument) { _ = try await list(admin, app: app, token: "nonsense") }
      #expect(badToken?.message.contains("page_token") == true)
      let badRange = await expectStatus(.invalidArgument) { _ = try await list(admin, app: app, from: 5_000, before: 4_000) }
      #expect(badRange?.message.contains("received_before_ms") == true)
      let badSize = await expectStatus(.invalidArgument) { _ = try await list(admin, app: app, size: -1) }
      #expect(badSize?.message.contains("page_size") == true)
    }
  }

  @Test("the pruner deletes the notifications received before the retention on the service clock, in batches")
  func pruner() async throws {
    let world = TestWorld()
    try await withService(world: world) { h in
      let (_, app) = try await h.makeTenantWithApp()
      let now = world.clock.wallMs
      let day: Int64 = 86_400_000
      for n in 1...5 {
        try await Self.keep(h.service.store, app: app, n, type: "DID_RENEW", receivedMs: now - Int64(6 - n) * day)
      }
      // Kept 2 days: those received 5, 4 and 3 days ago go, 2 at a time; 2 days and 1 day ago stay.
      let pruner = KeptNotificationPruner(
        store: h.service.store, clock: world.clock, log: world.log,
        configuration: .init(keepDays: 2, batchSize: 2))
      h.service.metrics.registry.register(pruner)
      #expect(await pruner.pruneOnce() == 3)
      let left = try await h.service.store.listKeptNotifications(KeptNotificationQuery(appId: app))
      #expect(left.map(\.notificationUUID) == ["uuid-4", "uuid-5"])
      #expect(await pruner.pruneOnce() == 0)
      // A day later the older of the two has aged out.
      world.now.withLock { $0 += day }
      #expect(await pruner.pruneOnce() == 1)
      let metrics = h.service.metrics.prometheusText().split(separator: "\n")
      #expect(metrics.contains("substatus_kept_notifications_pruned_total 4"))
    }
  }
}

