import Foundation
import HTTPServer
import SubstatusProcessTestKit
import SubstatusWire
import Synchronization
import Testing

/// What the fake verifyReceipt endpoint received: `receipt-data` and `password` of each body.
final class VerifyReceiptLog: Sendable {
  private let bodies = Mutex<[(receipt: String, password: String)]>([])

  func append(_ body: Data) {
    guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
      return
    }
    let entry = (
      receipt: object["receipt-data"] as? String ?? "",
      password: object["password"] as? String ?? ""
    )
    bodies.withLock { $0.append(entry) }
  }

  var receiptData: [String] { bodies.withLock { $0.map(\.receipt) } }
  var passwords: [String] { bodies.withLock { $0.map(\.password) } }
}

@Suite("substatus receipt submit against substatusd and a fake verifyReceipt")
struct ReceiptSubmitTests {
  @Test(
    "receipt submit: the receipt and the shared secret reach verifyReceipt; the purchases are stored"
  )
  func submit() async throws {
    let log = VerifyReceiptLog()
    let answer = [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture("verify_receipt.json"))))
    let apple = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0)) {
      request in
      log.append(Data(request.body))
      return .json(answer)
    }
    let url = "http://127.0.0.1:\(apple.port)/verifyReceipt"
    let server = try await ServerProcess(extraArguments: [
      "--verify-receipt-production-url", url, "--verify-receipt-sandbox-url", url,
    ])
    do {
      try await run(server, log)
    } catch {
      Issue.record("substatusd output:\n\(server.output)")
      await server.stop()
      await apple.stop()
      throw error
    }
    await server.stop()
    await apple.stop()
  }

  private func run(_ server: ServerProcess, _ log: VerifyReceiptLog) async throws {
    func cli(_ arguments: [String], key: String?, stdin: [UInt8] = []) async throws -> ProcessRun {
      var environment = ["SUBSTATUS_ADDR": server.grpcAddress]
      if let key { environment["SUBSTATUS_API_KEY"] = key }
      return try await runSubstatusBinary(arguments, stdin: stdin, environment: environment)
    }
    let tenant = try Substatus_V1_CreateTenantResponse(
      jsonString: try await cli(
        ["tenant", "create", "Receipts", "--json"], key: server.operatorKey
      ).stdout)
    let admin = tenant.adminKey
    let registered = try await cli(
      ["app", "register", "--bundle-id", "com.example.app"], key: admin)
    let app = try #require(field(registered.stdout, "app id"), "\(registered.stderr)")
    #expect(
      try await cli(["product", "put", app, "--file", fixture("catalog.json")], key: admin).status
        == 0)
    let receipt: [UInt8] = [0x30, 0x82, 0x01, 0x0A, 0x06, 0x09, 0x2A, 0x86, 0x48]  // binary PKCS #7 start

    // Without a shared secret the server refuses, before calling Apple.
    let refused = try await cli(
      ["receipt", "submit", app, "user-2", "--receipt-file", "-"], key: admin, stdin: receipt)
    #expect(refused.status == 1)
    #expect(refused.stderr.hasPrefix("substatus: FAILED_PRECONDITION"))
    #expect(refused.stderr.split(separator: "\n").count == 1)
    #expect(log.receiptData.isEmpty)

    let secret = "fedcba9876543210fedcba9876543210"
    #expect(
      try await cli(["app", "set-secret", app], key: admin, stdin: Array(secret.utf8)).status == 0)
    let submitted = try await cli(
      ["receipt", "submit", app, "user-2", "--receipt-file", "-"], key: admin, stdin: receipt)
    #expect(submitted.status == 0, "\(submitted.stderr)")
    #expect(field(submitted.stdout, "transactions") == "9 (9 new or changed)")
    #expect(field(submitted.stdout, "environment") == "PRODUCTION")
    #expect(row(submitted.stdout, "lifetime").prefix(2) == ["lifetime", "NON_CONSUMABLE"])
    #expect(log.receiptData == [Data(receipt).base64EncodedString()])
    #expect(log.passwords == [secret])

    // JSON, and the stored history is there for reads.
    let again = try Substatus_V1_SubmitReceiptResponse(
      jsonString: try await cli(
        ["receipt", "submit", app, "user-2", "--receipt-file", "-", "--json"], key: admin,
        stdin: receipt
      )
      .stdout)
    #expect(again.transactionCount == 9 && again.storedTransactionCount == 0)
    let history = try Substatus_V1_GetTransactionHistoryResponse(
      jsonString: try await cli(["history", app, "user-2", "--json"], key: admin).stdout)
    #expect(history.transactions.count == 9)
  }
}
