import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusClock
import SubstatusProcessTestKit
import Synchronization
import Testing

@testable import SubstatusService

/// The Python receiver (`Fixtures/webhook_receiver.py`), started by the test on port 0: it checks
/// each signature with Python's `hmac` (an implementation independent of substatus's) and reports
/// every request as a JSON line.
final class WebhookReceiver: Sendable {
  struct Request: Sendable, Hashable {
    var path: String
    var eventId: String
    var bodyEventId: String
    var user: String
    var type: String
    var signatureOK: Bool
    var timestamp: String
    var contentType: String
    var userAgent: String
    var status: Int
  }

  private final class Inbox: Sendable {
    let received = Mutex<[Request]>([])
    let port = Mutex<Int?>(nil)
    let pending = Mutex([UInt8]())

    /// One line from the receiver: its port, or a request it got.
    func take(_ line: [UInt8]) {
      let text = String(decoding: line, as: UTF8.self)
      if text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) {
        self.port.withLock { $0 = port }
        return
      }
      guard let json = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else { return }
      let request = Request(
        path: json["path"] as? String ?? "", eventId: json["event_id"] as? String ?? "",
        bodyEventId: json["body_event_id"] as? String ?? "", user: json["user"] as? String ?? "",
        type: json["type"] as? String ?? "", signatureOK: json["signature_ok"] as? Bool ?? false,
        timestamp: json["t"] as? String ?? "", contentType: json["content_type"] as? String ?? "",
        userAgent: json["user_agent"] as? String ?? "", status: json["status"] as? Int ?? -1)
      received.withLock { $0.append(request) }
    }
  }

  private let process: Process
  private let inbox = Inbox()
  /// The receiver's stdin: closing it ends the receiver.
  private let input = Pipe()

  /// Starts the receiver (it verifies signatures made with `secret`) and waits for its port.
  static func start(secret: String) async throws -> WebhookReceiver {
    let receiver = try WebhookReceiver(secret: secret)
    try await waitUntil("the receiver's port") { receiver.inbox.port.withLock { $0 } != nil }
    return receiver
  }

  private init(secret: String) throws {
    let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    let python = here.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".venv/bin/python").path
    process = Process()
    process.executableURL = URL(fileURLWithPath: FileManager.default.isExecutableFile(atPath: python) ? python : "/usr/bin/python3")
    process.arguments = [here.appendingPathComponent("Fixtures/webhook_receiver.py").path, secret]
    let out = Pipe()
    process.standardOutput = out
    process.standardInput = input
    let inbox = self.inbox
    // Lines are read on a thread of their own (blocking reads), never on the cooperative pool.
    let handle = out.fileHandleForReading
    let reader = Thread {
      while true {
        let data = handle.availableData
        if data.isEmpty { return }
        let lines: [[UInt8]] = inbox.pending.withLock { r in
          r += data
          var lines: [[UInt8]] = []
          while let nl = r.firstIndex(of: UInt8(ascii: "\n")) {
            lines.append(Array(r[..<nl]))
            r.removeSubrange(...nl)
          }
          return lines
        }
        for line in lines { inbox.take(line) }
      }
    }
    try process.run()
    reader.start()
  }

  /// The port it listens on.
  var port: Int { inbox.port.withLock { $0 } ?? 0 }

  deinit {
    try? input.fileHandleForWriting.close()
    process.terminate()
  }

  /// The base URL of a behaviour (`ok`, `fail/2`, `status/500`, `hang`).
  func url(_ behaviour: String, _ name: String) -> String { "http://127.0.0.1:\(port)/\(behaviour)/\(name)" }

  var requests: [Request] { inbox.received.withLock { $0 } }

  /// Waits (real time, bounded) until `condition` holds for the requests received.
  func wait(_ what: String, timeout: Duration = .seconds(5), _ condition: ([Request]) -> Bool) async throws {
    try await waitUntil(what, timeout: timeout) { condition(self.requests) }
  }
}

