public import Foundation
public import RPCCore
public import SubstatusWire
import SubstatusServiceAPI

extension Date {
  /// Milliseconds since the Unix epoch, rounded to the nearest millisecond (the API's time unit).
  public var substatusMilliseconds: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }

  /// The instant `milliseconds` after the Unix epoch.
  ///
  /// - Parameter milliseconds: Milliseconds since 1970-01-01T00:00:00Z.
  public init(substatusMilliseconds milliseconds: Int64) {
    self.init(timeIntervalSince1970: Double(milliseconds) / 1000)
  }
}

// MARK: - TenantService (operator key)

extension SubstatusClient {
  /// Creates a tenant and its first ADMIN key (`TenantService.CreateTenant`; operator key).
  ///
  /// ```swift
  /// let operator = SubstatusClient(transport: transport, apiKey: operatorKey)
  /// let created = try await operator.createTenant(name: "Example Inc.")
  /// print(created.tenant?.tenantID ?? "", created.adminKey)   // the key is shown only here
  /// ```
  ///
  /// - Parameters:
  ///   - name: A display name, 1 to 200 bytes.
  ///   - options: Deadline and metadata.
  /// - Returns: The tenant and its admin key. Not retried.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `name`, `PERMISSION_DENIED` for a tenant key).
  public func createTenant(name: String, options: SubstatusCallOptions = SubstatusCallOptions())
    async throws(RPCError) -> Substatus_V1_CreateTenantResponse
  {
    var request = Substatus_V1_CreateTenantRequest()
    request.name = name
    return try await service(
      Substatus_V1_TenantService.Client.self, options: options
    ).createTenant(request)
  }

  /// Lists tenants, oldest first (`TenantService.ListTenants`; operator key). Idempotent.
  ///
  /// - Parameters:
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page of tenants.
  /// - Throws: `RPCError`.
  public func listTenants(
    pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListTenantsResponse {
    var request = Substatus_V1_ListTenantsRequest()
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_TenantService.Client.self, options: options
    ).listTenants(request)
  }

  /// Disables a tenant (`TenantService.DisableTenant`; operator key). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// - Parameters:
  ///   - tenantID: The tenant.
  ///   - options: Deadline and metadata.
  /// - Returns: The tenant as it is now.
  /// - Throws: `RPCError` (`NOT_FOUND` for an unknown tenant).
  public func disableTenant(
    tenantID: String, options: SubstatusCallOptions = SubstatusCallOptions()
  )
    async throws(RPCError) -> Substatus_V1_DisableTenantResponse
  {
    var request = Substatus_V1_DisableTenantRequest()
    request.tenantID = tenantID
    return try await service(
      Substatus_V1_TenantService.Client.self, options: options
    ).disableTenant(request)
  }
}

// MARK: - AdminService (ADMIN key)

extension SubstatusClient {
  /// Registers an app (`AdminService.RegisterApp`). Not retried.
  ///
  /// ```swift
  /// let app = try await admin.registerApp(bundleID: "com.example.app", displayName: "Example")
  /// print(app.appID)
  /// ```
  ///
  /// - Parameters:
  ///   - bundleID: The bundle identifier.
  ///   - displayName: A display name; empty uses the bundle id.
  ///   - appleAppID: App Store Connect's numeric app id; 0 when not known.
  ///   - options: Deadline and metadata.
  /// - Returns: The registered app.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT`, `ALREADY_EXISTS` for a known bundle id).
  public func registerApp(
    bundleID: String, displayName: String = "", appleAppID: Int64 = 0,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_App {
    var request = Substatus_V1_RegisterAppRequest()
    request.bundleID = bundleID
    request.displayName = displayName
    request.appleAppID = appleAppID
    let response = try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).registerApp(request)
    return response.app ?? Substatus_V1_App()
  }

