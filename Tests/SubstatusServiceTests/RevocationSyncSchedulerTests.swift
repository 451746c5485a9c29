import Testing

@testable import SubstatusService

/// The bound on REFUND/REVOKE-triggered syncs: one run per user at a time, later triggers
/// coalesced into one rerun (with the newest transaction id), a cap on users tracked.
@Suite struct RevocationSyncSchedulerTests {
  private func key(_ user: String) -> RevocationSyncScheduler.Key {
    RevocationSyncScheduler.Key(appId: "app", environment: .production, userId: user)
  }

  @Test func oneRunPerUserAndTriggersDuringARunCoalesceIntoOneRerun() {
    let scheduler = RevocationSyncScheduler(maximumUsers: 2)
    #expect(scheduler.claim(key("a"), originalTransactionId: "1") == .start)
    #expect(scheduler.claim(key("a"), originalTransactionId: "2") == .coalesced)
    #expect(scheduler.claim(key("a"), originalTransactionId: "3") == .coalesced)
    #expect(scheduler.claim(key("b"), originalTransactionId: "9") == .start)
    // Two users tracked: a third is dropped (left to the reconciler).
    #expect(scheduler.claim(key("c"), originalTransactionId: "7") == .dropped)
    // a's run ends: one rerun, with the newest id; then the slot is free.
    #expect(scheduler.finish(key("a")) == "3")
    #expect(scheduler.finish(key("a")) == nil)
    #expect(scheduler.runningCount == 1)
    #expect(scheduler.claim(key("c"), originalTransactionId: "7") == .start)
    #expect(scheduler.finish(key("b")) == nil)
    #expect(scheduler.finish(key("c")) == nil)
    #expect(scheduler.runningCount == 0)
  }
}
