import Foundation
import HTTPServer
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// Purchase sharing through the CLI against a real substatusd, on SQLite and on PostgreSQL (issue
/// 20 item 2, docs/architecture.md "Access model"): two accounts of an app restore the same App
/// Store receipt (`receipt submit`, verified by a fake verifyReceipt that answers the fixture
/// receipt for both), in both orders, under each policy; under the sandbox override a sandbox
/// receipt is shared while the production one transfers.
@Suite("Purchase sharing with the substatus CLI against a real substatusd", .serialized)
struct PurchaseSharingTests {
  /// The bytes of the sandbox receipt: the fake verifyReceipt answers 21007 for them at the
  /// production URL and the fixture's body as `Sandbox` at the sandbox URL, as Apple does.
  static let sandboxReceipt: [UInt8] = [0x30, 0x82, 0x01, 0x0A, 0x06, 0x09, 0x2A, 0x86, 0x49]

  /// The fixture receipt's original transactions: premium (1000), pro (2000), coins (3000), lifetime (4000).
  static let originals = ["1000", "2000", "3000", "4000"]

  @Test(
    "share, transfer, keep-first, transfer-if-no-active: two accounts restore the same receipt in either order",
    arguments: TestStore.userLevel)
  func restoreUnderEachPolicy(store: TestStore) async throws {
    let answer = [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture("verify_receipt.json"))))
    let sandboxAnswer = Array(
      String(decoding: answer, as: UTF8.self)
        .replacingOccurrences(of: #""environment": "Production""#, with: #""environment": "Sandbox""#).utf8)
    try #require(sandboxAnswer != answer)
    let sandboxMarker = Array(Data(Self.sandboxReceipt).base64EncodedString().utf8)
    let apple = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0)) { request in
      guard request.body.contains(sandboxMarker) else { return .json(answer) }
      return request.path.hasPrefix("/sandbox") ? .json(sandboxAnswer) : .json(Array(#"{"status": 21007}"#.utf8))
    }
    let url = "http://127.0.0.1:\(apple.port)"
    let daemonStore = try await store.make()
    let server = try await ServerProcess(
      extraArguments: daemonStore.arguments + [
        "--verify-receipt-production-url", url + "/verifyReceipt", "--verify-receipt-sandbox-url", url + "/sandbox/verifyReceipt",
      ], environment: daemonStore.environment)
    do {
      try await run(server)
    } catch {
      Issue.record("substatusd output:\n\(server.output)")
      await server.stop()
      await apple.stop()
      throw error
    }
    await server.stop()
    await apple.stop()
  }

  private func run(_ server: ServerProcess) async throws {
    func cli(_ arguments: [String], key: String?, stdin: [UInt8] = []) async throws -> ProcessRun {
      var environment = ["SUBSTATUS_ADDR": server.grpcAddress]
      if let key { environment["SUBSTATUS_API_KEY"] = key }
      return try await runSubstatusBinary(arguments, stdin: stdin, environment: environment)
    }
    func ok(_ arguments: [String], key: String?, stdin: [UInt8] = []) async throws -> String {
      let run = try await cli(arguments, key: key, stdin: stdin)
      #expect(run.status == 0, "substatus \(arguments.joined(separator: " ")) failed: \(run.stderr)")
      return run.stdout
    }
    let admin = try Substatus_V1_CreateTenantResponse(
      jsonString: try await ok(["tenant", "create", "Sharing", "--json"], key: server.operatorKey)
    ).adminKey
    let receipt: [UInt8] = [0x30, 0x82, 0x01, 0x0A, 0x06, 0x09, 0x2A, 0x86, 0x48]

    /// The premium group's state and the entitled products of a user.
    func status(_ app: String, _ user: String, asOf: String? = nil, environment: String = "production") async throws
      -> (Substatus_V1_SubscriptionState, [String])
    {
      let response = try Substatus_V1_GetStatusResponse(
        jsonString: try await ok(
          ["status", app, user, "--json", "--environment", environment] + (asOf.map { ["--as-of", $0] } ?? []), key: admin))
      let premium = response.groups.first { $0.subscriptionGroupID == "20001001" }?.state ?? .unspecified
      return (premium, response.entitlements.map(\.productID).sorted())
    }
    func intro(_ app: String, _ user: String, asOf: String? = nil) async throws -> Substatus_V1_EligibilityReason {
      let response = try Substatus_V1_CheckEligibilityResponse(
        jsonString: try await ok(
          ["eligibility", app, user, "premium.monthly", "--json"] + (asOf.map { ["--as-of", $0] } ?? []), key: admin))
      return response.users.first?.products.first?.introductory?.reason ?? .unspecified
    }

    var n = 0
    for policy in ["share", "transfer", "keep-first", "transfer-if-no-active"] {
      for (first, second) in [("alice", "bob"), ("bob", "alice")] {
        n += 1
        let app = try #require(
          field(try await ok(["app", "register", "--bundle-id", "com.example.sharing\(n)"], key: admin), "app id"))
        _ = try await ok(["product", "put", app, "--file", fixture("catalog.json")], key: admin)
        _ = try await ok(["app", "set-secret", app], key: admin, stdin: Array("0123456789abcdef0123456789abcdef".utf8))
        let shown = policy.uppercased().replacingOccurrences(of: "-", with: "_")
        #expect(field(try await ok(["app", "set-policy", app, "--purchase-sharing", policy], key: admin), "purchase sharing") == shown)
        #expect(field(try await ok(["app", "show", app], key: admin), "purchase sharing") == shown)

        let restoredFirst = try Substatus_V1_SubmitReceiptResponse(
          jsonString: try await ok(["receipt", "submit", app, first, "--receipt-file", "-", "--json"], key: admin, stdin: receipt))
        #expect(restoredFirst.refusedOriginalTransactions.isEmpty)
        let human = try await ok(["receipt", "submit", app, second, "--receipt-file", "-"], key: admin, stdin: receipt)
        let restoredSecond = try Substatus_V1_SubmitReceiptResponse(
          jsonString: try await ok(["receipt", "submit", app, second, "--receipt-file", "-", "--json"], key: admin, stdin: receipt))

        switch policy {
        case "share":
          #expect(restoredSecond.refusedOriginalTransactions.isEmpty)
          for user in [first, second] {
            #expect(try await status(app, user, asOf: asOf) == (.active, ["lifetime", "premium.yearly"]))
            #expect(try await status(app, user).1 == ["lifetime"])
          }
        case "transfer":
          #expect(restoredSecond.refusedOriginalTransactions.isEmpty)
          // Before the second restore (the fixture's 2024 instant) the first had everything and
          // the second nothing; from it on, the reverse.
          #expect(try await status(app, first, asOf: asOf) == (.active, ["lifetime", "premium.yearly"]))
          #expect(try await status(app, second, asOf: asOf) == (.neverSubscribed, []))
          #expect(try await intro(app, first, asOf: asOf) == .introAlreadyUsed)
          #expect(try await intro(app, second, asOf: asOf) == .newCustomer)
          #expect(try await status(app, first) == (.neverSubscribed, []))
          #expect(try await status(app, second) == (.expired, ["lifetime"]))
          #expect(try await intro(app, first) == .newCustomer)
          #expect(try await intro(app, second) == .introAlreadyUsed)
          let moved = try #require(restoredSecond.asOfMs > 0 ? String(restoredSecond.asOfMs) : nil)
          #expect(try await status(app, first, asOf: moved).1 == [])
        case "transfer-if-no-active":
          // Now the first account is entitled by the lifetime purchase (4000) only: that one is
          // refused, as under keep-first; the expired subscriptions and the consumable move.
          #expect(restoredSecond.refusedOriginalTransactions.map(\.originalTransactionID) == ["4000"])
          #expect(row(human, "4000").prefix(2) == ["4000", "OWNED_BY_ANOTHER_USER"])
          #expect(try await status(app, first) == (.neverSubscribed, ["lifetime"]))
          #expect(try await status(app, second) == (.expired, []))
          #expect(try await status(app, first, asOf: asOf) == (.active, ["lifetime", "premium.yearly"]))
          #expect(try await status(app, second, asOf: asOf) == (.neverSubscribed, []))
        default:
          // Every original transaction is refused to the second account, which stores none.
          #expect(restoredSecond.refusedOriginalTransactions.map(\.originalTransactionID) == Self.originals)
          #expect(restoredSecond.refusedOriginalTransactions.allSatisfy { $0.error?.reason == "OWNED_BY_ANOTHER_USER" })
          #expect(row(human, "4000").prefix(2) == ["4000", "OWNED_BY_ANOTHER_USER"])
          #expect(try await ok(["history", app, second], key: admin).contains("no transactions"))
          #expect(try await status(app, first, asOf: asOf) == (.active, ["lifetime", "premium.yearly"]))
          #expect(try await status(app, second, asOf: asOf) == (.neverSubscribed, []))
        }
      }
    }

    // The sandbox override: shown while set, `same` clears it.
    let app = try #require(
      field(try await ok(["app", "register", "--bundle-id", "com.example.sharing.sandbox"], key: admin), "app id"))
    _ = try await ok(["product", "put", app, "--file", fixture("catalog.json")], key: admin)
    _ = try await ok(["app", "set-secret", app], key: admin, stdin: Array("0123456789abcdef0123456789abcdef".utf8))
    let set = try await ok(
      ["app", "set-policy", app, "--purchase-sharing", "transfer", "--purchase-sharing-sandbox", "share"], key: admin)
    #expect(field(set, "purchase sharing") == "TRANSFER")
    #expect(field(set, "purchase sharing (sandbox)") == "SHARE")
    // Testers share: two accounts restore the sandbox receipt and both keep it, while the same
    // two restoring the production receipt transfer it.
    for user in ["tester-1", "tester-2"] {
      let restored = try Substatus_V1_SubmitReceiptResponse(
        jsonString: try await ok(
          ["receipt", "submit", app, user, "--receipt-file", "-", "--json"], key: admin, stdin: Self.sandboxReceipt))
      #expect(restored.refusedOriginalTransactions.isEmpty)
      let production = try Substatus_V1_SubmitReceiptResponse(
        jsonString: try await ok(["receipt", "submit", app, user, "--receipt-file", "-", "--json"], key: admin, stdin: receipt))
      #expect(production.refusedOriginalTransactions.isEmpty)
    }
    for user in ["tester-1", "tester-2"] {
      #expect(try await status(app, user, environment: "sandbox") == (.expired, ["lifetime"]), "\(user)")
      #expect(try await status(app, user, asOf: asOf, environment: "sandbox") == (.active, ["lifetime", "premium.yearly"]))
    }
    #expect(try await status(app, "tester-1") == (.neverSubscribed, []))
    #expect(try await status(app, "tester-2") == (.expired, ["lifetime"]))
    let cleared = try await ok(["app", "set-policy", app, "--purchase-sharing-sandbox", "same"], key: admin)
    #expect(field(cleared, "purchase sharing") == "TRANSFER")
    #expect(field(cleared, "purchase sharing (sandbox)") == nil)
    let bad = try await cli(["app", "set-policy", app, "--purchase-sharing-sandbox", "lend"], key: admin)
    #expect(bad.status != 0)
  }
}
