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
}
