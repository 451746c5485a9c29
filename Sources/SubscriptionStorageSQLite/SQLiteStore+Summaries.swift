// Per-user summaries in SQLite (table user_summaries, migration 14): written in the writer's
// transaction of every write of a user's data or ownership, read for a batch of users in one
// statement, rewritten after a read-path fallback by compare-and-set on the row's stamp.
import SubscriptionDomain
import SubscriptionStorage

extension SQLiteStore {
  /// Stores the summary of the user `key`'s data and ownership gaps as the current transaction
  /// has them, at `atMs`, with a new stamp.
  static func storeSummary(
    _ db: SQLiteConnection, user: UserKey, key: Int64, state: UserPurchaseState, gaps: [OwnershipGap],
    atMs: Int64, catalog: Catalog, policy: EligibilityPolicy
  ) throws(StoreError) {
    let summary = UserSummaryRows.summary(of: state, gaps: gaps, catalog: catalog, policy: policy, atMs: atMs)
    try db.run(
      """
      INSERT INTO user_summaries(user_key, stamp, summary) VALUES(?, ?, ?)
      ON CONFLICT(user_key) DO UPDATE SET stamp = excluded.stamp, summary = excluded.summary
      """, [.int(key), .int(UserSummaryRows.newStamp()), .blob(summary.encoded())])
  }

  /// The app's whole policy in the current transaction.
  /// - Throws: `notFound` for an unknown app.
  static func policy(_ db: SQLiteConnection, _ appId: String, _ policies: PolicyCache) throws(StoreError)
    -> EligibilityPolicy
  {
    guard let json = try db.first("SELECT policy FROM apps WHERE app_id = ?", [.text(appId)], { $0.blob(0) }) else {
      throw StoreError.notFound("app", appId)
    }
    return try policies.policy(appId: appId, json: json)
  }

  /// See ``PurchaseStore/summaries(appId:environment:userIds:)``: one statement over the users' index.
  public func summaries(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: StoredSummary] {
    if userIds.isEmpty { return [:] }
    let sql =
      "SELECT u.user_id, s.stamp, s.summary FROM users u CROSS JOIN user_summaries s ON s.user_key = u.user_key "
      + "WHERE u.app_id = ? AND u.environment = ? AND u.user_id IN ("
      + String(repeating: "?, ", count: userIds.count - 1) + "?)"
    let values: [SQLValue] = [.text(appId), .text(environment.rawValue)] + userIds.map { .text($0) }
    let rows = try await readInline { db throws(StoreError) in
      try db.all(sql, values) { r in (r.text(0), r.int(1), r.blob(2)) }
    }
    var out: [String: StoredSummary] = [:]
    out.reserveCapacity(rows.count)
    for (userId, stamp, bytes) in rows {
      out[userId] = StoredSummary(stamp: stamp, encoded: UserSummaryRows.decode(bytes))
    }
    return out
  }

  /// See ``PurchaseStore/rewriteSummaries(appId:environment:_:)``: in the writer's transaction, each row
  /// replaced only while its stamp is the one read (or, with none read, inserted only while there
  /// is no row and the user exists).
  public func rewriteSummaries(
    appId: String, environment: Environment, _ rewrites: [SummaryRewrite]
  ) async throws(StoreError) -> Int {
    if rewrites.isEmpty { return 0 }
    let rows = rewrites.map { ($0.userId, $0.expectedStamp, $0.summary.encoded()) }
    return try await writer.write { db throws(StoreError) in
      var stored = 0
      for (userId, expected, bytes) in rows {
        let user: [SQLValue] = [.text(appId), .text(environment.rawValue), .text(userId)]
        if let expected {
          try db.run(
            """
            UPDATE user_summaries SET summary = ?
            WHERE user_key = (SELECT user_key FROM users WHERE app_id = ? AND environment = ? AND user_id = ?)
              AND stamp = ?
            """, [.blob(bytes)] + user + [.int(expected)])
        } else {
          try db.run(
            """
            INSERT INTO user_summaries(user_key, stamp, summary)
            SELECT user_key, ?, ? FROM users WHERE app_id = ? AND environment = ? AND user_id = ?
            ON CONFLICT(user_key) DO NOTHING
            """, [.int(UserSummaryRows.newStamp()), .blob(bytes)] + user)
        }
        stored += db.changes
      }
      return stored
    }
  }
}
