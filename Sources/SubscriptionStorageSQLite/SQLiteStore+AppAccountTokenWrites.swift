// The outbox of Set App Account Token (``SubscriptionStorage/AppAccountTokenWriteStore``): rows
// written by the ingest commit that transfers an original transaction, claimed by the writer.
import SubscriptionDomain
import SubscriptionStorage

extension Schema {
  /// The `appAccountToken` writes owed to Apple after purchase sharing transfers (rule 26): one row
  /// per original transaction; open rows have a `next_attempt_ms` (indexed: the writer's claim is an
  /// index range).
  static let appAccountTokenWritesMigration = Migration(
    version: 22, description: "app account token writes owed to Apple (purchase sharing transfers)",
    sql: """
      CREATE TABLE app_account_token_writes(
        app_id TEXT NOT NULL REFERENCES apps(app_id),
        environment TEXT NOT NULL,
        original_transaction_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        transferred_ms INTEGER NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_ms INTEGER,
        detail TEXT,
        PRIMARY KEY(app_id, environment, original_transaction_id)
      ) WITHOUT ROWID;
      CREATE INDEX app_account_token_writes_due ON app_account_token_writes(next_attempt_ms)
        WHERE next_attempt_ms IS NOT NULL;
      CREATE INDEX app_account_token_writes_by_user ON app_account_token_writes(app_id, user_id);
      """)
}

extension SQLiteOwnershipLedger {
  /// See ``OwnershipLedger/saveAppAccountTokenWrite(for:)``.
  func saveAppAccountTokenWrite(for transfer: OwnershipTransfer) throws(StoreError) {
    let existing = try db.first(
      "SELECT \(SQLiteStore.appAccountTokenWriteColumns) FROM app_account_token_writes"
        + " WHERE app_id = ? AND environment = ? AND original_transaction_id = ?",
      [.text(transfer.appId), .text(transfer.environment.rawValue), .text(transfer.originalTransactionId)],
      SQLiteStore.appAccountTokenWrite)
    let write = AppAccountTokenWrite.replacing(existing, by: transfer)
    try db.run(
      "INSERT OR REPLACE INTO app_account_token_writes(\(SQLiteStore.appAccountTokenWriteColumns))"
        + " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
      SQLiteStore.values(write))
  }
}

extension SQLiteStore {
  static let appAccountTokenWriteColumns =
    "app_id, environment, original_transaction_id, user_id, transferred_ms, attempts, next_attempt_ms, detail"

  static func appAccountTokenWrite(_ r: SQLRow) throws(StoreError) -> AppAccountTokenWrite {
    guard let environment = Environment(rawValue: r.text(1)) else {
      throw StoreError(.corrupt, "app account token write has unknown environment \(r.text(1))")
    }
    var write = AppAccountTokenWrite(
      appId: r.text(0), environment: environment, originalTransactionId: r.text(2), userId: r.text(3),
      transferredMs: r.int(4), attempts: Int(r.int(5)), detail: r.optionalText(7))
    write.nextAttemptMs = r.optionalInt(6)
    return write
  }

  static func values(_ w: AppAccountTokenWrite) -> [SQLValue] {
    [
      .text(w.appId), .text(w.environment.rawValue), .text(w.originalTransactionId), .text(w.userId),
      .int(w.transferredMs), .int(Int64(w.attempts)), .optional(w.nextAttemptMs), .optional(w.detail),
    ]
  }

  private static let appAccountTokenWriteKey = "app_id = ? AND environment = ? AND original_transaction_id = ?"

  private static func key(_ w: AppAccountTokenWrite) -> [SQLValue] {
    [.text(w.appId), .text(w.environment.rawValue), .text(w.originalTransactionId)]
  }

