// Event derivation on ingest (docs/architecture.md "Performance", Events: deriving events adds ≤
// 10 % to ingest CPU). For realistic histories of one user, the cost of one evaluation of the
// history beside the cost of one write's derivation as a store runs it: the events the write adds
// and the user's next change by time alone (`UserEventDerivation.write`).
import SubscriptionDomain

/// One derivation workload: a write from `before` to `after` at `atMs`.
struct DerivationCase {
  var name: String
  var before: PurchaseHistory
  var after: PurchaseHistory
  var atMs: Int64
  var loggedThroughMs: Int64?
}

enum DerivationBench {
  static let minute: Int64 = 60_000
  static let day: Int64 = 86_400_000
  static let month: Int64 = 30 * day
  static let group = "21000001"

  static let catalog = Catalog(products: [
    Product(
      productId: "app.monthly", type: .autoRenewable, subscriptionGroupId: group,
      duration: try! ISO8601Duration(parsing: "P1M"), hasIntroductoryOffer: true),
    Product(
      productId: "app.monthly.plus", type: .autoRenewable, subscriptionGroupId: group,
      duration: try! ISO8601Duration(parsing: "P1M")),
  ])

  /// A digest for event ids (FNV-1a, 4 lanes): the domain takes its hash from the caller; the
  /// service's SHA-256 of ~100 bytes per event is not what this measures.
  static let derivation = EventDerivation(digest: { bytes in
    var out: [UInt8] = []
    out.reserveCapacity(32)
    for lane in UInt64(0)..<4 {
      var hash: UInt64 = 0xcbf2_9ce4_8422_2325 &+ lane &* 0x9E37_79B9_7F4A_7C15
      for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
      for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: hash >> UInt64(shift))) }
    }
    return out
  })

  static let subject = EventSubject(appId: "bench", environment: .production, userId: "user")

  static func period(
    _ id: Int, otx: Int, _ product: String, _ start: Int64, _ end: Int64, trial: Bool = false, price: Int64 = 9_990
  ) -> Transaction {
    var t = Transaction(
      transactionId: String(id), originalTransactionId: String(otx), productId: product,
      subscriptionGroupIdentifier: group, purchaseDate: start, expiresDate: end,
      offerType: trial ? .introductory : nil, offerDiscountType: trial ? .freeTrial : nil,
      inAppOwnershipType: .purchased, environment: .production, type: .autoRenewable,
      signedDate: start + minute)
    t.price = trial ? 0 : price
    t.currency = "USD"
    return t
  }

  static func renewalInfo(_ otx: Int, _ product: String, signed: Int64, retry: Bool = false, grace: Int64? = nil)
    -> RenewalInfo
  {
    RenewalInfo(
      originalTransactionId: String(otx), productId: product, autoRenewProductId: product, autoRenewStatus: .on,
      expirationIntent: retry ? .billingError : nil, isInBillingRetryPeriod: retry, gracePeriodExpiresDate: grace,
      environment: .production, signedDate: signed)
  }

  /// A one-year monthly subscription that starts with a week's free trial: 13 transactions.
  static func yearWithTrial() -> (transactions: [Transaction], renewals: [RenewalInfo]) {
    let start: Int64 = 1_704_067_200_000
    var transactions = [period(1000, otx: 1000, "app.monthly", start, start + 7 * day, trial: true)]
    var at = start + 7 * day
    for k in 1...12 {
      transactions.append(period(1000 + k, otx: 1000, "app.monthly", at, at + month))
      at += month
    }
    return (transactions, [renewalInfo(1000, "app.monthly", signed: at - month + minute)])
  }

  /// Three years of one subscription: a free trial, a failed renewal recovered in its 16-day grace
  /// period, one recovered in billing retry after the grace period, an upgrade in the middle of a
  /// period (the old transaction marked upgraded and revoked at once), a refunded period, a lapse
  /// of 20 days and a resubscription: 37 transactions in all; the last is `appended`.
  static func threeYears() -> (transactions: [Transaction], appended: Transaction, renewals: [RenewalInfo]) {
    let start: Int64 = 1_704_067_200_000
    var transactions = [period(2000, otx: 2000, "app.monthly", start, start + 7 * day, trial: true)]
    var at = start + 7 * day
    var product = "app.monthly"
    var id = 2001
    while transactions.count < 37 {
      let n = transactions.count
      var begin = at
      if n == 8 { begin = at + 10 * day }  // recovered in grace
      if n == 14 { begin = at + 25 * day }  // recovered in billing retry, after the grace period
      if n == 27 { begin = at + 20 * day }  // resubscribed after the refund's lapse
      var t = period(id, otx: 2000, product, begin, begin + month, price: product == "app.monthly" ? 9_990 : 14_990)
      if n == 20 {
        // Upgrade 12 days into the period: the old one upgraded, the new one bought at once.
        let upgradeAt = begin + 12 * day
        t.isUpgraded = true
        t.revocationDate = upgradeAt
        t.revocationReason = .other
        t.signedDate = upgradeAt + minute
        transactions.append(t)
        id += 1
        product = "app.monthly.plus"
        at = upgradeAt
        continue
      }
      if n == 25 {
        t.revocationDate = begin + 5 * day
        t.revocationType = .refundFull
        t.signedDate = begin + 5 * day + minute
      }
      transactions.append(t)
      id += 1
      at = begin + month
    }
    let appended = transactions.removeLast()
    let renewals = [renewalInfo(2000, product, signed: appended.purchaseDate + minute)]
    return (transactions, appended, renewals)
  }

  static func cases() -> [DerivationCase] {
    var result: [DerivationCase] = []
    let year = yearWithTrial()
    let yearEnd = year.transactions.last!.purchaseDate + minute
    result.append(
      DerivationCase(
        name: "1-year monthly with trial (13 tx), whole import in 1 write", before: .empty,
        after: PurchaseHistory(transactions: year.transactions, renewals: year.renewals), atMs: yearEnd))
    let three = threeYears()
    let all = three.transactions + [three.appended]
    let threeEnd = three.appended.purchaseDate + minute
    result.append(
      DerivationCase(
        name: "3-year with grace, retry, upgrade, refund (37 tx), whole import in 1 write", before: .empty,
        after: PurchaseHistory(transactions: all, renewals: three.renewals), atMs: threeEnd))
    let previous = three.transactions.last!.purchaseDate + minute
    result.append(
      DerivationCase(
        name: "append 1 renewal to that 36-tx history",
        before: PurchaseHistory(
          transactions: three.transactions, renewals: [renewalInfo(2000, "app.monthly.plus", signed: previous)]),
        after: PurchaseHistory(transactions: all, renewals: three.renewals), atMs: threeEnd,
        loggedThroughMs: previous))
    return result
  }

  @inline(never)
  static func evaluateOnce(_ c: DerivationCase) -> Int {
    let evaluation = SubscriptionEvaluator.evaluate(
      history: c.after.transactions, renewals: c.after.renewals, catalog: catalog, at: c.atMs)
    return evaluation.groups.count &+ evaluation.entitlements.count
  }

  /// What a store runs for one write (`UserEventDerivation.write`): the events, then the next
  /// change by time alone.
  @inline(never)
  static func deriveOnce(_ c: DerivationCase) -> Int {
    let derived = derivation.write(
      subject: subject, before: c.before, after: c.after, catalog: catalog, throughMs: c.atMs,
      loggedThroughMs: c.loggedThroughMs, detectedMs: c.atMs, nextAfterMs: max(c.atMs, c.loggedThroughMs ?? c.atMs))
    return derived.events.count &+ Int(truncatingIfNeeded: derived.nextTransitionMs ?? 0)
  }

  /// Median, min and max µs per call of `body` over 7 runs of `iterations` (after a warm-up), a
  /// few short runs: the machine is shared, the median is the figure.
  static func measure(iterations: Int, _ body: () -> Int) -> (median: Double, min: Double, max: Double, sink: Int) {
    let clock = ContinuousClock()
    var sink = 0
    for _ in 0..<(iterations / 4) { sink &+= body() }
    var samples: [Double] = []
    for _ in 0..<7 {
      let elapsed = clock.measure {
        for _ in 0..<iterations { sink &+= body() }
      }
      let ns = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
      samples.append(ns / Double(iterations) / 1000)
    }
    samples.sort()
    return (samples[3], samples[0], samples[6], sink)
  }

  static func run() -> Int {
    var sink = 0
    for c in cases() {
      let events = derivation.events(
        subject: subject, before: c.before, after: c.after, catalog: catalog, throughMs: c.atMs,
        loggedThroughMs: c.loggedThroughMs, detectedMs: c.atMs)
      let evaluation = measure(iterations: 2_000) { evaluateOnce(c) }
      let write = measure(iterations: 200) { deriveOnce(c) }
      sink &+= evaluation.sink &+ write.sink
      func f(_ x: Double) -> String { "\((x * 10).rounded() / 10)" }
      print(
        "\(c.name) [\(events.count) events: \(events.map(\.type.rawValue).joined(separator: " "))]:\n"
          + "  evaluation per history: median \(f(evaluation.median)) µs (min \(f(evaluation.min)), max \(f(evaluation.max)))\n"
          + "  derivation per write (events + next transition): median \(f(write.median)) µs"
          + " (min \(f(write.min)), max \(f(write.max))) = \(f(write.median / evaluation.median)) evaluations")
    }
    return sink
  }
}
