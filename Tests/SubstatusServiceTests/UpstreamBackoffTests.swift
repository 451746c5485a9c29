import Foundation
import SubstatusClock
import Synchronization
import Testing

@testable import SubstatusService

/// Answers every verifyReceipt POST and App Store Server API request with one status, counting them.
final class CountingUpstream: HTTPPoster, HTTPRequester {
  let status: Mutex<Int>
  let body: [UInt8]
  private let count = Mutex(0)

  init(status: Int, body: String = "") {
    self.status = Mutex(status)
    self.body = Array(body.utf8)
  }

  /// Requests so far.
  var requests: Int { count.withLock { $0 } }

  func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
  {
    count.withLock { $0 += 1 }
    return HTTPPostResponse(status: status.withLock { $0 }, body: self.body)
  }

  func send(method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration)
    async throws -> (status: Int, body: [UInt8])
  {
    count.withLock { $0 += 1 }
    return (status.withLock { $0 }, self.body)
  }
}

/// Drives a call that keeps failing through its backoffs on `clock`: before retry n, the call must
/// wait at least half of `ceilingsMs[n-1]` and at most all of it, then try again.
func expectBackoffs(_ clock: ManualClock, ceilingsMs: [Int64], requests: () -> Int) async {
  for (index, ceiling) in ceilingsMs.enumerated() {
    let retry = index + 1
    #expect(await clock.waitForSleepers(1), "no backoff before retry \(retry)")
    #expect(requests() == retry)
    clock.advance(by: .milliseconds(ceiling / 2 - 1))
    #expect(clock.sleeperCount == 1, "retry \(retry) came before half of \(ceiling) ms")
    clock.advance(by: .milliseconds(ceiling / 2 + 1))
    #expect(clock.sleeperCount == 0, "retry \(retry) waited longer than \(ceiling) ms")
  }
}

@Suite("Upstream retries wait their backoff on the injected clock")
struct UpstreamBackoffTests {
  @Test("verifyReceipt: retry n waits [½, 1] × initialBackoff × 2^(n-1), then the failure is UNAVAILABLE")
  func verifyReceiptBackoff() async throws {
    let clock = ManualClock()
    let apple = CountingUpstream(status: 503)
    let client = VerifyReceiptClient(
      productionURL: URL(string: "http://apple.invalid/p")!, sandboxURL: URL(string: "http://apple.invalid/s")!,
      maxAttempts: 4, initialBackoff: .seconds(1), poster: apple, clock: clock)
    let call = Task { try await client.verify(receiptData: "r", password: nil) }
    await expectBackoffs(clock, ceilingsMs: [1_000, 2_000, 4_000]) { apple.requests }
    do {
      _ = try await call.value
      Issue.record("a 503 was accepted")
    } catch let failure as VerifyReceiptFailure {
      #expect(failure.kind == .unavailable)
    }
    #expect(apple.requests == 4)
    #expect(clock.sleeperCount == 0)  // no wait after the last attempt
  }

  @Test("App Store Server API: retry n waits [½, 1] × initialBackoff × 2^(n-1), then UNAVAILABLE")
  func serverAPIBackoff() async throws {
    let clock = ManualClock()
    let apple = CountingUpstream(status: 500, body: #"{"errorCode":5000001,"errorMessage":"retry"}"#)
    let client = AppStoreServerAPIClient(
      productionURL: URL(string: "http://apple.invalid")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
      maxAttempts: 3, initialBackoff: .milliseconds(500), requester: apple, clock: clock)
    let call = Task {
      try await client.transactionInfo(
        transactionId: "42", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: clock.wallMs)
    }
    await expectBackoffs(clock, ceilingsMs: [500, 1_000]) { apple.requests }
    do {
      _ = try await call.value
      Issue.record("a 500 was accepted")
    } catch let error as AppStoreServerAPIError {
      #expect(error.code == .unavailable)
    }
    #expect(apple.requests == 3)
    #expect(clock.sleeperCount == 0)
  }

  @Test("a rejection that is not temporary is never retried: no backoff")
  func noBackoffForRejections() async throws {
    let clock = ManualClock()
    let apple = CountingUpstream(status: 400, body: #"{"errorCode":4000006,"errorMessage":"bad id"}"#)
    let client = AppStoreServerAPIClient(
      productionURL: URL(string: "http://apple.invalid")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
      maxAttempts: 3, initialBackoff: .milliseconds(500), requester: apple, clock: clock)
    await #expect(throws: AppStoreServerAPIError.self) {
      _ = try await client.transactionInfo(
        transactionId: "42", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: clock.wallMs)
    }
    #expect(apple.requests == 1)
  }
}
