import Testing
import RPCCore
import SubscriptionStorage
import SubstatusWire
@testable import SubstatusService

/// The auth interceptor's cache of resolved keys (by the `authorization` header's text): a hit
/// changes no answer, and revoking a key or disabling its tenant takes effect at the next call,
/// within the cache's lifetime, whatever spelling of the header the key was cached under. (The
/// roles by method: MethodPolicyTests.)
@Suite("Auth key cache")
struct AuthKeyCacheTests {
  /// Every spelling of the header a client may send for one key.
  static let spellings = ["Bearer %@", "bearer %@", "BEARER %@", "bEaReR %@"]

  func call(_ h: Harness, header: String, app: String) async throws -> Substatus_V1_GetStatusResponse {
    var metadata: Metadata = [:]
    metadata.addString(header, forKey: "authorization")
    var request = Substatus_V1_GetStatusRequest()
    request.appID = app
    request.userID = "u1"
    return try await h.client.unary(
      method: Substatus_V1_StatusService.getStatus.path, request: request, response: Substatus_V1_GetStatusResponse.self,
      metadata: metadata)
  }

  func header(_ spelling: String, _ key: String) -> String { spelling.replacingOccurrences(of: "%@", with: key) }

  @Test("a revoked key is refused at its next call, under every header it was cached by")
  func revocationIsImmediate() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var create = Substatus_V1_CreateApiKeyRequest()
      create.role = .read
      let made = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: admin)
      for spelling in Self.spellings {
        for _ in 0..<2 { _ = try await call(h, header: header(spelling, made.key), app: app) }  // cached
      }
      #expect(h.service.keys.withLock { $0.count } >= Self.spellings.count)
      var revoke = Substatus_V1_RevokeApiKeyRequest()
      revoke.keyID = made.info!.keyID
      _ = try await h.call(Substatus_V1_AdminService.revokeApiKey, revoke, key: admin)
      // The clock has not moved: every entry is within the cache's lifetime.
      for spelling in Self.spellings {
        await expectStatus(.unauthenticated, spelling) { _ = try await call(h, header: header(spelling, made.key), app: app) }
      }
      // The tenant's other keys still work.
      _ = try await h.call(Substatus_V1_AdminService.listApps, Substatus_V1_ListAppsRequest(), key: admin)
    }
  }

  @Test("a disabled tenant's keys are refused at their next call")
  func disablingTheTenantIsImmediate() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var create = Substatus_V1_CreateApiKeyRequest()
      create.role = .read
      let read = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: admin).key
      for spelling in Self.spellings { _ = try await call(h, header: header(spelling, read), app: app) }
      let tenants = try await h.call(Substatus_V1_TenantService.listTenants, Substatus_V1_ListTenantsRequest(), key: h.operatorKey)
      var disable = Substatus_V1_DisableTenantRequest()
      disable.tenantID = tenants.tenants.first { $0.name == "acme" }!.tenantID
      _ = try await h.call(Substatus_V1_TenantService.disableTenant, disable, key: h.operatorKey)
      for spelling in Self.spellings {
        await expectStatus(.permissionDenied, spelling) { _ = try await call(h, header: header(spelling, read), app: app) }
      }
    }
  }

  @Test("malformed headers are refused and never cached")
  func malformedHeaders() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let before = h.service.keys.withLock { $0.count }
      for bad in ["", "Basic \(admin)", "Bearer", "Bearer ", admin, "Bearer " + String(repeating: "k", count: 257)] {
        await expectStatus(.unauthenticated, bad) { _ = try await call(h, header: bad, app: app) }
      }
      #expect(h.service.keys.withLock { $0.count } == before)
    }
  }

  @Test("the authorization header is found among others, as the first value")
  func headerName() {
    var metadata: Metadata = [:]
    metadata.addString("no", forKey: "authorizatio")
    metadata.addString("no", forKey: "x-authorization")
    metadata.addBinary([1], forKey: "authorization-bin")
    metadata.addString("Bearer k", forKey: "Authorization")
    metadata.addString("Bearer second", forKey: "authorization")
    #expect(AuthInterceptor.authorization(metadata) == "Bearer k")
    #expect(AuthInterceptor.authorization([:]) == nil)
    #expect(AuthInterceptor.authorization(["authorizatioN": "Bearer x"]) == "Bearer x")
  }
}
