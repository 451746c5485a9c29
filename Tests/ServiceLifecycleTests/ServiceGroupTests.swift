import ServiceLifecycle
import SubstatusClock
import SubstatusProcessTestKit
import Synchronization
import Testing

/// What the services did, in order.
final class Journal: Sendable {
  private let entries = Mutex<[String]>([])
  func append(_ entry: String) { entries.withLock { $0.append(entry) } }
  var all: [String] { entries.withLock { $0 } }
  var started: Int { all.filter { $0.hasPrefix("start") }.count }
}

/// A service that records its start and stop in a shared journal; with `stubborn`, it ignores
/// the request to stop and ends only when its task is cancelled (or never, with `stuck`).
final class Recorder: Service {
  let name: String
  let journal: Journal
  let stubborn: Bool
  let stuck: Bool
  private let stopping = ShutdownSignal()

  init(_ name: String, _ journal: Journal, stubborn: Bool = false, stuck: Bool = false) {
    (self.name, self.journal, self.stubborn, self.stuck) = (name, journal, stubborn, stuck)
  }

  func run() async throws {
    journal.append("start \(name)")
    if stuck {
      // Ignores cancellation too: only the group's bound gets past it.
      await ShutdownSignal().wait()
    } else if stubborn {
      let cancelled = ShutdownSignal()
      await withTaskCancellationHandler { await cancelled.wait() } onCancel: { cancelled.fire() }
    } else {
      await stopping.wait()
    }
    journal.append("stop \(name)")
  }

  func beginGracefulShutdown() {
    journal.append("told \(name)")
    stopping.fire()
  }
}

/// A listener that fails at once.
struct Failing: Service {
  struct Broken: Error {}
  func run() async throws { throw Broken() }
  func beginGracefulShutdown() {}
}

@Suite struct ServiceGroupTests {
  @Test("background services start before the listeners; the listeners stop first, then the background in reverse")
  func orderOfStartAndStop() async {
    let journal = Journal()
    let group = ServiceGroup(
      background: [.init("a", Recorder("a", journal), stopWithin: .seconds(5)), .init("b", Recorder("b", journal), stopWithin: .seconds(5))],
      listeners: [.init("l", Recorder("l", journal), stopWithin: .seconds(5))],
      clock: SystemClock(), onShutdown: { journal.append("shutdown") })
    let run = Task { await group.run() }
    // All three started (the tasks run concurrently: wait for the three starts, in any order).
    #expect(await waitUntil { journal.started == 3 })
    group.beginGracefulShutdown()
    let outcome = await run.value
    #expect(outcome.unfinished.isEmpty)
    #expect(outcome.failures.isEmpty)
    #expect(outcome.stopped == ["l", "b", "a"])
    let events = journal.all.filter { !$0.hasPrefix("start") }
    #expect(events == ["shutdown", "told l", "stop l", "told b", "told a", "stop b", "stop a"] || events == ["shutdown", "told l", "stop l", "told b", "told a", "stop a", "stop b"])
    // b is waited for before a, whichever returned first.
    #expect(events.firstIndex(of: "told b")! < events.firstIndex(of: "told a")!)
  }

  @Test("a listener that ends stops the group: a failure is reported, the others are stopped")
  func listenerEndingStopsTheGroup() async {
    let journal = Journal()
    let group = ServiceGroup(
      background: [.init("a", Recorder("a", journal), stopWithin: .seconds(5))],
      listeners: [.init("broken", Failing(), stopWithin: .seconds(5))], clock: SystemClock())
    let outcome = await group.run()
    #expect(outcome.failures.count == 1)
    #expect(outcome.failures.first?.hasPrefix("broken: ") == true)
    #expect(outcome.unfinished.isEmpty)
    #expect(journal.all.contains("stop a"))
  }

  @Test("past its bound a service is cancelled; one that ignores cancellation too is left behind, the others still stop")
  func boundsOnTheClock() async {
    let journal = Journal()
    let clock = ManualClock()
    let group = ServiceGroup(
      background: [
        .init("stuck", Recorder("stuck", journal, stuck: true), stopWithin: .seconds(3)),
        .init("stubborn", Recorder("stubborn", journal, stubborn: true), stopWithin: .seconds(2)),
      ],
      listeners: [.init("l", Recorder("l", journal), stopWithin: .seconds(1))], clock: clock)
    let run = Task { await group.run() }
    #expect(await waitUntil { journal.started == 3 })
    let began = clock.monotonicNow
    group.beginGracefulShutdown()
    // The manual clock moves 100 ms at each check until the group is done: the stubborn one is
    // cancelled after its 2 s and ends; the stuck one gets 3 s, is cancelled, gets 5 s more, and
    // is left behind.
    let done = ShutdownSignal()
    Task {
      _ = await run.value
      done.fire()
    }
    #expect(await waitUntil(timeout: .seconds(60)) {
      clock.advance(by: .milliseconds(100))
      return done.hasFired
    })
    let outcome = await run.value
    #expect(outcome.unfinished == ["stuck"])
    #expect(outcome.stopped == ["l", "stubborn"])
    #expect(clock.monotonicNow - began >= .seconds(10), "3 s + 5 s for the stuck one, after the stubborn one's 2 s")
    #expect(!journal.all.contains("stop stuck"))
  }

  @Test("ClosureService calls start at once and stop at shutdown")
  func closureService() async throws {
    let journal = Journal()
    let service = ClosureService(start: { journal.append("start") }, stop: { journal.append("stop") })
    let run = Task { try await service.run() }
    #expect(await waitUntil { journal.all == ["start"] })
    service.beginGracefulShutdown()
    try await run.value
    #expect(journal.all == ["start", "stop"])
  }
}
