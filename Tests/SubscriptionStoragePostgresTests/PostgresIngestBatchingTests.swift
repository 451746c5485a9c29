import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// An ingest costs a few statements whatever its size (``PostgresStore/applyBatched(_:atMs:_:catalogs:)``),
/// counted on the connection that runs it.
@Suite("PostgreSQL ingest batching")
struct PostgresIngestBatchingTests {
  /// `users` users of app a1 with `perUser` transactions and a renewal info each.
  private static func batch(users: Range<Int>, perUser: Int, submittedMs: Int64? = nil) -> [EncodedPurchases] {
    users.map { u in
      let original = "otx-\(u)"
      var transactions: [Transaction] = []
      for i in 0..<perUser {
        let id = i == 0 ? original : "\(original)-\(i)"
        let start = Int64(i) * 1_000
        transactions.append(
          Fixture.transaction(id, original: original, purchase: start, expires: start + 1_000, signed: start))
      }
      return EncodedPurchases(
        UserPurchases(
          user: Fixture.user("user-\(u)"), transactions: transactions,
          renewalInfos: [Fixture.renewal(original, signed: Int64(perUser) * 1_000)], submittedMs: submittedMs))
    }
  }

  /// Runs `apply` in one transaction on `db` and returns its summary and the statements it ran.
  private static func counted(_ db: PGConnection, _ body: () throws -> IngestSummary) throws -> (IngestSummary, Int) {
    try db.execute("BEGIN")
    let before = db.statementsRun
    let summary = try body()
    let statements = db.statementsRun - before
    try db.execute("COMMIT")
    return (summary, statements)
  }

  @Test func anIngestOfTenUsersTakesAFewStatementsNewOrKnownAndTheSameRowsAsOneByOne() async throws {
    try await withPostgresStore { store in
      try await Fixture.seed(store)
      try await store.putProducts(
        appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")])
      let db = try PGConnection(conninfo: store.configuration.url)
      let catalogs = EventCatalogCache()
      // New users: keys, inserts, catalog, one statement per table written, the events.
      let fresh = Self.batch(users: 0..<10, perUser: 10)
      let (first, newStatements) = try Self.counted(db) {
        try PostgresStore.apply(fresh, atMs: 1_000_000, db, catalogs: catalogs)
      }
      #expect(first.transactionsWritten == 100 && first.renewalInfosWritten == 10)
      #expect(first.eventsAppended >= 10)
      #expect(newStatements <= 12, "\(newStatements) statements")
      // Known users, each with one more renewal: the stored rows and schedules are read too.
      let more = Self.batch(users: 0..<10, perUser: 11)
      let (second, knownStatements) = try Self.counted(db) {
        try PostgresStore.apply(more, atMs: 2_000_000, db, catalogs: catalogs)
      }
      #expect(second.transactionsWritten == 10 && second.renewalInfosWritten == 0)  // newer, says the same
      #expect(knownStatements <= 12, "\(knownStatements) statements")
      // The same data again: nothing written, nothing logged.
      let (again, _) = try Self.counted(db) { try PostgresStore.apply(more, atMs: 3_000_000, db, catalogs: catalogs) }
      #expect(again == IngestSummary())

      // The same batches one update at a time (the path of apps that track ownership) store the
      // same rows and log the same events.
      _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .transfer))
      _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .share))
      _ = try await store.deleteUsers(appId: "a1", userIds: (0..<10).map { "user-\($0)" })
      let (tracked, trackedStatements) = try Self.counted(db) {
        try PostgresStore.apply(fresh, atMs: 1_000_000, db, catalogs: catalogs)
      }
      #expect(tracked.transactionsWritten == 100 && tracked.eventsAppended == first.eventsAppended)
      #expect(trackedStatements > 100, "\(trackedStatements) statements one by one")
      let (trackedMore, _) = try Self.counted(db) {
        try PostgresStore.apply(more, atMs: 2_000_000, db, catalogs: catalogs)
      }
      #expect(trackedMore == second)
      print("ingest of 10 users x 10 transactions: \(newStatements) statements batched (new users), \(knownStatements) (known users), \(trackedStatements) one by one")
    }
  }
}
