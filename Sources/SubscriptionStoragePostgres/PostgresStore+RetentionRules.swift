import SubscriptionStorage

extension PostgresSchema {
  /// The table of each app's retention rules, as in the SQLite store.
  static let retentionRulesMigration = PostgresMigration(
    version: 16, description: "retention rules per app",
    sql: """
      CREATE TABLE retention_rules(
        app_id TEXT COLLATE "C" PRIMARY KEY REFERENCES apps(app_id),
        payload BYTEA NOT NULL,
        updated_ms BIGINT NOT NULL
      );
      """)
}

extension PostgresStore {
  /// See ``SubscriptionStorage/RetentionRuleStore/putRetentionRules(appId:rules:)``.
  public func putRetentionRules(appId: String, rules: StoredRetentionRules) async throws(StoreError) {
    try StoreValidation.validate(retentionRules: rules)
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO retention_rules(app_id, payload, updated_ms) VALUES($1, $2, $3)
        ON CONFLICT (app_id) DO UPDATE SET payload = excluded.payload, updated_ms = excluded.updated_ms
        """, [.text(appId), .bytes(rules.payload), .int(rules.updatedMs)])
    }
  }

  /// See ``SubscriptionStorage/RetentionRuleStore/retentionRules(appId:)``.
  public func retentionRules(appId: String) async throws(StoreError) -> StoredRetentionRules? {
    let rows = try await pool.run { db throws(StoreError) in
      try db.query("SELECT payload, updated_ms FROM retention_rules WHERE app_id = $1", [.text(appId)])
    }
    return rows.first.map { StoredRetentionRules(payload: $0.bytes(0), updatedMs: $0.int(1)) }
  }
}
