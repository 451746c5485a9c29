import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The refund-request part of the Store contract (docs/architecture.md rule 27).
extension StoreContract {
  /// Refund requests: recorded once per notification, claimed when due under a lease (a claim
  /// skips leased rows until the lease ends), rescheduled after a failure, closed with their events
  /// appended in the same commit; unknown app and bad input refused.
  static func consumptionRequests(_ store: any Store) async throws {
    let request = ConsumptionRequest(
      appId: "a1", notificationId: "v2:n-1", environment: .production, transactionId: "t1",
      originalTransactionId: "o1", requestedMs: 1_000, receivedMs: 2_000, reason: "UNINTENDED_PURCHASE")
    await expectStoreError(.notFound) { _ = try await store.recordConsumptionRequest(request) }
    try await Fixture.seed(store)
    #expect(try await store.nextConsumptionRequestDueMs() == nil)
    #expect(try await store.recordConsumptionRequest(request))
    // Apple's retry of the same notification records nothing more.
    var retried = request
    retried.receivedMs = 9_000
    #expect(try await store.recordConsumptionRequest(retried) == false)
    #expect(try await store.consumptionRequest(appId: "a1", notificationId: "v2:n-1") == request)
    #expect(request.nextAttemptMs == 2_000 && request.attempts == 0 && request.outcome == nil)
    let second = ConsumptionRequest(
      appId: "a1", notificationId: "v2:n-2", environment: .sandbox, transactionId: "t2", originalTransactionId: "o2",
      requestedMs: 1_500, receivedMs: 3_000)
    #expect(try await store.recordConsumptionRequest(second))
    #expect(try await store.nextConsumptionRequestDueMs() == 2_000)

    // Due at or before the time, oldest due first, limited; a claim leases them.
    #expect(try await store.claimDueConsumptionRequests(atMs: 1_999, limit: 10, leaseUntilMs: 5_000).isEmpty)
    let first = try await store.claimDueConsumptionRequests(atMs: 3_000, limit: 1, leaseUntilMs: 10_000)
    #expect(first == [request])
    let next = try await store.claimDueConsumptionRequests(atMs: 3_000, limit: 10, leaseUntilMs: 10_000)
    #expect(next.map(\.notificationId) == ["v2:n-2"])
    #expect(try await store.claimDueConsumptionRequests(atMs: 9_999, limit: 10, leaseUntilMs: 20_000).isEmpty)
    #expect(try await store.nextConsumptionRequestDueMs() == 10_000)

    // A failed attempt reschedules; a claim after the new time takes it again with its attempts.
    try await store.rescheduleConsumptionRequest(
      appId: "a1", notificationId: "v2:n-1", attempts: 1, nextAttemptMs: 12_000, detail: "unavailable: HTTP 503")
    let again = try await store.claimDueConsumptionRequests(atMs: 12_000, limit: 10, leaseUntilMs: 30_000)
    #expect(again.map(\.notificationId) == ["v2:n-2", "v2:n-1"])
    #expect(again.last?.attempts == 1 && again.last?.detail == "unavailable: HTTP 503")

    // Closing records the outcome and appends the events in the same commit, each id once.
    let event = SubscriptionEvent(
      eventId: "evt_consumption_1", appId: "a1", userId: "u1", environment: .production, type: .consumptionInfoSent,
      occurredMs: 12_500, detectedMs: 12_500, productId: "monthly", transactionId: "t1", originalTransactionId: "o1")
    var withBody = event
    withBody.consumptionBody = #"{"customerConsented":true}"#
    withBody.refundRequestReason = "UNINTENDED_PURCHASE"
    let appended = try await store.closeConsumptionRequest(
      appId: "a1", notificationId: "v2:n-1", attempts: 2, outcome: .sent, detail: nil, events: [withBody])
    #expect(appended.map(\.event) == [withBody])
    let logged = try await store.events(appId: "a1", query: EventQuery(userId: "u1"), afterSequence: 0, limit: 10)
    #expect(logged.map(\.event) == [withBody])
    let closed = try await store.consumptionRequest(appId: "a1", notificationId: "v2:n-1")
    #expect(closed?.outcome == .sent && closed?.attempts == 2 && closed?.nextAttemptMs == nil)
    // A closed request is neither claimed, rescheduled nor closed again, nor recorded again.
    await expectStoreError(.notFound) {
      _ = try await store.closeConsumptionRequest(
        appId: "a1", notificationId: "v2:n-1", attempts: 3, outcome: .failed, detail: "x", events: [])
    }
    await expectStoreError(.notFound) {
      try await store.rescheduleConsumptionRequest(
        appId: "a1", notificationId: "v2:n-1", attempts: 3, nextAttemptMs: 1, detail: "x")
    }
    #expect(try await store.recordConsumptionRequest(request) == false)
    var notSent = event
    notSent.eventId = "evt_consumption_2"
    notSent.environment = .sandbox
    notSent.type = .consumptionInfoNotSent
    notSent.consumptionDetail = "assigned"
    _ = try await store.closeConsumptionRequest(
      appId: "a1", notificationId: "v2:n-2", attempts: 0, outcome: .notSent, detail: "assigned", events: [notSent])
    #expect(try await store.nextConsumptionRequestDueMs() == nil)
    #expect(try await store.claimDueConsumptionRequests(atMs: .max, limit: 10, leaseUntilMs: .max).isEmpty)
    let sandbox = try await store.events(
      appId: "a1", query: EventQuery(types: [.consumptionInfoNotSent]), afterSequence: 0, limit: 10)
    #expect(sandbox.map(\.event) == [notSent])

    // Bad input.
    var bad = request
    bad.notificationId = ""
    await expectStoreError(.invalidArgument) { _ = try await store.recordConsumptionRequest(bad) }
    bad = request
    bad.transactionId = String(repeating: "1", count: 65)
    await expectStoreError(.invalidArgument) { _ = try await store.recordConsumptionRequest(bad) }
  }
}
