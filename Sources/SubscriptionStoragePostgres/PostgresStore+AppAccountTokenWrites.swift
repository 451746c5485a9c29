// The outbox of Set App Account Token (``SubscriptionStorage/AppAccountTokenWriteStore``), as in
// the SQLite store; claims skip rows another instance's claim holds (`SKIP LOCKED`).
import SubscriptionDomain
import SubscriptionStorage

extension PostgresSchema {
  /// The `appAccountToken` writes owed to Apple after purchase sharing transfers (rule 26), as in
  /// the SQLite store.
  static let appAccountTokenWritesMigration = PostgresMigration(
    version: 18, description: "app account token writes owed to Apple (purchase sharing transfers)",
    sql: """
      CREATE TABLE app_account_token_writes(
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
        environment TEXT NOT NULL,
        original_transaction_id TEXT COLLATE "C" NOT NULL,
        user_id TEXT COLLATE "C" NOT NULL,
        transferred_ms BIGINT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_ms BIGINT,
        detail TEXT,
        PRIMARY KEY(app_id, environment, original_transaction_id)
      );
      CREATE INDEX app_account_token_writes_due ON app_account_token_writes(next_attempt_ms)
        WHERE next_attempt_ms IS NOT NULL;
      CREATE INDEX app_account_token_writes_by_user ON app_account_token_writes(app_id, user_id);
      """)
}

extension PostgresOwnershipLedger {
  /// See ``OwnershipLedger/saveAppAccountTokenWrite(for:)``: one statement, so that concurrent
  /// transfers of one original transaction (two instances) both land, the later commit last.
  /// `GREATEST` ignores a NULL (a given-up row reopens at the transfer's instant), as
  /// ``SubscriptionStorage/AppAccountTokenWrite/replacing(_:by:)`` does.
  func saveAppAccountTokenWrite(for transfer: OwnershipTransfer) throws(StoreError) {
    _ = try db.run(
      """
      INSERT INTO app_account_token_writes(\(PostgresStore.appAccountTokenWriteColumns))
      VALUES($1, $2, $3, $4, $5, 0, $5, NULL)
      ON CONFLICT (app_id, environment, original_transaction_id) DO UPDATE SET
        user_id = excluded.user_id, transferred_ms = excluded.transferred_ms, attempts = 0, detail = NULL,
        next_attempt_ms = GREATEST(app_account_token_writes.next_attempt_ms, excluded.next_attempt_ms)
      """,
      [
        .text(transfer.appId), .text(transfer.environment.rawValue), .text(transfer.originalTransactionId),
        .text(transfer.newUserId), .int(transfer.atMs),
      ])
  }
}

extension PostgresStore {
  static let appAccountTokenWriteColumns =
    "app_id, environment, original_transaction_id, user_id, transferred_ms, attempts, next_attempt_ms, detail"

  static func appAccountTokenWrite(_ r: PGRow) throws(StoreError) -> AppAccountTokenWrite {
    guard let environment = Environment(rawValue: r.text(1)) else {
      throw StoreError(.corrupt, "app account token write has unknown environment \(r.text(1))")
    }
    var write = AppAccountTokenWrite(
      appId: r.text(0), environment: environment, originalTransactionId: r.text(2), userId: r.text(3),
      transferredMs: r.int(4), attempts: Int(r.int(5)), detail: r.optionalText(7))
    write.nextAttemptMs = r.optionalInt(6)
    return write
  }

  private static func key(_ w: AppAccountTokenWrite) -> [PGValue] {
    [.text(w.appId), .text(w.environment.rawValue), .text(w.originalTransactionId)]
  }

