import Synchronization
import Testing
@testable import SubstatusService

/// The wake-up of WatchEvents streams and the webhook dispatcher: no signal between a read and
/// the wait after it is lost; cancellation and close end a wait.
@Suite struct EventSignalTests {
  @Test func aSignalAfterTheGenerationWasTakenEndsTheWaitAtOnce() async {
    let signal = EventSignal()
    let seen = signal.generation
    signal.signal()
    await signal.wait(after: seen)  // returns: the signal came between the read and the wait
    #expect(signal.generation == seen + 1)
    #expect(signal.waiting == 0)
  }

  @Test func aWaiterWakesOnTheNextSignal() async {
    let signal = EventSignal()
    let woke = Mutex(false)
    let seen = signal.generation
    let waiter = Task {
      await signal.wait(after: seen)
      woke.withLock { $0 = true }
    }
    while signal.waiting == 0 { await Task.yield() }
    #expect(!woke.withLock { $0 })
    signal.signal()
    await waiter.value
    #expect(woke.withLock { $0 })
    #expect(signal.waiting == 0)
  }

  @Test func cancellationEndsAWaitAndForgetsTheWaiter() async {
    let signal = EventSignal()
    let waiter = Task { await signal.wait(after: signal.generation) }
    while signal.waiting == 0 { await Task.yield() }
    waiter.cancel()
    await waiter.value
    #expect(signal.waiting == 0)
  }

  @Test func closeEndsEveryWaitNowAndLater() async {
    let signal = EventSignal()
    let seen = signal.generation
    let waiter = Task { await signal.wait(after: seen) }
    while signal.waiting == 0 { await Task.yield() }
    signal.close()
    await waiter.value
    #expect(signal.isClosed)
    await signal.wait(after: signal.generation)  // returns at once
  }
}
