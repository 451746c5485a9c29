import Foundation
import SubscriptionDomain
import SubscriptionStorage

extension Schema {
  /// docs/architecture.md "Events": webhooks (the signing secret sealed like shared secrets, the
  /// read position in the event log) and their deliveries. A delivery keeps a copy of its event
  /// (the log's rows are not its to read), its user (per-user order) and its attempts (a JSON
  /// array, rewritten per attempt; a delivery has a few dozen at most over 3 days).
  /// - `webhook_deliveries_heads`: pending deliveries by (webhook, user, log order), so "is there an
  ///   older pending one of this user" is one index probe;
  /// - `webhook_deliveries_due`: pending deliveries by due time;
  /// - `webhook_deliveries_listing`: a webhook's deliveries newest first (`delivery_key` grows);
  /// - an event erased from the log (a user's erasure) takes its deliveries' copies with it
  ///   (`events_erase_deliveries`).
  static let webhooksMigration = Migration(
    version: 10, description: "webhooks and their deliveries",
    sql: """
      CREATE TABLE webhooks(
        webhook_id TEXT PRIMARY KEY,
        app_id TEXT NOT NULL REFERENCES apps(app_id),
        url TEXT NOT NULL,
        event_types TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        secret_key_id TEXT NOT NULL,
        secret_box BLOB NOT NULL,
        secret_fingerprint TEXT NOT NULL,
        read_through INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX webhooks_by_app ON webhooks(app_id, webhook_id);

      CREATE TABLE webhook_deliveries(
        delivery_key INTEGER PRIMARY KEY AUTOINCREMENT,
        webhook_id TEXT NOT NULL REFERENCES webhooks(webhook_id),
        sequence INTEGER NOT NULL,
        environment TEXT NOT NULL,
        user_id TEXT NOT NULL,
        event BLOB NOT NULL,
        state TEXT NOT NULL,
        next_attempt_ms INTEGER,
        created_ms INTEGER NOT NULL,
        attempts BLOB NOT NULL
      );
      CREATE INDEX webhook_deliveries_heads
        ON webhook_deliveries(webhook_id, environment, user_id, sequence, delivery_key)
        WHERE state = 'PENDING';
      CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_ms) WHERE state = 'PENDING';
      CREATE INDEX webhook_deliveries_listing ON webhook_deliveries(webhook_id, state, delivery_key);
      CREATE INDEX webhook_deliveries_by_sequence ON webhook_deliveries(sequence);
      CREATE TRIGGER events_erase_deliveries AFTER DELETE ON events BEGIN
        DELETE FROM webhook_deliveries WHERE sequence = OLD.sequence;
      END;
      """)
}

extension Schema {
  /// Who holds a claimed delivery: the claiming dispatcher run's name, cleared when its attempt is
  /// recorded, so a restarted substatusd releases what its killed predecessor held
  /// (``SQLiteStore/releaseClaims(notMadeBy:atMs:)``).
  static let webhookClaimantsMigration = Migration(
    version: 11, description: "webhook delivery claimants",
    sql: "ALTER TABLE webhook_deliveries ADD COLUMN claimant TEXT;")
}

extension Schema {
  /// A webhook's environment filter (`WebhookRecord.environment`): the environment's raw value,
  /// empty for both (every webhook made before it).
  static let webhookEnvironmentMigration = Migration(
    version: 15, description: "webhook environment filter",
    sql: "ALTER TABLE webhooks ADD COLUMN environment TEXT NOT NULL DEFAULT '';")
}

