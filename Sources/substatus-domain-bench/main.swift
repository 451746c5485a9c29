// Micro-benchmark of SubscriptionEvaluator: one user with 30 transactions in 4 subscription groups
// (plus non-renewing and non-consumable purchases), 4 renewal infos, 20 requested products.
// Prints nanoseconds per user evaluation; then event derivation per write beside evaluation per
// history (DerivationBench.swift). Run: swift run -c release substatus-domain-bench
// (`substatus-domain-bench derivation`: only the derivation rows).
import SubscriptionDomain

let derivationOnly = CommandLine.arguments.dropFirst().first == "derivation"

let day: Int64 = 86_400_000
let start: Int64 = 1_704_067_200_000  // 2024-01-01T00:00:00Z

// 4 groups x 4 auto-renewables, 2 non-renewing, 2 non-consumables: 20 products.
var products: [Product] = []
for g in 0..<4 {
  for (suffix, duration) in [("weekly", "P1W"), ("monthly", "P1M"), ("quarterly", "P3M"), ("yearly", "P1Y")] {
    products.append(
      Product(
        productId: "com.example.group\(g).\(suffix)", type: .autoRenewable,
        subscriptionGroupId: "2000000\(g)", duration: try! ISO8601Duration(parsing: duration),
        hasIntroductoryOffer: suffix != "weekly", promotionalOfferIds: ["retain.\(g)"]))
  }
}
products.append(Product(productId: "com.example.pass30", type: .nonRenewing, duration: try! ISO8601Duration(parsing: "P30D")))
products.append(Product(productId: "com.example.pass1m", type: .nonRenewing, duration: try! ISO8601Duration(parsing: "P1M")))
products.append(Product(productId: "com.example.lifetime", type: .nonConsumable))
products.append(Product(productId: "com.example.theme", type: .nonConsumable))
let catalog = Catalog(products: products)

// 30 transactions: 6 renewals per group (24), 3 non-renewing, 2 non-consumables, 1 consumable-like unknown.
var history: [Transaction] = []
var renewals: [RenewalInfo] = []
var id = 100_000_000_000
for g in 0..<4 {
  let otx = String(id)
  var at = start + Int64(g) * 3 * day
  for period in 0..<6 {
    let product = "com.example.group\(g).\(period < 3 ? "monthly" : "yearly")"
    let length = period < 3 ? 30 * day : 365 * day
    history.append(
      Transaction(
        transactionId: String(id), originalTransactionId: otx, productId: product,
        subscriptionGroupIdentifier: "2000000\(g)", purchaseDate: at, expiresDate: at + length,
        isTrialPeriod: period == 0 && g % 2 == 0,
        revocationDate: (g == 3 && period == 5) ? at + 10 * day : nil,
        inAppOwnershipType: g == 2 ? .familyShared : .purchased, isUpgraded: false,
        environment: .production, webOrderLineItemId: String(id + 1)))
    id += 1
    at += length
  }
  renewals.append(
    RenewalInfo(
      originalTransactionId: otx, productId: "com.example.group\(g).yearly",
      autoRenewProductId: "com.example.group\(g).yearly", autoRenewStatus: g == 1 ? .off : .on,
      isInBillingRetryPeriod: g == 0, gracePeriodExpiresDate: g == 0 ? start + 1000 * day : nil))
}
for k in 0..<3 {
  history.append(
    Transaction(
      transactionId: String(id), productId: "com.example.pass30", purchaseDate: start + Int64(k) * 20 * day))
  id += 1
}
history.append(Transaction(transactionId: String(id), productId: "com.example.lifetime", purchaseDate: start))
id += 1
history.append(Transaction(transactionId: String(id), productId: "com.example.theme", purchaseDate: start))
id += 1
history.append(Transaction(transactionId: String(id), productId: "com.example.coins", purchaseDate: start))
precondition(history.count == 30)

let requested = products.map(\.productId)
precondition(requested.count == 20)
let now = start + 500 * day

@inline(never)
func evaluateOnce(
  _ history: [Transaction], _ renewals: [RenewalInfo], _ catalog: Catalog, _ requested: [String],
  at time: Int64
) -> Int {
  let evaluation = SubscriptionEvaluator.evaluate(
    history: history, renewals: renewals, catalog: catalog, policy: .default, at: time)
  var checksum = evaluation.groups.count + evaluation.entitlements.count
  for answer in evaluation.eligibility(for: requested) {
    checksum &+= answer.introductory.eligible ? 1 : 0
    checksum &+= answer.promotional.reason.rawValue.utf8.count
  }
  return checksum
}

