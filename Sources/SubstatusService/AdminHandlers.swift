import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusServiceCore
import SubstatusWire

// MARK: AdminService

extension SubstatusService: Substatus_V1_AdminService.ServiceProtocol {
  public func registerApp(_ request: Substatus_V1_RegisterAppRequest, _ context: ServerContext) async throws -> Substatus_V1_RegisterAppResponse {
    let (p, tenant) = try tenantID(context)
    guard !p.isScoped else {
      throw RPCError(code: .permissionDenied, message: "a key scoped to apps may not register apps")
    }
    try requireID(request.bundleID, "bundle_id", limits: limits)
    guard request.appleAppID >= 0 else { throw invalidArgument("apple_app_id", "must not be negative") }
    try requireDisplayText(request.displayName, "display_name")
    let app = AppRecord(
      appId: Identifiers.make("app", environment), tenantId: tenant, bundleId: request.bundleID,
      appleAppId: request.appleAppID == 0 ? nil : request.appleAppID, displayName: request.displayName,
      createdMs: environment.now())
    do {
      try await catalogStore.createApp(app)
    } catch {
      if error.code == .alreadyExists {
        throw RPCError(code: .alreadyExists, message: "an app with bundle id \(ErrorText.quoted(request.bundleID)) is already registered")
      }
      throw RPCError(store: error)
    }
    await audit(context, tenant: tenant, action: "RegisterApp", resource: "apps/\(app.appId)", details: request.bundleID)
    var response = Substatus_V1_RegisterAppResponse()
    response.app = app.wire
    return response
  }

  public func getApp(_ request: Substatus_V1_GetAppRequest, _ context: ServerContext) async throws -> Substatus_V1_GetAppResponse {
    let cached = try await app(request.appID, context)
    var wire = cached.app.wire
    if let secrets = try? await catalogStore.sharedSecrets(appId: request.appID) {
      wire.sharedSecretFingerprint = secrets.current.fingerprint
      if let previous = secrets.valid(at: environment.now()).dropFirst().first {
        wire.previousSharedSecretFingerprint = previous.fingerprint
        wire.previousSharedSecretValidUntilMs = secrets.previousValidUntilMs ?? 0
      }
    }
    var response = Substatus_V1_GetAppResponse()
    response.app = wire
    return response
  }

  public func listApps(_ request: Substatus_V1_ListAppsRequest, _ context: ServerContext) async throws -> Substatus_V1_ListAppsResponse {
    let (p, tenant) = try tenantID(context)
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    let result = try await stored { () throws(StoreError) in try await catalogStore.listApps(tenantId: tenant, page: page) }
    var response = Substatus_V1_ListAppsResponse()
    response.apps = result.items.filter { p.mayAccess(appId: $0.appId) }.map(\.wire)
    response.nextPageToken = PageToken.encode(result.nextCursor)
    return response
  }

  public func setSharedSecret(_ request: Substatus_V1_SetSharedSecretRequest, _ context: ServerContext) async throws -> Substatus_V1_SetSharedSecretResponse {
    let cached = try await app(request.appID, context)
    guard !request.sharedSecret.isEmpty else { throw invalidArgument("shared_secret", "must not be empty") }
    guard request.sharedSecret.utf8.count <= 1024 else { throw invalidArgument("shared_secret", "longer than 1024 bytes") }
    let overlap = request.previousSecretOverlapSeconds == 0 ? limits.defaultSecretOverlapSeconds : request.previousSecretOverlapSeconds
    guard overlap >= 0, overlap <= limits.maxSecretOverlapSeconds else {
      throw invalidArgument("previous_secret_overlap_seconds", "must be between 0 and \(limits.maxSecretOverlapSeconds)")
    }
    let now = environment.now()
    let fingerprint = try await stored { () throws(StoreError) in
      try await catalogStore.setSharedSecret(appId: request.appID, secret: request.sharedSecret, atMs: now, previousValidUntilMs: now + overlap * 1000)
    }
    invalidateApp(request.appID)
    await audit(context, tenant: cached.app.tenantId, action: "SetSharedSecret", resource: "apps/\(request.appID)", details: fingerprint)
    var response = Substatus_V1_SetSharedSecretResponse()
    response.fingerprint = fingerprint
    if let secrets = try? await catalogStore.sharedSecrets(appId: request.appID), let previous = secrets.valid(at: now).dropFirst().first {
      response.previousFingerprint = previous.fingerprint
      response.previousValidUntilMs = secrets.previousValidUntilMs ?? 0
    }
    return response
  }

