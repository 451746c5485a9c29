// Events out benchmarks (docs/architecture.md "Performance"): webhook delivery throughput to a
// local receiver (≥ 5,000 events/s), derivation's overhead on ingest, and WatchEvents fan-out. Run
// the release build:
//
//   swift build -c release --product substatus-webhook-bench
//   .build/release/substatus-webhook-bench --events 5000 [--per-user K] [--per-webhook N] [--in-process-receiver] [--json]
//   .build/release/substatus-webhook-bench --ingest [--users U] [--per-user K] [--no-events] [--json]
//   .build/release/substatus-webhook-bench --watch [--watchers W] [--events N] [--json]
//
// Delivery: N users' first purchases logged in a SQLite store, one webhook at a receiver on this
// machine (the project's HTTP server answering 204 at once), the dispatcher started, and the time
// until every delivery is recorded DELIVERED. The receiver runs in a child process of this binary
// (`--serve-receiver`; it inherits the CPU pinning), so the sender's CPU per event is this
// process's alone and the receiver's is reported beside it; `--in-process-receiver` runs it in
// this process instead (the CPU then is both's). --per-user K gives each user K events (one
// purchase, then renewals), delivered in order per user (K store round trips per user);
// --per-webhook N is the POSTs in flight (the dispatcher's default otherwise).
//
// Two runs split the sender's CPU in its parts: --null-poster gives the dispatcher a poster that
// answers 204 at once without any I/O (the dispatcher and the store alone); --client-only first
// lets the dispatcher run with that poster to collect its requests (URL, headers, signed body; not
// measured), then measures the outbound HTTP client (`OutboundHTTPPoster.webhooks`, libcurl, as
// the dispatcher makes it) POSTing those requests to the receiver, N in flight, with nothing else
// (the HTTP client alone).
//
// --ingest measures ingest instead: U users' K monthly transactions into a fresh store, 100 users
// per commit, with the event log on or off (the store's bench-only `logsEvents`), and prints the
// process's CPU per transaction (derivation's overhead).
//
// --watch: W WatchEvents streams on one app over the HTTP/2 transport (one client connection, the
// service on a SQLite store in this process), then N first purchases ingested 100 users per commit
// as fast as the store takes them; reports the events delivered to every watcher per second (from
// the first commit to the last watcher's last event), the lag from each commit to each watcher's
// receipt (p50, p99, max), CPU per delivered event and the peak RSS.
//
// --json prints one JSON object (scripts/bench_events.py reads it).
//
// --perf-control CTL,ACK (delivery): perf's control FIFOs; "enable" is sent just before the
// dispatcher starts and "disable" once every delivery is recorded, so counts cover the delivery
// alone (not the ingest before it):
//
//   mkfifo ctl ack
//   perf stat -D -1 --control fifo:ctl,ack -e task-clock,context-switches,probe_libc:malloc \
//     .build/release/substatus-webhook-bench --events 5000 --perf-control ctl,ack
import Foundation
import HTTPServer
import RPCCore
import RPCHTTP2Transport
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubstatusService
import SubstatusServiceAPI
import SubstatusWire
import Synchronization

var events = 5000
var perUser = 1
var perWebhook = WebhookDispatcher.Configuration().maxInFlightPerWebhook
var json = false
var ingestOnly = false
var users = 2000
var logsEvents = true
var inProcessReceiver = false
var serveReceiver = false
var watch = false
var watchers = 100
var perfControl: (control: String, ack: String)?
var nullPoster = false
var clientOnly = false
var arguments = CommandLine.arguments.dropFirst()
while let arg = arguments.popFirst() {
  if arg == "--events", let n = arguments.popFirst().flatMap(Int.init) { events = n }
  if arg == "--per-user", let n = arguments.popFirst().flatMap(Int.init) { perUser = max(1, n) }
  if arg == "--per-webhook", let n = arguments.popFirst().flatMap(Int.init) { perWebhook = n }
  if arg == "--json" { json = true }
  if arg == "--ingest" { ingestOnly = true }
  if arg == "--users", let n = arguments.popFirst().flatMap(Int.init) { users = max(1, n) }
  if arg == "--no-events" { logsEvents = false }
  if arg == "--in-process-receiver" { inProcessReceiver = true }
  if arg == "--serve-receiver" { serveReceiver = true }
  if arg == "--watch" { watch = true }
  if arg == "--watchers", let n = arguments.popFirst().flatMap(Int.init) { watchers = max(1, n) }
  if arg == "--null-poster" { nullPoster = true }
  if arg == "--client-only" { clientOnly = true }
  if arg == "--perf-control", let paths = arguments.popFirst()?.split(separator: ","), paths.count == 2 {
    perfControl = (String(paths[0]), String(paths[1]))
  }
}