  /// See ``AppAccountTokenWriteStore/claimDueAppAccountTokenWrites(atMs:limit:leaseUntilMs:)``.
  public func claimDueAppAccountTokenWrites(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [AppAccountTokenWrite]
  {
    try await writer.write { db throws(StoreError) in
      let due = try db.all(
        "SELECT \(Self.appAccountTokenWriteColumns) FROM app_account_token_writes"
          + " WHERE next_attempt_ms IS NOT NULL AND next_attempt_ms <= ?"
          + " ORDER BY next_attempt_ms, app_id, environment, original_transaction_id LIMIT ?",
        [.int(atMs), .int(Int64(max(1, limit)))], Self.appAccountTokenWrite)
      for write in due {
        try db.run(
          "UPDATE app_account_token_writes SET next_attempt_ms = ? WHERE \(Self.appAccountTokenWriteKey)",
          [.int(leaseUntilMs)] + Self.key(write))
      }
      return due
    }
  }

  /// See ``AppAccountTokenWriteStore/nextAppAccountTokenWriteDueMs()``.
  public func nextAppAccountTokenWriteDueMs() async throws(StoreError) -> Int64? {
    try await readers.read { db throws(StoreError) in
      try db.first(
        "SELECT MIN(next_attempt_ms) FROM app_account_token_writes WHERE next_attempt_ms IS NOT NULL"
      ) { $0.optionalInt(0) } ?? nil
    }
  }

  /// See ``AppAccountTokenWriteStore/finishAppAccountTokenWrite(_:givenUpDetail:releaseAtMs:)``.
  public func finishAppAccountTokenWrite(_ write: AppAccountTokenWrite, givenUpDetail: String?, releaseAtMs: Int64)
    async throws(StoreError) -> Bool
  {
    try await writer.write { db throws(StoreError) in
      if let givenUpDetail {
        try db.run(
          "UPDATE app_account_token_writes SET next_attempt_ms = NULL, detail = ?, attempts = ?"
            + " WHERE \(Self.appAccountTokenWriteKey) AND user_id = ?",
          [.text(givenUpDetail), .int(Int64(write.attempts))] + Self.key(write) + [.text(write.userId)])
      } else {
        try db.run(
          "DELETE FROM app_account_token_writes WHERE \(Self.appAccountTokenWriteKey) AND user_id = ?",
          Self.key(write) + [.text(write.userId)])
      }
      if db.changes > 0 { return true }
      try db.run(
        "UPDATE app_account_token_writes SET next_attempt_ms = ?"
          + " WHERE \(Self.appAccountTokenWriteKey) AND next_attempt_ms IS NOT NULL",
        [.int(releaseAtMs)] + Self.key(write))
      return false
    }
  }

  /// See ``AppAccountTokenWriteStore/rescheduleAppAccountTokenWrite(_:attempts:nextAttemptMs:detail:)``.
  public func rescheduleAppAccountTokenWrite(
    _ write: AppAccountTokenWrite, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) -> Bool {
    try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE app_account_token_writes SET attempts = ?, next_attempt_ms = ?, detail = ?"
          + " WHERE \(Self.appAccountTokenWriteKey) AND user_id = ?",
        [.int(Int64(attempts)), .int(nextAttemptMs), .text(detail)] + Self.key(write) + [.text(write.userId)])
      if db.changes > 0 { return true }
      try db.run(
        "UPDATE app_account_token_writes SET next_attempt_ms = ?"
          + " WHERE \(Self.appAccountTokenWriteKey) AND next_attempt_ms IS NOT NULL",
        [.int(nextAttemptMs)] + Self.key(write))
      return false
    }
  }

  /// See ``AppAccountTokenWriteStore/appAccountTokenWrite(appId:environment:originalTransactionId:)``.
  public func appAccountTokenWrite(appId: String, environment: Environment, originalTransactionId: String)
    async throws(StoreError) -> AppAccountTokenWrite?
  {
    try await readers.read { db throws(StoreError) in
      try db.first(
        "SELECT \(Self.appAccountTokenWriteColumns) FROM app_account_token_writes WHERE \(Self.appAccountTokenWriteKey)",
        [.text(appId), .text(environment.rawValue), .text(originalTransactionId)], Self.appAccountTokenWrite)
    }
  }

  /// Deletes the writes naming `userId` (erasure), in the current transaction.
  static func eraseAppAccountTokenWrites(_ db: SQLiteConnection, appId: String, userId: String) throws(StoreError) {
    try db.run(
      "DELETE FROM app_account_token_writes WHERE app_id = ? AND user_id = ?", [.text(appId), .text(userId)])
  }
}
