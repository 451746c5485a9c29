// The event log (docs/architecture.md "Events"; schema version 7), in the same transaction as the
// purchase data that caused the events.
//
// Order across instances: concurrent transactions commit in any order, so a sequence taken from a
// plain sequence early in one transaction could become visible after a higher one of another, and a
// reader that already moved past the higher one would never see it. Sequences are therefore taken
// only at the end of a transaction, after its row work, under a transaction-level advisory lock held
// until its commit: the next transaction takes its numbers only after this one is visible, so
// numbers become visible in increasing order.
import SubscriptionDomain
import SubscriptionStorage

/// The event log's statements, prepared once per connection.
enum PostgresEventQueries {
  /// One user's transactions (kind 0), renewal infos (kind 1) and renewal-info removals (kind 2).
  static let purchaseState = """
    SELECT 0, transaction_id, original_transaction_id, purchase_ms, payload, NULL::BIGINT
    FROM transactions WHERE user_key = $1
    UNION ALL
    SELECT 1, original_transaction_id, NULL, 0, payload, NULL FROM renewal_infos WHERE user_key = $1
    UNION ALL
    SELECT 2, original_transaction_id, NULL, 0, NULL, as_of_ms FROM renewal_info_removals
    WHERE user_key = $1
    """
  static let productPayloads = "SELECT payload FROM products WHERE app_id = $1 ORDER BY product_id"
  static let schedule =
    "SELECT logged_through_ms, next_transition_ms FROM event_schedules WHERE user_key = $1"
  static let upsertSchedule = """
    INSERT INTO event_schedules(user_key, logged_through_ms, next_transition_ms) VALUES($1, $2, $3)
    ON CONFLICT (user_key) DO UPDATE SET logged_through_ms = excluded.logged_through_ms,
      next_transition_ms = excluded.next_transition_ms
    """
  static let lock = "SELECT pg_advisory_xact_lock($1)"
  /// Due users whose rows no other transaction holds, locked until this one commits: a user is
  /// processed by one instance at a time, and an ingest of the user waits for (or is skipped by)
  /// the scheduler. The due time is checked again on the locked row.
  static let claimDueSchedules = """
    SELECT s.user_key, u.app_id, u.environment, u.user_id, s.logged_through_ms, s.next_transition_ms,
      EXISTS (SELECT 1 FROM ownership_gaps g WHERE g.user_key = s.user_key)
    FROM event_schedules s JOIN users u ON u.user_key = s.user_key
    WHERE s.next_transition_ms <= $1 ORDER BY s.next_transition_ms, s.user_key LIMIT $2
    FOR NO KEY UPDATE OF s, u SKIP LOCKED
    """
  static let nextTransition =
    "SELECT MIN(next_transition_ms) FROM event_schedules WHERE next_transition_ms IS NOT NULL"
  static let lastSequence = "SELECT COALESCE(MAX(sequence), 0)::BIGINT FROM events"
}

/// A user's derived events waiting for the end of their transaction to be appended.
struct PendingEvents: Sendable {
  var key: Int64
  var events: [SubscriptionEvent]
}

extension PostgresStore {
  /// One user's stored purchase data, in one statement.
  static func purchaseState(_ db: PGConnection, _ key: Int64) throws(StoreError)
    -> UserPurchaseState
  {
    var state = UserPurchaseState()
    for r in try db.query(PostgresEventQueries.purchaseState, [.int(key)]) {
      switch r.int(0) {
      case 0:
        let t = try PayloadCodec.decodeTransaction(
          r.bytes(4), transactionId: r.text(1), originalTransactionId: r.text(2),
          purchaseDate: r.int(3))
        state.transactions[t.transactionId] = t
      case 1:
        let i = try PayloadCodec.decodeRenewalInfo(r.bytes(4), originalTransactionId: r.text(1))
        state.renewalInfos[i.originalTransactionId] = .present(i)
      default:
        state.renewalInfos[r.text(1)] = .removed(
          originalTransactionId: r.text(1), asOfDate: r.optionalInt(5))
      }
    }
    return state
  }

  /// The app's catalog as this transaction sees it.
  static func catalog(_ db: PGConnection, _ appId: String, _ catalogs: EventCatalogCache)
    throws(StoreError) -> Catalog
  {
    let payloads = try db.query(PostgresEventQueries.productPayloads, [.text(appId)]).map { $0.bytes(0) }
    return try catalogs.catalog(appId: appId, payloads: payloads)
  }

