import Foundation
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusClock
import SubstatusProcessTestKit
import SubstatusWire
import Synchronization
import Testing
@testable import SubstatusBackgroundJobs
@testable import SubstatusService

/// The transition scheduler's wake-ups with two manual clocks: the service's clock (due times; a
/// test clock under `--clock-url`) and the wire clock (real time: the periodic pass). Neither test
/// fires the service's event signal after the scheduler starts, so neither depends on the
/// daemon's once-a-second poll.
@Suite struct EventTransitionSchedulerTests {
  static let day: Int64 = 86_400_000
  static let hour: Int64 = 3_600_000

  /// dana's monthly period ending `endsIn` after now, auto-renew off: it lapses by time alone.
  static func importLapsing(
    _ h: Harness, _ admin: String, _ app: String, endsIn: Int64, user: String = "dana", transactionId: String = "7000"
  ) async throws {
    let now = h.world.clock.wallMs
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = app
    request.userID = user
    var t = Substatus_V1_Transaction()
    t.transactionID = transactionId
    t.originalTransactionID = transactionId
    t.productID = "premium.monthly"
    t.purchaseDateMs = now + endsIn - 30 * day
    t.expiresDateMs = now + endsIn
    request.transactions = [t]
    var renewal = Substatus_V1_RenewalInfo()
    renewal.originalTransactionID = transactionId
    renewal.productID = "premium.monthly"
    renewal.autoRenewProductID = "premium.monthly"
    renewal.autoRenewEnabled = false
    request.renewalInfos = [renewal]
    _ = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
  }

  /// The EXPIRED events of the app.
  static func expired(_ h: Harness, _ admin: String, _ app: String) async throws -> [Substatus_V1_Event] {
    var request = Substatus_V1_ListEventsRequest()
    request.appID = app
    request.types = [.expired]
    request.limit = 1000
    return try await h.call(Substatus_V1_EventService.listEvents, request, key: admin).events
  }

  /// Waits (5 s of real time at most) until the app has an EXPIRED event.
  static func waitForExpired(_ h: Harness, _ admin: String, _ app: String) async throws -> [Substatus_V1_Event] {
    try await waitForValue(timeout: .seconds(5)) {
      let events = try await expired(h, admin, app)
      return events.isEmpty ? nil : events
    } ?? []
  }

