import Foundation
import SubscriptionDomain
import SubscriptionStorage

/// A page query helper: `rows` holds up to `limit + 1` items; the extra one only says "there is more".
private func makePage<T>(_ rows: [T], limit: Int, cursor: (T) -> String) -> Page<T> {
  if rows.count > limit {
    let items = Array(rows.prefix(limit))
    return Page(items: items, nextCursor: items.last.map(cursor))
  }
  return Page(items: rows, nextCursor: nil)
}

private func exists(_ db: SQLiteConnection, _ sql: String, _ values: [SQLValue]) throws(StoreError)
  -> Bool
{
  try db.first(sql, values) { _ in true } ?? false
}

func requireApp(_ db: SQLiteConnection, _ appId: String) throws(StoreError) {
  guard try exists(db, "SELECT 1 FROM apps WHERE app_id = ?", [.text(appId)]) else {
    throw StoreError.notFound("app", appId)
  }
}

/// The statements on hot paths, named so `QueryPlanTests` can check each is an index lookup.
enum HotQueries {
  static let userKey =
    "SELECT user_key FROM users WHERE app_id = ? AND environment = ? AND user_id = ?"
  /// A user's transactions (kind 0) and renewal infos (kind 1, ordered by original transaction
  /// id) in one statement.
  static let history = """
    SELECT 0, transaction_id, original_transaction_id, purchase_ms, payload FROM transactions
    WHERE user_key = ?1
    UNION ALL
    SELECT 1, original_transaction_id, NULL, NULL, payload FROM renewal_infos WHERE user_key = ?1
    """
  /// A user's renewal infos alone (a history's first page), ordered by original transaction id.
  static let renewalInfos = """
    SELECT original_transaction_id, payload FROM renewal_infos WHERE user_key = ?
    ORDER BY original_transaction_id
    """
  static let transactionPage = """
    SELECT transaction_id, original_transaction_id, purchase_ms, payload FROM transactions
    WHERE user_key = ? AND (purchase_ms, transaction_id) > (?, ?)
    ORDER BY purchase_ms, transaction_id LIMIT ?
    """
  // CROSS JOIN fixes the loop order (SQLite keeps it as written): the few transactions with this
  // original id first, then their users by primary key. With a plain JOIN and no ANALYZE
  // statistics the planner walked every user of the app and environment and probed each one
  // (10,000 probes per routed notification at 100,000 users over 10 apps).
  static let usersByOriginalTransaction = """
    SELECT DISTINCT u.user_id FROM transactions t CROSS JOIN users u ON u.user_key = t.user_key
    WHERE t.original_transaction_id = ?1 AND u.app_id = ?2 AND u.environment = ?3
      AND NOT EXISTS (SELECT 1 FROM ownership_gaps g WHERE g.user_key = t.user_key
        AND g.original_transaction_id = ?1 AND g.until_ms IS NULL)
    ORDER BY u.user_id
    """
  static let keyByHash = """
    SELECT key_id, tenant_id, role, app_ids, description, key_hash, display_prefix, created_ms, \
    last_used_ms, revoked_ms FROM api_keys WHERE key_hash = ?
    """
  static let notificationSeen =
    "SELECT 1 FROM notifications WHERE app_id = ? AND notification_id = ?"
  static let appById = """
    SELECT a.app_id, a.tenant_id, a.bundle_id, a.apple_app_id, a.display_name, a.policy, a.created_ms, \
    s.current_fingerprint, k.key_id, k.issuer_id, k.public_key_fingerprint, k.public_key_pem, k.set_ms, \
    a.ownership_tracked, a.small_business_program FROM apps a LEFT JOIN shared_secrets s ON s.app_id = a.app_id \
    LEFT JOIN in_app_purchase_keys k ON k.app_id = a.app_id WHERE a.app_id = ?
    """
  static let pruneNotifications = "DELETE FROM notifications WHERE received_ms < ?"
  static let dueReceipts = """
    SELECT u.app_id, u.environment, u.user_id, r.receipt_data, r.last_verified_ms, r.next_due_ms, \
    r.failure_count FROM receipts r JOIN users u ON u.user_key = r.user_key
    WHERE r.next_due_ms <= ? ORDER BY r.next_due_ms, u.app_id, u.environment, u.user_id LIMIT ?
    """
  /// ``dueReceipts`` with the row key (column 7), for the claim's update.
  static let dueReceiptKeys = """
    SELECT u.app_id, u.environment, u.user_id, r.receipt_data, r.last_verified_ms, r.next_due_ms, \
    r.failure_count, r.user_key FROM receipts r JOIN users u ON u.user_key = r.user_key
    WHERE r.next_due_ms <= ? ORDER BY r.next_due_ms, u.app_id, u.environment, u.user_id LIMIT ?
    """
  static let all = [
    userKey, history, renewalInfos, transactionPage, usersByOriginalTransaction,
    keyByHash, notificationSeen, appById, pruneNotifications, dueReceipts, dueReceiptKeys,
  ]
}

extension SQLiteStore: Store {
  private static let appColumns = """
    a.app_id, a.tenant_id, a.bundle_id, a.apple_app_id, a.display_name, a.policy, a.created_ms, \
    s.current_fingerprint, k.key_id, k.issuer_id, k.public_key_fingerprint, k.public_key_pem, k.set_ms, \
    a.ownership_tracked, a.small_business_program FROM apps a LEFT JOIN shared_secrets s ON s.app_id = a.app_id \
    LEFT JOIN in_app_purchase_keys k ON k.app_id = a.app_id
    """

  private static func appRecord(_ r: SQLRow) throws(StoreError) -> AppRecord {
    AppRecord(
      appId: r.text(0), tenantId: r.text(1), bundleId: r.text(2), appleAppId: r.optionalInt(3),
      displayName: r.text(4),
      policy: try PayloadCodec.decodeJSON(EligibilityPolicy.self, r.blob(5)),
      createdMs: r.int(6), sharedSecretFingerprint: r.optionalText(7),
      inAppPurchaseKey: r.optionalText(8).map {
        InAppPurchaseKeyInfo(
          keyId: $0, issuerId: r.text(9), publicKeyFingerprint: r.text(10),
          publicKeyPEM: r.text(11), setMs: r.int(12))
      }, ownershipTracked: r.int(13) != 0, smallBusinessProgram: r.int(14) != 0)
  }

  private static let keyColumns = """
    key_id, tenant_id, role, app_ids, description, key_hash, display_prefix, created_ms, \
    last_used_ms, revoked_ms FROM api_keys
    """

