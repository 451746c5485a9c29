// Webhook delivery throughput to a local receiver (DESIGN "Performance": ≥ 5,000 events/s):
// N users' first purchases logged in a SQLite store, one webhook at a receiver on this machine
// (the project's HTTP server, answering 204 at once), the dispatcher started, and the time until
// every delivery is recorded DELIVERED. Run the release build:
//
//   swift build -c release --product substatus-webhook-bench
//   .build/release/substatus-webhook-bench --events 5000 [--per-webhook N]   (POSTs in flight, default 4)
import Foundation
import HTTPServer
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubstatusService
import Synchronization

var events = 5000
var perWebhook = 4
var arguments = CommandLine.arguments.dropFirst()
while let arg = arguments.popFirst() {
  if arg == "--events", let n = arguments.popFirst().flatMap(Int.init) { events = n }
  if arg == "--per-webhook", let n = arguments.popFirst().flatMap(Int.init) { perWebhook = n }
}

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-bench-\(UUID().uuidString)").path
try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }
let store = try SQLiteStore(
  configuration: .init(path: directory + "/bench.sqlite", keyring: MasterKeyring(current: MasterKey.generate())))
defer { store.close() }

let received = Atomic<Int>(0)
let receiver = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
  received.add(1, ordering: .relaxed)
  return HTTPResponse(status: 204)
}

let now = Int64(Date().timeIntervalSince1970 * 1000)
try await store.createTenant(TenantRecord(tenantId: "t1", name: "bench", createdMs: now))
try await store.createApp(AppRecord(appId: "a1", tenantId: "t1", bundleId: "com.example.bench", createdMs: now))
try await store.createWebhook(
  WebhookRecord(webhookId: "w1", appId: "a1", url: "http://\(receiver.address)/hook", createdMs: now),
  signingSecret: WebhookSigning.newSecret(randomBytes: SecureRandom.bytes))
var batch: [UserPurchases] = []
for i in 0..<events {
  let purchase = now - 86_400_000
  batch.append(
    UserPurchases(
      user: UserKey(appId: "a1", environment: .production, userId: "user\(i)"),
      transactions: [
        Transaction(
          transactionId: "t\(i)", originalTransactionId: "t\(i)", productId: "monthly", subscriptionGroupIdentifier: "g1",
          purchaseDate: purchase, expiresDate: purchase + 30 * 86_400_000, environment: .production, signedDate: purchase)
      ]))
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
let task = Task { await dispatcher.run() }
dispatcher.notifyEventsAppended()
while delivered.load(ordering: .relaxed) < Int(logged), ContinuousClock.now - started < .seconds(120) {
  try await Task.sleep(for: .milliseconds(5))
}
let elapsed = ContinuousClock.now - started
dispatcher.beginGracefulShutdown()
await task.value
await receiver.stop(gracePeriod: .seconds(1))
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
let count = delivered.load(ordering: .relaxed)
print(
  "webhook delivery: \(count) of \(logged) events delivered in \(String(format: "%.2f", seconds)) s: "
    + "\(String(format: "%.0f", Double(count) / seconds)) events/s (requests received \(received.load(ordering: .relaxed)))")