/// Sends `command` ("enable" or "disable") to perf's control FIFO and waits for its "ack".
func perfCommand(_ command: String, _ perfControl: (control: String, ack: String)?) {
  guard let perfControl, let control = FileHandle(forWritingAtPath: perfControl.control),
    let ack = FileHandle(forReadingAtPath: perfControl.ack)
  else { return }
  control.write(Data((command + "\n").utf8))
  _ = ack.availableData
  try? control.close()
  try? ack.close()
}

/// CPU seconds of this process (user + system).
func cpuSeconds() -> Double {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
    + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// Peak resident set of this process, in MB.
func peakRSSMB() -> Double {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  return Double(usage.ru_maxrss) / 1024
}

func seconds(_ d: Duration) -> Double {
  Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

let requests = Atomic<Int>(0)
/// The receiver: answers 204 to everything and counts the requests.
func makeReceiver() throws -> HTTPServer {
  try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
    requests.add(1, ordering: .relaxed)
    return HTTPResponse(status: 204)
  }
}

if serveReceiver {
  // The child of a delivery run: the address on stdout, then serve until stdin closes, then this
  // process's CPU.
  let receiver = try makeReceiver()
  let cpuBefore = cpuSeconds()
  FileHandle.standardOutput.write(Data((receiver.address + "\n").utf8))
  while let line = readLine(), !line.isEmpty {}
  let cpu = cpuSeconds() - cpuBefore
  await receiver.stop(gracePeriod: .seconds(1))
  print("{\"cpu_seconds\": \(cpu), \"requests\": \(requests.load(ordering: .relaxed))}")
  exit(0)
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

let month: Int64 = 30 * 86_400_000
/// User `i`'s `k` monthly periods of app `app`, the last ending in the future: a start, then renewals.
func purchases(_ i: Int, _ k: Int, app: String = "a1") -> UserPurchases {
  let first = now - Int64(k - 1) * month - 86_400_000
  return UserPurchases(
    user: UserKey(appId: app, environment: .production, userId: "user\(i)"),
    transactions: (0..<k).map { n in
      let purchase = first + Int64(n) * month
      return Transaction(
        transactionId: "t\(i)-\(n)", originalTransactionId: "t\(i)-0", productId: "monthly",
        subscriptionGroupIdentifier: "g1", purchaseDate: purchase, expiresDate: purchase + month,
        environment: .production, signedDate: purchase)
    })
}

if watch {
  try await watchFanOut(events: events, watchers: watchers, json: json)
  store.close()
  try? FileManager.default.removeItem(atPath: directory)
  exit(0)
}

try await store.createTenant(TenantRecord(tenantId: "t1", name: "bench", createdMs: now))
try await store.createApp(AppRecord(appId: "a1", tenantId: "t1", bundleId: "com.example.bench", createdMs: now))

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

// The receiver: in this process, or a child of this binary.
var receiver: HTTPServer?
var child: (process: Process, input: FileHandle, output: FileHandle)?
let receiverAddress: String
if inProcessReceiver {
  receiver = try makeReceiver()
  receiverAddress = receiver!.address
} else {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
  process.arguments = ["--serve-receiver"]
  let input = Pipe()
  let output = Pipe()
  process.standardInput = input
  process.standardOutput = output
  try process.run()
  child = (process, input.fileHandleForWriting, output.fileHandleForReading)
  var line: [UInt8] = []
  while true {
    guard let byte = try output.fileHandleForReading.read(upToCount: 1)?.first else { break }
    if byte == UInt8(ascii: "\n") { break }
    line.append(byte)
  }
  receiverAddress = String(decoding: line, as: UTF8.self)
}

try await store.createWebhook(
  WebhookRecord(webhookId: "w1", appId: "a1", url: "http://\(receiverAddress)/hook", createdMs: now),
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

/// A poster that answers 204 at once, without I/O, and keeps the requests it was given
/// (`--null-poster`, `--client-only`).
final class RecordingPoster: HTTPPoster {
  struct Request: Sendable {
    var url: URL
    var headers: [(String, String)]
    var body: [UInt8]
  }
  let requests = Mutex<[Request]>([])

  func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
  {
    requests.withLock { $0.append(Request(url: url, headers: headers, body: body)) }
    return HTTPPostResponse(status: 204, body: [])
  }
}

/// Runs a dispatcher until every logged event is delivered (or 120 s).
/// - Returns: the deliveries recorded DELIVERED, and when (and at what CPU time) the dispatcher
///   started.
@MainActor func deliverAll(poster: any HTTPPoster, measured: Bool) async throws
  -> (count: Int, started: ContinuousClock.Instant, cpuBefore: Double)
{
  let delivered = Atomic<Int>(0)
  let dispatcher = WebhookDispatcher(
    store: store, environment: .live,
    configuration: .init(maxInFlightPerWebhook: perWebhook, urlPolicy: WebhookURLPolicy(allowPrivateAddresses: true)),
    poster: poster, onAttempt: { report in if report.state == .delivered { delivered.add(1, ordering: .relaxed) } })
  if measured { perfCommand("enable", perfControl) }
  let (started, cpuBefore) = (ContinuousClock.now, cpuSeconds())
  let task = Task { await dispatcher.run() }
  dispatcher.notifyEventsAppended()
  while delivered.load(ordering: .relaxed) < Int(logged), ContinuousClock.now - started < .seconds(120) {
    try await Task.sleep(for: .milliseconds(5))
  }
  if measured { perfCommand("disable", perfControl) }
  dispatcher.beginGracefulShutdown()
  await task.value
  return (delivered.load(ordering: .relaxed), started, cpuBefore)
}

/// The dispatcher's poster: the outbound HTTP client as the daemon makes it for webhooks.
func webhookPoster() -> OutboundHTTPPoster {
  OutboundHTTPPoster.webhooks(policy: WebhookURLPolicy(allowPrivateAddresses: true))
}

/// POSTs `requests` through the webhooks' poster, `inFlight` at a time.
/// - Returns: the requests answered 2xx.
@MainActor func postAll(_ requests: [RecordingPoster.Request], inFlight: Int) async -> Int {
  let poster = webhookPoster()
  perfCommand("enable", perfControl)
  defer { perfCommand("disable", perfControl) }
  return await withTaskGroup(of: Bool.self) { group in
    var next = requests.makeIterator()
    var ok = 0
    func add() -> Bool {
      guard let request = next.next() else { return false }
      group.addTask {
        let response = try? await poster.post(
          url: request.url, headers: request.headers, body: request.body, timeout: .seconds(10))
        return response.map { (200..<300).contains($0.status) } ?? false
      }
      return true
    }
    for _ in 0..<max(1, inFlight) where !add() { break }
    while let answered = await group.next() {
      if answered { ok += 1 }
      _ = add()
    }
    return ok
  }
}

let (count, started, cpuBefore): (Int, ContinuousClock.Instant, Double)
if clientOnly {
  let recording = RecordingPoster()
  _ = try await deliverAll(poster: recording, measured: false)
  let recorded = recording.requests.withLock { $0 }
  (started, cpuBefore) = (ContinuousClock.now, cpuSeconds())
  count = await postAll(recorded, inFlight: perWebhook)
} else if nullPoster {
  (count, started, cpuBefore) = try await deliverAll(poster: RecordingPoster(), measured: true)
} else {
  (count, started, cpuBefore) = try await deliverAll(poster: webhookPoster(), measured: true)
}
let cpu = cpuSeconds() - cpuBefore
let elapsed = seconds(ContinuousClock.now - started)
var receiverCPU: Double?
var received = requests.load(ordering: .relaxed)
var connections: Int?
if let receiver {
  connections = receiver.openConnections  // kept alive: about the POSTs in flight
  await receiver.stop(gracePeriod: .seconds(1))
} else if let child {
  try child.input.close()
  let report = try child.output.readToEnd() ?? Data()
  child.process.waitUntilExit()
  let object = try JSONSerialization.jsonObject(with: report) as? [String: Any]
  receiverCPU = object?["cpu_seconds"] as? Double
  received = object?["requests"] as? Int ?? 0
}
let mode = clientOnly ? "client-only" : nullPoster ? "null-poster" : "delivery"
if json {
  print(
    "{\"mode\": \"\(mode)\", \"events\": \(logged), \"delivered\": \(count), \"seconds\": \(elapsed), \"cpu_seconds\": \(cpu), "
      + "\"receiver_cpu_seconds\": \(receiverCPU.map { "\($0)" } ?? "null"), \"requests\": \(received), "
      + "\"per_user\": \(perUser), \"in_flight\": \(perWebhook), \"connections\": \(connections.map { "\($0)" } ?? "null")}")
} else {
  let perEvent = { (s: Double) in String(format: "%.0f", s * 1e6 / Double(max(count, 1))) }
  print(
    "webhook \(mode): \(count) of \(logged) events delivered in \(String(format: "%.2f", elapsed)) s: "
      + "\(String(format: "%.0f", Double(count) / elapsed)) events/s, \(perEvent(cpu)) µs CPU per event in the sender"
      + (receiverCPU.map { ", \(perEvent($0)) µs in the receiver process" } ?? " (the receiver in this process too)")
      + " (requests received \(received), \(perUser) per user, \(perWebhook) in flight)")
}

/// When each batch of the watch run was committed, and every watcher's lags (ms).
final class WatchTimes: Sendable {
  let committed: Mutex<[ContinuousClock.Instant?]>
  let lags = Mutex<[Double]>([])

  init(batches: Int) { committed = Mutex(Array(repeating: nil, count: batches)) }
}

/// The WatchEvents fan-out run (`--watch`).
func watchFanOut(events: Int, watchers: Int, json: Bool) async throws {
  let service = SubstatusService(store: store, environment: .live, log: .discard)
  guard let operatorKey = try await service.bootstrapOperatorKey() else { fatalError("a fresh store has an operator key") }
  var router = RPCRouter()
  service.register(in: &router)
  let transport = try HTTP2ServerTransport(configuration: .init(host: "127.0.0.1", port: 0))
  let server = RPCServer(transport: transport, router: router, interceptors: service.interceptors())
  let serving = Task { try await server.run() }
  let clientTransport = try HTTP2ClientTransport(configuration: .init(host: "127.0.0.1", port: transport.port))
  let client = RPCClient(transport: clientTransport)
  func metadata(_ key: String) -> Metadata {
    var m: Metadata = [:]
    m.addString("Bearer \(key)", forKey: "authorization")
    return m
  }
  var createTenant = Substatus_V1_CreateTenantRequest()
  createTenant.name = "bench"
  let admin = try await client.unary(
    method: Substatus_V1_TenantService.createTenant.path, request: createTenant,
    response: Substatus_V1_CreateTenantResponse.self, metadata: metadata(operatorKey)
  ).adminKey
  var register = Substatus_V1_RegisterAppRequest()
  register.bundleID = "com.example.watch"
  let registered = try await client.unary(
    method: Substatus_V1_AdminService.registerApp.path, request: register,
    response: Substatus_V1_RegisterAppResponse.self, metadata: metadata(admin))
  guard let app = registered.app?.appID else { fatalError("RegisterApp answered no app") }

  // When each batch's commit returned (user i is in batch i / 100); each watcher's lags in ms.
  let total = events
  let times = WatchTimes(batches: (total + 99) / 100)
  var watchRequest = Substatus_V1_WatchEventsRequest()
  watchRequest.appID = app
  let request = watchRequest
  let streams = try await withThrowingTaskGroup(of: ServerStreamingResponse<Substatus_V1_WatchEventsResponse>.self) { group in
    for _ in 0..<watchers {
      group.addTask {
        try await client.serverStreaming(
          method: Substatus_V1_EventService.watchEvents.path, request: request,
          response: Substatus_V1_WatchEventsResponse.self, metadata: metadata(admin))
      }
    }
    return try await group.reduce(into: []) { $0.append($1) }
  }
  let started = ContinuousClock.now
  let cpuBefore = cpuSeconds()
  let readers = Task {
    try await withThrowingTaskGroup(of: Void.self) { group in
      for stream in streams {
        group.addTask {
          var seen = 0
          var mine: [Double] = []
          mine.reserveCapacity(total)
          for try await message in stream {
            let at = ContinuousClock.now
            let batch = Int((message.event?.userID ?? "").dropFirst(4)).map { $0 / 100 } ?? 0
            // Seen before its commit returned here: no lag to count against it.
            let commit = times.committed.withLock { $0[min(batch, $0.count - 1)] }
            mine.append(commit.map { max(0, seconds(at - $0) * 1000) } ?? 0)
            seen += 1
            if seen == total { break }
          }
          let kept = mine
          times.lags.withLock { $0 += kept }
        }
      }
      try await group.waitForAll()
    }
  }
  var appended = 0
  for start in stride(from: 0, to: total, by: 100) {
    let summary = try await store.ingest(
      (start..<min(start + 100, total)).map { purchases($0, 1, app: app) }, atMs: now)
    let at = ContinuousClock.now
    times.committed.withLock { $0[start / 100] = at }
    appended += summary.eventsAppended
    service.eventsAppended(summary.eventsAppended, source: "bench")
  }
  try await readers.value
  let elapsed = seconds(ContinuousClock.now - started)
  let cpu = cpuSeconds() - cpuBefore
  let sorted = times.lags.withLock { $0 }.sorted()
  func quantile(_ q: Double) -> Double { sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))] }
  let deliveredEvents = total * watchers
  clientTransport.close()
  server.beginGracefulShutdown()
  service.eventSignal.close()
  _ = try? await serving.value
  if json {
    print(
      "{\"watchers\": \(watchers), \"events\": \(total), \"appended\": \(appended), \"seconds\": \(elapsed), "
        + "\"cpu_seconds\": \(cpu), \"lag_p50_ms\": \(quantile(0.5)), \"lag_p99_ms\": \(quantile(0.99)), "
        + "\"lag_max_ms\": \(sorted.last ?? .nan), \"lags\": \(sorted.count), \"peak_rss_mb\": \(peakRSSMB())}")
  } else {
    print(
      "WatchEvents fan-out: \(total) events to \(watchers) watchers in \(String(format: "%.2f", elapsed)) s: "
        + "\(String(format: "%.0f", Double(total) / elapsed)) events/s to all (\(String(format: "%.0f", Double(deliveredEvents) / elapsed)) messages/s), "
        + "lag p50 \(String(format: "%.1f", quantile(0.5))) ms, p99 \(String(format: "%.1f", quantile(0.99))) ms, "
        + "max \(String(format: "%.1f", sorted.last ?? .nan)) ms; \(String(format: "%.1f", cpu * 1e6 / Double(deliveredEvents))) µs CPU "
        + "per message (server, watchers and ingest); peak RSS \(String(format: "%.1f", peakRSSMB())) MB")
  }
}