/// Polls `condition` every 5 ms of real time for at most `timeout` (waits for I/O, never for a
/// backoff: the dispatcher's time is the manual clock).
func waitUntil(_ what: String, timeout: Duration = .seconds(5), _ condition: () async throws -> Bool) async throws {
  guard try await SubstatusProcessTestKit.waitUntil(timeout: timeout, condition) else {
    Issue.record("timed out waiting for \(what)")
    throw CancellationError()
  }
}

/// A store with an app, a manual clock, the receiver and a dispatcher to drive.
final class DispatcherWorld: Sendable {
  static let secret = "whsec_" + String(repeating: "5a", count: 32)
  let world: TestWorld
  let store = InMemoryStore()
  let receiver: WebhookReceiver
  final class Reports: Sendable {
    let list = Mutex<[WebhookDispatcher.AttemptReport]>([])
  }
  let reports = Reports()
  let dispatcher: WebhookDispatcher

  private init(
    configuration: WebhookDispatcher.Configuration, receiver: WebhookReceiver, separateWireClock: Bool,
    wireClock: (any ServiceClock)?
  ) {
    world = TestWorld(wallMs: 1_700_000_000_000, separateWireClock: separateWireClock)
    self.receiver = receiver
    let reports = self.reports
    var environment = world.environment
    if let wireClock { environment.wireClock = wireClock }
    dispatcher = WebhookDispatcher(
      store: store, environment: environment, configuration: configuration,
      log: world.log,
      onAttempt: { report in reports.list.withLock { $0.append(report) } })
  }

  /// A world with app a1 and a receiver; private addresses allowed unless `configuration` says.
  /// With `separateWireClock`, the POSTs' timeouts run on ``TestWorld/wireClock``, not ``clock``;
  /// `wireClock` replaces the dispatcher's wire clock altogether.
  static func start(
    _ configuration: WebhookDispatcher.Configuration = .init(urlPolicy: WebhookURLPolicy(allowPrivateAddresses: true)),
    separateWireClock: Bool = false, wireClock: (any ServiceClock)? = nil
  ) async throws -> DispatcherWorld {
    let w = DispatcherWorld(
      configuration: configuration, receiver: try await WebhookReceiver.start(secret: secret),
      separateWireClock: separateWireClock, wireClock: wireClock)
    try await Fixture.seed(w.store)
    return w
  }

  /// Another dispatcher on the same store, clock and receiver (a restarted process's).
  func restartedDispatcher() -> WebhookDispatcher {
    let reports = self.reports
    return WebhookDispatcher(
      store: store, environment: world.environment, configuration: dispatcher.configuration,
      log: world.log,
      onAttempt: { report in reports.list.withLock { $0.append(report) } })
  }

  /// Moves the clock and wakes the loop (as its periodic tick would).
  func advance(by duration: Duration) {
    clock.advance(by: duration)
    dispatcher.notifyEventsAppended()
  }

  var clock: ManualClock { world.clock }

  func createWebhook(_ id: String, _ behaviour: String, types: Set<SubscriptionEventType> = []) async throws {
    try await store.createWebhook(
      WebhookRecord(webhookId: id, appId: "a1", url: receiver.url(behaviour, id), eventTypes: types, createdMs: world.clock.wallMs),
      signingSecret: Self.secret)
  }

  /// Logs events for `users` in turn and wakes the dispatcher.
  @discardableResult
  func addEvents(_ users: [String]) async throws -> [LoggedEvent] {
    let events = try await WebhookContract.addEvents(store, users: users)
    dispatcher.notifyEventsAppended()
    return events
  }

  func attempts(of webhookId: String) -> [WebhookDispatcher.AttemptReport] {
    reports.list.withLock { $0.filter { $0.delivery.webhookId == webhookId } }
  }

  func deliveries(_ webhookId: String) async throws -> [DeliveryRecord] {
    try await store.deliveries(appId: "a1", webhookId: webhookId, failedOnly: false, page: PageRequest(size: 1000)).items
  }

