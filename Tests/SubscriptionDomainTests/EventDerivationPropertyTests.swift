import Testing

@testable import SubscriptionDomain

/// Random purchase histories of one user: subscription chains in two groups (trials, renewals,
/// lapses and resubscriptions in the same subscription, upgrades, refunds, a family-shared chain)
/// and one-time purchases. Each transaction is signed a minute after its purchase; a refund is a
/// later copy signed a minute after its revocation.
struct RandomHistory {
  /// Every copy, in Apple's time order (signed date, then id).
  var copies: [Transaction] = []

  init(seed: UInt64) {
    var random = SeededGenerator(seed: seed)
    let minute: Int64 = 60_000
    let products = [("premium.monthly", "premium.yearly", Group.premium), ("pro.monthly", "pro.yearly", Group.pro)]
    var next = 1
    func id() -> String {
      defer { next += 1 }
      return String(10_000 + next)
    }
    for chain in 0..<Int.random(in: 1...3, using: &random) {
      let (basic, better, group) = products[chain % 2]
      let family = chain == 2
      // Each chain at its own hour, so no two copies are signed at the same instant.
      var start = jan1 + Int64.random(in: 0...40, using: &random) * day + Int64(chain) * hour
      let original = id()
      var product = basic
      for period in 0..<Int.random(in: 1...6, using: &random) {
        let trial = period == 0 && Bool.random(using: &random)
        let end = start + (trial ? 7 : 30) * day
        var t = tx(
          period == 0 ? original : id(), product, start, end, otx: original, offer: trial ? .introductory : nil,
          discount: trial ? .freeTrial : nil, family: family, group: group, signed: start + minute)
        t.price = trial ? 0 : 9_990
        t.currency = "USD"
        copies.append(t)
        switch Int.random(in: 0..<10, using: &random) {
        case 0 where product == basic:  // upgrade in the middle of the period
          let at = start + 10 * day
          var old = t
          old.isUpgraded = true
          old.revocationDate = at
          old.signedDate = at + minute
          copies.append(old)
          product = better
          start = at
          continue
        case 1:  // refund in the middle of the period, then a lapse
          var refunded = t
          refunded.revocationDate = start + 5 * day
          refunded.revocationType = .refundFull
          refunded.signedDate = start + 5 * day + minute
          copies.append(refunded)
          start = end + Int64.random(in: 3...90, using: &random) * day
        case 2:  // a lapse, then a resubscription
          start = end + Int64.random(in: 1...90, using: &random) * day
        default:
          start = end
        }
      }
    }
    for _ in 0..<Int.random(in: 0...2, using: &random) {
      let at = jan1 + Int64.random(in: 0...100, using: &random) * day + 5 * hour + Int64(next) * minute
      copies.append(tx(id(), Bool.random(using: &random) ? "coins.100" : "pass.30days", at, signed: at + minute))
    }
    copies.sort { ($0.signedDate!, $0.transactionId) < ($1.signedDate!, $1.transactionId) }
  }

  /// The stored data once every copy arrived.
  var final: PurchaseHistory { PurchaseHistory(transactions: Transaction.merged(copies)) }
  /// An instant after everything.
  var end: Int64 { (copies.compactMap(\.expiresDate) + copies.map(\.purchaseDate)).max()! + 200 * day }
}

let purchaseTypes: Set<SubscriptionEventType> = [
  .subscriptionStarted, .resubscribed, .trialConverted, .renewed, .billingRecovered, .productChanged,
  .nonRenewingPurchased, .oneTimePurchased,
]

@Suite("Event derivation properties")
struct EventDerivationPropertyTests {
  static let seeds = Array(UInt64(1)...60)

