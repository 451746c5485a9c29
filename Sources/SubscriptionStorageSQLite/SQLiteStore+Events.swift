// The event log (docs/architecture.md "Events"; schema version 8): appended by the single writer in
// the same transaction as the purchase data that caused the events, so the log's order is the
// commit order and a SIGKILL keeps both or neither.
import SubscriptionDomain
import SubscriptionStorage

/// The event log's statements, named so `QueryPlanTests` can check each is an index lookup.
enum EventQueries {
  /// One user's transactions (kind 0), renewal infos (kind 1) and renewal-info removals (kind 2):
  /// what a write merges with and the event derivation's "before", in one statement.
  static let purchaseState = """
    SELECT 0, transaction_id, original_transaction_id, purchase_ms, payload, NULL FROM transactions
    WHERE user_key = ?1
    UNION ALL
    SELECT 1, original_transaction_id, NULL, NULL, payload, NULL FROM renewal_infos WHERE user_key = ?1
    UNION ALL
    SELECT 2, original_transaction_id, NULL, NULL, NULL, as_of_ms FROM renewal_info_removals
    WHERE user_key = ?1
    """
  static let productPayloads = "SELECT payload FROM products WHERE app_id = ? ORDER BY product_id"
  static let catalogVersion = "SELECT catalog_version FROM apps WHERE app_id = ?"
  /// The most events one insert statement takes (``insertEvents(_:)``).
  static let insertChunk = 16
  /// Inserts `count` events (7 values each), skipping the ids already logged, and returns the
  /// sequence and id of each one inserted. Prepared once per count (at most ``insertChunk``).
  static func insertEvents(_ count: Int) -> String {
    precondition((1...insertChunk).contains(count))
    return insertEventsStatements[count - 1]
  }
  private static let insertEventsStatements = (1...insertChunk).map { count in
    "INSERT INTO events(event_id, app_id, user_key, environment, type, occurred_ms, payload) VALUES"
      + Array(repeating: "(?, ?, ?, ?, ?, ?, ?)", count: count).joined(separator: ", ")
      + " ON CONFLICT(user_key, event_id) DO NOTHING RETURNING sequence, event_id"
  }
  static let schedule =
    "SELECT logged_through_ms, next_transition_ms FROM event_schedules WHERE user_key = ?"
  static let upsertSchedule = """
    INSERT INTO event_schedules(user_key, logged_through_ms, next_transition_ms) VALUES(?, ?, ?)
    ON CONFLICT(user_key) DO UPDATE SET logged_through_ms = excluded.logged_through_ms,
      next_transition_ms = excluded.next_transition_ms
    """
  static let dueSchedules = """
    SELECT s.user_key, u.app_id, u.environment, u.user_id, s.logged_through_ms, s.next_transition_ms,
      EXISTS (SELECT 1 FROM ownership_gaps g WHERE g.user_key = s.user_key)
    FROM event_schedules s JOIN users u ON u.user_key = s.user_key
    WHERE s.next_transition_ms <= ? ORDER BY s.next_transition_ms, s.user_key LIMIT ?
    """
  static let nextTransition =
    "SELECT MIN(next_transition_ms) FROM event_schedules WHERE next_transition_ms IS NOT NULL"
  static let lastSequence = "SELECT COALESCE(MAX(sequence), 0) FROM events"
  /// An app's events after a sequence, without filters (the common read: a watcher's page).
  static let appPage = """
    SELECT sequence, payload FROM events WHERE app_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
    """
  static let all = [
    purchaseState, productPayloads, schedule, dueSchedules, nextTransition, lastSequence, appPage,
  ]
}

extension SQLiteStore {
  /// One user's stored purchase data, in one read.
  static func purchaseState(_ db: SQLiteConnection, _ key: Int64) throws(StoreError)
    -> UserPurchaseState
  {
    var state = UserPurchaseState()
    try db.query(EventQueries.purchaseState, [.int(key)]) { r throws(StoreError) in
      switch r.int(0) {
      case 0:
        let t = try PayloadCodec.decodeTransaction(
          r.blob(4), transactionId: r.text(1), originalTransactionId: r.text(2),
          purchaseDate: r.int(3))
        state.transactions[t.transactionId] = t
      case 1:
        let i = try PayloadCodec.decodeRenewalInfo(r.blob(4), originalTransactionId: r.text(1))
        state.renewalInfos[i.originalTransactionId] = .present(i)
      default:
        state.renewalInfos[r.text(1)] = .removed(
          originalTransactionId: r.text(1), asOfDate: r.optionalInt(5))
      }
    }
    return state
  }

  /// The app's catalog as this transaction sees it.
  static func catalog(_ db: SQLiteConnection, _ appId: String, _ catalogs: EventCatalogCache)
    throws(StoreError) -> Catalog
  {
    // Schema 13's triggers change `catalog_version` with every change of the app's products.
    let version = try db.first(EventQueries.catalogVersion, [.text(appId)]) { $0.int(0) } ?? 0
    return try catalogs.catalog(appId: appId, version: version) { () throws(StoreError) in
      try db.all(EventQueries.productPayloads, [.text(appId)]) { $0.blob(0) }
    }
  }