  /// Returns one app (`AdminService.GetApp`). Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - options: Deadline and metadata.
  /// - Returns: The app.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func getApp(appID: String, options: SubstatusCallOptions = SubstatusCallOptions())
    async throws(RPCError) -> Substatus_V1_App
  {
    var request = Substatus_V1_GetAppRequest()
    request.appID = appID
    let response = try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).getApp(request)
    return response.app ?? Substatus_V1_App()
  }

  /// Lists the tenant's apps, oldest first (`AdminService.ListApps`). Idempotent.
  ///
  /// - Parameters:
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page of apps.
  /// - Throws: `RPCError`.
  public func listApps(
    pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListAppsResponse {
    var request = Substatus_V1_ListAppsRequest()
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).listApps(request)
  }

  /// Sets the app's App Store shared secret (`AdminService.SetSharedSecret`). Not retried.
  ///
  /// The secret is write-only: the response carries only its fingerprint. Never log it.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - sharedSecret: The shared secret from App Store Connect.
  ///   - previousSecretOverlapSeconds: How long the previous secret stays valid; 0: the server's
  ///     default (7 days).
  ///   - options: Deadline and metadata.
  /// - Returns: The new (and previous) fingerprints.
  /// - Throws: `RPCError` (`NOT_FOUND`, `INVALID_ARGUMENT` naming `shared_secret`).
  public func setSharedSecret(
    appID: String, sharedSecret: String, previousSecretOverlapSeconds: Int64 = 0,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SetSharedSecretResponse {
    var request = Substatus_V1_SetSharedSecretRequest()
    request.appID = appID
    request.sharedSecret = sharedSecret
    request.previousSecretOverlapSeconds = previousSecretOverlapSeconds
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).setSharedSecret(request)
  }

  /// Inserts or replaces catalog products by product id (`AdminService.PutProducts`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// ```swift
  /// var monthly = Substatus_V1_Product()
  /// monthly.productID = "pro.monthly"
  /// monthly.type = .autoRenewable
  /// monthly.subscriptionGroupID = "pro"
  /// monthly.duration = "P1M"
  /// monthly.hasIntroductoryOffer = true
  /// monthly.winBackOfferIDs = ["pro.comeback"]
  /// _ = try await admin.putProducts(appID: app, products: [monthly])
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - products: 1 to 1000 products.
  ///   - options: Deadline and metadata.
  /// - Returns: The stored products, in request order.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `products[i].<field>`).
  public func putProducts(
    appID: String, products: [Substatus_V1_Product],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> [Substatus_V1_Product] {
    var request = Substatus_V1_PutProductsRequest()
    request.appID = appID
    request.products = products
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).putProducts(request).products
  }

  /// Lists the app's catalog, ordered by product id (`AdminService.ListProducts`). Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - subscriptionGroupID: When not empty, only this group's products.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page of products.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func listProducts(
    appID: String, subscriptionGroupID: String = "", pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListProductsResponse {
    var request = Substatus_V1_ListProductsRequest()
    request.appID = appID
    request.subscriptionGroupID = subscriptionGroupID
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).listProducts(request)
  }

  /// Changes the app's eligibility policy (`AdminService.SetPolicy`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// ```swift
  /// var policy = Substatus_V1_EligibilityPolicy()
  /// policy.refundsBlockIntro = true
  /// let app = try await admin.setPolicy(
  ///   appID: app, policy: policy, updateMask: ["refunds_block_intro"])
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - policy: The new values.
  ///   - updateMask: The `EligibilityPolicy` field names to change (`refunds_block_intro`,
  ///     `lapsed_subscribers_get_intro`, `billing_retry_entitled`, `promo_scope`,
  ///     `purchase_sharing`); empty replaces the whole policy.
  ///   - options: Deadline and metadata.
  /// - Returns: The app with its policy as it is now.
  /// - Throws: `RPCError` (`NOT_FOUND`, `INVALID_ARGUMENT` naming `update_mask`).
  public func setPolicy(
    appID: String, policy: Substatus_V1_EligibilityPolicy, updateMask: [String] = [],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_App {
    var request = Substatus_V1_SetPolicyRequest()
    request.appID = appID
    request.policy = policy
    request.updateMask = updateMask
    let response = try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).setPolicy(request)
    return response.app ?? Substatus_V1_App()
  }

  /// Changes an app's Apple ID or display name (`AdminService.UpdateApp`). Retried on
  /// `UNAVAILABLE`: the values are absolute.
  ///
  /// ```swift
  /// let app = try await admin.updateApp(appID: app, appleAppID: 1_234_567_890)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - appleAppID: The new Apple ID (0 clears it); `nil` leaves it as it is.
  ///   - displayName: The new display name; `nil` leaves it as it is.
  ///   - options: Deadline and metadata.
  /// - Returns: The app after the change.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `update_mask` when both are
  ///   `nil`, `app.apple_app_id` or `app.display_name`).
  public func updateApp(
    appID: String, appleAppID: Int64? = nil, displayName: String? = nil, smallBusinessProgram: Bool? = nil,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_App {
    var request = Substatus_V1_UpdateAppRequest()
    request.appID = appID
    var values = Substatus_V1_App()
    if let appleAppID {
      values.appleAppID = appleAppID
      request.updateMask.append("apple_app_id")
    }
    if let displayName {
      values.displayName = displayName
      request.updateMask.append("display_name")
    }
    if let smallBusinessProgram {
      values.smallBusinessProgram = smallBusinessProgram
      request.updateMask.append("small_business_program")
    }
    request.app = values
    let response = try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).updateApp(request)
    return response.app ?? Substatus_V1_App()
  }

  /// Creates an API key (`AdminService.CreateApiKey`). Not retried.
  ///
  /// ```swift
  /// let created = try await admin.createApiKey(role: .read, appIDs: [app], description: "paywall")
  /// print(created.key)   // shown only here
  /// ```
  ///
  /// - Parameters:
  ///   - role: What the key may call.
  ///   - appIDs: The apps the key is limited to; empty: every app of the tenant.
  ///   - description: A free-form note.
  ///   - options: Deadline and metadata.
  /// - Returns: The key and its description.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `role`, `NOT_FOUND` naming an app).
  public func createApiKey(
    role: Substatus_V1_ApiKeyRole, appIDs: [String] = [], description: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_CreateApiKeyResponse {
    var request = Substatus_V1_CreateApiKeyRequest()
    request.role = role
    request.appIDs = appIDs
    request.description = description
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).createApiKey(request)
  }

  /// Lists the tenant's API keys, oldest first (`AdminService.ListApiKeys`). Idempotent.
  ///
  /// - Parameters:
  ///   - showRevoked: Whether revoked keys are listed too.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page of key descriptions (never the keys).
  /// - Throws: `RPCError`.
  public func listApiKeys(
    showRevoked: Bool = false, pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ListApiKeysResponse {
    var request = Substatus_V1_ListApiKeysRequest()
    request.showRevoked = showRevoked
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).listApiKeys(request)
  }

  /// Revokes an API key at once (`AdminService.RevokeApiKey`). Retried on `UNAVAILABLE` (the RPC is `IDEMPOTENT`).
  ///
  /// - Parameters:
  ///   - keyID: The key's `keyID` (not the key itself).
  ///   - options: Deadline and metadata.
  /// - Returns: The key's description, now revoked.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func revokeApiKey(keyID: String, options: SubstatusCallOptions = SubstatusCallOptions())
    async throws(RPCError) -> Substatus_V1_ApiKeyInfo
  {
    var request = Substatus_V1_RevokeApiKeyRequest()
    request.keyID = keyID
    let response = try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).revokeApiKey(request)
    return response.info ?? Substatus_V1_ApiKeyInfo()
  }
}

