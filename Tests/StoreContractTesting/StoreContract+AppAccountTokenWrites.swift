import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The Set App Account Token outbox part of the Store contract (docs/architecture.md rule 26).
extension StoreContract {
  /// Writes owed to Apple: written by the commit of a TRANSFER (none under SHARE or KEEP_FIRST,
  /// none when nothing moved), one row per original transaction, replaced by a later transfer
  /// (new owner, attempts reset, a claim's lease kept), claimed when due under a lease, rescheduled,
  /// deleted when finished for the owner it names, released when a transfer replaced it during
  /// the attempt, kept with its reason when given up (and reopened by the next transfer), erased
  /// with the user it names.
  static func appAccountTokenWrites(_ store: any Store) async throws {
    try await SharingFixture.seed(store, .transfer)
    let shared = SharingFixture.shared
    func row() async throws -> AppAccountTokenWrite? {
      try await store.appAccountTokenWrite(appId: "a1", environment: .production, originalTransactionId: shared)
    }
    // The first submitter takes nothing from anyone: no write.
    _ = try await store.ingest([SharingFixture.restore("u1", at: 1_000)], atMs: Fixture.now)
    #expect(try await row() == nil)
    #expect(try await store.nextAppAccountTokenWriteDueMs() == nil)
    // u2 takes it at 2_000: the commit holds the write, due at the transfer.
    _ = try await store.ingest([SharingFixture.restore("u2", at: 2_000)], atMs: Fixture.now)
    let first = AppAccountTokenWrite(
      appId: "a1", environment: .production, originalTransactionId: shared, userId: "u2", transferredMs: 2_000)
    #expect(try await row() == first)
    #expect(try await store.nextAppAccountTokenWriteDueMs() == 2_000)
    // A resubmission by the owner moves nothing: the row stays as it is.
    _ = try await store.ingest([SharingFixture.restore("u2", at: 2_500)], atMs: Fixture.now)
    #expect(try await row() == first)

    // Claimed when due, under a lease; not before, not twice.
    #expect(try await store.claimDueAppAccountTokenWrites(atMs: 1_999, limit: 10, leaseUntilMs: 9_000).isEmpty)
    #expect(try await store.claimDueAppAccountTokenWrites(atMs: 2_000, limit: 10, leaseUntilMs: 9_000) == [first])
    #expect(try await store.claimDueAppAccountTokenWrites(atMs: 8_999, limit: 10, leaseUntilMs: 20_000).isEmpty)
    #expect(try await store.nextAppAccountTokenWriteDueMs() == 9_000)
    // A failed attempt reschedules it with its attempts and reason.
    #expect(try await store.rescheduleAppAccountTokenWrite(first, attempts: 1, nextAttemptMs: 12_000, detail: "unavailable: 503"))
    var rescheduled = first
    rescheduled.attempts = 1
    rescheduled.nextAttemptMs = 12_000
    rescheduled.detail = "unavailable: 503"
    #expect(try await row() == rescheduled)

    // u1 takes it back at 3_000 while u2's write waits: the row is u1's, attempts reset, and it
    // keeps the later due time (a lease or Apple's backoff is never cut short).
    _ = try await store.ingest([SharingFixture.restore("u1", at: 3_000)], atMs: Fixture.now)
    let second = AppAccountTokenWrite(
      appId: "a1", environment: .production, originalTransactionId: shared, userId: "u1", transferredMs: 3_000,
      nextAttemptMs: 12_000)
    #expect(try await row() == second)
    // Claimed; u2 takes it again during the attempt: finishing u1's write neither deletes u2's
    // nor leaves it leased: it is due at the release.
    #expect(try await store.claimDueAppAccountTokenWrites(atMs: 12_000, limit: 10, leaseUntilMs: 40_000) == [second])
    _ = try await store.ingest([SharingFixture.restore("u2", at: 4_000)], atMs: Fixture.now)
    #expect(try await row()?.nextAttemptMs == 40_000)
    #expect(try await store.finishAppAccountTokenWrite(second, givenUpDetail: nil, releaseAtMs: 13_000) == false)
    let third = AppAccountTokenWrite(
      appId: "a1", environment: .production, originalTransactionId: shared, userId: "u2", transferredMs: 4_000,
      nextAttemptMs: 13_000)
    #expect(try await row() == third)
    // A reschedule of a replaced write only moves the due time.
    #expect(try await store.rescheduleAppAccountTokenWrite(second, attempts: 5, nextAttemptMs: 14_000, detail: "x") == false)
    let moved = try await row()
    #expect(moved?.attempts == 0 && moved?.detail == nil && moved?.nextAttemptMs == 14_000)
    // Finished for the owner it names: deleted.
    #expect(try await store.finishAppAccountTokenWrite(third, givenUpDetail: nil, releaseAtMs: 15_000))
    #expect(try await row() == nil)
    #expect(try await store.nextAppAccountTokenWriteDueMs() == nil)
    #expect(try await store.finishAppAccountTokenWrite(third, givenUpDetail: nil, releaseAtMs: 15_000) == false)

    // Given up: kept with the reason, never claimed; the next transfer reopens it at its instant.
    _ = try await store.ingest([SharingFixture.restore("u1", at: 5_000)], atMs: Fixture.now)
    var fourth = try #require(try await row())
    #expect(fourth.userId == "u1" && fourth.nextAttemptMs == 5_000)
    fourth.attempts = 10
    #expect(try await store.finishAppAccountTokenWrite(fourth, givenUpDetail: "gave up: 503", releaseAtMs: 6_000))
    let givenUp = try #require(try await row())
    #expect(givenUp.isGivenUp && givenUp.detail == "gave up: 503" && givenUp.attempts == 10)
    #expect(try await store.claimDueAppAccountTokenWrites(atMs: .max, limit: 10, leaseUntilMs: .max).isEmpty)
    #expect(try await store.nextAppAccountTokenWriteDueMs() == nil)
    _ = try await store.ingest([SharingFixture.restore("u2", at: 7_000)], atMs: Fixture.now)
    #expect(
      try await row()
        == AppAccountTokenWrite(
          appId: "a1", environment: .production, originalTransactionId: shared, userId: "u2", transferredMs: 7_000))

