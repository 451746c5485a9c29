import SubstatusClientTestKit
import RPCCore
import SubstatusClient
import SubstatusClock
import SubstatusWire
import Testing

/// A fast policy for tests: 1 ms doubling to 4 ms.
private let quick = RetryPolicy(
  maximumAttempts: 4, initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(4),
  multiplier: 2, jitter: 0.5)

/// A router whose methods fail with `code` for the first `failures` calls, then succeed.
private func flakyRouter(failures: Int, code: RPCError.Code = .unavailable, log: CallLog)
  -> RPCRouter
{
  var router = RPCRouter()
  router.fake(Substatus_V1_AdminService.getApp, log: log) { request, count in
    if count <= failures { throw RPCError(code: code, message: "try again (\(count))") }
    var response = Substatus_V1_GetAppResponse()
    var app = Substatus_V1_App()
    app.appID = request.appID
    response.app = app
    return response
  }
  router.fake(Substatus_V1_AdminService.registerApp, log: log) { _, count in
    if count <= failures { throw RPCError(code: code, message: "try again (\(count))") }
    return Substatus_V1_RegisterAppResponse()
  }
  router.fake(Substatus_V1_AdminService.createApiKey, log: log) { _, count in
    if count <= failures { throw RPCError(code: code, message: "try again (\(count))") }
    return Substatus_V1_CreateApiKeyResponse()
  }
  router.fake(Substatus_V1_IngestService.importReceiptResponse, log: log) { _, count in
    if count <= failures { throw RPCError(code: code, message: "try again (\(count))") }
    return Substatus_V1_ImportReceiptResponseResponse()
  }
  return router
}