extension Schema {
  /// Delivery rows a claim reaches without passing others (docs/webhook-delivery.md "Heads"):
  /// - `head` marks the one pending delivery per webhook and user that may be sent (its oldest
  ///   when it became the head; deliveries added while one is pending wait behind it); recording
  ///   a head's last attempt makes the user's next pending delivery the head, in the same commit;
  /// - `webhook_deliveries_ready`: the heads by webhook and due time, so a claim is one index range
  ///   of due heads (leased heads and waiting retries are due later, outside it) and reads no other
  ///   row; it replaces `webhook_deliveries_due`;
  /// - the listing index loses its `state` column (each record moved its entry) and failed
  ///   deliveries get a partial index of their own;
  /// - new rows keep their event in the log only (an empty `event`: the log's `payload` of the same
  ///   `sequence`, which the erasure trigger keeps in step): about 7 rows per page became about 40.
  static let webhookHeadsMigration = Migration(
    version: 16, description: "webhook delivery heads",
    sql: """
      ALTER TABLE webhook_deliveries ADD COLUMN head INTEGER NOT NULL DEFAULT 0;
      UPDATE webhook_deliveries SET head = 1 WHERE state = 'PENDING' AND NOT EXISTS (
        SELECT 1 FROM webhook_deliveries o
        WHERE o.state = 'PENDING' AND o.webhook_id = webhook_deliveries.webhook_id
          AND o.environment = webhook_deliveries.environment AND o.user_id = webhook_deliveries.user_id
          AND (o.sequence < webhook_deliveries.sequence
            OR (o.sequence = webhook_deliveries.sequence AND o.delivery_key < webhook_deliveries.delivery_key)));
      CREATE INDEX webhook_deliveries_ready
        ON webhook_deliveries(webhook_id, next_attempt_ms, sequence, delivery_key)
        WHERE state = 'PENDING' AND head = 1;
      DROP INDEX webhook_deliveries_due;
      DROP INDEX webhook_deliveries_listing;
      CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries(webhook_id, delivery_key);
      CREATE INDEX webhook_deliveries_failed ON webhook_deliveries(webhook_id, delivery_key) WHERE state = 'FAILED';
      """)
}

/// The statements of the webhook dispatcher's hot loop, named so tests can check their plans.
enum WebhookQueries {
  /// The webhooks of app ?1 and of its tenant (the caps of ``WebhookLimits``): index ranges of
  /// `webhooks_by_app` and `apps_by_tenant`.
  static let counts = """
    SELECT (SELECT COUNT(*) FROM webhooks WHERE app_id = ?1),
      (SELECT COUNT(*) FROM webhooks w JOIN apps a ON a.app_id = w.app_id
       WHERE a.tenant_id = (SELECT tenant_id FROM apps WHERE app_id = ?1))
    """
  /// A delivery's columns as ``SQLiteStore`` reads them; the event is the row's own copy (rows
  /// written before schema version 16) or else the log's payload of its sequence.
  static let deliveryColumns = """
    delivery_key, webhook_id, sequence,
    CASE WHEN length(event) > 0 THEN event
      ELSE (SELECT e.payload FROM events e WHERE e.sequence = webhook_deliveries.sequence) END,
    state, next_attempt_ms, created_ms, attempts
    """
  /// One webhook's due heads, at most `?3`, earliest due first (then log order): ?1 the webhook,
  /// ?2 now. One range of `webhook_deliveries_ready`, which holds only heads and has every column
  /// the claim needs: the deliveries waiting behind a head, the heads in flight (leased, due
  /// later) and those waiting for a retry are not in the range, so a claim reads the heads it
  /// takes and nothing else.
  static let claimHeads = """
    SELECT delivery_key, sequence FROM webhook_deliveries INDEXED BY webhook_deliveries_ready
    WHERE webhook_id = ?1 AND state = 'PENDING' AND head = 1 AND next_attempt_ms <= ?2
    ORDER BY next_attempt_ms, sequence, delivery_key LIMIT ?3
    """
  /// A new pending delivery (?1 webhook, ?2 sequence, ?3 environment, ?4 user, ?5 now), its event
  /// left in the log; the head of its user unless the user already has a pending delivery to the
  /// webhook (one probe of `webhook_deliveries_heads`).
  /// A batch of new deliveries in one statement: ?1 is the webhook, ?2 the time, ?3
  /// ``WebhookRowCoding/newDeliveriesJSON(_:)`` (`[sequence, environment, user, first]` per event,
  /// in log order). Only a user's first delivery of the batch may be the head, and only when the
  /// user has nothing pending for the webhook before the statement (the probe reads no row of the
  /// batch: its later deliveries wait behind that first one).
  static let insertDeliveries = """
    INSERT INTO webhook_deliveries(webhook_id, sequence, environment, user_id, event, state,
      next_attempt_ms, created_ms, attempts, head)
    SELECT ?1, n.sequence, n.environment, n.user_id, X'', 'PENDING', ?2, ?2, CAST('[]' AS BLOB),
      n.first AND NOT EXISTS (
        SELECT 1 FROM webhook_deliveries p INDEXED BY webhook_deliveries_heads
        WHERE p.webhook_id = ?1 AND p.environment = n.environment AND p.user_id = n.user_id
          AND p.state = 'PENDING')
    FROM (
      SELECT key AS i, value ->> '$[0]' AS sequence, value ->> '$[1]' AS environment,
        value ->> '$[2]' AS user_id, value ->> '$[3]' AS first
      FROM json_each(?3)) AS n
    ORDER BY n.i
    """
  /// A batch of attempts in one statement: ?1 is ``WebhookRowCoding/outcomesJSON(_:)``; each row
  /// gets its attempt appended to the stored array (the rows this store writes are `[]` or
  /// `[{...},...]` with nothing after the bracket), its state and due time, no claimant, and
  /// stops being a head unless pending again. Returns the keys found.
  static let recordAttempts = """
    UPDATE webhook_deliveries SET
      attempts = CAST(CASE WHEN length(attempts) <= 2 THEN o.attempt
        ELSE substr(attempts, 1, length(attempts) - 1) || ',' || substr(o.attempt, 2) END AS BLOB),
      state = o.state, next_attempt_ms = o.next, claimant = NULL,
      head = CASE WHEN o.state = 'PENDING' THEN head ELSE 0 END
    FROM (
      SELECT value ->> '$.key' AS key, value ->> '$.attempt' AS attempt, value ->> '$.state' AS state,
        value ->> '$.next' AS next
      FROM json_each(?1)) AS o
    WHERE webhook_deliveries.delivery_key = o.key
    RETURNING delivery_key
    """
  /// After ``recordAttempts``: for each delivery of ?1 (a JSON array of keys) that is no longer
  /// pending, its user's oldest pending delivery to the webhook becomes the head (one probe of
  /// `webhook_deliveries_heads` each).
  static let promoteHeads = """
    UPDATE webhook_deliveries SET head = 1 WHERE delivery_key IN (
      SELECT (
        SELECT n.delivery_key FROM webhook_deliveries n INDEXED BY webhook_deliveries_heads
        WHERE n.webhook_id = f.webhook_id AND n.environment = f.environment AND n.user_id = f.user_id
          AND n.state = 'PENDING'
        ORDER BY n.sequence, n.delivery_key LIMIT 1)
      FROM webhook_deliveries f
      WHERE f.delivery_key IN (SELECT value FROM json_each(?1)) AND f.state <> 'PENDING')
    """
}

