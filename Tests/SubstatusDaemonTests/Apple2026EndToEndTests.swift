import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Issue 33's rules as a user meets them: the App Store simulator (V2, signed), a real substatusd
/// following its clock (on SQLite and on PostgreSQL), and the answers read with the `substatus` CLI.
@Suite(.serialized) struct Apple2026EndToEndTests {
  /// `substatus ARGS --json` against the rig's daemon with its admin key; the JSON it printed.
  static func cli(_ rig: LifecycleRig, _ arguments: [String]) async throws -> String {
    let (code, out, err) = try await run(
      try builtExecutable("substatus"),
      arguments + ["--json", "--addr", rig.daemon.grpc, "--key", rig.admin, "--timeout", "10"])
    #expect(code == 0, "substatus \(arguments.joined(separator: " ")): \(err)")
    return out
  }

  /// `substatus status APP USER [--as-of MS]`: the group `pro`.
  static func status(_ rig: LifecycleRig, _ user: String, asOf: Int64? = nil) async throws -> Substatus_V1_GroupStatus {
    let extra = asOf.map { ["--as-of", String($0)] } ?? []
    let out = try await cli(rig, ["status", rig.app, user] + extra)
    let response = try Substatus_V1_GetStatusResponse(jsonString: out)
    return try #require(response.groups.first { $0.subscriptionGroupID == "pro" }, "\(out)")
  }

  /// Rule 21 (docs/architecture.md "Domain rules"): a renewal info describes the present of its
  /// subscription only. A monthly subscriber whose card failed twice: today Apple's renewal info
  /// says billing retry in a grace period, auto-renew on. At a past `--as-of` on a paid day the
  /// answer is ACTIVE without a billing issue, and today's renewal info's grace date and auto-renew
  /// status are not reported for that day; today the grace period is.
  @Test(arguments: TestStore.userLevel) func aPaidDayIsActiveWhileTodaysRenewalInfoSaysBillingRetry(store: TestStore)
    async throws
  {
    let rig = try await LifecycleRig(graceDays: 16, store: store)
    defer { rig.stop() }
    let day = LifecycleRig.day
    let start = LifecycleRig.start
    try await rig.addUser("ann")
    try await rig.act("ann", "purchase", ["product_id": "pro.plus.monthly"])  // paid from day 0
    try await rig.advance(days: 1)
    _ = try await rig.sim.post("/control/users/ann/billing-failure", [:])
    try await rig.advance(days: 40)  // the renewal at day 31 fails: grace until day 47
    _ = try await rig.sim.post("/control/users/ann/billing-recover", [:])  // period 2 keeps its start (day 31)
    try await rig.sim.drain()
    _ = try await rig.sim.post("/control/users/ann/billing-failure", [:])
    try await rig.advance(days: 25)  // day 66: period 2 ended at day 61 (or 62); in grace again
    let user = try await rig.substatusUser(of: "ann")

    let today = try await Self.status(rig, user)
    #expect(today.state == .gracePeriod, "\(today)")
    #expect(today.billingIssue)
    #expect(today.gracePeriodExpiresMs > start + 61 * day)
    #expect(today.autoRenewEnabled)

    // A paid day of each period: active, no billing issue, nothing of today's renewal info.
    for paidDay: Int64 in [10, 45] {
      let past = try await Self.status(rig, user, asOf: start + paidDay * day)
      #expect(past.state == .active, "day \(paidDay): \(past)")
      #expect(!past.billingIssue, "day \(paidDay): \(past)")
      #expect(past.gracePeriodExpiresMs == 0, "day \(paidDay): \(past)")
    }
    // The first period's day 10: the renewal info signed after the second period does not tell
    // whether that period would renew.
    let first = try await Self.status(rig, user, asOf: start + 10 * day)
    #expect(!first.autoRenewEnabled, "\(first)")
  }

  /// Rule 22: a one-year subscription bought on Apple's monthly plan with a 12-month commitment
  /// (the simulator signs `billingPlanType`, `commitmentInfo` and the renewal info's
  /// `renewalBillingPlanType` / `commitmentInfo` as App Store Server API 1.21 does). Each month is a
  /// transaction covering that month; status reports the plan and billing period k of 12; the
  /// customer cancelling in month 2 turns off only the commitment's renewal: billing continues
  /// (auto-renew of the next period stays on) and month 3 is still paid.
  @Test(arguments: TestStore.userLevel) func aTwelveMonthCommitmentIsReportedAndCancellingKeepsBilling(store: TestStore)
    async throws
  {
    let rig = try await LifecycleRig(store: store)
    defer { rig.stop() }
    let day = LifecycleRig.day
    // The simulator's app also sells pro.yearly on the monthly plan (8.99 a month); substatusd's
    // catalog does not list it: a transaction of group `pro` is an auto-renewable of it (rule 2).
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

    let first = try await Self.status(rig, user)
    #expect(first.state == .active && first.productID == "pro.yearly", "\(first)")
    #expect(first.billingPlan == .monthly)
    #expect(first.expiresMs <= LifecycleRig.start + 31 * day, "one month, not a year: \(first)")
    let commitment = try #require(first.commitment, "\(first)")
    #expect(commitment.billingPeriodNumber == 1 && commitment.totalBillingPeriods == 12)
    #expect(commitment.expiresMs >= LifecycleRig.start + 365 * day)
    #expect(commitment.willRenew && commitment.renewalBillingPlan == .monthly)
    #expect(first.autoRenewEnabled)

    // Month 2, then the customer cancels: only the commitment's renewal turns off.
    try await rig.advance(days: 32)
    try await rig.act("cy", "cancel-auto-renew")
    let second = try await Self.status(rig, user)
    #expect(second.state == .active, "\(second)")
    #expect(second.commitment?.billingPeriodNumber == 2, "\(second)")
    #expect(second.commitment?.willRenew == false, "\(second)")
    #expect(second.autoRenewEnabled, "billing continues through the 12 periods: \(second)")
    try await rig.advance(days: 31)
    let third = try await Self.status(rig, user)
    #expect(third.state == .active && third.commitment?.billingPeriodNumber == 3, "\(third)")
    #expect(third.commitment?.willRenew == false)

    // A past instant answers with that month's transaction (rule 21 for the commitment's facts).
    let past = try await Self.status(rig, user, asOf: LifecycleRig.start + 10 * day)
    #expect(past.commitment?.billingPeriodNumber == 1, "\(past)")
    #expect(past.commitment?.willRenew == false, "no renewal info describes month 1 any more: \(past)")

    // The CLI's table says it too.
    let (code, table, _) = try await run(
      try builtExecutable("substatus"), ["status", rig.app, user, "--addr", rig.daemon.grpc, "--key", rig.admin])
    #expect(code == 0)
    #expect(table.contains("billed monthly") && table.contains("commitment 3/12"), "\(table)")
  }
}
