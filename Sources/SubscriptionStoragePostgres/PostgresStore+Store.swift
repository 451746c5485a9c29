import Foundation
import SubscriptionDomain
import SubscriptionStorage

/// A page from up to `limit + 1` rows; the extra one only says "there is more".
private func makePage<T>(_ rows: [T], limit: Int, cursor: (T) -> String) -> Page<T> {
  if rows.count > limit {
    let items = Array(rows.prefix(limit))
    return Page(items: items, nextCursor: items.last.map(cursor))
  }
  return Page(items: rows, nextCursor: nil)
}

private func exists(_ db: PGConnection, _ sql: String, _ values: [PGValue]) throws(StoreError)
  -> Bool
{
  try db.first(sql, values) != nil
}

func requireApp(_ db: PGConnection, _ appId: String) throws(StoreError) {
  guard try exists(db, "SELECT 1 FROM apps WHERE app_id = $1", [.text(appId)]) else {
    throw StoreError.notFound("app", appId)
  }
}

/// The statements, named so they are prepared once per connection.
enum PostgresQueries {
  static let tenantColumns = "SELECT tenant_id, name, disabled, created_ms FROM tenants"
  static let appColumns = """
    SELECT a.app_id, a.tenant_id, a.bundle_id, a.apple_app_id, a.display_name, a.policy, a.created_ms, \
    s.current_fingerprint, k.key_id, k.issuer_id, k.public_key_fingerprint, k.public_key_pem, k.set_ms, \
    a.ownership_tracked, a.small_business_program FROM apps a LEFT JOIN shared_secrets s ON s.app_id = a.app_id \
    LEFT JOIN in_app_purchase_keys k ON k.app_id = a.app_id
    """
  static let keyColumns = """
    SELECT key_id, tenant_id, role, app_ids, description, key_hash, display_prefix, created_ms, \
    last_used_ms, revoked_ms FROM api_keys
    """
  static let userKey =
    "SELECT user_key FROM users WHERE app_id = $1 AND environment = $2 AND user_id = $3"
  static let insertUser = """
    INSERT INTO users(app_id, environment, user_id) VALUES($1, $2, $3)
    ON CONFLICT (app_id, environment, user_id) DO NOTHING RETURNING user_key
    """
  static let upsertTransaction = """
    INSERT INTO transactions(user_key, transaction_id, original_transaction_id, purchase_ms,
      signed_ms, payload) VALUES($1, $2, $3, $4, $5, $6)
    ON CONFLICT (user_key, transaction_id) DO UPDATE SET
      original_transaction_id = excluded.original_transaction_id, purchase_ms = excluded.purchase_ms,
      signed_ms = excluded.signed_ms, payload = excluded.payload
    """
  /// Serializes the writes of one user's data across instances (the merge decides on rows read
  /// under it, and absent rows cannot be locked). `NO KEY UPDATE` does not conflict with the
  /// key-share locks that inserts of the user's rows take.
  static let lockUser = "SELECT 1 FROM users WHERE user_key = $1 FOR NO KEY UPDATE"
  /// A user's row by app, environment and user id, locked; none once erased.
  static let lockStoredUser =
    "SELECT user_key FROM users WHERE app_id = $1 AND environment = $2 AND user_id = $3 FOR NO KEY UPDATE"
  static let upsertRenewalInfo = """
    INSERT INTO renewal_infos (user_key, original_transaction_id, signed_ms, payload)
    VALUES($1, $2, $3, $4)
    ON CONFLICT (user_key, original_transaction_id) DO UPDATE SET
      signed_ms = excluded.signed_ms, payload = excluded.payload
    """
  static let deleteRenewalInfo =
    "DELETE FROM renewal_infos WHERE user_key = $1 AND original_transaction_id = $2"
  static let upsertRenewalInfoRemoval = """
    INSERT INTO renewal_info_removals (user_key, original_transaction_id, as_of_ms) VALUES($1, $2, $3)
    ON CONFLICT (user_key, original_transaction_id) DO UPDATE SET as_of_ms = excluded.as_of_ms
    """
  static let deleteRenewalInfoRemoval =
    "DELETE FROM renewal_info_removals WHERE user_key = $1 AND original_transaction_id = $2"
  /// One user's whole history in one statement (one snapshot, one round trip): kind 0 rows are
  /// transactions, kind 1 rows renewal infos.
  /// The users are looked up by joining the unnested id list, so that every lookup is an index
  /// probe on (app, environment, user). (`u.user_id = ANY($3)` lets the generic plan of a prepared
  /// statement probe by app and environment only and filter the user ids: a scan of all the app's
  /// users per read.)
  static let histories = """
    WITH q AS (
      SELECT u.user_key, u.user_id FROM unnest($3::text[]) AS wanted(user_id)
      JOIN users u ON u.app_id = $1 AND u.environment = $2 AND u.user_id = wanted.user_id)
    SELECT q.user_id, 0, t.transaction_id, t.original_transaction_id, t.purchase_ms, t.payload
    FROM q JOIN transactions t ON t.user_key = q.user_key
    UNION ALL
    SELECT q.user_id, 1, NULL, r.original_transaction_id, 0, r.payload
    FROM q JOIN renewal_infos r ON r.user_key = q.user_key
    """
  /// A user's renewal infos alone (a history's first page), ordered by original transaction id.
  static let renewalInfos = """
    SELECT r.original_transaction_id, r.payload
    FROM users u JOIN renewal_infos r ON r.user_key = u.user_key
    WHERE u.app_id = $1 AND u.environment = $2 AND u.user_id = $3
    ORDER BY r.original_transaction_id
    """
  static let transactionPage = """
    SELECT t.transaction_id, t.original_transaction_id, t.purchase_ms, t.payload
    FROM users u JOIN transactions t ON t.user_key = u.user_key
    WHERE u.app_id = $1 AND u.environment = $2 AND u.user_id = $3
      AND (t.purchase_ms, t.transaction_id) > ($4, $5)
    ORDER BY t.purchase_ms, t.transaction_id LIMIT $6
    """
  static let usersByOriginalTransaction = """
    SELECT DISTINCT u.user_id FROM transactions t JOIN users u ON u.user_key = t.user_key
    WHERE t.original_transaction_id = $1 AND u.app_id = $2 AND u.environment = $3
      AND NOT EXISTS (SELECT 1 FROM ownership_gaps g WHERE g.user_key = t.user_key
        AND g.original_transaction_id = $1 AND g.until_ms IS NULL)
    ORDER BY u.user_id
    """
}

extension PostgresStore: Store {
  private static func tenantRecord(_ r: PGRow) -> TenantRecord {
    TenantRecord(tenantId: r.text(0), name: r.text(1), disabled: r.bool(2), createdMs: r.int(3))
  }