  private static func keyRecord(_ r: SQLRow) throws(StoreError) -> ApiKeyRecord {
    guard let role = ApiKeyRecord.Role(rawValue: r.text(2)) else {
      throw StoreError(.corrupt, "API key \(r.text(0)) has unknown role \(r.text(2))")
    }
    return ApiKeyRecord(
      keyId: r.text(0), tenantId: r.optionalText(1), role: role,
      appIds: try PayloadCodec.decodeJSON([String].self, r.blob(3)), description: r.text(4),
      keyHash: r.blob(5), displayPrefix: r.text(6), createdMs: r.int(7),
      lastUsedMs: r.optionalInt(8),
      revokedMs: r.optionalInt(9))
  }

  // MARK: Tenants

  /// See ``TenantStore/createTenant(_:)``.
  public func createTenant(_ tenant: TenantRecord) async throws(StoreError) {
    try await writer.write { db throws(StoreError) in
      if try exists(db, "SELECT 1 FROM tenants WHERE tenant_id = ?", [.text(tenant.tenantId)]) {
        throw StoreError(.alreadyExists, "tenant \"\(tenant.tenantId)\" already exists")
      }
      try db.run(
        "INSERT INTO tenants(tenant_id, name, disabled, created_ms) VALUES(?, ?, ?, ?)",
        [
          .text(tenant.tenantId), .text(tenant.name), .bool(tenant.disabled),
          .int(tenant.createdMs),
        ])
    }
  }

  private static func tenantRecord(_ r: SQLRow) -> TenantRecord {
    TenantRecord(tenantId: r.text(0), name: r.text(1), disabled: r.bool(2), createdMs: r.int(3))
  }

  /// See ``TenantStore/tenant(id:)``.
  public func tenant(id tenantId: String) async throws(StoreError) -> TenantRecord {
    if let cached = cache.tenant(tenantId) { return cached }
    let generation = cache.generation
    let tenant = try await readers.read { db throws(StoreError) in
      guard
        let t = try db.first(
          "SELECT tenant_id, name, disabled, created_ms FROM tenants WHERE tenant_id = ?",
          [.text(tenantId)], Self.tenantRecord)
      else { throw StoreError.notFound("tenant", tenantId) }
      return t
    }
    cache.fill(generation, tenant: tenant)
    return tenant
  }

  /// See ``TenantStore/listTenants(page:)``.
  public func listTenants(page: PageRequest) async throws(StoreError) -> Page<TenantRecord> {
    let limit = page.limit
    return try await readers.read { db throws(StoreError) in
      let rows = try db.all(
        "SELECT tenant_id, name, disabled, created_ms FROM tenants WHERE tenant_id > ? ORDER BY tenant_id LIMIT ?",
        [.text(page.cursor ?? ""), .int(Int64(limit + 1))], Self.tenantRecord)
      return makePage(rows, limit: limit) { $0.tenantId }
    }
  }

