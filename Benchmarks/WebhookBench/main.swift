// Webhook delivery throughput to a local receiver (DESIGN "Performance": ≥ 5,000 events/s):
// N users' first purchases logged in a SQLite store, one webhook at a receiver on this machine
// (the project's HTTP server, answering 204 at once), the dispatcher started, and the time until
// every delivery is recorded DELIVERED. Run the release build:
//
//   swift build -c release --product substatus-webhook-bench
//   .build/release/substatus-webhook-bench --events 5000 [--per-user K] [--per-webhook N] [--json]
//
// --ingest [--users U] [--per-user K] [--no-events] measures ingest instead: U users' K monthly
// transactions into a fresh store, 100 users per commit, with the event log on or off (the store's
// bench-only `logsEvents`), and prints the process's CPU per transaction (derivation's overhead).
//
// --per-user K gives each user K events (one purchase, then renewals), delivered in order per user
// (K store round trips per user); --per-webhook N is the POSTs in flight (the dispatcher's default
// otherwise); --json prints one JSON object (scripts/bench_events.py reads it).
import Foundation
import HTTPServer
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubstatusService
import Synchronization

var events = 5000
var perUser = 1
var perWebhook = WebhookDispatcher.Configuration().maxInFlightPerWebhook
var json = false
var ingestOnly = false
var users = 2000
var logsEvents = true
var arguments = CommandLine.arguments.dropFirst()
while let arg = arguments.popFirst() {
  if arg == "--events", let n = arguments.popFirst().flatMap(Int.init) { events = n }
  if arg == "--per-user", let n = arguments.popFirst().flatMap(Int.init) { perUser = max(1, n) }
  if arg == "--per-webhook", let n = arguments.popFirst().flatMap(Int.init) { perWebhook = n }
  if arg == "--json" { json = true }
  if arg == "--ingest" { ingestOnly = true }
  if arg == "--users", let n = arguments.popFirst().flatMap(Int.init) { users = max(1, n) }
  if arg == "--no-events" { logsEvents = false }
}

/// CPU seconds of this process (user + system).
func cpuSeconds() -> Double {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
    + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-bench-\(UUID().uuidString)").path
try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }
var storeConfiguration = SQLiteStore.Configuration(
  path: directory + "/bench.sqlite", keyring: MasterKeyring(current: MasterKey.generate()))
storeConfiguration.logsEvents = logsEvents
let store = try SQLiteStore(configuration: storeConfiguration)
defer { store.close() }
let now = Int64(Date().timeIntervalSince1970 * 1000)
try await store.createTenant(TenantRecord(tenantId: "t1", name: "bench", createdMs: now))
try await store.createApp(AppRecord(appId: "a1", tenantId: "t1", bundleId: "com.example.bench", createdMs: now))

let month: Int64 = 30 * 86_400_000
/// User `i`'s `k` monthly periods, the last ending in the future: a start, then renewals.
func purchases(_ i: Int, _ k: Int) -> UserPurchases {
  let first = now - Int64(k - 1) * month - 86_400_000
  return UserPurchases(
    user: UserKey(appId: "a1", environment: .production, userId: "user\(i)"),
    transactions: (0..<k).map { n in
      let purchase = first + Int64(n) * month
      return Transaction(
        transactionId: "t\(i)-\(n)", originalTransactionId: "t\(i)-0", productId: "monthly",
        subscriptionGroupIdentifier: "g1", purchaseDate: purchase, expiresDate: purchase + month,
        environment: .production, signedDate: purchase)
    })
}

if ingestOnly {
  let started = ContinuousClock.now
  let cpuBefore = cpuSeconds()
  var appended = 0
  for start in stride(from: 0, to: users, by: 100) {
    let summary = try await store.ingest((start..<min(start + 100, users)).map { purchases($0, perUser) }, atMs: now)
    appended += summary.eventsAppended
  }
  let cpu = cpuSeconds() - cpuBefore
  let elapsed = ContinuousClock.now - started
  let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
  let transactions = users * perUser
  if json {
    print(
      "{\"transactions\": \(transactions), \"events\": \(appended), \"seconds\": \(seconds), "
        + "\"cpu_seconds\": \(cpu), \"logs_events\": \(logsEvents)}")
  } else {
    print(
      "ingest: \(transactions) transactions of \(users) users, event log \(logsEvents ? "on" : "off"): "
        + "\(String(format: "%.1f", cpu * 1e6 / Double(transactions))) µs CPU per transaction, \(appended) events, "
        + "\(String(format: "%.2f", seconds)) s")
  }
  store.close()
  try? FileManager.default.removeItem(atPath: directory)
  exit(0)
}

let received = Atomic<Int>(0)
let receiver = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
  received.add(1, ordering: .relaxed)
  return HTTPResponse(status: 204)
}

try await store.createWebhook(
  WebhookRecord(webhookId: "w1", appId: "a1", url: "http://\(receiver.address)/hook", createdMs: now),
  signingSecret: WebhookSigning.newSecret(randomBytes: SecureRandom.bytes))
var batch: [UserPurchases] = []
for i in 0..<max(1, events / perUser) {
  batch.append(purchases(i, perUser))
  if batch.count == 500 {
    _ = try await store.ingest(batch, atMs: now)
    batch = []
  }
}
if !batch.isEmpty { _ = try await store.ingest(batch, atMs: now) }
let logged = try await store.lastEventSequence()

let delivered = Atomic<Int>(0)
let dispatcher = WebhookDispatcher(
  store: store, environment: .live,
  configuration: .init(maxInFlightPerWebhook: perWebhook, urlPolicy: WebhookURLPolicy(allowPrivateAddresses: true)),
  onAttempt: { report in if report.state == .delivered { delivered.add(1, ordering: .relaxed) } })
let started = ContinuousClock.now
let cpuBefore = cpuSeconds()
let task = Task { await dispatcher.run() }
dispatcher.notifyEventsAppended()
while delivered.load(ordering: .relaxed) < Int(logged), ContinuousClock.now - started < .seconds(120) {
  try await Task.sleep(for: .milliseconds(5))
}
let elapsed = ContinuousClock.now - started
let cpu = cpuSeconds() - cpuBefore
let connections = receiver.openConnections  // kept alive: about the POSTs in flight
dispatcher.beginGracefulShutdown()
await task.value
await receiver.stop(gracePeriod: .seconds(1))
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
let count = delivered.load(ordering: .relaxed)
if json {
  print(
    "{\"events\": \(logged), \"delivered\": \(count), \"seconds\": \(seconds), \"cpu_seconds\": \(cpu), "
      + "\"requests\": \(received.load(ordering: .relaxed)), \"per_user\": \(perUser), \"in_flight\": \(perWebhook), \"connections\": \(connections)}")
} else {
  print(
    "webhook delivery: \(count) of \(logged) events delivered in \(String(format: "%.2f", seconds)) s: "
      + "\(String(format: "%.0f", Double(count) / seconds)) events/s, \(String(format: "%.0f", cpu * 1e6 / Double(max(count, 1)))) "
      + "µs CPU per event (sender and receiver in this process; requests received \(received.load(ordering: .relaxed)), "
      + "\(perUser) per user, \(perWebhook) in flight, \(connections) connections open)")
}
