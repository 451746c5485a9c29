public import RPCCore
public import SubstatusWire

// MARK: - Access model (issue 20): named entitlements, product deletion, erasure

extension SubstatusClient {
  /// Inserts or replaces named entitlements of the app's catalog
  /// (`AdminService.PutEntitlements`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// ```swift
  /// var premium = Substatus_V1_EntitlementDefinition()
  /// premium.entitlementID = "premium"
  /// premium.productIDs = ["premium.monthly", "premium.yearly", "pro.lifetime"]
  /// _ = try await admin.putEntitlements(appID: app, entitlements: [premium])
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - entitlements: 1 to 100 definitions; every product id must be in the catalog.
  ///   - options: Deadline and metadata.
  /// - Returns: The stored definitions, in request order.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `entitlements[i].product_ids[j]` for each
  ///   product the catalog lacks).
  public func putEntitlements(
    appID: String, entitlements: [Substatus_V1_EntitlementDefinition],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_PutEntitlementsResponse {
    var request = Substatus_V1_PutEntitlementsRequest()
    request.appID = appID
    request.entitlements = entitlements
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).putEntitlements(request)
  }

  /// Lists the app's named entitlements, ordered by id (`AdminService.ListEntitlements`).
  /// Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page of definitions.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func listEntitlements(
    appID: String, pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListEntitlementsResponse {
    var request = Substatus_V1_ListEntitlementsRequest()
    request.appID = appID
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).listEntitlements(request)
  }

  /// Deletes named entitlements by id (`AdminService.DeleteEntitlements`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - entitlementIDs: 1 to 100 ids; ids that are not defined are ignored.
  ///   - options: Deadline and metadata.
  /// - Returns: The ids that were defined and are now deleted.
  /// - Throws: `RPCError` (`NOT_FOUND`, `INVALID_ARGUMENT`).
  public func deleteEntitlements(
    appID: String, entitlementIDs: [String],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_DeleteEntitlementsResponse {
    var request = Substatus_V1_DeleteEntitlementsRequest()
    request.appID = appID
    request.entitlementIDs = entitlementIDs
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).deleteEntitlements(request)
  }

  /// Answers named entitlements of one user (`StatusService.GetEntitlements` with
  /// `entitlement_ids`). Idempotent.
  ///
  /// ```swift
  /// let answer = try await client.namedEntitlements(appID: app, userID: "u42", entitlementIDs: ["premium"])
  /// if answer.namedEntitlements.first?.active == true { unlockPremium() }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - entitlementIDs: The entitlements to answer, in this order; empty: every one defined.
  ///   - asOfMs: The instant to answer for, in ms since the epoch; 0: the server's clock.
  ///   - environment: Whose purchases count.
  ///   - options: Deadline and metadata.
  /// - Returns: The response; `namedEntitlements` answers the ids asked.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `entitlement_ids[i]` when not defined).
  public func namedEntitlements(
    appID: String, userID: String, entitlementIDs: [String] = [], asOfMs: Int64 = 0,
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetEntitlementsResponse {
    var request = Substatus_V1_GetEntitlementsRequest()
    request.appID = appID
    request.userID = userID
    request.entitlementIDs = entitlementIDs
    request.asOfMs = asOfMs
    request.environment = environment
    return try await service(
      Substatus_V1_StatusService.Client.self, options: options
    ).getEntitlements(request)
  }

  /// Deletes products from the app's catalog and from the entitlements that list them
  /// (`AdminService.DeleteProducts`). Users' transactions of them stay in history. Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - productIDs: 1 to 1000 ids; ids not in the catalog are ignored.
  ///   - options: Deadline and metadata.
  /// - Returns: The response; `deletedProductIDs` lists what was deleted.
  /// - Throws: `RPCError` (`NOT_FOUND`, `INVALID_ARGUMENT`).
  public func deleteProducts(
    appID: String, productIDs: [String], options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_DeleteProductsResponse {
    var request = Substatus_V1_DeleteProductsRequest()
    request.appID = appID
    request.productIDs = productIDs
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).deleteProducts(request)
  }

  /// Erases one user of the app in every environment (`AdminService.DeleteUser`). Erasing again
  /// erases nothing, so a retry is safe: retried on `UNAVAILABLE`.
  ///
  /// ```swift
  /// let erased = try await admin.deleteUser(appID: app, userID: "user-42")
  /// print(erased.userIDHash, erased.transactionsErased)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user to erase.
  ///   - options: Deadline and metadata.
  /// - Returns: What was erased, and the hash the audit log names the user by.
  /// - Throws: `RPCError` (`NOT_FOUND`, `INVALID_ARGUMENT` naming `user_id`).
  public func deleteUser(
    appID: String, userID: String, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_DeleteUserResponse {
    var request = Substatus_V1_DeleteUserRequest()
    request.appID = appID
    request.userID = userID
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).deleteUser(request)
  }
}
