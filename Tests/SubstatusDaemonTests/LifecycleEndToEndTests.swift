import Foundation
import SubstatusJSON
import SubstatusWire
import Testing

/// Whole subscription lifecycles driven through the App Store simulator's V2 notifications, with
/// substatusd following the simulator's clock (``LifecycleRig``): the exact events a real webhook
/// receiver gets (signed, in order), the same from `WatchEvents` and `ListEvents`, and the trends
/// they add up to. Each expected sequence is Apple's documented meaning of the lifecycle
/// (`shared/reference/apple-domain.md`); instants are Apple's, read from the simulator's signed
/// transactions.
@Suite(.serialized) struct LifecycleEndToEndTests {
  static let day = LifecycleRig.day

  /// Checks that the receiver got exactly `expected` for `user` (after waiting for that many), that
  /// the log says the same with the same ids, that every request was signed and that
  /// `WatchEvents` from the start of the log yields the whole log in order.
  static func expectSequence(
    _ rig: LifecycleRig, user: String, _ expected: [String], sourceLocation: SourceLocation = #_sourceLocation
  ) async throws {
    if !(await rig.waitForReceived(expected.count, user: user)) {
      let deliveries = try await rig.deliveries().map { "\($0.event?.type.protoName ?? "") \($0.state) \($0.attempts.map(\.httpStatus)) next \($0.nextAttemptMs)" }
      Issue.record("not delivered: \(deliveries); receiver: \(rig.receiver.records.map { "\($0.type) \($0.status)" })",
        sourceLocation: sourceLocation)
    }
    let received = rig.received(user: user)
    #expect(received.map(\.line) == expected, sourceLocation: sourceLocation)
    let logged = try await rig.log(user: user)
    #expect(logged.map(\.line) == expected, sourceLocation: sourceLocation)
    #expect(received.map(\.eventID) == logged.map(\.eventID), sourceLocation: sourceLocation)
    #expect(rig.receiver.records.allSatisfy { $0.valid && $0.status == 200 && $0.eventID == $0.bodyEventID },
      sourceLocation: sourceLocation)
    // Delivery is at least once: a repeat of an id already accepted is allowed (the receiver
    // deduplicates), the sequence of first acceptances above is exact.
    let whole = try await rig.log()
    let watched = try await rig.watch(count: whole.count)
    #expect(watched.map(\.eventID) == whole.map(\.eventID), sourceLocation: sourceLocation)
    #expect(watched.map(\.line) == whole.map(\.line), sourceLocation: sourceLocation)
  }

  /// Apple's instant of a transaction field (`purchaseDate`, `expiresDate`, ...), relative to the start.
  static func at(_ transaction: JSONValue?, _ field: String) throws -> Int64 {
    try #require(transaction?[field]?.int64Value) - LifecycleRig.start
  }

  /// Free trial → conversion → a renewal → billing issue with a grace period → grace ends, billing
  /// retry → the payment method is fixed (BILLING_RECOVERY), a new period starts at recovery.
  @Test func trialConversionRenewalBillingIssueGraceAndRecovery() async throws {
    let rig = try await LifecycleRig(graceDays: 3)
    defer { rig.stop() }
    try await rig.addUser("trialist")
    try await rig.act("trialist", "purchase", ["product_id": "pro.monthly", "offer": ["type": "introductory"]])
    let user = try await rig.substatusUser(of: "trialist")
    try await rig.advance(days: 7)  // the trial ends; Apple renews at the regular price
    var apple = try await rig.transactions(of: "trialist")
    try await rig.setClock(LifecycleRig.start + (try Self.at(apple.last, "expiresDate")))  // a paid renewal
    _ = try await rig.sim.post("/control/users/trialist/billing-failure", [:])
    apple = try await rig.transactions(of: "trialist")
    let lapse = try Self.at(apple.last, "expiresDate")
    try await rig.setClock(LifecycleRig.start + lapse)  // DID_FAIL_TO_RENEW (GRACE_PERIOD)
    try await rig.setClock(LifecycleRig.start + lapse + 3 * Self.day)  // GRACE_PERIOD_EXPIRED
    try await rig.advance(days: 2)
    _ = try await rig.sim.post("/control/users/trialist/billing-recover", [:])  // DID_RENEW (BILLING_RECOVERY)
    try await rig.sim.drain()
    apple = try await rig.transactions(of: "trialist")
    try #require(apple.count == 4, "\(apple)")
    #expect(try Self.at(apple[1], "purchaseDate") == 7 * Self.day)
    #expect(try Self.at(apple[3], "purchaseDate") == lapse + 5 * Self.day, "after the grace period: a new period from recovery")

    try await Self.expectSequence(rig, user: user, [
      "SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer FREE_TRIAL 0 USD",
      "TRIAL_CONVERTED at +\(7 * Self.day) pro.monthly ACTIVE->ACTIVE offer NONE 9990 USD",
      "RENEWED at +\(try Self.at(apple[2], "purchaseDate")) pro.monthly ACTIVE->ACTIVE offer NONE 9990 USD",
      "BILLING_ISSUE at +\(lapse) pro.monthly ACTIVE->GRACE_PERIOD",
      "GRACE_PERIOD_EXPIRED at +\(lapse + 3 * Self.day) pro.monthly GRACE_PERIOD->BILLING_RETRY",
      "BILLING_RECOVERED at +\(lapse + 5 * Self.day) pro.monthly BILLING_RETRY->ACTIVE offer NONE 9990 USD",
    ])

    let days = (lapse + 6 * Self.day) / Self.day
    let trends = try await rig.trends(days: days)
    try #require(trends.count == Int(days))
    func sum(_ value: (Substatus_V1_TrendBucket) -> Int64) -> Int64 { trends.map(value).reduce(0, +) }
    #expect(trends[0].trialsStarted == 1 && trends[0].activeTrials == 1)
    #expect(trends[7].trialsConverted == 1 && trends[7].trialConversionRate == 1)
    #expect(sum(\.renewals) == 1)
    #expect(trends[Int(lapse / Self.day)].billingIssues == 1)
    #expect(trends[Int((lapse + 5 * Self.day) / Self.day)].billingRecoveries == 1)
    #expect(sum(\.billingIssues) == 1 && sum(\.billingRecoveries) == 1 && sum(\.churned) == 0)
    let revenue: [Substatus_V1_CurrencyAmount] = trends.flatMap(\.revenue)
    #expect(revenue.filter { $0.currency == "USD" }.map(\.amountMilliunits).reduce(Int64(0), +) == 3 * 9990)
    #expect(trends.last?.activeSubscribers == 1)
  }

  /// An upgrade to a higher level takes effect at once (the old transaction is marked upgraded and
  /// revoked, which is no refund), and the new product renews.
  @Test func upgradeThenRenewalOfTheNewProduct() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try await rig.addUser("upgrader")
    try await rig.act("upgrader", "purchase", ["product_id": "pro.monthly"])
    let user = try await rig.substatusUser(of: "upgrader")
    try await rig.advance(days: 10)
    try await rig.act("upgrader", "change-product", ["product_id": "pro.plus.monthly"])  // DID_CHANGE_RENEWAL_PREF (UPGRADE)
    var apple = try await rig.transactions(of: "upgrader")
    try await rig.setClock(LifecycleRig.start + (try Self.at(apple.last, "expiresDate")))  // DID_RENEW
    apple = try await rig.transactions(of: "upgrader")
    try #require(apple.count == 3, "\(apple)")

    try await Self.expectSequence(rig, user: user, [
      "SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD",
      "PRODUCT_CHANGED at +\(10 * Self.day) pro.plus.monthly ACTIVE->ACTIVE offer NONE 14990 USD from pro.monthly",
      "RENEWED at +\(try Self.at(apple[2], "purchaseDate")) pro.plus.monthly ACTIVE->ACTIVE offer NONE 14990 USD",
    ])
    let trends = try await rig.trends(days: 45)
    #expect(trends[0].newPaidSubscriptions == 1)
    #expect(trends.map(\.refunds).reduce(0, +) == 0, "an upgrade is not a refund")
    #expect(trends.map(\.churned).reduce(0, +) == 0)
    #expect(trends.last?.activeSubscribers == 1)
  }

  /// Apple refunds the current period: access ends at the revocation; the period's end later
  /// changes nothing (no EXPIRED after a refund).
  @Test func refund() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try await rig.addUser("refunder")
    try await rig.act("refunder", "purchase", ["product_id": "pro.monthly"])
    let user = try await rig.substatusUser(of: "refunder")
    try await rig.advance(days: 2)
    try await rig.act("refunder", "refund")  // REFUND
    try await rig.advance(days: 40)

    try await Self.expectSequence(rig, user: user, [
      "SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD",
      "REFUNDED at +\(2 * Self.day) pro.monthly ACTIVE->REVOKED 9990 USD",  // the refunded transaction's price
    ])
    let trends = try await rig.trends(days: 42)
    #expect(trends[2].refunds == 1)
    #expect(trends[2].refundedRevenue.map(\.amountMilliunits) == [9990])
    #expect(trends[2].activeSubscribers == 0)
    #expect(trends.map(\.churned).reduce(0, +) == 0)
  }

  /// The organizer stops sharing: the family member's access is revoked (REVOKE); the organizer's
  /// subscription goes on.
  @Test func familySharingRevoked() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try await rig.addUser("organizer")
    try await rig.addUser("member")
    _ = try await rig.sim.post("/control/users/organizer/family/members", ["user_id": "member"])
    try await rig.act("organizer", "purchase", ["product_id": "pro.monthly"])
    let organizer = try await rig.substatusUser(of: "organizer")
    let member = try await rig.substatusUser(of: "member")
    #expect(organizer != member)
    try await rig.advance(days: 5)
    try await rig.act("organizer", "stop-family-sharing")  // REVOKE to the member

    try await Self.expectSequence(rig, user: member, [
      // Apple's family-shared transaction carries the product's price (the member paid nothing).
      "SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD",
      "FAMILY_ACCESS_REVOKED at +\(5 * Self.day) pro.monthly ACTIVE->REVOKED 9990 USD",
    ])
    try await Self.expectSequence(rig, user: organizer, [
      "SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD"
    ])
    // The events tell whose purchase it is (Apple's inAppOwnershipType), the webhook's JSON too.
    #expect(try await rig.log(user: member).map(\.ownership) == [.familyShared, .familyShared])
    #expect(try await rig.log(user: organizer).map(\.ownership) == [.purchased])
    #expect(rig.received(user: member).map(\.ownership) == [.familyShared, .familyShared])
    let trends = try await rig.trends(days: 6)
    #expect(trends[0].activeSubscribers == 2)
    #expect(trends[5].activeSubscribers == 1)
    #expect(trends.map(\.refunds).reduce(0, +) == 0, "a revoked family share is no refund")
    #expect(trends[5].mrr.map(\.amountMilliunits) == [9990], "\(trends[5].mrr)")
    // One payment: the organizer's. Apple's SUBSCRIBED to a member is "first access via Family
    // Sharing", not a purchase: no revenue, no new paid subscription, no MRR.
    #expect(trends[0].revenue.map(\.amountMilliunits) == [9990], "\(trends[0].revenue)")
    #expect(trends[0].newPaidSubscriptions == 1)
    #expect(trends[0].mrr.map(\.amountMilliunits) == [9990], "\(trends[0].mrr)")
  }

  /// Auto-renew turned off, then the period ends: the EXPIRED comes from time alone (the
  /// simulator's EXPIRED notification is dropped), detected by the transition scheduler at most
  /// 60 s (of the followed clock) after the period's end.
  @Test func voluntaryExpiryByTimeAlone() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try await rig.addUser("leaver")
    try await rig.act("leaver", "purchase", ["product_id": "pro.monthly"])
    let user = try await rig.substatusUser(of: "leaver")
    try await rig.advance(days: 1)
    try await rig.act("leaver", "cancel-auto-renew")  // DID_CHANGE_RENEWAL_STATUS (AUTO_RENEW_DISABLED)
    _ = try await rig.sim.post("/control/notifications/drop", ["user_id": "leaver", "notification_type": "EXPIRED"])
    let expiry = try Self.at(try await rig.transactions(of: "leaver").last, "expiresDate")
    try await rig.setClock(LifecycleRig.start + expiry - 1)
    // Nothing yet: one millisecond before the end the subscription is active.
    #expect(await rig.waitForReceived(2, user: user))
    #expect(try await rig.log(user: user).count == 2)
    try await rig.setClock(LifecycleRig.start + expiry)

    try await Self.expectSequence(rig, user: user, [
      "SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD",
      "AUTO_RENEW_DISABLED at +\(Self.day) pro.monthly ACTIVE->ACTIVE",
      "EXPIRED at +\(expiry) pro.monthly ACTIVE->EXPIRED reason voluntary",
    ])
    let expired = try #require(try await rig.log(user: user).last)
    #expect(expired.detectedMs >= expired.occurredMs && expired.detectedMs - expired.occurredMs <= 60_000)
    let notifications = try await rig.sim.get("/control/notifications?user_id=leaver")["notifications"]?.arrayValue ?? []
    #expect(notifications.contains { $0["notification_type"]?.stringValue == "EXPIRED" && $0["state"]?.stringValue == "dropped" },
      "the EXPIRED notification never reached substatusd: \(notifications)")
    let trends = try await rig.trends(days: expiry / Self.day + 1)
    #expect(trends.last?.churned == 1)
    #expect(trends.last?.activeSubscribers == 0)
  }
}