  /// Runs the dispatcher around `body`, then stops it.
  func running(_ body: () async throws -> Void) async throws {
    let task = Task { await dispatcher.run() }
    do {
      try await body()
    } catch {
      dispatcher.beginGracefulShutdown()
      task.cancel()
      await task.value
      throw error
    }
    dispatcher.beginGracefulShutdown()
    task.cancel()
    await task.value
  }
}

/// A wire clock over a ``ManualClock`` that counts the work scheduled on it, the work cancelled and
/// the sleeps.
final class CountingWireClock: ServiceClock {
  struct Counts: Sendable, Equatable {
    var scheduled = 0
    var cancelled = 0
    var sleeps = 0
  }
  let base: ManualClock
  // A class so that the scheduled work can share it.
  final class Box: Sendable { let counts = Mutex(Counts()) }
  private let box = Box()

  init(_ base: ManualClock) { self.base = base }

  var counts: Counts { box.counts.withLock { $0 } }
  var monotonicNow: Duration { base.monotonicNow }
  var wallMs: Int64 { base.wallMs }

  func sleep(for duration: Duration) async throws {
    box.counts.withLock { $0.sleeps += 1 }
    try await base.sleep(for: duration)
  }

  func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> any ScheduledWork {
    box.counts.withLock { $0.scheduled += 1 }
    return CountedWork(work: base.schedule(after: delay, work), box: box)
  }

  private struct CountedWork: ScheduledWork {
    let work: any ScheduledWork
    let box: Box
    func cancel() {
      box.counts.withLock { $0.cancelled += 1 }
      work.cancel()
    }
  }
}