  @Test func aDueTransitionWakesItOnTheServiceClockWhileTheWireClockStandsStill() async throws {
    let world = TestWorld(separateWireClock: true)
    try await withService(world: world) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      try await Self.importLapsing(h, admin, app, endsIn: Self.day)
      let start = world.clock.wallMs
      let (serviceSleepers, wireSleepers) = (world.clock.sleeperCount, world.wireClock.sleeperCount)
      let scheduler = EventTransitionScheduler(service: h.service)
      let running = Task { await scheduler.run() }
      defer { running.cancel() }
      // The first pass found nothing due; it waits for the period's end on the service clock and
      // for its periodic pass on the wire clock.
      #expect(await world.clock.waitForSleepers(serviceSleepers + 1))
      #expect(await world.wireClock.waitForSleepers(wireSleepers + 1))
      #expect(try await Self.expired(h, admin, app).isEmpty)

      // A followed test clock moves to a millisecond before the period's end, then to its end
      // (as `voluntaryExpiryByTimeAlone` moves the simulator's); real time does not move.
      world.clock.advance(by: .milliseconds(Self.day - 1))
      #expect(await world.clock.waitForSleepers(serviceSleepers + 1), "asleep again, nothing due")
      #expect(try await Self.expired(h, admin, app).isEmpty)
      world.clock.advance(by: .milliseconds(1))
      let expired = try await Self.waitForExpired(h, admin, app)
      #expect(expired.map(\.occurredMs) == [start + Self.day])
      #expect(expired.first?.detectedMs == start + Self.day, "detected at once, not at the next periodic pass")
      scheduler.beginGracefulShutdown()
      await running.value
    }
  }

  @Test func thePeriodicPassRunsOnTheWireClockForATransitionAnotherInstanceRecorded() async throws {
    let world = TestWorld(separateWireClock: true)
    let store = InMemoryStore()
    try await withService(store: store, world: world) { a in
      let (admin, app) = try await a.makeTenantWithApp()
      // This instance's scheduler: nothing recorded yet, so no due time to wait for.
      let scheduler = EventTransitionScheduler(service: a.service)
      let wireSleepers = world.wireClock.sleeperCount
      let running = Task { await scheduler.run() }
      defer { running.cancel() }
      #expect(await world.wireClock.waitForSleepers(wireSleepers + 1))

      // Another instance over the same store records a transition an hour ahead (its own signal
      // and scheduler are not this one's); the service clock passes it.
      try await withService(store: store, world: world, operatorKey: a.operatorKey) { b in
        try await Self.importLapsing(b, admin, app, endsIn: Self.hour)
      }
      let start = world.clock.wallMs
      world.clock.advance(by: .milliseconds(2 * Self.hour))
      #expect(try await Self.expired(a, admin, app).isEmpty, "no pass yet: the periodic one waits on real time")

      // 30 s of real time: the periodic pass appends it, detected at the service clock's now.
      world.wireClock.advance(by: scheduler.configuration.maxInterval)
      let expired = try await Self.waitForExpired(a, admin, app)
      #expect(expired.map(\.occurredMs) == [start + Self.hour])
      #expect(expired.first?.detectedMs == start + 2 * Self.hour)
      scheduler.beginGracefulShutdown()
      await running.value
    }
  }

  /// A catch-up yields: with 40 users due at once, batches of 4 and a call in flight, a pass
  /// appends one batch, then pauses on the wire clock (which stands still here) before the next. A CheckEligibility
  /// issued then is answered while 36 users are still due; moving the wire clock by each pause
  /// lets the pass finish, every user's EXPIRED appended once. No timing is asserted: the pauses
  /// are waits on the manual wire clock.
  @Test func aCatchUpPausesBetweenBatchesSoACallIsAnsweredBeforeItEnds() async throws {
    let world = TestWorld(separateWireClock: true)
    try await withService(world: world) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let users = (0..<40).map { "u\($0)" }
      for (n, user) in users.enumerated() {
        try await Self.importLapsing(h, admin, app, endsIn: Self.hour, user: user, transactionId: "\(8000 + n)")
      }
      world.clock.advance(by: .milliseconds(2 * Self.hour))  // every period has ended: 40 users due
      let scheduler = EventTransitionScheduler(
        service: h.service, configuration: .init(batchSize: 4, minPause: .milliseconds(1)), callsInFlight: { 1 })
      let wireSleepers = world.wireClock.sleeperCount
      let pass = Task { await scheduler.appendDue() }
      defer { pass.cancel() }

      // The first batch is appended; the pass now pauses on the wire clock.
      #expect(await world.wireClock.waitForSleepers(wireSleepers + 1), "the pass pauses after its first batch")
      var query = Substatus_V1_EligibilityQuery()
      query.userID = "u39"
      query.productIDs = ["premium.monthly"]
      var check = Substatus_V1_CheckEligibilityRequest()
      check.appID = app
      check.queries = [query]
      let answer = try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: admin)
      #expect(answer.users.first?.products.first?.productID == "premium.monthly")
      // Answered before the catch-up ends: one batch in, the rest still due.
      #expect(try await Self.expired(h, admin, app).count == 4)
      let due = try await h.service.store.nextTransitionDueMs()
      #expect(due.map { $0 <= world.clock.wallMs } == true, "users are still due")

      // Each pause ends as the wire clock moves past it; nine pauses between ten batches.
      for _ in 0..<9 {
        #expect(await world.wireClock.waitForSleepers(wireSleepers + 1))
        world.wireClock.advance(by: .milliseconds(1))
      }
      _ = await pass.value
      let expired = try await Self.expired(h, admin, app)
      #expect(expired.count == 40)
      #expect(Set(expired.map(\.userID)) == Set(users))
    }
  }

  /// An idle server catches up at full speed: with no call in flight (the gauge says 0), the same
  /// 40 users in batches of 4 are all appended by one pass that never waits on the wire clock
  /// (which stands still here: one pause would stop the pass until the bound). Calls that come in
  /// later make the next batches pause again (the test above).
  @Test func anIdleServersCatchUpDoesNotPauseBetweenBatches() async throws {
    let world = TestWorld(separateWireClock: true)
    try await withService(world: world) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let users = (0..<40).map { "u\($0)" }
      for (n, user) in users.enumerated() {
        try await Self.importLapsing(h, admin, app, endsIn: Self.hour, user: user, transactionId: "\(8000 + n)")
      }
      world.clock.advance(by: .milliseconds(2 * Self.hour))  // every period has ended: 40 users due
      let gaugeReads = Mutex(0)
      let scheduler = EventTransitionScheduler(
        service: h.service, configuration: .init(batchSize: 4, minPause: .milliseconds(1)),
        callsInFlight: {
          gaugeReads.withLock { $0 += 1 }
          return 0
        })
      let pass = Task { await scheduler.appendDue() }
      defer { pass.cancel() }
      // Bounded: a pass that paused would wait for the wire clock, which never moves here.
      let deadline = ContinuousClock.now + .seconds(10)
      var expired: [Substatus_V1_Event] = []
      while ContinuousClock.now < deadline {
        expired = try await Self.expired(h, admin, app)
        if expired.count == 40 { break }
        try await Task.sleep(for: .milliseconds(5))
      }
      #expect(expired.count == 40, "one pass appended every batch without pausing")
      #expect(Set(expired.map(\.userID)) == Set(users))
      #expect(gaugeReads.withLock { $0 } >= 9, "the gauge is read between batches")
      if expired.count == 40 { _ = await pass.value }
    }
  }

  @Test(arguments: [(0.25, 4, 12), (0.5, 4, 4), (1.0, 4, 1), (0.1, 10, 90)])
  func thePauseAfterABatchKeepsTheShare(share: Double, tookMs: Int, pauseMs: Int) {
    let configuration = EventTransitionScheduler.Configuration(share: share, minPause: .milliseconds(1))
    #expect(configuration.pause(after: .milliseconds(tookMs)) == .milliseconds(pauseMs))
  }
}
