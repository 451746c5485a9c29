import Foundation
import RPCCore
import SubstatusClientTestKit
import SubstatusWire
import Testing

/// `app-transaction submit` against a fake server.
@Suite("CLI: app-transaction submit")
struct AppAccountCommandTests {
  private func router(_ log: CallLog) -> RPCRouter {
    var router = fakeAPIRouter(log: log)
    router.fake(Substatus_V1_IngestService.submitAppTransaction, log: log) { request, _ in
      guard request.signedAppTransaction.split(separator: ".").count == 3 else {
        throw RPCError(code: .invalidArgument, message: "signed_app_transaction: MALFORMED: not a compact JWS")
      }
      return message {
        $0.userID = request.userID
        $0.groups = Canned.groups
        $0.entitlements = Canned.entitlements
        $0.asOfMs = newYear2026
        $0.environment = .production
        $0.appTransactionID = "704289572311810221"
        $0.originalPurchaseDateMs = newYear2026 - 86_400_000
        $0.originalApplicationVersion = "1.4"
        $0.historyVerified = true
        $0.transactionCount = 3
        $0.storedTransactionCount = 2
      }
    }
    return router
  }

  private func run(_ arguments: [String], stdin: [UInt8] = []) async throws -> (CLIRun, CallLog) {
    let log = CallLog()
    let run = try await withFakeServer(router(log)) { transport in
      await runCLI(arguments, stdin: stdin, transport: transport)
    }
    return (run, log)
  }

  @Test("reads the JWS from --file or stdin (trimmed), sends app and user, prints the account", arguments: [false, true])
  func submit(fromStdin: Bool) async throws {
    let jws = String(decoding: try fixtureBytes("app-transaction.jws"), as: UTF8.self)
    let file = fromStdin ? "-" : fixture("app-transaction.jws")
    let (output, log) = try await run(
      ["app-transaction", "submit", "app_1", "user-7", "--file", file], stdin: fromStdin ? Array(jws.utf8) : [])
    #expect(output.status == 0, "\(output.stderr)")
    let sent = try Substatus_V1_SubmitAppTransactionRequest(serializedBytes: try #require(log.all.last).request)
    #expect(sent.appID == "app_1" && sent.userID == "user-7")
    #expect(sent.signedAppTransaction == jws.trimmingCharacters(in: .whitespacesAndNewlines))
    #expect(output.stdout.contains("704289572311810221"))
    #expect(output.stdout.contains("verified with Apple"))
    #expect(output.stdout.contains("3 from Apple (2 new or changed)"))
    let (json, _) = try await run(["app-transaction", "submit", "app_1", "user-7", "--file", fixture("app-transaction.jws"), "--json"])
    #expect(try Substatus_V1_SubmitAppTransactionResponse(jsonString: json.stdout).historyVerified)
  }

  @Test("an empty file is a usage error, not a call; a refused JWS names the field")
  func refused() async throws {
    let (empty, emptyLog) = try await run(["app-transaction", "submit", "app_1", "u", "--file", "-"], stdin: Array(" \n".utf8))
    #expect(empty.status == 2)
    #expect(empty.stderr.contains("the signed AppTransaction is empty"))
    #expect(emptyLog.count == 0)
    let (bad, _) = try await run(["app-transaction", "submit", "app_1", "u", "--file", "-"], stdin: Array("nope".utf8))
    #expect(bad.status != 0)
    #expect(bad.stderr.contains("INVALID_ARGUMENT") && bad.stderr.contains("signed_app_transaction"), "\(bad.stderr)")
  }
}
