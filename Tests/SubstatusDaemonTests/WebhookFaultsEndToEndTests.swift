import Foundation
import SubstatusWire
import Testing

/// Webhook faults end to end (``LifecycleRig``: real substatusd following the simulator's clock,
/// a real receiver): a receiver that fails then hangs is retried with backoff on the simulated
/// clock; one down for a simulated day gets everything, in order per user, once back; a replay
/// delivers again; a SIGKILL of substatusd while a POST is in flight loses nothing, and a
/// receiver that deduplicates by `Substatus-Event-Id` sees each event once (at-least-once).
@Suite(.serialized) struct WebhookFaultsEndToEndTests {
  static let second: Int64 = 1_000
  static let hour: Int64 = 3_600_000

  /// The webhook's only delivery, once it has `attempts` attempts.
  static func delivery(_ rig: LifecycleRig, attempts: Int) async throws -> Substatus_V1_Delivery {
    let deadline = Date().addingTimeInterval(10)
    while true {
      let deliveries = try await rig.deliveries()
      if let first = deliveries.first, first.attempts.count >= attempts || Date() > deadline {
        try #require(deliveries.count == 1, "\(deliveries)")
        return first
      }
      try await Task.sleep(for: .milliseconds(20))
    }
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

    // 2. The receiver hangs: the POST times out after 10 s of the simulated clock.
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
    let deadline = Date().addingTimeInterval(10)
    while try await rig.deliveries().map(\.attempts.count) != [1, 1] && Date() < deadline {
      try await Task.sleep(for: .milliseconds(10))
    }
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
    #expect(rig.receiver.records.allSatisfy { $0.valid })
    #expect(try await rig.waitForAllDelivered())
  }
}