var sink = 0
if !derivationOnly {
  let clock = ContinuousClock()
  for _ in 0..<20_000 { sink &+= evaluateOnce(history, renewals, catalog, requested, at: now) }  // warm up

  var samples: [Double] = []
  let iterations = 50_000
  for _ in 0..<7 {
    let elapsed = clock.measure {
      for i in 0..<iterations { 
        sink &+= evaluateOnce(history, renewals, catalog, requested, at: now &+ Int64(i & 1))
      }
    }
    let ns = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
    samples.append(ns / Double(iterations))
  }
  samples.sort()
  let evaluation = SubscriptionEvaluator.evaluate(
    history: history, renewals: renewals, catalog: catalog, at: now)
  print("groups: \(evaluation.groups.map { "\($0.subscriptionGroupId)=\($0.state.rawValue)" })")
  print("entitlements: \(evaluation.entitlements.map(\.productId))")
  print(
    "evaluate + eligibility(20 products), 30 transactions, 4 groups: median \(Int(samples[3])) ns/user,"
      + " min \(Int(samples[0])) ns, max \(Int(samples[6])) ns (7 runs x \(iterations))")
}
if sink == 42 { print("") }  // keep the work observable

// The same answers from the user's stored summary (docs/evaluation-cache.md "Per-user summaries"):
// decode its bytes, check its window and fingerprint, answer the 20 products; interleaved with
// the evaluation of the history, so the ratio is of one run.
@inline(never)
func answerFromSummary(_ bytes: [UInt8], _ catalog: Catalog, _ fingerprint: SummaryFingerprint, _ requested: [String], at time: Int64) -> Int {
  guard let evaluation = try? UserSummary(decoding: bytes).evaluation(
    catalog: catalog, policy: .default, fingerprint: fingerprint, at: time)
  else { return -1 }
  var checksum = evaluation.groups.count + evaluation.entitlements.count
  for answer in evaluation.eligibility(for: requested) {
    checksum &+= answer.introductory.eligible ? 1 : 0
    checksum &+= answer.promotional.reason.rawValue.utf8.count
  }
  return checksum
}

if !derivationOnly {
  let clock = ContinuousClock()
  let summaryBytes = UserSummary(
    transactions: history, renewals: renewals, catalog: catalog, policy: .default, at: now
  ).encoded()
  let fingerprint = SummaryFingerprint(catalog: catalog, policy: .default)
  precondition(
    answerFromSummary(summaryBytes, catalog, fingerprint, requested, at: now)
      == evaluateOnce(history, renewals, catalog, requested, at: now))
  var fromHistory: [Double] = []
  var fromSummary: [Double] = []
  let iterations = 50_000
  func ns(_ d: Duration) -> Double {
    (Double(d.components.seconds) * 1e9 + Double(d.components.attoseconds) / 1e9) / Double(iterations)
  }
  for _ in 0..<7 {
    fromHistory.append(ns(clock.measure {
      for i in 0..<iterations { sink &+= evaluateOnce(history, renewals, catalog, requested, at: now &+ Int64(i & 1)) }
    }))
    fromSummary.append(ns(clock.measure {
      for i in 0..<iterations { sink &+= answerFromSummary(summaryBytes, catalog, fingerprint, requested, at: now &+ Int64(i & 1)) }
    }))
  }
  // What a write adds to compute and encode the user's summary (stored beside its events).
  var writes: [Double] = []
  for _ in 0..<7 {
    writes.append(ns(clock.measure {
      for i in 0..<iterations {
        sink &+= UserSummary(
          transactions: history, renewals: renewals, catalog: catalog, policy: .default, at: now &+ Int64(i & 1)
        ).encoded().count
      }
    }))
  }
  writes.sort()
  print("summary per write: evaluate with its window + encode, median \(Int(writes[3])) ns/user (7 runs x \(iterations))")
  fromHistory.sort()
  fromSummary.sort()
  print(
    "summary (\(summaryBytes.count) bytes): decode + answer 20 products median \(Int(fromSummary[3])) ns/user,"
      + " the history's evaluation interleaved \(Int(fromHistory[3])) ns/user:"
      + " \((fromHistory[3] / fromSummary[3] * 10).rounded() / 10)x (7 runs x \(iterations))")
}
if sink == 44 { print("") }

print("")
sink &+= DerivationBench.run()
if sink == 43 { print("") }