  /// Derives the events of a write of the user's data from `before` to `after` at `atMs` (of what
  /// the user owns, with its ownership gaps before and after the write), appends the new ones and records the user's schedule,
  /// in the write's transaction. `catalog` is the app's as the transaction sees it (``catalog(_:_:_:)``).
  static func logEvents(
    _ db: SQLiteConnection, user: UserKey, key: Int64, before: UserPurchaseState,
    after: UserPurchaseState, atMs: Int64, catalog: Catalog,
    gapsBefore: [OwnershipGap] = [], gapsAfter: [OwnershipGap] = []
  ) throws(StoreError) -> [LoggedEvent] {
    let schedule = try db.first(EventQueries.schedule, [.int(key)]) {
      EventSchedule(loggedThroughMs: $0.int(0), nextTransitionMs: $0.optionalInt(1))
    }
    let derived = UserEventDerivation.write(
      user: user, catalog: catalog, before: before, after: after,
      atMs: atMs, schedule: schedule, gapsBefore: gapsBefore, gapsAfter: gapsAfter)
    try saveSchedule(db, key, derived.schedule)
    return try appendEvents(db, derived.events, key: key)
  }

  /// Stores the user's schedule (through when its events are logged, its next transition).
  static func saveSchedule(_ db: SQLiteConnection, _ key: Int64, _ schedule: EventSchedule)
    throws(StoreError)
  {
    try db.run(
      EventQueries.upsertSchedule,
      [.int(key), .int(schedule.loggedThroughMs), .optional(schedule.nextTransitionMs)])
  }

  /// Deletes the user's events and schedule (erasure; the sequences are never reused).
  static func eraseEvents(_ db: SQLiteConnection, _ key: Int64) throws(StoreError) {
    try db.run("DELETE FROM events WHERE user_key = ?", [.int(key)])
    try db.run("DELETE FROM event_schedules WHERE user_key = ?", [.int(key)])
  }

  /// Inserts the events whose ids are not logged yet (the UNIQUE index decides), in order: up to
  /// ``EventQueries/insertChunk`` events per statement (one step, one statement journal, one
  /// update of the sequence counter for all of them), the appended ones returned by the statement.
  static func appendEvents(_ db: SQLiteConnection, _ events: [SubscriptionEvent], key: Int64)
    throws(StoreError) -> [LoggedEvent]
  {
    var appended: [LoggedEvent] = []
    var start = events.startIndex
    while start < events.endIndex {
      let chunk = events[start..<min(start + EventQueries.insertChunk, events.endIndex)]
      start = chunk.endIndex
      var values: [SQLValue] = []
      values.reserveCapacity(chunk.count * 7)
      for e in chunk {
        values += [
          .text(e.eventId), .text(e.appId), .int(key), .text(e.environment.rawValue), .text(e.type.rawValue),
          .int(e.occurredMs), .blob(PayloadCodec.encode(e)),
        ]
      }
      // The rows are inserted in the chunk's order (so are their sequences); the returned ones
      // are matched by id, since SQLite does not promise the order of RETURNING rows.
      var sequences: [String: Int64] = [:]
      try db.query(EventQueries.insertEvents(chunk.count), values) { r throws(StoreError) in
        sequences[r.text(1)] = r.int(0)
      }
      for e in chunk {
        // A second event with the same id in the chunk was not inserted (its first was).
        if let sequence = sequences.removeValue(forKey: e.eventId) {
          appended.append(LoggedEvent(sequence: sequence, event: e))
        }
      }
    }
    return appended
  }

  /// The statement and values of an ``EventLogStore/events(appId:query:afterSequence:limit:)``
  /// read: an index range per app (or per user), filters on the row's columns.
  static func eventsStatement(appId: String, query: EventQuery, afterSequence: Int64, limit: Int)
    -> (sql: String, values: [SQLValue])
  {
    if query.userId == nil, query.types.isEmpty, query.environment == nil,
      query.occurredFromMs == nil, query.occurredBeforeMs == nil
    {
      return (EventQueries.appPage, [.text(appId), .int(afterSequence), .int(Int64(limit))])
    }
    var sql = "SELECT sequence, payload FROM events WHERE "
    var values: [SQLValue] = []
    let environments = query.environment.map { [$0] } ?? Environment.allCases
    if let userId = query.userId {
      // Each environment named, so the lookup is one probe of users(app, environment, user) each.
      sql += "user_key IN (SELECT user_key FROM users WHERE app_id = ? AND environment IN ("
        + environments.map { _ in "?" }.joined(separator: ", ") + ") AND user_id = ?)"
      values += [.text(appId)] + environments.map { .text($0.rawValue) } + [.text(userId)]
    } else {
      sql += "app_id = ?"
      values.append(.text(appId))
    }
    sql += " AND sequence > ?"
    values.append(.int(afterSequence))
    if let environment = query.environment, query.userId == nil {
      sql += " AND environment = ?"
      values.append(.text(environment.rawValue))
    }
    if !query.types.isEmpty {
      let types = query.types.map(\.rawValue).sorted()
      sql += " AND type IN (" + types.map { _ in "?" }.joined(separator: ", ") + ")"
      values += types.map { .text($0) }
    }
    if let from = query.occurredFromMs {
      sql += " AND occurred_ms >= ?"
      values.append(.int(from))
    }
    if let before = query.occurredBeforeMs {
      sql += " AND occurred_ms < ?"
      values.append(.int(before))
    }
    sql += " ORDER BY sequence LIMIT ?"
    values.append(.int(Int64(limit)))
    return (sql, values)
  }
}

