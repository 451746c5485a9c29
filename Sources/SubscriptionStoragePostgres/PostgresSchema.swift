// Versioned schema migrations, applied in order at start. Never edit a released migration: add one.
import SubscriptionStorage

/// One schema step.
struct PostgresMigration {
  /// The schema version this migration produces.
  let version: Int
  /// What it does, recorded in `schema_version`.
  let description: String
  /// The statements.
  let sql: String
}

/// The PostgreSQL schema, as the list of migrations from an empty database.
///
/// It mirrors the SQLite layout (see `SubscriptionStorageSQLite`'s `Schema`): a `users` table maps
/// (app, environment, user id) to a `user_key`, one user's transactions are one index range, payloads
/// are the shared compact binary form (`PayloadCodec`) in `bytea`. Ids are `COLLATE "C"` so paging
/// order is byte order, the same in every store and independent of the cluster's locale.
enum PostgresSchema {
  /// The advisory lock key that serializes migrations of instances starting at the same time.
  static let migrationLock: Int64 = 0x5375_6273_7461_7475  // "Substatu"
  /// The transaction-level advisory lock under which event sequences are taken (see migration 7).
  static let eventLogLock: Int64 = 0x5375_6245_7665_6E74  // "SubEvent"

  static let migrations: [PostgresMigration] = [
    PostgresMigration(
      version: 1, description: "tenants, apps, secrets, products, keys, users, transactions, audit",
      sql: """
        CREATE TABLE tenants(
          tenant_id TEXT COLLATE "C" PRIMARY KEY,
          name TEXT NOT NULL,
          disabled BOOLEAN NOT NULL DEFAULT false,
          created_ms BIGINT NOT NULL
        );

        CREATE TABLE apps(
          app_id TEXT COLLATE "C" PRIMARY KEY,
          tenant_id TEXT COLLATE "C" NOT NULL REFERENCES tenants(tenant_id),
          bundle_id TEXT COLLATE "C" NOT NULL,
          apple_app_id BIGINT,
          display_name TEXT NOT NULL,
          policy BYTEA NOT NULL,
          created_ms BIGINT NOT NULL,
          UNIQUE(tenant_id, bundle_id)
        );
        CREATE INDEX apps_by_tenant ON apps(tenant_id, app_id);

        CREATE TABLE shared_secrets(
          app_id TEXT COLLATE "C" PRIMARY KEY REFERENCES apps(app_id),
          current_key_id TEXT NOT NULL,
          current_box BYTEA NOT NULL,
          current_fingerprint TEXT NOT NULL,
          current_set_ms BIGINT NOT NULL,
          previous_key_id TEXT,
          previous_box BYTEA,
          previous_fingerprint TEXT,
          previous_set_ms BIGINT,
          previous_valid_until_ms BIGINT
        );

        CREATE TABLE products(
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          product_id TEXT COLLATE "C" NOT NULL,
          payload BYTEA NOT NULL,
          PRIMARY KEY(app_id, product_id)
        );

        CREATE TABLE api_keys(
          key_id TEXT COLLATE "C" PRIMARY KEY,
          tenant_id TEXT COLLATE "C" REFERENCES tenants(tenant_id),
          role TEXT NOT NULL,
          app_ids BYTEA NOT NULL,
          description TEXT NOT NULL,
          key_hash BYTEA NOT NULL UNIQUE,
          display_prefix TEXT NOT NULL,
          created_ms BIGINT NOT NULL,
          last_used_ms BIGINT,
          revoked_ms BIGINT
        );
        CREATE INDEX api_keys_by_tenant ON api_keys(tenant_id, key_id);

        CREATE TABLE users(
          user_key BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          environment TEXT COLLATE "C" NOT NULL,
          user_id TEXT COLLATE "C" NOT NULL,
          UNIQUE(app_id, environment, user_id)
        );

        CREATE TABLE transactions(
          user_key BIGINT NOT NULL REFERENCES users(user_key),
          transaction_id TEXT COLLATE "C" NOT NULL,
          original_transaction_id TEXT COLLATE "C" NOT NULL,
          purchase_ms BIGINT NOT NULL,
          signed_ms BIGINT,
          payload BYTEA NOT NULL,
          PRIMARY KEY(user_key, transaction_id)
        );
        CREATE INDEX transactions_by_original ON transactions(original_transaction_id, user_key);
        CREATE INDEX transactions_by_purchase ON transactions(user_key, purchase_ms, transaction_id);

        CREATE TABLE renewal_infos(
          user_key BIGINT NOT NULL REFERENCES users(user_key),
          original_transaction_id TEXT COLLATE "C" NOT NULL,
          signed_ms BIGINT,
          payload BYTEA NOT NULL,
          PRIMARY KEY(user_key, original_transaction_id)
        );

        CREATE TABLE notifications(
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          notification_id TEXT COLLATE "C" NOT NULL,
          received_ms BIGINT NOT NULL,
          PRIMARY KEY(app_id, notification_id)
        );
        CREATE INDEX notifications_by_received ON notifications(received_ms);

        CREATE TABLE audit_log(
          sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          tenant_id TEXT COLLATE "C",
          at_ms BIGINT NOT NULL,
          actor_key_id TEXT NOT NULL,
          action TEXT NOT NULL,
          resource TEXT NOT NULL,
          details TEXT NOT NULL
        );
        CREATE INDEX audit_by_tenant ON audit_log(tenant_id, sequence);
        """),
    PostgresMigration(
      version: 2, description: "stored receipts for background refresh, indexed by next due time",
      sql: """
        CREATE TABLE receipts(
          user_key BIGINT PRIMARY KEY REFERENCES users(user_key),
          receipt_data TEXT NOT NULL,
          last_verified_ms BIGINT,
          next_due_ms BIGINT,
          failure_count INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX receipts_by_due ON receipts(next_due_ms) WHERE next_due_ms IS NOT NULL;
        """),
    PostgresMigration(
      version: 3, description: "In-App Purchase keys, the private key sealed like shared secrets",
      sql: """
        CREATE TABLE in_app_purchase_keys(
          app_id TEXT COLLATE "C" PRIMARY KEY REFERENCES apps(app_id),
          key_id TEXT NOT NULL,
          issuer_id TEXT NOT NULL,
          public_key_pem TEXT NOT NULL,
          public_key_fingerprint TEXT NOT NULL,
          set_ms BIGINT NOT NULL,
          master_key_id TEXT NOT NULL,
          private_key_box BYTEA NOT NULL
        );
        """),
    PostgresMigration(
      version: 4, description: "App Store Server API sync state per user, reconciliation leases per app",
      sql: """
        CREATE TABLE history_syncs(
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          environment TEXT NOT NULL,
          user_id TEXT COLLATE "C" NOT NULL,
          transaction_id TEXT NOT NULL,
          revision TEXT,
          last_sync_ms BIGINT NOT NULL,
          PRIMARY KEY(app_id, environment, user_id)
        );

        CREATE TABLE reconciliations(
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          environment TEXT NOT NULL,
          reconciled_through_ms BIGINT,
          lease_owner TEXT,
          lease_until_ms BIGINT NOT NULL DEFAULT 0,
          PRIMARY KEY(app_id, environment)
        );
        """),
    // Rule 13: renewal-info removals by snapshots, with the snapshot's time; only writes read them.
    PostgresMigration(
      version: 5, description: "renewal-info removals by snapshots (rule 13)",
      sql: """
        CREATE TABLE renewal_info_removals(
          user_key BIGINT NOT NULL REFERENCES users(user_key),
          original_transaction_id TEXT COLLATE "C" NOT NULL,
          as_of_ms BIGINT,
          PRIMARY KEY(user_key, original_transaction_id)
        );
        """),
    // docs/architecture.md "Access model": named entitlement definitions per app (display name and
    // product ids in the JSON payload).
    PostgresMigration(
      version: 6, description: "named entitlement definitions per app",
      sql: """
        CREATE TABLE entitlements(
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          entitlement_id TEXT COLLATE "C" NOT NULL,
          payload BYTEA NOT NULL,
          PRIMARY KEY(app_id, entitlement_id)
        );
        """),
    // docs/architecture.md "Access model": purchase sharing (as SQLite's migration 8): the app's
    // flag that its policy ever left SHARE, each user's ownership gaps, and every transfer for the
    // event log.
    PostgresMigration(
      version: 7, description: "purchase sharing: ownership gaps and transfers",
      sql: """
        ALTER TABLE apps ADD COLUMN ownership_tracked BOOLEAN NOT NULL DEFAULT FALSE;
        CREATE TABLE ownership_gaps(
          user_key BIGINT NOT NULL REFERENCES users(user_key),
          original_transaction_id TEXT COLLATE "C" NOT NULL,
          from_ms BIGINT,
          until_ms BIGINT
        );
        CREATE INDEX ownership_gaps_by_user ON ownership_gaps(user_key, original_transaction_id);
        CREATE INDEX ownership_gaps_open ON ownership_gaps(original_transaction_id)
          WHERE until_ms IS NULL;
        CREATE TABLE ownership_transfers(
          app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
          environment TEXT COLLATE "C" NOT NULL,
          original_transaction_id TEXT COLLATE "C" NOT NULL,
          at_ms BIGINT NOT NULL,
          previous_user_id TEXT COLLATE "C" NOT NULL,
          new_user_id TEXT COLLATE "C" NOT NULL,
          PRIMARY KEY(app_id, environment, original_transaction_id, at_ms, previous_user_id)
        );
        """),
    // docs/architecture.md "Events": the durable event log, written in the same transaction as the
    // purchase data that caused the events. Sequences come from `event_sequence`, taken only under
    // the transaction-level advisory lock `PostgresSchema.eventLogLock` (held until commit), so
    // they increase in commit order across instances; `event_id` is UNIQUE (deduplication). One row
    // per user that events were derived for: through when its changes by time alone are logged, and
    // its next one, indexed by when it is due (the transition scheduler).
    PostgresMigration(
      version: 8, description: "the event log and each user's event schedule",
      sql: """
        CREATE SEQUENCE event_sequence AS BIGINT;
        CREATE TABLE events(
          sequence BIGINT PRIMARY KEY,
          event_id TEXT COLLATE "C" NOT NULL UNIQUE,
          app_id TEXT COLLATE "C" NOT NULL,
          user_key BIGINT NOT NULL REFERENCES users(user_key),
          environment TEXT NOT NULL,
          type TEXT NOT NULL,
          occurred_ms BIGINT NOT NULL,
          payload BYTEA NOT NULL
        );
        CREATE INDEX events_by_app ON events(app_id, sequence);
        CREATE INDEX events_by_user ON events(user_key, sequence);

        CREATE TABLE event_schedules(
          user_key BIGINT PRIMARY KEY REFERENCES users(user_key),
          logged_through_ms BIGINT NOT NULL,
          next_transition_ms BIGINT
        );
        CREATE INDEX event_schedules_by_due ON event_schedules(next_transition_ms)
          WHERE next_transition_ms IS NOT NULL;
        """),
    webhooksMigration,
    // docs/evaluation-cache.md "Other instances": the users each commit changed, for the other
    // instances' history caches. Sequences are taken under `eventLogLock` (visible in increasing
    // order, as the event log's); rows older than a few minutes are pruned, and the highest pruned
    // sequence is kept, so that a listener behind it knows it missed some. A row holds the user's
    // key only, not its ids (no foreign key: an erased user's key no longer names anyone).
    PostgresMigration(
      version: 10, description: "the change feed of users for the history caches",
      sql: """
        CREATE TABLE user_changes(
          sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          user_key BIGINT NOT NULL,
          changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        CREATE INDEX user_changes_by_time ON user_changes(changed_at);
        CREATE TABLE user_changes_pruned(
          only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
          through BIGINT NOT NULL
        );
        INSERT INTO user_changes_pruned(through) VALUES (0);
        """),
    // Per-user summaries (docs/evaluation-cache.md "Per-user summaries"): what answering a user needs until time
    // alone changes it, written with every write of the user's data (under the user's row lock);
    // `stamp` is drawn by each such write, and a read path's rewrite replaces the row only while
    // the stamp is the one it read. Users written before this version get theirs on first read.
    PostgresMigration(
      version: 11, description: "per-user summaries",
      sql: """
        CREATE TABLE user_summaries(
          user_key BIGINT PRIMARY KEY REFERENCES users(user_key) ON DELETE CASCADE,
          stamp BIGINT NOT NULL,
          summary BYTEA NOT NULL
        );
        """),
    webhookEnvironmentMigration,
    appAccountsMigration,
    PostgresMigration(
      version: 14, description: "app small business program",
      sql: "ALTER TABLE apps ADD COLUMN small_business_program BOOLEAN NOT NULL DEFAULT FALSE;"),
    keptNotificationsMigration,
    retentionRulesMigration,
    consumptionRequestsMigration,
    appAccountTokenWritesMigration,
    keptNotificationIndexesMigration,
  ]

