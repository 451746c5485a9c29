import SubscriptionDomain
import SubscriptionStorage

extension PostgresSchema {
  /// Every verified V2 notification (docs/architecture.md rule 25), as in the SQLite store.
  static let keptNotificationsMigration = PostgresMigration(
    version: 15, description: "every verified V2 notification, kept",
    sql: """
      CREATE TABLE kept_notifications(
        sequence BIGSERIAL PRIMARY KEY,
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
        notification_uuid TEXT COLLATE "C" NOT NULL,
        environment TEXT NOT NULL,
        notification_type TEXT NOT NULL,
        subtype TEXT,
        signed_ms BIGINT,
        received_ms BIGINT NOT NULL,
        signed_payload TEXT NOT NULL,
        UNIQUE(app_id, notification_uuid)
      );
      CREATE INDEX kept_notifications_by_app ON kept_notifications(app_id, sequence);
      """)
}

extension PostgresStore {
  /// See ``SubscriptionStorage/NotificationLogStore/keepNotification(_:events:)``.
  public func keepNotification(_ notification: KeptNotification, events: [SubscriptionEvent]) async throws(StoreError)
    -> NotificationKept
  {
    try StoreValidation.validate(notification)
    return try await pool.transaction { db throws(StoreError) in
      try requireApp(db, notification.appId)
      let n = notification
      let inserted = try db.first(
        """
        INSERT INTO kept_notifications(app_id, notification_uuid, environment, notification_type, subtype,
          signed_ms, received_ms, signed_payload)
        VALUES($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (app_id, notification_uuid) DO NOTHING RETURNING sequence
        """,
        [
          .text(n.appId), .text(n.notificationUUID), .text(n.environment.rawValue), .text(n.notificationType),
          .optional(n.subtype), .optional(n.signedDateMs), .int(n.receivedMs), .text(n.signedPayload),
        ])
      var pending: [PendingEvents] = []
      for e in events {
        try requireApp(db, e.appId)
        let key = try Self.userKey(db, UserKey(appId: e.appId, environment: e.environment, userId: e.userId))
        pending.append(PendingEvents(key: key, events: [e]))
      }
      let appended = pending.isEmpty ? [] : try Self.appendEvents(db, pending)
      return NotificationKept(isNew: inserted != nil, eventsAppended: appended)
    }
  }

  /// See ``SubscriptionStorage/NotificationLogStore/keptNotifications(appId:afterSequence:limit:)``.
  public func keptNotifications(appId: String, afterSequence: Int64, limit: Int) async throws(StoreError)
    -> [KeptNotification]
  {
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT sequence, environment, notification_uuid, notification_type, subtype, signed_ms, received_ms,
          signed_payload
        FROM kept_notifications WHERE app_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3
        """, [.text(appId), .int(afterSequence), .int(Int64(EventLogRules.pageSize(limit)))])
    }
    var out: [KeptNotification] = []
    for r in rows {
      guard let environment = Environment(rawValue: r.text(1)) else {
        throw StoreError(.corrupt, "kept notification has an unknown environment")
      }
      out.append(
        KeptNotification(
          appId: appId, environment: environment, notificationUUID: r.text(2), notificationType: r.text(3),
          subtype: r.optionalText(4), signedDateMs: r.optionalInt(5), receivedMs: r.int(6),
          signedPayload: r.text(7), sequence: r.int(0)))
    }
    return out
  }

  /// See ``SubscriptionStorage/NotificationLogStore/users(appId:environment:appTransactionId:)``.
  public func users(appId: String, environment: Environment, appTransactionId: String) async throws(StoreError)
    -> [String]
  {
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT user_id FROM app_accounts WHERE app_id = $1 AND environment = $2 AND app_transaction_id = $3
        ORDER BY user_id
        """, [.text(appId), .text(environment.rawValue), .text(appTransactionId)])
    }
    return rows.map { $0.text(0) }
  }
}
