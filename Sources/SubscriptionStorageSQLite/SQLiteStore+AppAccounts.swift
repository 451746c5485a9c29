import SubscriptionDomain
import SubscriptionStorage

extension Schema {
  /// The table of ``AppAccountLink``s (docs/architecture.md rule 24), keyed like `history_syncs`;
  /// indexed by Apple Account too (which users an account's notifications concern).
  static let appAccountsMigration = Migration(
    version: 17, description: "the Apple Account (appTransactionId) of each user",
    sql: """
      CREATE TABLE app_accounts(
        app_id TEXT NOT NULL REFERENCES apps(app_id),
        environment TEXT NOT NULL,
        user_id TEXT NOT NULL,
        app_transaction_id TEXT NOT NULL,
        original_purchase_ms INTEGER,
        original_application_version TEXT,
        linked_ms INTEGER NOT NULL,
        history_verified_ms INTEGER,
        PRIMARY KEY(app_id, environment, user_id)
      ) WITHOUT ROWID;
      CREATE INDEX app_accounts_by_account ON app_accounts(app_id, environment, app_transaction_id);
      """)
}

extension SQLiteStore {
  /// See ``AppAccountStore/saveAppAccount(_:)``.
  public func saveAppAccount(_ link: AppAccountLink) async throws(StoreError) {
    try StoreValidation.validate(link)
    try await writer.write { db throws(StoreError) in
      try requireApp(db, link.user.appId)
      try db.run(
        """
        INSERT INTO app_accounts(app_id, environment, user_id, app_transaction_id, original_purchase_ms,
          original_application_version, linked_ms, history_verified_ms)
        VALUES(?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT(app_id, environment, user_id) DO UPDATE SET
          app_transaction_id = excluded.app_transaction_id, original_purchase_ms = excluded.original_purchase_ms,
          original_application_version = excluded.original_application_version, linked_ms = excluded.linked_ms,
          history_verified_ms = excluded.history_verified_ms
        """,
        [
          .text(link.user.appId), .text(link.user.environment.rawValue), .text(link.user.userId),
          .text(link.appTransactionId), .optional(link.originalPurchaseDate), .optional(link.originalApplicationVersion),
          .int(link.linkedMs), .optional(link.historyVerifiedMs),
        ])
    }
  }

  static let appAccountColumns =
    "SELECT user_id, app_transaction_id, original_purchase_ms, original_application_version, linked_ms, "
    + "history_verified_ms FROM app_accounts "
  static let oneAppAccountQuery = appAccountColumns + "WHERE app_id = ? AND environment = ? AND user_id = ?"

  /// See ``AppAccountStore/appAccounts(appId:environment:userIds:)``.
  public func appAccounts(appId: String, environment: Environment, userIds: [String]) async throws(StoreError)
    -> [String: AppAccountLink]
  {
    if userIds.isEmpty { return [:] }
    // On the caller's thread when a reader is free (as the summaries' read): CheckEligibility
    // asks this for its new customers.
    let sql =
      userIds.count == 1
      ? Self.oneAppAccountQuery
      : Self.appAccountColumns + "WHERE app_id = ? AND environment = ? AND user_id IN ("
        + String(repeating: "?, ", count: userIds.count - 1) + "?)"
    let values: [SQLValue] = [.text(appId), .text(environment.rawValue)] + userIds.map { .text($0) }
    let links = try await readInline { db throws(StoreError) in
      try db.all(sql, values) { r in
        AppAccountLink(
          user: UserKey(appId: appId, environment: environment, userId: r.text(0)), appTransactionId: r.text(1),
          originalPurchaseDate: r.optionalInt(2), originalApplicationVersion: r.optionalText(3), linkedMs: r.int(4),
          historyVerifiedMs: r.optionalInt(5))
      }
    }
    var out: [String: AppAccountLink] = [:]
    for link in links { out[link.user.userId] = link }
    return out
  }
}
