// Versioned schema migrations, applied in order at start. Never edit a released migration: add one.
import SubscriptionStorage

/// One schema step.
struct Migration {
  /// The schema version this migration produces.
  let version: Int
  /// What it does, recorded in `schema_version`.
  let description: String
  /// The statements.
  let sql: String
}

/// The schema, as the list of migrations from an empty database.
///
/// Layout notes (every hot read is a primary-key or index range lookup, see `QueryPlanTests`):
/// - `users` maps (app, environment, user id) to a small integer `user_key`, so the per-transaction
///   rows and their indexes do not repeat the long ids.
/// - `transactions` is `WITHOUT ROWID` clustered on (user_key, transaction_id): one user's history is
///   one contiguous range; `transactions_by_original` routes notifications (original id -> users);
///   `transactions_by_purchase` pages the history in purchase order.
/// - `receipts` holds one receipt per user (keyed by `user_key`); the partial index `receipts_by_due`
///   covers only receipts with a due time, so the refresher's "what is due now" is an index range.
/// - `renewal_info_removals` remembers which renewal infos a snapshot removed, and when (rule 13);
///   only writes read it.
/// - `entitlements` holds the named entitlement definitions of each app's catalog.
/// - `api_keys.key_hash` is UNIQUE (an index lookup by hash); `notifications` is keyed by
///   (app, notification id), so "insert if new" is one primary-key probe.
enum Schema {
  static let migrations: [Migration] = [
    Migration(
      version: 1, description: "tenants, apps, secrets, products, keys, users, transactions, audit",
      sql: """
        CREATE TABLE tenants(
          tenant_id TEXT PRIMARY KEY,
          name TEXT NOT NULL,
          disabled INTEGER NOT NULL DEFAULT 0,
          created_ms INTEGER NOT NULL
        ) WITHOUT ROWID;

        CREATE TABLE apps(
          app_id TEXT PRIMARY KEY,
          tenant_id TEXT NOT NULL REFERENCES tenants(tenant_id),
          bundle_id TEXT NOT NULL,
          apple_app_id INTEGER,
          display_name TEXT NOT NULL,
          policy BLOB NOT NULL,
          created_ms INTEGER NOT NULL,
          UNIQUE(tenant_id, bundle_id)
        ) WITHOUT ROWID;
        CREATE INDEX apps_by_tenant ON apps(tenant_id, app_id);

        CREATE TABLE shared_secrets(
          app_id TEXT PRIMARY KEY REFERENCES apps(app_id),
          current_key_id TEXT NOT NULL,
          current_box BLOB NOT NULL,
          current_fingerprint TEXT NOT NULL,
          current_set_ms INTEGER NOT NULL,
          previous_key_id TEXT,
          previous_box BLOB,
          previous_fingerprint TEXT,
          previous_set_ms INTEGER,
          previous_valid_until_ms INTEGER
        ) WITHOUT ROWID;

        CREATE TABLE products(
          app_id TEXT NOT NULL REFERENCES apps(app_id),
          product_id TEXT NOT NULL,
          payload BLOB NOT NULL,
          PRIMARY KEY(app_id, product_id)
        ) WITHOUT ROWID;

        CREATE TABLE api_keys(
          key_id TEXT PRIMARY KEY,
          tenant_id TEXT REFERENCES tenants(tenant_id),
          role TEXT NOT NULL,
          app_ids TEXT NOT NULL,
          description TEXT NOT NULL,
          key_hash BLOB NOT NULL UNIQUE,
          display_prefix TEXT NOT NULL,
          created_ms INTEGER NOT NULL,
          last_used_ms INTEGER,
          revoked_ms INTEGER
        ) WITHOUT ROWID;
        CREATE INDEX api_keys_by_tenant ON api_keys(tenant_id, key_id);

        CREATE TABLE users(
          user_key INTEGER PRIMARY KEY,
          app_id TEXT NOT NULL,
          environment TEXT NOT NULL,
          user_id TEXT NOT NULL,
          UNIQUE(app_id, environment, user_id)
        );

        CREATE TABLE transactions(
          user_key INTEGER NOT NULL,
          transaction_id TEXT NOT NULL,
          original_transaction_id TEXT NOT NULL,
          purchase_ms INTEGER NOT NULL,
          signed_ms INTEGER,
          payload BLOB NOT NULL,
          PRIMARY KEY(user_key, transaction_id)
        ) WITHOUT ROWID;
        CREATE INDEX transactions_by_original ON transactions(original_transaction_id, user_key);
        CREATE INDEX transactions_by_purchase ON transactions(user_key, purchase_ms, transaction_id);

        CREATE TABLE renewal_infos(
          user_key INTEGER NOT NULL,
          original_transaction_id TEXT NOT NULL,
          signed_ms INTEGER,
          payload BLOB NOT NULL,
          PRIMARY KEY(user_key, original_transaction_id)
        ) WITHOUT ROWID;

        CREATE TABLE notifications(
          app_id TEXT NOT NULL,
          notification_id TEXT NOT NULL,
          received_ms INTEGER NOT NULL,
          PRIMARY KEY(app_id, notification_id)
        ) WITHOUT ROWID;

        CREATE TABLE audit_log(
          sequence INTEGER PRIMARY KEY AUTOINCREMENT,
          tenant_id TEXT,
          at_ms INTEGER NOT NULL,
          actor_key_id TEXT NOT NULL,
          action TEXT NOT NULL,
          resource TEXT NOT NULL,
          details TEXT NOT NULL
        );
        CREATE INDEX audit_by_tenant ON audit_log(tenant_id, sequence);
        """),
    Migration(
      version: 2, description: "index processed notifications by time, for pruning",
      sql: """
        CREATE INDEX notifications_by_received ON notifications(received_ms);
        """),
    Migration(
      version: 3, description: "stored receipts for background refresh, indexed by next due time",
      sql: """
        CREATE TABLE receipts(
          user_key INTEGER PRIMARY KEY REFERENCES users(user_key),
          receipt_data TEXT NOT NULL,
          last_verified_ms INTEGER,
          next_due_ms INTEGER,
          failure_count INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX receipts_by_due ON receipts(next_due_ms) WHERE next_due_ms IS NOT NULL;
        """),
    Migration(
      version: 4, description: "In-App Purchase keys, the private key sealed like shared secrets",
      sql: """
        CREATE TABLE in_app_purchase_keys(
          app_id TEXT PRIMARY KEY REFERENCES apps(app_id),
          key_id TEXT NOT NULL,
          issuer_id TEXT NOT NULL,
          public_key_pem TEXT NOT NULL,
          public_key_fingerprint TEXT NOT NULL,
          set_ms INTEGER NOT NULL,
          master_key_id TEXT NOT NULL,
          private_key_box BLOB NOT NULL
        );
        """),
    Migration(
      version: 5, description: "App Store Server API sync state per user, reconciliation leases per app",
      sql: """
        CREATE TABLE history_syncs(
          app_id TEXT NOT NULL REFERENCES apps(app_id),
          environment TEXT NOT NULL,
          user_id TEXT NOT NULL,
          transaction_id TEXT NOT NULL,
          revision TEXT,
          last_sync_ms INTEGER NOT NULL,
          PRIMARY KEY(app_id, environment, user_id)
        ) WITHOUT ROWID;

        CREATE TABLE reconciliations(
          app_id TEXT NOT NULL REFERENCES apps(app_id),
          environment TEXT NOT NULL,
          reconciled_through_ms INTEGER,
          lease_owner TEXT,
          lease_until_ms INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY(app_id, environment)
        ) WITHOUT ROWID;
        """),
    // Rule 13: a renewal-info snapshot's removals, remembered with the snapshot's time so that an
    // older renewal info arriving later does not come back. Never read by history reads. (Rule 14's
    // `asOfDate` lives in the payloads, format 2, which need no column.)
    Migration(
      version: 6, description: "renewal-info removals by snapshots (rule 13)",
      sql: """
        CREATE TABLE renewal_info_removals(
          user_key INTEGER NOT NULL,
          original_transaction_id TEXT NOT NULL,
          as_of_ms INTEGER,
          PRIMARY KEY(user_key, original_transaction_id)
        ) WITHOUT ROWID;
        """),
    // docs/architecture.md "Access model": named entitlements of an app's catalog, one row per
    // definition (its display name and product ids are the JSON payload; catalogs are small and
    // read whole).
    Migration(
      version: 7, description: "named entitlement definitions per app",
      sql: """
        CREATE TABLE entitlements(
          app_id TEXT NOT NULL REFERENCES apps(app_id),
          entitlement_id TEXT NOT NULL,
          payload BLOB NOT NULL,
          PRIMARY KEY(app_id, entitlement_id)
        ) WITHOUT ROWID;
        """),
    // docs/architecture.md "Access model": purchase sharing. An app's flag says its policy ever
    // left SHARE (only then are gaps read). A gap is an interval in which a user did not own an
    // original transaction their history holds (from NULL: never owned before; until NULL: still
    // lost); a transfer is one change of owner, for the event log. Rows exist only for apps that
    // left SHARE.
    Migration(
      version: 8, description: "purchase sharing: ownership gaps and transfers",
      sql: """
        ALTER TABLE apps ADD COLUMN ownership_tracked INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE ownership_gaps(
          user_key INTEGER NOT NULL,
          original_transaction_id TEXT NOT NULL,
          from_ms INTEGER,
          until_ms INTEGER
        );
        CREATE INDEX ownership_gaps_by_user ON ownership_gaps(user_key, original_transaction_id);
        CREATE INDEX ownership_gaps_open ON ownership_gaps(original_transaction_id)
          WHERE until_ms IS NULL;
        CREATE TABLE ownership_transfers(
          app_id TEXT NOT NULL,
          environment TEXT NOT NULL,
          original_transaction_id TEXT NOT NULL,
          at_ms INTEGER NOT NULL,
          previous_user_id TEXT NOT NULL,
          new_user_id TEXT NOT NULL,
          PRIMARY KEY(app_id, environment, original_transaction_id, at_ms, previous_user_id)
        ) WITHOUT ROWID;
        """),
    // docs/architecture.md "Events": the durable event log, written in the same commit as the
    // purchase data that caused the events. `sequence` is AUTOINCREMENT so a number is never
    // reused, even after erasure deleted the newest events; `event_id` is UNIQUE (deduplication;
    // per user since version 12). The columns beside the payload (the whole event) index and
    // filter: per app and per user in log order. One row per user that events were derived for:
    // through when its changes by time alone are logged, and its next one, indexed by when it is
    // due (the transition scheduler).
    Migration(
      version: 9, description: "the event log and each user's event schedule",
      sql: """
        CREATE TABLE events(
          sequence INTEGER PRIMARY KEY AUTOINCREMENT,
          event_id TEXT NOT NULL UNIQUE,
          app_id TEXT NOT NULL,
          user_key INTEGER NOT NULL,
          environment TEXT NOT NULL,
          type TEXT NOT NULL,
          occurred_ms INTEGER NOT NULL,
          payload BLOB NOT NULL
        );
        CREATE INDEX events_by_app ON events(app_id, sequence);
        CREATE INDEX events_by_user ON events(user_key, sequence);

        CREATE TABLE event_schedules(
          user_key INTEGER PRIMARY KEY,
          logged_through_ms INTEGER NOT NULL,
          next_transition_ms INTEGER
        );
        CREATE INDEX event_schedules_by_due ON event_schedules(next_transition_ms)
          WHERE next_transition_ms IS NOT NULL;
        """),
    webhooksMigration,
    webhookClaimantsMigration,
    // An event's id is unique per user (ids are derived from the app, environment and user, and
    // only a user's own data re-derives them): the UNIQUE index over every event id in the log
    // took each append to a random place of an index as big as the log, about half an event's
    // insert cost at 300,000 events. The per-user index deduplicates, finds a user's events
    // (sorted by sequence on reading, a user has few) and erases them. SQLite drops a column's
    // UNIQUE only by rebuilding the table: the rows are copied with their sequences, the
    // AUTOINCREMENT high-water mark is carried over (erasure may have deleted the newest events),
    // and the webhook deliveries' erasure trigger is recreated.
    Migration(
      version: 12, description: "events deduplicated per user",
      sql: """
        CREATE TABLE events_v12(
          sequence INTEGER PRIMARY KEY AUTOINCREMENT,
          event_id TEXT NOT NULL,
          app_id TEXT NOT NULL,
          user_key INTEGER NOT NULL,
          environment TEXT NOT NULL,
          type TEXT NOT NULL,
          occurred_ms INTEGER NOT NULL,
          payload BLOB NOT NULL
        );
        INSERT INTO events_v12(sequence, event_id, app_id, user_key, environment, type, occurred_ms, payload)
          SELECT sequence, event_id, app_id, user_key, environment, type, occurred_ms, payload FROM events
          ORDER BY sequence;
        DELETE FROM sqlite_sequence WHERE name = 'events_v12';
        INSERT INTO sqlite_sequence(name, seq)
          SELECT 'events_v12', MAX(seq) FROM (
            SELECT seq FROM sqlite_sequence WHERE name = 'events'
            UNION ALL SELECT MAX(sequence) FROM events_v12)
          HAVING MAX(seq) IS NOT NULL;
        DROP TABLE events;
        ALTER TABLE events_v12 RENAME TO events;
        CREATE INDEX events_by_app ON events(app_id, sequence);
        CREATE UNIQUE INDEX events_by_user ON events(user_key, event_id);
        CREATE TRIGGER events_erase_deliveries AFTER DELETE ON events BEGIN
          DELETE FROM webhook_deliveries WHERE sequence = OLD.sequence;
        END;
        """),
    // A number that changes with every change of an app's products, in the same transaction (by
    // triggers, so no writer can forget it): the event derivation reuses the catalog it built while
    // the number stands, instead of reading and comparing every product's payload for each user
    // written (about 3 % of substatusd's ingest CPU).
    Migration(
      version: 13, description: "a version of each app's catalog",
      sql: """
        ALTER TABLE apps ADD COLUMN catalog_version INTEGER NOT NULL DEFAULT 0;
        CREATE TRIGGER products_version_insert AFTER INSERT ON products BEGIN
          UPDATE apps SET catalog_version = catalog_version + 1 WHERE app_id = NEW.app_id;
        END;
        CREATE TRIGGER products_version_update AFTER UPDATE ON products BEGIN
          UPDATE apps SET catalog_version = catalog_version + 1 WHERE app_id IN (OLD.app_id, NEW.app_id);
        END;
        CREATE TRIGGER products_version_delete AFTER DELETE ON products BEGIN
          UPDATE apps SET catalog_version = catalog_version + 1 WHERE app_id = OLD.app_id;
        END;
        """),
    // Per-user summaries (docs/evaluation-cache.md "Per-user summaries"): what answering a user needs until time
    // alone changes it, written with every write of the user's data; `stamp` is drawn by each such
    // write, and a read path's rewrite replaces the row only while the stamp is the one it read.
    // Users written before this version get theirs on first read.
    Migration(
      version: 14, description: "per-user summaries",
      sql: """
        CREATE TABLE user_summaries(
          user_key INTEGER PRIMARY KEY REFERENCES users(user_key) ON DELETE CASCADE,
          stamp INTEGER NOT NULL,
          summary BLOB NOT NULL
        );
        """),
    webhookEnvironmentMigration,
    webhookHeadsMigration,
    appAccountsMigration,
    smallBusinessProgramMigration,
    keptNotificationsMigration,
    retentionRulesMigration,
    consumptionRequestsMigration,
    appAccountTokenWritesMigration,
    keptNotificationIndexesMigration,
  ]

