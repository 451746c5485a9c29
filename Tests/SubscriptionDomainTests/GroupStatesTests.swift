import Testing

@testable import SubscriptionDomain

/// The timeline's walk (`EventDerivation+States.swift`) against ``SubscriptionEvaluator``: at every
/// instant the walk records and around it, each group's status is the one evaluation gives for the
/// data as it stood then (the renewal infos that describe the instant, a transaction upgraded
/// later not marked upgraded yet).
@Suite("Timeline states")
struct GroupStatesTests {
  /// Random renewal infos for a history's subscriptions: none, auto-renewing, billing retry, a grace
  /// period after the last period, or both.
  static func renewals(of transactions: [Transaction], using random: inout SeededGenerator, signed: Int64)
    -> [RenewalInfo]
  {
    var result: [RenewalInfo] = []
    for (otx, group) in Dictionary(grouping: transactions, by: \.originalTransactionId).sorted(by: { $0.key < $1.key }) {
      let last = group.max { $0.purchaseDate < $1.purchaseDate }!
      let end = last.expiresDate ?? last.purchaseDate
      switch Int.random(in: 0..<5, using: &random) {
      case 0: continue
      case 1: result.append(renewal(otx, last.productId, autoRenew: Bool.random(using: &random), signed: signed))
      case 2: result.append(renewal(otx, last.productId, retry: true, signed: signed))
      case 3: result.append(renewal(otx, last.productId, grace: end + 16 * day, signed: signed))
      default: result.append(renewal(otx, last.productId, retry: true, grace: end + 6 * day, signed: signed))
      }
    }
    return result
  }

  /// The evaluation of `timeline`'s data as it stood at `t` (what the walk must agree with): the
  /// transactions bought by then, the renewal infos that describe `t` (during a write, before's
  /// for the instants before after's new transactions of its subscription).
  static func evaluated(_ timeline: Timeline, before: PurchaseHistory?, group: String, at t: Int64) -> GroupStatus? {
    var history = timeline.transactions
    for i in history.indices where history[i].isUpgraded {
      let later = history.filter {
        $0.originalTransactionId == history[i].originalTransactionId && $0.purchaseDate > history[i].purchaseDate
      }.map(\.purchaseDate).min()
      if let instant = history[i].revocationDate ?? later, t < instant { history[i].isUpgraded = false }
    }
    func latest(_ otx: String, in transactions: [Transaction]) -> Int64 {
      transactions.filter { $0.originalTransactionId == otx }.map(\.purchaseDate).max() ?? .min
    }
    var renewals = timeline.renewals.filter { latest($0.originalTransactionId, in: history) <= t }
    for r in RenewalInfo.merged(before?.renewals ?? []) {
      let otx = r.originalTransactionId
      if latest(otx, in: before!.transactions) <= t && t < latest(otx, in: history) { renewals.append(r) }
    }
    return SubscriptionEvaluator.evaluate(
      history: history.filter { $0.purchaseDate <= t }, renewals: renewals, catalog: Fixture.catalog, at: t)
      .status(ofGroup: group)
  }

  @Test("every status the walk records is evaluation's, at its start and around it", arguments: Array(UInt64(1)...60))
  func walkAgreesWithEvaluation(seed: UInt64) {
    let history = RandomHistory(seed: seed)
    var random = SeededGenerator(seed: seed &* 31)
    let final = history.final
    // A write: `before` is the data up to a random copy, with its own renewal infos.
    let cut = Int.random(in: 0...history.copies.count, using: &random)
    let before = PurchaseHistory(
      transactions: Transaction.merged(history.copies.prefix(cut)),
      renewals: Self.renewals(of: Array(history.copies.prefix(cut)), using: &random, signed: jan1))
    let after = PurchaseHistory(
      transactions: final.transactions, renewals: Self.renewals(of: final.transactions, using: &random, signed: jan1 + day))
    for (data, fallback) in [(after, nil), (after, before), (before, nil)] {
      let timeline = Timeline(history: data, fallback: fallback, catalog: Fixture.catalog)
      for group in [Group.premium, Group.pro, Group.family, "elsewhere"] {
        var instants = Set(timeline.states[group]?.starts ?? []).flatMap { [$0 &- 1, $0, $0 &+ 1] }
        instants += (0..<20).map { _ in jan1 + Int64.random(in: -10...400, using: &random) * day }
        for t in Set(instants).sorted() where t > .min && t < .max {
          let walked = timeline.status(group, at: t)
          let want = Self.evaluated(timeline, before: fallback, group: group, at: t)
          #expect(walked?.state == want?.state, "seed \(seed) group \(group) at \(t)")
          guard let walked, let want else { continue }
          #expect(timeline.transactionId(walked) == want.transactionId, "seed \(seed) group \(group) at \(t)")
          #expect(timeline.productId(walked) == want.productId, "seed \(seed) group \(group) at \(t)")
          #expect(
            timeline.originalTransactionId(walked) == want.originalTransactionId, "seed \(seed) group \(group) at \(t)")
          #expect(timeline.expiresDate(walked) == want.expiresDate, "seed \(seed) group \(group) at \(t)")
        }
      }
    }
  }
}
