// substatus-storage-bench: fills a store (SQLite by default, or PostgreSQL with
// `--store postgres://...`) with transactions (default 1,000,000 for 100,000 users across 10 apps,
// 10 transactions and one renewal info per user, each user ingested whole in one batch entry) and
// reports durable ingest throughput, single-user history latency at 10k, 100k and 1M transactions,
// concurrent read throughput, notification apply and user listing latency, database size and RSS.
// The last line, `summary: {...}`, repeats the main figures as JSON (scripts/bench_postgres.py).
//
// Usage: swift build -c release --product substatus-storage-bench
//        .build/release/substatus-storage-bench [--transactions N] [--apps N] [--dir DIR]
//          [--writers N] [--users-per-call N] [--samples N] [--synchronous full|normal]
//          [--integrity-check] [--store sqlite|postgres://USER@HOST:PORT/DB] [--pool-size N]
import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStoragePostgres
import SubscriptionStorageSQLite

func argument(_ name: String) -> String? {
  let args = CommandLine.arguments
  guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
  return args[i + 1]
}

let totalTransactions = Int(argument("--transactions") ?? "") ?? 1_000_000
let appCount = Int(argument("--apps") ?? "") ?? 10
let perUser = 10
let userCount = totalTransactions / perUser
let writers = Int(argument("--writers") ?? "") ?? 8
let usersPerCall = Int(argument("--users-per-call") ?? "") ?? 10
let samples = Int(argument("--samples") ?? "") ?? 2000
let synchronous: SQLiteStore.Configuration.Synchronous =
  argument("--synchronous") == "normal" ? .normal : .full
let keepDir = argument("--dir")
let dir =
  keepDir
  ?? (NSTemporaryDirectory()
    + "substatus-storage-bench-\(ProcessInfo.processInfo.processIdentifier)")
