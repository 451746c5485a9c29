import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

// MARK: AdminService: erasure (issue 20)

extension SubstatusService {
  /// The pseudo-user under which a notification's data for an original transaction no user has
  /// submitted is kept (see ``routeByOriginalTransaction(appID:environment:transactions:renewalInfos:renewalInfoSnapshot:)``).
  static func unclaimedUserID(originalTransactionId: String) -> String {
    PurchaseOwnership.unclaimedUserId(originalTransactionId: originalTransactionId)
  }

  /// How the audit log names a user: `sha256:` and the hex SHA-256 of the id, never the id.
  static func userIDHash(_ userID: String) -> String {
    "sha256:" + Hex.encode(SHA256.hash(userID))
  }

  public func deleteProducts(_ request: Substatus_V1_DeleteProductsRequest, _ context: ServerContext) async throws -> Substatus_V1_DeleteProductsResponse {
    let cached = try await app(request.appID, context)
    guard !request.productIDs.isEmpty else { throw invalidArgument("product_ids", "must not be empty") }
    guard request.productIDs.count <= limits.maxProductsPerPut else {
      throw batchTooLarge("product_ids", limit: limits.maxProductsPerPut, count: request.productIDs.count)
    }
    for (i, id) in request.productIDs.enumerated() { try requireID(id, "product_ids[\(i)]", limits: limits) }
    let deleted = try await stored { () throws(StoreError) in
      try await catalogStore.deleteProducts(appId: request.appID, productIds: request.productIDs)
    }
    invalidateApp(request.appID)
    await audit(
      context, tenant: cached.app.tenantId, action: "DeleteProducts", resource: "apps/\(request.appID)/products",
      details: deleted.joined(separator: ","))
    var response = Substatus_V1_DeleteProductsResponse()
    response.deletedProductIDs = deleted
    return response
  }

  public func deleteUser(_ request: Substatus_V1_DeleteUserRequest, _ context: ServerContext) async throws -> Substatus_V1_DeleteUserResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    let erased = try await eraseUser(appID: request.appID, userID: request.userID)
    let hash = Self.userIDHash(request.userID)
    await audit(
      context, tenant: cached.app.tenantId, action: "DeleteUser", resource: "apps/\(request.appID)/users/\(hash)",
      details: "\(erased.histories) histories, \(erased.transactions) transactions, \(erased.renewalInfos) renewal infos, \(erased.receipts) receipts")
    var response = Substatus_V1_DeleteUserResponse()
    response.userIDHash = hash
    response.historiesErased = Int32(erased.histories)
    response.transactionsErased = Int64(erased.transactions)
    response.renewalInfosErased = Int64(erased.renewalInfos)
    response.receiptsErased = Int64(erased.receipts)
    return response
  }

  /// Erases one user of an app in every environment (DeleteUser, and a RESCIND_CONSENT under the
  /// app's `erase_on_rescind_consent`, rule 25): the user's data, and what Apple's notifications
  /// stored for the user's original transactions before the user submitted them, unless another
  /// user holds them too.
  func eraseUser(appID: String, userID: String) async throws(RPCError) -> UserErasure {
    let request = (appID: appID, userID: userID)
    // What Apple's notifications stored for the user's original transactions before the user
    // submitted them, unless another user holds them too.
    var userIds = [request.userID]
    for environment in SubscriptionDomain.Environment.allCases {
      let history = try await stored { () throws(StoreError) in
        try await purchaseStore.history(of: UserKey(appId: request.appID, environment: environment, userId: request.userID))
      }
      for otid in Set(history.transactions.map(\.originalTransactionId)) {
        let unclaimed = Self.unclaimedUserID(originalTransactionId: otid)
        let holders = try await stored { () throws(StoreError) in
          try await purchaseStore.users(appId: request.appID, environment: environment, originalTransactionId: otid)
        }
        if holders.contains(unclaimed) && holders.allSatisfy({ $0 == request.userID || $0 == unclaimed }) {
          userIds.append(unclaimed)
        }
      }
    }
    let erased = try await stored { () throws(StoreError) in
      try await erasureStore.deleteUsers(appId: request.appID, userIds: userIds)
    }
    // The WatchEvents window of the app held copies of the erased events: gone too (other
    // instances find out by the count of their next read, EventFeed).
    eventFeed.forget(appId: request.appID)
    return erased
  }
}
