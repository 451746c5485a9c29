import SubscriptionDomain
import SubscriptionStorage

extension PostgresSchema {
  /// docs/architecture.md "Events": webhooks and their deliveries, as in the SQLite store (see its
  /// `webhooksMigration`). Claims across instances lock the delivery rows `FOR UPDATE SKIP LOCKED`;
  /// fan-out moves a webhook's read position by compare and set in the transaction that inserts
  /// the deliveries; an event erased from the log takes its deliveries' copies with it (trigger).
  static let webhooksMigration = PostgresMigration(
    version: 9, description: "webhooks and their deliveries",
    sql: """
      CREATE TABLE webhooks(
        webhook_id TEXT COLLATE "C" PRIMARY KEY,
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(app_id),
        url TEXT NOT NULL,
        event_types TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        secret_key_id TEXT NOT NULL,
        secret_box BYTEA NOT NULL,
        secret_fingerprint TEXT NOT NULL,
        read_through BIGINT NOT NULL
      );
      CREATE INDEX webhooks_by_app ON webhooks(app_id, webhook_id);

      CREATE TABLE webhook_deliveries(
        delivery_key BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        webhook_id TEXT COLLATE "C" NOT NULL REFERENCES webhooks(webhook_id),
        sequence BIGINT NOT NULL,
        environment TEXT NOT NULL,
        user_id TEXT COLLATE "C" NOT NULL,
        event BYTEA NOT NULL,
        state TEXT NOT NULL,
        next_attempt_ms BIGINT,
        created_ms BIGINT NOT NULL,
        attempts BYTEA NOT NULL
      );
      CREATE INDEX webhook_deliveries_heads
        ON webhook_deliveries(webhook_id, environment, user_id, sequence, delivery_key)
        WHERE state = 'PENDING';
      CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_ms) WHERE state = 'PENDING';
      CREATE INDEX webhook_deliveries_listing ON webhook_deliveries(webhook_id, state, delivery_key);
      CREATE INDEX webhook_deliveries_by_sequence ON webhook_deliveries(sequence);
      CREATE FUNCTION erase_webhook_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM webhook_deliveries WHERE sequence = OLD.sequence;
        RETURN OLD;
      END
      $$;
      CREATE TRIGGER events_erase_deliveries AFTER DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION erase_webhook_deliveries();
      """)
}

extension PostgresSchema {
  /// A webhook's environment filter, as in the SQLite store: the environment's raw value, empty
  /// for both (every webhook made before it).
  static let webhookEnvironmentMigration = PostgresMigration(
    version: 12, description: "webhook environment filter",
    sql: "ALTER TABLE webhooks ADD COLUMN environment TEXT NOT NULL DEFAULT '';")
}

extension PostgresStore {
  private static let deliveryColumns =
    "delivery_key, webhook_id, sequence, event, state, next_attempt_ms, created_ms, attempts"

  private static func deliveries(_ rows: [PGRow]) throws(StoreError) -> [DeliveryRecord] {
    var out: [DeliveryRecord] = []
    for r in rows { out.append(try WebhookRowCoding.delivery(r)) }
    return out
  }

  /// See ``WebhookStore/createWebhook(_:signingSecret:limits:)``: the app's tenant row is locked
  /// (`FOR UPDATE`) before the counts, so creates in one tenant, on any instance, take turns and
  /// never pass a cap together.
  public func createWebhook(_ webhook: WebhookRecord, signingSecret: String, limits: WebhookLimits)
    async throws(StoreError)
  {
    try WebhookFanOut.validate(webhook, signingSecret: signingSecret)
    let sealed = try WebhookFanOut.seal(
      signingSecret, webhookId: webhook.webhookId, keyring: MasterKeyring.required(configuration.keyring))
    let position = try await lastEventSequence()
    try await pool.transaction { db throws(StoreError) in
      guard
        try db.first(
          "SELECT t.tenant_id FROM apps a JOIN tenants t ON t.tenant_id = a.tenant_id WHERE a.app_id = $1 FOR UPDATE OF t",
          [.text(webhook.appId)]) != nil
      else { throw StoreError.notFound("app", webhook.appId) }
      if let counts = try db.first(
        """
        SELECT (SELECT COUNT(*) FROM webhooks WHERE app_id = $1),
          (SELECT COUNT(*) FROM webhooks w JOIN apps a ON a.app_id = w.app_id
           WHERE a.tenant_id = (SELECT tenant_id FROM apps WHERE app_id = $1))
        """, [.text(webhook.appId)]),
        let refusal = limits.refusal(appCount: Int(counts.int(0)), tenantCount: Int(counts.int(1)))
      {
        throw refusal
      }
      let inserted = try db.run(
        """
        INSERT INTO webhooks(webhook_id, app_id, url, event_types, created_ms, secret_key_id, secret_box,
          secret_fingerprint, read_through, environment)
        VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (webhook_id) DO NOTHING
        """,
        [
          .text(webhook.webhookId), .text(webhook.appId), .text(webhook.url),
          .text(WebhookRowCoding.types(webhook.eventTypes)), .int(webhook.createdMs), .text(sealed.keyId),
          .bytes(sealed.box), .text(SecretFingerprint.of(signingSecret)), .int(position),
          .text(WebhookRowCoding.environment(webhook.environment)),
        ])
      if inserted == 0 { throw StoreError(.alreadyExists, "webhook \"\(webhook.webhookId)\" already exists") }
    }
  }