@Suite("Webhook dispatcher", .serialized)
struct WebhookDispatcherTests {
  @Test("events POSTed as proto3 JSON, signed (verified by Python's hmac), in order per user")
  func signedInOrder() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "ok")
    try await w.running {
      let events = try await w.addEvents(["u1", "u2", "u1", "u2", "u1", "u3", "u2", "u1"])
      try await w.receiver.wait("every event") { $0.count >= events.count }
      let requests = w.receiver.requests
      #expect(requests.count == events.count)
      #expect(requests.allSatisfy { $0.signatureOK && $0.contentType == "application/json" })
      #expect(requests.allSatisfy { $0.userAgent.hasPrefix("substatus-webhooks/") && $0.eventId == $0.bodyEventId })
      #expect(requests.allSatisfy { $0.timestamp == String(w.clock.wallMs / 1000) })
      for user in ["u1", "u2", "u3"] {
        #expect(
          requests.filter { $0.user == user }.map(\.eventId)
            == events.filter { $0.event.userId == user }.map(\.event.eventId), "\(user)'s events in log order")
      }
      try await waitUntil("recorded") { try await w.deliveries("w1").allSatisfy { $0.state == .delivered } }
      let recorded = try await w.deliveries("w1")
      #expect(recorded.count == events.count)
      #expect(recorded.allSatisfy { $0.attempts.count == 1 && $0.attempts[0].httpStatus == 200 && $0.attempts[0].error == nil })
    }
  }

  @Test("a 500 is retried with exponential backoff on the manual clock until a 2xx")
  func retriesAfter500() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "fail/2")
    try await w.running {
      try await w.addEvents(["u1"])
      let start = w.clock.wallMs
      try await waitUntil("first attempt") { w.attempts(of: "w1").count == 1 }
      var report = w.attempts(of: "w1")[0]
      #expect(report.attempt.httpStatus == 500)
      #expect(report.attempt.error == "the receiver answered HTTP 500")
      #expect(report.state == .pending)
      let first = try #require(report.nextAttemptMs) - start
      #expect((24_000...36_000).contains(first), "30 s ± 20 %: \(first)")
      w.advance(by: .milliseconds(first))
      try await waitUntil("second attempt") { w.attempts(of: "w1").count == 2 }
      report = w.attempts(of: "w1")[1]
      let second = try #require(report.nextAttemptMs) - w.clock.wallMs
      #expect((48_000...72_000).contains(second), "60 s ± 20 %: \(second)")
      w.advance(by: .milliseconds(second))
      try await waitUntil("third attempt") { w.attempts(of: "w1").count == 3 }
      #expect(w.attempts(of: "w1")[2].state == .delivered)
      let delivery = try #require(try await w.deliveries("w1").first)
      #expect(delivery.state == .delivered)
      #expect(delivery.attempts.map(\.httpStatus) == [500, 500, 200])
      #expect(w.receiver.requests.count == 3)
      #expect(Set(w.receiver.requests.map(\.eventId)).count == 1)
    }
  }

  @Test("a receiver that does not answer times out after 10 s (manual clock) and is retried")
  func retryAfterTimeout() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "hang")
    try await w.running {
      try await w.addEvents(["u1"])
      try await w.receiver.wait("the request") { $0.count == 1 }
      #expect(w.attempts(of: "w1").isEmpty)
      _ = await w.clock.waitForSleepers(2)  // the tick and the POST's timeout
      w.advance(by: .seconds(10))
      try await waitUntil("the timeout") { w.attempts(of: "w1").count == 1 }
      let report = w.attempts(of: "w1")[0]
      #expect(report.attempt.httpStatus == nil)
      #expect(report.attempt.error == "timeout after 10 s")
      #expect(report.attempt.durationMs == 10_000)
      #expect(report.state == .pending)
      w.advance(by: .seconds(40))
      try await w.receiver.wait("the retry") { $0.count == 2 }
    }
  }

  @Test("each POST's timeout is work scheduled on the wire clock and cancelled when the answer comes (no sleeping task)")
  func timeoutIsScheduledWorkCancelledOnAnswer() async throws {
    let wire = CountingWireClock(ManualClock(wallMs: 1_700_000_000_000))
    let w = try await DispatcherWorld.start(wireClock: wire)
    try await w.createWebhook("w1", "ok")
    try await w.running {
      try await w.addEvents(["u1", "u2", "u3"])
      try await waitUntil("recorded") { w.attempts(of: "w1").count == 3 }
    }
    #expect(wire.counts == .init(scheduled: 3, cancelled: 3, sleeps: 0))
    #expect(w.attempts(of: "w1").allSatisfy { $0.state == .delivered })
  }

  @Test("a jump of the service's clock by days (a followed test clock) neither times out nor repeats a POST in flight")
  func serviceClockJumpDoesNotTimeOutAPost() async throws {
    let w = try await DispatcherWorld.start(separateWireClock: true)
    try await w.createWebhook("w1", "hang")
    try await w.running {
      try await w.addEvents(["u1"])
      try await w.receiver.wait("the request") { $0.count == 1 }
      #expect(await w.world.wireClock.waitForSleepers(1), "the POST's timeout sleeps on the wire clock")
      w.advance(by: .seconds(5 * 86_400))
      try await Task.sleep(for: .milliseconds(200))
      #expect(w.attempts(of: "w1").isEmpty, "still in flight after the service's clock jumped 5 days")
      #expect(w.receiver.requests.count == 1, "the lease passed, but the held delivery is not claimed and sent again")
      w.world.wireClock.advance(by: .seconds(10))
      try await waitUntil("the timeout") { w.attempts(of: "w1").count == 1 }
      let report = w.attempts(of: "w1")[0]
      #expect(report.attempt.error == "timeout after 10 s")
      #expect(report.attempt.durationMs == 10_000, "the duration on the wire clock")
    }
  }

  @Test("a hung receiver holds only its own slots: another webhook gets everything meanwhile")
  func hungEndpointDelaysNoOther() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("dead", "hang")
    try await w.createWebhook("live", "ok")
    try await w.running {
      let events = try await w.addEvents((0..<12).map { "u\($0)" })
      try await w.receiver.wait("the live webhook's events") { r in
        r.filter { $0.path.hasPrefix("/ok/") }.count == events.count
      }
      let hung = w.receiver.requests.filter { $0.path.hasPrefix("/hang/") }.count
      #expect(hung <= w.dispatcher.configuration.maxInFlightPerWebhook, "at most its slots: \(hung)")
      #expect(w.attempts(of: "dead").isEmpty, "no time passed on the clock")
    }
  }

  @Test("one tenant's hung receivers hold only its share of the slots: another tenant's events go out meanwhile")
  func hungTenantDelaysNoOtherTenant() async throws {
    let w = try await DispatcherWorld.start(
      .init(
        maxInFlight: 8, maxInFlightPerWebhook: 4, maxInFlightPerTenant: 4,
        urlPolicy: WebhookURLPolicy(allowPrivateAddresses: true)))
    // Tenant t1: four hung webhooks (16 slots by webhook, twice the 8 overall); tenant t2: one.
    for n in 0..<4 { try await w.createWebhook("dead\(n)", "hang") }
    try await w.store.createTenant(Fixture.tenant("t2"))
    try await w.store.createApp(Fixture.app("b1", tenant: "t2"))
    try await w.store.createWebhook(
      WebhookRecord(webhookId: "live", appId: "b1", url: w.receiver.url("ok", "live"), createdMs: w.world.clock.wallMs),
      signingSecret: DispatcherWorld.secret)
    try await w.running {
      try await w.addEvents((0..<12).map { "u\($0)" })
      try await w.receiver.wait("t1's first POSTs") { r in !r.isEmpty }
      let events = try await WebhookContract.addEvents(w.store, users: ["q1", "q2", "q3"], app: "b1")
      w.dispatcher.notifyEventsAppended()
      try await w.receiver.wait("t2's events") { r in
        r.filter { $0.path.hasPrefix("/ok/") }.count == events.count
      }
      let hung = w.receiver.requests.filter { $0.path.hasPrefix("/hang/") }.count
      #expect(hung <= 4, "t1 holds its share only: \(hung) POSTs")
      let text = w.dispatcher.prometheusText()
      #expect(text.contains("substatus_webhook_tenants_at_in_flight_cap 1"), "\(text)")
      #expect(!text.contains("substatus_webhook_deliveries_deferred_total 0\n"))
    }
  }

  @Test("a dispatcher started after one was killed mid-POST sends what that one had claimed at once, not after the lease")
  func restartRedeliversAtOnce() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "hang")
    let killed = Task { await w.dispatcher.run() }
    try await w.addEvents(["u1", "u2"])
    try await w.receiver.wait("both POSTs") { $0.count == 2 }
    killed.cancel()  // gone mid-POST: nothing recorded, the claims stay leased
    await killed.value
    #expect(w.attempts(of: "w1").isEmpty)
    let restarted = w.restartedDispatcher()
    let task = Task { await restarted.run() }
    // No time passes on the clock: the lease (120 s) has not ended.
    try await w.receiver.wait("both sent again") { $0.count == 4 }
    #expect(Set(w.receiver.requests.map(\.eventId)).count == 2)
    restarted.beginGracefulShutdown()
    task.cancel()
    await task.value
  }

  @Test("a delivery still failing 3 days after its creation is marked FAILED, then replayed")
  func failedAfterThreeDaysThenReplay() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "status/503")
    try await w.running {
      let events = try await w.addEvents(["u1"])
      let created = w.clock.wallMs
      try await waitUntil("first attempt") { w.attempts(of: "w1").count == 1 }
      var guardCount = 0
      while let last = w.attempts(of: "w1").last, last.state == .pending, guardCount < 100 {
        guardCount += 1
        let count = w.attempts(of: "w1").count
        w.advance(by: .milliseconds(try #require(last.nextAttemptMs) - w.clock.wallMs))
        try await waitUntil("attempt \(count + 1)") { w.attempts(of: "w1").count == count + 1 }
      }
      let reports = w.attempts(of: "w1")
      #expect(reports.last?.state == .failed)
      #expect(reports.dropLast().allSatisfy { $0.state == .pending })
      let lastAttempt = try #require(reports.last).attempt.attemptedMs
      #expect(lastAttempt == created + 3 * 86_400_000, "the last retry is at the end of the window")
      let gaps = zip(reports.dropFirst(), reports).map { $0.attempt.attemptedMs - $1.attempt.attemptedMs }
      #expect(gaps.allSatisfy { $0 <= 4 * 3_600_000 * 12 / 10 }, "capped at 4 h (+20 %)")
      #expect((15...40).contains(reports.count), "\(reports.count) attempts over 3 days")
      let delivery = try #require(try await w.deliveries("w1").first)
      #expect(delivery.state == .failed)
      #expect(delivery.attempts.count == reports.count)
      #expect(delivery.attempts.allSatisfy { $0.httpStatus == 503 })

      // Replay: a new delivery of the same event, same event id.
      #expect(try await w.store.replay(appId: "a1", webhookId: "w1", afterSequence: 0, atMs: w.clock.wallMs) == events.count)
      w.dispatcher.notifyEventsAppended()
      try await waitUntil("the replayed attempt") { w.attempts(of: "w1").count == reports.count + 1 }
      let all = try await w.deliveries("w1")
      #expect(all.count == 2)
      #expect(all[0].event.event.eventId == all[1].event.event.eventId)
      #expect(all[1].state == .failed)
    }
  }

  @Test("a webhook deleted while its POST is in flight: the attempt finds nothing to record, nothing else is sent")
  func deletedMidFlight() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "hang")
    try await w.running {
      try await w.addEvents(["u1", "u1", "u2"])
      try await w.receiver.wait("two heads in flight") { $0.count == 2 }
      try await w.store.deleteWebhook(appId: "a1", webhookId: "w1")
      _ = await w.clock.waitForSleepers(3)  // the tick and two timeouts
      w.advance(by: .seconds(10))
      w.advance(by: .seconds(3600))
      try await Task.sleep(for: .milliseconds(200))
      #expect(w.attempts(of: "w1").isEmpty)
      #expect(w.receiver.requests.count == 2)
      #expect(w.world.lines.withLock { $0 }.allSatisfy { !$0.contains("cannot record") })
    }
  }

  @Test("a loopback receiver is refused at delivery unless private webhooks are allowed")
  func privateAddressRefusedAtDelivery() async throws {
    let w = try await DispatcherWorld.start(.init(urlPolicy: WebhookURLPolicy(allowPrivateAddresses: false)))
    try await w.createWebhook("w1", "ok")
    try await w.running {
      try await w.addEvents(["u1"])
      try await waitUntil("the refused attempt") { w.attempts(of: "w1").count == 1 }
      let report = w.attempts(of: "w1")[0]
      #expect(report.attempt.error == "refused: the address 127.0.0.1 is loopback, refused unless the server allows private webhooks")
      #expect(report.attempt.httpStatus == nil)
      #expect(report.state == .pending)
      #expect(w.receiver.requests.isEmpty)
    }
  }

  @Test("TestWebhook sends a signed test event at once and answers with the attempt")
  func testWebhook() async throws {
    let w = try await DispatcherWorld.start()
    try await w.createWebhook("w1", "ok")
    try await w.createWebhook("w2", "status/410")
    let ok = try await w.dispatcher.test(appId: "a1", webhookId: "w1")
    #expect(ok.delivered)
    #expect(ok.attempt.httpStatus == 200)
    #expect(ok.attempt.error == nil)
    // The receiver reports a request on its stdout, read by a thread: after its answer.
    try await w.receiver.wait("the test request") { !$0.isEmpty }
    let request = try #require(w.receiver.requests.first)
    #expect(request.signatureOK)
    #expect(request.user == "" && request.type == "")
    #expect(request.eventId.hasPrefix("test_"))
    let gone = try await w.dispatcher.test(appId: "a1", webhookId: "w2")
    #expect(!gone.delivered)
    #expect(gone.attempt.httpStatus == 410)
    await expectStoreError(.notFound) { try await w.dispatcher.test(appId: "a1", webhookId: "nope") }
    #expect(try await w.deliveries("w1").isEmpty, "a test is not a delivery")
  }
}
