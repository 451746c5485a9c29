import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

// MARK: AdminService: named entitlements (docs/architecture.md "Access model")

extension SubstatusService {
  /// At most this many entitlements per PutEntitlements or DeleteEntitlements call, and ids per
  /// GetEntitlements filter.
  static let maxEntitlementsPerCall = 100
  /// At most this many products per entitlement definition.
  static let maxProductsPerEntitlement = 1000

  public func putEntitlements(_ request: Substatus_V1_PutEntitlementsRequest, _ context: ServerContext) async throws -> Substatus_V1_PutEntitlementsResponse {
    let cached = try await app(request.appID, context)
    guard !request.entitlements.isEmpty else { throw invalidArgument("entitlements", "must not be empty") }
    guard request.entitlements.count <= Self.maxEntitlementsPerCall else {
      throw batchTooLarge("entitlements", limit: Self.maxEntitlementsPerCall, count: request.entitlements.count)
    }
    // Checked against the catalog as stored now (not the cached one); the store checks again in
    // the commit that writes them.
    let catalog = Set(try await stored { () throws(StoreError) in try await catalogStore.products(appId: request.appID) }.map(\.productId))
    var violations: [(field: String, description: String)] = []
    var seen = Set<String>()
    var definitions: [EntitlementDefinition] = []
    for (i, wire) in request.entitlements.enumerated() {
      let field = "entitlements[\(i)]"
      do {
        try requireID(wire.entitlementID, "\(field).entitlement_id", limits: limits)
      } catch {
        violations.append(contentsOf: error.fieldViolations)
      }
      if !wire.entitlementID.isEmpty, !seen.insert(wire.entitlementID).inserted {
        violations.append(("\(field).entitlement_id", "\(ErrorText.quoted(wire.entitlementID)) appears twice"))
      }
      if wire.displayName.utf8.count > 200 {
        violations.append(("\(field).display_name", "longer than 200 bytes"))
      } else if let problem = DisplayText.problem(in: wire.displayName) {
        violations.append(("\(field).display_name", problem))
      }
      if wire.productIDs.count > Self.maxProductsPerEntitlement {
        throw batchTooLarge("\(field).product_ids", limit: Self.maxProductsPerEntitlement, count: wire.productIDs.count)
      }
      var products = Set<String>()
      for (j, productId) in wire.productIDs.enumerated() {
        let productField = "\(field).product_ids[\(j)]"
        if !products.insert(productId).inserted {
          violations.append((productField, "\(ErrorText.quoted(productId)) appears twice"))
        } else if !catalog.contains(productId) {
          violations.append((productField, "product \(ErrorText.quoted(productId)) is not in the app's catalog"))
        }
      }
      definitions.append(EntitlementDefinition(entitlementId: wire.entitlementID, displayName: wire.displayName, productIds: wire.productIDs))
    }
    guard violations.isEmpty else { throw invalidArguments(violations) }
    try await stored { () throws(StoreError) in try await catalogStore.putEntitlements(appId: request.appID, entitlements: definitions) }
    invalidateApp(request.appID)
    await audit(
      context, tenant: cached.app.tenantId, action: "PutEntitlements", resource: "apps/\(request.appID)/entitlements",
      details: definitions.map(\.entitlementId).joined(separator: ","))
    var response = Substatus_V1_PutEntitlementsResponse()
    response.entitlements = definitions.map(\.wire)
    return response
  }

  public func listEntitlements(_ request: Substatus_V1_ListEntitlementsRequest, _ context: ServerContext) async throws -> Substatus_V1_ListEntitlementsResponse {
    _ = try await app(request.appID, context)
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    // Definitions are few: read them all fresh and page by position, as ListProducts does.
    let all = try await stored { () throws(StoreError) in try await catalogStore.entitlements(appId: request.appID) }
    let start = try page.cursor.map { cursor throws(RPCError) -> Int in
      guard let n = Int(cursor), n >= 0, n <= all.count else { throw invalidArgument("page_token", "out of range") }
      return n
    } ?? 0
    let end = min(start + page.limit, all.count)
    var response = Substatus_V1_ListEntitlementsResponse()
    response.entitlements = all[start..<end].map(\.wire)
    response.nextPageToken = end < all.count ? PageToken.encode(String(end)) : ""
    return response
  }

