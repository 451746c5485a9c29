// Kept notifications listed by received time and pruned by age
// (``SubscriptionStorage/KeptNotificationRetentionStore``).
import SubscriptionDomain
import SubscriptionStorage

extension Schema {
  /// Indexes for listing an app's kept notifications by received time (the rowid, `sequence`,
  /// completes each entry) and for pruning the oldest of every app.
  static let keptNotificationIndexesMigration = Migration(
    version: 23, description: "kept notifications by received time (listing, pruning)",
    sql: """
      CREATE INDEX kept_notifications_by_app_received ON kept_notifications(app_id, received_ms);
      CREATE INDEX kept_notifications_by_received ON kept_notifications(received_ms);
      """)
}

extension SQLiteStore {
  /// See ``KeptNotificationRetentionStore/listKeptNotifications(_:)``.
  public func listKeptNotifications(_ query: KeptNotificationQuery) async throws(StoreError) -> [KeptNotification] {
    var sql = """
      SELECT sequence, environment, notification_uuid, notification_type, subtype, signed_ms, received_ms,
        signed_payload
      FROM kept_notifications WHERE app_id = ?
      """
    var values: [SQLValue] = [.text(query.appId)]
    if let type = query.notificationType {
      sql += " AND notification_type = ?"
      values.append(.text(type))
    }
    if let from = query.receivedFromMs {
      sql += " AND received_ms >= ?"
      values.append(.int(from))
    }
    if let before = query.receivedBeforeMs {
      sql += " AND received_ms < ?"
      values.append(.int(before))
    }
    if let after = query.after {
      sql += " AND (received_ms, sequence) > (?, ?)"
      values += [.int(after.receivedMs), .int(after.sequence)]
    }
    sql += " ORDER BY received_ms, sequence LIMIT ?"
    values.append(.int(Int64(query.pageSize)))
    let appId = query.appId
    let (text, bound) = (sql, values)
    return try await readers.read { db throws(StoreError) in
      try db.all(text, bound) { r throws(StoreError) in
        guard let environment = Environment(rawValue: r.text(1)) else {
          throw StoreError(.corrupt, "kept notification has an unknown environment")
        }
        return KeptNotification(
          appId: appId, environment: environment, notificationUUID: r.text(2), notificationType: r.text(3),
          subtype: r.optionalText(4), signedDateMs: r.optionalInt(5), receivedMs: r.int(6),
          signedPayload: r.text(7), sequence: r.int(0))
      }
    }
  }

  /// See ``KeptNotificationRetentionStore/pruneKeptNotifications(receivedBeforeMs:limit:)``.
  public func pruneKeptNotifications(receivedBeforeMs: Int64, limit: Int) async throws(StoreError) -> Int {
    try await writer.write { db throws(StoreError) in
      try db.run(
        """
        DELETE FROM kept_notifications WHERE sequence IN (
          SELECT sequence FROM kept_notifications WHERE received_ms < ? ORDER BY received_ms LIMIT ?)
        """, [.int(receivedBeforeMs), .int(Int64(min(max(1, limit), 10_000)))])
      return db.changes
    }
  }
}
