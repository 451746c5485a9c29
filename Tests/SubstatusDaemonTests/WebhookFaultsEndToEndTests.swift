import Foundation
import SubstatusWire
import Synchronization
import SubstatusProcessTestKit
import Testing

/// Webhook faults end to end (``LifecycleRig``: real substatusd following the simulator's clock,
/// a real receiver): a receiver that fails then hangs is retried with backoff on the simulated
/// clock; one down for a simulated day gets everything, in order per user, once back; a replay
/// delivers again; a SIGKILL of substatusd while a POST is in flight, or while it ingests
/// ImportTransactions calls or V2 notifications, loses nothing, and a receiver that deduplicates by
/// `Substatus-Event-Id` sees each event once (at-least-once).
@Suite(.serialized) struct WebhookFaultsEndToEndTests {
  static let second: Int64 = 1_000
  static let hour: Int64 = 3_600_000

  /// The webhook's only delivery, once it has `attempts` attempts.
  static func delivery(_ rig: LifecycleRig, attempts: Int) async throws -> Substatus_V1_Delivery {
    var deliveries: [Substatus_V1_Delivery] = []
    _ = try await waitUntil(every: .milliseconds(20)) {
      deliveries = try await rig.deliveries()
      return (deliveries.first?.attempts.count ?? 0) >= attempts
    }
    try #require(deliveries.count == 1, "\(deliveries)")
    return try #require(deliveries.first)
  }

  @Test func aReceiverThatFailsThenHangsIsRetriedWithBackoffOnTheSimulatedClock() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try rig.receiver.send("FAIL 500")
    try await rig.addUser("alice")
    try await rig.act("alice", "purchase", ["product_id": "pro.monthly"])
    let t0 = try await rig.simulatedNow()

    // 1. 500: retried 30 s later (±20 %), on the simulated clock.
    #expect(await rig.receiver.waitUntil(timeout: 10) { $0.contains { $0.status == 500 } })
    var delivery = try await Self.delivery(rig, attempts: 1)
    #expect(delivery.state == .pending)
    #expect(delivery.attempts.map(\.httpStatus) == [500])
    #expect(delivery.attempts.first?.attemptedMs == t0)
    #expect((24 * Self.second...36 * Self.second).contains(delivery.nextAttemptMs - t0), "\(delivery.nextAttemptMs - t0)")
    #expect(rig.receiver.records.count == 1, "no retry before the simulated clock moves")

    // 2. The receiver hangs: the POST times out after 10 s of real time (substatusd's wire clock:
    // a jump of the simulated clock never times out a POST in flight, so this step takes 10 s);
    // the simulated clock moves by those 10 s too, and the failure is recorded at t1 + 10 s.
    try rig.receiver.send("HANG")
    let t1 = delivery.nextAttemptMs
    try await rig.setClock(t1, settling: false)
    #expect(await rig.receiver.waitUntil(timeout: 10) { $0.contains(where: \.hung) })
    try await rig.setClock(t1 + 10 * Self.second, settling: false)
    delivery = try await Self.delivery(rig, attempts: 2)
    #expect(delivery.attempts.count == 2)
    #expect(delivery.attempts.last?.httpStatus == 0)
    #expect(delivery.attempts.last?.error.contains("timeout") == true, "\(delivery.attempts)")
    let t2 = try #require(delivery.attempts.last?.attemptedMs)
    #expect(t2 == t1)
    // The backoff doubles, from the failure (the timeout, 10 s after the attempt began).
    let failed = t1 + 10 * Self.second
    #expect((48 * Self.second...72 * Self.second).contains(delivery.nextAttemptMs - failed), "\(delivery.nextAttemptMs - failed)")

