import Foundation
import SubstatusClock
import SubstatusProcessTestKit
import Synchronization
import Testing

/// ``ServiceClock/schedule(after:_:)``: work runs once its delay has passed, and cancelled work is let
/// go of at once (the gateway's call deadlines: a client's hour-long deadline must not pin its
/// finished call for an hour).
@Suite("Scheduled work")
struct ScheduledWorkTests {
  final class Payload: Sendable {}

  final class Flag: Sendable {
    let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
  }

  @Test("the system clock's work runs after its delay")
  func systemClockRuns() async throws {
    let ran = Flag()
    _ = SystemClock().schedule(after: .milliseconds(5)) { ran.value.store(true, ordering: .relaxed) }
    #expect(await waitUntil(timeout: .seconds(5)) { ran.isSet })
  }

  @Test("cancelled system-clock work never runs and releases what it holds at once, an hour early")
  func systemClockCancelReleases() async throws {
    weak var held: Payload?
    let ran = Flag()
    let work: any ScheduledWork
    do {
      let payload = Payload()
      held = payload
      work = SystemClock().schedule(after: .seconds(3_600)) {
        withExtendedLifetime(payload) { ran.value.store(true, ordering: .relaxed) }
      }
    }
    #expect(held != nil, "the scheduled work holds its payload")
    work.cancel()
    #expect(await waitUntil(timeout: .seconds(5)) { held == nil }, "cancelled work let go of its payload")
    #expect(!ran.isSet)
  }

  @Test("a manual clock's work runs when the clock passes its delay, and not when cancelled")
  func manualClock() async throws {
    let clock = ManualClock()
    let ran = Flag(), cancelledRan = Flag()
    _ = clock.schedule(after: .seconds(10)) { ran.value.store(true, ordering: .relaxed) }
    let cancelled = clock.schedule(after: .seconds(10)) { cancelledRan.value.store(true, ordering: .relaxed) }
    cancelled.cancel()
    #expect(await clock.waitForSleepers(1))
    clock.advance(by: .seconds(10))
    #expect(await waitUntil(timeout: .seconds(5)) { ran.isSet })
    #expect(!cancelledRan.isSet)
  }
}