try? FileManager.default.removeItem(atPath: dir)
try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
let dbPath = dir + "/bench.sqlite"
let storeArgument = argument("--store") ?? "sqlite"
let postgresURL = storeArgument.hasPrefix("postgres") ? storeArgument : nil
let poolSize = Int(argument("--pool-size") ?? "") ?? 4
/// The main figures, printed as JSON at the end.
nonisolated(unsafe) var summary: [String: Double] = [:]

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// CPU seconds (user + system) this process has used, all threads.
func cpuSeconds() -> Double {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
  return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

func rssKiB() -> (current: Int, peak: Int) {
  guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else {
    return (0, 0)
  }
  func field(_ name: String) -> Int {
    for line in status.split(separator: "\n") where line.hasPrefix(name) {
      return Int(line.split(separator: " ").dropFirst().first { Int($0) != nil } ?? "") ?? 0
    }
    return 0
  }
  return (field("VmRSS:"), field("VmHWM:"))
}

func fileSize(_ path: String) -> Int {
  ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
}

/// When the ingests happen (the events' detection time): after every generated purchase.
let ingestMs: Int64 = 1_800_000_000_000

/// The user with global index `i`: app `i % appCount`, id `user-<i>`.
func userKey(_ i: Int) -> UserKey {
  UserKey(appId: "app-\(i % appCount)", environment: .production, userId: "user-\(i)")
}

/// Ten transactions (a monthly subscription renewing, the first a free trial) and a renewal info.
func purchases(_ i: Int) -> UserPurchases {
  let app = i % appCount
  let base: Int64 = 1_700_000_000_000 + Int64(i) * 1000
  let original = String(2_000_000_000_000_000 + i * perUser)
  var transactions: [Transaction] = []
  for k in 0..<perUser {
    let start = base + Int64(k) * 2_592_000_000
    transactions.append(
      Transaction(
        transactionId: String(2_000_000_000_000_000 + i * perUser + k),
        originalTransactionId: original,
        productId: "com.example.app\(app).monthly", subscriptionGroupIdentifier: "2100\(app)",
        purchaseDate: start, originalPurchaseDate: base, expiresDate: start + 2_592_000_000,
        isTrialPeriod: k == 0, inAppOwnershipType: .purchased, environment: .production,
        webOrderLineItemId: String(3_000_000_000_000_000 + i * perUser + k), quantity: 1,
        type: .autoRenewable, bundleId: "com.example.app\(app)", signedDate: start + 1000))
  }
  let renewal = RenewalInfo(
    originalTransactionId: original, productId: "com.example.app\(app).monthly",
    autoRenewProductId: "com.example.app\(app).monthly", autoRenewStatus: .on,
    environment: .production, signedDate: base + 1000)
  return UserPurchases(user: userKey(i), transactions: transactions, renewalInfos: [renewal])
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
  guard !sorted.isEmpty else { return 0 }
  return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

struct LatencyReport {
  var transactions: Int
  var p50: Double
  var p99: Double
  var mean: Double
  var readsPerSecond: Double
}

/// Sequential single-user history reads of random existing users, then 4-way concurrent reads.
func measureReads(_ store: any Store, users: Int) async throws -> LatencyReport {
  var generator = SystemRandomNumberGenerator()
  var latencies: [Double] = []
  latencies.reserveCapacity(samples)
  for _ in 0..<samples {
    let i = Int.random(in: 0..<users, using: &generator)
    let t0 = now()
    let h = try await store.history(of: userKey(i))
    latencies.append(now() - t0)
    precondition(
      h.transactions.count == perUser, "user \(i) has \(h.transactions.count) transactions")
  }
  latencies.sort()
  let concurrentReads = 4 * (samples / 2)
  let t0 = now()
  try await withThrowingTaskGroup(of: Void.self) { group in
    for _ in 0..<4 {
      group.addTask {
        var g = SystemRandomNumberGenerator()
        for _ in 0..<(samples / 2) {
          _ = try await store.history(of: userKey(Int.random(in: 0..<users, using: &g)))
        }
      }
    }
    try await group.waitForAll()
  }
  let elapsed = now() - t0
  return LatencyReport(
    transactions: users * perUser, p50: percentile(latencies, 0.5) * 1e6,
    p99: percentile(latencies, 0.99) * 1e6,
    mean: latencies.reduce(0, +) / Double(latencies.count) * 1e6,
    readsPerSecond: Double(concurrentReads) / elapsed)
}

/// The whole run, off the main actor so that store calls are measured without main-actor hops.
@Sendable func runBench() async throws {
  let sqlite: SQLiteStore?
  let postgres: PostgresStore?
  if let postgresURL {
    sqlite = nil
    postgres = try PostgresStore(configuration: .init(url: postgresURL, poolSize: poolSize))
  } else {
    sqlite = try SQLiteStore(
      configuration: .init(path: dbPath, readerCount: 4, synchronous: synchronous))
    postgres = nil
  }
  let store: any Store = sqlite ?? postgres!
  try await store.createTenant(TenantRecord(tenantId: "bench", name: "bench", createdMs: 0))
  for a in 0..<appCount {
    try await store.createApp(
      AppRecord(appId: "app-\(a)", tenantId: "bench", bundleId: "com.example.app\(a)", createdMs: 0)
    )
  }

  print(
    "substatus-storage-bench: \(totalTransactions) transactions, \(userCount) users, \(appCount) apps"
  )
  print(
    postgres == nil
      ? "  SQLite, synchronous=\(synchronous.rawValue), \(writers) concurrent writers, \(usersPerCall) users (\(usersPerCall * perUser) transactions) per ingest call"
      : "  PostgreSQL, \(poolSize) connections, \(writers) concurrent writers, \(usersPerCall) users (\(usersPerCall * perUser) transactions) per ingest call"
  )

  let checkpoints =
    [10_000, 100_000, 1_000_000].filter { $0 <= totalTransactions }
    + ([10_000, 100_000, 1_000_000].contains(totalTransactions) ? [] : [totalTransactions])
  var reports: [LatencyReport] = []
  var filledUsers = 0
  var ingestSeconds = 0.0
  let commitsBefore = sqlite?.groupCommitStatistics ?? (commits: 0, writes: 0)
  for checkpoint in checkpoints {
    let targetUsers = checkpoint / perUser
    let t0 = now()
    let cpu0 = cpuSeconds()
    let next = filledUsers
    let calls = (targetUsers - next + usersPerCall - 1) / usersPerCall
    try await withThrowingTaskGroup(of: Void.self) { group in
      for w in 0..<writers {
        group.addTask {
          var call = w
          while call < calls {
            let first = next + call * usersPerCall
            let last = min(first + usersPerCall, targetUsers)
            _ = try await store.ingest((first..<last).map(purchases), atMs: ingestMs)
            call += writers
          }
        }
      }
      try await group.waitForAll()
    }
    let elapsed = now() - t0
    let cpu = cpuSeconds() - cpu0
    ingestSeconds += elapsed
    let written = (targetUsers - filledUsers) * perUser
    filledUsers = targetUsers
    print(
      String(
        format: "  filled to %9d transactions: +%d in %.2f s = %.0f transactions/s, %.2f CPU s (%.1f µs per transaction)",
        checkpoint, written, elapsed, Double(written) / elapsed, cpu, cpu * 1e6 / Double(written)))
    summary["ingest_cpu_us_per_tx"] = cpu * 1e6 / Double(written)
    let report = try await measureReads(store, users: filledUsers)
    reports.append(report)
    print(
      String(
        format:
          "    history of one user (10 tx + renewal info): p50 %.0f µs, p99 %.0f µs, mean %.0f µs; 4 concurrent readers: %.0f reads/s",
        report.p50, report.p99, report.mean, report.readsPerSecond))
    summary["history_p50_us"] = report.p50
    summary["history_p99_us"] = report.p99
    summary["concurrent_reads_per_s"] = report.readsPerSecond
  }
  // The other reads on the eligibility path: the app (with its policy) and its catalog of 20 products.
  try await store.putProducts(
    appId: "app-0",
    products: (0..<20).map { p in
      Product(
        productId: "com.example.app0.p\(p)", type: .autoRenewable, subscriptionGroupId: "g\(p % 3)",
        duration: try! ISO8601Duration(parsing: "P1M"), hasIntroductoryOffer: true,
        promotionalOfferIds: ["promo1", "promo2"])
    })
  func measure(_ label: String, key: String? = nil, _ body: (Int) async throws -> Void)
    async throws
  {
    var latencies: [Double] = []
    for i in 0..<samples {
      let t0 = now()
      try await body(i)
      latencies.append(now() - t0)
    }
    latencies.sort()
    print(
      String(
        format: "  %@: p50 %.1f µs, p99 %.1f µs", label, percentile(latencies, 0.5) * 1e6,
        percentile(latencies, 0.99) * 1e6))
    if let key {
      summary[key + "_p50_us"] = percentile(latencies, 0.5) * 1e6
      summary[key + "_p99_us"] = percentile(latencies, 0.99) * 1e6
    }
  }
  try await measure("app(id:) with policy", key: "app") { _ in
    _ = try await store.app(id: "app-0")
  }
  try await measure("products(appId:), 20 products") { _ in
    _ = try await store.products(appId: "app-0")
  }
  try await measure(
    "isNotificationProcessed (one PK probe: the reader round trip)", key: "notification_seen"
  ) { _ in
    _ = try await store.isNotificationProcessed(appId: "app-0", notificationId: "n")
  }
  try await measure("apiKey(hash:) miss") { _ in
    _ = try await store.apiKey(hash: SHA256.hash("nope"))
  }
  try await measure("histories of 10 users in one read", key: "histories10") { _ in
    _ = try await store.histories(
      appId: "app-0", environment: .production, userIds: (0..<10).map { "user-\($0 * appCount)" })
  }
  // A notification: a new id and one user's renewal (the user's newest transaction again, newer
  // signed), deduplicated and upserted in one durable commit; one at a time.
  try await measure("applyNotification (new id, one user's renewal, committed)", key: "notification")
  { i in
    var update = purchases(i % filledUsers)
    update.transactions = [update.transactions[perUser - 1]]
    update.transactions[0].signedDate = (update.transactions[0].signedDate ?? 0) + Int64(i) + 1
    let applied = try await store.applyNotification(
      appId: update.user.appId, notificationId: "bench-\(i)", receivedMs: Int64(i),
      updates: [update])
    precondition(applied != nil)
  }
  try await measure("listUsers, a page of 100 (reports)", key: "list_users") { i in
    _ = try await store.listUsers(
      appId: "app-\(i % appCount)", environment: .production, page: PageRequest(size: 100))
  }

  let commitsAfter = sqlite?.groupCommitStatistics ?? (commits: 0, writes: 0)
  let rss = rssKiB()
  let ingestRate = Double(filledUsers * perUser) / ingestSeconds
  summary["transactions"] = Double(filledUsers * perUser)
  summary["ingest_tx_per_s"] = ingestRate
  if sqlite != nil {
    print(
      String(
        format:
          "ingest overall: %d transactions in %.2f s = %.0f transactions/s durably committed (%d commits, %.1f calls per commit)",
        filledUsers * perUser, ingestSeconds, ingestRate,
        commitsAfter.commits - commitsBefore.commits,
        Double(commitsAfter.writes - commitsBefore.writes)
          / Double(max(1, commitsAfter.commits - commitsBefore.commits))))
    let dbBytes = fileSize(dbPath)
    let walBytes = fileSize(dbPath + "-wal")
    summary["db_bytes"] = Double(dbBytes)
    summary["wal_bytes"] = Double(walBytes)
    print(
      String(
        format: "database: %.1f MB (+ WAL %.1f MB), %.0f bytes per transaction",
        Double(dbBytes) / 1e6, Double(walBytes) / 1e6,
        Double(dbBytes) / Double(filledUsers * perUser)))
  } else if let postgres {
    print(
      String(
        format:
          "ingest overall: %d transactions in %.2f s = %.0f transactions/s durably committed (one transaction per ingest call)",
        filledUsers * perUser, ingestSeconds, ingestRate))
    let dbBytes = try await postgres.databaseSize()
    summary["db_bytes"] = Double(dbBytes)
    print(
      String(
        format: "database: %.1f MB (pg_database_size, with catalogs; WAL apart), %.0f bytes per transaction",
        Double(dbBytes) / 1e6, Double(dbBytes) / Double(filledUsers * perUser)))
  }
  summary["rss_mb"] = Double(rss.peak) / 1024
  print(
    String(
      format: "process RSS: %.1f MB now, %.1f MB peak", Double(rss.current) / 1024,
      Double(rss.peak) / 1024))
  // Mixed load: writers keep ingesting new users while 4 readers read existing histories.
  let mixedSeconds = 3.0
  let mixedStart = now()
  try await withThrowingTaskGroup(of: (Int, [Double]).self) { group in
    let base = filledUsers
    for w in 0..<writers {
      group.addTask {
        var users = 0
        var call = 0
        while now() - mixedStart < mixedSeconds {
          let first = base + (call * writers + w) * usersPerCall
          _ = try await store.ingest((first..<(first + usersPerCall)).map(purchases), atMs: ingestMs)
          users += usersPerCall
          call += 1
        }
        return (users * perUser, [])
      }
    }
    for _ in 0..<4 {
      group.addTask {
        var g = SystemRandomNumberGenerator()
        var latencies: [Double] = []
        while now() - mixedStart < mixedSeconds {
          let t0 = now()
          _ = try await store.history(of: userKey(Int.random(in: 0..<base, using: &g)))
          latencies.append(now() - t0)
        }
        return (0, latencies)
      }
    }
    var total = 0
    var latencies: [Double] = []
    for try await (n, l) in group {
      total += n
      latencies += l
    }
    latencies.sort()
    print(
      String(
        format:
          "mixed load %.0f s, %d writers + 4 readers: %.0f transactions/s ingested while %.0f history reads/s (p50 %.0f µs, p99 %.0f µs)",
        mixedSeconds, writers, Double(total) / mixedSeconds, Double(latencies.count) / mixedSeconds,
        percentile(latencies, 0.5) * 1e6, percentile(latencies, 0.99) * 1e6))
    summary["mixed_ingest_tx_per_s"] = Double(total) / mixedSeconds
    summary["mixed_reads_per_s"] = Double(latencies.count) / mixedSeconds
    summary["mixed_read_p99_us"] = percentile(latencies, 0.99) * 1e6
  }
  let integrityStart = now()
  if let sqlite, CommandLine.arguments.contains("--integrity-check") {
    print(
      "integrity_check: \(try await sqlite.integrityCheck()) in \(String(format: "%.1f", now() - integrityStart)) s"
    )
  }
  let json = summary.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \($0.value)" }
  print("summary: {\(json.joined(separator: ", "))}")
  sqlite?.close()
  postgres?.close()
  if keepDir == nil { try? FileManager.default.removeItem(atPath: dir) }
}

try await Task.detached { try await runBench() }.value