@Suite("SubstatusClient retries and deadlines")
struct SubstatusClientRetryTests {
  @Test("a read is retried after UNAVAILABLE until it succeeds", arguments: [1, 2, 3])
  func readRetried(failures: Int) async throws {
    let log = CallLog()
    let app = try await withFakeServer(flakyRouter(failures: failures, log: log)) { transport in
      try await SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick).getApp(
        appID: "app_1")
    }
    #expect(app.appID == "app_1")
    #expect(log.count == failures + 1)
    #expect(log.all.allSatisfy { $0.authorization == "Bearer k" })
  }

  @Test("an idempotent ingest call is retried too")
  func ingestRetried() async throws {
    let log = CallLog()
    try await withFakeServer(flakyRouter(failures: 2, log: log)) { transport in
      _ = try await SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
        .importReceiptResponse(appID: "a", userID: "u", json: Array("{}".utf8))
    }
    #expect(log.count == 3)
  }

  @Test("a read gives up after maximumAttempts and throws the last UNAVAILABLE")
  func readGivesUp() async throws {
    let log = CallLog()
    try await withFakeServer(flakyRouter(failures: 100, log: log)) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
      let error = await #expect(throws: RPCError.self) { try await client.getApp(appID: "a") }
      #expect(error?.code == .unavailable)
      #expect(error?.message == "try again (4)")
    }
    #expect(log.count == 4)
  }

  @Test("writes are never retried", arguments: ["registerApp", "createApiKey"])
  func writeNotRetried(method: String) async throws {
    let log = CallLog()
    try await withFakeServer(flakyRouter(failures: 1, log: log)) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
      let error = await #expect(throws: RPCError.self) {
        if method == "registerApp" {
          _ = try await client.registerApp(bundleID: "com.example")
        } else {
          _ = try await client.createApiKey(role: .read)
        }
      }
      #expect(error?.code == .unavailable)
    }
    #expect(log.count == 1)
  }

  @Test(
    "statuses other than UNAVAILABLE are not retried",
    arguments: [RPCError.Code.internal, .deadlineExceeded, .resourceExhausted, .unknown])
  func otherStatusesNotRetried(code: RPCError.Code) async throws {
    let log = CallLog()
    try await withFakeServer(flakyRouter(failures: 1, code: code, log: log)) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
      let error = await #expect(throws: RPCError.self) { try await client.getApp(appID: "a") }
      #expect(error?.code == code)
    }
    #expect(log.count == 1)
  }

  @Test("RetryPolicy.none and a per-call override disable retries")
  func retriesDisabled() async throws {
    let log = CallLog()
    try await withFakeServer(flakyRouter(failures: 5, log: log)) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
      await #expect(throws: RPCError.self) {
        try await client.getApp(
          appID: "a", options: SubstatusCallOptions(retryPolicy: RetryPolicy.none))
      }
    }
    #expect(log.count == 1)
  }

  @Test("backoff grows exponentially, is capped, and jitter stays within its fraction")
  func backoffBounds() {
    let policy = RetryPolicy(
      maximumAttempts: 10, initialBackoff: .milliseconds(100), maximumBackoff: .seconds(1),
      multiplier: 2,
      jitter: 0.5)
    let longest: [Duration] = (1...6).map { policy.backoff(beforeRetry: $0, random: 0) }
    #expect(
      longest == [
        .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1),
        .seconds(1),
      ])
    for retry in 1...8 {
      for random in stride(from: 0.0, through: 1.0, by: 0.125) {
        let wait = policy.backoff(beforeRetry: retry, random: random)
        let cap = policy.backoff(beforeRetry: retry, random: 0)
        #expect(wait <= cap && wait >= cap / 2)
      }
    }
    #expect(RetryPolicy(jitter: 0).backoff(beforeRetry: 1, random: 1) == .milliseconds(200))
    #expect(RetryPolicy.default.maximumAttempts == 5)
    #expect(RetryPolicy.default.backoff(beforeRetry: 9, random: 0) == .seconds(3))
    #expect(RetryPolicy(jitter: 1).backoff(beforeRetry: 1, random: 1) == .zero)
  }

  @Test("retry n waits between half and all of min(cap, initial × 2^(n-1)) of the clock")
  func backoffTiming() async throws {
    let policy = RetryPolicy(
      maximumAttempts: 5, initialBackoff: .seconds(1), maximumBackoff: .seconds(3),
      multiplier: 2, jitter: 0.5)
    let log = CallLog()
    let clock = ManualClock()
    try await withFakeServer(flakyRouter(failures: 100, log: log)) { transport in
      let client = SubstatusClient(
        transport: transport, apiKey: "k", retryPolicy: policy, clock: clock)
      let call = Task { try await client.getApp(appID: "a") }
      // Ceilings 1, 2, 3 (capped), 3 s: the retry never comes before half of it, always by all of it.
      for (attempt, ceiling) in [(1, 1000), (2, 2000), (3, 3000), (4, 3000)] {
        #expect(await clock.waitForSleepers(1))
        #expect(log.count == attempt)
        clock.advance(by: .milliseconds(ceiling / 2 - 1))
        #expect(clock.sleeperCount == 1, "retry \(attempt) came before half its backoff")
        #expect(log.count == attempt)
        clock.advance(by: .milliseconds(ceiling / 2 + 1))
        #expect(clock.sleeperCount == 0, "retry \(attempt) waited longer than its backoff")
      }
      let error = await #expect(throws: RPCError.self) { try await call.value }
      #expect(error?.code == .unavailable)
    }
    #expect(log.count == 5)
  }

  @Test("a slow call fails with DEADLINE_EXCEEDED at its timeout")
  func deadlineExceeded() async throws {
    var router = RPCRouter()
    let log = CallLog()
    router.fake(Substatus_V1_StatusService.getStatus, log: log) { _, _ in
      try await Task.sleep(for: .seconds(30))
      return Substatus_V1_GetStatusResponse()
    }
    let clock = ContinuousClock()
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(
        transport: transport, apiKey: "k", defaultTimeout: .seconds(10), retryPolicy: quick)
      let start = clock.now
      let error = await #expect(throws: RPCError.self) {
        try await client.status(
          appID: "a", userID: "u", options: SubstatusCallOptions(timeout: .milliseconds(100)))
      }
      #expect(error?.code == .deadlineExceeded)
      #expect(clock.now - start < .seconds(10))
    }
    #expect(log.count == 1)
  }

  @Test("the timeout bounds retries and backoffs as a whole")
  func deadlineBoundsRetries() async throws {
    let slow = RetryPolicy(
      maximumAttempts: 50, initialBackoff: .milliseconds(100), maximumBackoff: .milliseconds(100),
      jitter: 0)
    let log = CallLog()
    let clock = ManualClock()
    try await withFakeServer(flakyRouter(failures: 1000, log: log)) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: slow, clock: clock)
      let call = Task {
        try await client.getApp(
          appID: "a", options: SubstatusCallOptions(timeout: .milliseconds(350)))
      }
      // Attempts at 0, 100, 200 and 300 ms; the next backoff would pass the deadline.
      for _ in 0..<3 {
        #expect(await clock.waitForSleepers(1))
        clock.advance(by: .milliseconds(100))
      }
      let error = await #expect(throws: RPCError.self) { try await call.value }
      #expect(error?.code == .unavailable)
      #expect(clock.sleeperCount == 0)
    }
    #expect(log.count == 4)
  }
}
