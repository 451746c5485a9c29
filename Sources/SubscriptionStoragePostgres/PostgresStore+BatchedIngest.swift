// An ingest in a few statements, whatever its size: the users' keys, locks, stored rows and
// schedules are read for the whole batch at once (arrays, `unnest`), the domain's merge and the
// event derivation run in memory, and the rows, schedules and events are written by one multi-row
// statement per table. For batches whose apps share purchases (SHARE, never tracked), the common
// case: purchase sharing decides update by update on the rows the previous updates wrote, so
// other batches go update by update (``PostgresStore/apply(_:atMs:_:catalogs:)``).
import SubscriptionDomain
import SubscriptionStorage

extension PGValue {
  /// A `bigint[]` literal (`{1,NULL}`).
  static func intArray(_ values: [Int64?]) -> PGValue {
    .text("{" + values.map { $0.map(String.init) ?? "NULL" }.joined(separator: ",") + "}")
  }

  /// A `bytea[]` literal of hex elements (`{"\\x0a0b"}`).
  static func byteaArray(_ values: [[UInt8]]) -> PGValue {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = [UInt8(ascii: "{")]
    out.reserveCapacity(values.reduce(2) { $0 + $1.count * 2 + 6 })
    for (i, value) in values.enumerated() {
      if i > 0 { out.append(UInt8(ascii: ",")) }
      out += Array(#""\\x"#.utf8)
      for byte in value {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0f)])
      }
      out.append(UInt8(ascii: "\""))
    }
    out.append(UInt8(ascii: "}"))
    return .text(String(decoding: out, as: UTF8.self))
  }
}

/// The batched ingest's statements.
enum PostgresBatchQueries {
  /// The keys of the users given (app, environment and id arrays), each user's row locked in the
  /// order given (the batch's lock order: a nested loop over the arrays); absent users are left out.
  static let lockUsers = """
    SELECT w.n, x.user_key FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY
      AS w(app_id, environment, user_id, n)
    CROSS JOIN LATERAL (
      SELECT u.user_key FROM users u
      WHERE u.app_id = w.app_id AND u.environment = w.environment AND u.user_id = w.user_id
      FOR NO KEY UPDATE) x
    """
  static let insertUsers = """
    INSERT INTO users(app_id, environment, user_id)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
    ON CONFLICT (app_id, environment, user_id) DO NOTHING
    """
  static let policies = "SELECT app_id, policy, ownership_tracked FROM apps WHERE app_id = ANY($1::text[])"
  /// The stored rows of several users: kind 0 transactions, 1 renewal infos, 2 removals.
  static let purchaseStates = """
    SELECT user_key, 0, transaction_id, original_transaction_id, purchase_ms, payload, NULL::BIGINT
    FROM transactions WHERE user_key = ANY($1::bigint[])
    UNION ALL
    SELECT user_key, 1, original_transaction_id, NULL, 0, payload, NULL FROM renewal_infos
    WHERE user_key = ANY($1::bigint[])
    UNION ALL
    SELECT user_key, 2, original_transaction_id, NULL, 0, NULL, as_of_ms FROM renewal_info_removals
    WHERE user_key = ANY($1::bigint[])
    """
  static let schedules = """
    SELECT user_key, logged_through_ms, next_transition_ms FROM event_schedules
    WHERE user_key = ANY($1::bigint[])
    """
  static let productPayloads = """
    SELECT app_id, payload FROM products WHERE app_id = ANY($1::text[]) ORDER BY app_id, product_id
    """
  static let upsertTransactions = """
    INSERT INTO transactions(user_key, transaction_id, original_transaction_id, purchase_ms,
      signed_ms, payload)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bytea[])
    ON CONFLICT (user_key, transaction_id) DO UPDATE SET
      original_transaction_id = excluded.original_transaction_id, purchase_ms = excluded.purchase_ms,
      signed_ms = excluded.signed_ms, payload = excluded.payload
    """
  static let upsertRenewalInfos = """
    INSERT INTO renewal_infos(user_key, original_transaction_id, signed_ms, payload)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[])
    ON CONFLICT (user_key, original_transaction_id) DO UPDATE SET
      signed_ms = excluded.signed_ms, payload = excluded.payload
    """
  static let upsertRemovals = """
    INSERT INTO renewal_info_removals(user_key, original_transaction_id, as_of_ms)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
    ON CONFLICT (user_key, original_transaction_id) DO UPDATE SET as_of_ms = excluded.as_of_ms
    """
  static let deleteRenewalInfos = """
    DELETE FROM renewal_infos r USING unnest($1::bigint[], $2::text[]) AS d(user_key, original_transaction_id)
    WHERE r.user_key = d.user_key AND r.original_transaction_id = d.original_transaction_id
    """
  static let deleteRemovals = """
    DELETE FROM renewal_info_removals r USING unnest($1::bigint[], $2::text[]) AS d(user_key, original_transaction_id)
    WHERE r.user_key = d.user_key AND r.original_transaction_id = d.original_transaction_id
    """
  static let upsertSchedules = """
    INSERT INTO event_schedules(user_key, logged_through_ms, next_transition_ms)
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
    ON CONFLICT (user_key) DO UPDATE SET logged_through_ms = excluded.logged_through_ms,
      next_transition_ms = excluded.next_transition_ms
    """
  /// Sequences are drawn in the arrays' order (a function scan), so the log's order is the batch's.
  static let insertEvents = """
    INSERT INTO events(sequence, event_id, app_id, user_key, environment, type, occurred_ms, payload)
    SELECT nextval('event_sequence'), e.event_id, e.app_id, e.user_key, e.environment, e.type,
      e.occurred_ms, e.payload
    FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bytea[])
      AS e(event_id, app_id, user_key, environment, type, occurred_ms, payload)
    ON CONFLICT (event_id) DO NOTHING RETURNING event_id, sequence
    """
}

