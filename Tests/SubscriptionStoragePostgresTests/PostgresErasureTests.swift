import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// Erasure leaves nothing behind on PostgreSQL: every table of the schema, as the catalog lists
/// them (so a table added later is covered), is searched for the erased user's ids.
@Suite("PostgreSQL erasure")
struct PostgresErasureTests {
  /// How many rows of each table mention `marker` in any column (text form, or bytes of a bytea).
  static func rowsMentioning(_ marker: String, url: String) throws -> [String: Int64] {
    let db = try PGConnection(conninfo: url)
    let columns = try db.query(
      """
      SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
      WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position
      """)
    var byTable: [String: [String]] = [:]
    for c in columns {
      let name = "\"\(c.text(1))\""
      byTable[c.text(0), default: []].append(
        c.text(2) == "bytea"
          ? "position(convert_to($1, 'UTF8') in \(name)) > 0"
          : "strpos(\(name)::text, $1) > 0")
    }
    var counts: [String: Int64] = [:]
    for (table, conditions) in byTable {
      counts[table] =
        try db.first(
          "SELECT count(*) FROM \"\(table)\" WHERE \(conditions.joined(separator: " OR "))", [.text(marker)]
        )?.int(0) ?? 0
    }
    return counts
  }

  @Test func afterDeleteUsersNoRowOfAnyTableMentionsTheUser() async throws {
    let server = try await blocking { try PostgresServer.fast.get() }
    let url = try await blocking { try server.createDatabase() }
    let store = try PostgresStore(configuration: .init(url: url, keyring: testKeyring, poolSize: 2))
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    try await ErasureFixture.populate(store)

    let before = try await blocking { try Self.rowsMentioning(ErasureFixture.marker, url: url) }
    for table in ["users", "transactions", "renewal_infos", "renewal_info_removals", "receipts", "history_syncs", "events"] {
      #expect((before[table] ?? 0) > 0, "\(table) holds none of the fixture's data")
    }

    _ = try await store.deleteUsers(
      appId: "a1", userIds: [ErasureFixture.userId, ErasureFixture.unclaimedUserId])
    let after = try await blocking { try Self.rowsMentioning(ErasureFixture.marker, url: url) }
    // Only the same user id in app a2, which must stay, still mentions it: its `users` row and
    // its events.
    let a2Events = try await store.events(appId: "a2", query: EventQuery(), afterSequence: 0, limit: 1000)
    #expect(!a2Events.isEmpty && a2Events.allSatisfy { $0.event.userId == ErasureFixture.userId })
    #expect(after.filter { $0.value > 0 } == ["users": 1, "events": Int64(a2Events.count)])
    // Event schedules hold only a user key (a foreign key to `users`): every one left belongs to a
    // user that still exists, and the erased users had some.
    let schedules = try await blocking {
      try PGConnection(conninfo: url).first("SELECT count(*) FROM event_schedules")?.int(0) ?? 0
    }
    #expect(schedules == 2)
    #expect(Set(after.keys) == Set(before.keys))
    try await ErasureFixture.expectOthersKept(store)
  }
}
