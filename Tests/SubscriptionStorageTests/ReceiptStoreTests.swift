import Foundation
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// The stored-receipt part of the Store contract (background refresh), against every store.
extension StoreContractTests {
  static func receipt(
    _ user: String, app: String = "a1", environment: Environment = .production,
    data: String? = nil, due: Int64?, verified: Int64? = 10, failures: Int = 0
  ) -> StoredReceipt {
    StoredReceipt(
      user: Fixture.user(user, app: app, environment: environment),
      receiptData: data ?? "MIIT-\(user)", lastVerifiedMs: verified, nextDueMs: due,
      failureCount: failures)
  }

  @Test(
    "receipts: save, read, replace; unknown app and bad input refused",
    arguments: StoreKind.allCases)
  func receiptsSaveAndRead(kind: StoreKind) async throws {
    try await withStore(kind) { store in
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
  }

  @Test(
    "due receipts: at or before the time, most overdue first, limited, none without a due time",
    arguments: StoreKind.allCases)
  func dueReceipts(kind: StoreKind) async throws {
    try await withStore(kind) { store in
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
  }

  @Test(
    "marking verified and rescheduling change the schedule; unknown receipts are not found",
    arguments: StoreKind.allCases)
  func receiptSchedule(kind: StoreKind) async throws {
    try await withStore(kind) { store in
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
}

@Suite("SQLite stored receipts")
struct SQLiteReceiptTests {
  @Test("the due query is a range read of the receipts_by_due index, joined by primary key")
  func dueQueryUsesTheIndex() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    let plan = try await store.queryPlan(HotQueries.dueReceipts)
    #expect(
      plan.contains { $0.hasPrefix("SEARCH r USING INDEX receipts_by_due (next_due_ms<?)") },
      "\(plan)")
    #expect(plan.contains { $0.hasPrefix("SEARCH u USING INTEGER PRIMARY KEY") }, "\(plan)")
    #expect(!plan.contains { $0.hasPrefix("SCAN") }, "\(plan)")
  }

  @Test("a version 2 database gains the receipts table; its data is kept")
  func migratesFromVersion2() async throws {
    let dir = TemporaryDirectory()
    do {
      let raw = try SQLiteConnection(path: dir.file("store.sqlite"), readOnly: false, create: true)
      #expect(try Schema.migrate(raw, now: 0, through: 2) == 2)
      try raw.run(
        "INSERT INTO tenants(tenant_id, name, disabled, created_ms) VALUES('t1', 'old', 0, 5)")
      raw.close()
    }
    let store = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 1))
    defer { store.close() }
    #expect(store.schemaVersion >= 3)
    try await store.createApp(Fixture.app())
    try await store.saveReceipt(
      StoredReceipt(user: Fixture.user("u1"), receiptData: "MIIT", nextDueMs: 7))
    #expect(try await store.dueReceipts(atMs: 7, limit: 1).map(\.user.userId) == ["u1"])
    #expect(try await store.tenant(id: "t1").name == "old")
  }
}