    // 3. Back: the next retry delivers, signed, once.
    try rig.receiver.send("UP")
    try await rig.setClock(delivery.nextAttemptMs, settling: false)
    #expect(await rig.waitForReceived(1))
    delivery = try await Self.delivery(rig, attempts: 3)
    #expect(delivery.state == .delivered)
    #expect(delivery.attempts.map(\.httpStatus) == [500, 0, 200])
    let records = rig.receiver.records
    #expect(records.map(\.status) == [500, 0, 200])
    #expect(records.allSatisfy { $0.valid && $0.eventID == delivery.event?.eventID })
    #expect(rig.received().map(\.eventID) == [delivery.event?.eventID ?? ""])
  }

  @Test func aReceiverDownForADayGetsEverythingInOrderPerUserAndAReplayDeliversAgain() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try rig.receiver.send("DOWN")
    for user in ["alice", "bob"] { try await rig.addUser(user) }
    // A simulated day, an hour at a time: alice subscribes and turns auto-renew off, bob
    // subscribes and is refunded; the receiver answers 503 all along.
    try await rig.act("alice", "purchase", ["product_id": "pro.monthly", "offer": ["type": "introductory"]])
    try await rig.act("bob", "purchase", ["product_id": "pro.monthly"])
    let t0 = try await rig.simulatedNow()
    // The first attempts (at once) are recorded before the clock moves.
    _ = try await waitUntil(every: .milliseconds(10)) { try await rig.deliveries().map(\.attempts.count) == [1, 1] }
    for hour in 1...24 {
      try await rig.stepDeliveries(to: t0 + Int64(hour) * Self.hour)
      if hour == 6 { try await rig.act("alice", "cancel-auto-renew") }
      if hour == 12 { try await rig.act("bob", "refund") }
    }
    let alice = try await rig.substatusUser(of: "alice")
    let bob = try await rig.substatusUser(of: "bob")
    let log = try await rig.log()
    #expect(log.map(\.userID).filter { $0 == alice }.count == 2)
    #expect(log.map(\.userID).filter { $0 == bob }.count == 2)
    #expect(rig.received().isEmpty)
    // Each user's first event was retried through the day, never before its backoff (30 s
    // doubling, capped at 4 h, -20 % at most), so a handful of times in 25 hourly chances; the
    // second waits behind it.
    let pending = try await rig.deliveries().sorted { $0.createdMs < $1.createdMs }
    #expect(pending.count == log.count && pending.allSatisfy { $0.state == .pending })
    for user in [alice, bob] {
      let first = try #require(pending.first { $0.event?.userID == user })
      let times = first.attempts.map(\.attemptedMs)
      #expect((3...16).contains(times.count), "\(times)")
      #expect(first.attempts.allSatisfy { $0.httpStatus == 503 })
      for (i, gap) in zip(times.dropFirst(), times).map({ $0 - $1 }).enumerated() {
        let backoff = min(30 * Self.second << i, 4 * Self.hour)
        #expect(gap * 5 >= backoff * 4, "retry \(i + 1) after \(gap) ms, backoff \(backoff) ms: \(times.map { $0 - t0 }) \(rig.receiver.records.map { "\($0.userID.suffix(4)) \($0.type) \($0.status)" })")
      }
      let last = try #require(times.last)
      #expect(first.nextAttemptMs - last <= 4 * Self.hour * 6 / 5)
      let second = try #require(pending.last { $0.event?.userID == user })
      #expect(second.deliveryID != first.deliveryID)
      #expect(second.attempts.isEmpty, "one user's events are delivered in order")
    }

    // Back up: within the longest backoff (4 h + 20 %) everything arrives, in order per user, once.
    try rig.receiver.send("UP")
    // One step past every backoff: no jump while the deliveries that follow are in flight.
    try await rig.stepDeliveries(to: t0 + 29 * Self.hour)
    #expect(await rig.waitForReceived(log.count))
    for user in [alice, bob] {
      #expect(rig.received(user: user).map(\.eventID) == log.filter { $0.userID == user }.map(\.eventID))
    }
    #expect(!rig.receiver.records.contains { $0.duplicate })
    #expect(try await rig.waitForAllDelivered())

    // A replay of the whole log delivers each event again: duplicates only, in order per user.
    var replay = Substatus_V1_ReplayEventsRequest()
    replay.appID = rig.app
    replay.webhookID = rig.webhookID
    let replayed = try await rig.client.call(Substatus_V1_EventService.replayEvents, replay, key: rig.admin)
    #expect(replayed.deliveriesCreated == Int64(log.count))
    #expect(await rig.receiver.waitUntil(timeout: 10) { $0.filter(\.duplicate).count >= log.count })
    let again = rig.receiver.records.filter(\.duplicate)
    for user in [alice, bob] {
      #expect(again.filter { $0.userID == user }.map(\.eventID) == log.filter { $0.userID == user }.map(\.eventID))
    }
  }

  @Test func aSIGKILLWhilePOSTsAreInFlightLosesNothingAndTheDeduplicatingReceiverSeesEachEventOnce() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    try rig.receiver.send("HANG")
    for user in ["alice", "bob", "carol"] { try await rig.addUser(user) }
    try await rig.act("alice", "purchase", ["product_id": "pro.monthly"])
    try await rig.act("bob", "purchase", ["product_id": "pro.monthly"])
    // Both deliveries are claimed and their POSTs are at the receiver, unanswered: SIGKILL.
    #expect(await rig.receiver.waitUntil(timeout: 10) { $0.filter(\.hung).count == 2 })
    let before = try await rig.log()
    try rig.receiver.send("UP")
    try await rig.killAndRestart()
    let t0 = try await rig.simulatedNow()

    // After the restart the two deliveries claimed by the killed process are released at once
    // (SQLite is one process's store: its dispatcher takes back every earlier run's claims), with
    // no wait for their 120 s lease; a new user's event is delivered too.
    try await rig.act("carol", "purchase", ["product_id": "pro.monthly"])
    let carol = try await rig.substatusUser(of: "carol")
    #expect(await rig.waitForReceived(1, user: carol))
    #expect(await rig.waitForReceived(3), "the killed run's claims were released without the lease passing")
    #expect(try await rig.simulatedNow() < t0 + 120 * Self.second)
    let log = try await rig.log()
    #expect(log.count == before.count + 1)
    #expect(await rig.waitForReceived(log.count))

    // Nothing lost; each event accepted once by the deduplicating receiver (its first delivery
    // never got an answer: at-least-once, so the same id came twice, and counts once).
    #expect(Set(rig.received().map(\.eventID)) == Set(log.map(\.eventID)))
    let accepted = rig.receiver.records.filter { $0.status == 200 && !$0.duplicate }
    #expect(accepted.count == log.count)
    #expect(Set(rig.receiver.records.filter(\.hung).map(\.eventID)) == Set(before.map(\.eventID)))
    #expect(rig.receiver.records.allSatisfy { $0.valid }, "\(rig.receiver.records.filter { !$0.valid })")
    #expect(try await rig.waitForAllDelivered())
  }

  /// One user's history for the SIGKILL-during-ImportTransactions test: three monthly periods of `pro.monthly`
  /// back to back (SUBSCRIPTION_STARTED, RENEWED, RENEWED), the last ending 10 days after
  /// ``LifecycleRig/start``, priced.
  static func history(_ rig: LifecycleRig, user: String, index: Int) -> Substatus_V1_ImportTransactionsRequest {
    let month: Int64 = 30 * LifecycleRig.day
    let base = LifecycleRig.start + 10 * LifecycleRig.day - 3 * month + Int64(index) * second
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = rig.app
    request.userID = user
    request.transactions = (0..<3).map { period in
      var t = Substatus_V1_Transaction()
      t.transactionID = String(9_100_000 + index * 10 + period)
      t.originalTransactionID = String(9_100_000 + index * 10)
      t.productID = "pro.monthly"
      t.subscriptionGroupID = "pro"
      t.type = .autoRenewable
      t.environment = .production
      t.purchaseDateMs = base + Int64(period) * month
      t.originalPurchaseDateMs = base
      t.expiresDateMs = base + Int64(period + 1) * month
      t.signedDateMs = t.purchaseDateMs
      t.priceMilliunits = 9990
      t.currency = "USD"
      return t
    }
    return request
  }

  /// SIGKILL of substatusd while ImportTransactions calls are being written (four callers, one
  /// user's history per call), then a restart on the same data: every acknowledged write's events
  /// are in the log, exactly once; the callers retry what was not acknowledged (some of it may
  /// have been committed without an answer: the retry adds nothing then), and a client that
  /// re-sends everything adds nothing either. The receiver, deduplicating by
  /// `Substatus-Event-Id`, gets every event of the log, in order per user (at-least-once: a POST
  /// cut by the kill is sent again).
  @Test func aSIGKILLDuringIngestLosesNoAcknowledgedWriteAndTheDeduplicatingReceiverSeesEachEventOnce() async throws {
    let rig = try await LifecycleRig()
    defer { rig.stop() }
    let users = (0..<24).map { "ingest-\($0)" }
    let requests = Dictionary(uniqueKeysWithValues: users.enumerated().map { ($1, Self.history(rig, user: $1, index: $0)) })
    final class Progress: Sendable {
      let state = Mutex((next: 0, acknowledged: Set<String>(), failed: Set<String>(), killed: false))
    }
    let progress = Progress()
    let (client, admin, pid) = (rig.client, rig.admin, rig.daemon.pid)
    // The sixth acknowledgement sends SIGKILL; the calls in flight then, and all later ones, fail.
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<4 {
        group.addTask {
          while let user = progress.state.withLock({ s -> String? in
            guard s.next < users.count else { return nil }
            s.next += 1
            return users[s.next - 1]
          }) {
            do {
              let answer = try await client.call(Substatus_V1_IngestService.importTransactions, requests[user]!, key: admin)
              let kill = progress.state.withLock { s -> Bool in
                s.acknowledged.insert(user)
                guard s.acknowledged.count == 6, !s.killed else { return false }
                s.killed = true
                return true
              }
              if kill { Glibc.kill(pid, SIGKILL) }
              #expect(answer.transactionResults.map(\.outcome) == [.created, .created, .created])
            } catch {
              progress.state.withLock { _ = $0.failed.insert(user) }
            }
          }
        }
      }
    }
    let (acknowledged, failed) = progress.state.withLock { ($0.acknowledged, $0.failed) }
    #expect(acknowledged.count >= 6 && !failed.isEmpty, "acknowledged \(acknowledged.count), failed \(failed.count)")
    #expect(acknowledged.count + failed.count == users.count)
    try await rig.killAndRestart()

    // Acknowledged before the kill: in the log, without any retry.
    let survived = try await rig.log()
    for user in acknowledged {
      #expect(survived.filter { $0.userID == user }.map(\.type) == [.subscriptionStarted, .renewed, .renewed], "\(user)")
    }
    // The callers retry what was not acknowledged; then a client re-sends everything.
    for user in failed.sorted() {
      _ = try await rig.client.call(Substatus_V1_IngestService.importTransactions, requests[user]!, key: rig.admin)
    }
    let log = try await rig.log()
    for user in users.shuffled() {
      let again = try await rig.client.call(Substatus_V1_IngestService.importTransactions, requests[user]!, key: rig.admin)
      #expect(again.transactionResults.map(\.outcome) == [.unchanged, .unchanged, .unchanged])
    }
    #expect(try await rig.log().map(\.eventID) == log.map(\.eventID), "a re-sent write adds no event")

    // Each user's three events, once each.
    #expect(log.count == 3 * users.count)
    #expect(Set(log.map(\.eventID)).count == log.count, "no event twice in the log")
    for user in users {
      #expect(log.filter { $0.userID == user }.map(\.line) == [
        "SUBSCRIPTION_STARTED at +\(requests[user]!.transactions[0].purchaseDateMs - LifecycleRig.start) pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD",
        "RENEWED at +\(requests[user]!.transactions[1].purchaseDateMs - LifecycleRig.start) pro.monthly ACTIVE->ACTIVE offer NONE 9990 USD",
        "RENEWED at +\(requests[user]!.transactions[2].purchaseDateMs - LifecycleRig.start) pro.monthly ACTIVE->ACTIVE offer NONE 9990 USD",
      ], "\(user)")
    }

    // The receiver: every event at least once; deduplicated, each user's exact sequence.
    #expect(await rig.waitForReceived(log.count), "received \(rig.received().count) of \(log.count)")
    #expect(Set(rig.received().map(\.eventID)) == Set(log.map(\.eventID)))
    for user in users {
      #expect(rig.received(user: user).map(\.eventID) == log.filter { $0.userID == user }.map(\.eventID), "\(user)")
    }
    // A POST cut short by the SIGKILL reaches the receiver truncated (its signature then fails:
    // seen once on a loaded machine); every request the receiver accepted is whole and signed.
    #expect(rig.receiver.records.filter { $0.status == 200 }.allSatisfy { $0.valid && $0.eventID == $0.bodyEventID })
    #expect(try await rig.deliveries().count == log.count, "one delivery per event")
    #expect(try await rig.waitForAllDelivered())
  }

  /// SIGKILL of substatusd while it ingests the simulator's V2 notifications (one purchase each
  /// for 16 users; the ``LifecycleRig/relay`` kills it while the sixth is in flight): the
  /// notifications answered 200 before it are in the log; every one without a 2xx (the one cut,
  /// and those sent while substatusd was down) is retried by the simulator an hour later, as
  /// Apple's first retry is, and then logged once (a cut write that was committed adds nothing
  /// the second time). The deduplicating receiver gets each user's event once.
  @Test func aSIGKILLDuringNotificationIngestLosesNothingAndTheSimulatorsRetriesAddNothingTwice() async throws {
    let rig = try await LifecycleRig(relayingNotifications: true)
    defer { rig.stop() }
    let relay = try #require(rig.relay)
    let users = (0..<16).map { "buyer-\($0)" }
    for user in users { try await rig.addUser(user) }
    try relay.send("KILL \(rig.daemon.pid) 5")
    for user in users {
      _ = try await rig.sim.post("/control/apps/\(LifecycleRig.bundleID)/users/\(user)/purchase", ["product_id": "pro.monthly"])
    }
    // The simulator tried each notification once (serially): five answered, then the kill.
    #expect(await relay.waitUntil(timeout: 10) { $0.count == users.count }, "\(relay.records.map(\.status))")
    let statuses = relay.records.map(\.status)
    #expect(statuses.prefix(5).allSatisfy { $0 == 200 } && statuses.contains(502), "\(statuses)")
    let notifications = try await rig.sim.get("/control/notifications")["notifications"]?.arrayValue ?? []
    let answered = notifications.filter { $0["state"]?.stringValue == "delivered" }.compactMap { $0["user_id"]?.stringValue }
    #expect(answered.count >= 5 && answered.count < users.count, "\(answered)")
    try await rig.killAndRestart()

    // Answered before the kill: in the log, before any retry.
    let survived = try await rig.log()
    for user in answered {
      let id = try await rig.substatusUser(of: user)
      #expect(survived.filter { $0.userID == id }.map(\.type) == [.subscriptionStarted], "\(user)")
    }
    // An hour later the simulator sends the others again.
    try await rig.advance(ms: 3_600_000)
    let after = try await rig.sim.get("/control/notifications")["notifications"]?.arrayValue ?? []
    #expect(after.count == users.count && after.allSatisfy { $0["state"]?.stringValue == "delivered" }, "\(after)")

    let log = try await rig.log()
    #expect(log.count == users.count)
    #expect(Set(log.map(\.eventID)).count == log.count, "no event twice in the log")
    #expect(await rig.waitForReceived(log.count), "received \(rig.received().count) of \(log.count)")
    for user in users {
      let id = try await rig.substatusUser(of: user)
      let mine = log.filter { $0.userID == id }
      #expect(mine.map(\.line) == ["SUBSCRIPTION_STARTED at +0 pro.monthly NEVER_SUBSCRIBED->ACTIVE offer NONE 9990 USD"], "\(user)")
      #expect(rig.received(user: id).map(\.eventID) == mine.map(\.eventID), "\(user)")
    }
    #expect(rig.receiver.records.allSatisfy { $0.valid && $0.eventID == $0.bodyEventID })
    #expect(try await rig.waitForAllDelivered())
  }
}
