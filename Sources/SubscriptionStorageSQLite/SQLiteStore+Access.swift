import SubscriptionDomain
import SubscriptionStorage

// MARK: Named entitlements (DESIGN "Access model")

extension SQLiteStore {
  /// See ``Store/putEntitlements(appId:entitlements:)``.
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

  /// See ``Store/entitlements(appId:)``.
  public func entitlements(appId: String) async throws(StoreError) -> [EntitlementDefinition] {
    try await readers.read { db throws(StoreError) in
      try requireApp(db, appId)
      return try db.all(
        "SELECT payload FROM entitlements WHERE app_id = ? ORDER BY entitlement_id", [.text(appId)]
      ) { r throws(StoreError) in try PayloadCodec.decodeJSON(EntitlementDefinition.self, r.blob(0)) }
    }
  }

  /// See ``Store/deleteEntitlements(appId:entitlementIds:)``.
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