  private static func appRecord(_ r: PGRow) throws(StoreError) -> AppRecord {
    AppRecord(
      appId: r.text(0), tenantId: r.text(1), bundleId: r.text(2), appleAppId: r.optionalInt(3),
      displayName: r.text(4),
      policy: try PayloadCodec.decodeJSON(EligibilityPolicy.self, r.bytes(5)),
      createdMs: r.int(6), sharedSecretFingerprint: r.optionalText(7),
      inAppPurchaseKey: r.optionalText(8).map {
        InAppPurchaseKeyInfo(
          keyId: $0, issuerId: r.text(9), publicKeyFingerprint: r.text(10),
          publicKeyPEM: r.text(11), setMs: r.int(12))
      }, ownershipTracked: r.bool(13), smallBusinessProgram: r.bool(14))
  }

  private static func keyRecord(_ r: PGRow) throws(StoreError) -> ApiKeyRecord {
    guard let role = ApiKeyRecord.Role(rawValue: r.text(2)) else {
      throw StoreError(.corrupt, "API key \(r.text(0)) has unknown role \(r.text(2))")
    }
    return ApiKeyRecord(
      keyId: r.text(0), tenantId: r.optionalText(1), role: role,
      appIds: try PayloadCodec.decodeJSON([String].self, r.bytes(3)), description: r.text(4),
      keyHash: r.bytes(5), displayPrefix: r.text(6), createdMs: r.int(7),
      lastUsedMs: r.optionalInt(8), revokedMs: r.optionalInt(9))
  }

  private static func map<T>(_ rows: [PGRow], _ f: (PGRow) throws(StoreError) -> T)
    throws(StoreError) -> [T]
  {
    var out: [T] = []
    out.reserveCapacity(rows.count)
    for r in rows { out.append(try f(r)) }
    return out
  }

  // MARK: Tenants

  /// See ``TenantStore/createTenant(_:)``.
  public func createTenant(_ tenant: TenantRecord) async throws(StoreError) {
    let inserted = try await pool.run { db throws(StoreError) in
      try db.run(
        """
        INSERT INTO tenants(tenant_id, name, disabled, created_ms) VALUES($1, $2, $3, $4)
        ON CONFLICT (tenant_id) DO NOTHING
        """,
        [.text(tenant.tenantId), .text(tenant.name), .bool(tenant.disabled), .int(tenant.createdMs)])
    }
    if inserted == 0 {
      throw StoreError(.alreadyExists, "tenant \"\(tenant.tenantId)\" already exists")
    }
  }

