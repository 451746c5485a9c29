import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The kept notifications part of the Store contract (docs/architecture.md rule 25).
extension StoreContract {
  /// Kept notifications: each app and notificationUUID once, in the order kept, read back whole
  /// and paged; the events in the same commit, each id once (a retry appends what the first
  /// attempt did not); unknown app and bad input refused; the users of an Apple Account.
  static func keptNotifications(_ store: any Store) async throws {
    let first = KeptNotification(
      appId: "a1", environment: .production, notificationUUID: "0a1b2c3d-0000-4000-8000-000000000001",
      notificationType: "FUTURE_TYPE", subtype: "SOMETHING_NEW", signedDateMs: 1_700_000_000_000,
      receivedMs: 1_700_000_000_100, signedPayload: "eyJhbGciOiJFUzI1NiJ9.eyJ9.c2ln")
    await expectStoreError(.notFound) { _ = try await store.keepNotification(first, events: []) }
    try await Fixture.seed(store)
    let event = EventLogContract.event("n1", type: .appleNotification)
    let kept = try await store.keepNotification(first, events: [event])
    #expect(kept.isNew)
    #expect(kept.eventsAppended.map(\.event) == [event])
    // The same notificationUUID again (Apple's retry): not kept twice, its events not logged twice;
    // a new event id with it is logged (what a failed first attempt did not write).
    let again = try await store.keepNotification(first, events: [event, EventLogContract.event("n2", user: "")])
    #expect(!again.isNew)
    #expect(again.eventsAppended.map(\.event.eventId) == ["n2"])
    // Another notification (no subtype, no signed date), and one in the sandbox.
    let second = KeptNotification(
      appId: "a1", environment: .production, notificationUUID: "0a1b2c3d-0000-4000-8000-000000000002",
      notificationType: "RESCIND_CONSENT", receivedMs: 1_700_000_000_200, signedPayload: "x.y.z")
    let sandbox = KeptNotification(
      appId: "a1", environment: .sandbox, notificationUUID: "0a1b2c3d-0000-4000-8000-000000000003",
      notificationType: "EXTERNAL_PURCHASE_TOKEN", subtype: "CREATED", receivedMs: 1_700_000_000_300,
      signedPayload: "p.q.r")
    #expect(try await store.keepNotification(second, events: []).isNew)
    #expect(try await store.keepNotification(sandbox, events: []).isNew)
    let all = try await store.keptNotifications(appId: "a1", afterSequence: 0, limit: 10)
    #expect(all.map(\.notificationUUID) == [first, second, sandbox].map(\.notificationUUID))
    func withoutSequence(_ n: KeptNotification) -> KeptNotification {
      var n = n
      n.sequence = 0
      return n
    }
    #expect(all.map(withoutSequence) == [first, second, sandbox])
    #expect(all[0].sequence < all[1].sequence && all[1].sequence < all[2].sequence)
    let page = try await store.keptNotifications(appId: "a1", afterSequence: all[0].sequence, limit: 1)
    #expect(page.map(\.notificationUUID) == [second.notificationUUID])
    #expect(try await store.keptNotifications(appId: "other", afterSequence: 0, limit: 10).isEmpty)
    // The events are in the log like any other.
    let logged = try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 10)
    #expect(logged.map(\.event.eventId) == ["n1", "n2"])
    // Bad input.
    var bad = first
    bad.notificationUUID = ""
    await expectStoreError(.invalidArgument) { _ = try await store.keepNotification(bad, events: []) }
    bad = first
    bad.notificationType = ""
    await expectStoreError(.invalidArgument) { _ = try await store.keepNotification(bad, events: []) }
    // Kept notifications name no user: erasing users leaves them.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
    #expect(try await store.keptNotifications(appId: "a1", afterSequence: 0, limit: 10).count == 3)

    // The users of an Apple Account, per app and environment, in id order.
    let accounts: any AppAccountStore = store
    for (user, account, environment) in [
      ("u2", "704289572311810221", Environment.production), ("u1", "704289572311810221", .production),
      ("u3", "704289572311810222", .production), ("u4", "704289572311810221", .sandbox),
    ] {
      try await accounts.saveAppAccount(
        AppAccountLink(user: Fixture.user(user, environment: environment), appTransactionId: account, linkedMs: 1))
    }
    #expect(try await store.users(appId: "a1", environment: .production, appTransactionId: "704289572311810221") == ["u1", "u2"])
    #expect(try await store.users(appId: "a1", environment: .sandbox, appTransactionId: "704289572311810221") == ["u4"])
    #expect(try await store.users(appId: "a1", environment: .production, appTransactionId: "1").isEmpty)
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
    #expect(try await store.users(appId: "a1", environment: .production, appTransactionId: "704289572311810221") == ["u2"])
  }
}