extension SQLiteStore {
  /// See ``WebhookStore/createWebhook(_:signingSecret:limits:)``: the counts and the insert in one
  /// write transaction of the single writer.
  public func createWebhook(_ webhook: WebhookRecord, signingSecret: String, limits: WebhookLimits)
    async throws(StoreError)
  {
    try WebhookFanOut.validate(webhook, signingSecret: signingSecret)
    let sealed = try WebhookFanOut.seal(
      signingSecret, webhookId: webhook.webhookId, keyring: MasterKeyring.required(configuration.keyring))
    // Events logged from now on are the webhook's (one committed while this runs may be too).
    let position = try await lastEventSequence()
    try await writer.write { db throws(StoreError) in
      try requireApp(db, webhook.appId)
      if try db.first("SELECT 1 FROM webhooks WHERE webhook_id = ?", [.text(webhook.webhookId)], { _ in true }) != nil {
        throw StoreError(.alreadyExists, "webhook \"\(webhook.webhookId)\" already exists")
      }
      let counts = try db.first(WebhookQueries.counts, [.text(webhook.appId)]) { (app: $0.int(0), tenant: $0.int(1)) }
      if let refusal = limits.refusal(appCount: Int(counts?.app ?? 0), tenantCount: Int(counts?.tenant ?? 0)) {
        throw refusal
      }
      try db.run(
        """
        INSERT INTO webhooks(webhook_id, app_id, url, event_types, created_ms, secret_key_id, secret_box,
          secret_fingerprint, read_through, environment)
        VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """,
        [
          .text(webhook.webhookId), .text(webhook.appId), .text(webhook.url),
          .text(WebhookRowCoding.types(webhook.eventTypes)), .int(webhook.createdMs), .text(sealed.keyId),
          .blob(sealed.box), .text(SecretFingerprint.of(signingSecret)), .int(position),
          .text(WebhookRowCoding.environment(webhook.environment)),
        ])
    }
  }

