import Foundation
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// Issue 20 through the CLI against a real substatusd: named entitlements, product deletion and
/// user erasure (docs/architecture.md "The CLI contract", second wave).
@Suite("Access model with the substatus CLI against a real substatusd", .serialized)
struct AccessModelTests {
  @Test("entitlement put/list, status shows named entitlements first, product delete, user delete")
  func accessModel() async throws {
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
    func cli(_ arguments: [String], key: String?) async throws -> ProcessRun {
      var environment = ["SUBSTATUS_ADDR": server.grpcAddress]
      if let key { environment["SUBSTATUS_API_KEY"] = key }
      return try await runSubstatusBinary(arguments, stdin: [], environment: environment)
    }
    func ok(_ arguments: [String], key: String?) async throws -> String {
      let run = try await cli(arguments, key: key)
      #expect(run.status == 0, "substatus \(arguments.joined(separator: " ")) failed: \(run.stderr)")
      return run.stdout
    }

    let tenant = try Substatus_V1_CreateTenantResponse(
      jsonString: try await ok(["tenant", "create", "Example Inc.", "--json"], key: server.operatorKey))
    let admin = tenant.adminKey
    let app = try #require(field(try await ok(["app", "register", "--bundle-id", "com.example.app"], key: admin), "app id"))
    _ = try await ok(["product", "put", app, "--file", fixture("catalog.json")], key: admin)

    // Named entitlements: put (a table in request order), list (by id).
    let put = try await ok(["entitlement", "put", app, "--file", fixture("entitlements.json")], key: admin)
    #expect(row(put, "premium") == ["premium", "Premium", "premium.monthly,premium.yearly,lifetime"])
    let list = try Substatus_V1_ListEntitlementsResponse(
      jsonString: try await ok(["entitlement", "list", app, "--json"], key: admin))
    #expect(list.entitlements.map(\.entitlementID) == ["premium", "pro"])
    #expect(list.entitlements[1].productIDs == ["pro.monthly", "pro.yearly"])

    // An unknown product is INVALID_ARGUMENT naming it; nothing changes.
    let bad = FileManager.default.temporaryDirectory.appendingPathComponent("entitlements-\(UUID().uuidString).json")
    try Data(#"{"entitlements":[{"entitlementId":"gold","productIds":["gold.monthly"]}]}"#.utf8).write(to: bad)
    defer { try? FileManager.default.removeItem(at: bad) }
    let refused = try await cli(["entitlement", "put", app, "--file", bad.path], key: admin)
    #expect(refused.status == 1)
    #expect(refused.stderr.hasPrefix("substatus: INVALID_ARGUMENT"))
    #expect(refused.stderr.contains("entitlements[0].product_ids[0]"))
    #expect(row(try await ok(["entitlement", "list", app], key: admin), "gold") == [])

    // A user's purchases: premium.yearly active, pro.monthly refunded, lifetime owned.
    _ = try await ok(["receipt", "import", app, "user-1", "--file", fixture("verify_receipt.json")], key: admin)
    _ = try await ok(["receipt", "import", app, "user-2", "--file", fixture("verify_receipt.json")], key: admin)
    let status = try await ok(["status", app, "user-1", "--as-of", asOf], key: admin)
    let lines = status.split(separator: "\n").map(String.init)
    let named = try #require(lines.firstIndex { $0.hasPrefix("NAMED ENTITLEMENT") })
    let groups = try #require(lines.firstIndex { $0.hasPrefix("GROUP") })
    #expect(named < groups, "the named entitlements come first")
    #expect(row(status, "premium") == ["premium", "yes", "ACTIVE", "lifetime", "never", "no", "PURCHASED", "4000"])
    #expect(Array(row(status, "pro").prefix(4)) == ["pro", "no", "REVOKED", "pro.monthly"])
    let statusJSON = try Substatus_V1_GetStatusResponse(
      jsonString: try await ok(["status", app, "user-1", "--as-of", asOf, "--json"], key: admin))
    #expect(statusJSON.namedEntitlements.map(\.entitlementID) == ["premium", "pro"])
    #expect(statusJSON.namedEntitlements.map(\.active) == [true, false])

    // Deleting the lifetime product: premium now rests on the yearly subscription; history keeps it.
    let deleted = try await ok(["product", "delete", app, "lifetime", "nope"], key: admin)
    #expect(deleted.contains("deleted lifetime"))
    #expect(!deleted.contains("nope"))
    #expect(row(try await ok(["product", "list", app], key: admin), "lifetime") == [])
    let afterDelete = try await ok(["status", app, "user-1", "--as-of", asOf], key: admin)
    #expect(Array(row(afterDelete, "premium").prefix(5)) == ["premium", "yes", "ACTIVE", "premium.yearly", "2025-03-20T00:00:00Z"])
    let history = try await ok(["history", app, "user-1"], key: admin)
    #expect(row(history, "4000").contains("lifetime"))

    // Erasing user-1: every environment, one commit; user-2 keeps everything.
    let erased = try Substatus_V1_DeleteUserResponse(
      jsonString: try await ok(["user", "delete", app, "user-1", "--json"], key: admin))
    #expect(erased.transactionsErased > 0)
    #expect(erased.userIDHash.hasPrefix("sha256:"))
    let gone = try Substatus_V1_GetStatusResponse(
      jsonString: try await ok(["status", app, "user-1", "--as-of", asOf, "--json"], key: admin))
    #expect(gone.groups.allSatisfy { $0.state == .neverSubscribed })
    #expect(gone.namedEntitlements.map(\.state) == [.neverSubscribed, .neverSubscribed])
    #expect(try await ok(["history", app, "user-1"], key: admin).contains("no transactions"))
    let kept = try Substatus_V1_GetStatusResponse(
      jsonString: try await ok(["status", app, "user-2", "--as-of", asOf, "--json"], key: admin))
    #expect(kept.namedEntitlements.map(\.active) == [true, false])
    let again = try await ok(["user", "delete", app, "user-1"], key: admin)
    #expect(field(again, "transactions erased") == "0")

    // A READ key may not erase.
    let read = try Substatus_V1_CreateApiKeyResponse(
      jsonString: try await ok(["key", "create", "--role", "read", "--json"], key: admin)).key
    let denied = try await cli(["user", "delete", app, "user-2"], key: read)
    #expect(denied.status == 1)
    #expect(denied.stderr.hasPrefix("substatus: PERMISSION_DENIED"))
  }
}
