// Purchase sharing in PostgreSQL: the app's policy read in the ingest's transaction, the ownership
// rows (tables ownership_gaps and ownership_transfers, migration 7) written through
// ``PurchaseOwnership``. Instances sharing the database decide one original transaction at a time:
// a transaction-scoped advisory lock per (app, environment, original transaction) is taken before
// its holders are read, so two first submissions under KEEP_FIRST cannot both win.
import SubscriptionDomain
import SubscriptionStorage

/// The ownership rows of one app and environment, in the ingest's transaction, and what the
/// `OWNERSHIP_TRANSFERRED` events read and write there.
struct PostgresOwnershipLedger: OwnershipLedger, OwnershipEventLog {
  let db: PGConnection
  let appId: String
  let environment: Environment
  /// The catalogs read for ``evaluationInputs()``.
  var catalogs: EventCatalogCache? = nil
  /// The app's policy as the transaction read it, for ``evaluationInputs()``.
  var policy: EligibilityPolicy? = nil
  /// Events to append at the end of the transaction (``PostgresStore/appendEvents(_:_:)``).
  private(set) var pending: [PendingEvents] = []

  private var scope: [PGValue] { [.text(appId), .text(environment.rawValue)] }

  func holders(of originalTransactionId: String) throws(StoreError) -> Set<String> {
    // Held until commit: the other instances' decisions on this original transaction wait.
    _ = try db.query(
      "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
      [.text("ownership\u{1F}\(appId)\u{1F}\(environment.rawValue)\u{1F}\(originalTransactionId)")])
    return Set(
      try db.query(
        """
        SELECT DISTINCT u.user_id FROM transactions t JOIN users u ON u.user_key = t.user_key
        WHERE t.original_transaction_id = $1 AND u.app_id = $2 AND u.environment = $3
        """, [.text(originalTransactionId)] + scope
      ).map { $0.text(0) })
  }

  func usersWithOpenGap(on originalTransactionId: String) throws(StoreError) -> Set<String> {
    Set(
      try db.query(
        """
        SELECT u.user_id FROM ownership_gaps g JOIN users u ON u.user_key = g.user_key
        WHERE g.original_transaction_id = $1 AND g.until_ms IS NULL AND u.app_id = $2 AND u.environment = $3
        """, [.text(originalTransactionId)] + scope
      ).map { $0.text(0) })
  }

  /// The user's key, created if needed (a gainer's gap may precede its first transaction row).
  private func userKey(_ userId: String) throws(StoreError) -> Int64 {
    let values = scope + [.text(userId)]
    for _ in 0..<3 {
      if let row = try db.first(PostgresQueries.userKey, values) { return row.int(0) }
      if let row = try db.first(PostgresQueries.insertUser, values) { return row.int(0) }
    }
    throw StoreError(.internalError, "cannot create the user row of \(userId)")
  }

  func purchases(of userId: String, originalTransactionId: String) throws(StoreError) -> (
    transactions: [Transaction], renewals: [RenewalInfo]
  ) {
    let state = try purchaseState(of: userId)
    return (
      state.transactions.values.filter { $0.originalTransactionId == originalTransactionId },
      state.renewalInfos[originalTransactionId]?.renewalInfo.map { [$0] } ?? []
    )
  }

  func evaluationInputs() throws(StoreError) -> (catalog: Catalog, policy: EligibilityPolicy) {
    guard let policy else { throw StoreError(.internalError, "the ownership ledger of \(appId) has no policy") }
    return (try PostgresStore.catalog(db, appId, catalogs ?? EventCatalogCache()), policy)
  }

  /// Locks the user's row first, like every write of a user's data (the previous owner of a
  /// transfer is not otherwise written by the transaction).
  func purchaseState(of userId: String) throws(StoreError) -> UserPurchaseState {
    let key = try userKey(userId)
    _ = try db.query(PostgresQueries.lockUser, [.int(key)])
    return try PostgresStore.purchaseState(db, key)
  }

  func gaps(of userId: String) throws(StoreError) -> [OwnershipGap] {
    try PostgresStore.ownershipGaps(db, try userKey(userId))
  }

  /// The user's gaps; none for a user not stored yet (whose row is not created).
  func existingGaps(of userId: String) throws(StoreError) -> [OwnershipGap] {
    guard let row = try db.first(PostgresQueries.userKey, scope + [.text(userId)]) else { return [] }
    return try PostgresStore.ownershipGaps(db, row.int(0))
  }

