import SubscriptionDomain
import SubscriptionStorage

// MARK: Named entitlements (docs/architecture.md "Access model")

extension SQLiteStore {
  /// See ``CatalogStore/putEntitlements(appId:entitlements:)``.
  public func putEntitlements(appId: String, entitlements: [EntitlementDefinition])
    async throws(StoreError)
  {
    var encoded: [EntitlementRow] = []
    for e in entitlements {
      encoded.append(EntitlementRow(id: e.entitlementId, payload: try PayloadCodec.encodeJSON(e)))
    }
    let rows = encoded
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      // Checked in the commit that writes them, so a concurrent product deletion cannot slip by.
      let catalog = try db.all(
        "SELECT product_id FROM products WHERE app_id = ?", [.text(appId)]) { $0.text(0) }
      try StoreValidation.validate(entitlements, catalog: Set(catalog))
      for row in rows {
        try db.run(
          """
          INSERT INTO entitlements(app_id, entitlement_id, payload) VALUES(?, ?, ?)
          ON CONFLICT(app_id, entitlement_id) DO UPDATE SET payload = excluded.payload
          """, [.text(appId), .text(row.id), .blob(row.payload)])
      }
    }
  }

  private struct EntitlementRow: Sendable {
    var id: String
    var payload: [UInt8]
  }

  /// See ``CatalogStore/entitlements(appId:)``.
  public func entitlements(appId: String) async throws(StoreError) -> [EntitlementDefinition] {
    try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.all(
        "SELECT payload FROM entitlements WHERE app_id = ? ORDER BY entitlement_id", [.text(appId)]
      ) { r throws(StoreError) in try PayloadCodec.decodeJSON(EntitlementDefinition.self, r.blob(0)) }
    }
  }

  /// See ``CatalogStore/deleteEntitlements(appId:entitlementIds:)``.
  public func deleteEntitlements(appId: String, entitlementIds: [String]) async throws(StoreError)
    -> [String]
  {
    try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      var deleted: [String] = []
      for id in entitlementIds {
        try db.run(
          "DELETE FROM entitlements WHERE app_id = ? AND entitlement_id = ?",
          [.text(appId), .text(id)])
        if db.changes > 0 { deleted.append(id) }
      }
      return deleted
    }
  }
}

// MARK: Erasure

extension SQLiteStore {
  /// See ``CatalogStore/deleteProducts(appId:productIds:)``.
  public func deleteProducts(appId: String, productIds: [String]) async throws(StoreError)
    -> [String]
  {
    defer { cache.invalidate(app: appId) }
    return try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      var deleted: [String] = []
      for id in productIds {
        try db.run(
          "DELETE FROM products WHERE app_id = ? AND product_id = ?", [.text(appId), .text(id)])
        if db.changes > 0 { deleted.append(id) }
      }
      guard !deleted.isEmpty else { return deleted }
      // The named entitlements that list them lose them in the same commit.
      let gone = Set(deleted)
      let definitions = try db.all(
        "SELECT payload FROM entitlements WHERE app_id = ?", [.text(appId)]
      ) { r throws(StoreError) in try PayloadCodec.decodeJSON(EntitlementDefinition.self, r.blob(0)) }
      for var e in definitions where e.productIds.contains(where: gone.contains) {
        e.productIds.removeAll(where: gone.contains)
        try db.run(
          "UPDATE entitlements SET payload = ? WHERE app_id = ? AND entitlement_id = ?",
          [.blob(try PayloadCodec.encodeJSON(e)), .text(appId), .text(e.entitlementId)])
      }
      return deleted
    }
  }

  /// See ``ErasureStore/deleteUsers(appId:userIds:)``.
  public func deleteUsers(appId: String, userIds: [String]) async throws(StoreError) -> UserErasure {
    guard !userIds.contains("") else { throw StoreError(.invalidArgument, "user_id is empty") }
    let ids = Array(Set(userIds))
    let erased = try await writer.write { db throws(StoreError) in
      try requireApp(db, appId)
      var erased = UserErasure()
      for userId in ids {
        let keys = try db.all(
          "SELECT user_key FROM users WHERE app_id = ? AND user_id = ?",
          [.text(appId), .text(userId)]
        ) { $0.int(0) }
        for key in keys {
          erased.histories += 1
          try db.run("DELETE FROM transactions WHERE user_key = ?", [.int(key)])
          erased.transactions += db.changes
          try db.run("DELETE FROM renewal_infos WHERE user_key = ?", [.int(key)])
          erased.renewalInfos += db.changes
          try db.run("DELETE FROM renewal_info_removals WHERE user_key = ?", [.int(key)])
          try db.run("DELETE FROM ownership_gaps WHERE user_key = ?", [.int(key)])
          try db.run("DELETE FROM receipts WHERE user_key = ?", [.int(key)])
          erased.receipts += db.changes
          try Self.eraseEvents(db, key)
          try db.run("DELETE FROM user_summaries WHERE user_key = ?", [.int(key)])
          try db.run("DELETE FROM users WHERE user_key = ?", [.int(key)])
        }
        try db.run(
          "DELETE FROM history_syncs WHERE app_id = ? AND user_id = ?", [.text(appId), .text(userId)])
        try db.run(
          "DELETE FROM app_accounts WHERE app_id = ? AND user_id = ?", [.text(appId), .text(userId)])
        try db.run(
          "DELETE FROM ownership_transfers WHERE app_id = ? AND (previous_user_id = ?2 OR new_user_id = ?2)",
          [.text(appId), .text(userId)])
        try Self.eraseAppAccountTokenWrites(db, appId: appId, userId: userId)
      }
      return erased
    }
    // Their user_keys are gone; a later ingest of the same ids gets new ones.
    userKeys.removeAll()
    historyCache.invalidate(appId: appId, userIds: ids)
    return erased
  }
}
