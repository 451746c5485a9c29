// substatus-e2e-datagen: builds a substatusd data directory for the end-to-end benchmarks
// (scripts/bench_e2e.py): one tenant, N apps with a 20-product catalog each (4 subscription groups
// of 4 auto-renewables, 2 non-renewing, 2 non-consumables), a shared secret per app, READ, INGEST
// and ADMIN API keys, and deterministic, varied purchase histories for U users (10 transactions
// per user on average, exactly 10 × U in all), written through the SQLite store's API so that the
// schema is the store's own. A real `substatusd --data-dir DIR` then opens it.
//
// It also registers `app-naive` (bundle `com.example.naive`) with the catalog the bench registers
// in appstore-sim, for the verifyReceipt comparison, and writes DIR/bench.json: the keys, apps,
// products, shared secrets, the `as_of_ms` the histories are built around, and a sample of
// subscriptions (user, original transaction id) for notification load.
//
// Usage: swift build -c release --product substatus-e2e-datagen
//        .build/release/substatus-e2e-datagen --dir DIR [--users N] [--apps N] [--as-of MS]
import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite

/// Bumped whenever the generated data changes, so that scripts/bench_e2e.py rebuilds its cache.
let generatorVersion = 2  // 2: UUID user ids (users.txt)

@Sendable func argument(_ name: String) -> String? {
  let args = CommandLine.arguments
  guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
  return args[i + 1]
}

guard let dir = argument("--dir") else {
  FileHandle.standardError.write(
    Data("usage: substatus-e2e-datagen --dir DIR [--users N] [--apps N] [--as-of MS]\n".utf8))
  exit(2)
}
let userCount = Int(argument("--users") ?? "") ?? 100_000
let appCount = Int(argument("--apps") ?? "") ?? 10
let writers = 8
let usersPerCall = 50

let day: Int64 = 86_400_000
/// The instant the histories are built around and written at (`--as-of MS`, default
/// 2026-01-01T00:00:00Z): scripts/bench_e2e.py passes the day it runs, so that the summaries written
/// with the data still answer when its loads ask at the server's clock, as apps do.
let asOf: Int64 = Int64(argument("--as-of") ?? "") ?? 1_767_225_600_000
let tenantId = "bench"
let keys = (
  read: "sk_bench_read_0123456789abcdef0123456789abcdef",
  ingest: "sk_bench_ingest_0123456789abcdef0123456789abcdef",
  admin: "sk_bench_admin_0123456789abcdef0123456789abcdef"
)

/// SplitMix64: a deterministic stream per user.
struct SplitMix64: RandomNumberGenerator {
  var state: UInt64
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
  mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

@Sendable func appId(_ a: Int) -> String { "app-\(a)" }
/// User `i`'s id: a version-4 UUID in lowercase (what apps send, e.g. StoreKit's
/// `appAccountToken`), random-looking but fixed by `i`. The load generator reads them from
/// `users.txt` (one per line, in index order), never recomputes them.
@Sendable func userId(_ i: Int) -> String {
  var rng = SplitMix64(state: UInt64(i) &* 0x9FB2_1C65_1E98_DF25 &+ 0x5851_F42D_4C95_7F2D)
  let hi = rng.next(), lo = rng.next()
  func hex(_ v: UInt64, _ digits: Int) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: max(0, digits - s.count)) + s
  }
  let version = (hi & ~0xF000) | 0x4000  // xxxxxxxx-xxxx-4xxx
  let variant = (lo & ~(0xC << 60)) | (0x8 << 60)  // 8, 9, a or b
  return "\(hex(version >> 32, 8))-\(hex((version >> 16) & 0xFFFF, 4))-\(hex(version & 0xFFFF, 4))-"
    + "\(hex(variant >> 48, 4))-\(hex(variant & 0xFFFF_FFFF_FFFF, 12))"
}
@Sendable func bundleId(_ a: Int) -> String { "com.example.app\(a)" }
@Sendable func groupId(_ a: Int, _ g: Int) -> String { String(21_000_000 + a * 10 + g) }

let periods: [(suffix: String, duration: String, ms: Int64)] = [
  ("weekly", "P1W", 7 * day), ("monthly", "P1M", 30 * day), ("quarterly", "P3M", 91 * day),
  ("yearly", "P1Y", 365 * day),
]

/// The 20-product catalog of app `a`.
@Sendable func catalog(_ a: Int, bundle: String) -> [Product] {
  var products: [Product] = []
  for g in 0..<4 {
    for p in periods {
      products.append(
        Product(
          productId: "\(bundle).g\(g).\(p.suffix)", type: .autoRenewable,
          subscriptionGroupId: groupId(a, g),
          duration: try! ISO8601Duration(parsing: p.duration),
          hasIntroductoryOffer: p.suffix != "weekly",
          promotionalOfferIds: ["\(bundle).g\(g).winback"]))
    }
  }
  products.append(
    Product(
      productId: "\(bundle).pass30", type: .nonRenewing,
      duration: try! ISO8601Duration(parsing: "P30D")))
  products.append(
    Product(
      productId: "\(bundle).pass1y", type: .nonRenewing,
      duration: try! ISO8601Duration(parsing: "P1Y")))
  products.append(Product(productId: "\(bundle).lifetime", type: .nonConsumable))
  products.append(Product(productId: "\(bundle).theme", type: .nonConsumable))
  return products
}

