import Foundation
import RPCCore
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusWire
import Testing
@testable import SubstatusService

/// The working-set budget: reservations, refusals, and that every reservation a call makes comes
/// back when the call ends, however it ends.
@Suite struct WorkingSetBudgetTests {
  @Test(arguments: [
    // limit, estimates reserved in turn, which are granted (and with how many bytes)
    (1000, [400, 400, 400], [400, 400, nil]),
    (1000, [1000, 1], [1000, nil]),
    (1000, [5000], [1000]),  // cut to the limit: it runs alone
    (1000, [0, 1000, 0], [0, 1000, 0]),
    (1000, [-5, 1000], [0, 1000]),
    (Int.max, [Int.max, 1], [Int.max, nil]),
  ] as [(Int, [Int], [Int?])])
  func reservationsFitTheLimit(limit: Int, estimates: [Int], granted: [Int?]) {
    let budget = WorkingSetBudget(limitBytes: limit)
    let results = estimates.map { budget.reserve($0) }
    #expect(results == granted)
    #expect(budget.reservedBytes == granted.compactMap { $0 }.reduce(0, +))
    #expect(budget.refusedCount == granted.filter { $0 == nil }.count)
    #expect(budget.admittedCount == granted.filter { $0 != nil }.count)
    for bytes in results.compactMap({ $0 }) { budget.release(bytes) }
    #expect(budget.reservedBytes == 0)
  }

  @Test func releasedBytesCanBeReservedAgain() {
    let budget = WorkingSetBudget(limitBytes: 1000)
    let first = budget.reserve(700)
    #expect(first == 700)
    #expect(budget.reserve(700) == nil)
    budget.release(700)
    #expect(budget.reserve(700) == 700)
    #expect(budget.peakBytes == 700)
  }

  @Test func unlimitedWithoutALimit() {
    let budget = WorkingSetBudget(limitBytes: nil)
    for _ in 0..<100 { #expect(budget.reserve(1 << 40) == 1 << 40) }
    #expect(budget.prometheusText().contains("substatus_working_set_limit_bytes 0\n"))
  }

  /// Many tasks reserving and releasing at once never pass the limit and leave nothing behind.
  @Test func concurrentReservationsNeverPassTheLimit() async {
    let budget = WorkingSetBudget(limitBytes: 10_000)
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<8 {
        group.addTask {
          for i in 0..<2_000 {
            if let granted = budget.reserve(1_000 + (task * 37 + i) % 900) {
              #expect(budget.reservedBytes <= 10_000)
              budget.release(granted)
            }
          }
        }
      }
    }
    #expect(budget.reservedBytes == 0)
    #expect(budget.peakBytes <= 10_000)
    #expect(budget.admittedCount + budget.refusedCount == 16_000)
  }

  @Test func refusalCarriesRetryInfo() throws {
    let error = WorkingSetBudget.refusal
    #expect(error.code == .resourceExhausted)
    let details = try #require(error.metadata.firstBinary(forKey: "grpc-status-details-bin"))
    let status = try Google_Rpc_Status(serializedBytes: details)
    #expect(status.code == Int32(RPCError.Code.resourceExhausted.rawValue))
    let retry = try Google_Rpc_RetryInfo(serializedBytes: try #require(status.details.first).value)
    #expect(retry.retryDelay?.nanos == 250_000_000)
  }

  @Test func estimateGrowsWithThePage() {
    let small = WorkingSetEstimate.transactionPage(pageSize: 50, firstPage: false)
    let large = WorkingSetEstimate.transactionPage(pageSize: 1000, firstPage: false)
    #expect(small < large)
    #expect(WorkingSetEstimate.transactionPage(pageSize: 50, firstPage: true) > small)
  }

  // MARK: Calls

  /// A tenant, an app, a READ key, and `count` transactions of user-1.
  func seed(_ h: Harness, count: Int) async throws -> (appID: String, readKey: String) {
    let (admin, appID) = try await h.makeTenantWithApp()
    var create = Substatus_V1_CreateApiKeyRequest()
    create.role = .read
    let readKey = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: admin).key
    var body = Substatus_V1_ImportTransactionsRequest()
    body.appID = appID
    body.userID = "user-1"
    body.transactions = (0..<count).map { i in
      var t = Substatus_V1_Transaction()
      t.transactionID = "t-\(i)"
      t.originalTransactionID = "t-0"
      t.productID = "pro.monthly"
      t.purchaseDateMs = 1_700_000_000_000 + Int64(i) * 86_400_000
      t.expiresDateMs = t.purchaseDateMs + 30 * 86_400_000
      return t
    }
    _ = try await h.call(Substatus_V1_IngestService.importTransactions, body, key: admin)
    return (appID, readKey)
  }