  /// See ``TenantStore/setTenantDisabled(id:disabled:)``.
  public func setTenantDisabled(id tenantId: String, disabled: Bool) async throws(StoreError)
    -> TenantRecord
  {
    defer { cache.invalidate(tenant: tenantId) }
    return try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE tenants SET disabled = ? WHERE tenant_id = ?", [.bool(disabled), .text(tenantId)])
      guard
        let t = try db.first(
          "SELECT tenant_id, name, disabled, created_ms FROM tenants WHERE tenant_id = ?",
          [.text(tenantId)], Self.tenantRecord)
      else { throw StoreError.notFound("tenant", tenantId) }
      return t
    }
  }

  // MARK: Apps

  /// See ``CatalogStore/createApp(_:)``.
  public func createApp(_ app: AppRecord) async throws(StoreError) {
    let policy = try PayloadCodec.encodeJSON(app.policy)
    try await writer.write { db throws(StoreError) in
      guard try exists(db, "SELECT 1 FROM tenants WHERE tenant_id = ?", [.text(app.tenantId)])
      else {
        throw StoreError.notFound("tenant", app.tenantId)
      }
      if try exists(db, "SELECT 1 FROM apps WHERE app_id = ?", [.text(app.appId)]) {
        throw StoreError(.alreadyExists, "app \"\(app.appId)\" already exists")
      }
      if try exists(
        db, "SELECT 1 FROM apps WHERE tenant_id = ? AND bundle_id = ?",
        [.text(app.tenantId), .text(app.bundleId)])
      {
        throw StoreError(.alreadyExists, "bundle id \"\(app.bundleId)\" is already registered")
      }
      try db.run(
        """
        INSERT INTO apps(app_id, tenant_id, bundle_id, apple_app_id, display_name, policy, created_ms,
          ownership_tracked)
        VALUES(?, ?, ?, ?, ?, ?, ?, ?)
        """,
        [
          .text(app.appId), .text(app.tenantId), .text(app.bundleId), .optional(app.appleAppId),
          .text(app.displayName), .blob(policy), .int(app.createdMs),
          .int(app.policy.sharesInEveryEnvironment ? 0 : 1),
        ])
    }
  }

  /// See ``CatalogStore/app(id:)``.
  public func app(id appId: String) async throws(StoreError) -> AppRecord {
    if let cached = cache.app(appId) { return cached }
    let generation = cache.generation
    let app = try await readers.read { db throws(StoreError) in
      guard
        let a = try db.first(HotQueries.appById, [.text(appId)], Self.appRecord)
      else { throw StoreError.notFound("app", appId) }
      return a
    }
    cache.fill(generation, app: app)
    return app
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
    return try await readers.read { db throws(StoreError) in
      let rows = try db.all(
        "SELECT \(Self.appColumns) WHERE a.tenant_id = ? AND a.app_id > ? ORDER BY a.app_id LIMIT ?",
        [.text(tenantId), .text(page.cursor ?? ""), .int(Int64(limit + 1))], Self.appRecord)
      return makePage(rows, limit: limit) { $0.appId }
    }
  }

  /// See ``CatalogStore/setPolicy(appId:policy:)``.
  public func setPolicy(appId: String, policy: EligibilityPolicy) async throws(StoreError)
    -> AppRecord
  {
    let encoded = try PayloadCodec.encodeJSON(policy)
    defer { cache.invalidate(app: appId) }
    return try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE apps SET policy = ?, ownership_tracked = MAX(ownership_tracked, ?) WHERE app_id = ?",
        [.blob(encoded), .int(policy.sharesInEveryEnvironment ? 0 : 1), .text(appId)])
      guard
        let a = try db.first(
          "SELECT \(Self.appColumns) WHERE a.app_id = ?", [.text(appId)], Self.appRecord)
      else { throw StoreError.notFound("app", appId) }
      return a
    }
  }

  /// See ``CatalogStore/setSmallBusinessProgram(appId:_:)``.
  public func setSmallBusinessProgram(appId: String, _ member: Bool) async throws(StoreError) -> AppRecord {
    defer { cache.invalidate(app: appId) }
    return try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE apps SET small_business_program = ? WHERE app_id = ?", [.int(member ? 1 : 0), .text(appId)])
      guard
        let a = try db.first(
          "SELECT \(Self.appColumns) WHERE a.app_id = ?", [.text(appId)], Self.appRecord)
      else { throw StoreError.notFound("app", appId) }
      return a
    }
  }

  /// See ``CatalogStore/updateApp(appId:appleAppId:displayName:)``.
  public func updateApp(appId: String, appleAppId: Int64?, displayName: String)
    async throws(StoreError) -> AppRecord
  {
    defer { cache.invalidate(app: appId) }
    return try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE apps SET apple_app_id = ?, display_name = ? WHERE app_id = ?",
        [appleAppId.map { .int($0) } ?? .null, .text(displayName), .text(appId)])
      guard
        let a = try db.first(
          "SELECT \(Self.appColumns) WHERE a.app_id = ?", [.text(appId)], Self.appRecord)
      else { throw StoreError.notFound("app", appId) }
      return a
    }
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
    defer { cache.invalidate(app: appId) }
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO shared_secrets(app_id, current_key_id, current_box, current_fingerprint, current_set_ms)
        VALUES(?, ?, ?, ?, ?)
        ON CONFLICT(app_id) DO UPDATE SET
          previous_key_id = current_key_id, previous_box = current_box,
          previous_fingerprint = current_fingerprint, previous_set_ms = current_set_ms,
          previous_valid_until_ms = ?,
          current_key_id = excluded.current_key_id, current_box = excluded.current_box,
          current_fingerprint = excluded.current_fingerprint, current_set_ms = excluded.current_set_ms
        """,
        [
          .text(appId), .text(sealed.keyId), .blob(sealed.box), .text(fingerprint), .int(atMs),
          .int(previousValidUntilMs),
        ])
    }
    return fingerprint
  }

  /// See ``CatalogStore/sharedSecrets(appId:)``.
  public func sharedSecrets(appId: String) async throws(StoreError) -> SharedSecrets? {
    let stored = try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.first(
        "SELECT \(SharedSecretSealing.columns) FROM shared_secrets WHERE app_id = ?", [.text(appId)]
      ) { SharedSecretSealing.stored($0) }
    }
    guard let stored else { return nil }
    return try SharedSecretSealing.open(stored, appId: appId, keyring: requireKeyring())
  }

  /// Re-seals every stored secret under the keyring's current master key (after a rotation), so the
  /// old key can then be removed from the keyring.
  /// - Returns: how many sealed values were re-sealed.
  /// - Throws: `secretUnavailable` if a value cannot be opened with the keyring.
  public func resealSecrets() async throws(StoreError) -> Int {
    let keyring = try requireKeyring()
    return try await writer.write { db throws(StoreError) in
      struct Part {
        var appId: String
        var column: String
        var keyId: String
        var box: [UInt8]
      }
      var parts: [Part] = []
      try db.query(
        "SELECT app_id, current_key_id, current_box, previous_key_id, previous_box FROM shared_secrets"
      ) { r in
        parts.append(Part(appId: r.text(0), column: "current", keyId: r.text(1), box: r.blob(2)))
        if let k = r.optionalText(3) {
          parts.append(Part(appId: r.text(0), column: "previous", keyId: k, box: r.blob(4)))
        }
      }
      var count = 0
      for part in parts where part.keyId != keyring.current.id {
        let resealed = try SharedSecretSealing.reseal(
          SealedSecret(keyId: part.keyId, box: part.box), appId: part.appId, keyring: keyring)
        try db.run(
          "UPDATE shared_secrets SET \(part.column)_key_id = ?, \(part.column)_box = ? WHERE app_id = ?",
          [.text(resealed.keyId), .blob(resealed.box), .text(part.appId)])
        count += 1
      }
      return count + (try Self.resealInAppPurchaseKeys(db, keyring)) + (try Self.resealWebhookSecrets(db, keyring))
    }
  }

  // MARK: Catalog

  /// See ``CatalogStore/putProducts(appId:products:)``.
  public func putProducts(appId: String, products: [Product]) async throws(StoreError) {
    var encoded: [(String, [UInt8])] = []
    for p in products { encoded.append((p.productId, try PayloadCodec.encodeJSON(p))) }
    let rows = encoded.map { ProductRow(productId: $0.0, payload: $0.1) }
    defer { cache.invalidate(app: appId) }
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      for row in rows {
        try db.run(
          """
          INSERT INTO products(app_id, product_id, payload) VALUES(?, ?, ?)
          ON CONFLICT(app_id, product_id) DO UPDATE SET payload = excluded.payload
          """, [.text(appId), .text(row.productId), .blob(row.payload)])
      }
    }
  }

  private struct ProductRow: Sendable {
    var productId: String
    var payload: [UInt8]
  }

  /// See ``CatalogStore/products(appId:)``.
  public func products(appId: String) async throws(StoreError) -> [Product] {
    if let cached = cache.products(appId) { return cached }
    let generation = cache.generation
    let products = try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.all(
        "SELECT payload FROM products WHERE app_id = ? ORDER BY product_id", [.text(appId)]
      ) { r throws(StoreError) in try PayloadCodec.decodeJSON(Product.self, r.blob(0)) }
    }
    cache.fill(generation, products: products, appId: appId)
    return products
  }

  // MARK: API keys

  /// See ``TenantStore/createApiKey(_:)``.
  public func createApiKey(_ key: ApiKeyRecord) async throws(StoreError) {
    try StoreValidation.validate(key)
    let appIds = try PayloadCodec.encodeJSON(key.appIds)
    try await writer.write { db throws(StoreError) in
      if let t = key.tenantId,
        try !exists(db, "SELECT 1 FROM tenants WHERE tenant_id = ?", [.text(t)])
      {
        throw StoreError.notFound("tenant", t)
      }
      if try exists(db, "SELECT 1 FROM api_keys WHERE key_id = ?", [.text(key.keyId)]) {
        throw StoreError(.alreadyExists, "API key \"\(key.keyId)\" already exists")
      }
      if try exists(db, "SELECT 1 FROM api_keys WHERE key_hash = ?", [.blob(key.keyHash)]) {
        throw StoreError(.alreadyExists, "an API key with this hash already exists")
      }
      try db.run(
        """
        INSERT INTO api_keys(key_id, tenant_id, role, app_ids, description, key_hash, display_prefix,
          created_ms, last_used_ms, revoked_ms) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """,
        [
          .text(key.keyId), .optional(key.tenantId), .text(key.role.rawValue), .blob(appIds),
          .text(key.description), .blob(key.keyHash), .text(key.displayPrefix), .int(key.createdMs),
          .optional(key.lastUsedMs), .optional(key.revokedMs),
        ])
    }
  }

  /// See ``TenantStore/apiKey(hash:)``.
  public func apiKey(hash: [UInt8]) async throws(StoreError) -> ApiKeyRecord? {
    // The index (or the cache's hash table) finds the row; the final comparison is constant-time.
    if let cached = cache.key(hash: hash) {
      return ConstantTime.equals(cached.keyHash, hash) ? cached : nil
    }
    let generation = cache.generation
    let found = try await readers.read { db throws(StoreError) in
      try db.first(HotQueries.keyByHash, [.blob(hash)], Self.keyRecord)
    }
    guard let found, ConstantTime.equals(found.keyHash, hash) else { return nil }
    cache.fill(generation, key: found)
    return found
  }

  /// See ``TenantStore/listApiKeys(tenantId:page:)``.
  public func listApiKeys(tenantId: String?, page: PageRequest) async throws(StoreError)
    -> Page<ApiKeyRecord>
  {
    let limit = page.limit
    return try await readers.read { db throws(StoreError) in
      let rows: [ApiKeyRecord]
      if let tenantId {
        rows = try db.all(
          "SELECT \(Self.keyColumns) WHERE tenant_id = ? AND key_id > ? ORDER BY key_id LIMIT ?",
          [.text(tenantId), .text(page.cursor ?? ""), .int(Int64(limit + 1))], Self.keyRecord)
      } else {
        rows = try db.all(
          "SELECT \(Self.keyColumns) WHERE tenant_id IS NULL AND key_id > ? ORDER BY key_id LIMIT ?",
          [.text(page.cursor ?? ""), .int(Int64(limit + 1))], Self.keyRecord)
      }
      return makePage(rows, limit: limit) { $0.keyId }
    }
  }

  /// See ``TenantStore/revokeApiKey(tenantId:keyId:atMs:)``.
  public func revokeApiKey(tenantId: String?, keyId: String, atMs: Int64) async throws(StoreError)
    -> ApiKeyRecord
  {
    defer { cache.invalidateKeys() }
    return try await writer.write { db throws(StoreError) in
      guard
        let key = try db.first(
          "SELECT \(Self.keyColumns) WHERE key_id = ?", [.text(keyId)], Self.keyRecord),
        key.tenantId == tenantId
      else { throw StoreError.notFound("API key", keyId) }
      if key.revokedMs != nil { return key }
      try db.run("UPDATE api_keys SET revoked_ms = ? WHERE key_id = ?", [.int(atMs), .text(keyId)])
      var revoked = key
      revoked.revokedMs = atMs
      return revoked
    }
  }

  /// See ``TenantStore/touchApiKey(keyId:atMs:)``. Writes at most once a minute per key.
  public func touchApiKey(keyId: String, atMs: Int64) async throws(StoreError) {
    let due = touchedKeys.withLock { touched -> Bool in
      if let last = touched[keyId], atMs - last < 60_000 { return false }
      touched[keyId] = atMs
      return true
    }
    guard due else { return }
    defer { cache.invalidateKeys() }
    try await writer.write { db throws(StoreError) in
      try db.run(
        "UPDATE api_keys SET last_used_ms = ? WHERE key_id = ? AND (last_used_ms IS NULL OR last_used_ms < ?)",
        [.int(atMs), .text(keyId), .int(atMs)])
    }
  }

  // MARK: Purchase data

  static func userKey(_ db: SQLiteConnection, _ user: UserKey, create: Bool)
    throws(StoreError)
    -> Int64?
  {
    let values: [SQLValue] = [
      .text(user.appId), .text(user.environment.rawValue), .text(user.userId),
    ]
    if let key = try db.first(HotQueries.userKey, values, { $0.int(0) }) {
      return key
    }
    guard create else { return nil }
    try db.run("INSERT INTO users(app_id, environment, user_id) VALUES(?, ?, ?)", values)
    return db.lastInsertRowID
  }

  /// Applies the batch (purchase sharing first) and logs the events it causes at `atMs`. Each
  /// user's stored rows are read once: the merge decides on them and they are the events'
  /// "before"; the "after" is that state with the merge's decisions applied.
  /// `catalogs` `nil`: no event is logged (``Configuration-swift.struct/logsEvents`` off).
  private static func apply(
    _ batch: [EncodedPurchases], atMs: Int64, _ db: SQLiteConnection, catalogs: EventCatalogCache?,
    summaryCatalogs: EventCatalogCache, summaryPolicies: PolicyCache
  ) throws(StoreError) -> IngestSummary {
    var policies: [String: OwnershipPolicy] = [:]
    for update in batch where policies[update.user.appId] == nil {
      policies[update.user.appId] = try OwnershipPolicy.read(db, update.user.appId)
    }
    var summary = IngestSummary()
    var summaryInputs: [String: (catalog: Catalog, policy: EligibilityPolicy)] = [:]
    for submitted in batch {
      let user = submitted.user
      // One writer: the user's row, if there, stays until this transaction commits.
      if submitted.onlyIfStored, try userKey(db, user, create: false) == nil {
        summary.erasedMeanwhile.append(user)
        continue
      }
      var ledger = SQLiteOwnershipLedger(
        db: db, appId: user.appId, environment: user.environment, catalogs: summaryCatalogs, policies: summaryPolicies)
      let madeBefore = summary.transfers.count
      // Under purchase sharing the events follow what the user owns, before and after the write.
      let tracked = policies[user.appId]?.needsLedger == true
      let gapsBefore = tracked ? try ledger.existingGaps(of: user.userId) : []
      let update = try PurchaseOwnership.settle(
        submitted, policy: policies[user.appId], summary: &summary, ledger: &ledger)
      if update.isEmpty { continue }
      guard let key = try userKey(db, update.user, create: true) else { continue }
      let before = try purchaseState(db, key)
      var state = before
      var changed = false
      // The domain's merge decides on the stored row (rules 13, 14); see the Store protocol.
      for incoming in update.transactions {
        guard let (stored, old) = state.merge(incoming.transaction) else { continue }
        changed = true
        let t = incoming.row(storing: stored)
        try db.run(
          """
          INSERT INTO transactions(user_key, transaction_id, original_transaction_id, purchase_ms,
            signed_ms, payload) VALUES(?, ?, ?, ?, ?, ?)
          ON CONFLICT(user_key, transaction_id) DO UPDATE SET
            original_transaction_id = excluded.original_transaction_id,
            purchase_ms = excluded.purchase_ms, signed_ms = excluded.signed_ms, payload = excluded.payload
          """,
          [
            .int(key), .text(t.transactionId), .text(t.originalTransactionId), .int(t.purchaseMs),
            .optional(t.signedMs), .blob(t.payload),
          ])
        if isCountedChange(stored, replacing: old) { summary.transactionsWritten += 1 }
      }
      for r in update.renewalInfos {
        let ids: [SQLValue] = [.int(key), .text(r.originalTransactionId)]
        guard let old = state.merge(r.version) else { continue }
        changed = true
        if let payload = r.payload {
          try db.run(
            """
            INSERT INTO renewal_infos(user_key, original_transaction_id, signed_ms, payload)
            VALUES(?, ?, ?, ?)
            ON CONFLICT(user_key, original_transaction_id) DO UPDATE SET
              signed_ms = excluded.signed_ms, payload = excluded.payload
            """, ids + [.optional(r.signedMs), .blob(payload)])
          if case .removed? = old {
            try db.run(
              "DELETE FROM renewal_info_removals WHERE user_key = ? AND original_transaction_id = ?", ids)
          }
        } else {
          try db.run(
            """
            INSERT INTO renewal_info_removals(user_key, original_transaction_id, as_of_ms) VALUES(?, ?, ?)
            ON CONFLICT(user_key, original_transaction_id) DO UPDATE SET as_of_ms = excluded.as_of_ms
            """, ids + [.optional(r.version.appleClock)])
          if case .present? = old {
            try db.run("DELETE FROM renewal_infos WHERE user_key = ? AND original_transaction_id = ?", ids)
          }
        }
        if isCountedChange(r.version, replacing: old) { summary.renewalInfosWritten += 1 }
      }
      // Per app, the catalog (events and summaries) and the policy (summaries), read once per commit.
      if summaryInputs[user.appId] == nil {
        summaryInputs[user.appId] = (try catalog(db, user.appId, summaryCatalogs), try policy(db, user.appId, summaryPolicies))
      }
      let (summaryCatalog, appPolicy) = summaryInputs[user.appId]!
      let gapsAfter = tracked ? try ownershipGaps(db, key) : []
      if changed, catalogs != nil {
        summary.eventsAppended += try logEvents(
          db, user: update.user, key: key, before: before, after: state, atMs: atMs,
          catalog: summaryCatalog, gapsBefore: gapsBefore, gapsAfter: gapsAfter
        ).count
      }
      let made = summary.transfers[madeBefore...]
      // The summaries of every user whose data or ownership the update changed, in its commit.
      try storeSummary(
        db, user: update.user, key: key, state: state, gaps: gapsAfter,
        atMs: atMs, catalog: summaryCatalog, policy: appPolicy)
      var summarized: Set<String> = [update.user.userId]
      for transfer in made {
        for userId in [transfer.previousUserId, transfer.newUserId] where summarized.insert(userId).inserted {
          let other = UserKey(appId: transfer.appId, environment: transfer.environment, userId: userId)
          guard let otherKey = try userKey(db, other, create: false) else { continue }
          try storeSummary(
            db, user: other, key: otherKey, state: try purchaseState(db, otherKey), gaps: try ownershipGaps(db, otherKey),
            atMs: atMs, catalog: summaryCatalog, policy: appPolicy)
        }
      }
      if !made.isEmpty, catalogs != nil {
        try PurchaseOwnership.logTransferEvents(made, catalog: summaryCatalog, log: &ledger)
        summary.eventsAppended += ledger.eventsAppended
      }
    }
    return summary
  }

  /// See ``PurchaseStore/ingest(_:atMs:)``.
  public func ingest(_ batch: [UserPurchases], atMs: Int64) async throws(StoreError)
    -> IngestSummary
  {
    try StoreValidation.validate(batch)
    let encoded = batch.map(EncodedPurchases.init)
    defer { historyCache.invalidate(batch.lazy.map(\.user)) }
    let catalogs = configuration.logsEvents ? eventCatalogs : nil
    let (summaryCatalogs, summaryPolicies) = (eventCatalogs, self.summaryPolicies)
    return try await writer.write { db throws(StoreError) in
      try Self.apply(
        encoded, atMs: atMs, db, catalogs: catalogs, summaryCatalogs: summaryCatalogs, summaryPolicies: summaryPolicies)
    }
  }

  /// See ``PurchaseStore/applyNotification(appId:notificationId:receivedMs:updates:)``.
  public func applyNotification(
    appId: String, notificationId: String, receivedMs: Int64, updates: [UserPurchases]
  ) async throws(StoreError) -> IngestSummary? {
    try StoreValidation.validate(updates)
    let encoded = updates.map(EncodedPurchases.init)
    defer { historyCache.invalidate(updates.lazy.map(\.user)) }
    let catalogs = configuration.logsEvents ? eventCatalogs : nil
    let (summaryCatalogs, summaryPolicies) = (eventCatalogs, self.summaryPolicies)
    return try await writer.write { db throws(StoreError) -> IngestSummary? in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO notifications(app_id, notification_id, received_ms) VALUES(?, ?, ?)
        ON CONFLICT(app_id, notification_id) DO NOTHING
        """, [.text(appId), .text(notificationId), .int(receivedMs)])
      guard db.changes == 1 else { return nil }
      return try Self.apply(
        encoded, atMs: receivedMs, db, catalogs: catalogs, summaryCatalogs: summaryCatalogs,
        summaryPolicies: summaryPolicies)
    }
  }

  /// See ``PurchaseStore/pruneNotifications(receivedBeforeMs:)``.
  public func pruneNotifications(receivedBeforeMs: Int64) async throws(StoreError) -> Int {
    try await writer.write { db throws(StoreError) in
      try db.run(HotQueries.pruneNotifications, [.int(receivedBeforeMs)])
      return db.changes
    }
  }

  /// See ``PurchaseStore/isNotificationProcessed(appId:notificationId:)``.
  public func isNotificationProcessed(appId: String, notificationId: String)
    async throws(StoreError)
    -> Bool
  {
    try await readers.read { db throws(StoreError) in
      try exists(db, HotQueries.notificationSeen, [.text(appId), .text(notificationId)])
    }
  }

  /// A transaction from a row of (transaction_id, original_transaction_id, purchase_ms, payload).
  private static func transaction(_ r: SQLRow) throws(StoreError) -> Transaction {
    try PayloadCodec.decodeTransaction(
      r.blob(3), transactionId: r.text(0), originalTransactionId: r.text(1), purchaseDate: r.int(2))
  }

  /// Transactions ordered by (purchase date, transaction id). Rows come in transaction id order,
  /// which is usually purchase order already; otherwise positions are sorted and each transaction
  /// moved once (sorting the array itself copies its elements, a dozen strings each, many times).
  private static func inPurchaseOrder(_ transactions: [Transaction]) -> [Transaction] {
    // Ids are compared only on equal dates (a tuple of both would retain and release two
    // strings per comparison).
    func before(_ a: Int, _ b: Int) -> Bool {
      let (dateA, dateB) = (transactions[a].purchaseDate, transactions[b].purchaseDate)
      return dateA != dateB ? dateA < dateB : transactions[a].transactionId < transactions[b].transactionId
    }
    if transactions.indices.dropFirst().allSatisfy({ !before($0, $0 - 1) }) { return transactions }
    return transactions.indices.sorted(by: before).map { transactions[$0] }
  }


  /// One user's history, in one read transaction. Reads through `userKeys` first; `epoch` is the
  /// cache's epoch read before the transaction's first statement.
  /// - Returns: the history and the size of its rows' payloads (for the history cache's estimate).
  private static func readHistory(
    _ db: SQLiteConnection, _ user: UserKey, _ userKeys: UserKeyCache, epoch: UInt64
  ) throws(StoreError)
    -> (history: UserHistory, payloadBytes: Int)
  {
    let key: Int64
    if let cached = userKeys.key(of: user) {
      key = cached
    } else {
      guard let found = try userKey(db, user, create: false) else { return (UserHistory(user: user), 0) }
      userKeys.insert(user, found, epoch: epoch)
      key = found
    }
    var transactions: [Transaction] = []
    var renewalInfos: [RenewalInfo] = []
    var payloadBytes = 0
    try db.query(HotQueries.history, [.int(key)]) { r throws(StoreError) in
      let payload = r.blob(4)
      payloadBytes += payload.count
      if r.int(0) == 0 {
        transactions.append(
          try PayloadCodec.decodeTransaction(
            payload, transactionId: r.text(1), originalTransactionId: r.text(2), purchaseDate: r.int(3)))
      } else {
        renewalInfos.append(try PayloadCodec.decodeRenewalInfo(payload, originalTransactionId: r.text(1)))
      }
    }
    let history = UserHistory(user: user, transactions: inPurchaseOrder(transactions), renewalInfos: renewalInfos)
    return (history, payloadBytes)
  }


  /// See ``PurchaseStore/history(of:)``. Answered from the history cache when the user's data has not
  /// changed since it was last read.
  public func history(of user: UserKey) async throws(StoreError) -> UserHistory {
    let ticket: HistoryCache.FillTicket?
    switch historyCache.lookup(user) {
    case .hit(let cached):
      await yieldOnSharedPool()
      return cached
    case .miss(let fill):
      ticket = fill
    }
    let userKeys = self.userKeys
    let historyCache = self.historyCache
    return try await readInline { db throws(StoreError) in
      let (history, payloadBytes) = try Self.readHistory(db, user, userKeys, epoch: userKeys.epoch)
      if let ticket { historyCache.fill(ticket, history, payloadBytes: payloadBytes) }
      return history
    }
  }

  /// See ``PurchaseStore/histories(appId:environment:userIds:)``. Users in the history cache are answered
  /// from it; the others are read in one read transaction.
  public func histories(
    appId: String, environment: Environment, userIds: [String]
  ) async throws(StoreError) -> [UserHistory] {
    let userKeys = self.userKeys
    let historyCache = self.historyCache
    var out: [UserHistory?] = []
    out.reserveCapacity(userIds.count)
    var missing: [(index: Int, user: UserKey, ticket: HistoryCache.FillTicket?)] = []
    for (index, userId) in userIds.enumerated() {
      let user = UserKey(appId: appId, environment: environment, userId: userId)
      switch historyCache.lookup(user) {
      case .hit(let cached): out.append(cached)
      case .miss(let ticket):
        out.append(nil)
        missing.append((index, user, ticket))
      }
    }
    if missing.isEmpty {
      await yieldOnSharedPool()
      return out.map { $0! }
    }
    let wanted = missing
    let read = try await readInline { db throws(StoreError) in
      let epoch = userKeys.epoch
      var read: [UserHistory] = []
      read.reserveCapacity(wanted.count)
      for item in wanted {
        let (history, payloadBytes) = try Self.readHistory(db, item.user, userKeys, epoch: epoch)
        if let ticket = item.ticket { historyCache.fill(ticket, history, payloadBytes: payloadBytes) }
        read.append(history)
      }
      return read
    }
    for (i, item) in missing.enumerated() { out[item.index] = read[i] }
    return out.map { $0! }
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
    return try await readers.read { db throws(StoreError) in
      guard let key = try Self.userKey(db, user, create: false) else {
        return Page(items: [], nextCursor: nil)
      }
      let rows = try db.all(
        HotQueries.transactionPage, [.int(key), .int(ms), .text(id), .int(Int64(limit + 1))]
      ) { r throws(StoreError) in try Self.transaction(r) }
      return makePage(rows, limit: limit) { "\($0.purchaseDate):\($0.transactionId)" }
    }
  }

  /// See ``PurchaseStore/renewalInfos(of:)``. From the history cache when it holds the user, else the
  /// renewal infos' rows alone: the user's transactions are not read.
  public func renewalInfos(of user: UserKey) async throws(StoreError) -> [RenewalInfo] {
    if let cached = historyCache.history(of: user) { return cached.renewalInfos }
    return try await readers.read { db throws(StoreError) in
      guard let key = try Self.userKey(db, user, create: false) else { return [] }
      return try db.all(HotQueries.renewalInfos, [.int(key)]) { r throws(StoreError) in
        try PayloadCodec.decodeRenewalInfo(r.blob(1), originalTransactionId: r.text(0))
      }
    }
  }

  /// See ``PurchaseStore/users(appId:environment:originalTransactionId:)``.
  public func users(
    appId: String, environment: Environment, originalTransactionId: String
  ) async throws(StoreError) -> [String] {
    // A short indexed read on the hot path (Apple's notifications and retention requests): inline.
    try await readInline { db throws(StoreError) in
      try db.all(
        HotQueries.usersByOriginalTransaction,
        [.text(originalTransactionId), .text(appId), .text(environment.rawValue)]
      ) { $0.text(0) }
    }
  }

  /// See ``PurchaseStore/listUsers(appId:environment:page:)``.
  public func listUsers(
    appId: String, environment: Environment, page: PageRequest
  ) async throws(StoreError) -> Page<String> {
    let limit = page.limit
    return try await readers.read { db throws(StoreError) in
      let rows = try db.all(
        """
        SELECT user_id FROM users WHERE app_id = ? AND environment = ? AND user_id > ?
        ORDER BY user_id LIMIT ?
        """,
        [
          .text(appId), .text(environment.rawValue), .text(page.cursor ?? ""),
          .int(Int64(limit + 1)),
        ]
      ) { $0.text(0) }
      return makePage(rows, limit: limit) { $0 }
    }
  }

  // MARK: Stored receipts

  private static func storedReceipt(_ r: SQLRow) throws(StoreError) -> StoredReceipt {
    guard let environment = Environment(rawValue: r.text(1)) else {
      throw StoreError(.corrupt, "user of app \(r.text(0)) has unknown environment \(r.text(1))")
    }
    return StoredReceipt(
      user: UserKey(appId: r.text(0), environment: environment, userId: r.text(2)),
      receiptData: r.text(3), lastVerifiedMs: r.optionalInt(4), nextDueMs: r.optionalInt(5),
      failureCount: Int(r.int(6)))
  }

  /// See ``ReceiptStore/saveReceipt(_:)``.
  public func saveReceipt(_ receipt: StoredReceipt) async throws(StoreError) {
    try StoreValidation.validate(receipt)
    try await writer.write { db throws(StoreError) in
      try requireApp(db, receipt.user.appId)
      guard let key = try Self.userKey(db, receipt.user, create: true) else { return }
      try db.run(
        """
        INSERT INTO receipts(user_key, receipt_data, last_verified_ms, next_due_ms, failure_count)
        VALUES(?, ?, ?, ?, ?)
        ON CONFLICT(user_key) DO UPDATE SET
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
    try await readers.read { db throws(StoreError) in
      guard let key = try Self.userKey(db, user, create: false) else { return nil }
      return try db.first(
        """
        SELECT receipt_data, last_verified_ms, next_due_ms, failure_count FROM receipts
        WHERE user_key = ?
        """, [.int(key)]
      ) { r in
        StoredReceipt(
          user: user, receiptData: r.text(0), lastVerifiedMs: r.optionalInt(1),
          nextDueMs: r.optionalInt(2), failureCount: Int(r.int(3)))
      }
    }
  }

  /// See ``ReceiptStore/dueReceipts(atMs:limit:)``.
  public func dueReceipts(atMs: Int64, limit: Int) async throws(StoreError) -> [StoredReceipt] {
    let n = Int64(min(max(limit, 1), 1000))
    return try await readers.read { db throws(StoreError) in
      try db.all(HotQueries.dueReceipts, [.int(atMs), .int(n)]) { r throws(StoreError) in
        try Self.storedReceipt(r)
      }
    }
  }

  /// See ``ReceiptStore/claimDueReceipts(atMs:limit:leaseUntilMs:)``: the due read and the lease update in
  /// one write transaction of the single writer, so two claims never return the same receipt.
  public func claimDueReceipts(atMs: Int64, limit: Int, leaseUntilMs: Int64)
    async throws(StoreError) -> [StoredReceipt]
  {
    try StoreValidation.validateLease(atMs: atMs, leaseUntilMs: leaseUntilMs)
    let n = Int64(min(max(limit, 1), 1000))
    return try await writer.write { db throws(StoreError) in
      let claimed = try db.all(
        HotQueries.dueReceiptKeys, [.int(atMs), .int(n)]
      ) { r throws(StoreError) in (key: r.int(7), receipt: try Self.storedReceipt(r)) }
      for c in claimed {
        try db.run(
          "UPDATE receipts SET next_due_ms = ? WHERE user_key = ?",
          [.int(leaseUntilMs), .int(c.key)])
      }
      return claimed.map(\.receipt)
    }
  }

  /// Runs `update` on the user's receipt row; `notFound` if there is none.
  private func updateReceipt(_ user: UserKey, _ sql: String, _ values: [SQLValue])
    async throws(StoreError)
  {
    try await writer.write { db throws(StoreError) in
      guard let key = try Self.userKey(db, user, create: false) else {
        throw StoreError.notFound("receipt of user", user.userId)
      }
      try db.run(sql, values + [.int(key)])
      if db.changes == 0 { throw StoreError.notFound("receipt of user", user.userId) }
    }
  }

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
      UPDATE receipts SET last_verified_ms = ?, next_due_ms = ?, failure_count = 0,
        receipt_data = COALESCE(?, receipt_data) WHERE user_key = ?
      """, [.int(atMs), .optional(nextDueMs), .optional(receiptData)])
  }

  /// See ``ReceiptStore/rescheduleReceipt(user:nextDueMs:failureCount:)``.
  public func rescheduleReceipt(user: UserKey, nextDueMs: Int64?, failureCount: Int)
    async throws(StoreError)
  {
    if failureCount < 0 { throw StoreError(.invalidArgument, "receipt: failure_count is negative") }
    try await updateReceipt(
      user, "UPDATE receipts SET next_due_ms = ?, failure_count = ? WHERE user_key = ?",
      [.optional(nextDueMs), .int(Int64(failureCount))])
  }

  // MARK: Audit

  /// See ``AuditStore/appendAudit(_:)``.
  public func appendAudit(_ entry: AuditEntry) async throws(StoreError) -> AuditEntry {
    try await writer.write { db throws(StoreError) in
      try db.run(
        """
        INSERT INTO audit_log(tenant_id, at_ms, actor_key_id, action, resource, details)
        VALUES(?, ?, ?, ?, ?, ?)
        """,
        [
          .optional(entry.tenantId), .int(entry.atMs), .text(entry.actorKeyId), .text(entry.action),
          .text(entry.resource), .text(entry.details),
        ])
      var e = entry
      e.sequence = db.lastInsertRowID
      return e
    }
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
    return try await readers.read { db throws(StoreError) in
      let columns =
        "sequence, tenant_id, at_ms, actor_key_id, action, resource, details FROM audit_log"
      let map: (SQLRow) -> AuditEntry = { r in
        AuditEntry(
          sequence: r.int(0), tenantId: r.optionalText(1), atMs: r.int(2), actorKeyId: r.text(3),
          action: r.text(4), resource: r.text(5), details: r.text(6))
      }
      let rows: [AuditEntry]
      if let tenantId {
        rows = try db.all(
          "SELECT \(columns) WHERE tenant_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
          [.text(tenantId), .int(start), .int(Int64(limit + 1))], map)
      } else {
        rows = try db.all(
          "SELECT \(columns) WHERE tenant_id IS NULL AND sequence > ? ORDER BY sequence LIMIT ?",
          [.int(start), .int(Int64(limit + 1))], map)
      }
      return makePage(rows, limit: limit) { String($0.sequence) }
    }
  }
}