/// A subscription the notification benchmark can renew.
struct Chain: Sendable {
  var appId: String
  var userId: String
  var originalTransactionId: String
  var productId: String
  var groupId: String
  var expiresMs: Int64
}

/// How many transactions user `i` gets: 10 ± d, where users 2j and 2j+1 get +d and -d, so the
/// total is exactly 10 per user.
@Sendable func transactionCount(_ i: Int) -> Int {
  var pair = SplitMix64(state: UInt64(i / 2) &* 0xA24B_AED4_963E_E407)
  let d = pair.below(8)
  return i % 2 == 0 ? 10 + d : 10 - d
}

/// User `i`'s purchases: 10% only one-time purchases, the others one or two subscription chains
/// (monthly mostly, trial first in 60%, active, lapsed, in billing retry, or refunded).
@Sendable func purchases(_ i: Int) -> (UserPurchases, [Chain]) {
  var rng = SplitMix64(state: UInt64(i) &* 0xD1B5_4A32_D192_ED03 &+ 17)
  let a = i % appCount
  let bundle = bundleId(a)
  let user = UserKey(appId: appId(a), environment: .production, userId: userId(i))
  let n = transactionCount(i)
  var nextId = 4_000_000_000_000_000 + i * 32
  var transactions: [Transaction] = []
  var renewals: [RenewalInfo] = []
  var chains: [Chain] = []
  let kind = rng.below(100)
  if kind < 10 {
    // One-time purchases: a lifetime unlock or a theme, then 30-day passes.
    let first = asOf - Int64(rng.below(700)) * day
    transactions.append(
      Transaction(
        transactionId: String(nextId), productId: "\(bundle).\(kind < 5 ? "lifetime" : "theme")",
        purchaseDate: first,
        inAppOwnershipType: .purchased, environment: .production, type: .nonConsumable,
        bundleId: bundle,
        signedDate: first))
    nextId += 1
    for k in 0..<(n - 1) {
      let at = first + Int64(k) * 35 * day
      transactions.append(
        Transaction(
          transactionId: String(nextId), productId: "\(bundle).pass30", purchaseDate: at,
          expiresDate: at + 30 * day,
          inAppOwnershipType: .purchased, environment: .production, type: .nonRenewing,
          bundleId: bundle,
          signedDate: at))
      nextId += 1
    }
    return (UserPurchases(user: user, transactions: transactions), [])
  }
  let lengths = kind < 30 && n >= 6 ? [n / 2, n - n / 2] : [n]
  let firstGroup = rng.below(4)
  for (c, length) in lengths.enumerated() {
    let g = (firstGroup + c) % 4
    let roll = rng.below(100)
    let period =
      roll < 60 ? periods[1] : roll < 75 ? periods[0] : roll < 85 ? periods[2] : periods[3]
    let product = "\(bundle).g\(g).\(period.suffix)"
    let state = rng.below(100)  // < 55 active, < 85 lapsed, < 93 billing retry, else refunded
    let trial = rng.below(100) < 60
    let lastExpires: Int64 =
      state < 55
      ? asOf + Int64(rng.below(Int(period.ms / day))) * day + day
      : state < 85 ? asOf - Int64(1 + rng.below(400)) * day : asOf - Int64(1 + rng.below(10)) * day
    let start = lastExpires - Int64(length) * period.ms
    let original = String(nextId)
    for k in 0..<length {
      let at = start + Int64(k) * period.ms
      let refunded = state >= 93 && k == length - 1
      transactions.append(
        Transaction(
          transactionId: String(nextId), originalTransactionId: original, productId: product,
          subscriptionGroupIdentifier: groupId(a, g), purchaseDate: at, originalPurchaseDate: start,
          expiresDate: at + period.ms, isTrialPeriod: trial && k == 0,
          offerType: trial && k == 0 ? .introductory : nil,
          offerDiscountType: trial && k == 0 ? .freeTrial : nil,
          revocationDate: refunded ? at + 3 * day : nil,
          revocationReason: refunded ? .other : nil, revocationType: refunded ? .refundFull : nil,
          inAppOwnershipType: .purchased, environment: .production,
          webOrderLineItemId: String(5_000_000_000_000_000 + i * 32 + transactions.count),
          type: .autoRenewable,
          bundleId: bundle, signedDate: at))
      nextId += 1
    }
    let retry = state >= 85 && state < 93
    renewals.append(
      RenewalInfo(
        originalTransactionId: original, productId: product, autoRenewProductId: product,
        autoRenewStatus: state < 55 || retry ? .on : .off,
        expirationIntent: state < 55 ? nil : retry ? .billingError : .customerCancelled,
        isInBillingRetryPeriod: retry, gracePeriodExpiresDate: retry ? lastExpires + 16 * day : nil,
        environment: .production, renewalDate: state < 55 ? lastExpires : nil,
        recentSubscriptionStartDate: start))
    chains.append(
      Chain(
        appId: user.appId, userId: user.userId, originalTransactionId: original, productId: product,
        groupId: groupId(a, g), expiresMs: lastExpires))
  }
  return (UserPurchases(user: user, transactions: transactions, renewalInfos: renewals), chains)
}

