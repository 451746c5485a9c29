import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Commitment events (rule 22, docs/architecture.md "Events"): a one-year subscription on Apple's
/// monthly plan with a 12-month commitment, run by the App Store simulator for two commitments
/// against a real substatusd on SQLite and on PostgreSQL; the log read with the `substatus` CLI.
@Suite(.serialized) struct CommitmentEventsEndToEndTests {
  @Test(arguments: TestStore.userLevel) func aCommitmentStartsRenewsIntoANewOneAndEnds(store: TestStore) async throws {
    let rig = try await LifecycleRig(store: store)
    defer { rig.stop() }
    var patch = URLRequest(url: try #require(URL(string: "http://\(rig.sim.address)/control/apps/\(LifecycleRig.bundleID)")))
    patch.httpMethod = "PATCH"
    patch.httpBody = try JSONSerialization.data(withJSONObject: [
      "products": [
        [
          "product_id": "pro.yearly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1Y",
          "level": 1, "price": 99.99, "currency": "USD", "commitment_plan": ["price": 8.99],
        ]
      ]
    ])
    let (_, patched) = try await URLSession.shared.data(for: patch)
    try #require((patched as? HTTPURLResponse)?.statusCode == 200)
    try await rig.addUser("cy")
    try await rig.act("cy", "purchase", ["product_id": "pro.yearly", "billing_plan": "MONTHLY"])
    let user = try await rig.substatusUser(of: "cy")
    func log() async throws -> [Substatus_V1_Event] {
      try await NotificationsKeptEndToEndTests.events(
        rig, types: "SUBSCRIPTION_STARTED,RENEWED,EXPIRED,COMMITMENT_STARTED,COMMITMENT_RENEWED,COMMITMENT_ENDED",
        user: user)
    }
    let started = try await log()
    #expect(started.map(\.type) == [.subscriptionStarted, .commitmentStarted], "\(started.map(\.type))")
    let commitment = try #require(started.last?.commitment)
    #expect(commitment.billingPeriodNumber == 1 && commitment.totalBillingPeriods == 12)
    #expect(started.last?.billingPlan == .monthly && started.last?.occurredMs == started.first?.occurredMs)

    // A year later the commitment has renewed into a new one (Apple's default).
    for _ in 0..<13 { try await rig.advance(days: 31) }
    let year = try await log()
    let renewed = year.filter { $0.type == .commitmentRenewed }
    #expect(renewed.count == 1, "\(year.map(\.type))")
    #expect(renewed.first?.commitment?.billingPeriodNumber == 1)
    let monthly = year.filter { $0.type == .renewed }
    #expect(monthly.count >= 12 && monthly.allSatisfy { $0.billingPlan == .monthly && $0.commitment != nil })
    #expect(monthly.first?.commitment?.billingPeriodNumber == 2, "\(monthly.first.map { "\($0)" } ?? "")")
    #expect(!year.contains { $0.type == .commitmentEnded || $0.type == .expired })

    // The customer cancels: the second commitment is the last; at its end the subscription lapses.
    try await rig.act("cy", "cancel-auto-renew")
    for _ in 0..<13 { try await rig.advance(days: 31) }
    let end = try await log()
    #expect(end.filter { $0.type == .commitmentRenewed }.count == 1, "\(end.map(\.type))")
    let expired = try #require(end.last { $0.type == .expired }, "\(end.map(\.type))")
    let ended = try #require(end.last { $0.type == .commitmentEnded }, "\(end.map(\.type))")
    #expect(ended.occurredMs == expired.occurredMs && ended.commitment?.billingPeriodNumber == 12)
    try await rig.settle()
  }
}