  /// See ``TenantStore/tenant(id:)``.
  public func tenant(id tenantId: String) async throws(StoreError) -> TenantRecord {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(PostgresQueries.tenantColumns + " WHERE tenant_id = $1", [.text(tenantId)])
    }
    guard let row else { throw StoreError.notFound("tenant", tenantId) }
    return Self.tenantRecord(row)
  }

  /// See ``TenantStore/listTenants(page:)``.
  public func listTenants(page: PageRequest) async throws(StoreError) -> Page<TenantRecord> {
    let limit = page.limit
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        PostgresQueries.tenantColumns + " WHERE tenant_id > $1 ORDER BY tenant_id LIMIT $2",
        [.text(page.cursor ?? ""), .int(Int64(limit + 1))])
    }
    return makePage(rows.map(Self.tenantRecord), limit: limit) { $0.tenantId }
  }

  /// See ``TenantStore/setTenantDisabled(id:disabled:)``.
  public func setTenantDisabled(id tenantId: String, disabled: Bool) async throws(StoreError)
    -> TenantRecord
  {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        "UPDATE tenants SET disabled = $2 WHERE tenant_id = $1 RETURNING tenant_id, name, disabled, created_ms",
        [.text(tenantId), .bool(disabled)])
    }
    guard let row else { throw StoreError.notFound("tenant", tenantId) }
    return Self.tenantRecord(row)
  }

  // MARK: Apps

  /// See ``CatalogStore/createApp(_:)``.
  public func createApp(_ app: AppRecord) async throws(StoreError) {
    let policy = try PayloadCodec.encodeJSON(app.policy)
    try await pool.transaction { db throws(StoreError) in
      guard
        try exists(db, "SELECT 1 FROM tenants WHERE tenant_id = $1", [.text(app.tenantId)])
      else { throw StoreError.notFound("tenant", app.tenantId) }
      let inserted = try db.run(
        """
        INSERT INTO apps(app_id, tenant_id, bundle_id, apple_app_id, display_name, policy, created_ms,
          ownership_tracked)
        VALUES($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING
        """,
        [
          .text(app.appId), .text(app.tenantId), .text(app.bundleId), .optional(app.appleAppId),
          .text(app.displayName), .bytes(policy), .int(app.createdMs),
          .bool(!app.policy.sharesInEveryEnvironment),
        ])
      if inserted == 1 { return }
      if try exists(db, "SELECT 1 FROM apps WHERE app_id = $1", [.text(app.appId)]) {
        throw StoreError(.alreadyExists, "app \"\(app.appId)\" already exists")
      }
      throw StoreError(.alreadyExists, "bundle id \"\(app.bundleId)\" is already registered")
    }
  }

  /// See ``CatalogStore/app(id:)``.
  public func app(id appId: String) async throws(StoreError) -> AppRecord {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(PostgresQueries.appColumns + " WHERE a.app_id = $1", [.text(appId)])
    }
    guard let row else { throw StoreError.notFound("app", appId) }
    return try Self.appRecord(row)
  }

  /// See ``CatalogStore/app(tenantId:appId:)``.
  public func app(tenantId: String, appId: String) async throws(StoreError) -> AppRecord {
    let a = try await app(id: appId)
    guard a.tenantId == tenantId else { throw StoreError.notFound("app", appId) }
    return a
  }

  /// See ``CatalogStore/listApps(tenantId:page:)``.
  public func listApps(tenantId: String, page: PageRequest) async throws(StoreError) -> Page<
    AppRecord
  > {
    let limit = page.limit
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        PostgresQueries.appColumns
          + " WHERE a.tenant_id = $1 AND a.app_id > $2 ORDER BY a.app_id LIMIT $3",
        [.text(tenantId), .text(page.cursor ?? ""), .int(Int64(limit + 1))])
    }
    return makePage(try Self.map(rows, Self.appRecord), limit: limit) { $0.appId }
  }

  /// See ``CatalogStore/setPolicy(appId:policy:)``.
  public func setPolicy(appId: String, policy: EligibilityPolicy) async throws(StoreError)
    -> AppRecord
  {
    let encoded = try PayloadCodec.encodeJSON(policy)
    let row = try await pool.transaction { db throws(StoreError) in
      guard
        try db.run(
          "UPDATE apps SET policy = $2, ownership_tracked = ownership_tracked OR $3 WHERE app_id = $1",
          [.text(appId), .bytes(encoded), .bool(!policy.sharesInEveryEnvironment)])
          == 1
      else { throw StoreError.notFound("app", appId) }
      return try db.first(PostgresQueries.appColumns + " WHERE a.app_id = $1", [.text(appId)])
    }
    guard let row else { throw StoreError.notFound("app", appId) }
    return try Self.appRecord(row)
  }

  /// See ``CatalogStore/setSmallBusinessProgram(appId:_:)``.
  public func setSmallBusinessProgram(appId: String, _ member: Bool) async throws(StoreError) -> AppRecord {
    let row = try await pool.transaction { db throws(StoreError) in
      guard
        try db.run(
          "UPDATE apps SET small_business_program = $2 WHERE app_id = $1", [.text(appId), .bool(member)]) == 1
      else { throw StoreError.notFound("app", appId) }
      return try db.first(PostgresQueries.appColumns + " WHERE a.app_id = $1", [.text(appId)])
    }
    guard let row else { throw StoreError.notFound("app", appId) }
    return try Self.appRecord(row)
  }

  /// See ``CatalogStore/updateApp(appId:appleAppId:displayName:)``.
  public func updateApp(appId: String, appleAppId: Int64?, displayName: String)
    async throws(StoreError) -> AppRecord
  {
    let row = try await pool.transaction { db throws(StoreError) in
      guard
        try db.run(
          "UPDATE apps SET apple_app_id = $2, display_name = $3 WHERE app_id = $1",
          [.text(appId), appleAppId.map { .int($0) } ?? .null, .text(displayName)]) == 1
      else { throw StoreError.notFound("app", appId) }
      return try db.first(PostgresQueries.appColumns + " WHERE a.app_id = $1", [.text(appId)])
    }
    guard let row else { throw StoreError.notFound("app", appId) }
    return try Self.appRecord(row)
  }

  // MARK: Shared secrets

  private func requireKeyring() throws(StoreError) -> MasterKeyring {
    try MasterKeyring.required(configuration.keyring)
  }

  /// See ``CatalogStore/setSharedSecret(appId:secret:atMs:previousValidUntilMs:)``.
  public func setSharedSecret(
    appId: String, secret: String, atMs: Int64, previousValidUntilMs: Int64
  ) async throws(StoreError) -> String {
    let keyring = try requireKeyring()
    let sealed = try SharedSecretSealing.seal(secret, appId: appId, keyring: keyring)
    let fingerprint = SecretFingerprint.of(secret)
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO shared_secrets AS s (app_id, current_key_id, current_box, current_fingerprint,
          current_set_ms) VALUES($1, $2, $3, $4, $5)
        ON CONFLICT (app_id) DO UPDATE SET
          previous_key_id = s.current_key_id, previous_box = s.current_box,
          previous_fingerprint = s.current_fingerprint, previous_set_ms = s.current_set_ms,
          previous_valid_until_ms = $6,
          current_key_id = excluded.current_key_id, current_box = excluded.current_box,
          current_fingerprint = excluded.current_fingerprint, current_set_ms = excluded.current_set_ms
        """,
        [
          .text(appId), .text(sealed.keyId), .bytes(sealed.box), .text(fingerprint), .int(atMs),
          .int(previousValidUntilMs),
        ])
    }
    return fingerprint
  }

  /// See ``CatalogStore/sharedSecrets(appId:)``.
  public func sharedSecrets(appId: String) async throws(StoreError) -> SharedSecrets? {
    let row = try await pool.run { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.first("SELECT \(SharedSecretSealing.columns) FROM shared_secrets WHERE app_id = $1", [.text(appId)])
    }
    guard let row else { return nil }
    return try SharedSecretSealing.open(SharedSecretSealing.stored(row), appId: appId, keyring: requireKeyring())
  }

  /// Re-seals every stored secret under the keyring's current master key (after a rotation), so the
  /// old key can then be removed from every instance's keyring. Rows are locked while re-sealed, so
  /// it may run while other instances set secrets.
  /// - Returns: how many sealed values were re-sealed.
  /// - Throws: `secretUnavailable` if a value cannot be opened with the keyring.
  public func resealSecrets() async throws(StoreError) -> Int {
    let keyring = try requireKeyring()
    return try await pool.transaction { db throws(StoreError) in
      let rows = try db.query(
        """
        SELECT app_id, current_key_id, current_box, previous_key_id, previous_box FROM shared_secrets
        WHERE current_key_id <> $1 OR previous_key_id <> $1 FOR UPDATE
        """, [.text(keyring.current.id)])
      var count = 0
      for r in rows {
        let appId = r.text(0)
        for (column, at) in [("current", 1), ("previous", 3)] {
          guard let keyId = r.optionalText(at), keyId != keyring.current.id else { continue }
          let resealed = try SharedSecretSealing.reseal(
            SealedSecret(keyId: keyId, box: r.bytes(at + 1)), appId: appId, keyring: keyring)
          try db.run(
            "UPDATE shared_secrets SET \(column)_key_id = $2, \(column)_box = $3 WHERE app_id = $1",
            [.text(appId), .text(resealed.keyId), .bytes(resealed.box)])
          count += 1
        }
      }
      return count + (try Self.resealInAppPurchaseKeys(db, keyring)) + (try Self.resealWebhookSecrets(db, keyring))
    }
  }

  // MARK: Catalog

  /// See ``CatalogStore/putProducts(appId:products:)``.
  public func putProducts(appId: String, products: [Product]) async throws(StoreError) {
    var rows: [(String, [UInt8])] = []
    for p in products { rows.append((p.productId, try PayloadCodec.encodeJSON(p))) }
    let encoded = rows.map { ProductRow(productId: $0.0, payload: $0.1) }
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      for row in encoded {
        try db.run(
          """
          INSERT INTO products(app_id, product_id, payload) VALUES($1, $2, $3)
          ON CONFLICT (app_id, product_id) DO UPDATE SET payload = excluded.payload
          """, [.text(appId), .text(row.productId), .bytes(row.payload)])
      }
    }
  }

  private struct ProductRow: Sendable {
    var productId: String
    var payload: [UInt8]
  }

  /// See ``CatalogStore/products(appId:)``.
  public func products(appId: String) async throws(StoreError) -> [Product] {
    let rows = try await pool.run { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.query(
        "SELECT payload FROM products WHERE app_id = $1 ORDER BY product_id", [.text(appId)])
    }
    return try Self.map(rows) { r throws(StoreError) in
      try PayloadCodec.decodeJSON(Product.self, r.bytes(0))
    }
  }

  // MARK: API keys

  /// See ``TenantStore/createApiKey(_:)``.
  public func createApiKey(_ key: ApiKeyRecord) async throws(StoreError) {
    try StoreValidation.validate(key)
    let appIds = try PayloadCodec.encodeJSON(key.appIds)
    try await pool.transaction { db throws(StoreError) in
      if let t = key.tenantId,
        try !exists(db, "SELECT 1 FROM tenants WHERE tenant_id = $1", [.text(t)])
      {
        throw StoreError.notFound("tenant", t)
      }
      let inserted = try db.run(
        """
        INSERT INTO api_keys(key_id, tenant_id, role, app_ids, description, key_hash, display_prefix,
          created_ms, last_used_ms, revoked_ms) VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
        ON CONFLICT DO NOTHING
        """,
        [
          .text(key.keyId), .optional(key.tenantId), .text(key.role.rawValue), .bytes(appIds),
          .text(key.description), .bytes(key.keyHash), .text(key.displayPrefix),
          .int(key.createdMs), .optional(key.lastUsedMs), .optional(key.revokedMs),
        ])
      if inserted == 1 { return }
      if try exists(db, "SELECT 1 FROM api_keys WHERE key_id = $1", [.text(key.keyId)]) {
        throw StoreError(.alreadyExists, "API key \"\(key.keyId)\" already exists")
      }
      throw StoreError(.alreadyExists, "an API key with this hash already exists")
    }
  }

  /// See ``TenantStore/apiKey(hash:)``. The index finds the row; the final comparison is constant-time.
  public func apiKey(hash: [UInt8]) async throws(StoreError) -> ApiKeyRecord? {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(PostgresQueries.keyColumns + " WHERE key_hash = $1", [.bytes(hash)])
    }
    guard let row else { return nil }
    let found = try Self.keyRecord(row)
    return ConstantTime.equals(found.keyHash, hash) ? found : nil
  }

  /// See ``TenantStore/listApiKeys(tenantId:page:)``.
  public func listApiKeys(tenantId: String?, page: PageRequest) async throws(StoreError)
    -> Page<ApiKeyRecord>
  {
    let limit = page.limit
    let rows = try await pool.run { db throws(StoreError) in
      if let tenantId {
        return try db.query(
          PostgresQueries.keyColumns
            + " WHERE tenant_id = $1 AND key_id > $2 ORDER BY key_id LIMIT $3",
          [.text(tenantId), .text(page.cursor ?? ""), .int(Int64(limit + 1))])
      }
      return try db.query(
        PostgresQueries.keyColumns
          + " WHERE tenant_id IS NULL AND key_id > $1 ORDER BY key_id LIMIT $2",
        [.text(page.cursor ?? ""), .int(Int64(limit + 1))])
    }
    return makePage(try Self.map(rows, Self.keyRecord), limit: limit) { $0.keyId }
  }

  /// See ``TenantStore/revokeApiKey(tenantId:keyId:atMs:)``.
  public func revokeApiKey(tenantId: String?, keyId: String, atMs: Int64) async throws(StoreError)
    -> ApiKeyRecord
  {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        """
        UPDATE api_keys SET revoked_ms = COALESCE(revoked_ms, $3)
        WHERE key_id = $1 AND tenant_id IS NOT DISTINCT FROM $2::text
        RETURNING key_id, tenant_id, role, app_ids, description, key_hash, display_prefix,
          created_ms, last_used_ms, revoked_ms
        """, [.text(keyId), .optional(tenantId), .int(atMs)])
    }
    guard let row else { throw StoreError.notFound("API key", keyId) }
    return try Self.keyRecord(row)
  }

  /// See ``TenantStore/touchApiKey(keyId:atMs:)``. Writes at most once a minute per key and instance.
  public func touchApiKey(keyId: String, atMs: Int64) async throws(StoreError) {
    let due = touchedKeys.withLock { touched -> Bool in
      if let last = touched[keyId], atMs - last < 60_000 { return false }
      touched[keyId] = atMs
      return true
    }
    guard due else { return }
    _ = try await pool.run { db throws(StoreError) in
      try db.run(
        "UPDATE api_keys SET last_used_ms = $2 WHERE key_id = $1 AND (last_used_ms IS NULL OR last_used_ms < $2)",
        [.text(keyId), .int(atMs)])
    }
  }

  // MARK: Purchase data

  /// The user's key, created if needed (a concurrent creator's row is found, not duplicated).
  static func userKey(_ db: PGConnection, _ user: UserKey) throws(StoreError) -> Int64 {
    let values: [PGValue] = [
      .text(user.appId), .text(user.environment.rawValue), .text(user.userId),
    ]
    for _ in 0..<3 {
      if let row = try db.first(PostgresQueries.userKey, values) { return row.int(0) }
      if let row = try db.first(PostgresQueries.insertUser, values) { return row.int(0) }
    }
    throw StoreError(.internalError, "cannot create the user row of \(user.userId)")
  }

  /// Applies the batch (purchase sharing first) and logs the events it causes at `atMs`. Each
  /// user's row is locked first (`FOR NO KEY UPDATE`: every write of a user's data, on any
  /// instance, takes it), so the user's stored rows, read once, are what the domain's merge decides
  /// on and the events' "before"; the "after" is that state with the merge's decisions applied.
  /// The events are appended last. A batch whose apps all share purchases (never tracked) runs in a
  /// few statements (``applyBatched(_:atMs:_:catalogs:)``); otherwise update by update, each
  /// deciding ownership on the rows the previous ones wrote.
  static func apply(
    _ batch: [EncodedPurchases], atMs: Int64, _ db: PGConnection, catalogs: EventCatalogCache
  ) throws(StoreError) -> IngestSummary {
    let both = try appPolicies(db, Set(batch.map(\.user.appId)))
    let policies = both.mapValues(\.ownership)
    let appPolicies = both.mapValues(\.policy)
    if !policies.values.contains(where: \.needsLedger) {
      return try applyBatched(batch, atMs: atMs, db, catalogs: catalogs, policies: appPolicies)
    }
    var summary = IngestSummary()
    var pending: [PendingEvents] = []
    var changedKeys: [Int64] = []
    for submitted in lockOrder(batch) {
      let user = submitted.user
      // Not created again once erased: the erasure locks the row FOR UPDATE, so either it
      // committed and the row is gone, or it waits for this transaction.
      if submitted.onlyIfStored, try db.first(PostgresQueries.lockStoredUser, [
        .text(user.appId), .text(user.environment.rawValue), .text(user.userId),
      ]) == nil {
        summary.erasedMeanwhile.append(user)
        continue
      }
      var ledger = PostgresOwnershipLedger(
        db: db, appId: user.appId, environment: user.environment, catalogs: catalogs, policy: appPolicies[user.appId])
      let madeBefore = summary.transfers.count
      // Under purchase sharing the events follow what the user owns, before and after the write.
      let tracked = policies[user.appId]?.needsLedger == true
      let gapsBefore = tracked ? try ledger.existingGaps(of: user.userId) : []
      let update = try PurchaseOwnership.settle(
        submitted, policy: policies[user.appId], summary: &summary, ledger: &ledger)
      if update.isEmpty { continue }
      let key = try userKey(db, update.user)
      _ = try db.query(PostgresQueries.lockUser, [.int(key)])
      let before = try purchaseState(db, key)
      var state = before
      var changed = false
      for incoming in update.transactions {
        guard let (stored, old) = state.merge(incoming.transaction) else { continue }
        changed = true
        let t = incoming.row(storing: stored)
        try db.run(
          PostgresQueries.upsertTransaction,
          [
            .int(key), .text(t.transactionId), .text(t.originalTransactionId), .int(t.purchaseMs),
            .optional(t.signedMs), .bytes(t.payload),
          ])
        if isCountedChange(stored, replacing: old) { summary.transactionsWritten += 1 }
      }
      for r in update.renewalInfos {
        guard let old = state.merge(r.version) else { continue }
        changed = true
        try write(r, replacing: old, key: key, db)
        if isCountedChange(r.version, replacing: old) { summary.renewalInfosWritten += 1 }
      }
      if changed {
        if changedKeys.last != key { changedKeys.append(key) }
        pending.append(
          try deriveWrite(
            db, user: update.user, key: key, before: before, after: state, atMs: atMs,
            catalogs: catalogs, gapsBefore: gapsBefore, gapsAfter: tracked ? try ownershipGaps(db, key) : []))
      }
      let made = summary.transfers[madeBefore...]
      // The summaries of every user whose data or ownership the update changed, in its commit.
      let summaryCatalog = try catalog(db, user.appId, catalogs)
      let appPolicy = appPolicies[user.appId] ?? .default
      try storeSummary(
        db, key: key, state: state, gaps: tracked ? try ownershipGaps(db, key) : [], atMs: atMs,
        catalog: summaryCatalog, policy: appPolicy)
      var summarized: Set<String> = [update.user.userId]
      for transfer in made {
        for userId in [transfer.previousUserId, transfer.newUserId] where summarized.insert(userId).inserted {
          let other = UserKey(appId: transfer.appId, environment: transfer.environment, userId: userId)
          let otherKey = try userKey(db, other)
          // Its row lock, as every write of its data takes: its summary follows its newest data.
          _ = try db.query(PostgresQueries.lockUser, [.int(otherKey)])
          try storeSummary(
            db, key: otherKey, state: try purchaseState(db, otherKey), gaps: try ownershipGaps(db, otherKey),
            atMs: atMs, catalog: summaryCatalog, policy: appPolicy)
        }
      }
      if !made.isEmpty {
        try PurchaseOwnership.logTransferEvents(made, catalog: summaryCatalog, log: &ledger)
        pending += ledger.pending
      }
    }
    summary.eventsAppended = try appendEvents(db, pending).count
    try recordUserChanges(db, changedKeys)
    return summary
  }

  /// Writes one renewal info or removal that the domain's merge chose over `old`.
  private static func write(
    _ r: EncodedRenewalInfo, replacing old: RenewalInfoVersion?, key: Int64, _ db: PGConnection
  ) throws(StoreError) {
    let ids: [PGValue] = [.int(key), .text(r.originalTransactionId)]
    if let payload = r.payload {
      _ = try db.run(PostgresQueries.upsertRenewalInfo, ids + [.optional(r.signedMs), .bytes(payload)])
      if case .removed? = old { _ = try db.run(PostgresQueries.deleteRenewalInfoRemoval, ids) }
    } else {
      _ = try db.run(PostgresQueries.upsertRenewalInfoRemoval, ids + [.optional(r.version.appleClock)])
      if case .present? = old { _ = try db.run(PostgresQueries.deleteRenewalInfo, ids) }
    }
  }

  /// The batch in one canonical order (user, then ids), so concurrent writers on other instances
  /// lock rows in the same order and do not deadlock. Stable: updates of one record keep their order.
  static func lockOrder(_ batch: [EncodedPurchases]) -> [EncodedPurchases] {
    stableSorted(batch) { [$0.user.appId, $0.user.environment.rawValue, $0.user.userId] }
  }

  private static func stableSorted<T>(_ items: [T], by key: (T) -> [String]) -> [T] {
    items.enumerated().sorted { a, b in
      let (ka, kb) = (key(a.element), key(b.element))
      return ka == kb ? a.offset < b.offset : ka.lexicographicallyPrecedes(kb)
    }.map(\.element)
  }

  /// See ``PurchaseStore/ingest(_:atMs:)``.
  public func ingest(_ batch: [UserPurchases], atMs: Int64) async throws(StoreError)
    -> IngestSummary
  {
    try StoreValidation.validate(batch)
    let encoded = batch.map(EncodedPurchases.init)
    defer { historyCache.invalidate(batch.lazy.map(\.user)) }
    let catalogs = eventCatalogs
    return try await pool.transaction { db throws(StoreError) in
      try Self.apply(encoded, atMs: atMs, db, catalogs: catalogs)
    }
  }

  /// See ``PurchaseStore/applyNotification(appId:notificationId:receivedMs:updates:)``. The primary key of
  /// `notifications` decides, in the same transaction as the data: a second instance applying the
  /// same notification waits for the first one's commit, then finds the id taken.
  public func applyNotification(
    appId: String, notificationId: String, receivedMs: Int64, updates: [UserPurchases]
  ) async throws(StoreError) -> IngestSummary? {
    try StoreValidation.validate(updates)
    let encoded = updates.map(EncodedPurchases.init)
    defer { historyCache.invalidate(updates.lazy.map(\.user)) }
    let catalogs = eventCatalogs
    return try await pool.transaction { db throws(StoreError) -> IngestSummary? in
      try requireApp(db, appId)
      let claimed = try db.run(
        """
        INSERT INTO notifications(app_id, notification_id, received_ms) VALUES($1, $2, $3)
        ON CONFLICT (app_id, notification_id) DO NOTHING
        """, [.text(appId), .text(notificationId), .int(receivedMs)])
      guard claimed == 1 else { return nil }
      return try Self.apply(encoded, atMs: receivedMs, db, catalogs: catalogs)
    }
  }

  /// See ``PurchaseStore/pruneNotifications(receivedBeforeMs:)``.
  public func pruneNotifications(receivedBeforeMs: Int64) async throws(StoreError) -> Int {
    try await pool.run { db throws(StoreError) in
      try db.run("DELETE FROM notifications WHERE received_ms < $1", [.int(receivedBeforeMs)])
    }
  }

  /// See ``PurchaseStore/isNotificationProcessed(appId:notificationId:)``.
  public func isNotificationProcessed(appId: String, notificationId: String)
    async throws(StoreError) -> Bool
  {
    try await pool.run { db throws(StoreError) in
      try exists(
        db, "SELECT 1 FROM notifications WHERE app_id = $1 AND notification_id = $2",
        [.text(appId), .text(notificationId)])
    }
  }

  /// See ``PurchaseStore/history(of:)``.
  public func history(of user: UserKey) async throws(StoreError) -> UserHistory {
    try await histories(appId: user.appId, environment: user.environment, userIds: [user.userId])[0]
  }

  /// See ``PurchaseStore/histories(appId:environment:userIds:)``. Users in the history cache are answered
  /// from it; the others are read in one statement (their fill tickets taken before it).
  public func histories(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [UserHistory] {
    if userIds.isEmpty { return [] }
    var out: [UserHistory?] = []
    out.reserveCapacity(userIds.count)
    var tickets: [String: HistoryCache.FillTicket] = [:]
    var missing: [String] = []
    for userId in userIds {
      switch historyCache.lookup(UserKey(appId: appId, environment: environment, userId: userId)) {
      case .hit(let cached): out.append(cached)
      case .miss(let ticket):
        out.append(nil)
        missing.append(userId)
        if let ticket { tickets[userId] = ticket }
      }
    }
    if missing.isEmpty { return out.map { $0! } }
    let wanted = Array(Set(missing))
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        PostgresQueries.histories, [.text(appId), .text(environment.rawValue), .textArray(wanted)])
    }
    var byUser: [String: (history: UserHistory, payloadBytes: Int)] = [:]
    for r in rows {
      let userId = r.text(0)
      var h =
        byUser[userId]
        ?? (UserHistory(user: UserKey(appId: appId, environment: environment, userId: userId)), 0)
      let payload = r.bytes(5)
      h.payloadBytes += payload.count
      if r.int(1) == 0 {
        h.history.transactions.append(
          try PayloadCodec.decodeTransaction(
            payload, transactionId: r.text(2), originalTransactionId: r.text(3),
            purchaseDate: r.int(4)))
      } else {
        h.history.renewalInfos.append(
          try PayloadCodec.decodeRenewalInfo(payload, originalTransactionId: r.text(3)))
      }
      byUser[userId] = h
    }
    var read: [String: UserHistory] = [:]
    for userId in wanted {
      var (h, payloadBytes) =
        byUser[userId] ?? (UserHistory(user: UserKey(appId: appId, environment: environment, userId: userId)), 0)
      h.transactions.sort {
        ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId)
      }
      h.renewalInfos.sort { $0.originalTransactionId < $1.originalTransactionId }
      if let ticket = tickets[userId] { historyCache.fill(ticket, h, payloadBytes: payloadBytes) }
      read[userId] = h
    }
    return zip(userIds, out).map { id, cached in cached ?? read[id]! }
  }

  /// See ``PurchaseStore/transactions(of:page:)``. The cursor is `purchaseMs:transactionId`.
  public func transactions(of user: UserKey, page: PageRequest) async throws(StoreError)
    -> Page<Transaction>
  {
    var afterMs = Int64.min
    var afterId = ""
    if let cursor = page.cursor {
      guard let colon = cursor.firstIndex(of: ":"), let ms = Int64(cursor[..<colon]) else {
        throw StoreError(.invalidArgument, "invalid page cursor")
      }
      afterMs = ms
      afterId = String(cursor[cursor.index(after: colon)...])
    }
    let limit = page.limit
    let (ms, id) = (afterMs, afterId)
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        PostgresQueries.transactionPage,
        [
          .text(user.appId), .text(user.environment.rawValue), .text(user.userId), .int(ms),
          .text(id), .int(Int64(limit + 1)),
        ])
    }
    let items = try Self.map(rows) { r throws(StoreError) in
      try PayloadCodec.decodeTransaction(
        r.bytes(3), transactionId: r.text(0), originalTransactionId: r.text(1),
        purchaseDate: r.int(2))
    }
    return makePage(items, limit: limit) { "\($0.purchaseDate):\($0.transactionId)" }
  }

  /// See ``PurchaseStore/renewalInfos(of:)``. From the history cache when it holds the user, else the
  /// renewal infos' rows alone: the user's transactions are not read.
  public func renewalInfos(of user: UserKey) async throws(StoreError) -> [RenewalInfo] {
    if let cached = historyCache.history(of: user) { return cached.renewalInfos }
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        PostgresQueries.renewalInfos, [.text(user.appId), .text(user.environment.rawValue), .text(user.userId)])
    }
    return try Self.map(rows) { r throws(StoreError) in
      try PayloadCodec.decodeRenewalInfo(r.bytes(1), originalTransactionId: r.text(0))
    }
  }

  /// See ``PurchaseStore/users(appId:environment:originalTransactionId:)``.
  public func users(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [String] {
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        PostgresQueries.usersByOriginalTransaction,
        [.text(originalTransactionId), .text(appId), .text(environment.rawValue)])
    }
    return rows.map { $0.text(0) }
  }

  /// See ``PurchaseStore/listUsers(appId:environment:page:)``.
  public func listUsers(
    appId: String, environment: Environment, page: PageRequest
  ) async throws(StoreError) -> Page<String> {
    let limit = page.limit
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT user_id FROM users WHERE app_id = $1 AND environment = $2 AND user_id > $3
        ORDER BY user_id LIMIT $4
        """,
        [
          .text(appId), .text(environment.rawValue), .text(page.cursor ?? ""),
          .int(Int64(limit + 1)),
        ])
    }
    return makePage(rows.map { $0.text(0) }, limit: limit) { $0 }
  }

  // MARK: Stored receipts

  /// See ``ReceiptStore/saveReceipt(_:)``.
  public func saveReceipt(_ receipt: StoredReceipt) async throws(StoreError) {
    try StoreValidation.validate(receipt)
    try await pool.transaction { db throws(StoreError) in
      guard
        try exists(
          db, "SELECT 1 FROM apps WHERE app_id = $1", [.text(receipt.user.appId)])
      else { throw StoreError.notFound("app", receipt.user.appId) }
      let key = try Self.userKey(db, receipt.user)
      try db.run(
        """
        INSERT INTO receipts(user_key, receipt_data, last_verified_ms, next_due_ms, failure_count)
        VALUES($1, $2, $3, $4, $5)
        ON CONFLICT (user_key) DO UPDATE SET
          receipt_data = excluded.receipt_data, last_verified_ms = excluded.last_verified_ms,
          next_due_ms = excluded.next_due_ms, failure_count = excluded.failure_count
        """,
        [
          .int(key), .text(receipt.receiptData), .optional(receipt.lastVerifiedMs),
          .optional(receipt.nextDueMs), .int(Int64(receipt.failureCount)),
        ])
    }
  }

  /// See ``ReceiptStore/receipt(of:)``.
  public func receipt(of user: UserKey) async throws(StoreError) -> StoredReceipt? {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        """
        SELECT r.receipt_data, r.last_verified_ms, r.next_due_ms, r.failure_count
        FROM users u JOIN receipts r ON r.user_key = u.user_key
        WHERE u.app_id = $1 AND u.environment = $2 AND u.user_id = $3
        """, [.text(user.appId), .text(user.environment.rawValue), .text(user.userId)])
    }
    return row.map { r in
      StoredReceipt(
        user: user, receiptData: r.text(0), lastVerifiedMs: r.optionalInt(1),
        nextDueMs: r.optionalInt(2), failureCount: Int(r.int(3)))
    }
  }

  /// See ``ReceiptStore/dueReceipts(atMs:limit:)``. A range read of the partial index `receipts_by_due`.
  /// Every instance sees the same due receipts (this is a read, not a claim).
  public func dueReceipts(atMs: Int64, limit: Int) async throws(StoreError) -> [StoredReceipt] {
    let n = Int64(min(max(limit, 1), 1000))
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        SELECT u.app_id, u.environment, u.user_id, r.receipt_data, r.last_verified_ms,
          r.next_due_ms, r.failure_count FROM receipts r JOIN users u ON u.user_key = r.user_key
        WHERE r.next_due_ms <= $1 ORDER BY r.next_due_ms, u.app_id, u.environment, u.user_id
        LIMIT $2
        """, [.int(atMs), .int(n)])
    }
    return try Self.map(rows) { r throws(StoreError) in
      guard let environment = Environment(rawValue: r.text(1)) else {
        throw StoreError(.corrupt, "user of app \(r.text(0)) has unknown environment \(r.text(1))")
      }
      return StoredReceipt(
        user: UserKey(appId: r.text(0), environment: environment, userId: r.text(2)),
        receiptData: r.text(3), lastVerifiedMs: r.optionalInt(4), nextDueMs: r.optionalInt(5),
        failureCount: Int(r.int(6)))
    }
  }

  /// See ``ReceiptStore/claimDueReceipts(atMs:limit:leaseUntilMs:)``. One statement: the due rows are
  /// locked with `FOR UPDATE SKIP LOCKED` (rows another instance is claiming at this moment are
  /// skipped, not waited for; a row another claim committed first fails the re-checked due
  /// condition) and their due time set to the lease expiry, returning the rows as they were.
  public func claimDueReceipts(atMs: Int64, limit: Int, leaseUntilMs: Int64)
    async throws(StoreError) -> [StoredReceipt]
  {
    try StoreValidation.validateLease(atMs: atMs, leaseUntilMs: leaseUntilMs)
    let n = Int64(min(max(limit, 1), 1000))
    let rows = try await pool.run { db throws(StoreError) in
      try db.query(
        """
        WITH claimed AS (
          SELECT r.user_key, r.next_due_ms FROM receipts r JOIN users u ON u.user_key = r.user_key
          WHERE r.next_due_ms <= $1 ORDER BY r.next_due_ms, u.app_id, u.environment, u.user_id
          LIMIT $2 FOR UPDATE OF r SKIP LOCKED)
        UPDATE receipts r SET next_due_ms = $3 FROM claimed c, users u
        WHERE r.user_key = c.user_key AND u.user_key = r.user_key
        RETURNING u.app_id, u.environment, u.user_id, r.receipt_data, r.last_verified_ms,
          c.next_due_ms, r.failure_count
        """, [.int(atMs), .int(n), .int(leaseUntilMs)])
    }
    let claimed = try Self.map(rows) { r throws(StoreError) in
      guard let environment = Environment(rawValue: r.text(1)) else {
        throw StoreError(.corrupt, "user of app \(r.text(0)) has unknown environment \(r.text(1))")
      }
      return StoredReceipt(
        user: UserKey(appId: r.text(0), environment: environment, userId: r.text(2)),
        receiptData: r.text(3), lastVerifiedMs: r.optionalInt(4), nextDueMs: r.optionalInt(5),
        failureCount: Int(r.int(6)))
    }
    // RETURNING has no order: most overdue first, as the selection was made.
    return claimed.sorted {
      ($0.nextDueMs ?? 0, $0.user.appId, $0.user.environment.rawValue, $0.user.userId)
        < ($1.nextDueMs ?? 0, $1.user.appId, $1.user.environment.rawValue, $1.user.userId)
    }
  }

  /// Runs `sql` (whose first parameters are app, environment and user id) on the user's receipt
  /// row; `notFound` if there is none.
  private func updateReceipt(_ user: UserKey, _ sql: String, _ values: [PGValue])
    async throws(StoreError)
  {
    let changed = try await pool.run { db throws(StoreError) in
      try db.run(
        sql, [.text(user.appId), .text(user.environment.rawValue), .text(user.userId)] + values)
    }
    if changed == 0 { throw StoreError.notFound("receipt of user", user.userId) }
  }

  private static let receiptOfUser = """
    user_key = (SELECT user_key FROM users WHERE app_id = $1 AND environment = $2 AND user_id = $3)
    """

  /// See ``ReceiptStore/markReceiptVerified(user:atMs:nextDueMs:receiptData:)``.
  public func markReceiptVerified(
    user: UserKey, atMs: Int64, nextDueMs: Int64?, receiptData: String?
  ) async throws(StoreError) {
    if let receiptData, receiptData.isEmpty {
      throw StoreError(.invalidArgument, "receipt: receipt_data is empty")
    }
    try await updateReceipt(
      user,
      """
      UPDATE receipts SET last_verified_ms = $4, next_due_ms = $5, failure_count = 0,
        receipt_data = COALESCE($6::text, receipt_data) WHERE \(Self.receiptOfUser)
      """, [.int(atMs), .optional(nextDueMs), .optional(receiptData)])
  }

  /// See ``ReceiptStore/rescheduleReceipt(user:nextDueMs:failureCount:)``.
  public func rescheduleReceipt(user: UserKey, nextDueMs: Int64?, failureCount: Int)
    async throws(StoreError)
  {
    if failureCount < 0 { throw StoreError(.invalidArgument, "receipt: failure_count is negative") }
    try await updateReceipt(
      user,
      "UPDATE receipts SET next_due_ms = $4, failure_count = $5 WHERE \(Self.receiptOfUser)",
      [.optional(nextDueMs), .int(Int64(failureCount))])
  }

  // MARK: Audit

  /// See ``AuditStore/appendAudit(_:)``.
  public func appendAudit(_ entry: AuditEntry) async throws(StoreError) -> AuditEntry {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        """
        INSERT INTO audit_log(tenant_id, at_ms, actor_key_id, action, resource, details)
        VALUES($1, $2, $3, $4, $5, $6) RETURNING sequence
        """,
        [
          .optional(entry.tenantId), .int(entry.atMs), .text(entry.actorKeyId),
          .text(entry.action), .text(entry.resource), .text(entry.details),
        ])
    }
    guard let row else { throw StoreError(.internalError, "INSERT … RETURNING returned no row") }
    var e = entry
    e.sequence = row.int(0)
    return e
  }

  /// See ``AuditStore/auditLog(tenantId:page:)``.
  public func auditLog(tenantId: String?, page: PageRequest) async throws(StoreError) -> Page<
    AuditEntry
  > {
    var after: Int64 = 0
    if let cursor = page.cursor {
      guard let n = Int64(cursor) else { throw StoreError(.invalidArgument, "invalid page cursor") }
      after = n
    }
    let limit = page.limit
    let start = after
    let columns =
      "SELECT sequence, tenant_id, at_ms, actor_key_id, action, resource, details FROM audit_log"
    let rows = try await pool.run { db throws(StoreError) in
      if let tenantId {
        return try db.query(
          columns + " WHERE tenant_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3",
          [.text(tenantId), .int(start), .int(Int64(limit + 1))])
      }
      return try db.query(
        columns + " WHERE tenant_id IS NULL AND sequence > $1 ORDER BY sequence LIMIT $2",
        [.int(start), .int(Int64(limit + 1))])
    }
    let entries = rows.map { r in
      AuditEntry(
        sequence: r.int(0), tenantId: r.optionalText(1), atMs: r.int(2), actorKeyId: r.text(3),
        action: r.text(4), resource: r.text(5), details: r.text(6))
    }
    return makePage(entries, limit: limit) { String($0.sequence) }
  }
}

// MARK: In-App Purchase keys

extension PostgresStore {
  /// See ``CatalogStore/setInAppPurchaseKey(appId:key:)``.
  public func setInAppPurchaseKey(appId: String, key: InAppPurchaseKey) async throws(StoreError) {
    let keyring = try requireKeyring()
    let sealed = try InAppPurchaseKeySealing.seal(key, appId: appId, keyring: keyring)
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO in_app_purchase_keys(app_id, key_id, issuer_id, public_key_pem,
          public_key_fingerprint, set_ms, master_key_id, private_key_box)
        VALUES($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (app_id) DO UPDATE SET
          key_id = excluded.key_id, issuer_id = excluded.issuer_id,
          public_key_pem = excluded.public_key_pem,
          public_key_fingerprint = excluded.public_key_fingerprint, set_ms = excluded.set_ms,
          master_key_id = excluded.master_key_id, private_key_box = excluded.private_key_box
        """,
        [
          .text(appId), .text(key.keyId), .text(key.issuerId), .text(key.publicKeyPEM),
          .text(key.publicKeyFingerprint), .int(key.setMs), .text(sealed.keyId),
          .bytes(sealed.box),
        ])
    }
  }

  /// See ``CatalogStore/inAppPurchaseKey(appId:)``.
  public func inAppPurchaseKey(appId: String) async throws(StoreError) -> InAppPurchaseKey? {
    let row = try await pool.run { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.first(
        "SELECT \(InAppPurchaseKeySealing.columns) FROM in_app_purchase_keys WHERE app_id = $1", [.text(appId)])
    }
    guard let row else { return nil }
    return try InAppPurchaseKeySealing.open(InAppPurchaseKeySealing.stored(row), appId: appId, keyring: requireKeyring())
  }

  /// Re-seals the In-App Purchase keys not sealed with the current master key (part of
  /// ``resealSecrets()``, inside its transaction; the rows are locked while re-sealed).
  /// - Returns: how many were re-sealed.
  static func resealInAppPurchaseKeys(_ db: PGConnection, _ keyring: MasterKeyring)
    throws(StoreError) -> Int
  {
    let rows = try db.query(
      """
      SELECT app_id, master_key_id, private_key_box FROM in_app_purchase_keys
      WHERE master_key_id <> $1 FOR UPDATE
      """, [.text(keyring.current.id)])
    for r in rows {
      let appId = r.text(0)
      let resealed = try InAppPurchaseKeySealing.reseal(
        SealedSecret(keyId: r.text(1), box: r.bytes(2)), appId: appId, keyring: keyring)
      try db.run(
        "UPDATE in_app_purchase_keys SET master_key_id = $2, private_key_box = $3 WHERE app_id = $1",
        [.text(appId), .text(resealed.keyId), .bytes(resealed.box)])
    }
    return rows.count
  }
}