  /// See ``WebhookStore/webhooks(appId:)``.
  public func webhooks(appId: String) async throws(StoreError) -> [WebhookRecord] {
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.query(
        "SELECT \(WebhookRowCoding.webhookColumns) FROM webhooks WHERE app_id = $1 ORDER BY webhook_id", [.text(appId)]
      ).map { WebhookRowCoding.webhook($0) }
    }
  }

  /// See ``WebhookStore/webhook(id:)``.
  public func webhook(id webhookId: String) async throws(StoreError) -> WebhookRecord {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        "SELECT \(WebhookRowCoding.webhookColumns), (SELECT tenant_id FROM apps a WHERE a.app_id = webhooks.app_id) FROM webhooks WHERE webhook_id = $1",
        [.text(webhookId)])
    }
    guard let row else { throw StoreError.notFound("webhook", webhookId) }
    var record = WebhookRowCoding.webhook(row)
    record.tenantId = row.text(7)
    return record
  }

  /// See ``WebhookStore/deleteWebhook(appId:webhookId:)``.
  public func deleteWebhook(appId: String, webhookId: String) async throws(StoreError) {
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      guard
        try db.first(
          "SELECT 1 FROM webhooks WHERE webhook_id = $1 AND app_id = $2 FOR UPDATE", [.text(webhookId), .text(appId)])
          != nil
      else { throw StoreError.notFound("webhook", webhookId) }
      _ = try db.run("DELETE FROM webhook_deliveries WHERE webhook_id = $1", [.text(webhookId)])
      _ = try db.run("DELETE FROM webhooks WHERE webhook_id = $1", [.text(webhookId)])
    }
  }

  /// See ``WebhookStore/webhookSigningSecret(webhookId:)``.
  public func webhookSigningSecret(webhookId: String) async throws(StoreError) -> String {
    let row = try await pool.run { db throws(StoreError) in
      try db.first("SELECT secret_key_id, secret_box FROM webhooks WHERE webhook_id = $1", [.text(webhookId)])
    }
    guard let row else { throw StoreError.notFound("webhook", webhookId) }
    return try WebhookFanOut.open(
      SealedSecret(keyId: row.text(0), box: row.bytes(1)), webhookId: webhookId,
      keyring: MasterKeyring.required(configuration.keyring))
  }

  private static func insertDeliveries(
    _ db: PGConnection, webhookId: String, events: [LoggedEvent], atMs: Int64, encoded: [[UInt8]]
  ) throws(StoreError) {
    let none = Array("[]".utf8)
    for (event, bytes) in zip(events, encoded) {
      _ = try db.run(
        """
        INSERT INTO webhook_deliveries(webhook_id, sequence, environment, user_id, event, state,
          next_attempt_ms, created_ms, attempts)
        VALUES($1, $2, $3, $4, $5, 'PENDING', $6, $6, $7)
        """,
        [
          .text(webhookId), .int(event.sequence), .text(event.event.environment.rawValue),
          .text(event.event.userId), .bytes(bytes), .int(atMs), .bytes(none),
        ])
    }
  }

  /// See ``WebhookStore/enqueueDeliveries(atMs:limit:)``: per webhook, the log read through
  /// ``EventLogStore``, then the deliveries and the new position in one transaction that moves the
  /// position only from the value read (another instance that got there first wins).
  public func enqueueDeliveries(atMs: Int64, limit: Int) async throws(StoreError) -> Int {
    let last = try await lastEventSequence()
    let hooks = try await pool.run { db throws(StoreError) in
      try db.query(
        "SELECT \(WebhookRowCoding.webhookColumns), read_through FROM webhooks WHERE read_through < $1 ORDER BY webhook_id",
        [.int(last)]
      ).map { (webhook: WebhookRowCoding.webhook($0), position: $0.int(7)) }
    }
    return try await WebhookFanOut.enqueue(hooks, lastSequence: last, limit: limit, log: self) {
      (webhook, position, batch) throws(StoreError) -> Int in
      let frozen = batch.events.map { WebhookRowCoding.encode($0.event) }
      return try await pool.transaction { db throws(StoreError) -> Int in
        let moved = try db.run(
          "UPDATE webhooks SET read_through = $1 WHERE webhook_id = $2 AND read_through = $3",
          [.int(batch.readThrough), .text(webhook.webhookId), .int(position)])
        guard moved == 1 else { return 0 }
        try Self.insertDeliveries(db, webhookId: webhook.webhookId, events: batch.events, atMs: atMs, encoded: frozen)
        return batch.events.count
      }
    }
  }

  /// See ``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:perWebhookLimit:excludingWebhookIds:claimant:shares:)``
  /// (tenants in turn: each head ranked within its webhook, then within its tenant, ordered by
  /// that rank and log order, as ``FairClaim`` does; the claimant is not kept: claims are released by their lease only, see
  /// ``releaseClaims(notMadeBy:atMs:)``).
  /// One statement: the due heads are chosen, locked `FOR UPDATE SKIP LOCKED` (rows another
  /// instance is claiming are skipped) and leased; a row another claim committed first fails the
  /// re-checked due condition.
  public func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int,
    excludingWebhookIds: Set<String>, claimant: String, shares: DeliveryClaimShares
  ) async throws(StoreError) -> [DeliveryRecord] {
    try StoreValidation.validateLease(atMs: atMs, leaseUntilMs: leaseUntilMs)
    let n = Int64(min(max(limit, 1), 1000))
    let perTenant = Int64(min(shares.perTenantLimit, 1_000_000))
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        WITH heads AS (
          SELECT d.delivery_key, d.webhook_id, d.sequence, a.tenant_id FROM webhook_deliveries d
          JOIN webhooks h ON h.webhook_id = d.webhook_id JOIN apps a ON a.app_id = h.app_id
          WHERE d.state = 'PENDING' AND d.next_attempt_ms <= $1
            AND d.webhook_id <> ALL($2::text[]) AND a.tenant_id <> ALL($6::text[])
            AND NOT EXISTS (
              SELECT 1 FROM webhook_deliveries o
              WHERE o.state = 'PENDING' AND o.webhook_id = d.webhook_id
                AND o.environment = d.environment AND o.user_id = d.user_id
                AND (o.sequence, o.delivery_key) < (d.sequence, d.delivery_key))
        ), ranked AS (
          SELECT delivery_key, sequence, tenant_id,
            ROW_NUMBER() OVER (PARTITION BY webhook_id ORDER BY sequence, delivery_key) AS r
          FROM heads
        ), turns AS (
          SELECT delivery_key, sequence,
            ROW_NUMBER() OVER (PARTITION BY tenant_id ORDER BY sequence, delivery_key) AS t
          FROM ranked WHERE r <= $3
        ), picked AS (
          SELECT w.delivery_key FROM webhook_deliveries w
          WHERE w.delivery_key IN (
            SELECT delivery_key FROM turns WHERE t <= $7 ORDER BY t, sequence, delivery_key LIMIT $4)
          FOR UPDATE SKIP LOCKED
        )
        UPDATE webhook_deliveries w SET next_attempt_ms = $5 FROM picked p
        WHERE w.delivery_key = p.delivery_key AND w.state = 'PENDING' AND w.next_attempt_ms <= $1
        RETURNING w.delivery_key, w.webhook_id, w.sequence, w.event, w.state, w.next_attempt_ms,
          w.created_ms, w.attempts
        """,
        [
          .int(atMs), .textArray(excludingWebhookIds.sorted()), .int(Int64(max(perWebhookLimit, 1))), .int(n),
          .int(leaseUntilMs), .textArray(shares.excludingTenantIds.sorted()), .int(perTenant),
        ])
    }
    return WebhookRowCoding.inLogOrder(try Self.deliveries(rows))
  }

  /// See ``WebhookStore/releaseClaims(notMadeBy:atMs:)``: none. Instances share the database, and
  /// a claim of another claimant may be a live instance's POST; its lease ends it.
  public func releaseClaims(notMadeBy claimant: String, atMs: Int64) async throws(StoreError) -> Int { 0 }

  /// See ``WebhookStore/recordDeliveryAttempts(_:)``: the whole batch in one statement (one round
  /// trip, one commit): each row gets its attempt appended to the stored array in SQL (the rows
  /// this store writes are `[]` or `[{...},...]` with nothing after the bracket) and its new state;
  /// the keys it returns are the deliveries found.
  public func recordDeliveryAttempts(_ outcomes: [DeliveryOutcome]) async throws(StoreError) -> Set<String> {
    guard !outcomes.isEmpty else { return [] }
    let batch = WebhookRowCoding.outcomesJSON(outcomes)
    let found = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        UPDATE webhook_deliveries d SET
          attempts = CASE WHEN length(d.attempts) <= 2 THEN convert_to(o.attempt, 'UTF8')
            ELSE substring(d.attempts FROM 1 FOR length(d.attempts) - 1) || '\\x2c'::bytea
              || substring(convert_to(o.attempt, 'UTF8') FROM 2) END,
          state = o.state, next_attempt_ms = o.next
        FROM jsonb_to_recordset($1::jsonb) AS o(key BIGINT, attempt TEXT, state TEXT, next BIGINT)
        WHERE d.delivery_key = o.key
        RETURNING d.delivery_key
        """, [.text(batch)]
      ).map { $0.int(0) }
    }
    return WebhookRowCoding.unrecorded(outcomes, recorded: Set(found))
  }

  /// See ``WebhookStore/deliveries(appId:webhookId:failedOnly:page:)``.
  public func deliveries(appId: String, webhookId: String, failedOnly: Bool, page: PageRequest)
    async throws(StoreError) -> Page<DeliveryRecord>
  {
    let bound = try WebhookRowCoding.listingBound(page)
    let limit = page.limit
    let rows = try await pool.transaction { db throws(StoreError) -> [PGRow] in
      try requireApp(db, appId)
      guard
        try db.first("SELECT 1 FROM webhooks WHERE webhook_id = $1 AND app_id = $2", [.text(webhookId), .text(appId)])
          != nil
      else { throw StoreError.notFound("webhook", webhookId) }
      let stateFilter = failedOnly ? "AND state = 'FAILED'" : ""
      return try db.query(
        """
        SELECT \(Self.deliveryColumns) FROM webhook_deliveries
        WHERE webhook_id = $1 \(stateFilter) AND delivery_key < $2 ORDER BY delivery_key DESC LIMIT $3
        """, [.text(webhookId), .int(bound), .int(Int64(limit + 1))])
    }
    return WebhookRowCoding.listingPage(try Self.deliveries(rows), limit: limit)
  }

  /// See ``WebhookStore/replay(appId:webhookId:afterSequence:atMs:)``.
  public func replay(appId: String, webhookId: String?, afterSequence: Int64, atMs: Int64)
    async throws(StoreError) -> Int
  {
    try await WebhookFanOut.replay(
      try await webhooks(appId: appId), webhookId: webhookId, afterSequence: afterSequence, log: self
    ) { (webhook, events) throws(StoreError) -> Int in
      let frozen = events.map { WebhookRowCoding.encode($0.event) }
      return try await pool.transaction { db throws(StoreError) -> Int in
        guard
          try db.first("SELECT 1 FROM webhooks WHERE webhook_id = $1 FOR SHARE", [.text(webhook.webhookId)]) != nil
        else { return 0 }
        try Self.insertDeliveries(db, webhookId: webhook.webhookId, events: events, atMs: atMs, encoded: frozen)
        return events.count
      }
    }
  }

  /// Re-seals the webhook signing secrets not sealed with the keyring's current key (part of
  /// ``resealSecrets()``).
  static func resealWebhookSecrets(_ db: PGConnection, _ keyring: MasterKeyring) throws(StoreError) -> Int {
    let rows = try db.query(
      "SELECT webhook_id, secret_key_id, secret_box FROM webhooks WHERE secret_key_id <> $1 FOR UPDATE",
      [.text(keyring.current.id)])
    for row in rows {
      let id = row.text(0)
      let sealed = try WebhookFanOut.reseal(SealedSecret(keyId: row.text(1), box: row.bytes(2)), webhookId: id, keyring: keyring)
      _ = try db.run(
        "UPDATE webhooks SET secret_key_id = $1, secret_box = $2 WHERE webhook_id = $3",
        [.text(sealed.keyId), .bytes(sealed.box), .text(id)])
    }
    return rows.count
  }
}