  /// Derives the events of a write of the user's data (the user's row is locked; of what the user
  /// owns, with its ownership gaps before and after the write) and records the user's schedule;
  /// the events are appended at the end of the transaction (``appendEvents(_:_:)``).
  static func deriveWrite(
    _ db: PGConnection, user: UserKey, key: Int64, before: UserPurchaseState,
    after: UserPurchaseState, atMs: Int64, catalogs: EventCatalogCache,
    gapsBefore: [OwnershipGap] = [], gapsAfter: [OwnershipGap] = []
  ) throws(StoreError) -> PendingEvents {
    let schedule = try db.first(PostgresEventQueries.schedule, [.int(key)]).map {
      EventSchedule(loggedThroughMs: $0.int(0), nextTransitionMs: $0.optionalInt(1))
    }
    let derived = UserEventDerivation.write(
      user: user, catalog: try catalog(db, user.appId, catalogs), before: before, after: after,
      atMs: atMs, schedule: schedule, gapsBefore: gapsBefore, gapsAfter: gapsAfter)
    try saveSchedule(db, key, derived.schedule)
    return PendingEvents(key: key, events: derived.events)
  }

  /// Stores the user's schedule (through when its events are logged, its next transition).
  static func saveSchedule(_ db: PGConnection, _ key: Int64, _ schedule: EventSchedule)
    throws(StoreError)
  {
    try db.run(
      PostgresEventQueries.upsertSchedule,
      [.int(key), .int(schedule.loggedThroughMs), .optional(schedule.nextTransitionMs)])
  }

  /// Deletes the user's events and schedule (erasure; the sequences are never reused).
  static func eraseEvents(_ db: PGConnection, _ key: Int64) throws(StoreError) {
    try db.run("DELETE FROM events WHERE user_key = $1", [.int(key)])
    try db.run("DELETE FROM event_schedules WHERE user_key = $1", [.int(key)])
  }

  /// The statement and values of an ``EventLogStore/events(appId:query:afterSequence:limit:)``
  /// read: an index range per app (or per user), filters on the row's columns.
  static func eventsStatement(appId: String, query: EventQuery, afterSequence: Int64, limit: Int)
    -> (sql: String, values: [PGValue])
  {
    var values: [PGValue] = []
    func parameter(_ value: PGValue) -> String {
      values.append(value)
      return "$\(values.count)"
    }
    var sql = "SELECT sequence, payload FROM events WHERE "
    if let userId = query.userId {
      // Each environment named, so the lookup is one probe of users(app, environment, user) each.
      let environments = (query.environment.map { [$0] } ?? Environment.allCases)
        .map { parameter(.text($0.rawValue)) }.joined(separator: ", ")
      sql +=
        "user_key IN (SELECT user_key FROM users WHERE app_id = \(parameter(.text(appId))) AND environment IN (\(environments)) AND user_id = \(parameter(.text(userId))))"
    } else {
      sql += "app_id = \(parameter(.text(appId)))"
      if let environment = query.environment {
        sql += " AND environment = \(parameter(.text(environment.rawValue)))"
      }
    }
    sql += " AND sequence > \(parameter(.int(afterSequence)))"
    if !query.types.isEmpty {
      let types = query.types.map(\.rawValue).sorted()
      sql += " AND type IN (" + types.map { parameter(.text($0)) }.joined(separator: ", ") + ")"
    }
    if let from = query.occurredFromMs { sql += " AND occurred_ms >= \(parameter(.int(from)))" }
    if let before = query.occurredBeforeMs { sql += " AND occurred_ms < \(parameter(.int(before)))" }
    sql += " ORDER BY sequence LIMIT \(parameter(.int(Int64(limit))))"
    return (sql, values)
  }
}

extension PostgresStore {
  /// See ``EventLogStore/events(appId:query:afterSequence:limit:)``.
  public func events(appId: String, query: EventQuery, afterSequence: Int64, limit: Int)
    async throws(StoreError) -> [LoggedEvent]
  {
    let (sql, values) = Self.eventsStatement(
      appId: appId, query: query, afterSequence: afterSequence, limit: EventLogRules.pageSize(limit))
    let rows = try await pool.run { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.query(sql, values)
    }
    var events: [LoggedEvent] = []
    events.reserveCapacity(rows.count)
    for r in rows {
      events.append(LoggedEvent(sequence: r.int(0), event: try PayloadCodec.decodeEvent(r.bytes(1))))
    }
    return events
  }

