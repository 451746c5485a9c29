import Foundation
import SubstatusProcessTestKit
import SubstatusWire
import Testing

/// Retention rules through the CLI against a real substatusd (docs/architecture.md "The CLI
/// contract", third wave): `retention put`, `retention list`, `retention test`.
@Suite("Retention rules with the substatus CLI against a real substatusd", .serialized)
struct RetentionCLITests {
  @Test("retention put/list/test: stored as given, bad rules named, what a user is offered and why")
  func retention() async throws {
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

    // No rules yet: NOT_FOUND.
    let none = try await cli(["retention", "list", app], key: admin)
    #expect(none.status != 0 && none.stderr.hasPrefix("substatus: NOT_FOUND"), "\(none.stderr)")

    let put = try await ok(["retention", "put", app, "--file", fixture("retention-rules.json")], key: admin)
    #expect(put.contains("00000000-0000-4000-8000-000000000000"))
    #expect(row(put, "0").prefix(2) == ["0", "loyal-yearly"])
    let list = try Substatus_V1_GetRetentionRulesResponse(jsonString: try await ok(["retention", "list", app, "--json"], key: admin))
    #expect(list.rules?.rules.map(\.ruleID) == ["loyal-yearly", "switch"])
    guard case .alternateProduct(let alternate)? = list.rules?.rules[1].answer else {
      Issue.record("rule 1 is not an alternate product")
      return
    }
    #expect(alternate.productID == "pro.yearly")

    // A bad rule is INVALID_ARGUMENT naming it; the stored rules stay.
    let bad = FileManager.default.temporaryDirectory.appendingPathComponent("retention-\(UUID().uuidString).json")
    try Data(#"{"defaultMessageIdentifier":"00000000-0000-4000-8000-000000000000","rules":[{"ruleId":"x","when":{}}]}"#.utf8).write(to: bad)
    defer { try? FileManager.default.removeItem(at: bad) }
    let refused = try await cli(["retention", "put", app, "--file", bad.path], key: admin)
    #expect(refused.status == 1)
    #expect(refused.stderr.hasPrefix("substatus: INVALID_ARGUMENT"))
    #expect(refused.stderr.contains("rules[0] (ruleId \"x\"): answer is required"), "\(refused.stderr)")
    #expect(try await ok(["retention", "list", app], key: admin).contains("switch"))

    // user-1: a trial, four paid periods in premium (an upgrade, no refund), pro.monthly refunded.
    _ = try await ok(["receipt", "import", app, "user-1", "--file", fixture("verify_receipt.json")], key: admin)
    let yearly = try await ok(["retention", "test", app, "user-1", "--product", "premium.yearly"], key: admin)
    #expect(yearly.contains("loyal-yearly"), "\(yearly)")
    #expect(yearly.contains("message 44444444-4444-4444-8444-444444444444"), "\(yearly)")
    #expect(row(yearly, "paid") == ["paid", "periods", "4"], "\(yearly)")
    let tested = try Substatus_V1_TestRetentionRulesResponse(
      jsonString: try await ok(["retention", "test", app, "user-1", "--product", "pro.monthly", "--json"], key: admin))
    #expect(tested.answer?.ruleID == "switch" && tested.answer?.alternateProduct?.productID == "pro.yearly")
    #expect(tested.facts?.refunded == true)
    // Someone unknown: the default message.
    let stranger = try await ok(["retention", "test", app, "nobody"], key: admin)
    #expect(stranger.contains("(default)") && stranger.contains("message 00000000-0000-4000-8000-000000000000"), "\(stranger)")
  }
}
