import Foundation
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// The whitespace-separated cells of the first output line whose first cell is `first`.
func row(_ output: String, _ first: String) -> [String] {
  for line in output.split(separator: "\n") {
    let cells = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
    if cells.first == first { return cells }
  }
  return []
}

/// The value of a `key  value` line of a human report (the key may contain single spaces).
func field(_ output: String, _ key: String) -> String? {
  for line in output.split(separator: "\n") where line.hasPrefix(key + "  ") {
    return line.dropFirst(key.count).trimmingCharacters(in: .whitespaces)
  }
  return nil
}

/// 2024-03-21T05:46:40Z: premium.yearly active, pro.monthly refunded, in the fixture receipt.
let asOf = "1711000000000"

@Suite("README walk-through with the substatus CLI against a real substatusd", .serialized)
struct WalkthroughTests {
  @Test("tenant, app, secret, products, keys, receipt import, eligibility, status, history, report")
  func walkthrough() async throws {
    let server = try await ServerProcess()
    do {
      try await run(server)
    } catch {
      Issue.record("substatusd output:\n\(server.output)")
      await server.stop()
      throw error
    }
    await server.stop()
  }

  private func run(_ server: ServerProcess) async throws {
    func cli(_ arguments: [String], key: String?, stdin: [UInt8] = []) async throws -> ProcessRun {
      var environment = ["SUBSTATUS_ADDR": server.grpcAddress]
      if let key { environment["SUBSTATUS_API_KEY"] = key }
      return try await runSubstatusBinary(arguments, stdin: stdin, environment: environment)
    }
    func ok(_ arguments: [String], key: String?, stdin: [UInt8] = []) async throws -> String {
      let run = try await cli(arguments, key: key, stdin: stdin)
      #expect(
        run.status == 0, "substatus \(arguments.joined(separator: " ")) failed: \(run.stderr)")
      return run.stdout
    }

    // Health needs no key.
    #expect(try await ok(["health"], key: nil) == "SERVING\n")

    // The operator creates a tenant (JSON) and another one (table).
    let tenantJSON = try await ok(
      ["tenant", "create", "Example Inc.", "--json"], key: server.operatorKey)
    let tenant = try Substatus_V1_CreateTenantResponse(jsonString: tenantJSON)
    let admin = tenant.adminKey
    #expect(!admin.isEmpty)
    #expect(tenant.tenant?.name == "Example Inc.")
    #expect(tenantJSON.contains(#""adminKey""#))
    let other = try await ok(["tenant", "create", "Other"], key: server.operatorKey)
    #expect(field(other, "tenant id")?.isEmpty == false)
    #expect(field(other, "admin key")?.isEmpty == false)
    #expect(field(other, "admin key") != admin)