  public func deleteEntitlements(_ request: Substatus_V1_DeleteEntitlementsRequest, _ context: ServerContext) async throws -> Substatus_V1_DeleteEntitlementsResponse {
    let cached = try await app(request.appID, context)
    guard !request.entitlementIDs.isEmpty else { throw invalidArgument("entitlement_ids", "must not be empty") }
    guard request.entitlementIDs.count <= Self.maxEntitlementsPerCall else {
      throw batchTooLarge("entitlement_ids", limit: Self.maxEntitlementsPerCall, count: request.entitlementIDs.count)
    }
    for (i, id) in request.entitlementIDs.enumerated() { try requireID(id, "entitlement_ids[\(i)]", limits: limits) }
    let deleted = try await stored { () throws(StoreError) in
      try await catalogStore.deleteEntitlements(appId: request.appID, entitlementIds: request.entitlementIDs)
    }
    invalidateApp(request.appID)
    await audit(
      context, tenant: cached.app.tenantId, action: "DeleteEntitlements", resource: "apps/\(request.appID)/entitlements",
      details: deleted.joined(separator: ","))
    var response = Substatus_V1_DeleteEntitlementsResponse()
    response.deletedEntitlementIDs = deleted
    return response
  }

  /// The named entitlements of an evaluated user: every definition of the app, or those of
  /// `filter` (field `entitlement_ids`) in its order.
  func namedEntitlements(
    _ evaluation: SubscriptionEvaluation, history: UserHistory, app: CachedApp, filter: [String] = [],
    summary: UserSummary? = nil
  ) throws(RPCError) -> [Substatus_V1_NamedEntitlement] {
    var definitions = app.entitlements
    if !filter.isEmpty {
      guard filter.count <= Self.maxEntitlementsPerCall else {
        throw batchTooLarge("entitlement_ids", limit: Self.maxEntitlementsPerCall, count: filter.count)
      }
      definitions = []
      for (i, id) in filter.enumerated() {
        guard let definition = app.entitlements.first(where: { $0.entitlementId == id }) else {
          throw invalidArgument("entitlement_ids[\(i)]", "the app defines no entitlement \(ErrorText.quoted(id))")
        }
        definitions.append(definition)
      }
    }
    // From the summary that answered, when one did (the same facts, kept with it), else the history.
    if let summary { return summary.namedEntitlements(definitions, of: evaluation).map(\.wire) }
    return evaluation.namedEntitlements(definitions, history: history.transactions, renewals: history.renewalInfos).map(\.wire)
  }
}

/// `INVALID_ARGUMENT` with one `google.rpc.BadRequest` field violation per problem (AIP-193), so a
/// caller learns every bad field of a batch at once; the message names the first.
func invalidArguments(_ violations: [(field: String, description: String)]) -> RPCError {
  guard let first = violations.first else { return RPCError(code: .invalidArgument, message: "invalid request") }
  var badRequest = Google_Rpc_BadRequest()
  badRequest.fieldViolations = violations.map { v in
    var violation = Google_Rpc_BadRequest.FieldViolation()
    violation.field = v.field
    violation.description = v.description
    return violation
  }
  var status = Google_Rpc_Status()
  status.code = Int32(RPCError.Code.invalidArgument.rawValue)
  status.message = "\(first.field): \(first.description)" + (violations.count > 1 ? " (and \(violations.count - 1) more)" : "")
  status.details = [Google_Protobuf_Any(packing: badRequest)]
  // Hundreds of violations do not fit in a header block: the first ones that fit in the details'
  // bound are kept, and one more says how many were left out (StatusBounds).
  status = StatusBounds.status(status)
  var error = RPCError(code: .invalidArgument, message: StatusBounds.message(status.message))
  error.metadata.addBinary(status.serializedBytes(), forKey: StatusBounds.detailsKey)
  return error
}

extension RPCError {
  /// The field violations of an `INVALID_ARGUMENT` made by ``invalidArgument(_:_:)``.
  var fieldViolations: [(field: String, description: String)] {
    guard let bytes = metadata.firstBinary(forKey: "grpc-status-details-bin"),
      let status = try? Google_Rpc_Status(serializedBytes: bytes)
    else { return [] }
    return status.details.compactMap { try? $0.unpack(Google_Rpc_BadRequest.self) }
      .flatMap(\.fieldViolations).map { ($0.field, $0.description) }
  }
}

extension EntitlementDefinition {
  var wire: Substatus_V1_EntitlementDefinition {
    var e = Substatus_V1_EntitlementDefinition()
    e.entitlementID = entitlementId
    e.displayName = displayName
    e.productIDs = productIds
    return e
  }
}

extension NamedEntitlement {
  var wire: Substatus_V1_NamedEntitlement {
    var e = Substatus_V1_NamedEntitlement()
    e.entitlementID = entitlementId
    e.active = active
    e.state = state.wire
    e.expiresMs = expiresDate ?? 0
    e.willRenew = willRenew
    e.productID = productId ?? ""
    e.transactionID = transactionId ?? ""
    e.ownership = ownership?.wire ?? .unspecified
    return e
  }
}
