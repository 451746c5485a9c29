import SubscriptionDomain
import SubscriptionStorage

extension Schema {
  /// The refund requests to answer (docs/architecture.md rule 27): one row per V2
  /// `CONSUMPTION_REQUEST` notification; open rows have a `next_attempt_ms` (indexed: the
  /// responder's claim is an index range).
  static let consumptionRequestsMigration = Migration(
    version: 21, description: "refund requests (CONSUMPTION_REQUEST) to answer",
    sql: """
      CREATE TABLE consumption_requests(
        app_id TEXT NOT NULL REFERENCES apps(app_id),
        notification_id TEXT NOT NULL,
        environment TEXT NOT NULL,
        transaction_id TEXT NOT NULL,
        original_transaction_id TEXT NOT NULL,
        requested_ms INTEGER NOT NULL,
        received_ms INTEGER NOT NULL,
        reason TEXT,
        attempts INTEGER NOT NULL,
        next_attempt_ms INTEGER,
        outcome TEXT,
        detail TEXT,
        PRIMARY KEY(app_id, notification_id)
      ) WITHOUT ROWID;
      CREATE INDEX consumption_requests_due ON consumption_requests(next_attempt_ms)
        WHERE next_attempt_ms IS NOT NULL;
      """)
}

extension SQLiteStore {
  static let consumptionRequestColumns = """
    app_id, notification_id, environment, transaction_id, original_transaction_id, requested_ms, received_ms,
    reason, attempts, next_attempt_ms, outcome, detail
    """

  static func consumptionRequest(_ r: SQLRow) throws(StoreError) -> ConsumptionRequest {
    guard let environment = Environment(rawValue: r.text(2)) else {
      throw StoreError(.corrupt, "consumption request has unknown environment \(r.text(2))")
    }
    var outcome: ConsumptionRequestOutcome?
    if let raw = r.optionalText(10) {
      guard let value = ConsumptionRequestOutcome(rawValue: raw) else {
        throw StoreError(.corrupt, "consumption request has unknown outcome \(raw)")
      }
      outcome = value
    }
    var request = ConsumptionRequest(
      appId: r.text(0), notificationId: r.text(1), environment: environment, transactionId: r.text(3),
      originalTransactionId: r.text(4), requestedMs: r.int(5), receivedMs: r.int(6), reason: r.optionalText(7),
      attempts: Int(r.int(8)), outcome: outcome, detail: r.optionalText(11))
    request.nextAttemptMs = r.optionalInt(9)
    return request
  }

  /// See ``ConsumptionRequestStore/recordConsumptionRequest(_:)``.
  public func recordConsumptionRequest(_ request: ConsumptionRequest) async throws(StoreError) -> Bool {
    try StoreValidation.validate(request)
    return try await writer.write { db throws(StoreError) in
      try requireApp(db, request.appId)
      try db.run(
        "INSERT INTO consumption_requests(\(Self.consumptionRequestColumns)) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
          + " ON CONFLICT(app_id, notification_id) DO NOTHING",
        [
          .text(request.appId), .text(request.notificationId), .text(request.environment.rawValue),
          .text(request.transactionId), .text(request.originalTransactionId), .int(request.requestedMs),
          .int(request.receivedMs), .optional(request.reason), .int(Int64(request.attempts)),
          .optional(request.nextAttemptMs), .optional(request.outcome?.rawValue), .optional(request.detail),
        ])
      return db.changes > 0
    }
  }

  /// See ``ConsumptionRequestStore/claimDueConsumptionRequests(atMs:limit:leaseUntilMs:)``.
  public func claimDueConsumptionRequests(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [ConsumptionRequest]
  {
    try await writer.write { db throws(StoreError) in
      let due = try db.all(
        "SELECT \(Self.consumptionRequestColumns) FROM consumption_requests"
          + " WHERE next_attempt_ms IS NOT NULL AND next_attempt_ms <= ? ORDER BY next_attempt_ms, app_id, notification_id LIMIT ?",
        [.int(atMs), .int(Int64(max(1, limit)))], Self.consumptionRequest)
      for request in due {
        try db.run(
          "UPDATE consumption_requests SET next_attempt_ms = ? WHERE app_id = ? AND notification_id = ?",
          [.int(leaseUntilMs), .text(request.appId), .text(request.notificationId)])
      }
      return due
    }
  }

  /// See ``ConsumptionRequestStore/nextConsumptionRequestDueMs()``.
  public func nextConsumptionRequestDueMs() async throws(StoreError) -> Int64? {
    try await readers.read { db throws(StoreError) in
      try db.first("SELECT MIN(next_attempt_ms) FROM consumption_requests WHERE next_attempt_ms IS NOT NULL") {
        $0.optionalInt(0)
      } ?? nil
    }
  }

  /// See ``ConsumptionRequestStore/rescheduleConsumptionRequest(appId:notificationId:attempts:nextAttemptMs:detail:)``.
  public func rescheduleConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) {
    try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE consumption_requests SET attempts = ?, next_attempt_ms = ?, detail = ?"
          + " WHERE app_id = ? AND notification_id = ? AND outcome IS NULL",
        [.int(Int64(attempts)), .int(nextAttemptMs), .text(detail), .text(appId), .text(notificationId)])
      guard db.changes > 0 else { throw StoreError.notFound("open consumption request", notificationId) }
    }
  }

  /// See ``ConsumptionRequestStore/closeConsumptionRequest(appId:notificationId:attempts:outcome:detail:events:)``.
  public func closeConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, outcome: ConsumptionRequestOutcome, detail: String?,
    events: [SubscriptionEvent]
  ) async throws(StoreError) -> [LoggedEvent] {
    try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE consumption_requests SET attempts = ?, next_attempt_ms = NULL, outcome = ?, detail = ?"
          + " WHERE app_id = ? AND notification_id = ? AND outcome IS NULL",
        [.int(Int64(attempts)), .text(outcome.rawValue), .optional(detail), .text(appId), .text(notificationId)])
      guard db.changes > 0 else { throw StoreError.notFound("open consumption request", notificationId) }
      var appended: [LoggedEvent] = []
      for e in events {
        try requireApp(db, e.appId)
        let user = UserKey(appId: e.appId, environment: e.environment, userId: e.userId)
        guard let key = try Self.userKey(db, user, create: true) else { continue }
        appended += try Self.appendEvents(db, [e], key: key)
      }
      return appended
    }
  }

  /// See ``ConsumptionRequestStore/consumptionRequest(appId:notificationId:)``.
  public func consumptionRequest(appId: String, notificationId: String) async throws(StoreError) -> ConsumptionRequest? {
    try await readers.read { db throws(StoreError) in
      try db.first(
        "SELECT \(Self.consumptionRequestColumns) FROM consumption_requests WHERE app_id = ? AND notification_id = ?",
        [.text(appId), .text(notificationId)], Self.consumptionRequest)
    }
  }
}
