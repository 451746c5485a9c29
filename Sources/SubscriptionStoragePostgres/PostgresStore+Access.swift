import SubscriptionDomain
import SubscriptionStorage

// MARK: Named entitlements (docs/architecture.md "Access model")

extension PostgresStore {
  /// Locks the app's row until the transaction ends, so that catalog checks and catalog changes
  /// of one app (entitlements against products) are serialized across instances.
  /// - Throws: `notFound` for an unknown app.
  static func lockApp(_ db: PGConnection, _ appId: String) throws(StoreError) {
    guard try db.first("SELECT 1 FROM apps WHERE app_id = $1 FOR UPDATE", [.text(appId)]) != nil
    else { throw StoreError.notFound("app", appId) }
  }

  /// See ``CatalogStore/putEntitlements(appId:entitlements:)``.
  public func putEntitlements(appId: String, entitlements: [EntitlementDefinition])
    async throws(StoreError)
  {
    var encoded: [EntitlementRow] = []
    for e in entitlements {
      encoded.append(EntitlementRow(id: e.entitlementId, payload: try PayloadCodec.encodeJSON(e)))
    }
    let rows = encoded
    try await pool.transaction { db throws(StoreError) in
      try Self.lockApp(db, appId)
      let catalog = try db.query("SELECT product_id FROM products WHERE app_id = $1", [.text(appId)])
        .map { $0.text(0) }
      try StoreValidation.validate(entitlements, catalog: Set(catalog))
      for row in rows {
        try db.run(
          """
          INSERT INTO entitlements(app_id, entitlement_id, payload) VALUES($1, $2, $3)
          ON CONFLICT (app_id, entitlement_id) DO UPDATE SET payload = excluded.payload
          """, [.text(appId), .text(row.id), .bytes(row.payload)])
      }
    }
  }

  private struct EntitlementRow: Sendable {
    var id: String
    var payload: [UInt8]
  }

  /// See ``CatalogStore/entitlements(appId:)``.
  public func entitlements(appId: String) async throws(StoreError) -> [EntitlementDefinition] {
    let payloads = try await pool.run { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.query(
        "SELECT payload FROM entitlements WHERE app_id = $1 ORDER BY entitlement_id", [.text(appId)]
      ).map { $0.bytes(0) }
    }
    var result: [EntitlementDefinition] = []
    for p in payloads { result.append(try PayloadCodec.decodeJSON(EntitlementDefinition.self, p)) }
    return result
  }

  /// See ``CatalogStore/deleteEntitlements(appId:entitlementIds:)``.
  public func deleteEntitlements(appId: String, entitlementIds: [String]) async throws(StoreError)
    -> [String]
  {
    try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      var deleted: [String] = []
      for id in entitlementIds {
        let n = try db.run(
          "DELETE FROM entitlements WHERE app_id = $1 AND entitlement_id = $2",
          [.text(appId), .text(id)])
        if n > 0 { deleted.append(id) }
      }
      return deleted
    }
  }
}

// MARK: Erasure

extension PostgresStore {
  /// See ``CatalogStore/deleteProducts(appId:productIds:)``.
  public func deleteProducts(appId: String, productIds: [String]) async throws(StoreError)
    -> [String]
  {
    try await pool.transaction { db throws(StoreError) in
      // Serialized with PutEntitlements' catalog check (see lockApp).
      try Self.lockApp(db, appId)
      var deleted: [String] = []
      for id in productIds {
        let n = try db.run(
          "DELETE FROM products WHERE app_id = $1 AND product_id = $2", [.text(appId), .text(id)])
        if n > 0 { deleted.append(id) }
      }
      guard !deleted.isEmpty else { return deleted }
      // The named entitlements that list them lose them in the same commit.
      let gone = Set(deleted)
      for row in try db.query("SELECT payload FROM entitlements WHERE app_id = $1", [.text(appId)]) {
        var e = try PayloadCodec.decodeJSON(EntitlementDefinition.self, row.bytes(0))
        guard e.productIds.contains(where: gone.contains) else { continue }
        e.productIds.removeAll(where: gone.contains)
        try db.run(
          "UPDATE entitlements SET payload = $1 WHERE app_id = $2 AND entitlement_id = $3",
          [.bytes(try PayloadCodec.encodeJSON(e)), .text(appId), .text(e.entitlementId)])
      }
      return deleted
    }
  }

  /// See ``ErasureStore/deleteUsers(appId:userIds:)``.
  public func deleteUsers(appId: String, userIds: [String]) async throws(StoreError) -> UserErasure {
    guard !userIds.contains("") else { throw StoreError(.invalidArgument, "user_id is empty") }
    let ids = Array(Set(userIds))
    defer { historyCache.invalidate(appId: appId, userIds: ids) }
    return try await pool.transaction { db throws(StoreError) in
      try requireApp(db, appId)
      var erased = UserErasure()
      var erasedKeys: [Int64] = []
      for userId in ids {
        // FOR UPDATE: a concurrent ingest or transition run for these users (which holds a lock
        // on the user's row) finishes first, so no row of theirs is left behind.
        let keys = try db.query(
          "SELECT user_key FROM users WHERE app_id = $1 AND user_id = $2 ORDER BY user_key FOR UPDATE",
          [.text(appId), .text(userId)]
        ).map { $0.int(0) }
        erasedKeys += keys
        for key in keys {
          erased.histories += 1
          erased.transactions += try db.run("DELETE FROM transactions WHERE user_key = $1", [.int(key)])
          erased.renewalInfos += try db.run("DELETE FROM renewal_infos WHERE user_key = $1", [.int(key)])
          try db.run("DELETE FROM renewal_info_removals WHERE user_key = $1", [.int(key)])
          try db.run("DELETE FROM ownership_gaps WHERE user_key = $1", [.int(key)])
          erased.receipts += try db.run("DELETE FROM receipts WHERE user_key = $1", [.int(key)])
          try Self.eraseEvents(db, key)
          try db.run("DELETE FROM user_summaries WHERE user_key = $1", [.int(key)])
          try db.run("DELETE FROM users WHERE user_key = $1", [.int(key)])
        }
        try db.run(
          "DELETE FROM history_syncs WHERE app_id = $1 AND user_id = $2", [.text(appId), .text(userId)])
        try db.run(
          "DELETE FROM app_accounts WHERE app_id = $1 AND user_id = $2", [.text(appId), .text(userId)])
        try db.run(
          "DELETE FROM ownership_transfers WHERE app_id = $1 AND (previous_user_id = $2 OR new_user_id = $2)",
          [.text(appId), .text(userId)])
        try db.run(
          "DELETE FROM app_account_token_writes WHERE app_id = $1 AND user_id = $2", [.text(appId), .text(userId)])
      }
      // The other instances find these users gone and clear their caches (the feed's rows hold
      // keys only: nothing of the erased users' ids stays behind).
      try Self.recordUserChanges(db, erasedKeys)
      return erased
    }
  }
}