  public func putProducts(_ request: Substatus_V1_PutProductsRequest, _ context: ServerContext) async throws -> Substatus_V1_PutProductsResponse {
    let cached = try await app(request.appID, context)
    guard !request.products.isEmpty else { throw invalidArgument("products", "must not be empty") }
    guard request.products.count <= limits.maxProductsPerPut else {
      throw batchTooLarge("products", limit: limits.maxProductsPerPut, count: request.products.count)
    }
    var seen = Set<String>()
    var products: [Product] = []
    for (n, wire) in request.products.enumerated() {
      let product = try Product(wire: wire, field: "products[\(n)]")
      guard seen.insert(product.productId).inserted else {
        throw invalidArgument("products[\(n)].product_id", "\(ErrorText.quoted(product.productId)) appears twice")
      }
      products.append(product)
    }
    try await stored { () throws(StoreError) in try await catalogStore.putProducts(appId: request.appID, products: products) }
    invalidateApp(request.appID)
    await audit(context, tenant: cached.app.tenantId, action: "PutProducts", resource: "apps/\(request.appID)/products", details: "\(products.count) products")
    var response = Substatus_V1_PutProductsResponse()
    response.products = products.map(\.wire)
    return response
  }

  public func listProducts(_ request: Substatus_V1_ListProductsRequest, _ context: ServerContext) async throws -> Substatus_V1_ListProductsResponse {
    _ = try await app(request.appID, context)
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    // Catalogs are small: read the whole one fresh and page by position.
    let all = try await stored { () throws(StoreError) in try await catalogStore.products(appId: request.appID) }
      .filter { request.subscriptionGroupID.isEmpty || $0.subscriptionGroupId == request.subscriptionGroupID }
    let start = try page.cursor.map { cursor throws(RPCError) -> Int in
      guard let n = Int(cursor), n >= 0, n <= all.count else { throw invalidArgument("page_token", "out of range") }
      return n
    } ?? 0
    let end = min(start + page.limit, all.count)
    var response = Substatus_V1_ListProductsResponse()
    response.products = all[start..<end].map(\.wire)
    response.nextPageToken = end < all.count ? PageToken.encode(String(end)) : ""
    return response
  }

  public func setPolicy(_ request: Substatus_V1_SetPolicyRequest, _ context: ServerContext) async throws -> Substatus_V1_SetPolicyResponse {
    let cached = try await app(request.appID, context)
    let policy = try cached.app.policy.updated(with: request.policy ?? Substatus_V1_EligibilityPolicy(), mask: request.updateMask)
    let updated = try await stored { () throws(StoreError) in try await catalogStore.setPolicy(appId: request.appID, policy: policy) }
    invalidateApp(request.appID)
    await audit(context, tenant: cached.app.tenantId, action: "SetPolicy", resource: "apps/\(request.appID)/policy")
    var response = Substatus_V1_SetPolicyResponse()
    response.app = updated.wire
    return response
  }

  public func updateApp(_ request: Substatus_V1_UpdateAppRequest, _ context: ServerContext) async throws -> Substatus_V1_UpdateAppResponse {
    let cached = try await app(request.appID, context)
    guard !request.updateMask.isEmpty else {
      throw invalidArgument("update_mask", "name the fields to change: apple_app_id, display_name, small_business_program")
    }
    let values = request.app ?? Substatus_V1_App()
    var appleAppId = cached.app.appleAppId
    var displayName = cached.app.displayName
    var smallBusinessProgram: Bool?
    for path in request.updateMask {
      switch path {
      case "apple_app_id":
        guard values.appleAppID >= 0 else { throw invalidArgument("app.apple_app_id", "must not be negative") }
        appleAppId = values.appleAppID == 0 ? nil : values.appleAppID
      case "display_name":
        try requireDisplayText(values.displayName, "app.display_name")
        displayName = values.displayName
      case "small_business_program":
        smallBusinessProgram = values.smallBusinessProgram
      default:
        throw invalidArgument(
          "update_mask", "unknown field \(ErrorText.quoted(path)) (apple_app_id, display_name, small_business_program)")
      }
    }
    var updated = try await stored { () throws(StoreError) in
      try await catalogStore.updateApp(appId: request.appID, appleAppId: appleAppId, displayName: displayName)
    }
    if let smallBusinessProgram {
      updated = try await stored { () throws(StoreError) in
        try await catalogStore.setSmallBusinessProgram(appId: request.appID, smallBusinessProgram)
      }
    }
    invalidateApp(request.appID)
    await audit(
      context, tenant: cached.app.tenantId, action: "UpdateApp", resource: "apps/\(request.appID)",
      details: request.updateMask.joined(separator: ","))
    var response = Substatus_V1_UpdateAppResponse()
    response.app = updated.wire
    return response
  }

