import SubstatusClientTestKit
import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire
import Testing

/// One typed client method: what it must send and what it must return.
struct MethodCase: Sendable, CustomTestStringConvertible {
  let name: String
  let path: String
  let authenticated: Bool
  /// Registers the fake handler for the method.
  let register: @Sendable (inout RPCRouter, CallLog) -> Void
  /// Decodes the recorded request and compares it with the expected one.
  let requestMatches: @Sendable ([UInt8]) -> Bool
  /// Calls the method and checks its result.
  let invoke: @Sendable (SubstatusClient) async throws -> Void

  var testDescription: String { name }

  static func make<Request: ProtobufMessage, Response: ProtobufMessage>(
    _ name: String, _ method: ProtoMethodDescriptor<Request, Response>, authenticated: Bool = true,
    expect: Request, reply: Response,
    invoke: @escaping @Sendable (SubstatusClient, Response) async throws -> Void
  ) -> MethodCase {
    MethodCase(
      name: name, path: method.path, authenticated: authenticated,
      register: { router, log in router.fake(method, log: log, reply: reply) },
      requestMatches: { bytes in (try? Request(serializedBytes: bytes)) == expect },
      invoke: { client in try await invoke(client, reply) })
  }
}

private func message<M: ProtobufMessage>(_ type: M.Type = M.self, _ build: (inout M) -> Void) -> M {
  var value = M()
  build(&value)
  return value
}

private let sampleApp = message(Substatus_V1_App.self) {
  $0.appID = "app_1"
  $0.bundleID = "com.example.app"
  $0.displayName = "Example"
  $0.createdMs = 1_767_225_600_000
}
private let sampleGroup = message(Substatus_V1_GroupStatus.self) {
  $0.subscriptionGroupID = "pro"
  $0.state = .active
  $0.productID = "pro.monthly"
  $0.expiresMs = 1_767_225_600_000
}
private let asOf = Date(substatusMilliseconds: 1_767_225_600_123)