extension PostgresStore {
  /// The apps' policies, in one statement.
  /// - Throws: `notFound` for an unknown app.
  static func policies(_ db: PGConnection, _ appIds: Set<String>) throws(StoreError) -> [String: OwnershipPolicy] {
    try appPolicies(db, appIds).mapValues(\.ownership)
  }

  /// The apps' policies, whole (for the writes' summaries) and as purchase sharing reads them, in
  /// one statement.
  /// - Throws: `notFound` for an unknown app.
  static func appPolicies(_ db: PGConnection, _ appIds: Set<String>) throws(StoreError)
    -> [String: (ownership: OwnershipPolicy, policy: EligibilityPolicy)]
  {
    var policies: [String: (ownership: OwnershipPolicy, policy: EligibilityPolicy)] = [:]
    for r in try db.query(PostgresBatchQueries.policies, [.textArray(appIds.sorted())]) {
      let policy = try summaryPolicies.policy(appId: r.text(0), json: r.bytes(1))
      policies[r.text(0)] = (OwnershipPolicy(policy, tracked: r.bool(2)), policy)
    }
    if let missing = appIds.sorted().first(where: { policies[$0] == nil }) {
      throw StoreError.notFound("app", missing)
    }
    return policies
  }

  /// The keys of `users` (created if needed), each user's row locked in the order given.
  /// - Returns: the keys, and which users were created by this transaction (nothing stored yet).
  static func lockUsers(_ db: PGConnection, _ users: [UserKey], mayCreate: (UserKey) -> Bool = { _ in true })
    throws(StoreError) -> (keys: [UserKey: Int64], created: Set<UserKey>)
  {
    func arrays(_ users: [UserKey]) -> [PGValue] {
      [
        .textArray(users.map(\.appId)), .textArray(users.map(\.environment.rawValue)),
        .textArray(users.map(\.userId)),
      ]
    }
    var keys: [UserKey: Int64] = [:]
    for r in try db.query(PostgresBatchQueries.lockUsers, arrays(users)) { keys[users[Int(r.int(0)) - 1]] = r.int(1) }
    let missing = users.filter { keys[$0] == nil && mayCreate($0) }
    if missing.isEmpty { return (keys, []) }
    // Inserted rows are this transaction's until it commits: as good as locked.
    try db.run(PostgresBatchQueries.insertUsers, arrays(missing))
    for r in try db.query(PostgresBatchQueries.lockUsers, arrays(missing)) { keys[missing[Int(r.int(0)) - 1]] = r.int(1) }
    if let lost = missing.first(where: { keys[$0] == nil }) {
      throw StoreError(.internalError, "cannot create the user row of \(lost.userId)")
    }
    return (keys, Set(missing))
  }