  func historyRequest(_ appID: String, pageSize: Int32 = 10, token: String = "") -> Substatus_V1_GetTransactionHistoryRequest {
    var request = Substatus_V1_GetTransactionHistoryRequest()
    request.appID = appID
    request.userID = "user-1"
    request.pageSize = pageSize
    request.pageToken = token
    return request
  }

  @Test func aServedPageGivesItsReservationBack() async throws {
    try await withService { h in
      let (appID, readKey) = try await seed(h, count: 5)
      let budget = h.service.workingSetBudget
      let admitted = budget.admittedCount
      let page = try await h.call(Substatus_V1_StatusService.getTransactionHistory, historyRequest(appID), key: readKey)
      #expect(page.transactions.count == 5)
      #expect(budget.admittedCount == admitted + 1)
      #expect(budget.peakBytes >= WorkingSetEstimate.transactionPage(pageSize: 10, firstPage: true))
      #expect(budget.reservedBytes == 0)
    }
  }

  @Test func aCallThatCannotReserveIsRefusedWithRetryInfo() async throws {
    var limits = ServiceLimits()
    limits.maxWorkingSetBytes = 4 << 20
    try await withService(limits: limits) { h in
      let (appID, readKey) = try await seed(h, count: 5)
      let budget = h.service.workingSetBudget
      // Other calls hold all but a little of the budget.
      let held = try #require(budget.reserve((4 << 20) - 1000))
      let error = await expectStatus(.resourceExhausted) {
        _ = try await h.call(Substatus_V1_StatusService.getTransactionHistory, historyRequest(appID), key: readKey)
      }
      let details = try #require(error?.metadata.firstBinary(forKey: "grpc-status-details-bin"))
      let status = try Google_Rpc_Status(serializedBytes: details)
      #expect(status.details.first?.typeURL == "type.googleapis.com/google.rpc.RetryInfo")
      #expect(budget.refusedCount == 1)
      #expect(budget.reservedBytes == held)
      budget.release(held)
      // With room again, the same call is served.
      _ = try await h.call(Substatus_V1_StatusService.getTransactionHistory, historyRequest(appID), key: readKey)
      #expect(budget.reservedBytes == 0)
    }
  }

  @Test func aCallThatFailsAfterReservingGivesItBack() async throws {
    try await withService { h in
      let (appID, readKey) = try await seed(h, count: 5)
      // A well-formed token whose cursor the store rejects: the call has reserved by then.
      let token = Data("v1:garbage".utf8).base64EncodedString()
      await expectStatus(.invalidArgument) {
        _ = try await h.call(
          Substatus_V1_StatusService.getTransactionHistory, historyRequest(appID, token: token), key: readKey)
      }
      #expect(h.service.workingSetBudget.admittedCount >= 1)
      #expect(h.service.workingSetBudget.reservedBytes == 0)
    }
  }

  @Test func aCancelledCallGivesItBack() async throws {
    try await withService { h in
      let service = h.service
      let budget = service.workingSetBudget
      let context = ServerContext(method: "/substatus.v1.StatusService/GetTransactionHistory", metadata: [:], deadline: nil, peer: "test")
      let call = Task {
        try await AccessLogInterceptor(service: service).intercept(context) { context in
          try service.reserveWorkingSet(100_000, context)
          try await Task.sleep(for: .seconds(600))
        }
      }
      // Wait (bounded) until the call holds its reservation, then cancel it.
      for _ in 0..<5_000 where budget.reservedBytes == 0 { await Task.yield() }
      #expect(budget.reservedBytes == 100_000)
      call.cancel()
      let result = await call.result
      #expect(throws: CancellationError.self) { try result.get() }
      #expect(budget.reservedBytes == 0)
    }
  }
}