let methodCases: [MethodCase] = [
  .make(
    "createTenant", Substatus_V1_TenantService.createTenant,
    expect: message { $0.name = "Example Inc." },
    reply: message(Substatus_V1_CreateTenantResponse.self) { $0.adminKey = "sk_admin" }
  ) { client, reply async throws in
    #expect(try await client.createTenant(name: "Example Inc.") == reply)
  },
  .make(
    "listTenants", Substatus_V1_TenantService.listTenants,
    expect: message {
      $0.pageSize = 10
      $0.pageToken = "t2"
    },
    reply: message(Substatus_V1_ListTenantsResponse.self) { $0.nextPageToken = "t3" }
  ) { client, reply async throws in
    #expect(try await client.listTenants(pageSize: 10, pageToken: "t2") == reply)
  },
  .make(
    "disableTenant", Substatus_V1_TenantService.disableTenant,
    expect: message { $0.tenantID = "ten_1" },
    reply: message(Substatus_V1_DisableTenantResponse.self) {
      $0.tenant = message { $0.disabled = true }
    }
  ) { client, reply async throws in
    #expect(try await client.disableTenant(tenantID: "ten_1") == reply)
  },
  .make(
    "registerApp", Substatus_V1_AdminService.registerApp,
    expect: message {
      $0.bundleID = "com.example.app"
      $0.displayName = "Example"
      $0.appleAppID = 42
    },
    reply: message(Substatus_V1_RegisterAppResponse.self) { $0.app = sampleApp }
  ) { client, _ async throws in
    #expect(
      try await client.registerApp(
        bundleID: "com.example.app", displayName: "Example", appleAppID: 42)
        == sampleApp)
  },
  .make(
    "getApp", Substatus_V1_AdminService.getApp, expect: message { $0.appID = "app_1" },
    reply: message(Substatus_V1_GetAppResponse.self) { $0.app = sampleApp }
  ) { client, _ async throws in
    #expect(try await client.getApp(appID: "app_1") == sampleApp)
  },
  .make(
    "listApps", Substatus_V1_AdminService.listApps, expect: message { $0.pageSize = 5 },
    reply: message(Substatus_V1_ListAppsResponse.self) { $0.apps = [sampleApp] }
  ) { client, reply async throws in
    #expect(try await client.listApps(pageSize: 5) == reply)
  },
  .make(
    "setSharedSecret", Substatus_V1_AdminService.setSharedSecret,
    expect: message {
      $0.appID = "app_1"
      $0.sharedSecret = "0123456789abcdef0123456789abcdef"
      $0.previousSecretOverlapSeconds = 60
    },
    reply: message(Substatus_V1_SetSharedSecretResponse.self) {
      $0.fingerprint = "sha256:0011223344556677"
    }
  ) { client, reply async throws in
    #expect(
      try await client.setSharedSecret(
        appID: "app_1", sharedSecret: "0123456789abcdef0123456789abcdef",
        previousSecretOverlapSeconds: 60)
        == reply)
  },
  .make(
    "putProducts", Substatus_V1_AdminService.putProducts,
    expect: message {
      $0.appID = "app_1"
      $0.products = [
        message {
          $0.productID = "pro.monthly"
          $0.type = .autoRenewable
          $0.subscriptionGroupID = "pro"
          $0.winBackOfferIDs = ["pro.comeback"]
        }
      ]
    },
    reply: message(Substatus_V1_PutProductsResponse.self) {
      $0.products = [
        message {
          $0.productID = "pro.monthly"
          $0.type = .autoRenewable
          $0.subscriptionGroupID = "pro"
          $0.winBackOfferIDs = ["pro.comeback"]
        }
      ]
    }
  ) { client, reply async throws in
    let product = message(Substatus_V1_Product.self) {
      $0.productID = "pro.monthly"
      $0.type = .autoRenewable
      $0.subscriptionGroupID = "pro"
      $0.winBackOfferIDs = ["pro.comeback"]
    }
    #expect(try await client.putProducts(appID: "app_1", products: [product]) == reply.products)
  },
  .make(
    "listProducts", Substatus_V1_AdminService.listProducts,
    expect: message {
      $0.appID = "app_1"
      $0.subscriptionGroupID = "pro"
      $0.pageToken = "p2"
    },
    reply: message(Substatus_V1_ListProductsResponse.self) {
      $0.products = [message { $0.productID = "x" }]
    }
  ) { client, reply async throws in
    #expect(
      try await client.listProducts(appID: "app_1", subscriptionGroupID: "pro", pageToken: "p2")
        == reply)
  },
  .make(
    "setPolicy", Substatus_V1_AdminService.setPolicy,
    expect: message {
      $0.appID = "app_1"
      $0.policy = message { $0.refundsBlockIntro = true }
      $0.updateMask = ["refunds_block_intro"]
    },
    reply: message(Substatus_V1_SetPolicyResponse.self) { $0.app = sampleApp }
  ) { client, _ async throws in
    let policy = message(Substatus_V1_EligibilityPolicy.self) { $0.refundsBlockIntro = true }
    #expect(
      try await client.setPolicy(
        appID: "app_1", policy: policy, updateMask: ["refunds_block_intro"]) == sampleApp)
  },
  .make(
    "createApiKey", Substatus_V1_AdminService.createApiKey,
    expect: message {
      $0.role = .read
      $0.appIDs = ["app_1"]
      $0.description = "paywall"
    },
    reply: message(Substatus_V1_CreateApiKeyResponse.self) { $0.key = "sk_read" }
  ) { client, reply async throws in
    #expect(
      try await client.createApiKey(role: .read, appIDs: ["app_1"], description: "paywall") == reply
    )
  },
  .make(
    "listApiKeys", Substatus_V1_AdminService.listApiKeys,
    expect: message { $0.showRevoked = true },
    reply: message(Substatus_V1_ListApiKeysResponse.self) {
      $0.apiKeys = [message { $0.keyID = "key_1" }]
    }
  ) { client, reply async throws in
    #expect(try await client.listApiKeys(showRevoked: true) == reply)
  },
  .make(
    "revokeApiKey", Substatus_V1_AdminService.revokeApiKey, expect: message { $0.keyID = "key_1" },
    reply: message(Substatus_V1_RevokeApiKeyResponse.self) {
      $0.info = message {
        $0.keyID = "key_1"
        $0.revoked = true
      }
    }
  ) { client, reply async throws in
    #expect(try await client.revokeApiKey(keyID: "key_1") == reply.info)
  },
  .make(
    "submitReceipt", Substatus_V1_IngestService.submitReceipt,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
      $0.receiptData = "TUlJ"
      $0.excludeOldTransactions = true
    },
    reply: message(Substatus_V1_SubmitReceiptResponse.self) {
      $0.userID = "u1"
      $0.groups = [sampleGroup]
    }
  ) { client, reply async throws in
    #expect(
      try await client.submitReceipt(
        appID: "app_1", userID: "u1", receiptData: "TUlJ", excludeOldTransactions: true)
        == reply)
  },
  .make(
    "importReceiptResponse", Substatus_V1_IngestService.importReceiptResponse,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
      $0.verifyReceiptResponseJson = Array(#"{"status":0}"#.utf8)
    },
    reply: message(Substatus_V1_ImportReceiptResponseResponse.self) { $0.transactionCount = 3 }
  ) { client, reply async throws in
    #expect(
      try await client.importReceiptResponse(
        appID: "app_1", userID: "u1", json: Array(#"{"status":0}"#.utf8))
        == reply)
  },
  .make(
    "importTransactions", Substatus_V1_IngestService.importTransactions,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
      $0.transactions = [message { $0.transactionID = "t1" }]
      $0.renewalInfos = [message { $0.originalTransactionID = "t1" }]
    },
    reply: message(Substatus_V1_ImportTransactionsResponse.self) {
      $0.transactionResults = [
        message {
          $0.transactionID = "t1"
          $0.outcome = .created
        }
      ]
    }
  ) { client, reply async throws in
    #expect(
      try await client.importTransactions(
        appID: "app_1", userID: "u1", transactions: [message { $0.transactionID = "t1" }],
        renewalInfos: [message { $0.originalTransactionID = "t1" }]) == reply)
  },
  .make(
    "submitSignedTransactions", Substatus_V1_IngestService.submitSignedTransactions,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
      $0.signedTransactions = ["a.b.c"]
      $0.signedRenewalInfos = ["d.e.f"]
    },
    reply: message(Substatus_V1_SubmitSignedTransactionsResponse.self) {
      $0.environment = .sandbox
      $0.transactionResults = [
        message {
          $0.transactionID = "t1"
          $0.outcome = .created
        }
      ]
    }
  ) { client, reply async throws in
    #expect(
      try await client.submitSignedTransactions(
        appID: "app_1", userID: "u1", signedTransactions: ["a.b.c"], signedRenewalInfos: ["d.e.f"])
        == reply)
  },
  .make(
    "checkEligibility", Substatus_V1_EligibilityService.checkEligibility,
    expect: message {
      $0.appID = "app_1"
      $0.queries = [
        message {
          $0.userID = "u1"
          $0.productIDs = ["a", "b"]
        },
        message {
          $0.userID = "u2"
          $0.productIDs = ["a"]
        },
      ]
      $0.asOfMs = 1_767_225_600_123
      $0.environment = .sandbox
    },
    reply: message(Substatus_V1_CheckEligibilityResponse.self) {
      $0.users = [message { $0.userID = "u1" }, message { $0.userID = "u2" }]
    }
  ) { client, reply async throws in
    let queries: [Substatus_V1_EligibilityQuery] = [
      message {
        $0.userID = "u1"
        $0.productIDs = ["a", "b"]
      },
      message {
        $0.userID = "u2"
        $0.productIDs = ["a"]
      },
    ]
    #expect(
      try await client.checkEligibility(
        appID: "app_1", queries: queries, asOf: asOf, environment: .sandbox) == reply)
  },
  .make(
    "checkEligibility (one user)", Substatus_V1_EligibilityService.checkEligibility,
    expect: message {
      $0.appID = "app_1"
      $0.queries = [
        message {
          $0.userID = "u1"
          $0.productIDs = ["a"]
        }
      ]
    },
    reply: message(Substatus_V1_CheckEligibilityResponse.self) {
      $0.users = [
        message {
          $0.userID = "u1"
          $0.products = [
            message {
              $0.productID = "a"
              $0.winBackOffers = [
                message {
                  $0.offerID = "a.comeback"
                  $0.eligible = true
                  $0.reason = .winBackOffered
                  $0.evidenceTransactionID = "1000"
                }
              ]
            }
          ]
        }
      ]
    }
  ) { client, reply async throws in
    #expect(
      try await client.checkEligibility(appID: "app_1", userID: "u1", productIDs: ["a"])
        == reply.users[0])
  },
  .make(
    "status", Substatus_V1_StatusService.getStatus,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
      $0.asOfMs = 1_767_225_600_123
      $0.environment = .production
    },
    reply: message(Substatus_V1_GetStatusResponse.self) {
      $0.userID = "u1"
      $0.groups = [sampleGroup]
    }
  ) { client, reply async throws in
    #expect(
      try await client.status(appID: "app_1", userID: "u1", asOf: asOf, environment: .production)
        == reply)
  },
  .make(
    "entitlements", Substatus_V1_StatusService.getEntitlements,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
    },
    reply: message(Substatus_V1_GetEntitlementsResponse.self) {
      $0.entitlements = [message { $0.productID = "pro" }]
    }
  ) { client, reply async throws in
    #expect(try await client.entitlements(appID: "app_1", userID: "u1") == reply)
  },
  .make(
    "transactionHistory", Substatus_V1_StatusService.getTransactionHistory,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "u1"
      $0.environment = .sandbox
      $0.pageSize = 2
      $0.pageToken = "h2"
    },
    reply: message(Substatus_V1_GetTransactionHistoryResponse.self) {
      $0.transactions = [message { $0.transactionID = "t9" }]
    }
  ) { client, reply async throws in
    #expect(
      try await client.transactionHistory(
        appID: "app_1", userID: "u1", environment: .sandbox, pageSize: 2, pageToken: "h2") == reply)
  },
  .make(
    "report", Substatus_V1_ReportService.getReport,
    expect: message {
      $0.appID = "app_1"
      $0.asOfMs = 1_767_225_600_123
    },
    reply: message(Substatus_V1_GetReportResponse.self) {
      $0.report = message {
        $0.appID = "app_1"
        $0.active = 7
      }
    }
  ) { client, reply async throws in
    #expect(try await client.report(appID: "app_1", asOf: asOf) == reply.report)
  },
  .make(
    "health", Grpc_Health_V1_Health.check, authenticated: false,
    expect: message { $0.service = "" },
    reply: message(Grpc_Health_V1_HealthCheckResponse.self) { $0.status = .serving }
  ) { client, reply async throws in
    #expect(try await client.health() == reply)
  },
]