  /// See ``WebhookStore/webhooks(appId:)``.
  public func webhooks(appId: String) async throws(StoreError) -> [WebhookRecord] {
    try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.all(
        "SELECT \(WebhookRowCoding.webhookColumns) FROM webhooks WHERE app_id = ? ORDER BY webhook_id", [.text(appId)]
      ) { WebhookRowCoding.webhook($0) }
    }
  }

  /// See ``WebhookStore/webhook(id:)``.
  public func webhook(id webhookId: String) async throws(StoreError) -> WebhookRecord {
    let found = try await readers.read { db throws(StoreError) in
      try db.first(
        "SELECT \(WebhookRowCoding.webhookColumns), (SELECT tenant_id FROM apps a WHERE a.app_id = webhooks.app_id) FROM webhooks WHERE webhook_id = ?",
        [.text(webhookId)]
      ) {
        var record = WebhookRowCoding.webhook($0)
        record.tenantId = $0.text(7)
        return record
      }
    }
    guard let found else { throw StoreError.notFound("webhook", webhookId) }
    return found
  }

  /// See ``WebhookStore/deleteWebhook(appId:webhookId:)``.
  public func deleteWebhook(appId: String, webhookId: String) async throws(StoreError) {
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run("DELETE FROM webhook_deliveries WHERE webhook_id = ? AND EXISTS (SELECT 1 FROM webhooks WHERE webhook_id = ? AND app_id = ?)", [.text(webhookId), .text(webhookId), .text(appId)])
      try db.run("DELETE FROM webhooks WHERE webhook_id = ? AND app_id = ?", [.text(webhookId), .text(appId)])
      if db.changes == 0 { throw StoreError.notFound("webhook", webhookId) }
    }
  }

  /// See ``WebhookStore/webhookSigningSecret(webhookId:)``.
  public func webhookSigningSecret(webhookId: String) async throws(StoreError) -> String {
    let row = try await readers.read { db throws(StoreError) in
      try db.first("SELECT secret_key_id, secret_box FROM webhooks WHERE webhook_id = ?", [.text(webhookId)]) {
        SealedSecret(keyId: $0.text(0), box: $0.blob(1))
      }
    }
    guard let row else { throw StoreError.notFound("webhook", webhookId) }
    return try WebhookFanOut.open(row, webhookId: webhookId, keyring: MasterKeyring.required(configuration.keyring))
  }

  /// Inserts pending deliveries of `events` to one webhook (their events stay in the log).
  private static func insertDeliveries(
    _ db: SQLiteConnection, webhookId: String, events: [LoggedEvent], atMs: Int64
  ) throws(StoreError) {
    guard !events.isEmpty else { return }
    try db.run(
      WebhookQueries.insertDeliveries,
      [.text(webhookId), .int(atMs), .text(WebhookRowCoding.newDeliveriesJSON(events))])
  }

  /// See ``WebhookStore/enqueueDeliveries(atMs:limit:)``: per webhook, the log read through
  /// ``EventLogStore``, then the deliveries and the new position in one write that checks the
  /// position did not move meanwhile.
  public func enqueueDeliveries(atMs: Int64, limit: Int) async throws(StoreError) -> Int {
    let last = try await lastEventSequence()
    let hooks = try await readers.read { db throws(StoreError) in
      try db.all("SELECT \(WebhookRowCoding.webhookColumns), read_through FROM webhooks ORDER BY webhook_id") {
        (webhook: WebhookRowCoding.webhook($0), position: $0.int(7))
      }
    }
    return try await WebhookFanOut.enqueue(hooks, lastSequence: last, limit: limit, log: self) {
      (webhook, position, batch) throws(StoreError) -> Int in
      try await writer.write { db throws(StoreError) -> Int in
        try db.run(
          "UPDATE webhooks SET read_through = ? WHERE webhook_id = ? AND read_through = ?",
          [.int(batch.readThrough), .text(webhook.webhookId), .int(position)])
        guard db.changes == 1 else { return 0 }
        try Self.insertDeliveries(db, webhookId: webhook.webhookId, events: batch.events, atMs: atMs)
        return batch.events.count
      }
    }
  }

  /// See ``WebhookStore/claimDueDeliveries(atMs:limit:leaseUntilMs:perWebhookLimit:excludingWebhookIds:claimant:shares:)``:
  /// the due read and the lease in one write transaction of the single writer; tenants in turn
  /// (``FairClaim``).
  public func claimDueDeliveries(
    atMs: Int64, limit: Int, leaseUntilMs: Int64, perWebhookLimit: Int,
    excludingWebhookIds: Set<String>, claimant: String, shares: DeliveryClaimShares
  ) async throws(StoreError) -> [DeliveryRecord] {
    try StoreValidation.validateLease(atMs: atMs, leaseUntilMs: leaseUntilMs)
    let n = min(max(limit, 1), 1000)
    let perWebhook = Int64(min(max(perWebhookLimit, 1), n))
    // Not fsynced: a claim lost to a power failure only lets its deliveries be claimed again.
    let claimed = try await writer.write(durable: false) { db throws(StoreError) in
      // Each webhook's first due heads, then `n` of them all, tenants in turn.
      var heads: [FairClaim.Candidate] = []
      let hooks = try db.all(
        "SELECT w.webhook_id, a.tenant_id FROM webhooks w JOIN apps a ON a.app_id = w.app_id ORDER BY w.webhook_id", []
      ) { (webhookId: $0.text(0), tenantId: $0.text(1)) }
      for hook in hooks
      where !excludingWebhookIds.contains(hook.webhookId) && !shares.excludingTenantIds.contains(hook.tenantId) {
        heads += try db.all(WebhookQueries.claimHeads, [.text(hook.webhookId), .int(atMs), .int(perWebhook)]) {
          FairClaim.Candidate(tenantId: hook.tenantId, webhookId: hook.webhookId, sequence: $0.int(1), key: $0.int(0))
        }
      }
      guard !heads.isEmpty else { return [DeliveryRecord]() }
      let keys = FairClaim.pick(heads, limit: n, perWebhook: Int(perWebhook), perTenant: shares.perTenantLimit)
        .map { String($0.key) }
      // One statement leases them all and returns their rows.
      return try db.all(
        """
        UPDATE webhook_deliveries SET next_attempt_ms = ?, claimant = ?
        WHERE delivery_key IN (SELECT value FROM json_each(?))
        RETURNING \(WebhookQueries.deliveryColumns)
        """, [.int(leaseUntilMs), .text(claimant), .text("[" + keys.joined(separator: ",") + "]")]
      ) { r throws(StoreError) in try WebhookRowCoding.delivery(r) }
    }
    return WebhookRowCoding.inLogOrder(claimed)
  }

  /// See ``WebhookStore/releaseClaims(notMadeBy:atMs:)``: substatusd serves a data directory alone,
  /// so a claim of another run is its killed predecessor's. Claimed deliveries are heads, pending
  /// with a due time in the future (the lease): found in `webhook_deliveries_ready`.
  public func releaseClaims(notMadeBy claimant: String, atMs: Int64) async throws(StoreError) -> Int {
    try await writer.write { db throws(StoreError) -> Int in
      try db.run(
        """
        UPDATE webhook_deliveries SET next_attempt_ms = ?1, claimant = NULL
        WHERE state = 'PENDING' AND head = 1 AND next_attempt_ms > ?1 AND claimant IS NOT NULL AND claimant <> ?2
        """, [.int(atMs), .text(claimant)])
      return db.changes
    }
  }

  /// See ``WebhookStore/recordDeliveryAttempts(_:)``: one write transaction of the single writer,
  /// two statements for the whole batch (``WebhookQueries/recordAttempts``, then
  /// ``WebhookQueries/promoteHeads`` for the deliveries that ended), committed without an fsync
  /// (see ``SQLiteWriter/write(durable:_:)``: an attempt record lost to a power failure means the
  /// delivery is sent again). A batch naming one delivery twice (never the dispatcher's: it holds
  /// a delivery once) is recorded one outcome at a time, in order, so each attempt is kept.
  public func recordDeliveryAttempts(_ outcomes: [DeliveryOutcome]) async throws(StoreError) -> Set<String> {
    guard !outcomes.isEmpty else { return [] }
    var keys = Set<Int64>()
    let repeated = outcomes.contains { outcome in
      WebhookRowCoding.deliveryKey(outcome.deliveryId).map { !keys.insert($0).inserted } ?? false
    }
    let batches = repeated ? outcomes.map { [$0] } : [outcomes]
    return try await writer.write(durable: false) { db throws(StoreError) -> Set<String> in
      var found = Set<Int64>()
      for batch in batches {
        let rows = try db.all(WebhookQueries.recordAttempts, [.text(WebhookRowCoding.outcomesJSON(batch))]) { $0.int(0) }
        guard !rows.isEmpty else { continue }
        found.formUnion(rows)
        try db.run(WebhookQueries.promoteHeads, [.text("[" + rows.map(String.init).joined(separator: ",") + "]")])
      }
      return WebhookRowCoding.unrecorded(outcomes, recorded: found)
    }
  }

  /// See ``WebhookStore/deliveries(appId:webhookId:failedOnly:page:)``.
  public func deliveries(appId: String, webhookId: String, failedOnly: Bool, page: PageRequest)
    async throws(StoreError) -> Page<DeliveryRecord>
  {
    let bound = try WebhookRowCoding.listingBound(page)
    let limit = page.limit
    let rows = try await readers.read { db throws(StoreError) -> [DeliveryRecord] in
      try requireApp(db, appId)
      guard try db.first(
        "SELECT 1 FROM webhooks WHERE webhook_id = ? AND app_id = ?", [.text(webhookId), .text(appId)], { _ in true }) != nil
      else { throw StoreError.notFound("webhook", webhookId) }
      let stateFilter = failedOnly ? "AND state = 'FAILED'" : ""
      return try db.all(
        """
        SELECT \(WebhookQueries.deliveryColumns) FROM webhook_deliveries
        WHERE webhook_id = ? \(stateFilter) AND delivery_key < ? ORDER BY delivery_key DESC LIMIT ?
        """, [.text(webhookId), .int(bound), .int(Int64(limit + 1))]
      ) { r throws(StoreError) in try WebhookRowCoding.delivery(r) }
    }
    return WebhookRowCoding.listingPage(rows, limit: limit)
  }

  /// See ``WebhookStore/replay(appId:webhookId:afterSequence:atMs:)``.
  public func replay(appId: String, webhookId: String?, afterSequence: Int64, atMs: Int64)
    async throws(StoreError) -> Int
  {
    try await WebhookFanOut.replay(
      try await webhooks(appId: appId), webhookId: webhookId, afterSequence: afterSequence, log: self
    ) { (webhook, events) throws(StoreError) -> Int in
      try await writer.write { db throws(StoreError) -> Int in
        // A webhook deleted meanwhile gets nothing.
        guard try db.first("SELECT 1 FROM webhooks WHERE webhook_id = ?", [.text(webhook.webhookId)], { _ in true }) != nil
        else { return 0 }
        try Self.insertDeliveries(db, webhookId: webhook.webhookId, events: events, atMs: atMs)
        return events.count
      }
    }
  }

  /// Re-seals the webhook signing secrets not sealed with the keyring's current key (part of
  /// ``resealSecrets()``).
  static func resealWebhookSecrets(_ db: SQLiteConnection, _ keyring: MasterKeyring) throws(StoreError) -> Int {
    let rows = try db.all(
      "SELECT webhook_id, secret_key_id, secret_box FROM webhooks WHERE secret_key_id <> ?", [.text(keyring.current.id)]
    ) { (id: $0.text(0), sealed: SealedSecret(keyId: $0.text(1), box: $0.blob(2))) }
    for row in rows {
      let sealed = try WebhookFanOut.reseal(row.sealed, webhookId: row.id, keyring: keyring)
      try db.run(
        "UPDATE webhooks SET secret_key_id = ?, secret_box = ? WHERE webhook_id = ?",
        [.text(sealed.keyId), .blob(sealed.box), .text(row.id)])
    }
    return rows.count
  }
}
