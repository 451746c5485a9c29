// Purchase sharing in SQLite: the app's policy read in the ingest's commit, the ownership rows
// (tables ownership_gaps and ownership_transfers, migration 8) written through ``PurchaseOwnership``.
import SubscriptionDomain
import SubscriptionStorage

extension OwnershipPolicy {
  /// The app's policy in the current transaction.
  ///
  /// An app whose policy never left SHARE (`ownership_tracked` 0: setting any other value sets it
  /// for good) shares, so its policy's JSON is decoded only for the apps that track ownership: on
  /// every ingest commit that decoding was about 3 % of the writer's CPU.
  /// - Throws: `notFound` for an unknown app.
  static func read(_ db: SQLiteConnection, _ appId: String) throws(StoreError) -> OwnershipPolicy {
    guard
      let row = try db.first(
        "SELECT ownership_tracked, CASE WHEN ownership_tracked != 0 THEN policy END FROM apps WHERE app_id = ?",
        [.text(appId)],
        { r throws(StoreError) in
          r.int(0) != 0 ? try PayloadCodec.decodeJSON(EligibilityPolicy.self, r.blob(1)) : nil
        })
    else { throw StoreError.notFound("app", appId) }
    guard let policy = row else { return OwnershipPolicy(sharing: .share, tracked: false) }
    return OwnershipPolicy(policy, tracked: true)
  }
}

/// The ownership rows of one app and environment, in the writer's transaction, and what the
/// `OWNERSHIP_TRANSFERRED` events read and write there.
struct SQLiteOwnershipLedger: OwnershipLedger, OwnershipEventLog {
  let db: SQLiteConnection
  let appId: String
  let environment: Environment
  /// The cache of the commit's catalogs, for ``evaluationInputs()``.
  var catalogs: EventCatalogCache? = nil
  /// The cache of the commit's policies, for ``evaluationInputs()``.
  var policies: PolicyCache? = nil
  /// Events appended through ``append(_:of:)``.
  private(set) var eventsAppended = 0

  private var scope: [SQLValue] { [.text(appId), .text(environment.rawValue)] }

  func holders(of originalTransactionId: String) throws(StoreError) -> Set<String> {
    Set(
      try db.all(
        """
        SELECT DISTINCT u.user_id FROM transactions t CROSS JOIN users u ON u.user_key = t.user_key
        WHERE t.original_transaction_id = ? AND u.app_id = ? AND u.environment = ?
        """, [.text(originalTransactionId)] + scope
      ) { $0.text(0) })
  }

  func usersWithOpenGap(on originalTransactionId: String) throws(StoreError) -> Set<String> {
    Set(
      try db.all(
        """
        SELECT u.user_id FROM ownership_gaps g CROSS JOIN users u ON u.user_key = g.user_key
        WHERE g.original_transaction_id = ? AND g.until_ms IS NULL AND u.app_id = ? AND u.environment = ?
        """, [.text(originalTransactionId)] + scope
      ) { $0.text(0) })
  }

  /// The user's key, created if needed (a gainer's gap may precede its first transaction row).
  private func userKey(_ userId: String) throws(StoreError) -> Int64 {
    let values = scope + [.text(userId)]
    if let key = try db.first(HotQueries.userKey, values, { $0.int(0) }) { return key }
    try db.run("INSERT INTO users(app_id, environment, user_id) VALUES(?, ?, ?)", values)
    return db.lastInsertRowID
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
    (
      try SQLiteStore.catalog(db, appId, catalogs ?? EventCatalogCache()),
      try SQLiteStore.policy(db, appId, policies ?? PolicyCache())
    )
  }

  func purchaseState(of userId: String) throws(StoreError) -> UserPurchaseState {
    try SQLiteStore.purchaseState(db, try userKey(userId))
  }

  func gaps(of userId: String) throws(StoreError) -> [OwnershipGap] {
    try SQLiteStore.ownershipGaps(db, try userKey(userId))
  }

  /// The user's gaps; none for a user not stored yet (whose row is not created).
  func existingGaps(of userId: String) throws(StoreError) -> [OwnershipGap] {
    guard let key = try db.first(HotQueries.userKey, scope + [.text(userId)], { $0.int(0) }) else { return [] }
    return try SQLiteStore.ownershipGaps(db, key)
  }

  func schedule(of userId: String) throws(StoreError) -> EventSchedule? {
    try db.first(EventQueries.schedule, [.int(try userKey(userId))]) {
      EventSchedule(loggedThroughMs: $0.int(0), nextTransitionMs: $0.optionalInt(1))
    }
  }

