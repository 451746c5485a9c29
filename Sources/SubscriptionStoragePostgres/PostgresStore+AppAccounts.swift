import SubscriptionDomain
import SubscriptionStorage

extension PostgresSchema {
  /// The table of ``SubscriptionStorage/AppAccountLink``s (docs/architecture.md rule 24), as in
  /// the SQLite store.
  static let appAccountsMigration = PostgresMigration(
    version: 13, description: "the Apple Account (appTransactionId) of each user",
    sql: """
      CREATE TABLE app_accounts(
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
        environment TEXT NOT NULL,
        user_id TEXT COLLATE "C" NOT NULL,
        app_transaction_id TEXT COLLATE "C" NOT NULL,
        original_purchase_ms BIGINT,
        original_application_version TEXT,
        linked_ms BIGINT NOT NULL,
        history_verified_ms BIGINT,
        PRIMARY KEY(app_id, environment, user_id)
      );
      CREATE INDEX app_accounts_by_account ON app_accounts(app_id, environment, app_transaction_id);
      """)
}

extension PostgresStore {
  /// See ``SubscriptionStorage/AppAccountStore/saveAppAccount(_:)``.
  public func saveAppAccount(_ link: AppAccountLink) async throws(StoreError) {
    try StoreValidation.validate(link)
    try await pool.transaction { db throws(StoreError) in
      guard try db.first("SELECT 1 FROM apps WHERE app_id = $1", [.text(link.user.appId)]) != nil else {
        throw StoreError.notFound("app", link.user.appId)
      }
      try db.run(
        """
        INSERT INTO app_accounts(app_id, environment, user_id, app_transaction_id, original_purchase_ms,
          original_application_version, linked_ms, history_verified_ms)
        VALUES($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (app_id, environment, user_id) DO UPDATE SET
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

  /// See ``SubscriptionStorage/AppAccountStore/appAccounts(appId:environment:userIds:)``.
  public func appAccounts(appId: String, environment: Environment, userIds: [String]) async throws(StoreError)
    -> [String: AppAccountLink]
  {
    if userIds.isEmpty { return [:] }
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT user_id, app_transaction_id, original_purchase_ms, original_application_version, linked_ms,
          history_verified_ms
        FROM app_accounts WHERE app_id = $1 AND environment = $2 AND user_id = ANY($3::text[])
        """, [.text(appId), .text(environment.rawValue), PGValue.textArray(userIds)])
    }
    var out: [String: AppAccountLink] = [:]
    for r in rows {
      out[r.text(0)] = AppAccountLink(
        user: UserKey(appId: appId, environment: environment, userId: r.text(0)), appTransactionId: r.text(1),
        originalPurchaseDate: r.optionalInt(2), originalApplicationVersion: r.optionalText(3), linkedMs: r.int(4),
        historyVerifiedMs: r.optionalInt(5))
    }
    return out
  }
}