  public func createApiKey(_ request: Substatus_V1_CreateApiKeyRequest, _ context: ServerContext) async throws -> Substatus_V1_CreateApiKeyResponse {
    let (p, tenant) = try tenantID(context)
    let role: ApiKeyRecord.Role
    switch request.role {
    case .admin: role = .admin
    case .ingest: role = .ingest
    case .read: role = .read
    default: throw invalidArgument("role", "must be API_KEY_ROLE_ADMIN, API_KEY_ROLE_INGEST or API_KEY_ROLE_READ")
    }
    try requireDisplayText(request.description, "description")
    // A scoped key can only hand out keys within its own scope.
    guard p.mayManage(keyScopedTo: request.appIDs) else {
      throw RPCError(code: .permissionDenied, message: "a key scoped to apps can only create keys within its scope")
    }
    for (n, appId) in request.appIDs.enumerated() {
      do { _ = try await app(appId, context) } catch {
        throw invalidArgument("app_ids[\(n)]", "app \(ErrorText.quoted(appId)) not found")
      }
    }
    let (key, record) = try await newKey(
      tenant: tenant, role: role, appIds: Array(Set(request.appIDs)).sorted(), description: request.description, now: environment.now())
    await audit(context, tenant: tenant, action: "CreateApiKey", resource: "keys/\(record.keyId)", details: role.rawValue)
    var response = Substatus_V1_CreateApiKeyResponse()
    response.info = record.wire
    response.key = key
    return response
  }

  public func listApiKeys(_ request: Substatus_V1_ListApiKeysRequest, _ context: ServerContext) async throws -> Substatus_V1_ListApiKeysResponse {
    let (p, tenant) = try tenantID(context)
    let page = try PageToken.page(size: request.pageSize, token: request.pageToken, limits: limits)
    let result = try await stored { () throws(StoreError) in try await tenantStore.listApiKeys(tenantId: tenant, page: page) }
    var response = Substatus_V1_ListApiKeysResponse()
    // A scoped key sees only the keys within its scope (a page may then hold fewer than asked).
    response.apiKeys = result.items.filter { (request.showRevoked || !$0.isRevoked) && p.mayManage(keyScopedTo: $0.appIds) }.map(\.wire)
    response.nextPageToken = PageToken.encode(result.nextCursor)
    return response
  }

  public func revokeApiKey(_ request: Substatus_V1_RevokeApiKeyRequest, _ context: ServerContext) async throws -> Substatus_V1_RevokeApiKeyResponse {
    let (p, tenant) = try tenantID(context)
    try requireID(request.keyID, "key_id", limits: limits)
    if p.isScoped {
      // A key beyond the caller's scope is NOT_FOUND, as if it did not exist (as ListApiKeys hides
      // it), rather than PERMISSION_DENIED, which would confirm that the id is a key of the tenant.
      guard let target = try await apiKey(tenant: tenant, keyId: request.keyID), p.mayManage(keyScopedTo: target.appIds) else {
        throw RPCError(code: .notFound, message: "API key \(ErrorText.quoted(request.keyID)) not found")
      }
    }
    let record = try await stored { () throws(StoreError) in
      try await tenantStore.revokeApiKey(tenantId: tenant, keyId: request.keyID, atMs: environment.now())
    }
    keys.withLock { $0 = $0.filter { $0.value.record.keyId != request.keyID } }
    await audit(context, tenant: tenant, action: "RevokeApiKey", resource: "keys/\(request.keyID)")
    var response = Substatus_V1_RevokeApiKeyResponse()
    response.info = record.wire
    return response
  }

  /// Describes the calling key (any role: the auth interceptor let it through) from the record the
  /// interceptor looked up, so the answer is the record that authorized this very call.
  public func getCallerApiKey(_ request: Substatus_V1_GetCallerApiKeyRequest, _ context: ServerContext) async throws -> Substatus_V1_GetCallerApiKeyResponse {
    guard let record = context[CallerKeyRecordKey.self] else {
      throw RPCError(code: .unauthenticated, message: "missing authorization")
    }
    var response = Substatus_V1_GetCallerApiKeyResponse()
    response.info = record.wire
    response.tenantID = record.tenantId ?? ""
    response.operatorKey = record.role == .operator
    return response
  }

  /// A key of the tenant by id, or `nil`. The store finds keys by hash, not id, so this pages
  /// through the tenant's keys: only a scoped key's RevokeApiKey needs it, an admin call on a list
  /// of a few dozen keys.
  private func apiKey(tenant: String, keyId: String) async throws(RPCError) -> ApiKeyRecord? {
    var cursor: String? = nil
    repeat {
      let page = try await stored { () throws(StoreError) in
        try await tenantStore.listApiKeys(tenantId: tenant, page: PageRequest(size: limits.maxPageSize, cursor: cursor))
      }
      if let found = page.items.first(where: { $0.keyId == keyId }) { return found }
      cursor = page.nextCursor
    } while cursor != nil
    return nil
  }
}