// MARK: - IngestService (INGEST or ADMIN key)

extension SubstatusClient {
  /// Verifies a receipt with Apple and stores its purchases (`IngestService.SubmitReceipt`).
  /// Idempotent: retried on `UNAVAILABLE` (Apple or the store temporarily unreachable).
  ///
  /// ```swift
  /// let result = try await ingest.submitReceipt(
  ///   appID: app, userID: "user-42", receiptData: receiptBase64)
  /// print(result.groups.map(\.state))
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user the receipt belongs to.
  ///   - receiptData: The base64 receipt, as sent to Apple's `receipt-data`.
  ///   - excludeOldTransactions: Ask Apple for only the latest renewal of each subscription.
  ///   - options: Deadline and metadata.
  /// - Returns: The user's status after the write.
  /// - Throws: `RPCError` (`FAILED_PRECONDITION` without a shared secret, `INVALID_ARGUMENT` for a
  ///   receipt Apple rejects).
  public func submitReceipt(
    appID: String, userID: String, receiptData: String, excludeOldTransactions: Bool = false,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SubmitReceiptResponse {
    var request = Substatus_V1_SubmitReceiptRequest()
    request.appID = appID
    request.userID = userID
    request.receiptData = receiptData
    request.excludeOldTransactions = excludeOldTransactions
    return try await service(
      Substatus_V1_IngestService.Client.self, options: options
    ).submitReceipt(request)
  }

  /// Stores a verifyReceipt response body obtained elsewhere
  /// (`IngestService.ImportReceiptResponse`). Idempotent.
  ///
  /// ```swift
  /// let body = try Data(contentsOf: URL(fileURLWithPath: "verifyReceipt.json"))
  /// let result = try await ingest.importReceiptResponse(appID: app, userID: "u1", json: [UInt8](body))
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user the receipt belongs to.
  ///   - json: The verifyReceipt response body (UTF-8 JSON), as Apple sent it.
  ///   - options: Deadline and metadata.
  /// - Returns: The user's status after the write.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `verify_receipt_response_json`).
  public func importReceiptResponse(
    appID: String, userID: String, json: [UInt8],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ImportReceiptResponseResponse {
    var request = Substatus_V1_ImportReceiptResponseRequest()
    request.appID = appID
    request.userID = userID
    request.verifyReceiptResponseJson = json
    return try await service(
      Substatus_V1_IngestService.Client.self, options: options
    ).importReceiptResponse(request)
  }

  /// Stores transactions and renewal infos in substatus's own form
  /// (`IngestService.ImportTransactions`). Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user the data belongs to.
  ///   - transactions: At most 1000 transactions.
  ///   - renewalInfos: At most 1000 renewal infos.
  ///   - options: Deadline and metadata.
  /// - Returns: One result per item, in request order.
  /// - Throws: `RPCError` (`RESOURCE_EXHAUSTED` above the limits).
  public func importTransactions(
    appID: String, userID: String, transactions: [Substatus_V1_Transaction],
    renewalInfos: [Substatus_V1_RenewalInfo] = [],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_ImportTransactionsResponse {
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = appID
    request.userID = userID
    request.transactions = transactions
    request.renewalInfos = renewalInfos
    return try await service(
      Substatus_V1_IngestService.Client.self, options: options
    ).importTransactions(request)
  }

  /// Verifies and stores StoreKit 2 signed data (`IngestService.SubmitSignedTransactions`):
  /// signed transactions (`Transaction.jwsRepresentation`) and signed renewal infos, each checked
  /// as Apple's SignedDataVerifier does. Idempotent.
  ///
  /// ```swift
  /// let result = try await ingest.submitSignedTransactions(
  ///   appID: app, userID: "u1", signedTransactions: [transaction.jwsRepresentation])
  /// for item in result.transactionResults where item.outcome == .rejected {
  ///   print(item.error?.message ?? "")  // for example "UNTRUSTED_CHAIN: ..."
  /// }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user the data belongs to.
  ///   - signedTransactions: At most 1000 compact JWS transactions.
  ///   - signedRenewalInfos: At most 1000 compact JWS renewal infos.
  ///   - options: Deadline and metadata.
  /// - Returns: One result per item, in request order, and the user's status after the write.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` when both lists are empty, `RESOURCE_EXHAUSTED` above
  ///   the limits).
  public func submitSignedTransactions(
    appID: String, userID: String, signedTransactions: [String], signedRenewalInfos: [String] = [],
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SubmitSignedTransactionsResponse {
    var request = Substatus_V1_SubmitSignedTransactionsRequest()
    request.appID = appID
    request.userID = userID
    request.signedTransactions = signedTransactions
    request.signedRenewalInfos = signedRenewalInfos
    return try await service(
      Substatus_V1_IngestService.Client.self, options: options
    ).submitSignedTransactions(request)
  }

  /// Brings a user's history up to date from the App Store Server API
  /// (`IngestService.SyncTransactionHistory`): Get Transaction History from the revision of the
  /// last sync, Get All Subscription Statuses, every signed item verified. Needs the app's In-App
  /// Purchase key. Idempotent.
  ///
  /// ```swift
  /// let synced = try await ingest.syncTransactionHistory(appID: app, userID: "u1", transactionID: "2000000123")
  /// print(synced.storedTransactionCount, synced.groups.first?.state ?? .unspecified)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - transactionID: Any transaction id of the user Apple knows; empty: the one of the last sync
  ///     or the most recent stored one.
  ///   - environment: Where to ask; `.unspecified`: production, then sandbox.
  ///   - fullResync: Ignore the stored revision and fetch the whole history.
  ///   - options: Deadline and metadata.
  /// - Returns: The user's status after the write, the counts and Apple's new revision.
  /// - Throws: `RPCError` (`NOT_FOUND` when Apple knows no such transaction, `FAILED_PRECONDITION`
  ///   without a usable key, `UNAVAILABLE` when Apple cannot answer now).
  public func syncTransactionHistory(
    appID: String, userID: String, transactionID: String = "", environment: Substatus_V1_Environment = .unspecified,
    fullResync: Bool = false, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SyncTransactionHistoryResponse {
    var request = Substatus_V1_SyncTransactionHistoryRequest()
    request.appID = appID
    request.userID = userID
    request.transactionID = transactionID
    request.environment = environment
    request.fullResync = fullResync
    return try await service(
      Substatus_V1_IngestService.Client.self, options: options
    ).syncTransactionHistory(request)
  }
}

// MARK: - EligibilityService and StatusService (READ, INGEST or ADMIN key)

extension SubstatusClient {
  /// Answers introductory and promotional offer eligibility for many users × many products
  /// (`EligibilityService.CheckEligibility`). Idempotent.
  ///
  /// ```swift
  /// var query = Substatus_V1_EligibilityQuery()
  /// query.userID = "user-42"
  /// query.productIDs = ["pro.monthly", "pro.yearly"]
  /// let response = try await client.checkEligibility(appID: app, queries: [query])
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - queries: One per user, 1 to 1000; answered in this order.
  ///   - asOf: The instant to answer for; `nil`: the server's clock.
  ///   - environment: Whose purchases count; `.unspecified` means production.
  ///   - options: Deadline and metadata.
  /// - Returns: One `UserEligibility` per query, in order.
  /// - Throws: `RPCError` (`NOT_FOUND`, `RESOURCE_EXHAUSTED` above the batch limits).
  public func checkEligibility(
    appID: String, queries: [Substatus_V1_EligibilityQuery], asOf: Date? = nil,
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_CheckEligibilityResponse {
    var request = Substatus_V1_CheckEligibilityRequest()
    request.appID = appID
    request.queries = queries
    request.asOfMs = asOf?.substatusMilliseconds ?? 0
    request.environment = environment
    return try await service(
      Substatus_V1_EligibilityService.Client.self, options: options
    ).checkEligibility(request)
  }

  /// Answers eligibility for one user (a one-query ``checkEligibility(appID:queries:asOf:environment:options:)``).
  ///
  /// ```swift
  /// let user = try await client.checkEligibility(
  ///   appID: app, userID: "user-42", productIDs: ["pro.monthly"])
  /// if user.products[0].introductory?.eligible == true { showFreeTrialBadge() }
  /// // Win-back offers Apple lets this lapsed subscriber redeem, in catalog order:
  /// let winBack = user.products[0].winBackOffers.filter(\.eligible).map(\.offerID)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - productIDs: The products to check, answered in this order.
  ///   - asOf: The instant to answer for; `nil`: the server's clock.
  ///   - environment: Whose purchases count.
  ///   - options: Deadline and metadata.
  /// - Returns: The user's answers.
  /// - Throws: `RPCError`; a per-query error of the response is thrown as `RPCError` too.
  public func checkEligibility(
    appID: String, userID: String, productIDs: [String], asOf: Date? = nil,
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_UserEligibility {
    var query = Substatus_V1_EligibilityQuery()
    query.userID = userID
    query.productIDs = productIDs
    let response = try await checkEligibility(
      appID: appID, queries: [query], asOf: asOf, environment: environment, options: options)
    guard let user = response.users.first else {
      throw RPCError(code: .internal, message: "the server answered no query")
    }
    if let error = user.error {
      throw RPCError(
        code: RPCError.Code(rawValue: Int(error.code)) ?? .unknown,
        message: error.field.isEmpty ? error.message : "\(error.field): \(error.message)")
    }
    return user
  }

  /// Returns the user's state in every subscription group and entitlements
  /// (`StatusService.GetStatus`). Idempotent.
  ///
  /// ```swift
  /// let status = try await client.status(appID: app, userID: "user-42")
  /// if status.groups.contains(where: \.billingIssue) { showUpdatePaymentBanner() }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - asOf: The instant to answer for; `nil`: the server's clock.
  ///   - environment: Whose purchases count.
  ///   - options: Deadline and metadata.
  /// - Returns: Groups (ordered by group id) and entitlements (by product id).
  /// - Throws: `RPCError` (`NOT_FOUND`, `INVALID_ARGUMENT` naming `user_id`).
  public func status(
    appID: String, userID: String, asOf: Date? = nil,
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetStatusResponse {
    var request = Substatus_V1_GetStatusRequest()
    request.appID = appID
    request.userID = userID
    request.asOfMs = asOf?.substatusMilliseconds ?? 0
    request.environment = environment
    return try await service(
      Substatus_V1_StatusService.Client.self, options: options
    ).getStatus(request)
  }

  /// Returns what the user is entitled to (`StatusService.GetEntitlements`). Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - asOf: The instant to answer for; `nil`: the server's clock.
  ///   - environment: Whose purchases count.
  ///   - options: Deadline and metadata.
  /// - Returns: The entitlements, ordered by product id.
  /// - Throws: `RPCError`.
  public func entitlements(
    appID: String, userID: String, asOf: Date? = nil,
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetEntitlementsResponse {
    var request = Substatus_V1_GetEntitlementsRequest()
    request.appID = appID
    request.userID = userID
    request.asOfMs = asOf?.substatusMilliseconds ?? 0
    request.environment = environment
    return try await service(
      Substatus_V1_StatusService.Client.self, options: options
    ).getEntitlements(request)
  }

  /// Returns one page of the user's stored transactions, oldest purchase first
  /// (`StatusService.GetTransactionHistory`). Idempotent. See
  /// ``transactionHistoryPages(appID:userID:environment:pageSize:options:)`` for every page.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - environment: Whose history.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - pageToken: The previous page's `nextPageToken`; empty for the first page.
  ///   - options: Deadline and metadata.
  /// - Returns: One page; renewal infos on the first page only.
  /// - Throws: `RPCError`.
  public func transactionHistory(
    appID: String, userID: String, environment: Substatus_V1_Environment = .unspecified,
    pageSize: Int32 = 0, pageToken: String = "",
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetTransactionHistoryResponse {
    var request = Substatus_V1_GetTransactionHistoryRequest()
    request.appID = appID
    request.userID = userID
    request.environment = environment
    request.pageSize = pageSize
    request.pageToken = pageToken
    return try await service(
      Substatus_V1_StatusService.Client.self, options: options
    ).getTransactionHistory(request)
  }

  /// Every page of the user's transaction history, fetched lazily as the sequence is iterated.
  ///
  /// ```swift
  /// for try await page in client.transactionHistoryPages(appID: app, userID: "user-42") {
  ///   for transaction in page.transactions { print(transaction.transactionID) }
  /// }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - environment: Whose history.
  ///   - pageSize: The page size; 0 is the server's default (50).
  ///   - options: Deadline (per page) and metadata.
  /// - Returns: A sequence of pages that ends after the page with an empty `nextPageToken`.
  public func transactionHistoryPages(
    appID: String, userID: String, environment: Substatus_V1_Environment = .unspecified,
    pageSize: Int32 = 0, options: SubstatusCallOptions = SubstatusCallOptions()
  ) -> PagedSequence<Substatus_V1_GetTransactionHistoryResponse> {
    PagedSequence(nextPageToken: \.nextPageToken) { token throws(RPCError) in
      try await transactionHistory(
        appID: appID, userID: userID, environment: environment, pageSize: pageSize,
        pageToken: token, options: options)
    }
  }
}

// MARK: - ReportService (ADMIN key) and health

extension SubstatusClient {
  /// Counts the app's subscriptions by state (`ReportService.GetReport`). Idempotent.
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - asOf: The instant to count at; `nil`: the server's clock.
  ///   - environment: The environment to count.
  ///   - options: Deadline and metadata.
  /// - Returns: The counts.
  /// - Throws: `RPCError` (`NOT_FOUND`).
  public func report(
    appID: String, asOf: Date? = nil, environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_Report {
    var request = Substatus_V1_GetReportRequest()
    request.appID = appID
    request.asOfMs = asOf?.substatusMilliseconds ?? 0
    request.environment = environment
    let response = try await service(
      Substatus_V1_ReportService.Client.self, options: options
    ).getReport(request)
    return response.report ?? Substatus_V1_Report()
  }

  /// The app's series over `[from, to)` by day, ISO week or month, counted from the event log
  /// (`ReportService.GetTrends`). Idempotent.
  ///
  /// ```swift
  /// let trends = try await client.trends(
  ///   appID: app, from: Date(substatusMilliseconds: 1_704_067_200_000),
  ///   to: Date(substatusMilliseconds: 1_711_929_600_000), interval: .month)
  /// for bucket in trends.buckets { print(bucket.startMs, bucket.activeSubscribers) }
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - from: The range's start, included: a UTC midnight.
  ///   - to: The range's end, excluded: a later UTC midnight.
  ///   - interval: The buckets' length (`.unspecified`: days).
  ///   - environment: The environment to count.
  ///   - options: Deadline and metadata.
  /// - Returns: The buckets, oldest first, and the currencies that appear in them.
  /// - Throws: `RPCError` (`NOT_FOUND`; `INVALID_ARGUMENT` naming `from_ms`, `to_ms` or `interval`).
  public func trends(
    appID: String, from: Date, to: Date, interval: Substatus_V1_TrendInterval = .unspecified,
    environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetTrendsResponse {
    var request = Substatus_V1_GetTrendsRequest()
    request.appID = appID
    request.fromMs = from.substatusMilliseconds
    request.toMs = to.substatusMilliseconds
    request.interval = interval
    request.environment = environment
    return try await service(
      Substatus_V1_ReportService.Client.self, options: options
    ).getTrends(request)
  }

  /// Asks the server's health (`grpc.health.v1.Health/Check`); sends no API key. Idempotent.
  ///
  /// ```swift
  /// let health = try await client.health()
  /// print(health.status == .serving ? "ok" : "not serving")
  /// ```
  ///
  /// - Parameters:
  ///   - service: A service name such as `substatus.v1.StatusService`; empty: the whole server.
  ///   - options: Deadline and metadata.
  /// - Returns: The serving status.
  /// - Throws: `RPCError` (`NOT_FOUND` for an unknown service).
  public func health(service: String = "", options: SubstatusCallOptions = SubstatusCallOptions())
    async throws(RPCError) -> Grpc_Health_V1_HealthCheckResponse
  {
    var request = Grpc_Health_V1_HealthCheckRequest()
    request.service = service
    return try await self.service(
      Grpc_Health_V1_Health.Client.self, idempotency: .idempotent, authenticated: false, options: options
    ).check(request)
  }
}
