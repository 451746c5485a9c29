import SubscriptionDomain
import SubscriptionStorage

// MARK: Named entitlements (DESIGN "Access model")

extension PostgresStore {
  /// Locks the app's row until the transaction ends, so that catalog checks and catalog changes
  /// of one app (entitlements against products) are serialized across instances.
  /// - Throws: `notFound` for an unknown app.
  static func lockApp(_ db: PGConnection, _ appId: String) throws(StoreError) {
    guard try db.first("SELECT 1 FROM apps WHERE app_id = $1 FOR UPDATE", [.text(appId)]) != nil
    else { throw StoreError.notFound("app", appId) }
  }

  /// See ``Store/putEntitlements(appId:entitlements:)``.
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

  /// See ``Store/entitlements(appId:)``.
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

  /// See ``Store/deleteEntitlements(appId:entitlementIds:)``.
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