// MARK: In-App Purchase keys

extension SQLiteStore {
  /// See ``CatalogStore/setInAppPurchaseKey(appId:key:)``.
  public func setInAppPurchaseKey(appId: String, key: InAppPurchaseKey) async throws(StoreError) {
    let keyring = try requireKeyring()
    let sealed = try InAppPurchaseKeySealing.seal(key, appId: appId, keyring: keyring)
    defer { cache.invalidate(app: appId) }
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      try db.run(
        """
        INSERT INTO in_app_purchase_keys(app_id, key_id, issuer_id, public_key_pem,
          public_key_fingerprint, set_ms, master_key_id, private_key_box)
        VALUES(?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT(app_id) DO UPDATE SET
          key_id = excluded.key_id, issuer_id = excluded.issuer_id,
          public_key_pem = excluded.public_key_pem,
          public_key_fingerprint = excluded.public_key_fingerprint, set_ms = excluded.set_ms,
          master_key_id = excluded.master_key_id, private_key_box = excluded.private_key_box
        """,
        [
          .text(appId), .text(key.keyId), .text(key.issuerId), .text(key.publicKeyPEM),
          .text(key.publicKeyFingerprint), .int(key.setMs), .text(sealed.keyId),
          .blob(sealed.box),
        ])
    }
  }

  /// See ``CatalogStore/inAppPurchaseKey(appId:)``.
  public func inAppPurchaseKey(appId: String) async throws(StoreError) -> InAppPurchaseKey? {
    let stored = try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.first(
        "SELECT \(InAppPurchaseKeySealing.columns) FROM in_app_purchase_keys WHERE app_id = ?", [.text(appId)]
      ) { InAppPurchaseKeySealing.stored($0) }
    }
    guard let stored else { return nil }
    return try InAppPurchaseKeySealing.open(stored, appId: appId, keyring: requireKeyring())
  }

  /// Re-seals the In-App Purchase keys not sealed with the current master key (part of
  /// ``resealSecrets()``, inside its write transaction).
  /// - Returns: how many were re-sealed.
  static func resealInAppPurchaseKeys(_ db: SQLiteConnection, _ keyring: MasterKeyring)
    throws(StoreError) -> Int
  {
    let rows = try db.all(
      "SELECT app_id, master_key_id, private_key_box FROM in_app_purchase_keys WHERE master_key_id <> ?",
      [.text(keyring.current.id)]
    ) { r in (appId: r.text(0), sealed: SealedSecret(keyId: r.text(1), box: r.blob(2))) }
    for row in rows {
      let resealed = try InAppPurchaseKeySealing.reseal(row.sealed, appId: row.appId, keyring: keyring)
      try db.run(
        "UPDATE in_app_purchase_keys SET master_key_id = ?, private_key_box = ? WHERE app_id = ?",
        [.text(resealed.keyId), .blob(resealed.box), .text(row.appId)])
    }
    return rows.count
  }
}

