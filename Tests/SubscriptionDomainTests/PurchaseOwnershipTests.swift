import Foundation
import Testing

@testable import SubscriptionDomain

/// One row of the ownership-filter table: a user's gaps, an instant, and the original
/// transactions the user owns then.
struct OwnershipGapCase: Sendable, CustomTestStringConvertible {
  var name: String
  var gaps: [OwnershipGap]
  var time: Int64
  var owned: [String]
  var testDescription: String { name }
}

/// The history every row filters: two original transactions of the premium group (m1 renewed
/// once as m2) and one non-consumable.
private let ownershipHistory = [
  tx("m1", "premium.monthly", jan1, jan1 + 31 * day, intro: true),
  tx("m2", "premium.monthly", jan1 + 31 * day, jan1 + 60 * day, otx: "m1"),
  tx("y1", "premium.yearly", jan1 + 10 * day, jan1 + 375 * day),
  tx("l1", "lifetime", jan1),
]
private let ownershipRenewals = [renewal("m1", "premium.monthly"), renewal("y1", "premium.yearly")]
private let loss = jan1 + 40 * day
private let regain = jan1 + 50 * day

let ownershipGapCases: [OwnershipGapCase] = [
  OwnershipGapCase(
    name: "no gap: everything owned", gaps: [], time: jan1 + 45 * day, owned: ["l1", "m1", "y1"]),
  OwnershipGapCase(
    name: "lost: owned before the loss", gaps: [gap("m1", from: loss)], time: loss - 1,
    owned: ["l1", "m1", "y1"]),
  OwnershipGapCase(
    name: "lost: not owned at the instant of the loss (half-open)", gaps: [gap("m1", from: loss)],
    time: loss, owned: ["l1", "y1"]),
  OwnershipGapCase(
    name: "lost and acquired again: not owned in between", gaps: [gap("m1", from: loss, until: regain)],
    time: regain - 1, owned: ["l1", "y1"]),
  OwnershipGapCase(
    name: "lost and acquired again: owned from the instant it came back",
    gaps: [gap("m1", from: loss, until: regain)], time: regain, owned: ["l1", "m1", "y1"]),
  OwnershipGapCase(
    name: "acquired by a transfer: not owned before it", gaps: [gap("y1", until: loss)],
    time: jan1 + 20 * day, owned: ["l1", "m1"]),
  OwnershipGapCase(
    name: "acquired by a transfer: owned from it, its past included", gaps: [gap("y1", until: loss)],
    time: loss, owned: ["l1", "m1", "y1"]),
  OwnershipGapCase(
    name: "several gaps of several original transactions",
    gaps: [gap("y1", until: loss), gap("l1", from: jan1 + day), gap("m1", from: loss, until: regain)],
    time: jan1 + 45 * day, owned: ["y1"]),
  OwnershipGapCase(
    name: "two losses of one original transaction, owned between them",
    gaps: [gap("m1", from: jan1 + 5 * day, until: jan1 + 10 * day), gap("m1", from: loss)],
    time: jan1 + 20 * day, owned: ["l1", "m1", "y1"]),
]

private func gap(_ otx: String, from: Int64? = nil, until: Int64? = nil) -> OwnershipGap {
  OwnershipGap(originalTransactionId: otx, fromMs: from, untilMs: until)
}

@Suite("Purchase ownership")
struct PurchaseOwnershipTests {
  @Test("the ownership filter", arguments: ownershipGapCases)
  func filter(_ c: OwnershipGapCase) {
    let (transactions, renewals) = OwnershipGap.owned(
      transactions: ownershipHistory, renewals: ownershipRenewals, gaps: c.gaps, at: c.time)
    #expect(Set(transactions.map(\.originalTransactionId)) == Set(c.owned))
    #expect(Set(renewals.map(\.originalTransactionId)) == Set(c.owned).intersection(["m1", "y1"]))
    // Order is kept: the evaluator's input stays in purchase order.
    #expect(transactions == ownershipHistory.filter { c.owned.contains($0.originalTransactionId) })
  }

  @Test("a user who lost a subscription is evaluated without it from the loss: status, entitlements, intro eligibility")
  func evaluationFollowsOwnership() {
    let history = [tx("m1", "premium.monthly", jan1, jan1 + 31 * day, intro: true)]
    let renewals = [renewal("m1", "premium.monthly")]
    let gaps = [gap("m1", from: jan1 + 10 * day)]
    func evaluated(at time: Int64) -> SubscriptionEvaluation {
      let owned = OwnershipGap.owned(transactions: history, renewals: renewals, gaps: gaps, at: time)
      return evaluate(owned.transactions, owned.renewals, at: time)
    }
    let before = evaluated(at: jan1 + 10 * day - 1)
    #expect(before.groups.first { $0.subscriptionGroupId == Group.premium }?.state == .active)
    #expect(before.entitlements.map(\.productId) == ["premium.monthly"])
    #expect(before.eligibility(for: "premium.monthly").introductory.reason == .introAlreadyUsed)
    let after = evaluated(at: jan1 + 10 * day)
    #expect(after.groups.first { $0.subscriptionGroupId == Group.premium }?.state == .neverSubscribed)
    #expect(after.entitlements.isEmpty)
    #expect(after.eligibility(for: "premium.monthly").introductory.reason == .newCustomer)
  }

  @Test("a policy stored before purchase sharing existed decodes as SHARE; the others round-trip")
  func storedPolicies() throws {
    let old = #"{"refundsBlockIntro":true,"lapsedSubscribersGetIntro":true,"billingRetryEntitled":false,"promoScope":"APP"}"#
    let decoded = try JSONDecoder().decode(EligibilityPolicy.self, from: Data(old.utf8))
    #expect(decoded == EligibilityPolicy(refundsBlockIntro: true, promoScope: .app, purchaseSharing: .share))
    for sharing in PurchaseSharing.allCases {
      let policy = EligibilityPolicy(purchaseSharing: sharing)
      #expect(try JSONDecoder().decode(EligibilityPolicy.self, from: JSONEncoder().encode(policy)) == policy)
    }
  }
}
