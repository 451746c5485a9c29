import Testing
import RPCCore
import SubscriptionStorage
import SubstatusWire
@testable import SubstatusService

/// The roles each RPC declares in its `(substatus.v1.required_role)` option, as the auth
/// interceptor reads them from the generated table (``MethodPolicy``): every RPC the service
/// registers has one, and each is the role the hand-written policy enforced before the option
/// existed (the rows below).
@Suite struct MethodPolicyTests {
  /// Every RPC of substatus.v1 and the keys that may call it. The operator key is no tenant's: it
  /// calls only TenantService and GetCallerApiKey.
  static let expected: [(method: String, roles: Set<ApiKeyRecord.Role>)] = {
    let admin = MethodPolicy.admin, ingest = MethodPolicy.ingest, read = MethodPolicy.read
    let operatorOnly = MethodPolicy.operatorOnly, anyKey = MethodPolicy.anyKey
    let rows: [(String, [(String, Set<ApiKeyRecord.Role>)])] = [
      ("AdminService", [
        ("RegisterApp", admin), ("GetApp", admin), ("ListApps", admin), ("UpdateApp", admin),
        ("SetSharedSecret", admin), ("SetInAppPurchaseKey", admin), ("PutProducts", admin),
        ("ListProducts", admin), ("PutEntitlements", admin), ("ListEntitlements", admin),
        ("DeleteEntitlements", admin), ("DeleteProducts", admin), ("DeleteUser", admin),
        ("SetPolicy", admin), ("CreateApiKey", admin), ("ListApiKeys", admin), ("RevokeApiKey", admin),
        ("GetCallerApiKey", anyKey), ("PutRetentionRules", admin), ("GetRetentionRules", admin),
        ("TestRetentionRules", admin),
      ]),
      ("TenantService", [("CreateTenant", operatorOnly), ("ListTenants", operatorOnly), ("DisableTenant", operatorOnly)]),
      ("IngestService", [
        ("SubmitReceipt", ingest), ("ImportReceiptResponse", ingest), ("ImportTransactions", ingest),
        ("SubmitSignedTransactions", ingest), ("SyncTransactionHistory", ingest), ("SubmitAppTransaction", ingest),
      ]),
      ("EligibilityService", [
        ("CheckEligibility", read), ("SignPromotionalOffer", read), ("SignIntroductoryOfferEligibility", read),
      ]),
      ("StatusService", [("GetStatus", read), ("GetEntitlements", read), ("GetTransactionHistory", read)]),
      ("ReportService", [("GetReport", admin), ("GetTrends", admin), ("GetChart", admin)]),
      ("EventService", [
        ("ListEvents", read), ("WatchEvents", read), ("CreateWebhook", admin), ("ListWebhooks", admin),
        ("DeleteWebhook", admin), ("TestWebhook", admin), ("ListDeliveries", admin), ("ReplayEvents", admin),
      ]),
    ]
    return rows.flatMap { service, methods in methods.map { ("/substatus.v1.\(service)/\($0.0)", $0.1) } }
  }()

  /// The paths the service registers with a router.
  static func registeredMethods() async throws -> [String] {
    var methods: [String] = []
    try await withService { h in
      var router = RPCRouter()
      h.service.register(in: &router)
      methods = router.methods
    }
    return methods
  }

  @Test("each RPC's declared role is the one the policy enforced", arguments: expected)
  func declaredRole(method: String, roles: Set<ApiKeyRecord.Role>) {
    #expect(ProtoMethodOptions.requiredRoles[method] != nil, "\(method) declares no role")
    #expect(MethodPolicy.roles(forMethod: method) == roles, "\(method)")
  }

  @Test("every RPC the service registers declares a role, and the rows name every one")
  func everyRegisteredRPCHasARole() async throws {
    let methods = try await Self.registeredMethods()
    let registered = Set(methods.filter { $0.hasPrefix("/substatus.") })
    #expect(!registered.isEmpty)
    for method in registered {
      let role = ProtoMethodOptions.requiredRoles[method]
      #expect(role != nil && role != .unspecified, "\(method) declares no role")
    }
    #expect(Set(ProtoMethodOptions.requiredRoles.keys) == registered, "roles for RPCs that are not registered")
    // A new RPC gets a row here too: the rows are the record of who may call what.
    #expect(Set(Self.expected.map(\.method)) == registered)
  }

  @Test(
    "methods outside substatus need no key; an unknown substatus path needs an ADMIN key",
    arguments: [
      ("/grpc.health.v1.Health/Check", nil), ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", nil),
      ("/", nil), ("", nil), ("/nopath", nil),
      ("/substatus.v9.Future/Call", MethodPolicy.admin), ("/substatus.v1.AdminService/NoSuchMethod", MethodPolicy.admin),
    ] as [(String, Set<ApiKeyRecord.Role>?)])
  func undeclaredPaths(method: String, roles: Set<ApiKeyRecord.Role>?) {
    #expect(MethodPolicy.roles(forMethod: method) == roles)
  }

  @Test("a requirement lets the roles at and above it call; the operator key only where named")
  func requirementRoles() {
    #expect(MethodPolicy.roles(for: .read) == [.admin, .ingest, .read])
    #expect(MethodPolicy.roles(for: .ingest) == [.admin, .ingest])
    #expect(MethodPolicy.roles(for: .admin) == [.admin])
    #expect(MethodPolicy.roles(for: .operator) == [.operator])
    #expect(MethodPolicy.roles(for: .anyKey) == [.operator, .admin, .ingest, .read])
    #expect(MethodPolicy.roles(for: .unspecified).isEmpty)
    #expect(MethodPolicy.roles(for: .UNRECOGNIZED(9)).isEmpty)
  }
}