  func schedule(of userId: String) throws(StoreError) -> EventSchedule? {
    try db.first(PostgresEventQueries.schedule, [.int(try userKey(userId))]).map {
      EventSchedule(loggedThroughMs: $0.int(0), nextTransitionMs: $0.optionalInt(1))
    }
  }

  func saveSchedule(_ schedule: EventSchedule, of userId: String) throws(StoreError) {
    try PostgresStore.saveSchedule(db, try userKey(userId), schedule)
  }

  mutating func append(_ events: [SubscriptionEvent], of userId: String) throws(StoreError) {
    pending.append(PendingEvents(key: try userKey(userId), events: events))
  }

  func insertGap(userId: String, _ gap: OwnershipGap) throws(StoreError) {
    _ = try db.run(
      "INSERT INTO ownership_gaps(user_key, original_transaction_id, from_ms, until_ms) VALUES($1, $2, $3, $4)",
      [.int(try userKey(userId)), .text(gap.originalTransactionId), .optional(gap.fromMs), .optional(gap.untilMs)])
  }

  func closeGap(userId: String, originalTransactionId: String, atMs: Int64) throws(StoreError) {
    _ = try db.run(
      """
      UPDATE ownership_gaps SET until_ms = $1 WHERE user_key = $2 AND original_transaction_id = $3
        AND until_ms IS NULL
      """, [.int(atMs), .int(try userKey(userId)), .text(originalTransactionId)])
  }

  func recordTransfer(_ transfer: OwnershipTransfer) throws(StoreError) {
    _ = try db.run(
      """
      INSERT INTO ownership_transfers(app_id, environment, original_transaction_id, at_ms,
        previous_user_id, new_user_id) VALUES($1, $2, $3, $4, $5, $6)
      ON CONFLICT (app_id, environment, original_transaction_id, at_ms, previous_user_id)
        DO UPDATE SET new_user_id = excluded.new_user_id
      """,
      scope + [
        .text(transfer.originalTransactionId), .int(transfer.atMs), .text(transfer.previousUserId),
        .text(transfer.newUserId),
      ])
  }
}

extension PostgresStore {
  /// One user's ownership gaps, in the current transaction (``OwnershipGap/ownedEvents(_:gaps:)``).
  static func ownershipGaps(_ db: PGConnection, _ key: Int64) throws(StoreError) -> [OwnershipGap] {
    try db.query(
      """
      SELECT original_transaction_id, from_ms, until_ms FROM ownership_gaps WHERE user_key = $1
      ORDER BY original_transaction_id, from_ms NULLS FIRST
      """, [.int(key)]
    ).map { r in OwnershipGap(originalTransactionId: r.text(0), fromMs: r.optionalInt(1), untilMs: r.optionalInt(2)) }
  }

  /// See ``PurchaseStore/ownershipGaps(appId:environment:userIds:)``.
  public func ownershipGaps(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: [OwnershipGap]] {
    if userIds.isEmpty { return [:] }
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT u.user_id, g.original_transaction_id, g.from_ms, g.until_ms
        FROM unnest($3::text[]) AS wanted(user_id)
        JOIN users u ON u.app_id = $1 AND u.environment = $2 AND u.user_id = wanted.user_id
        JOIN ownership_gaps g ON g.user_key = u.user_key
        ORDER BY u.user_id, g.original_transaction_id, g.from_ms NULLS FIRST
        """, [.text(appId), .text(environment.rawValue), .textArray(Array(Set(userIds)))])
    }
    var out: [String: [OwnershipGap]] = [:]
    for r in rows {
      out[r.text(0), default: []].append(
        OwnershipGap(originalTransactionId: r.text(1), fromMs: r.optionalInt(2), untilMs: r.optionalInt(3)))
    }
    return out
  }

  /// See ``PurchaseStore/ownershipTransfers(appId:environment:originalTransactionId:)``.
  public func ownershipTransfers(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [OwnershipTransfer] {
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT at_ms, previous_user_id, new_user_id FROM ownership_transfers
        WHERE app_id = $1 AND environment = $2 AND original_transaction_id = $3
        ORDER BY at_ms, previous_user_id
        """, [.text(appId), .text(environment.rawValue), .text(originalTransactionId)])
    }
    return rows.map {
      OwnershipTransfer(
        appId: appId, environment: environment, originalTransactionId: originalTransactionId,
        previousUserId: $0.text(1), newUserId: $0.text(2), atMs: $0.int(0))
    }
  }
}
