import SubscriptionDomain
import SubscriptionStorage

extension PostgresSchema {
  /// The refund requests to answer (docs/architecture.md rule 27), as in the SQLite store.
  static let consumptionRequestsMigration = PostgresMigration(
    version: 17, description: "refund requests (CONSUMPTION_REQUEST) to answer",
    sql: """
      CREATE TABLE consumption_requests(
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
        notification_id TEXT COLLATE "C" NOT NULL,
        environment TEXT NOT NULL,
        transaction_id TEXT COLLATE "C" NOT NULL,
        original_transaction_id TEXT COLLATE "C" NOT NULL,
        requested_ms BIGINT NOT NULL,
        received_ms BIGINT NOT NULL,
        reason TEXT,
        attempts INTEGER NOT NULL,
        next_attempt_ms BIGINT,
        outcome TEXT,
        detail TEXT,
        PRIMARY KEY(app_id, notification_id)
      );
      CREATE INDEX consumption_requests_due ON consumption_requests(next_attempt_ms)
        WHERE next_attempt_ms IS NOT NULL;
      """)
}

extension PostgresStore {
  static let consumptionRequestColumns = """
    app_id, notification_id, environment, transaction_id, original_transaction_id, requested_ms, received_ms,
    reason, attempts, next_attempt_ms, outcome, detail
    """

  static func consumptionRequest(_ r: PGRow) throws(StoreError) -> ConsumptionRequest {
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

  /// See ``SubscriptionStorage/ConsumptionRequestStore/recordConsumptionRequest(_:)``.
  public func recordConsumptionRequest(_ request: ConsumptionRequest) async throws(StoreError) -> Bool {
    try StoreValidation.validate(request)
    return try await pool.transaction { db throws(StoreError) in
      try requireApp(db, request.appId)
      return try db.run(
        "INSERT INTO consumption_requests(\(Self.consumptionRequestColumns))"
          + " VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (app_id, notification_id) DO NOTHING",
        [
          .text(request.appId), .text(request.notificationId), .text(request.environment.rawValue),
          .text(request.transactionId), .text(request.originalTransactionId), .int(request.requestedMs),
          .int(request.receivedMs), .optional(request.reason), .int(Int64(request.attempts)),
          .optional(request.nextAttemptMs), .optional(request.outcome?.rawValue), .optional(request.detail),
        ]) > 0
    }
  }

  /// See ``SubscriptionStorage/ConsumptionRequestStore/claimDueConsumptionRequests(atMs:limit:leaseUntilMs:)``:
  /// rows another instance's claim holds are skipped (`SKIP LOCKED`).
  public func claimDueConsumptionRequests(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [ConsumptionRequest]
  {
    let rows = try await pool.transaction { db throws(StoreError) in
      try db.query(
        """
        WITH due AS (
          SELECT app_id, notification_id, next_attempt_ms AS due_ms FROM consumption_requests
          WHERE next_attempt_ms IS NOT NULL AND next_attempt_ms <= $1
          ORDER BY next_attempt_ms, app_id, notification_id LIMIT $2 FOR UPDATE SKIP LOCKED)
        UPDATE consumption_requests c SET next_attempt_ms = $3 FROM due
        WHERE c.app_id = due.app_id AND c.notification_id = due.notification_id
        RETURNING c.app_id, c.notification_id, c.environment, c.transaction_id, c.original_transaction_id,
          c.requested_ms, c.received_ms, c.reason, c.attempts, due.due_ms, c.outcome, c.detail
        """, [.int(atMs), .int(Int64(max(1, limit))), .int(leaseUntilMs)])
    }
    var out: [ConsumptionRequest] = []
    for r in rows { out.append(try Self.consumptionRequest(r)) }
    return out.sorted { ($0.nextAttemptMs ?? 0, $0.appId, $0.notificationId) < ($1.nextAttemptMs ?? 0, $1.appId, $1.notificationId) }
  }

  /// See ``SubscriptionStorage/ConsumptionRequestStore/nextConsumptionRequestDueMs()``.
  public func nextConsumptionRequestDueMs() async throws(StoreError) -> Int64? {
    try await pool.run { db throws(StoreError) in
      try db.first("SELECT MIN(next_attempt_ms) FROM consumption_requests WHERE next_attempt_ms IS NOT NULL")?
        .optionalInt(0)
    }
  }

  /// See ``SubscriptionStorage/ConsumptionRequestStore/rescheduleConsumptionRequest(appId:notificationId:attempts:nextAttemptMs:detail:)``.
  public func rescheduleConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) {
    let changed = try await pool.transaction { db throws(StoreError) in
      try db.run(
        "UPDATE consumption_requests SET attempts = $1, next_attempt_ms = $2, detail = $3"
          + " WHERE app_id = $4 AND notification_id = $5 AND outcome IS NULL",
        [.int(Int64(attempts)), .int(nextAttemptMs), .text(detail), .text(appId), .text(notificationId)])
    }
    guard changed > 0 else { throw StoreError.notFound("open consumption request", notificationId) }
  }

  /// See ``SubscriptionStorage/ConsumptionRequestStore/closeConsumptionRequest(appId:notificationId:attempts:outcome:detail:events:)``.
  public func closeConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, outcome: ConsumptionRequestOutcome, detail: String?,
    events: [SubscriptionEvent]
  ) async throws(StoreError) -> [LoggedEvent] {
    try await pool.transaction { db throws(StoreError) in
      let changed = try db.run(
        "UPDATE consumption_requests SET attempts = $1, next_attempt_ms = NULL, outcome = $2, detail = $3"
          + " WHERE app_id = $4 AND notification_id = $5 AND outcome IS NULL",
        [.int(Int64(attempts)), .text(outcome.rawValue), .optional(detail), .text(appId), .text(notificationId)])
      guard changed > 0 else { throw StoreError.notFound("open consumption request", notificationId) }
      var pending: [PendingEvents] = []
      for e in events {
        try requireApp(db, e.appId)
        let key = try Self.userKey(db, UserKey(appId: e.appId, environment: e.environment, userId: e.userId))
        pending.append(PendingEvents(key: key, events: [e]))
      }
      return try Self.appendEvents(db, pending)
    }
  }

  /// See ``SubscriptionStorage/ConsumptionRequestStore/consumptionRequest(appId:notificationId:)``.
  public func consumptionRequest(appId: String, notificationId: String) async throws(StoreError) -> ConsumptionRequest? {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        "SELECT \(Self.consumptionRequestColumns) FROM consumption_requests WHERE app_id = $1 AND notification_id = $2",
        [.text(appId), .text(notificationId)])
    }
    return try row.map { (r) throws(StoreError) in try Self.consumptionRequest(r) }
  }
}