    // The tenant admin registers an app (table) and reads it back (JSON).
    let registered = try await ok(
      [
        "app", "register", "--bundle-id", "com.example.app", "--name", "Example", "--apple-app-id",
        "123",
      ], key: admin)
    let app = try #require(field(registered, "app id"))
    #expect(field(registered, "bundle id") == "com.example.app")
    #expect(field(registered, "apple app id") == "123")
    #expect(field(registered, "shared secret") == "not set")
    let shown = try Substatus_V1_GetAppResponse(
      jsonString: try await ok(["app", "show", app, "--json"], key: admin))
    #expect(
      shown.app?.appID == app && shown.app?.displayName == "Example" && shown.app?.appleAppID == 123
    )

    // The shared secret comes from stdin; only a fingerprint comes back.
    let secret = "0123456789abcdef0123456789abcdef"
    let fingerprinted = try await ok(
      ["app", "set-secret", app], key: admin, stdin: Array("\(secret)\n".utf8))
    let fingerprint = try #require(field(fingerprinted, "fingerprint"))
    #expect(fingerprint.hasPrefix("sha256:") && fingerprint.count == 7 + 16)
    #expect(field(try await ok(["app", "show", app], key: admin), "shared secret") == fingerprint)
    #expect(!server.output.contains(secret))

    // The catalog.
    let put = try await ok(["product", "put", app, "--file", fixture("catalog.json")], key: admin)
    #expect(
      row(put, "premium.monthly") == [
        "premium.monthly", "AUTO_RENEWABLE", "20001001", "P1M", "yes", "premium.winback",
        "premium.comeback.free,premium.comeback.half",
      ])
    #expect(row(put, "lifetime") == ["lifetime", "NON_CONSUMABLE", "-", "-", "no", "-", "-"])
    let listed = try Substatus_V1_ListProductsResponse(
      jsonString: try await ok(["product", "list", app, "--json"], key: admin))
    let catalog = try Substatus_V1_PutProductsResponse(
      jsonString: String(
        decoding: try Data(contentsOf: URL(fileURLWithPath: fixture("catalog.json"))), as: UTF8.self
      ))
    #expect(
      listed.products.sorted { $0.productID < $1.productID }
        == catalog.products.sorted { $0.productID < $1.productID })

    // Keys: ingest (JSON) and read (table), scoped to the app.
    let ingestKey = try Substatus_V1_CreateApiKeyResponse(
      jsonString: try await ok(
        ["key", "create", "--role", "ingest", "--app", app, "--json"], key: admin))
    #expect(ingestKey.info?.role == .ingest && ingestKey.info?.appIDs == [app])
    let readCreated = try await ok(
      ["key", "create", "--role", "read", "--app", app, "--description", "paywall"], key: admin)
    let read = try #require(field(readCreated, "key"))
    let readID = try #require(field(readCreated, "key id"))
    #expect(field(readCreated, "role") == "READ")

    // The ingest key imports a verifyReceipt body: 9 distinct transactions, all new; again, none.
    let imported = try await ok(
      ["receipt", "import", app, "user-1", "--file", fixture("verify_receipt.json")],
      key: ingestKey.key)
    #expect(field(imported, "transactions") == "9 (9 new or changed)")
    #expect(field(imported, "environment") == "PRODUCTION")
    let again = try Substatus_V1_ImportReceiptResponseResponse(
      jsonString: try await ok(
        ["receipt", "import", app, "user-1", "--file", "-", "--json"], key: ingestKey.key,
        stdin: [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture("verify_receipt.json"))))))
    #expect(again.transactionCount == 9 && again.storedTransactionCount == 0)

    // Eligibility with the read key, as of a past instant.
    let products = ["premium.monthly", "pro.monthly", "lifetime", "nope"]
    let eligibility = try await ok(
      ["eligibility", app, "user-1"] + products + ["--as-of", asOf], key: read)
    #expect(field(eligibility, "as of") == "2024-03-21T05:46:40Z")
    // INTRO_ALREADY_USED (the trial, 1000) comes before the current state (common.proto's order).
    // A receipt carries no win-back data: Apple offers none.
    #expect(
      Array(row(eligibility, "premium.monthly").prefix(9)) == [
        "premium.monthly", "AUTO_RENEWABLE", "20001001", "no", "INTRO_ALREADY_USED", "yes",
        "EXISTING_SUBSCRIBER", "premium.comeback.free:no,premium.comeback.half:no",
        "1000,1004",
      ])
    #expect(
      Array(row(eligibility, "pro.monthly").prefix(7)) == [
        "pro.monthly", "AUTO_RENEWABLE", "20002002", "yes", "LAPSED_NO_INTRO_USED", "yes",
        "LAPSED_SUBSCRIBER",
      ])
    #expect(
      Array(row(eligibility, "lifetime").prefix(7)) == [
        "lifetime", "NON_CONSUMABLE", "-", "no", "NOT_A_SUBSCRIPTION", "no", "NOT_A_SUBSCRIPTION",
      ])
    #expect(
      Array(row(eligibility, "nope").prefix(7)) == [
        "nope", "-", "-", "no", "UNKNOWN_PRODUCT", "no", "UNKNOWN_PRODUCT",
      ])
    let eligibilityJSON = try await ok(
      ["eligibility", app, "user-1"] + products + ["--as-of", asOf, "--json"], key: read)
    let answers = try Substatus_V1_CheckEligibilityResponse(jsonString: eligibilityJSON)
    #expect(answers.asOfMs == 1_711_000_000_000)
    #expect(answers.users.first?.products.map(\.productID) == products)
    #expect(
      answers.users.first?.products.map { $0.introductory?.reason } == [
        .introAlreadyUsed, .lapsedNoIntroUsed, .notASubscription, .unknownProduct,
      ])
    #expect(answers.users.first?.products.first?.introductory?.evidenceTransactionID == "1000")
    #expect(eligibilityJSON.contains(#""asOfMs": "1711000000000""#))

    // The policy: refunds block the intro offer now (the pro.monthly renewal was refunded).
    let policy = try await ok(
      ["app", "set-policy", app, "--refunds-block-intro", "true"], key: admin)
    #expect(field(policy, "refunds block intro") == "true")
    #expect(field(policy, "lapsed subscribers get intro") == "true")
    let strict = try Substatus_V1_CheckEligibilityResponse(
      jsonString: try await ok(
        ["eligibility", app, "user-1", "pro.monthly", "--as-of", asOf, "--json"], key: read))
    #expect(strict.users.first?.products.first?.introductory?.reason == .refundedInGroup)
    #expect(strict.users.first?.products.first?.introductory?.evidenceTransactionID == "2001")

    // Status as of the past instant: table and JSON.
    let status = try await ok(["status", app, "user-1", "--as-of", asOf], key: read)
    #expect(
      Array(row(status, "20001001").prefix(4)) == [
        "20001001", "ACTIVE", "premium.yearly", "2025-03-20T00:00:00Z",
      ])
    #expect(Array(row(status, "20002002").prefix(3)) == ["20002002", "REVOKED", "pro.monthly"])
    #expect(
      row(status, "lifetime") == ["lifetime", "NON_CONSUMABLE", "-", "never", "PURCHASED", "4000"])
    #expect(
      Array(row(status, "premium.yearly").prefix(4)) == [
        "premium.yearly", "AUTO_RENEWABLE", "20001001", "2025-03-20T00:00:00Z",
      ])
    let statusJSON = try await ok(["status", app, "user-1", "--as-of", asOf, "--json"], key: read)
    let statusResponse = try Substatus_V1_GetStatusResponse(jsonString: statusJSON)
    #expect(statusResponse.groups.map(\.state) == [.active, .revoked])
    #expect(statusResponse.entitlements.map(\.productID) == ["lifetime", "premium.yearly"])
    #expect(statusJSON.contains(#""state": "SUBSCRIPTION_STATE_ACTIVE""#))
    #expect(statusJSON.contains(#""expiresMs": "1742428800000""#))

    // History: every transaction, oldest purchase first, and the renewal infos.
    let history = try await ok(["history", app, "user-1"], key: read)
    #expect(
      Array(row(history, "1004").prefix(5)) == [
        "1004", "1000", "premium.yearly", "2024-03-20T00:00:00Z", "2025-03-20T00:00:00Z",
      ])
    let historyResponse = try Substatus_V1_GetTransactionHistoryResponse(
      jsonString: try await ok(["history", app, "user-1", "--json"], key: read))
    #expect(
      Set(historyResponse.transactions.map(\.transactionID)) == [
        "1000", "1001", "1002", "1003", "1004", "2000", "2001", "3000", "4000",
      ])
    #expect(historyResponse.transactions.first?.transactionID == "1000")
    #expect(
      historyResponse.transactions.map(\.purchaseDateMs)
        == historyResponse.transactions.map(\.purchaseDateMs).sorted())
    #expect(historyResponse.renewalInfos.count == 2)
    #expect(
      try await ok(["history", app, "user-1", "--environment", "sandbox"], key: read)
        == "no transactions\n")

    // The report, with the admin key.
    let report = try await ok(["report", app, "--as-of", asOf], key: admin)
    #expect(field(report, "users") == "1")
    #expect(field(report, "active") == "1")
    let reportResponse = try Substatus_V1_GetReportResponse(
      jsonString: try await ok(["report", app, "--as-of", asOf, "--json"], key: admin))
    #expect(reportResponse.report?.appID == app && reportResponse.report?.active == 1)

    // Keys: list, revoke; a revoked key is refused; a read key may not administer.
    let keys = try await ok(["key", "list"], key: admin)
    #expect(row(keys, readID).prefix(3) == [readID, "READ", app])
    #expect(keys.split(separator: "\n").count == 4)  // header + admin, ingest, read
    let denied = try await cli(["app", "list"], key: read)
    #expect(denied.status == 1)
    #expect(denied.stderr.hasPrefix("substatus: PERMISSION_DENIED"))
    #expect(
      field(try await ok(["key", "revoke", readID], key: admin), "revoked")?.hasPrefix("20") == true
    )
    let revoked = try await cli(["status", app, "user-1"], key: read)
    #expect(revoked.status == 1)
    #expect(revoked.stderr.hasPrefix("substatus: UNAUTHENTICATED"))

    // Errors name the gRPC status, one line, exit 1.
    let missing = try await cli(["app", "show", "nope"], key: admin)
    #expect(missing.status == 1)
    #expect(missing.stderr.hasPrefix("substatus: NOT_FOUND"))
    #expect(missing.stderr.split(separator: "\n").count == 1)
    let apps = try await ok(["app", "list"], key: admin)
    #expect(row(apps, app).prefix(3) == [app, "com.example.app", "Example"])
  }
}
