import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The stored-receipt part of the Store contract (background refresh).
extension StoreContract {
  /// A stored receipt of `user` (receipt data derived from the user id unless given).
  public static func receipt(
    _ user: String, app: String = "a1", environment: Environment = .production,
    data: String? = nil, due: Int64?, verified: Int64? = 10, failures: Int = 0
  ) -> StoredReceipt {
    StoredReceipt(
      user: Fixture.user(user, app: app, environment: environment),
      receiptData: data ?? "MIIT-\(user)", lastVerifiedMs: verified, nextDueMs: due,
      failureCount: failures)
  }

  /// receipts: save, read, replace; unknown app and bad input refused
  static func receiptsSaveAndRead(_ store: any Store) async throws {
    await expectStoreError(.notFound) { try await store.saveReceipt(Self.receipt("u1", due: 5)) }
    try await Fixture.seed(store)
    #expect(try await store.receipt(of: Fixture.user("u1")) == nil)
    try await store.saveReceipt(Self.receipt("u1", due: 5))
    #expect(try await store.receipt(of: Fixture.user("u1")) == Self.receipt("u1", due: 5))
    // One per user: a newer receipt replaces it (and the environments are kept apart).
    let newer = Self.receipt("u1", data: "MIIT-newer", due: nil, verified: 20, failures: 0)
    try await store.saveReceipt(newer)
    #expect(try await store.receipt(of: Fixture.user("u1")) == newer)
    #expect(try await store.receipt(of: Fixture.user("u1", environment: .sandbox)) == nil)
    await expectStoreError(.invalidArgument) {
      try await store.saveReceipt(Self.receipt("u2", data: "", due: 1))
    }
    await expectStoreError(.invalidArgument) {
      try await store.saveReceipt(Self.receipt("", due: 1))
    }
    await expectStoreError(.invalidArgument) {
      try await store.saveReceipt(Self.receipt("u2", due: 1, failures: -1))
    }
    // A user without purchase data can have a receipt; its history stays empty.
    #expect(try await store.history(of: Fixture.user("u1")).transactions.isEmpty)
  }

