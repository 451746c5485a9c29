import SubscriptionDomain
import SubscriptionStorage
import Testing

/// Listing and pruning the kept notifications (docs/architecture.md rule 25).
extension StoreContract {
  /// Kept notifications listed by received time (then the order kept), filtered by type and a
  /// range of received times, paged after a position, per app only; pruned oldest first across
  /// apps in bounded batches, leaving the younger ones.
  static func keptNotificationRetention(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    func kept(_ app: String, _ n: Int, type: String, received: Int64) -> KeptNotification {
      KeptNotification(
        appId: app, environment: n % 2 == 0 ? .production : .sandbox,
        notificationUUID: "00000000-0000-4000-8000-\(String(repeating: "0", count: 12 - String(n).count))\(n)",
        notificationType: type, subtype: n == 3 ? "VOLUNTARY" : nil, signedDateMs: received - 10,
        receivedMs: received, signedPayload: "h.p\(n).s")
    }
    // Kept out of received order: 1 (t 300), 2 (t 100), 3 (t 200), 4 (t 200), 5 (t 400); a2's 6.
    let notifications = [
      kept("a1", 1, type: "DID_RENEW", received: 300), kept("a1", 2, type: "SUBSCRIBED", received: 100),
      kept("a1", 3, type: "DID_CHANGE_RENEWAL_STATUS", received: 200), kept("a1", 4, type: "DID_RENEW", received: 200),
      kept("a1", 5, type: "DID_RENEW", received: 400), kept("a2", 6, type: "DID_RENEW", received: 50),
    ]
    for n in notifications { _ = try await store.keepNotification(n, events: []) }
    func ids(_ list: [KeptNotification]) -> [String] { list.map { String($0.signedPayload.dropFirst(3).dropLast(2)) } }

    let all = try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1"))
    #expect(ids(all) == ["2", "3", "4", "1", "5"])
    // Read back whole (the sequence is the store's).
    var three = try #require(all.first { $0.notificationUUID == notifications[2].notificationUUID })
    three.sequence = 0
    #expect(three == notifications[2])
    // Filters: type, received range [from, before).
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1", notificationType: "DID_RENEW"))) == ["4", "1", "5"])
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1", receivedFromMs: 200, receivedBeforeMs: 400))) == ["3", "4", "1"])
    #expect(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1", notificationType: "REFUND")).isEmpty)
    // Pages: after the last one's position, same filters.
    var pages: [[String]] = []
    var after: KeptNotificationPosition?
    repeat {
      let page = try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1", after: after, limit: 2))
      pages.append(ids(page))
      after = page.last.map { KeptNotificationPosition(receivedMs: $0.receivedMs, sequence: $0.sequence) }
    } while after != nil && pages.count < 10
    #expect(pages == [["2", "3"], ["4", "1"], ["5"], []])
    // Another app's notifications are its own.
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a2"))) == ["6"])
    #expect(try await store.listKeptNotifications(KeptNotificationQuery(appId: "nope")).isEmpty)

    // Pruning: received before 250, oldest first, at most 2 per call, across apps.
    #expect(try await store.pruneKeptNotifications(receivedBeforeMs: 250, limit: 2) == 2)  // 6 (a2, t 50), 2 (t 100)
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a2"))).isEmpty)
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1"))) == ["3", "4", "1", "5"])
    #expect(try await store.pruneKeptNotifications(receivedBeforeMs: 250, limit: 2) == 2)  // 3, 4
    #expect(try await store.pruneKeptNotifications(receivedBeforeMs: 250, limit: 2) == 0)
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1"))) == ["1", "5"])
    // A pruned notification kept again (a late retry) is kept anew.
    #expect(try await store.keepNotification(notifications[1], events: []).isNew)
    #expect(ids(try await store.listKeptNotifications(KeptNotificationQuery(appId: "a1"))) == ["2", "1", "5"])
  }
}