  /// See ``SubscriptionStorage/AppAccountTokenWriteStore/claimDueAppAccountTokenWrites(atMs:limit:leaseUntilMs:)``:
  /// rows another instance's claim holds are skipped (`SKIP LOCKED`).
  public func claimDueAppAccountTokenWrites(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [AppAccountTokenWrite]
  {
    let rows = try await pool.transaction { db throws(StoreError) in
      try db.query(
        """
        WITH due AS (
          SELECT app_id, environment, original_transaction_id, next_attempt_ms AS due_ms FROM app_account_token_writes
          WHERE next_attempt_ms IS NOT NULL AND next_attempt_ms <= $1
          ORDER BY next_attempt_ms, app_id, environment, original_transaction_id LIMIT $2 FOR UPDATE SKIP LOCKED)
        UPDATE app_account_token_writes w SET next_attempt_ms = $3 FROM due
        WHERE w.app_id = due.app_id AND w.environment = due.environment
          AND w.original_transaction_id = due.original_transaction_id
        RETURNING w.app_id, w.environment, w.original_transaction_id, w.user_id, w.transferred_ms, w.attempts,
          due.due_ms, w.detail
        """, [.int(atMs), .int(Int64(max(1, limit))), .int(leaseUntilMs)])
    }
    var out: [AppAccountTokenWrite] = []
    for r in rows { out.append(try Self.appAccountTokenWrite(r)) }
    return out.sorted {
      ($0.nextAttemptMs ?? 0, $0.appId, $0.environment.rawValue, $0.originalTransactionId)
        < ($1.nextAttemptMs ?? 0, $1.appId, $1.environment.rawValue, $1.originalTransactionId)
    }
  }

  /// See ``SubscriptionStorage/AppAccountTokenWriteStore/nextAppAccountTokenWriteDueMs()``.
  public func nextAppAccountTokenWriteDueMs() async throws(StoreError) -> Int64? {
    try await pool.run { db throws(StoreError) in
      try db.first("SELECT MIN(next_attempt_ms) FROM app_account_token_writes WHERE next_attempt_ms IS NOT NULL")?
        .optionalInt(0)
    }
  }

  /// See ``SubscriptionStorage/AppAccountTokenWriteStore/finishAppAccountTokenWrite(_:givenUpDetail:releaseAtMs:)``.
  public func finishAppAccountTokenWrite(_ write: AppAccountTokenWrite, givenUpDetail: String?, releaseAtMs: Int64)
    async throws(StoreError) -> Bool
  {
    try await pool.transaction { db throws(StoreError) in
      let changed: Int
      if let givenUpDetail {
        changed = try db.run(
          "UPDATE app_account_token_writes SET next_attempt_ms = NULL, detail = $1, attempts = $2"
            + " WHERE app_id = $3 AND environment = $4 AND original_transaction_id = $5 AND user_id = $6",
          [.text(givenUpDetail), .int(Int64(write.attempts))] + Self.key(write) + [.text(write.userId)])
      } else {
        changed = try db.run(
          "DELETE FROM app_account_token_writes"
            + " WHERE app_id = $1 AND environment = $2 AND original_transaction_id = $3 AND user_id = $4",
          Self.key(write) + [.text(write.userId)])
      }
      if changed > 0 { return true }
      try db.run(
        "UPDATE app_account_token_writes SET next_attempt_ms = $1"
          + " WHERE app_id = $2 AND environment = $3 AND original_transaction_id = $4 AND next_attempt_ms IS NOT NULL",
        [.int(releaseAtMs)] + Self.key(write))
      return false
    }
  }

  /// See ``SubscriptionStorage/AppAccountTokenWriteStore/rescheduleAppAccountTokenWrite(_:attempts:nextAttemptMs:detail:)``.
  public func rescheduleAppAccountTokenWrite(
    _ write: AppAccountTokenWrite, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) -> Bool {
    try await pool.transaction { db throws(StoreError) in
      let changed = try db.run(
        "UPDATE app_account_token_writes SET attempts = $1, next_attempt_ms = $2, detail = $3"
          + " WHERE app_id = $4 AND environment = $5 AND original_transaction_id = $6 AND user_id = $7",
        [.int(Int64(attempts)), .int(nextAttemptMs), .text(detail)] + Self.key(write) + [.text(write.userId)])
      if changed > 0 { return true }
      try db.run(
        "UPDATE app_account_token_writes SET next_attempt_ms = $1"
          + " WHERE app_id = $2 AND environment = $3 AND original_transaction_id = $4 AND next_attempt_ms IS NOT NULL",
        [.int(nextAttemptMs)] + Self.key(write))
      return false
    }
  }

  /// See ``SubscriptionStorage/AppAccountTokenWriteStore/appAccountTokenWrite(appId:environment:originalTransactionId:)``.
  public func appAccountTokenWrite(appId: String, environment: Environment, originalTransactionId: String)
    async throws(StoreError) -> AppAccountTokenWrite?
  {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        "SELECT \(Self.appAccountTokenWriteColumns) FROM app_account_token_writes"
          + " WHERE app_id = $1 AND environment = $2 AND original_transaction_id = $3",
        [.text(appId), .text(environment.rawValue), .text(originalTransactionId)])
    }
    return try row.map { (r) throws(StoreError) in try Self.appAccountTokenWrite(r) }
  }
}