@Sendable func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

@Sendable func generate() async throws {
  try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
  let keyring = try MasterKeyring.loadOrCreate(file: dir + "/master.key")
  let store = try SQLiteStore(configuration: .dataDirectory(dir, keyring: keyring))
  defer { store.close() }
  try await store.createTenant(TenantRecord(tenantId: tenantId, name: "bench", createdMs: asOf))
  var apps: [[String: Any]] = []
  for a in 0...appCount {
    // The last one is app-naive, whose catalog matches what the bench registers in appstore-sim.
    let naive = a == appCount
    let id = naive ? "app-naive" : appId(a)
    let bundle = naive ? "com.example.naive" : bundleId(a)
    let secret = "bench-secret-\(id)-0123456789abcdef"
    try await store.createApp(
      AppRecord(appId: id, tenantId: tenantId, bundleId: bundle, displayName: id, createdMs: asOf))
    let products = catalog(a, bundle: bundle)
    try await store.putProducts(appId: id, products: products)
    _ = try await store.setSharedSecret(
      appId: id, secret: secret, atMs: asOf, previousValidUntilMs: 0)
    apps.append([
      "app_id": id, "bundle_id": bundle, "shared_secret": secret,
      "products": products.map { p -> [String: Any] in
        var o: [String: Any] = ["product_id": p.productId, "type": p.type.rawValue]
        if let g = p.subscriptionGroupId { o["subscription_group_id"] = g }
        if let d = p.duration { o["duration"] = d.description }
        o["intro"] = p.hasIntroductoryOffer
        return o
      },
    ])
  }
  for (n, (key, role)) in [
    (keys.read, ApiKeyRecord.Role.read), (keys.ingest, .ingest), (keys.admin, .admin),
  ].enumerated() {
    try await store.createApiKey(
      ApiKeyRecord(
        keyId: "bench-key-\(n)", tenantId: tenantId, role: role, description: "bench",
        keyHash: SHA256.hash(key),
        displayPrefix: String(key.prefix(12)), createdMs: asOf))
  }

  let t0 = now()
  let calls = (userCount + usersPerCall - 1) / usersPerCall
  let sample = try await withThrowingTaskGroup(of: [Chain].self) { group in
    for w in 0..<writers {
      group.addTask {
        var sample: [Chain] = []
        var call = w
        while call < calls {
          let first = call * usersPerCall
          let made = (first..<min(first + usersPerCall, userCount)).map(purchases)
          _ = try await store.ingest(made.map(\.0), atMs: asOf)
          if sample.count < 1000 { sample += made.flatMap(\.1).filter { $0.expiresMs > asOf } }
          call += writers
        }
        return sample
      }
    }
    var all: [Chain] = []
    for try await s in group { all += s }
    return all.sorted {
      ($0.appId, $0.userId, $0.originalTransactionId) < (
        $1.appId, $1.userId, $1.originalTransactionId
      )
    }
  }
  let elapsed = now() - t0

  let spec: [String: Any] = [
    "generator_version": generatorVersion, "users": userCount, "apps": appCount,
    "transactions": userCount * 10,
    "as_of_ms": asOf, "tenant_id": tenantId,
    "keys": ["read": keys.read, "ingest": keys.ingest, "admin": keys.admin],
    "user_ids": "users.txt",
    "user_id_format": "version-4 UUIDs, one per line of users.txt in index order; app index = user index % apps",
    "apps_detail": apps,
    "chains": sample.prefix(8000).map { c -> [String: Any] in
      [
        "app_id": c.appId, "user_id": c.userId, "original_transaction_id": c.originalTransactionId,
        "product_id": c.productId, "subscription_group_id": c.groupId, "expires_ms": c.expiresMs,
      ]
    },
  ]
  let json = try JSONSerialization.data(withJSONObject: spec, options: [.sortedKeys])
  try json.write(to: URL(fileURLWithPath: dir + "/bench.json"))
  try (0..<userCount).map(userId).joined(separator: "\n").appending("\n")
    .write(toFile: dir + "/users.txt", atomically: true, encoding: .utf8)
  print(
    String(
      format:
        "substatus-e2e-datagen: %d users, %d transactions, %d apps in %.1f s (%.0f transactions/s)",
      userCount,
      userCount * 10, appCount, elapsed, Double(userCount * 10) / elapsed))
}

try await Task.detached { try await generate() }.value