// MARK: App Store Server API sync

extension PostgresStore {
  /// See ``ServerAPISyncStore/saveTransactionHistorySync(_:)``.
  public func saveTransactionHistorySync(_ sync: TransactionHistorySyncState) async throws(StoreError) {
    try StoreValidation.validate(sync)
    try await pool.transaction { db throws(StoreError) in
      guard try exists(db, "SELECT 1 FROM apps WHERE app_id = $1", [.text(sync.user.appId)]) else {
        throw StoreError.notFound("app", sync.user.appId)
      }
      try db.run(
        """
        INSERT INTO history_syncs(app_id, environment, user_id, transaction_id, revision, last_sync_ms)
        VALUES($1, $2, $3, $4, $5, $6)
        ON CONFLICT (app_id, environment, user_id) DO UPDATE SET
          transaction_id = excluded.transaction_id, revision = excluded.revision,
          last_sync_ms = excluded.last_sync_ms
        """,
        [
          .text(sync.user.appId), .text(sync.user.environment.rawValue), .text(sync.user.userId),
          .text(sync.transactionId), .optional(sync.revision), .int(sync.lastSyncMs),
        ])
    }
  }

  /// See ``ServerAPISyncStore/transactionHistorySync(of:)``.
  public func transactionHistorySync(of user: UserKey) async throws(StoreError) -> TransactionHistorySyncState? {
    let row = try await pool.run { db throws(StoreError) in
      try db.first(
        """
        SELECT transaction_id, revision, last_sync_ms FROM history_syncs
        WHERE app_id = $1 AND environment = $2 AND user_id = $3
        """, [.text(user.appId), .text(user.environment.rawValue), .text(user.userId)])
    }
    return row.map { r in
      TransactionHistorySyncState(
        user: user, transactionId: r.text(0), revision: r.optionalText(1), lastSyncMs: r.int(2))
    }
  }

