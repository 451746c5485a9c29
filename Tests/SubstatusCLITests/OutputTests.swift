import SubstatusClientTestKit
import Foundation
import RPCCore
import SubstatusWire
import Testing

/// One command against the fake server: what its table shows and what its JSON decodes to.
struct OutputCase: Sendable, CustomTestStringConvertible {
  let arguments: [String]
  var stdin: [UInt8] = []
  /// Lines (or parts of lines) the human output must contain.
  let table: [String]
  /// Checks the `--json` output.
  let json: @Sendable (String) throws -> Bool
  var testDescription: String { arguments.joined(separator: " ") }
}

private func decodes<M: ProtobufJSONMessage>(_ expected: M) -> @Sendable (String) throws -> Bool {
  { text in try M(jsonString: text) == expected }
}

let outputCases: [OutputCase] = [
  OutputCase(
    arguments: ["tenant", "create", "Example Inc."],
    table: [
      "tenant id     ten_1", "name          Example Inc.", "admin key id  key_admin",
      "admin key     sk_admin_0123456789",
    ],
    json: decodes(Canned.tenant)),
  OutputCase(
    arguments: ["tenant", "list"],
    table: [
      "TENANT ID  NAME          CREATED               DISABLED",
      "ten_1      Example Inc.  2026-01-01T00:00:00Z  -",
      "ten_2      Gone          2026-01-01T00:00:00Z  2026-01-01T00:01:00Z",
    ],
    json: decodes(
      message(Substatus_V1_ListTenantsResponse.self) {
        $0.tenants = [Canned.tenant.tenant!, Canned.disabledTenant]
      })),
  OutputCase(
    arguments: ["tenant", "disable", "ten_9"],
    table: ["tenant id  ten_9", "disabled   2026-01-01T00:01:00Z"],
    json: { text in
      try Substatus_V1_DisableTenantResponse(jsonString: text).tenant?.tenantID == "ten_9"
    }),
  OutputCase(
    arguments: [
      "app", "register", "--bundle-id", "com.example.app", "--name", "Example", "--apple-app-id",
      "1234567",
    ],
    table: [
      "app id                        app_1", "bundle id                     com.example.app",
      "apple app id                  1234567",
      "shared secret                 sha256:0011223344556677",
      "created                       2026-01-01T00:00:00Z", "lapsed subscribers get intro  true",
      "promo scope                   GROUP",
    ],
    json: decodes(message(Substatus_V1_RegisterAppResponse.self) { $0.app = Canned.app1 })),
  OutputCase(
    arguments: ["app", "show", "app_1"],
    table: ["app id                        app_1", "name                          Example"],
    json: decodes(message(Substatus_V1_GetAppResponse.self) { $0.app = Canned.app1 })),
  OutputCase(
    arguments: ["app", "list"],
    table: [
      "APP ID  BUNDLE ID          NAME     APPLE APP ID  SECRET                   CREATED",
      "app_1   com.example.app    Example  1234567       sha256:0011223344556677  2026-01-01T00:00:00Z",
      "app_2   com.example.other  -        -             -                        2026-01-01T00:00:01.500Z",
    ],
    json: decodes(
      message(Substatus_V1_ListAppsResponse.self) { $0.apps = [Canned.app1, Canned.app2] })),
  OutputCase(
    arguments: ["app", "set-secret", "app_1"],
    stdin: Array("  0123456789abcdef0123456789abcdef\n".utf8),
    table: [
      "fingerprint           sha256:8899aabbccddeeff",
      "previous fingerprint  sha256:0011223344556677",
      "previous valid until  2026-01-08T00:00:00Z",
    ],
    json: { text in
      try Substatus_V1_SetSharedSecretResponse(jsonString: text).fingerprint
        == "sha256:8899aabbccddeeff"
    }),
  OutputCase(
    arguments: [
      "app", "set-policy", "app_1", "--refunds-block-intro", "true", "--promo-scope", "app",
    ],
    table: ["refunds block intro           true", "promo scope                   APP"],
    json: { text in
      let app = try Substatus_V1_SetPolicyResponse(jsonString: text).app
      return app?.policy?.refundsBlockIntro == true && app?.policy?.promoScope == .app
    }),
  OutputCase(
    arguments: ["product", "put", "app_1", "--file", fixture("catalog.json")],
    table: [
      "PRODUCT          TYPE            GROUP     DURATION  INTRO OFFER  PROMOTIONAL OFFERS  WIN-BACK OFFERS",
      "premium.monthly  AUTO_RENEWABLE  20001001  P1M       yes          premium.winback     premium.wb.half,premium.wb.free",
      "lifetime         NON_CONSUMABLE  -         -         no           -                   -",
    ],
    json: { text in
      try Substatus_V1_PutProductsResponse(jsonString: text).products.count == 6
        && text.contains(#""winBackOfferIds": ["#)
    }),
  OutputCase(
    arguments: ["product", "list", "app_1"],
    table: [
      "pro.yearly       AUTO_RENEWABLE  20002002  P1Y       no           -                   -",
      "coins.100        CONSUMABLE",
    ],
    json: { text in
      try Substatus_V1_ListProductsResponse(jsonString: text).products.map(\.productID).count == 6
    }),
  OutputCase(
    arguments: [
      "key", "create", "--role", "read", "--app", "app_1", "--app", "app_2", "--description",
      "paywall",
    ],
    table: [
      "key id  key_read", "role    READ", "apps    app_1,app_2", "key     sk_new_secret_key",
    ],
    json: { text in
      try Substatus_V1_CreateApiKeyResponse(jsonString: text).key == "sk_new_secret_key"
    }),
  OutputCase(
    arguments: ["key", "list"],
    table: [
      "KEY ID     ROLE    APPS  PREFIX  DESCRIPTION  CREATED  LAST USED             REVOKED",
      "key_admin  ADMIN   all   -       -            -        -                     -",
      "key_old    INGEST  all   -       -            -        2025-12-31T23:59:00Z  2026-01-01T00:00:00Z",
    ],
    json: { text in
      try Substatus_V1_ListApiKeysResponse(jsonString: text).apiKeys.map(\.keyID) == [
        "key_admin", "key_old",
      ]
    }),
  OutputCase(
    arguments: ["key", "revoke", "key_read"],
    table: ["key id   key_read", "revoked  2026-01-01T00:00:00Z"],
    json: { text in try Substatus_V1_RevokeApiKeyResponse(jsonString: text).info?.revoked == true }),
  OutputCase(
    arguments: ["receipt", "import", "app_1", "u1", "--file", fixture("verify_receipt.json")],
    table: [
      "user          u1", "environment   PRODUCTION", "transactions  10 (7 new or changed)",
      "GROUP     STATE         PRODUCT         EXPIRES               GRACE EXPIRES             AUTO-RENEW  OWNERSHIP      NOTES",
      "20001001  ACTIVE        premium.yearly  2026-01-01T00:00:00Z  -                         yes         PURCHASED      -",
      "20002002  GRACE_PERIOD  pro.monthly     2025-12-31T00:00:00Z  2026-01-16T00:00:00.250Z  no          FAMILY_SHARED  billing issue",
      "ENTITLEMENT     TYPE            GROUP     EXPIRES               OWNERSHIP  TRANSACTION",
      "lifetime        NON_CONSUMABLE  -         never                 PURCHASED  4000",
      "premium.yearly  AUTO_RENEWABLE  20001001  2026-01-01T00:00:00Z  PURCHASED  1004",
    ],
    json: decodes(Canned.imported)),
  OutputCase(
    arguments: ["receipt", "submit", "app_1", "u1", "--receipt-file", "-"],
    stdin: [0x30, 0x82, 0x01, 0xFF, 0x00],
    table: ["environment   SANDBOX", "transactions  2 (2 new or changed)", "20001001  ACTIVE"],
    json: decodes(Canned.submitted)),
  OutputCase(
    arguments: ["signed", "submit", "app_1", "u1", "--file", "-"],
    stdin: Array(#"{"signedTransactions": ["a.b.c", "d.e.f"], "signedRenewalInfos": ["g.h.i"]}"#.utf8),
    table: [
      "environment   PRODUCTION", "signed items  3 (1 new or changed, 1 rejected)",
      "REJECTED                ID    WHY",
      "signed_transactions[1]  2001  UNTRUSTED_CHAIN: the certificate chain does not end at a trusted root",
      "20001001  ACTIVE",
    ],
    json: decodes(Canned.signedSubmitted)),
  OutputCase(
    arguments: [
      "eligibility", "app_1", "u1", "premium.monthly", "pro.monthly", "nope", "--as-of",
      "1767225600000",
    ],
    table: [
      "user   u1", "as of  2026-01-01T00:00:00Z",
      "PRODUCT          TYPE            GROUP     INTRO  INTRO REASON        PROMO  PROMO REASON         WIN-BACK                                EVIDENCE",
      "premium.monthly  AUTO_RENEWABLE  20001001  no     INTRO_ALREADY_USED  yes    EXISTING_SUBSCRIBER  premium.wb.half:no,premium.wb.free:yes  1000,1004",
      "pro.monthly      AUTO_RENEWABLE  20002002  yes    NEW_CUSTOMER        no     NEVER_SUBSCRIBED     -                                       -",
      "nope             -               -         no     UNKNOWN_PRODUCT     no     UNKNOWN_PRODUCT      -                                       -",
    ],
    json: { text in
      let response = try Substatus_V1_CheckEligibilityResponse(jsonString: text)
      return response.users.first?.products
        == ["premium.monthly", "pro.monthly", "nope"].map(Canned.eligibility)
        && text.contains(#""reason": "ELIGIBILITY_REASON_INTRO_ALREADY_USED""#)
        && text.contains(#""winBackOffers": ["#)
        && text.contains(#""offerId": "premium.wb.free""#)
        && text.contains(#""reason": "ELIGIBILITY_REASON_WIN_BACK_OFFERED""#)
    }),
  OutputCase(
    arguments: ["status", "app_1", "u1", "--environment", "sandbox"],
    table: [
      "user         u1", "environment  SANDBOX", "as of        2025-12-31T23:59:59Z",
      "20002002  GRACE_PERIOD",
    ],
    json: { text in
      // int64 as strings, enum names, lowerCamelCase: the canonical proto3 JSON mapping.
      try Substatus_V1_GetStatusResponse(jsonString: text) == Canned.status
        && text.contains(#""expiresMs": "1767225600000""#)
        && text.contains(#""state": "SUBSCRIPTION_STATE_ACTIVE""#)
    }),
  OutputCase(
    arguments: ["sync", "app_1", "u1", "--environment", "sandbox"],
    table: [
      "user          u1", "environment   SANDBOX", "transactions  3 from Apple (2 new or changed)",
      "revision      rev-42", "20002002  GRACE_PERIOD",
    ],
    json: { text in
      let response = try Substatus_V1_SyncTransactionHistoryResponse(jsonString: text)
      return response.revision == "rev-42" && response.storedTransactionCount == 2 && response.environment == .sandbox
    }),
  OutputCase(
    arguments: ["history", "app_1", "u1"],
    table: [
      "TRANSACTION  ORIGINAL  PRODUCT          PURCHASED             EXPIRES               REVOKED               OFFER         OWNERSHIP  FLAGS",
      "1004         1000      premium.yearly   2025-01-01T00:00:00Z  2026-01-01T00:00:00Z  -                     -             PURCHASED  -",
      "1000         1000      premium.monthly  2024-01-01T00:00:00Z  2024-01-08T00:00:00Z  2024-01-01T09:06:40Z  INTRODUCTORY  -          trial,refund_full",
      "ORIGINAL  PRODUCT         AUTO-RENEW  RENEWS INTO      BILLING RETRY  GRACE EXPIRES",
      "1000      premium.yearly  yes         premium.monthly  no             -",
    ],
    json: { text in
      let all = try Substatus_V1_GetTransactionHistoryResponse(jsonString: text)
      return all.transactions == Canned.historyPages.flatMap(\.transactions)
        && all.renewalInfos == Canned.historyPages[0].renewalInfos && all.nextPageToken.isEmpty
    }),
  OutputCase(
    arguments: ["report", "app_1"],
    table: [
      "app                          app_1", "users                        12",
      "active                       5",
      "in billing retry             1", "family-shared beneficiaries  1",
    ],
    json: decodes(message(Substatus_V1_GetReportResponse.self) { $0.report = Canned.report })),
  OutputCase(
    arguments: ["health"], table: ["SERVING"],
    json: { text in try Grpc_Health_V1_HealthCheckResponse(jsonString: text).status == .serving }),
]

@Suite("substatus output against a fake server")
struct OutputTests {
  @Test("tables: aligned columns, UTC ISO-8601 times, short enum names", arguments: outputCases)
  func table(_ testCase: OutputCase) async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(testCase.arguments, stdin: testCase.stdin, transport: transport)
    }
    #expect(run.status == 0, "stderr: \(run.stderr)")
    let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    for expected in testCase.table {
      #expect(
        lines.contains { $0.hasPrefix(expected) }, "missing line \(expected) in:\n\(run.stdout)")
    }
    #expect(!run.stdout.contains("{"))
  }

  @Test("--json prints the response in canonical proto3 JSON", arguments: outputCases)
  func json(_ testCase: OutputCase) async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(testCase.arguments + ["--json"], stdin: testCase.stdin, transport: transport)
    }
    #expect(run.status == 0, "stderr: \(run.stderr)")
    #expect(try testCase.json(run.stdout), "unexpected JSON:\n\(run.stdout)")
  }

  @Test("an RPC failure exits 1 with one line naming the gRPC status")
  func rpcFailure() async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(["app", "show", "x"], transport: transport)
    }
    #expect(run.status == 1)
    #expect(run.stdout == "")
    #expect(run.stderr == "substatus: NOT_FOUND: app \"x\" not found\n")
  }

  @Test("health exits 1 when the server is not serving; it sends no key")
  func notServing() async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log, healthy: false)) { transport in
      await runCLI(["health"], variables: [:], transport: transport)
    }
    #expect(run.status == 1)
    #expect(run.stdout == "NOT_SERVING\n")
    #expect(run.stderr == "substatus: the server is NOT_SERVING\n")
    #expect(log.all.first?.authorization == nil)
  }

  /// Runs one command against the fake server and decodes the request it sent.
  private func request<M: ProtobufMessage>(
    _ arguments: [String], stdin: [UInt8] = [], _ type: M.Type
  ) async throws -> (CLIRun, M) {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(arguments, stdin: stdin, transport: transport)
    }
    let call = try #require(log.all.last, "no call; stderr: \(run.stderr)")
    #expect(call.authorization == "Bearer sk_test")
    return (run, try M(serializedBytes: call.request))
  }

  @Test("set-policy sets the update mask from the flags given")
  func setPolicyMask() async throws {
    let (_, sent) = try await request(
      [
        "app", "set-policy", "app_1", "--billing-retry-entitled", "false",
        "--lapsed-subscribers-get-intro", "FALSE",
      ],
      Substatus_V1_SetPolicyRequest.self)
    #expect(sent.appID == "app_1")
    #expect(sent.updateMask == ["lapsed_subscribers_get_intro", "billing_retry_entitled"])
    #expect(sent.policy?.lapsedSubscribersGetIntro == false)
    #expect(sent.policy?.billingRetryEntitled == false)
  }

  @Test("the shared secret comes from --secret-file or stdin, trimmed; it is never printed")
  func sharedSecret() async throws {
    let (fromFile, sentFile) = try await request(
      ["app", "set-secret", "app_1", "--secret-file", fixture("shared_secret.txt")],
      Substatus_V1_SetSharedSecretRequest.self)
    #expect(sentFile.sharedSecret == "0123456789abcdef0123456789abcdef")
    let (fromStdin, sentStdin) = try await request(
      ["app", "set-secret", "app_1"], stdin: Array("0123456789abcdef0123456789abcdef\r\n".utf8),
      Substatus_V1_SetSharedSecretRequest.self)
    #expect(sentStdin.sharedSecret == "0123456789abcdef0123456789abcdef")
    for run in [fromFile, fromStdin] {
      #expect(
        !run.stdout.contains("0123456789abcdef0123") && !run.stderr.contains("0123456789abcdef0123")
      )
    }
  }

  @Test("an empty secret is a usage error, not a call")
  func emptySecret() async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(["app", "set-secret", "app_1"], stdin: Array(" \n".utf8), transport: transport)
    }
    #expect(run.status == 2)
    #expect(run.stderr.hasPrefix("substatus app set-secret: the shared secret is empty\n"))
    #expect(log.count == 0)
  }

  @Test("eligibility sends every product in order, --as-of and --environment")
  func eligibilityRequest() async throws {
    let (_, sent) = try await request(
      [
        "eligibility", "app_1", "u1", "b", "a", "b", "--as-of", "1767225600123", "--environment",
        "sandbox",
      ],
      Substatus_V1_CheckEligibilityRequest.self)
    #expect(sent.queries.count == 1)
    #expect(sent.queries.first?.userID == "u1")
    #expect(sent.queries.first?.productIDs == ["b", "a", "b"])
    #expect(sent.asOfMs == 1_767_225_600_123)
    #expect(sent.environment == .sandbox)
  }

  @Test("sync sends the transaction id, the environment and --full; defaults leave them unset")
  func syncRequest() async throws {
    let (_, sent) = try await request(
      ["sync", "app_1", "u1", "--transaction-id", "2000000042", "--environment", "production", "--full"],
      Substatus_V1_SyncTransactionHistoryRequest.self)
    #expect(sent.appID == "app_1" && sent.userID == "u1")
    #expect(sent.transactionID == "2000000042" && sent.environment == .production && sent.fullResync)
    let (_, plain) = try await request(["sync", "app_1", "u1"], Substatus_V1_SyncTransactionHistoryRequest.self)
    #expect(plain.transactionID.isEmpty && plain.environment == .unspecified && !plain.fullResync)
  }

  @Test("status without flags asks for now in the default environment")
  func statusDefaults() async throws {
    let (_, sent) = try await request(
      ["status", "app_1", "u1"], Substatus_V1_GetStatusRequest.self)
    #expect(sent.asOfMs == 0)
    #expect(sent.environment == .unspecified)
  }

  @Test("receipt import sends the file's bytes unchanged")
  func receiptImportBytes() async throws {
    let (_, sent) = try await request(
      ["receipt", "import", "app_1", "u1", "--file", fixture("verify_receipt.json")],
      Substatus_V1_ImportReceiptResponseRequest.self)
    #expect(sent.verifyReceiptResponseJson == (try fixtureBytes("verify_receipt.json")))
    #expect(sent.appID == "app_1" && sent.userID == "u1")
  }

  @Test("signed submit sends the file's signed transactions and renewal infos in order")
  func signedSubmitRequest() async throws {
    let (_, sent) = try await request(
      ["signed", "submit", "app_1", "u1", "--file", "-"],
      stdin: Array(#"{"signedTransactions": ["t1", "t2"], "signedRenewalInfos": ["r1"]}"#.utf8),
      Substatus_V1_SubmitSignedTransactionsRequest.self)
    #expect(sent.appID == "app_1" && sent.userID == "u1")
    #expect(sent.signedTransactions == ["t1", "t2"])
    #expect(sent.signedRenewalInfos == ["r1"])
  }

  @Test("signed submit refuses a file that is not the JSON form, or holds nothing", arguments: [
    ("eyJhbGciOiJFUzI1NiJ9.e30.sig\n", "is not {\"signedTransactions\":[...],\"signedRenewalInfos\":[...]}"),
    (#"{"signedTransactions": []}"#, "the file holds no signed data"),
  ])
  func signedSubmitBadFile(_ input: String, _ message: String) async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(["signed", "submit", "app_1", "u1", "--file", "-"], stdin: Array(input.utf8), transport: transport)
    }
    #expect(run.status != 0)
    #expect(run.stderr.contains(message), "\(run.stderr)")
    #expect(log.all.isEmpty)
  }

  @Test("receipt submit base64-encodes a binary receipt and passes base64 text through")
  func receiptSubmitEncoding() async throws {
    let (_, binary) = try await request(
      ["receipt", "submit", "app_1", "u1", "--receipt-file", "-"],
      stdin: [0x30, 0x82, 0x01, 0xFF, 0x00],
      Substatus_V1_SubmitReceiptRequest.self)
    #expect(binary.receiptData == "MIIB/wA=")
    let (_, text) = try await request(
      ["receipt", "submit", "app_1", "u1", "--receipt-file", "-"],
      stdin: Array("MIIB\n/wA=\n".utf8),
      Substatus_V1_SubmitReceiptRequest.self)
    #expect(text.receiptData == "MIIB/wA=")
  }

  @Test("key create sends role, every --app and the description")
  func keyCreateRequest() async throws {
    let (run, sent) = try await request(
      ["key", "create", "--role", "INGEST", "--app", "app_1", "--app", "app_2"],
      Substatus_V1_CreateApiKeyRequest.self)
    #expect(sent.role == .ingest)
    #expect(sent.appIDs == ["app_1", "app_2"])
    #expect(run.stderr == "substatus: the key is shown only once: store it now\n")
  }

  @Test("app register sends bundle id, name and Apple app id")
  func registerRequest() async throws {
    let (_, sent) = try await request(
      ["app", "register", "--bundle-id", "com.example.app", "--apple-app-id", "42"],
      Substatus_V1_RegisterAppRequest.self)
    #expect(sent.bundleID == "com.example.app")
    #expect(sent.appleAppID == 42)
    #expect(sent.displayName == "")
  }

  @Test("product put rejects a file that is not a catalog, naming the field")
  func badCatalog() async throws {
    let log = CallLog()
    let run = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(
        ["product", "put", "app_1", "--file", fixture("catalog_unknown_field.json")],
        transport: transport)
    }
    #expect(run.status == 2)
    #expect(run.stderr.contains("is not a catalog {\"products\":[...]}"))
    #expect(run.stderr.contains("kind"))
    #expect(log.count == 0)
  }

  @Test("history and lists fetch every page")
  func paging() async throws {
    let log = CallLog()
    _ = try await withFakeServer(fakeAPIRouter(log: log)) { transport in
      await runCLI(["history", "app_1", "u1"], transport: transport)
    }
    let tokens = try log.all.map {
      try Substatus_V1_GetTransactionHistoryRequest(serializedBytes: $0.request).pageToken
    }
    #expect(tokens == ["", "page2"])
  }
}