@Suite("SubstatusClient methods")
struct SubstatusClientMethodTests {
  @Test("each method calls its path with its request and the bearer key", arguments: methodCases)
  func method(_ testCase: MethodCase) async throws {
    let log = CallLog()
    var router = RPCRouter()
    testCase.register(&router, log)
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "sk_test")
      try await testCase.invoke(client)
    }
    let calls = log.all
    try #require(calls.count == 1)
    #expect(calls[0].method == testCase.path)
    #expect(calls[0].authorization == (testCase.authenticated ? "Bearer sk_test" : nil))
    #expect(testCase.requestMatches(calls[0].request))
  }

  @Test("every RPC of every service has a case")
  func coverage() {
    let paths = Set(methodCases.map(\.path))
    let services: [String] = [
      Substatus_V1_TenantService.createTenant.path, Substatus_V1_TenantService.listTenants.path,
      Substatus_V1_TenantService.disableTenant.path,
      Substatus_V1_AdminService.registerApp.path, Substatus_V1_AdminService.getApp.path,
      Substatus_V1_AdminService.listApps.path, Substatus_V1_AdminService.setSharedSecret.path,
      Substatus_V1_AdminService.putProducts.path, Substatus_V1_AdminService.listProducts.path,
      Substatus_V1_AdminService.setPolicy.path, Substatus_V1_AdminService.createApiKey.path,
      Substatus_V1_AdminService.listApiKeys.path, Substatus_V1_AdminService.revokeApiKey.path,
      Substatus_V1_IngestService.submitReceipt.path,
      Substatus_V1_IngestService.importReceiptResponse.path,
      Substatus_V1_IngestService.importTransactions.path,
      Substatus_V1_IngestService.submitSignedTransactions.path,
      Substatus_V1_EligibilityService.checkEligibility.path,
      Substatus_V1_StatusService.getStatus.path, Substatus_V1_StatusService.getEntitlements.path,
      Substatus_V1_StatusService.getTransactionHistory.path,
      Substatus_V1_ReportService.getReport.path,
      Grpc_Health_V1_Health.check.path,
    ]
    #expect(Set(services).subtracting(paths).isEmpty)
  }

  @Test("per-call metadata and timeout reach the server; the key replaces a caller's authorization")
  func metadataAndTimeout() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.getApp, log: log, reply: Substatus_V1_GetAppResponse())
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "sk_test")
      _ = try await client.getApp(
        appID: "a",
        options: SubstatusCallOptions(
          timeout: .seconds(5), metadata: ["x-request-id": "r-42", "authorization": "Bearer other"])
      )
    }
    let call = try #require(log.all.first)
    #expect(call.metadata.firstString(forKey: "x-request-id") == "r-42")
    #expect(call.metadata.strings(forKey: "authorization") == ["Bearer sk_test"])
    let remaining = try #require(call.timeRemaining)
    #expect(remaining > .seconds(1) && remaining <= .seconds(5))
  }

  @Test("a client without a key sends no authorization")
  func noKey() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.getApp, log: log, reply: Substatus_V1_GetAppResponse())
    try await withFakeServer(router) { transport in
      _ = try await SubstatusClient(transport: transport, apiKey: nil).getApp(appID: "a")
    }
    #expect(log.all.first?.authorization == nil)
  }

  @Test("server errors arrive as RPCError with status code and message")
  func serverError() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.getApp, log: log) {
      request, _ -> Substatus_V1_GetAppResponse in
      throw RPCError(code: .notFound, message: "app \"\(request.appID)\" not found")
    }
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k")
      let error = await #expect(throws: RPCError.self) { try await client.getApp(appID: "x") }
      #expect(error?.code == .notFound)
      #expect(error?.message == "app \"x\" not found")
      #expect(error?.description == "NOT_FOUND: app \"x\" not found")
    }
    #expect(log.count == 1)  // NOT_FOUND is never retried
  }

  @Test("one-user eligibility turns a per-query error into an RPCError")
  func eligibilityItemError() async throws {
    let log = CallLog()
    var router = RPCRouter()
    var reply = Substatus_V1_CheckEligibilityResponse()
    reply.users = [
      message {
        $0.error = message {
          $0.code = 3
          $0.field = "queries[0].user_id"
          $0.message = "must not be empty"
        }
      }
    ]
    router.fake(Substatus_V1_EligibilityService.checkEligibility, log: log, reply: reply)
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k")
      let error = await #expect(throws: RPCError.self) {
        try await client.checkEligibility(appID: "a", userID: "", productIDs: ["p"])
      }
      #expect(error?.code == .invalidArgument)
      #expect(error?.message == "queries[0].user_id: must not be empty")
    }
  }

  @Test("transactionHistoryPages follows next_page_token to the last page")
  func paging() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_StatusService.getTransactionHistory, log: log) { request, _ in
      var page = Substatus_V1_GetTransactionHistoryResponse()
      let index = request.pageToken.isEmpty ? 0 : Int(request.pageToken.dropFirst())!
      page.transactions = [message { $0.transactionID = "t\(index)" }]
      if index < 2 { page.nextPageToken = "p\(index + 1)" }
      return page
    }
    let ids = try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k")
      var ids: [String] = []
      for try await page in client.transactionHistoryPages(appID: "a", userID: "u", pageSize: 1) {
        ids += page.transactions.map(\.transactionID)
      }
      return ids
    }
    #expect(ids == ["t0", "t1", "t2"])
    let tokens = log.all.map {
      (try? Substatus_V1_GetTransactionHistoryRequest(serializedBytes: $0.request))?.pageToken
    }
    #expect(tokens == ["", "p1", "p2"])
  }

  @Test("the list page sequences follow next_page_token for apps, products, keys and tenants")
  func listPaging() async throws {
    let log = CallLog()
    var router = RPCRouter()
    // Two pages each: token "" answers "next", token "next" ends.
    router.fake(Substatus_V1_AdminService.listApps, log: log) { request, _ in
      message {
        $0.apps = [message { $0.appID = request.pageToken.isEmpty ? "a1" : "a2" }]
        $0.nextPageToken = request.pageToken.isEmpty ? "next" : ""
      }
    }
    router.fake(Substatus_V1_AdminService.listProducts, log: log) { request, _ in
      message {
        $0.products = [
          message { $0.productID = request.appID + (request.pageToken.isEmpty ? "/p1" : "/p2") }
        ]
        $0.nextPageToken = request.pageToken.isEmpty ? "next" : ""
      }
    }
    router.fake(Substatus_V1_AdminService.listApiKeys, log: log) { request, _ in
      message {
        $0.apiKeys = [message { $0.keyID = request.showRevoked ? "revoked-too" : "k" }]
        $0.nextPageToken = request.pageToken.isEmpty ? "next" : ""
      }
    }
    router.fake(Substatus_V1_TenantService.listTenants, log: log) { request, _ in
      message {
        $0.tenants = [message { $0.tenantID = "t\(request.pageSize)" }]
        $0.nextPageToken = request.pageToken.isEmpty ? "next" : ""
      }
    }
    try await withFakeServer(router) { transport async throws in
      let client = SubstatusClient(transport: transport, apiKey: "k")
      #expect(try await client.appPages().collect().flatMap(\.apps).map(\.appID) == ["a1", "a2"])
      #expect(
        try await client.productPages(appID: "x").collect().flatMap(\.products).map(\.productID)
          == ["x/p1", "x/p2"])
      #expect(
        try await client.apiKeyPages(showRevoked: true).collect().flatMap(\.apiKeys).map(\.keyID)
          == ["revoked-too", "revoked-too"])
      #expect(
        try await client.tenantPages(pageSize: 7).collect().flatMap(\.tenants).map(\.tenantID)
          == ["t7", "t7"])
    }
    #expect(log.count == 8)
  }

  @Test(
    "asOf dates convert to milliseconds exactly",
    arguments: [0, 1, 1_767_225_600_123, 4_102_444_799_999] as [Int64])
  func milliseconds(_ ms: Int64) {
    #expect(Date(substatusMilliseconds: ms).substatusMilliseconds == ms)
  }
}