// MARK: App Store Server API sync

extension SQLiteStore {
  /// See ``ServerAPISyncStore/saveTransactionHistorySync(_:)``.
  public func saveTransactionHistorySync(_ sync: TransactionHistorySyncState) async throws(StoreError) {
    try StoreValidation.validate(sync)
    try await writer.write { db throws(StoreError) in
      try requireApp(db, sync.user.appId)
      try db.run(
        """
        INSERT INTO history_syncs(app_id, environment, user_id, transaction_id, revision, last_sync_ms)
        VALUES(?, ?, ?, ?, ?, ?)
        ON CONFLICT(app_id, environment, user_id) DO UPDATE SET
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
    try await readers.read { db throws(StoreError) in
      try db.first(
        """
        SELECT transaction_id, revision, last_sync_ms FROM history_syncs
        WHERE app_id = ? AND environment = ? AND user_id = ?
        """, [.text(user.appId), .text(user.environment.rawValue), .text(user.userId)]
      ) { r in
        TransactionHistorySyncState(
          user: user, transactionId: r.text(0), revision: r.optionalText(1), lastSyncMs: r.int(2))
      }
    }
  }

  /// See ``ServerAPISyncStore/claimReconciliation(appId:environment:owner:atMs:leaseUntilMs:)``. One write
  /// transaction: SQLite has one writer, so two claims never interleave.
  public func claimReconciliation(
    appId: String, environment: Environment, owner: String, atMs: Int64, leaseUntilMs: Int64
  ) async throws(StoreError) -> ReconciliationClaim? {
    try StoreValidation.validateClaim(owner: owner, atMs: atMs, leaseUntilMs: leaseUntilMs)
    return try await writer.write { db throws(StoreError) -> ReconciliationClaim? in
      try requireApp(db, appId)
      let keys: [SQLValue] = [.text(appId), .text(environment.rawValue)]
      try db.run(
        "INSERT INTO reconciliations(app_id, environment) VALUES(?, ?) ON CONFLICT DO NOTHING", keys)
      try db.run(
        """
        UPDATE reconciliations SET lease_owner = ?, lease_until_ms = ?
        WHERE app_id = ? AND environment = ?
          AND (lease_owner IS NULL OR lease_owner = ? OR lease_until_ms <= ?)
        """, [.text(owner), .int(leaseUntilMs)] + keys + [.text(owner), .int(atMs)])
      guard db.changes > 0 else { return nil }
      let through = try db.first(
        "SELECT reconciled_through_ms FROM reconciliations WHERE app_id = ? AND environment = ?", keys
      ) { $0.optionalInt(0) }
      return ReconciliationClaim(appId: appId, environment: environment, reconciledThroughMs: through ?? nil)
    }
  }

  /// See ``ServerAPISyncStore/completeReconciliation(appId:environment:owner:reconciledThroughMs:)``.
  public func completeReconciliation(
    appId: String, environment: Environment, owner: String, reconciledThroughMs: Int64?
  ) async throws(StoreError) {
    try await writer.write { db throws(StoreError) in
      try db.run(
        """
        UPDATE reconciliations SET lease_owner = NULL, lease_until_ms = 0,
          reconciled_through_ms = COALESCE(?, reconciled_through_ms)
        WHERE app_id = ? AND environment = ? AND lease_owner = ?
        """, [.optional(reconciledThroughMs), .text(appId), .text(environment.rawValue), .text(owner)])
      if db.changes == 0 { throw StoreError.notFound("reconciliation claim of app", appId) }
    }
  }
}
