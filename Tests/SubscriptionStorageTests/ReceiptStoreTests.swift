import Foundation
import SubscriptionDomain
import StoreContractTesting
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// SQLite specifics of stored receipts (the contract cases are in `StoreContract`).
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
