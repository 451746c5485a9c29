// Kept notifications listed by received time and pruned by age, as in the SQLite store
// (``SubscriptionStorage/KeptNotificationRetentionStore``).
import SubscriptionDomain
import SubscriptionStorage

extension PostgresSchema {
  /// Indexes for listing an app's kept notifications by received time and for pruning the oldest
  /// of every app.
  static let keptNotificationIndexesMigration = PostgresMigration(
    version: 19, description: "kept notifications by received time (listing, pruning)",
    sql: """
      CREATE INDEX kept_notifications_by_app_received ON kept_notifications(app_id, received_ms, sequence);
      CREATE INDEX kept_notifications_by_received ON kept_notifications(received_ms);
      """)
}

extension PostgresStore {
  /// See ``SubscriptionStorage/KeptNotificationRetentionStore/listKeptNotifications(_:)``.
  public func listKeptNotifications(_ query: KeptNotificationQuery) async throws(StoreError) -> [KeptNotification] {
    var sql = """
      SELECT sequence, environment, notification_uuid, notification_type, subtype, signed_ms, received_ms,
        signed_payload
      FROM kept_notifications WHERE app_id = $1
      """
    var values: [PGValue] = [.text(query.appId)]
    func bind(_ value: PGValue) -> String {
      values.append(value)
      return "$\(values.count)"
    }
    if let type = query.notificationType { sql += " AND notification_type = \(bind(.text(type)))" }
    if let from = query.receivedFromMs { sql += " AND received_ms >= \(bind(.int(from)))" }
    if let before = query.receivedBeforeMs { sql += " AND received_ms < \(bind(.int(before)))" }
    if let after = query.after {
      sql += " AND (received_ms, sequence) > (\(bind(.int(after.receivedMs))), \(bind(.int(after.sequence))))"
    }
    sql += " ORDER BY received_ms, sequence LIMIT \(bind(.int(Int64(query.pageSize))))"
    let (text, bound) = (sql, values)
    let rows = try await pool.run { db throws(StoreError) in try db.query(text, bound) }
    var out: [KeptNotification] = []
    for r in rows {
      guard let environment = Environment(rawValue: r.text(1)) else {
        throw StoreError(.corrupt, "kept notification has an unknown environment")
      }
      out.append(
        KeptNotification(
          appId: query.appId, environment: environment, notificationUUID: r.text(2), notificationType: r.text(3),
          subtype: r.optionalText(4), signedDateMs: r.optionalInt(5), receivedMs: r.int(6),
          signedPayload: r.text(7), sequence: r.int(0)))
    }
    return out
  }

  /// See ``SubscriptionStorage/KeptNotificationRetentionStore/pruneKeptNotifications(receivedBeforeMs:limit:)``.
  public func pruneKeptNotifications(receivedBeforeMs: Int64, limit: Int) async throws(StoreError) -> Int {
    try await pool.transaction { db throws(StoreError) in
      try db.run(
        """
        DELETE FROM kept_notifications WHERE sequence IN (
          SELECT sequence FROM kept_notifications WHERE received_ms < $1 ORDER BY received_ms LIMIT $2)
        """, [.int(receivedBeforeMs), .int(Int64(min(max(1, limit), 10_000)))])
    }
  }
}