  /// The stored rows of the users with `keys`, in one statement.
  static func purchaseStates(_ db: PGConnection, _ keys: [Int64]) throws(StoreError) -> [Int64: UserPurchaseState] {
    var states: [Int64: UserPurchaseState] = [:]
    if keys.isEmpty { return states }
    for r in try db.query(PostgresBatchQueries.purchaseStates, [.intArray(keys)]) {
      let key = r.int(0)
      switch r.int(1) {
      case 0:
        let t = try PayloadCodec.decodeTransaction(
          r.bytes(5), transactionId: r.text(2), originalTransactionId: r.text(3), purchaseDate: r.int(4))
        states[key, default: UserPurchaseState()].transactions[t.transactionId] = t
      case 1:
        let i = try PayloadCodec.decodeRenewalInfo(r.bytes(5), originalTransactionId: r.text(2))
        states[key, default: UserPurchaseState()].renewalInfos[i.originalTransactionId] = .present(i)
      default:
        states[key, default: UserPurchaseState()].renewalInfos[r.text(2)] = .removed(
          originalTransactionId: r.text(2), asOfDate: r.optionalInt(6))
      }
    }
    return states
  }

  /// One user's data as the batch goes: the stored version of each record it changes (to know
  /// which table a renewal info leaves), the merged state, its schedule.
  private struct UserBatch {
    var key: Int64
    var state: UserPurchaseState
    var stored: UserPurchaseState
    var schedule: EventSchedule?
    var scheduleChanged = false
    var transactions: [String: EncodedTransaction] = [:]
    var renewalInfos: [String: EncodedRenewalInfo] = [:]
  }