  /// An app's App Store Small Business Program membership (charts' proceeds); apps made before it
  /// are not members until set.
  static let smallBusinessProgramMigration = Migration(
    version: 18, description: "app small business program",
    sql: "ALTER TABLE apps ADD COLUMN small_business_program INTEGER NOT NULL DEFAULT 0;")

  /// The newest schema version this build knows.
  static var latestVersion: Int { migrations.last?.version ?? 0 }

  /// Migrations up to and including `version` (tests build older databases with it).
  static func migrations(through version: Int) -> [Migration] {
    migrations.filter { $0.version <= version }
  }

  /// Creates `schema_version` if needed, refuses a newer database, applies pending migrations (each in
  /// its own transaction) and returns the resulting version.
  /// - Throws: `StoreError.newerSchema` when the file was written by a newer substatus.
  static func migrate(
    _ db: SQLiteConnection, now: Int64, through target: Int = latestVersion
  ) throws(StoreError) -> Int {
    try db.execute(
      "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_ms INTEGER NOT NULL)"
    )
    let current =
      try db.first("SELECT COALESCE(MAX(version), 0) FROM schema_version") { $0.int(0) } ?? 0
    if current > Int64(latestVersion) {
      throw StoreError(
        .newerSchema,
        "database \(db.path) has schema version \(current), newer than version \(latestVersion) known to this substatus; upgrade substatus or use a backup"
      )
    }
    for migration in migrations(through: target) where migration.version > Int(current) {
      try db.execute("BEGIN IMMEDIATE")
      do {
        try db.execute(migration.sql)
        try db.run(
          "INSERT INTO schema_version(version, description, applied_ms) VALUES(?, ?, ?)",
          [.int(Int64(migration.version)), .text(migration.description), .int(now)])
        try db.execute("COMMIT")
      } catch {
        try? db.execute("ROLLBACK")
        throw error
      }
    }
    return max(Int(current), target)
  }
}
