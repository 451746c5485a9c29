import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// Erasure leaves nothing behind: every table of the schema, as the database itself lists them
/// (so a table added later is covered), is searched for the erased user's ids.
@Suite("SQLite erasure")
struct SQLiteErasureTests {
  /// How many rows of each table mention `marker` in any column (text, or bytes of a blob).
  static func rowsMentioning(_ marker: String, in store: SQLiteStore) async throws -> [String: Int64] {
    try await store.readers.read { db throws(StoreError) in
      let tables = try db.all("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") { $0.text(0) }
      var counts: [String: Int64] = [:]
      for table in tables {
        let columns = try db.all("SELECT name FROM pragma_table_info(?)", [.text(table)]) { $0.text(0) }
        let condition = columns.map { "instr(CAST(\"\($0)\" AS BLOB), ?1) > 0" }.joined(separator: " OR ")
        counts[table] = try db.first(
          "SELECT count(*) FROM \"\(table)\" WHERE \(condition)", [.blob(Array(marker.utf8))]
        ) { $0.int(0) } ?? 0
      }
      return counts
    }
  }

  @Test("after DeleteUsers no row of any table mentions the user's ids; the others stay")
  func noRowLeftBehind() async throws {
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 2))
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    try await ErasureFixture.populate(store)
    // Read once so the user keys are cached: the erasure must not leave a stale one behind.
    _ = try await store.history(of: Fixture.user(ErasureFixture.userId))

    let before = try await Self.rowsMentioning(ErasureFixture.marker, in: store)
    // The fixture reaches every table that holds user data (so the check below can fail).
    for table in ["users", "transactions", "renewal_infos", "renewal_info_removals", "receipts", "history_syncs", "events"] {
      #expect((before[table] ?? 0) > 0, "\(table) holds none of the fixture's data")
    }

    _ = try await store.deleteUsers(
      appId: "a1", userIds: [ErasureFixture.userId, ErasureFixture.unclaimedUserId])
    let after = try await Self.rowsMentioning(ErasureFixture.marker, in: store)
    // Only the same user id in app a2, which must stay, still mentions it: its `users` row and
    // its events.
    let a2Events = try await store.events(appId: "a2", query: EventQuery(), afterSequence: 0, limit: 1000)
    #expect(!a2Events.isEmpty && a2Events.allSatisfy { $0.event.userId == ErasureFixture.userId })
    #expect(after.filter { $0.value > 0 } == ["users": 1, "events": Int64(a2Events.count)])
    // Event schedules hold only a user key: none is left for a user that no longer exists.
    let schedules = try await store.readers.read { db throws(StoreError) in
      try db.first("SELECT count(*), count(*) FILTER (WHERE user_key NOT IN (SELECT user_key FROM users)) FROM event_schedules") {
        ($0.int(0), $0.int(1))
      }
    }
    #expect(schedules?.0 ?? 0 > 0 && schedules?.1 == 0)
    #expect(Set(after.keys) == Set(before.keys))
    try await ErasureFixture.expectOthersKept(store)
    #expect(try await store.integrityCheck() == ["ok"])

    // The same id starts afresh: no stale cached key hides the new data.
    let user = Fixture.user(ErasureFixture.userId)
    _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("new1", purchase: 1)])], atMs: Fixture.now)
    #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["new1"])
  }
}
