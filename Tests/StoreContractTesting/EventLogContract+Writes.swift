import SubscriptionDomain
import SubscriptionStorage
import Testing

extension EventLogContract {
  /// A renewal info of `original` (product monthly) with auto-renewal `on`, signed at `signed`.
  static func renewal(_ original: String, on: Bool, signed: Int64) -> RenewalInfo {
    RenewalInfo(
      originalTransactionId: original, productId: "monthly", autoRenewProductId: "monthly",
      autoRenewStatus: on ? .on : .off, environment: .production, signedDate: signed)
  }

  /// App a1 with product monthly (auto-renewable, group g1).
  static func seedCatalog(_ store: Subject) async throws {
    try await Fixture.seed(store)
    try await store.putProducts(
      appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")])
  }

  /// writes of purchase data log their events in the same commit, each once, detected at the write's time
  static func writesLogEvents(_ store: Subject) async throws {
    try await seedCatalog(store)
    let user = Fixture.user("u1")
    let t1 = Fixture.transaction("t1", purchase: 1_000, expires: 100_000, signed: 1_000)
    let started = UserPurchases(user: user, transactions: [t1], renewalInfos: [renewal("t1", on: true, signed: 1_000)])
    let s1 = try await store.ingest([started], atMs: 2_000)
    let first = try await readAll(store)
    #expect(s1.eventsAppended == first.count)
    #expect(first.map(\.event.type) == [.subscriptionStarted])
    let event = try #require(first.first?.event)
    #expect(event.transactionId == "t1" && event.userId == "u1" && event.environment == .production)
    #expect(event.occurredMs == 1_000 && event.detectedMs == 2_000)
    #expect(event.stateBefore == .neverSubscribed && event.stateAfter == .active)
    #expect(event.subscriptionGroupId == "g1" && event.productId == "monthly")

    // The same data again, later: nothing new.
    #expect(try await store.ingest([started], atMs: 3_000).eventsAppended == 0)
    #expect(try await readAll(store) == first)

    // A notification logs what it changes, detected when it was received; applied once only.
    let off = UserPurchases(user: user, renewalInfos: [renewal("t1", on: false, signed: 50_000)])
    let applied = try await store.applyNotification(appId: "a1", notificationId: "n1", receivedMs: 50_500, updates: [off])
    #expect(applied?.eventsAppended == 1, "the notification's events are counted")
    let second = try await readAll(store, after: first.last!.sequence)
    #expect(second.map(\.event.type) == [.autoRenewDisabled])
    #expect(second.first?.event.detectedMs == 50_500)
    let last = try await store.lastEventSequence()
    #expect(try await store.applyNotification(appId: "a1", notificationId: "n1", receivedMs: 50_600, updates: [off]) == nil)

    // A write that fails stores nothing and logs nothing.
    let t2 = Fixture.transaction("t2", original: "t1", purchase: 100_000, expires: 200_000, signed: 100_000)
    await expectStoreError(.notFound) {
      try await store.ingest(
        [UserPurchases(user: user, transactions: [t2]), UserPurchases(user: Fixture.user("x", app: "zz"))],
        atMs: 100_500)
    }
    #expect(try await store.lastEventSequence() == last)

    // Events of several users in one batch, each user's own.
    let batch = try await store.ingest(
      [
        UserPurchases(user: Fixture.user("u2"), transactions: [Fixture.transaction("a", purchase: 10, expires: 900_000, signed: 10)]),
        UserPurchases(user: Fixture.user("u3"), transactions: [Fixture.transaction("b", purchase: 20, expires: 900_000, signed: 20)]),
      ], atMs: 30)
    #expect(batch.eventsAppended == 2)
    #expect(try await readAll(store, query: EventQuery(userId: "u3")).map(\.event.transactionId) == ["b"])
  }

  /// changes by time alone are logged by the transition scheduler once, when due, and the schedule follows
  static func transitionsByTime(_ store: Subject) async throws {
    try await seedCatalog(store)
    #expect(try await store.nextTransitionDueMs() == nil)
    #expect(try await store.appendDueTransitionEvents(atMs: .max, limit: 10).isEmpty)
    // Two users whose periods end at 100,000 and 150,000 with auto-renewal off.
    for (id, expires) in [("u1", Int64(100_000)), ("u2", 150_000)] {
      let t = Fixture.transaction("t-\(id)", purchase: 1_000, expires: expires, signed: 1_000)
      _ = try await store.ingest(
        [UserPurchases(user: Fixture.user(id), transactions: [t], renewalInfos: [renewal("t-\(id)", on: false, signed: 1_000)])],
        atMs: 2_000)
    }
    #expect(try await store.nextTransitionDueMs() == 100_000)
    #expect(try await store.appendDueTransitionEvents(atMs: 99_999, limit: 10).isEmpty)

    let expired = try await store.appendDueTransitionEvents(atMs: 100_040, limit: 10)
    #expect(expired.map(\.event.type) == [.expired])
    let event = try #require(expired.first?.event)
    #expect(event.userId == "u1" && event.occurredMs == 100_000 && event.detectedMs == 100_040)
    #expect(event.stateBefore == .active && event.stateAfter == .expired)
    #expect(try await readAll(store, after: expired[0].sequence - 1) == expired)
    // Run again at the same or a later time: nothing doubled.
    #expect(try await store.appendDueTransitionEvents(atMs: 100_040, limit: 10).isEmpty)
    #expect(try await store.appendDueTransitionEvents(atMs: 120_000, limit: 10).isEmpty)
    #expect(try await store.nextTransitionDueMs() == 150_000)

    // A write for a user the scheduler has not reached yet logs the missed change itself, once.
    let late = try await store.ingest(
      [UserPurchases(user: Fixture.user("u2"), renewalInfos: [renewal("t-u2", on: false, signed: 160_000)])],
      atMs: 160_000)
    let lateEvents = try await readAll(store, query: EventQuery(userId: "u2", types: [.expired]))
    #expect(late.eventsAppended == lateEvents.count && lateEvents.count == 1)
    #expect(try await store.appendDueTransitionEvents(atMs: 170_000, limit: 10).isEmpty)
    #expect(try await store.nextTransitionDueMs() == nil)
  }

  /// the scheduler takes at most `limit` users per call, most overdue first, and resumes where it stopped
  static func transitionBatches(_ store: Subject) async throws {
    try await seedCatalog(store)
    for n in 0..<5 {
      let t = Fixture.transaction("t\(n)", purchase: 1_000, expires: 10_000 + Int64(n), signed: 1_000)
      _ = try await store.ingest(
        [UserPurchases(user: Fixture.user("u\(n)"), transactions: [t], renewalInfos: [renewal("t\(n)", on: false, signed: 1_000)])],
        atMs: 2_000)
    }
    var users: [String] = []
    for _ in 0..<3 {
      let batch = try await store.appendDueTransitionEvents(atMs: 20_000, limit: 2)
      #expect(batch.count <= 2)
      users += batch.map(\.event.userId)
    }
    #expect(users == ["u0", "u1", "u2", "u3", "u4"])
    #expect(try await store.appendDueTransitionEvents(atMs: 20_000, limit: 2).isEmpty)
  }

  /// erasing a user removes its schedule: the scheduler never comes back for it
  static func transitionErasure(_ store: Subject) async throws {
    try await seedCatalog(store)
    let t = Fixture.transaction("t1", purchase: 1_000, expires: 10_000, signed: 1_000)
    _ = try await store.ingest(
      [UserPurchases(user: Fixture.user("gone"), transactions: [t], renewalInfos: [renewal("t1", on: false, signed: 1_000)])],
      atMs: 2_000)
    #expect(try await store.nextTransitionDueMs() == 10_000)
    _ = try await store.deleteUsers(appId: "a1", userIds: ["gone"])
    #expect(try await store.nextTransitionDueMs() == nil)
    #expect(try await store.appendDueTransitionEvents(atMs: 20_000, limit: 10).isEmpty)
    #expect(try await readAll(store).isEmpty)
  }
}