  /// due receipts: at or before the time, most overdue first, limited, none without a due time
  static func dueReceipts(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a0"))
    try await store.saveReceipt(Self.receipt("late", due: 300))
    try await store.saveReceipt(Self.receipt("b", due: 100))
    try await store.saveReceipt(Self.receipt("a", due: 100))
    try await store.saveReceipt(Self.receipt("a", app: "a0", due: 100))
    try await store.saveReceipt(Self.receipt("s", environment: .sandbox, due: 50))
    try await store.saveReceipt(Self.receipt("never", due: nil))
    try await store.saveReceipt(Self.receipt("future", due: 301))
    let names = { (rs: [StoredReceipt]) in rs.map { "\($0.user.appId)/\($0.user.userId)" } }
    #expect(
      names(try await store.dueReceipts(atMs: 300, limit: 100)) == [
        "a1/s", "a0/a", "a1/a", "a1/b", "a1/late",
      ])
    #expect(names(try await store.dueReceipts(atMs: 100, limit: 2)) == ["a1/s", "a0/a"])
    #expect(try await store.dueReceipts(atMs: 49, limit: 100).isEmpty)
    let all = try await store.dueReceipts(atMs: Int64.max, limit: 100)
    #expect(all.count == 6)
    #expect(all.first { $0.user.userId == "s" }?.user.environment == .sandbox)
    #expect(all.first { $0.user.userId == "future" } == Self.receipt("future", due: 301))
  }

  /// marking verified and rescheduling change the schedule; unknown receipts are not found
  static func receiptSchedule(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let user = Fixture.user("u1")
    await expectStoreError(.notFound) {
      try await store.markReceiptVerified(user: user, atMs: 1, nextDueMs: 2, receiptData: nil)
    }
    await expectStoreError(.notFound) {
      try await store.rescheduleReceipt(user: user, nextDueMs: 2, failureCount: 1)
    }
    try await store.saveReceipt(Self.receipt("u1", due: 100))
    try await store.rescheduleReceipt(user: user, nextDueMs: 500, failureCount: 3)
    #expect(try await store.receipt(of: user) == Self.receipt("u1", due: 500, failures: 3))
    #expect(try await store.dueReceipts(atMs: 499, limit: 10).isEmpty)
    // Verified: the failure count resets, the receipt is replaced only when a new one is given.
    try await store.markReceiptVerified(user: user, atMs: 600, nextDueMs: 900, receiptData: nil)
    #expect(try await store.receipt(of: user) == Self.receipt("u1", due: 900, verified: 600))
    try await store.markReceiptVerified(
      user: user, atMs: 700, nextDueMs: nil, receiptData: "MIIT-latest")
    #expect(
      try await store.receipt(of: user)
        == Self.receipt("u1", data: "MIIT-latest", due: nil, verified: 700))
    #expect(try await store.dueReceipts(atMs: Int64.max, limit: 10).isEmpty)
    await expectStoreError(.invalidArgument) {
      try await store.markReceiptVerified(user: user, atMs: 1, nextDueMs: 2, receiptData: "")
    }
    await expectStoreError(.invalidArgument) {
      try await store.rescheduleReceipt(user: user, nextDueMs: 2, failureCount: -1)
    }
  }

  /// claiming due receipts leases them: other claims skip them until the lease expires or the outcome is recorded
  static func claimDueReceipts(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a0"))
    try await store.saveReceipt(Self.receipt("late", due: 300))
    try await store.saveReceipt(Self.receipt("b", due: 100))
    try await store.saveReceipt(Self.receipt("a", due: 100))
    try await store.saveReceipt(Self.receipt("a", app: "a0", due: 100))
    try await store.saveReceipt(Self.receipt("s", environment: .sandbox, due: 50, failures: 2))
    try await store.saveReceipt(Self.receipt("never", due: nil))
    try await store.saveReceipt(Self.receipt("future", due: 301))
    let names = { (rs: [StoredReceipt]) in rs.map { "\($0.user.appId)/\($0.user.userId)" } }
    await expectStoreError(.invalidArgument) {
      _ = try await store.claimDueReceipts(atMs: 300, limit: 10, leaseUntilMs: 300)
    }
    // The same selection and order as dueReceipts; the receipts come back as they were.
    let first = try await store.claimDueReceipts(atMs: 300, limit: 2, leaseUntilMs: 1000)
    #expect(names(first) == ["a1/s", "a0/a"])
    #expect(first.first == Self.receipt("s", environment: .sandbox, due: 50, failures: 2))
    // Leased: no longer due until the lease ends; the rest is claimed by the next call.
    #expect(try await store.receipt(of: Fixture.user("s", environment: .sandbox))?.nextDueMs == 1000)
    #expect(names(try await store.dueReceipts(atMs: 300, limit: 10)) == ["a1/a", "a1/b", "a1/late"])
    let second = try await store.claimDueReceipts(atMs: 300, limit: 10, leaseUntilMs: 2000)
    #expect(names(second) == ["a1/a", "a1/b", "a1/late"])
    // Only the receipt that became due since is claimed; the leased ones are skipped.
    #expect(
      names(try await store.claimDueReceipts(atMs: 999, limit: 10, leaseUntilMs: 5000)) == [
        "a1/future"
      ])
    // Recording an outcome replaces the lease with the real schedule.
    try await store.markReceiptVerified(
      user: Fixture.user("a", app: "a0"), atMs: 400, nextDueMs: 9000, receiptData: nil)
    try await store.rescheduleReceipt(user: Fixture.user("b"), nextDueMs: 500, failureCount: 1)
    #expect(
      names(try await store.claimDueReceipts(atMs: 600, limit: 10, leaseUntilMs: 700)) == [
        "a1/b"
      ])
    // A claimant that never records an outcome (it died): the receipt is due again at the end of
    // its lease and the next claim takes it, with the due time of the lease.
    let expired = try await store.claimDueReceipts(atMs: 1000, limit: 10, leaseUntilMs: 1500)
    #expect(names(expired) == ["a1/b", "a1/s"])
    #expect(expired.map(\.nextDueMs) == [700, 1000])
    #expect(expired.last?.failureCount == 2)
    // A receipt saved again while leased takes the new schedule.
    try await store.saveReceipt(Self.receipt("a", due: 1200))
    #expect(names(try await store.claimDueReceipts(atMs: 1200, limit: 10, leaseUntilMs: 3000)) == ["a1/a"])
    #expect(try await store.receipt(of: Fixture.user("never"))?.nextDueMs == nil)
    #expect(try await store.receipt(of: Fixture.user("future"))?.nextDueMs == 5000)
  }

  /// concurrent claims never hand out the same receipt twice, and together take every due receipt
  static func concurrentClaims(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let count = 60
    for i in 0..<count { try await store.saveReceipt(Self.receipt("u\(i)", due: Int64(i % 7))) }
    let claims = try await withThrowingTaskGroup(of: [String].self) { group in
      for _ in 0..<6 {
        group.addTask {
          var mine: [String] = []
          while true {
            let batch = try await store.claimDueReceipts(atMs: 10, limit: 4, leaseUntilMs: 100)
            if batch.isEmpty { return mine }
            mine += batch.map(\.user.userId)
          }
        }
      }
      return try await group.reduce(into: [[String]]()) { $0.append($1) }
    }
    let all = claims.flatMap { $0 }
    #expect(all.count == count, "\(all.count) claimed")
    #expect(Set(all).count == count, "a receipt was claimed twice")
    #expect(try await store.dueReceipts(atMs: 99, limit: 1000).isEmpty)
    #expect(try await store.dueReceipts(atMs: 100, limit: 1000).count == count)
  }
}