  /// See ``ServerAPISyncStore/claimReconciliation(appId:environment:owner:atMs:leaseUntilMs:)``. One conditional
  /// upsert: of two instances claiming at once, exactly one gets the row.
  public func claimReconciliation(
    appId: String, environment: Environment, owner: String, atMs: Int64, leaseUntilMs: Int64
  ) async throws(StoreError) -> ReconciliationClaim? {
    try StoreValidation.validateClaim(owner: owner, atMs: atMs, leaseUntilMs: leaseUntilMs)
    return try await pool.transaction { db throws(StoreError) -> ReconciliationClaim? in
      guard try exists(db, "SELECT 1 FROM apps WHERE app_id = $1", [.text(appId)]) else {
        throw StoreError.notFound("app", appId)
      }
      let row = try db.first(
        """
        INSERT INTO reconciliations(app_id, environment, lease_owner, lease_until_ms)
        VALUES($1, $2, $3, $4)
        ON CONFLICT (app_id, environment) DO UPDATE SET
          lease_owner = excluded.lease_owner, lease_until_ms = excluded.lease_until_ms
        WHERE reconciliations.lease_owner IS NULL OR reconciliations.lease_owner = excluded.lease_owner
          OR reconciliations.lease_until_ms <= $5
        RETURNING reconciled_through_ms
        """, [.text(appId), .text(environment.rawValue), .text(owner), .int(leaseUntilMs), .int(atMs)])
      return row.map {
        ReconciliationClaim(appId: appId, environment: environment, reconciledThroughMs: $0.optionalInt(0))
      }
    }
  }

  /// See ``ServerAPISyncStore/completeReconciliation(appId:environment:owner:reconciledThroughMs:)``.
  public func completeReconciliation(
    appId: String, environment: Environment, owner: String, reconciledThroughMs: Int64?
  ) async throws(StoreError) {
    let changed = try await pool.run { db throws(StoreError) in
      try db.run(
        """
        UPDATE reconciliations SET lease_owner = NULL, lease_until_ms = 0,
          reconciled_through_ms = COALESCE($1, reconciled_through_ms)
        WHERE app_id = $2 AND environment = $3 AND lease_owner = $4
        """, [.optional(reconciledThroughMs), .text(appId), .text(environment.rawValue), .text(owner)])
    }
    if changed == 0 { throw StoreError.notFound("reconciliation claim of app", appId) }
  }
}