  /// See ``EventLogStore/lastEventSequence()``: the greatest committed sequence (a transaction
  /// holding the advisory lock takes greater ones).
  public func lastEventSequence() async throws(StoreError) -> Int64 {
    try await pool.run { db throws(StoreError) in
      try db.first(PostgresEventQueries.lastSequence)?.int(0) ?? 0
    }
  }

  /// See ``EventLogStore/eventCount(appId:afterSequence:throughSequence:)``: a range of
  /// `events_by_app`.
  public func eventCount(appId: String, afterSequence: Int64, throughSequence: Int64) async throws(StoreError) -> Int {
    try await pool.run { db throws(StoreError) in
      Int(
        try db.first(
          "SELECT COUNT(*) FROM events WHERE app_id = $1 AND sequence > $2 AND sequence <= $3",
          [.text(appId), .int(afterSequence), .int(throughSequence)]
        )?.int(0) ?? 0)
    }
  }

  /// See ``EventLogStore/appendDueTransitionEvents(atMs:limit:)``: due users are claimed with
  /// `FOR NO KEY UPDATE SKIP LOCKED` (instances take different users; a user being written is
  /// left for the next run), processed and appended in one transaction.
  public func appendDueTransitionEvents(atMs: Int64, limit: Int) async throws(StoreError)
    -> [LoggedEvent]
  {
    let n = Int64(EventLogRules.pageSize(limit))
    let catalogs = eventCatalogs
    return try await pool.transaction { db throws(StoreError) in
      var pending: [PendingEvents] = []
      var refreshed: [(key: Int64, appId: String, state: UserPurchaseState, gaps: [OwnershipGap], catalog: Catalog)] = []
      for r in try db.query(PostgresEventQueries.claimDueSchedules, [.int(atMs), .int(n)]) {
        guard let environment = Environment(rawValue: r.text(2)) else {
          throw StoreError(.corrupt, "user of app \(r.text(1)) has unknown environment \(r.text(2))")
        }
        let key = r.int(0)
        let user = UserKey(appId: r.text(1), environment: environment, userId: r.text(3))
        let catalog = try Self.catalog(db, user.appId, catalogs)
        let (state, gaps) = (try Self.purchaseState(db, key), r.bool(6) ? try Self.ownershipGaps(db, key) : [])
        let derived = UserEventDerivation.transitions(
          user: user, catalog: catalog, state: state, atMs: atMs,
          schedule: EventSchedule(loggedThroughMs: r.int(4), nextTransitionMs: r.optionalInt(5)), gaps: gaps)
        try Self.saveSchedule(db, key, derived.schedule)
        pending.append(PendingEvents(key: key, events: derived.events))
        refreshed.append((key, user.appId, state, gaps, catalog))
      }
      // Time changed these users' answers: their summaries are refreshed here (the claim holds
      // their rows), not by the next read.
      let policies = try Self.appPolicies(db, Set(refreshed.map(\.appId)))
      try Self.storeSummaries(
        db,
        refreshed.map { u in
          (u.key, UserSummaryRows.summary(
            of: u.state, gaps: u.gaps, catalog: u.catalog, policy: policies[u.appId]?.policy ?? .default, atMs: atMs))
        })
      return try Self.appendEvents(db, pending)
    }
  }

  /// See ``EventLogStore/nextTransitionDueMs()``.
  public func nextTransitionDueMs() async throws(StoreError) -> Int64? {
    try await pool.run { db throws(StoreError) in
      try db.first(PostgresEventQueries.nextTransition)?.optionalInt(0)
    }
  }
}

extension PostgresStore: EventLogAppending {
  /// See ``EventLogAppending/appendEvents(_:)``.
  package func appendEvents(_ events: [SubscriptionEvent]) async throws(StoreError) -> [LoggedEvent] {
    try await pool.transaction { db throws(StoreError) in
      var pending: [PendingEvents] = []
      for e in events {
        try requireApp(db, e.appId)
        let key = try Self.userKey(
          db, UserKey(appId: e.appId, environment: e.environment, userId: e.userId))
        pending.append(PendingEvents(key: key, events: [e]))
      }
      return try Self.appendEvents(db, pending)
    }
  }
}