extension SQLiteStore {
  /// See ``EventLogStore/events(appId:query:afterSequence:limit:)``.
  public func events(appId: String, query: EventQuery, afterSequence: Int64, limit: Int)
    async throws(StoreError) -> [LoggedEvent]
  {
    let (sql, values) = Self.eventsStatement(
      appId: appId, query: query, afterSequence: afterSequence, limit: EventLogRules.pageSize(limit))
    return try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.all(sql, values) { r throws(StoreError) in
        LoggedEvent(sequence: r.int(0), event: try PayloadCodec.decodeEvent(r.blob(1)))
      }
    }
  }

  /// See ``EventLogStore/lastEventSequence()``.
  public func lastEventSequence() async throws(StoreError) -> Int64 {
    try await readers.read { db throws(StoreError) in
      try db.first(EventQueries.lastSequence) { $0.int(0) } ?? 0
    }
  }

  /// See ``EventLogStore/eventCount(appId:afterSequence:throughSequence:)``: a range of
  /// `events_by_app`.
  public func eventCount(appId: String, afterSequence: Int64, throughSequence: Int64) async throws(StoreError) -> Int {
    try await readers.read { db throws(StoreError) in
      Int(
        try db.first(
          "SELECT COUNT(*) FROM events WHERE app_id = ? AND sequence > ? AND sequence <= ?",
          [.text(appId), .int(afterSequence), .int(throughSequence)]
        ) { $0.int(0) } ?? 0)
    }
  }

  /// See ``EventLogStore/appendDueTransitionEvents(atMs:limit:)``: one write of the single writer,
  /// so no other write changes these users meanwhile.
  public func appendDueTransitionEvents(atMs: Int64, limit: Int) async throws(StoreError)
    -> [LoggedEvent]
  {
    let n = Int64(EventLogRules.pageSize(limit))
    let (catalogs, policies) = (eventCatalogs, summaryPolicies)
    return try await writer.write { db throws(StoreError) in
      let due = try db.all(EventQueries.dueSchedules, [.int(atMs), .int(n)]) {
        r throws(StoreError) in
        guard let environment = Environment(rawValue: r.text(2)) else {
          throw StoreError(.corrupt, "user of app \(r.text(1)) has unknown environment \(r.text(2))")
        }
        return (
          key: r.int(0), user: UserKey(appId: r.text(1), environment: environment, userId: r.text(3)),
          schedule: EventSchedule(loggedThroughMs: r.int(4), nextTransitionMs: r.optionalInt(5)),
          hasGaps: r.int(6) != 0
        )
      }
      var appended: [LoggedEvent] = []
      for (key, user, schedule, hasGaps) in due {
        let catalog = try Self.catalog(db, user.appId, catalogs)
        let (state, gaps) = (try Self.purchaseState(db, key), hasGaps ? try Self.ownershipGaps(db, key) : [])
        let derived = UserEventDerivation.transitions(
          user: user, catalog: catalog, state: state, atMs: atMs, schedule: schedule, gaps: gaps)
        try Self.saveSchedule(db, key, derived.schedule)
        appended += try Self.appendEvents(db, derived.events, key: key)
        // Time changed the user's answers: its summary is refreshed here, not by the next read.
        try Self.storeSummary(
          db, user: user, key: key, state: state, gaps: gaps, atMs: atMs, catalog: catalog,
          policy: try Self.policy(db, user.appId, policies))
      }
      return appended
    }
  }

  /// See ``EventLogStore/nextTransitionDueMs()``.
  public func nextTransitionDueMs() async throws(StoreError) -> Int64? {
    try await readers.read { db throws(StoreError) in
      try db.first(EventQueries.nextTransition) { $0.optionalInt(0) } ?? nil
    }
  }
}

extension SQLiteStore: EventLogAppending {
  /// See ``EventLogAppending/appendEvents(_:)``.
  package func appendEvents(_ events: [SubscriptionEvent]) async throws(StoreError) -> [LoggedEvent] {
    try await writer.write { db throws(StoreError) in
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
}
