import Foundation
import Synchronization
import Testing
import RPCCore
import SubscriptionStorage
import SubstatusWire
@testable import SubstatusService

/// Every RPC of every substatus service × every role × unscoped / scoped to the app / scoped to
/// another app of the tenant × another tenant's key, with the status each must get
/// (docs/architecture.md "Security": a key scoped to apps acts only inside them).
///
/// The rows are checked against the router: an RPC registered without a row fails the test.
@Suite struct AuthorizationMatrixTests {
  /// The callers, in the order of a row's expected codes.
  enum Caller: Int, CaseIterable, CustomStringConvertible {
    case operatorKey
    case admin, adminScopedHere, adminScopedElsewhere
    case ingest, ingestScopedHere, ingestScopedElsewhere
    case read, readScopedHere, readScopedElsewhere
    case otherTenantAdmin

    var description: String {
      switch self {
      case .operatorKey: "operator"
      case .admin: "ADMIN"
      case .adminScopedHere: "ADMIN{A}"
      case .adminScopedElsewhere: "ADMIN{B}"
      case .ingest: "INGEST"
      case .ingestScopedHere: "INGEST{A}"
      case .ingestScopedElsewhere: "INGEST{B}"
      case .read: "READ"
      case .readScopedHere: "READ{A}"
      case .readScopedElsewhere: "READ{B}"
      case .otherTenantAdmin: "other tenant ADMIN"
      }
    }
  }

  /// The tenant "acme" with apps A (the one every call names) and B, keys of every kind, and
  /// another tenant.
  final class World: Sendable {
    let h: Harness
    let appA: String
    let appB: String
    let keys: [Caller: String]
    let counter = Mutex(0)

    init(h: Harness, appA: String, appB: String, keys: [Caller: String]) {
      self.h = h
      self.appA = appA
      self.appB = appB
      self.keys = keys
    }

    func next() -> Int { counter.withLock { $0 += 1; return $0 } }

    /// A new webhook of app A, made by the tenant's admin.
    func webhook() async throws -> String {
      var r = Substatus_V1_CreateWebhookRequest()
      r.appID = appA
      r.url = "https://hooks.example.com/\(next())"
      return try await h.call(Substatus_V1_EventService.createWebhook, r, key: admin).webhook!.webhookID
    }
    var admin: String { keys[.admin]! }
  }

  /// One RPC: its method and a call made with a key against app A.
  struct Row: Sendable {
    let path: String
    let expected: [String]
    let call: @Sendable (World, String) async throws -> Void
  }

