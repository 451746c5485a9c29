import Dispatch
import Foundation
import HTTPServer
import Synchronization
import Testing

@testable import SubstatusService

/// ``URLSessionRequester`` against the project's HTTP server on port 0: a request whose task is
/// cancelled, at any point of its life, ends at once and takes neither the session nor the
/// process down with it.
@Suite("URLSession requester")
struct URLSessionRequesterTests {
  /// Resumes a continuation once; later calls do nothing.
  final class Once: Sendable {
    private let continuation: Mutex<CheckedContinuation<Bool, Never>?>
    init(_ continuation: CheckedContinuation<Bool, Never>) { self.continuation = Mutex(continuation) }
    func resume(_ value: Bool) { continuation.withLock { $0.take() }?.resume(returning: value) }
  }

  /// Cancels `task` from a Dispatch thread after `delay` (the cooperative pool has 2 threads here;
  /// a cancellation that blocks must not take one of them) and waits until the task ended.
  /// - Returns: whether it ended within `limit`.
  static func cancel<T: Sendable>(_ task: Task<T, any Error>, after delay: Duration, endingWithin limit: Duration) async
    -> Bool
  {
    await withCheckedContinuation { continuation in
      let once = Once(continuation)
      Task {
        _ = await task.result
        once.resume(true)
      }
      DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(delay / .nanoseconds(1)))) { task.cancel() }
      DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(limit / .nanoseconds(1)))) {
        once.resume(false)
      }
    }
  }

  /// With swift-corelibs-foundation 6.3's `URLSession.data(for:)` this test hangs (its issue
  /// #5412): the cancellation handler runs under the task's status-record lock and waits for the
  /// session's work queue, while the work queue, handing back the answer, waits for that lock;
  /// neither the cancelling thread nor the request ever returns (substatusd hung so at exit under
  /// `--clock-url`). In 1 run of 3 it stopped the process instead ("Trying to access a behaviour
  /// for a task that in not in the registry"). Requests in batches, each cancelled at a random
  /// point: before the connection, while the server answers, while the answer is handed back.
  @Test("a request cancelled at any point of its life ends at once")
  func cancelledAtAnyPoint() async throws {
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
      HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: Array(#"{"now_ms": 1}"#.utf8))
    }
    let requester = URLSessionRequester()
    let url = try #require(URL(string: "http://\(server.address)/control/clock"))
    var outcomes = (answered: 0, cancelled: 0)
    for round in 0..<40 {
      let requests = (0..<8).map { _ in
        Task { try await requester.send(method: "GET", url: url, headers: [], body: nil, timeout: .seconds(2)) }
      }
      let ended = await withTaskGroup(of: Bool.self) { group in
        for request in requests {
          group.addTask {
            await Self.cancel(request, after: .microseconds(Int.random(in: 0...2_000)), endingWithin: .seconds(5))
          }
        }
        return await group.reduce(true) { $0 && $1 }
      }
      // Past a hang the session's work queue is stuck: no further request would end.
      guard ended else {
        Issue.record("round \(round): a cancelled request did not end within 5 s")
        return
      }
      for request in requests {
        switch await request.result {
        case .success(let (status, _)):
          #expect(status == 200)
          outcomes.answered += 1
        case .failure(let error):
          #expect(error is CancellationError, "\(error)")
          outcomes.cancelled += 1
        }
      }
    }
    #expect(outcomes.cancelled > 0, "\(outcomes)")
    // The requester still works after all that.
    let (status, body) = try await requester.send(method: "GET", url: url, headers: [], body: nil, timeout: .seconds(2))
    #expect(status == 200 && String(decoding: body, as: UTF8.self).contains("now_ms"))
    await server.stop(gracePeriod: .seconds(1))
  }
}