  func saveSchedule(_ schedule: EventSchedule, of userId: String) throws(StoreError) {
    try SQLiteStore.saveSchedule(db, try userKey(userId), schedule)
  }

  mutating func append(_ events: [SubscriptionEvent], of userId: String) throws(StoreError) {
    eventsAppended += try SQLiteStore.appendEvents(db, events, key: try userKey(userId)).count
  }

  func insertGap(userId: String, _ gap: OwnershipGap) throws(StoreError) {
    try db.run(
      "INSERT INTO ownership_gaps(user_key, original_transaction_id, from_ms, until_ms) VALUES(?, ?, ?, ?)",
      [.int(try userKey(userId)), .text(gap.originalTransactionId), .optional(gap.fromMs), .optional(gap.untilMs)])
  }

  func closeGap(userId: String, originalTransactionId: String, atMs: Int64) throws(StoreError) {
    try db.run(
      """
      UPDATE ownership_gaps SET until_ms = ? WHERE user_key = ? AND original_transaction_id = ?
        AND until_ms IS NULL
      """, [.int(atMs), .int(try userKey(userId)), .text(originalTransactionId)])
  }

  func recordTransfer(_ transfer: OwnershipTransfer) throws(StoreError) {
    try db.run(
      """
      INSERT INTO ownership_transfers(app_id, environment, original_transaction_id, at_ms,
        previous_user_id, new_user_id) VALUES(?, ?, ?, ?, ?, ?)
      ON CONFLICT(app_id, environment, original_transaction_id, at_ms, previous_user_id)
        DO UPDATE SET new_user_id = excluded.new_user_id
      """,
      scope + [
        .text(transfer.originalTransactionId), .int(transfer.atMs), .text(transfer.previousUserId),
        .text(transfer.newUserId),
      ])
  }
}

extension SQLiteStore {
  /// One user's ownership gaps, in the current transaction (``OwnershipGap/ownedEvents(_:gaps:)``).
  static func ownershipGaps(_ db: SQLiteConnection, _ key: Int64) throws(StoreError) -> [OwnershipGap] {
    try db.all(
      """
      SELECT original_transaction_id, from_ms, until_ms FROM ownership_gaps WHERE user_key = ?
      ORDER BY original_transaction_id, COALESCE(from_ms, -9223372036854775808)
      """, [.int(key)]
    ) { r in OwnershipGap(originalTransactionId: r.text(0), fromMs: r.optionalInt(1), untilMs: r.optionalInt(2)) }
  }

  /// See ``PurchaseStore/ownershipGaps(appId:environment:userIds:)``.
  public func ownershipGaps(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [String: [OwnershipGap]] {
    if userIds.isEmpty { return [:] }
    return try await readers.read { db throws(StoreError) in
      var out: [String: [OwnershipGap]] = [:]
      for userId in Set(userIds) {
        let gaps = try db.all(
          """
          SELECT g.original_transaction_id, g.from_ms, g.until_ms FROM users u
          CROSS JOIN ownership_gaps g ON g.user_key = u.user_key
          WHERE u.app_id = ? AND u.environment = ? AND u.user_id = ?
          ORDER BY g.original_transaction_id, COALESCE(g.from_ms, -9223372036854775808)
          """, [.text(appId), .text(environment.rawValue), .text(userId)]
        ) { r in OwnershipGap(originalTransactionId: r.text(0), fromMs: r.optionalInt(1), untilMs: r.optionalInt(2)) }
        if !gaps.isEmpty { out[userId] = gaps }
      }
      return out
    }
  }

  /// See ``PurchaseStore/ownershipTransfers(appId:environment:originalTransactionId:)``.
  public func ownershipTransfers(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [OwnershipTransfer] {
    try await readers.read { db throws(StoreError) in
      try db.all(
        """
        SELECT at_ms, previous_user_id, new_user_id FROM ownership_transfers
        WHERE app_id = ? AND environment = ? AND original_transaction_id = ?
        ORDER BY at_ms, previous_user_id
        """, [.text(appId), .text(environment.rawValue), .text(originalTransactionId)]
      ) { r in
        OwnershipTransfer(
          appId: appId, environment: environment, originalTransactionId: originalTransactionId,
          previousUserId: r.text(1), newUserId: r.text(2), atMs: r.int(0))
      }
    }
  }
}