  /// A row: `expected` has one code per ``Caller`` in order: `ok`, or a status abbreviation
  /// (`PD` PERMISSION_DENIED, `NF` NOT_FOUND, `IA` INVALID_ARGUMENT, `FP` FAILED_PRECONDITION).
  static func row<Req: ProtobufMessage, Res: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Req, Res>, _ expected: String,
    _ make: @escaping @Sendable (World) async throws -> Req
  ) -> Row {
    let codes = expected.split(separator: " ").map(String.init)
    precondition(codes.count == Caller.allCases.count, "\(method.method): \(codes.count) codes")
    return Row(path: method.path, expected: codes) { world, key in
      _ = try await world.h.call(method, try await make(world), key: key)
    }
  }

  /// A row of a server-streaming RPC: the call is accepted once the response headers arrive.
  static func streamingRow<Req: ProtobufMessage, Res: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Req, Res>, _ expected: String,
    _ make: @escaping @Sendable (World) async throws -> Req
  ) -> Row {
    let codes = expected.split(separator: " ").map(String.init)
    precondition(codes.count == Caller.allCases.count, "\(method.method): \(codes.count) codes")
    return Row(path: method.path, expected: codes) { world, key in
      var metadata: Metadata = [:]
      metadata.addString("Bearer \(key)", forKey: "authorization")
      let stream = try await world.h.client.serverStreaming(
        method: method.path, request: try await make(world), response: Res.self, metadata: metadata)
      withExtendedLifetime(stream) {}  // then released: the call is cancelled
    }
  }

  //                                                      op  ad  adA adB in  inA inB rd  rdA rdB other
  static let operatorOnly = /*                         */ "ok PD  PD  PD  PD  PD  PD  PD  PD  PD  PD"
  static let adminOfApp = /*                           */ "PD ok  ok  NF  PD  PD  PD  PD  PD  PD  NF"
  static let ingestOfApp = /*                          */ "PD ok  ok  NF  ok  ok  NF  PD  PD  PD  NF"
  static let readOfApp = /*                            */ "PD ok  ok  NF  ok  ok  NF  ok  ok  NF  NF"

  static let rows: [Row] = [
    // TenantService: the operator key only.
    row(Substatus_V1_TenantService.createTenant, operatorOnly) { w in
      var r = Substatus_V1_CreateTenantRequest(); r.name = "t\(w.next())"; return r
    },
    row(Substatus_V1_TenantService.listTenants, operatorOnly) { _ in Substatus_V1_ListTenantsRequest() },
    row(Substatus_V1_TenantService.disableTenant, operatorOnly) { w in
      var create = Substatus_V1_CreateTenantRequest()
      create.name = "to-disable-\(w.next())"
      var r = Substatus_V1_DisableTenantRequest()
      r.tenantID = try await w.h.call(Substatus_V1_TenantService.createTenant, create, key: w.h.operatorKey).tenant!.tenantID
      return r
    },
    // AdminService: ADMIN keys; tenant-wide calls are refused to scoped keys or filtered by scope.
    row(Substatus_V1_AdminService.registerApp, "PD ok PD PD PD PD PD PD PD PD ok") { w in
      var r = Substatus_V1_RegisterAppRequest(); r.bundleID = "com.example.new\(w.next())"; return r
    },
    row(Substatus_V1_AdminService.getApp, adminOfApp) { w in var r = Substatus_V1_GetAppRequest(); r.appID = w.appA; return r },
    row(Substatus_V1_AdminService.listApps, "PD ok ok ok PD PD PD PD PD PD ok") { _ in Substatus_V1_ListAppsRequest() },
    row(Substatus_V1_AdminService.updateApp, adminOfApp) { w in
      var r = Substatus_V1_UpdateAppRequest(); r.appID = w.appA; r.updateMask = ["display_name"]; return r
    },
    row(Substatus_V1_AdminService.setSharedSecret, adminOfApp) { w in
      var r = Substatus_V1_SetSharedSecretRequest(); r.appID = w.appA; r.sharedSecret = "matrix-secret"; return r
    },
    row(Substatus_V1_AdminService.setInAppPurchaseKey, adminOfApp) { w in
      var r = Substatus_V1_SetInAppPurchaseKeyRequest(); r.appID = w.appA; r.issuerID = testIssuerID; r.keyID = "2X9R4HXF34"
      r.privateKeyPem = SecurityTests.iapKeyPEM; return r
    },
    row(Substatus_V1_AdminService.putProducts, adminOfApp) { w in
      var r = Substatus_V1_PutProductsRequest(); r.appID = w.appA
      var p = Substatus_V1_Product(); p.productID = "lifetime"; p.type = .nonConsumable; r.products = [p]; return r
    },
    row(Substatus_V1_AdminService.listProducts, adminOfApp) { w in var r = Substatus_V1_ListProductsRequest(); r.appID = w.appA; return r },
    row(Substatus_V1_AdminService.setPolicy, adminOfApp) { w in
      var r = Substatus_V1_SetPolicyRequest(); r.appID = w.appA; r.updateMask = ["billing_retry_entitled"]; return r
    },
    // Named entitlements: the product is put first (by the admin), so only authorization decides.
    row(Substatus_V1_AdminService.putEntitlements, adminOfApp) { w in
      var products = Substatus_V1_PutProductsRequest(); products.appID = w.appA
      var p = Substatus_V1_Product(); p.productID = "lifetime"; p.type = .nonConsumable; products.products = [p]
      _ = try await w.h.call(Substatus_V1_AdminService.putProducts, products, key: w.admin)
      var e = Substatus_V1_EntitlementDefinition(); e.entitlementID = "premium"; e.productIDs = ["lifetime"]
      var r = Substatus_V1_PutEntitlementsRequest(); r.appID = w.appA; r.entitlements = [e]; return r
    },
    row(Substatus_V1_AdminService.listEntitlements, adminOfApp) { w in var r = Substatus_V1_ListEntitlementsRequest(); r.appID = w.appA; return r },
    // Retention rules: Get and Test find the rules the admin put first, so only authorization decides.
    row(Substatus_V1_AdminService.putRetentionRules, adminOfApp) { w in
      var r = Substatus_V1_PutRetentionRulesRequest(); r.appID = w.appA; r.rules = try retentionRules(); return r
    },
    row(Substatus_V1_AdminService.getRetentionRules, adminOfApp) { w in
      var put = Substatus_V1_PutRetentionRulesRequest(); put.appID = w.appA; put.rules = try retentionRules()
      _ = try await w.h.call(Substatus_V1_AdminService.putRetentionRules, put, key: w.admin)
      var r = Substatus_V1_GetRetentionRulesRequest(); r.appID = w.appA; return r
    },
    row(Substatus_V1_AdminService.testRetentionRules, adminOfApp) { w in
      var put = Substatus_V1_PutRetentionRulesRequest(); put.appID = w.appA; put.rules = try retentionRules()
      _ = try await w.h.call(Substatus_V1_AdminService.putRetentionRules, put, key: w.admin)
      var r = Substatus_V1_TestRetentionRulesRequest(); r.appID = w.appA; r.userID = "u1"; return r
    },
    row(Substatus_V1_AdminService.listKeptNotifications, adminOfApp) { w in
      var r = Substatus_V1_ListKeptNotificationsRequest(); r.appID = w.appA; return r
    },
    row(Substatus_V1_AdminService.deleteEntitlements, adminOfApp) { w in
      var r = Substatus_V1_DeleteEntitlementsRequest(); r.appID = w.appA; r.entitlementIDs = ["premium"]; return r
    },
    // Erasure: products and users of app A.
    row(Substatus_V1_AdminService.deleteProducts, adminOfApp) { w in
      var r = Substatus_V1_DeleteProductsRequest(); r.appID = w.appA; r.productIDs = ["not.in.catalog"]; return r
    },
    row(Substatus_V1_AdminService.deleteUser, adminOfApp) { w in
      var r = Substatus_V1_DeleteUserRequest(); r.appID = w.appA; r.userID = "erased-\(w.next())"; return r
    },
    // A READ key limited to app A: within ADMIN{A}'s scope, beyond ADMIN{B}'s; app A is unknown to
    // the other tenant (INVALID_ARGUMENT naming app_ids[0], as for an app that does not exist).
    row(Substatus_V1_AdminService.createApiKey, "PD ok ok PD PD PD PD PD PD PD IA") { w in
      var r = Substatus_V1_CreateApiKeyRequest(); r.role = .read; r.appIDs = [w.appA]; return r
    },
    row(Substatus_V1_AdminService.listApiKeys, "PD ok ok ok PD PD PD PD PD PD ok") { _ in Substatus_V1_ListApiKeysRequest() },
    // Revokes a fresh READ key limited to app A.
    row(Substatus_V1_AdminService.revokeApiKey, adminOfApp) { w in
      var create = Substatus_V1_CreateApiKeyRequest(); create.role = .read; create.appIDs = [w.appA]
      var r = Substatus_V1_RevokeApiKeyRequest()
      r.keyID = try await w.h.call(Substatus_V1_AdminService.createApiKey, create, key: w.admin).info!.keyID
      return r
    },
    // Every valid key may describe itself (the console hides what the key may not do).
    row(Substatus_V1_AdminService.getCallerApiKey, "ok ok ok ok ok ok ok ok ok ok ok") { _ in Substatus_V1_GetCallerApiKeyRequest() },
    // IngestService: ADMIN and INGEST keys. Calls that would reach Apple send a request that fails
    // its own validation after the app check: INVALID_ARGUMENT shows authorization passed.
    row(Substatus_V1_IngestService.submitReceipt, "PD IA IA NF IA IA NF PD PD PD NF") { w in
      var r = Substatus_V1_SubmitReceiptRequest(); r.appID = w.appA; r.userID = "u"; return r
    },
    row(Substatus_V1_IngestService.importReceiptResponse, ingestOfApp) { w in
      var r = Substatus_V1_ImportReceiptResponseRequest(); r.appID = w.appA; r.userID = "u"
      r.verifyReceiptResponseJson = Array(#"{"status":0,"environment":"Production","receipt":{"in_app":[]}}"#.utf8); return r
    },
    row(Substatus_V1_IngestService.importTransactions, ingestOfApp) { w in
      var r = Substatus_V1_ImportTransactionsRequest(); r.appID = w.appA; r.userID = "u"
      var t = Substatus_V1_Transaction(); t.transactionID = "t1"; t.productID = "lifetime"; t.purchaseDateMs = 1_700_000_000_000
      r.transactions = [t]; return r
    },
    row(Substatus_V1_IngestService.submitSignedTransactions, ingestOfApp) { w in
      var r = Substatus_V1_SubmitSignedTransactionsRequest(); r.appID = w.appA; r.userID = "u"; r.signedTransactions = ["not.a.jws"]; return r
    },
    row(Substatus_V1_IngestService.syncTransactionHistory, "PD IA IA NF IA IA NF PD PD PD NF") { w in
      var r = Substatus_V1_SyncTransactionHistoryRequest(); r.appID = w.appA; return r
    },
    row(Substatus_V1_IngestService.submitAppTransaction, "PD IA IA NF IA IA NF PD PD PD NF") { w in
      var r = Substatus_V1_SubmitAppTransactionRequest(); r.appID = w.appA; r.userID = "u"; r.signedAppTransaction = "not.a.jws"
      return r
    },
    // EligibilityService and StatusService: every tenant role.
    row(Substatus_V1_EligibilityService.checkEligibility, readOfApp) { w in
      var r = Substatus_V1_CheckEligibilityRequest(); r.appID = w.appA
      var q = Substatus_V1_EligibilityQuery(); q.userID = "u"; q.productIDs = ["lifetime"]; r.queries = [q]; return r
    },
    // User "u" never subscribed: past authorization the answer is FAILED_PRECONDITION.
    row(Substatus_V1_EligibilityService.signPromotionalOffer, "PD FP FP NF FP FP NF FP FP NF NF") { w in
      var r = Substatus_V1_SignPromotionalOfferRequest(); r.appID = w.appA; r.userID = "u"; r.productID = "premium.monthly"
      r.offerID = "premium.winback"; return r
    },
    row(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, readOfApp) { w in
      var r = Substatus_V1_SignIntroductoryOfferEligibilityRequest(); r.appID = w.appA; r.userID = "u"
      r.productID = "premium.monthly"; r.transactionID = "1"; return r
    },
    row(Substatus_V1_StatusService.getStatus, readOfApp) { w in var r = Substatus_V1_GetStatusRequest(); r.appID = w.appA; r.userID = "u"; return r },
    row(Substatus_V1_StatusService.getEntitlements, readOfApp) { w in
      var r = Substatus_V1_GetEntitlementsRequest(); r.appID = w.appA; r.userID = "u"; return r
    },
    row(Substatus_V1_StatusService.getTransactionHistory, readOfApp) { w in
      var r = Substatus_V1_GetTransactionHistoryRequest(); r.appID = w.appA; r.userID = "u"; return r
    },
    // EventService: READ keys list and watch the log; webhooks and replays need ADMIN.
    row(Substatus_V1_EventService.listEvents, readOfApp) { w in var r = Substatus_V1_ListEventsRequest(); r.appID = w.appA; return r },
    streamingRow(Substatus_V1_EventService.watchEvents, readOfApp) { w in
      var r = Substatus_V1_WatchEventsRequest(); r.appID = w.appA; return r
    },
    row(Substatus_V1_EventService.createWebhook, adminOfApp) { w in
      var r = Substatus_V1_CreateWebhookRequest(); r.appID = w.appA; r.url = "https://hooks.example.com/\(w.next())"; return r
    },
    row(Substatus_V1_EventService.listWebhooks, adminOfApp) { w in var r = Substatus_V1_ListWebhooksRequest(); r.appID = w.appA; return r },
    row(Substatus_V1_EventService.deleteWebhook, adminOfApp) { w in
      var r = Substatus_V1_DeleteWebhookRequest(); r.appID = w.appA; r.webhookID = try await w.webhook(); return r
    },
    // A webhook that does not exist: past authorization the answer is NOT_FOUND.
    row(Substatus_V1_EventService.testWebhook, "PD NF NF NF PD PD PD PD PD PD NF") { w in
      var r = Substatus_V1_TestWebhookRequest(); r.appID = w.appA; r.webhookID = "wh_none"; return r
    },
    row(Substatus_V1_EventService.listDeliveries, adminOfApp) { w in
      var r = Substatus_V1_ListDeliveriesRequest(); r.appID = w.appA; r.webhookID = try await w.webhook(); return r
    },
    row(Substatus_V1_EventService.replayEvents, adminOfApp) { w in var r = Substatus_V1_ReplayEventsRequest(); r.appID = w.appA; return r },
    // ReportService: ADMIN keys.
    row(Substatus_V1_ReportService.getReport, adminOfApp) { w in var r = Substatus_V1_GetReportRequest(); r.appID = w.appA; return r },
    row(Substatus_V1_ReportService.getTrends, adminOfApp) { w in
      var r = Substatus_V1_GetTrendsRequest(); r.appID = w.appA; r.fromMs = 1_704_067_200_000; r.toMs = 1_704_153_600_000; return r
    },
    row(Substatus_V1_ReportService.getChart, adminOfApp) { w in
      var r = Substatus_V1_GetChartRequest(); r.appID = w.appA; r.chart = .mrr; r.fromMs = 1_704_067_200_000
      r.toMs = 1_704_153_600_000; return r
    },
  ]

  static func code(_ error: RPCError) -> String {
    switch error.code {
    case .permissionDenied: "PD"
    case .notFound: "NF"
    case .invalidArgument: "IA"
    case .failedPrecondition: "FP"
    case .unauthenticated: "UA"
    default: "\(error.code)"
    }
  }

  /// Builds the world: tenant acme with apps A and B (A with an In-App Purchase key, for the
  /// signing calls), a key of every kind, and another tenant with an app of its own.
  static func world(_ h: Harness) async throws -> World {
    let (admin, appA) = try await h.makeTenantWithApp()
    let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.other.app")
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = "com.example.second"
    let appB = try await h.call(Substatus_V1_AdminService.registerApp, register, key: admin).app!.appID
    var iap = Substatus_V1_SetInAppPurchaseKeyRequest()
    iap.appID = appA
    iap.issuerID = testIssuerID
    iap.keyID = "2X9R4HXF34"
    iap.privateKeyPem = SecurityTests.iapKeyPEM
    _ = try await h.call(Substatus_V1_AdminService.setInAppPurchaseKey, iap, key: admin)
    func key(_ role: Substatus_V1_ApiKeyRole, _ apps: [String]) async throws -> String {
      var r = Substatus_V1_CreateApiKeyRequest()
      r.role = role
      r.appIDs = apps
      return try await h.call(Substatus_V1_AdminService.createApiKey, r, key: admin).key
    }
    var keys: [Caller: String] = [.operatorKey: h.operatorKey, .admin: admin, .otherTenantAdmin: otherAdmin]
    keys[.adminScopedHere] = try await key(.admin, [appA])
    keys[.adminScopedElsewhere] = try await key(.admin, [appB])
    keys[.ingest] = try await key(.ingest, [])
    keys[.ingestScopedHere] = try await key(.ingest, [appA])
    keys[.ingestScopedElsewhere] = try await key(.ingest, [appB])
    keys[.read] = try await key(.read, [])
    keys[.readScopedHere] = try await key(.read, [appA])
    keys[.readScopedElsewhere] = try await key(.read, [appB])
    return World(h: h, appA: appA, appB: appB, keys: keys)
  }

  @Test func everyRPCHasARow() async throws {
    try await withService { h in
      var router = RPCRouter()
      h.service.register(in: &router)
      let registered = Set(router.methods)
      let covered = Set(Self.rows.map(\.path))
      #expect(covered.count == Self.rows.count, "a method has two rows")
      #expect(registered.subtracting(covered).isEmpty, "RPCs without a row in the authorization matrix")
      #expect(covered.subtracting(registered).isEmpty, "rows for RPCs that are not registered")
      // Every service of the public API is served (the router is the list the matrix follows).
      let services = ProtoFiles.all.flatMap(\.services).filter { $0.hasPrefix("substatus.v1.") }
      #expect(Set(services) == Set(router.serviceNames))
    }
  }

  @Test func matrix() async throws {
    // Each row's CreateWebhook makes one: the webhook caps are not what the matrix checks.
    var limits = ServiceLimits()
    limits.webhooks = .unlimited
    try await withService(limits: limits) { h in
      let world = try await Self.world(h)
      var mismatches: [String] = []
      for row in Self.rows {
        for caller in Caller.allCases {
          let expected = row.expected[caller.rawValue]
          var got = "ok"
          do {
            try await row.call(world, world.keys[caller]!)
          } catch let error as RPCError {
            got = Self.code(error)
          }
          if got != expected { mismatches.append("\(row.path) as \(caller): expected \(expected), got \(got)") }
        }
      }
      #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
    }
  }

  @Test func scopedAdminSeesAndManagesOnlyKeysWithinItsScope() async throws {
    try await withService { h in
      let w = try await Self.world(h)
      let scoped = w.keys[.adminScopedHere]!
      let all = try await h.call(Substatus_V1_AdminService.listApiKeys, Substatus_V1_ListApiKeysRequest(), key: w.admin).apiKeys
      let first = try #require(all.first { $0.description == "first admin key" })
      #expect(first.appIDs.isEmpty)
      var both = Substatus_V1_CreateApiKeyRequest()
      both.role = .read
      both.appIDs = [w.appA, w.appB]
      let wide = try await h.call(Substatus_V1_AdminService.createApiKey, both, key: w.admin).info!

      // It lists only keys limited to a subset of {A}: not the unscoped ones, not {B}, not {A, B}.
      let listed = try await h.call(Substatus_V1_AdminService.listApiKeys, Substatus_V1_ListApiKeysRequest(), key: scoped).apiKeys
      #expect(!listed.isEmpty)
      #expect(listed.allSatisfy { $0.appIDs == [w.appA] }, "\(listed.map(\.appIDs))")
      #expect(!listed.contains { $0.keyID == first.keyID || $0.keyID == wide.keyID })
      let expectedIds = Set(all.filter { $0.appIDs == [w.appA] }.map(\.keyID))
      #expect(Set(listed.map(\.keyID)) == expectedIds)

      // It cannot revoke the tenant's first, unlimited admin key, nor a key reaching beyond {A}:
      // NOT_FOUND, as for a key that does not exist; the first key keeps working.
      for target in [first.keyID, wide.keyID] {
        var revoke = Substatus_V1_RevokeApiKeyRequest()
        revoke.keyID = target
        let error = await expectStatus(.notFound, "revoke \(target)") {
          _ = try await h.call(Substatus_V1_AdminService.revokeApiKey, revoke, key: scoped)
        }
        #expect(error?.message == "API key \"\(target)\" not found")
      }
      h.world.now.withLock { $0 += 60_000 }  // past the key cache
      _ = try await h.call(Substatus_V1_AdminService.listApps, Substatus_V1_ListAppsRequest(), key: w.admin)
      let after = try await h.call(Substatus_V1_AdminService.listApiKeys, Substatus_V1_ListApiKeysRequest(), key: w.admin).apiKeys
      #expect(after.contains { $0.keyID == first.keyID && !$0.revoked })

      // It cannot create an unscoped key, nor one reaching app B; it can create one for {A}.
      for apps in [[], [w.appB], [w.appA, w.appB]] {
        var create = Substatus_V1_CreateApiKeyRequest()
        create.role = .read
        create.appIDs = apps
        await expectStatus(.permissionDenied, "create \(apps)") {
          _ = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: scoped)
        }
      }
      var create = Substatus_V1_CreateApiKeyRequest()
      create.role = .admin
      create.appIDs = [w.appA]
      let made = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: scoped)
      #expect(made.info?.appIDs == [w.appA])
      // ... and revoke it.
      var revoke = Substatus_V1_RevokeApiKeyRequest()
      revoke.keyID = made.info!.keyID
      #expect(try await h.call(Substatus_V1_AdminService.revokeApiKey, revoke, key: scoped).info?.revoked == true)

      // It sees only its app, and cannot register one.
      let apps = try await h.call(Substatus_V1_AdminService.listApps, Substatus_V1_ListAppsRequest(), key: scoped).apps
      #expect(apps.map(\.appID) == [w.appA])
      var register = Substatus_V1_RegisterAppRequest()
      register.bundleID = "com.example.third"
      await expectStatus(.permissionDenied) { _ = try await h.call(Substatus_V1_AdminService.registerApp, register, key: scoped) }
      let unchanged = try await h.call(Substatus_V1_AdminService.listApps, Substatus_V1_ListAppsRequest(), key: w.admin).apps
      #expect(!unchanged.contains { $0.bundleID == "com.example.third" })
    }
  }

  /// GetCallerApiKey answers each caller with its own role, scope and tenant, never another key's;
  /// a revoked key gets UNAUTHENTICATED.
  @Test func callerLearnsItsOwnRoleAndScope() async throws {
    try await withService { h in
      let w = try await Self.world(h)
      let expected: [(Caller, Substatus_V1_ApiKeyRole, [String])] = [
        (.admin, .admin, []), (.adminScopedHere, .admin, [w.appA]), (.ingestScopedElsewhere, .ingest, [w.appB]),
        (.read, .read, []), (.readScopedHere, .read, [w.appA]),
      ]
      let acme = try await h.call(Substatus_V1_AdminService.getCallerApiKey, .init(), key: w.admin).tenantID
      #expect(!acme.isEmpty)
      for (caller, role, apps) in expected {
        let answer = try await h.call(Substatus_V1_AdminService.getCallerApiKey, .init(), key: w.keys[caller]!)
        #expect(answer.info?.role == role, "\(caller)")
        #expect(answer.info?.appIDs == apps, "\(caller)")
        #expect(answer.tenantID == acme, "\(caller)")
        #expect(!answer.operatorKey, "\(caller)")
        #expect(w.keys[caller]!.hasPrefix(String((answer.info?.displayPrefix ?? "-").dropLast())), "\(caller): another key's description")
      }
      let other = try await h.call(Substatus_V1_AdminService.getCallerApiKey, .init(), key: w.keys[.otherTenantAdmin]!)
      #expect(other.tenantID != acme && !other.tenantID.isEmpty)
      let op = try await h.call(Substatus_V1_AdminService.getCallerApiKey, .init(), key: h.operatorKey)
      #expect(op.operatorKey && op.tenantID.isEmpty && op.info?.role == .unspecified)

      let read = try await h.call(Substatus_V1_AdminService.getCallerApiKey, .init(), key: w.keys[.read]!)
      var revoke = Substatus_V1_RevokeApiKeyRequest()
      revoke.keyID = read.info!.keyID
      _ = try await h.call(Substatus_V1_AdminService.revokeApiKey, revoke, key: w.admin)
      await expectStatus(.unauthenticated) {
        _ = try await h.call(Substatus_V1_AdminService.getCallerApiKey, .init(), key: w.keys[.read]!)
      }
    }
  }
}

/// A small valid rule set (AdminService.PutRetentionRules).
private func retentionRules() throws -> Substatus_V1_RetentionRules {
  try Substatus_V1_RetentionRules(jsonString: #"{"defaultMessageIdentifier": "00000000-0000-4000-8000-000000000000"}"#)
}