  /// The newest schema version this build knows.
  static var latestVersion: Int { migrations.last?.version ?? 0 }

  /// Applies pending migrations, each in its own transaction under an advisory lock (so instances
  /// rolling out together migrate once), and returns the resulting version.
  /// - Throws: `StoreError.newerSchema` when the database was migrated by a newer substatus.
  static func migrate(_ db: PGConnection, now: Int64, through target: Int = latestVersion)
    throws(StoreError) -> Int
  {
    var version = 0
    while true {
      try db.execute("BEGIN")
      do throws(StoreError) {
        try db.query("SELECT pg_advisory_xact_lock($1)", [.int(migrationLock)])
        try db.execute(
          "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_ms BIGINT NOT NULL)"
        )
        version = Int(
          try db.first("SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_version")?.int(0) ?? 0)
        if version > latestVersion {
          throw StoreError(
            .newerSchema,
            "the database has schema version \(version), newer than version \(latestVersion) known to this substatus; upgrade substatus"
          )
        }
        guard let next = migrations.first(where: { $0.version > version && $0.version <= target })
        else {
          try db.execute("COMMIT")
          return version
        }
        try db.execute(next.sql)
        try db.run(
          "INSERT INTO schema_version(version, description, applied_ms) VALUES($1, $2, $3)",
          [.int(Int64(next.version)), .text(next.description), .int(now)])
        try db.execute("COMMIT")
      } catch {
        if db.inTransaction { try? db.execute("ROLLBACK") }
        throw error
      }
    }
  }
}
