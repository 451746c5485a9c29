import SubscriptionDomain
import SubscriptionStorage

extension Schema {
  /// Every verified V2 notification (docs/architecture.md rule 25), once per app and
  /// `notificationUUID`, in the order kept.
  static let keptNotificationsMigration = Migration(
    version: 19, description: "every verified V2 notification, kept",
    sql: """
      CREATE TABLE kept_notifications(
        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
        app_id TEXT NOT NULL REFERENCES apps(app_id),
        notification_uuid TEXT NOT NULL,
        environment TEXT NOT NULL,
        notification_type TEXT NOT NULL,
        subtype TEXT,
        signed_ms INTEGER,
        received_ms INTEGER NOT NULL,
        signed_payload TEXT NOT NULL,
        UNIQUE(app_id, notification_uuid)
      );
      """)
}

extension SQLiteStore {
  /// See ``NotificationLogStore/keepNotification(_:events:)``.
  public func keepNotification(_ notification: KeptNotification, events: [SubscriptionEvent]) async throws(StoreError)
    -> NotificationKept
  {
    try StoreValidation.validate(notification)
    let logsEvents = configuration.logsEvents
    return try await writer.write { db throws(StoreError) in
      try requireApp(db, notification.appId)
      let n = notification
      let inserted = try db.first(
        """
        INSERT INTO kept_notifications(app_id, notification_uuid, environment, notification_type, subtype,
          signed_ms, received_ms, signed_payload)
        VALUES(?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT(app_id, notification_uuid) DO NOTHING RETURNING sequence
        """,
        [
          .text(n.appId), .text(n.notificationUUID), .text(n.environment.rawValue), .text(n.notificationType),
          .optional(n.subtype), .optional(n.signedDateMs), .int(n.receivedMs), .text(n.signedPayload),
        ]
      ) { $0.int(0) }
      var appended: [LoggedEvent] = []
      if logsEvents {
        for e in events {
          try requireApp(db, e.appId)
          let user = UserKey(appId: e.appId, environment: e.environment, userId: e.userId)
          guard let key = try Self.userKey(db, user, create: true) else { continue }
          appended += try Self.appendEvents(db, [e], key: key)
        }
      }
      return NotificationKept(isNew: inserted != nil, eventsAppended: appended)
    }
  }

  /// See ``NotificationLogStore/keptNotifications(appId:afterSequence:limit:)``.
  public func keptNotifications(appId: String, afterSequence: Int64, limit: Int) async throws(StoreError)
    -> [KeptNotification]
  {
    try await readers.read { db throws(StoreError) in
      try db.all(
        """
        SELECT sequence, environment, notification_uuid, notification_type, subtype, signed_ms, received_ms,
          signed_payload
        FROM kept_notifications WHERE app_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
        """, [.text(appId), .int(afterSequence), .int(Int64(EventLogRules.pageSize(limit)))]
      ) { r throws(StoreError) in
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

  /// See ``NotificationLogStore/users(appId:environment:appTransactionId:)``.
  public func users(appId: String, environment: Environment, appTransactionId: String) async throws(StoreError)
    -> [String]
  {
    try await readers.read { db throws(StoreError) in
      try db.all(
        "SELECT user_id FROM app_accounts WHERE app_id = ? AND environment = ? AND app_transaction_id = ? ORDER BY user_id",
        [.text(appId), .text(environment.rawValue), .text(appTransactionId)]
      ) { $0.text(0) }
    }
  }
}
