import SubstatusJSON
import Testing

@testable import SubscriptionDomain

/// Whole lifecycles as Apple's signed data tells them (fixtures under `Fixtures/events/`: each step
/// a write of decoded `JWSTransactionDecodedPayload`s / `JWSRenewalInfoDecodedPayload`s, or a
/// scheduler tick), and the exact events each step adds to the log.
@Suite("Event lifecycles")
struct EventLifecycleTests {
  @Test(
    "each step adds exactly the expected events, and the scheduler wakes when they are due",
    arguments: [
      "trial_conversion_billing_recovery.json", "voluntary_expiry.json", "upgrade.json", "downgrade_at_renewal.json",
      "refund_and_reversal.json", "family_sharing_revoke.json", "billing_retry_expired.json",
      "resubscribe_after_lapse.json", "one_time_and_non_renewing.json", "billing_retry_ended_by_apple.json",
      "late_renewal.json",
    ])
  func lifecycle(_ name: String) throws {
    let document = resolvingTimes(try JSONValue(parsing: Fixture.bytes("events/\(name)")))
    var model = EventLogModel()
    for (n, step) in (document["steps"]?.arrayValue ?? []).enumerated() {
      let added: [SubscriptionEvent]
      if let time = step["write"]?.int64Value {
        let transactions = try (step["transactions"]?.arrayValue ?? []).map {
          try Transaction(jwsTransactionPayload: $0, notificationType: step["notification"]?.stringValue)
        }
        let renewals = try (step["renewals"]?.arrayValue ?? []).map { try RenewalInfo(jwsRenewalInfoPayload: $0) }
        added = model.write(transactions, renewals, at: time)
      } else {
        let time = try #require(step["tick"]?.int64Value, "step \(n) is neither a write nor a tick")
        added = model.tick(at: time)
      }
      let expected = step["expect"]?.arrayValue ?? []
      #expect(
        added.map(\.type.rawValue) == expected.map { $0["type"]?.stringValue ?? "?" }, "\(name) step \(n)")
      for (event, want) in zip(added, expected) { check(event, against: want, "\(name) step \(n)") }
      if let next = step["next"] {
        #expect(model.nextTransitionMs == next.int64Value, "\(name) step \(n): next transition")
      }
    }
    // Replaying what the lifecycle left behind adds nothing new, and every id is unique.
    #expect(Set(model.log.map(\.eventId)).count == model.log.count)
    let again = derivation.events(
      subject: subject, before: model.history, after: model.history, catalog: model.catalog,
      throughMs: model.loggedThroughMs ?? 0, detectedMs: 0)
    #expect(again.isEmpty)
  }

  private func check(_ event: SubscriptionEvent, against want: JSONValue, _ context: String) {
    func expectField(_ key: String, _ actual: String?) {
      guard let value = want[key] else { return }
      let text: String? = value.isNull ? nil : (value.stringValue ?? value.int64Value.map { String($0) })
      #expect(actual == text, "\(context) \(event.type.rawValue).\(key)")
    }
    expectField("occurred", String(event.occurredMs))
    expectField("before", event.stateBefore?.rawValue)
    expectField("after", event.stateAfter?.rawValue)
    expectField("offer", event.offer?.rawValue)
    expectField("offerId", event.offerId)
    expectField("group", event.subscriptionGroupId)
    expectField("product", event.productId)
    expectField("transaction", event.transactionId)
    expectField("original", event.originalTransactionId)
    expectField("previousProduct", event.previousProductId)
    expectField("reason", event.expirationReason)
    expectField("price", event.priceMilliunits.map { String($0) })
    expectField("currency", event.currency)
    #expect(event.appId == subject.appId && event.userId == subject.userId && event.environment == .production)
    #expect(event.eventId.hasPrefix("evt_") && event.eventId.utf8.count == 36)
  }
}