  /// ``apply(_:atMs:_:catalogs:)`` for a batch none of whose apps tracks ownership.
  static func applyBatched(
    _ batch: [EncodedPurchases], atMs: Int64, _ db: PGConnection, catalogs: EventCatalogCache,
    policies appPolicies: [String: EligibilityPolicy]
  ) throws(StoreError) -> IngestSummary {
    var ordered = lockOrder(batch).filter { !$0.isEmpty }
    var summary = IngestSummary()
    if ordered.isEmpty { return summary }
    var seen = Set<UserKey>()
    var users = ordered.map(\.user).filter { seen.insert($0).inserted }
    // A user whose every update is `onlyIfStored` is not created again once erased.
    let creatable = Set(ordered.lazy.filter { !$0.onlyIfStored }.map(\.user))
    let (keys, created) = try lockUsers(db, users, mayCreate: { creatable.contains($0) })
    if keys.count < users.count {
      summary.erasedMeanwhile = users.filter { keys[$0] == nil }
      users = users.filter { keys[$0] != nil }
      ordered = ordered.filter { keys[$0.user] != nil }
      if ordered.isEmpty { return summary }
    }
    let existing = users.filter { !created.contains($0) }.compactMap { keys[$0] }
    let states = try purchaseStates(db, existing)
    var schedules: [Int64: EventSchedule] = [:]
    if !existing.isEmpty {
      for r in try db.query(PostgresBatchQueries.schedules, [.intArray(existing)]) {
        schedules[r.int(0)] = EventSchedule(loggedThroughMs: r.int(1), nextTransitionMs: r.optionalInt(2))
      }
    }
    var products: [String: [[UInt8]]] = [:]
    let appIds = Set(users.map(\.appId))
    for r in try db.query(PostgresBatchQueries.productPayloads, [.textArray(appIds.sorted())]) {
      products[r.text(0), default: []].append(r.bytes(1))
    }
    var catalogOf: [String: Catalog] = [:]
    for appId in appIds { catalogOf[appId] = try catalogs.catalog(appId: appId, payloads: products[appId] ?? []) }

    var data: [UserKey: UserBatch] = [:]
    for user in users {
      let key = keys[user]!
      let state = states[key] ?? UserPurchaseState()
      data[user] = UserBatch(key: key, state: state, stored: state, schedule: schedules[key])
    }
    var pending: [PendingEvents] = []
    var changedKeys: [Int64] = []
    for update in ordered {
      var u = data[update.user]!
      let before = u.state
      var changed = false
      // The domain's merge decides (rules 13, 14; see the Store protocol), as in the other path.
      for t in update.transactions {
        guard let (stored, old) = u.state.merge(t.transaction) else { continue }
        changed = true
        u.transactions[t.transactionId] = t.row(storing: stored)
        if isCountedChange(stored, replacing: old) { summary.transactionsWritten += 1 }
      }
      for r in update.renewalInfos {
        guard let old = u.state.merge(r.version) else { continue }
        changed = true
        u.renewalInfos[r.originalTransactionId] = r
        if isCountedChange(r.version, replacing: old) { summary.renewalInfosWritten += 1 }
      }
      if changed {
        if changedKeys.last != u.key { changedKeys.append(u.key) }
        let derived = UserEventDerivation.write(
          user: update.user, catalog: catalogOf[update.user.appId]!, before: before, after: u.state, atMs: atMs,
          schedule: u.schedule)
        u.schedule = derived.schedule
        u.scheduleChanged = true
        pending.append(PendingEvents(key: u.key, events: derived.events))
      }
      data[update.user] = u
    }
    try write(users.map { data[$0]! }, db)
    // Each user's summary, in the commit, in one statement (none of these apps tracks ownership:
    // no gaps).
    try storeSummaries(
      db,
      users.map { user in
        (data[user]!.key, UserSummaryRows.summary(
          of: data[user]!.state, gaps: [], catalog: catalogOf[user.appId]!, policy: appPolicies[user.appId] ?? .default,
          atMs: atMs))
      })
    summary.eventsAppended = try appendEvents(db, pending).count
    try recordUserChanges(db, changedKeys)
    return summary
  }