    // Oldest due first, limited; environments apart.
    var sandbox = SharingFixture.restore("u1", at: 6_000)
    sandbox.user.environment = .sandbox
    _ = try await store.ingest([sandbox], atMs: Fixture.now)
    sandbox.user.userId = "u3"
    sandbox.submittedMs = 6_500
    _ = try await store.ingest([sandbox], atMs: Fixture.now)
    let sandboxRow = try #require(
      try await store.appAccountTokenWrite(appId: "a1", environment: .sandbox, originalTransactionId: shared))
    #expect(sandboxRow.userId == "u3" && sandboxRow.nextAttemptMs == 6_500)
    let oldest = try await store.claimDueAppAccountTokenWrites(atMs: 10_000, limit: 1, leaseUntilMs: 50_000)
    #expect(oldest.map(\.environment) == [.sandbox])

    // Erasing the user a write names deletes it; the other environment's stays.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u2"])
    #expect(try await row() == nil)
    #expect(try await store.appAccountTokenWrite(appId: "a1", environment: .sandbox, originalTransactionId: shared) != nil)
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u3"])
    #expect(try await store.appAccountTokenWrite(appId: "a1", environment: .sandbox, originalTransactionId: shared) == nil)

    // KEEP_FIRST and SHARE move nothing: no write.
    for sharing in [PurchaseSharing.keepFirst, .share] {
      _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: sharing))
      _ = try await store.ingest(
        [SharingFixture.restore("u5", at: 8_000), SharingFixture.restore("u4", at: 8_000)], atMs: Fixture.now)
      #expect(try await row() == nil)
    }
  }
}
