// Per-user summaries in PostgreSQL (table user_summaries, migration 11): written in the
// transaction of every write of a user's data or ownership (under the user's row lock), read for
// a batch of users in one statement, rewritten after a read-path fallback by compare-and-set on
// the row's stamp.
import SubscriptionDomain
import SubscriptionStorage

extension PostgresStore {
  /// The apps' policies as the writes read them (decoded once per app and JSON).
  static let summaryPolicies = PolicyCache()

  /// Stores users' summaries (by user key) with new stamps, in one statement.
  static func storeSummaries(_ db: PGConnection, _ rows: [(key: Int64, summary: UserSummary)]) throws(StoreError) {
    if rows.isEmpty { return }
    try db.run(
      """
      INSERT INTO user_summaries(user_key, stamp, summary)
      SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])
      ON CONFLICT (user_key) DO UPDATE SET stamp = excluded.stamp, summary = excluded.summary
      """,
      [
        .intArray(rows.map(\.key)), .intArray(rows.map { _ in UserSummaryRows.newStamp() }),
        .byteaArray(rows.map { $0.summary.encoded() }),
      ])
  }

  /// Stores the summary of the user `key`'s data and ownership gaps as the current transaction
  /// has them, at `atMs`, with a new stamp.
  static func storeSummary(
    _ db: PGConnection, key: Int64, state: UserPurchaseState, gaps: [OwnershipGap], atMs: Int64,
    catalog: Catalog, policy: EligibilityPolicy
  ) throws(StoreError) {
    let summary = UserSummaryRows.summary(of: state, gaps: gaps, catalog: catalog, policy: policy, atMs: atMs)
    try db.run(
      """
      INSERT INTO user_summaries(user_key, stamp, summary) VALUES($1, $2, $3)
      ON CONFLICT (user_key) DO UPDATE SET stamp = excluded.stamp, summary = excluded.summary
      """, [.int(key), .int(UserSummaryRows.newStamp()), .bytes(summary.encoded())])
  }

  /// See ``PurchaseStore/summaries(appId:environment:userIds:)``: one statement over the users' index.
  public func summaries(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: StoredSummary] {
    if userIds.isEmpty { return [:] }
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT u.user_id, s.stamp, s.summary FROM users u JOIN user_summaries s ON s.user_key = u.user_key
        WHERE u.app_id = $1 AND u.environment = $2 AND u.user_id = ANY($3::text[])
        """, [.text(appId), .text(environment.rawValue), .textArray(userIds)]
      ).map { r in (r.text(0), r.int(1), r.bytes(2)) }
    }
    var out: [String: StoredSummary] = [:]
    out.reserveCapacity(rows.count)
    for (userId, stamp, bytes) in rows {
      out[userId] = StoredSummary(stamp: stamp, encoded: UserSummaryRows.decode(bytes))
    }
    return out
  }

  /// See ``PurchaseStore/rewriteSummaries(appId:environment:_:)``: each row replaced only while its stamp
  /// is the one read (READ COMMITTED re-checks the condition on the newest row version), or, with
  /// none read, inserted only while there is no row and the user exists (the foreign key waits
  /// for a concurrent erasure and then refuses it).
  public func rewriteSummaries(
    appId: String, environment: Environment, _ rewrites: [SummaryRewrite]
  ) async throws(StoreError) -> Int {
    if rewrites.isEmpty { return 0 }
    let rows = rewrites.map { ($0.userId, $0.expectedStamp, $0.summary.encoded()) }
    var stored = 0
    for (userId, expected, bytes) in rows {
      let user: [PGValue] = [.text(appId), .text(environment.rawValue), .text(userId)]
      do {
        stored += try await pool.run { db throws(StoreError) in
          if let expected {
            return try db.run(
              """
              UPDATE user_summaries SET summary = $4
              WHERE user_key = (SELECT user_key FROM users WHERE app_id = $1 AND environment = $2 AND user_id = $3)
                AND stamp = $5
              """, user + [.bytes(bytes), .int(expected)])
          }
          return try db.run(
            """
            INSERT INTO user_summaries(user_key, stamp, summary)
            SELECT user_key, $4, $5 FROM users WHERE app_id = $1 AND environment = $2 AND user_id = $3
            ON CONFLICT (user_key) DO NOTHING
            """, user + [.int(UserSummaryRows.newStamp()), .bytes(bytes)])
        }
      } catch where error.code == .notFound {
        continue  // the user was erased meanwhile (foreign key): nothing to store
      }
    }
    return stored
  }
}