  /// Writes the users' changed rows and schedules, one statement per table and kind.
  private static func write(_ users: [UserBatch], _ db: PGConnection) throws(StoreError) {
    var t = (keys: [Int64?](), ids: [String](), originals: [String](), purchases: [Int64?](), signed: [Int64?](), payloads: [[UInt8]]())
    var present = (keys: [Int64?](), ids: [String](), signed: [Int64?](), payloads: [[UInt8]]())
    var removed = (keys: [Int64?](), ids: [String](), asOf: [Int64?]())
    var dropPresent = (keys: [Int64?](), ids: [String]())
    var dropRemoved = (keys: [Int64?](), ids: [String]())
    var s = (keys: [Int64?](), through: [Int64?](), next: [Int64?]())
    for u in users {
      for x in u.transactions.values.sorted(by: { $0.transactionId < $1.transactionId }) {
        t.keys.append(u.key)
        t.ids.append(x.transactionId)
        t.originals.append(x.originalTransactionId)
        t.purchases.append(x.purchaseMs)
        t.signed.append(x.signedMs)
        t.payloads.append(x.payload)
      }
      for r in u.renewalInfos.values.sorted(by: { $0.originalTransactionId < $1.originalTransactionId }) {
        let was = u.stored.renewalInfos[r.originalTransactionId]
        if let payload = r.payload {
          present.keys.append(u.key)
          present.ids.append(r.originalTransactionId)
          present.signed.append(r.signedMs)
          present.payloads.append(payload)
          if case .removed? = was {
            dropRemoved.keys.append(u.key)
            dropRemoved.ids.append(r.originalTransactionId)
          }
        } else {
          removed.keys.append(u.key)
          removed.ids.append(r.originalTransactionId)
          removed.asOf.append(r.version.appleClock)
          if case .present? = was {
            dropPresent.keys.append(u.key)
            dropPresent.ids.append(r.originalTransactionId)
          }
        }
      }
      if u.scheduleChanged, let schedule = u.schedule {
        s.keys.append(u.key)
        s.through.append(schedule.loggedThroughMs)
        s.next.append(schedule.nextTransitionMs)
      }
    }
    if !t.keys.isEmpty {
      try db.run(
        PostgresBatchQueries.upsertTransactions,
        [
          .intArray(t.keys), .textArray(t.ids), .textArray(t.originals), .intArray(t.purchases),
          .intArray(t.signed), .byteaArray(t.payloads),
        ])
    }
    if !present.keys.isEmpty {
      try db.run(
        PostgresBatchQueries.upsertRenewalInfos,
        [.intArray(present.keys), .textArray(present.ids), .intArray(present.signed), .byteaArray(present.payloads)])
    }
    if !dropRemoved.keys.isEmpty {
      try db.run(PostgresBatchQueries.deleteRemovals, [.intArray(dropRemoved.keys), .textArray(dropRemoved.ids)])
    }
    if !removed.keys.isEmpty {
      try db.run(
        PostgresBatchQueries.upsertRemovals, [.intArray(removed.keys), .textArray(removed.ids), .intArray(removed.asOf)])
    }
    if !dropPresent.keys.isEmpty {
      try db.run(PostgresBatchQueries.deleteRenewalInfos, [.intArray(dropPresent.keys), .textArray(dropPresent.ids)])
    }
    if !s.keys.isEmpty {
      try db.run(PostgresBatchQueries.upsertSchedules, [.intArray(s.keys), .intArray(s.through), .intArray(s.next)])
    }
  }

  /// Appends the events whose ids are not logged yet, as the transaction's last step, in one
  /// statement: takes the event log's advisory lock (held until commit; see
  /// `PostgresStore+Events.swift`), then the sequences, in the order given; an id already logged
  /// (or given twice) is appended once.
  static func appendEvents(_ db: PGConnection, _ pending: [PendingEvents]) throws(StoreError)
    -> [LoggedEvent]
  {
    var events: [(key: Int64, event: SubscriptionEvent)] = []
    for p in pending { for e in p.events { events.append((p.key, e)) } }
    if events.isEmpty { return [] }
    _ = try db.query(PostgresEventQueries.lock, [.int(PostgresSchema.eventLogLock)])
    var sequences: [String: Int64] = [:]
    for r in try db.query(
      PostgresBatchQueries.insertEvents,
      [
        .textArray(events.map(\.event.eventId)), .textArray(events.map(\.event.appId)),
        .intArray(events.map(\.key)), .textArray(events.map(\.event.environment.rawValue)),
        .textArray(events.map(\.event.type.rawValue)), .intArray(events.map(\.event.occurredMs)),
        .byteaArray(events.map { PayloadCodec.encode($0.event) }),
      ])
    {
      sequences[r.text(0)] = r.int(1)
    }
    var appended: [LoggedEvent] = []
    for (_, e) in events {
      guard let sequence = sequences.removeValue(forKey: e.eventId) else { continue }
      appended.append(LoggedEvent(sequence: sequence, event: e))
    }
    return appended.sorted { $0.sequence < $1.sequence }
  }
}