  @Test("importing a whole history at once gives its events once; re-deriving the same data gives none", arguments: seeds)
  func wholeImport(seed: UInt64) {
    let history = RandomHistory(seed: seed)
    let final = history.final
    let events = derivation.events(
      subject: subject, before: .empty, after: final, catalog: Fixture.catalog, throughMs: history.end, detectedMs: 1)
    #expect(Set(events.map(\.eventId)).count == events.count)
    #expect(events.filter { purchaseTypes.contains($0.type) }.count == final.transactions.count)
    #expect(events.map(\.occurredMs) == events.map(\.occurredMs).sorted())
    #expect(events.allSatisfy { $0.detectedMs == 1 })
    for through in [history.end, jan1, jan1 + 50 * day] {
      #expect(
        derivation.events(
          subject: subject, before: final, after: final, catalog: Fixture.catalog, throughMs: through, detectedMs: 2
        ).isEmpty)
    }
  }

  @Test("a history created as already merged (a store's rows, in any order) derives what the plain one does", arguments: seeds)
  func mergedHistories(seed: UInt64) {
    let history = RandomHistory(seed: seed)
    let rows = Transaction.merged(history.copies).reversed()
    let merged = PurchaseHistory(mergedTransactions: Array(rows))
    // Equality and hashing are of the data (in its order), not of how the history was created.
    let sameOrder = PurchaseHistory(mergedTransactions: history.final.transactions)
    #expect(sameOrder == history.final && sameOrder.hashValue == history.final.hashValue)
    var random = SeededGenerator(seed: seed)
    let half = PurchaseHistory(transactions: Transaction.merged(history.copies.filter { _ in Bool.random(using: &random) }))
    let halfRows = PurchaseHistory(mergedTransactions: half.transactions.shuffled(using: &random))
    for through in [jan1 + 50 * day, history.end] {
      let plain = derivation.write(
        subject: subject, before: half, after: history.final, catalog: Fixture.catalog, throughMs: through,
        loggedThroughMs: jan1, detectedMs: 1, nextAfterMs: through)
      let fromRows = derivation.write(
        subject: subject, before: halfRows, after: merged, catalog: Fixture.catalog, throughMs: through,
        loggedThroughMs: jan1, detectedMs: 1, nextAfterMs: through)
      #expect(fromRows.events == plain.events && fromRows.nextTransitionMs == plain.nextTransitionMs)
    }
    // Changing the transactions of a merged history makes it a plain one again (copies merge).
    var changed = merged
    changed.transactions += history.copies
    #expect(!changed.transactionsAreMerged)
    #expect(
      derivation.events(subject: subject, before: .empty, after: changed, catalog: Fixture.catalog, throughMs: history.end, detectedMs: 1)
        == derivation.events(
          subject: subject, before: .empty, after: history.final, catalog: Fixture.catalog, throughMs: history.end,
          detectedMs: 1))
  }

  @Test("transactions arriving in any order, one write each, give the same transaction events", arguments: seeds)
  func anyOrder(seed: UInt64) {
    let history = RandomHistory(seed: seed)
    let finalCopies = history.final.transactions
    func transactionEventIds(_ order: [Transaction]) -> Set<String> {
      var model = EventLogModel()
      for t in order { model.write([t], at: history.end) }
      return Set(model.log.filter { $0.transactionId != nil }.map(\.eventId))
    }
    let inOrder = transactionEventIds(finalCopies)
    var random = SeededGenerator(seed: seed &* 7919)
    for _ in 0..<3 {
      #expect(transactionEventIds(finalCopies.shuffled(using: &random)) == inOrder)
    }
    // And they are exactly those of the whole history imported at once.
    let whole = derivation.events(
      subject: subject, before: .empty, after: history.final, catalog: Fixture.catalog, throughMs: history.end,
      detectedMs: 0)
    #expect(Set(whole.filter { $0.transactionId != nil }.map(\.eventId)) == inOrder)
  }

  @Test("replaying a history from scratch rebuilds the events of the incremental path", arguments: seeds)
  func replay(seed: UInt64) {
    let history = RandomHistory(seed: seed)
    var model = EventLogModel()
    for copy in history.copies {
      model.write([copy], at: copy.signedDate!)
      model.tick(at: copy.signedDate!)
    }
    model.tick(at: history.end)
    let replayed = derivation.events(
      subject: subject, before: .empty, after: model.history, catalog: Fixture.catalog, throughMs: history.end,
      detectedMs: 0)
    func comparable(_ events: [SubscriptionEvent]) -> [SubscriptionEvent] {
      events.map {
        var e = $0
        e.detectedMs = 0
        return e
      }.sorted { $0.eventId < $1.eventId }
    }
    #expect(comparable(replayed) == comparable(model.log))
  }

  @Test("changes by time alone appear exactly when throughMs passes them; nextTransitionMs names the instant", arguments: seeds)
  func transitions(seed: UInt64) {
    let history = RandomHistory(seed: seed)
    let final = history.final
    let start = final.appleNow!
    let all = derivation.transitionEvents(
      subject: subject, history: final, catalog: Fixture.catalog, afterMs: start, throughMs: history.end + 400 * day,
      detectedMs: 0)
    var seen: [SubscriptionEvent] = []
    var after = start
    while let next = EventDerivation.nextTransitionMs(history: final, catalog: Fixture.catalog, afterMs: after) {
      #expect(next > after)
      let early = derivation.transitionEvents(
        subject: subject, history: final, catalog: Fixture.catalog, afterMs: after, throughMs: next - 1, detectedMs: 0)
      #expect(early.isEmpty)
      let due = derivation.transitionEvents(
        subject: subject, history: final, catalog: Fixture.catalog, afterMs: after, throughMs: next, detectedMs: 0)
      #expect(!due.isEmpty)
      seen += due
      after = next
      if seen.count > 50 { break }
    }
    #expect(seen.map(\.eventId) == all.map(\.eventId))
    // A write's derivation through an instant includes the transitions due by then.
    let through = start + 45 * day
    let written = derivation.events(
      subject: subject, before: .empty, after: final, catalog: Fixture.catalog, throughMs: through, detectedMs: 0)
    let dueByThen = derivation.transitionEvents(
      subject: subject, history: final, catalog: Fixture.catalog, afterMs: start, throughMs: through, detectedMs: 0)
    #expect(Set(dueByThen.map(\.eventId)).isSubset(of: Set(written.map(\.eventId))))
  }

  @Test("event ids depend on the cause only: not on when it was detected; the digest decides the id")
  func ids() {
    let t = tx("1", "premium.monthly", jan1, jan1 + 30 * day, signed: jan1)
    let after = PurchaseHistory(transactions: [t])
    let a = derivation.events(subject: subject, before: .empty, after: after, catalog: Fixture.catalog, throughMs: jan1, detectedMs: 5)
    let b = derivation.events(
      subject: subject, before: .empty, after: after, catalog: Fixture.catalog, throughMs: jan1 + day, detectedMs: 99)
    #expect(a.map(\.eventId) == b.map(\.eventId) && a.count == 1)
    let other = EventSubject(appId: "app1", environment: .sandbox, userId: "user1")
    let c = derivation.events(subject: other, before: .empty, after: after, catalog: Fixture.catalog, throughMs: jan1, detectedMs: 5)
    #expect(c[0].eventId != a[0].eventId)
    let key = EventCause.purchase(transactionId: "1").canonicalKey(for: subject)
    #expect(key == "substatus.event.v1\n4:app1\n10:Production\n5:user1\n8:purchase\n1:1")
    // Every length is spelled in decimal as String(count) does, from 0 to several digits.
    for n in [0, 1, 9, 10, 99, 100, 1_234] {
      let id = String(repeating: "x", count: n)
      let long = EventSubject(appId: "app1", environment: .production, userId: id)
      #expect(
        EventCause.purchase(transactionId: id).canonicalKey(for: long)
          == "substatus.event.v1\n4:app1\n10:Production\n\(n):\(id)\n8:purchase\n\(n):\(id)")
    }
    #expect(a[0].eventId == derivation.eventId(for: .purchase(transactionId: "1"), subject: subject))
  }
}
