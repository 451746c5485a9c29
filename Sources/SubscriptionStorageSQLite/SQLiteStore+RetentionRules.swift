import SubscriptionStorage

extension Schema {
  /// The table of each app's retention rules (``SubscriptionStorage/RetentionRuleStore``).
  static let retentionRulesMigration = Migration(
    version: 20, description: "retention rules per app",
    sql: """
      CREATE TABLE retention_rules(
        app_id TEXT PRIMARY KEY REFERENCES apps(app_id),
        payload BLOB NOT NULL,
        updated_ms INTEGER NOT NULL
      ) WITHOUT ROWID;
      """)
}

extension SQLiteStore {
  /// See ``SubscriptionStorage/RetentionRuleStore/putRetentionRules(appId:rules:)``.
  public func putRetentionRules(appId: String, rules: StoredRetentionRules) async throws(StoreError) {
    try StoreValidation.validate(retentionRules: rules)
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO retention_rules(app_id, payload, updated_ms) VALUES(?, ?, ?)
        ON CONFLICT(app_id) DO UPDATE SET payload = excluded.payload, updated_ms = excluded.updated_ms
        """, [.text(appId), .blob(rules.payload), .int(rules.updatedMs)])
    }
  }

  /// See ``SubscriptionStorage/RetentionRuleStore/retentionRules(appId:)``.
  public func retentionRules(appId: String) async throws(StoreError) -> StoredRetentionRules? {
    try await readInline { db throws(StoreError) in
      try db.first("SELECT payload, updated_ms FROM retention_rules WHERE app_id = ?", [.text(appId)]) { r in
        StoredRetentionRules(payload: r.blob(0), updatedMs: r.int(1))
      }
    }
  }
}
