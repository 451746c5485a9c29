import Foundation
import HTTPServer
import Synchronization
import Testing

@testable import SubstatusService

/// ``URLSessionPoster`` against the project's HTTP server on port 0: connections reused, answers
/// bounded.
@Suite("URLSession poster")
struct HTTPPosterTests {
  final class Counter: Sendable {
    let n = Atomic<Int>(0)
  }

  /// A server answering `status` with `body` to every request, counting them.
  private static func server(status: Int = 200, body: [UInt8] = []) throws -> (HTTPServer, Counter) {
    let counted = Counter()
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
      counted.n.add(1, ordering: .relaxed)
      return HTTPResponse(status: status, body: body)
    }
    return (server, counted)
  }

  @Test("sequential POSTs to one host reuse one kept-alive connection")
  func keepAlive() async throws {
    let (server, counted) = try Self.server(status: 204)
    let poster = URLSessionPoster(followRedirects: false)
    let url = try #require(URL(string: "http://\(server.address)/hook"))
    for i in 0..<20 {
      let response = try await poster.post(
        url: url, headers: [("Content-Type", "application/json")], body: Array("{\"n\":\(i)}".utf8),
        timeout: .seconds(5))
      #expect(response.status == 204)
      #expect(server.openConnections == 1, "request \(i): one connection, kept open between requests")
    }
    #expect(counted.n.load(ordering: .relaxed) == 20)
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("an answer's body is kept up to the limit; the status still counts", arguments: [0, 4096])
  func boundedBody(limit: Int) async throws {
    let big = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
    let (server, _) = try Self.server(status: 200, body: big)
    let poster = URLSessionPoster(followRedirects: false, maxResponseBytes: limit)
    let url = try #require(URL(string: "http://\(server.address)/hook"))
    let response = try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5))
    #expect(response.status == 200)
    #expect(response.body.count == limit)
    #expect(response.body.allSatisfy { $0 == UInt8(ascii: "x") })
    // The poster still works after a cut answer.
    let again = try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5))
    #expect(again.status == 200 && again.body.count == limit)
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("without a limit the whole body is read")
  func unboundedBody() async throws {
    let body = [UInt8](repeating: UInt8(ascii: "y"), count: 300_000)
    let (server, _) = try Self.server(status: 200, body: body)
    let poster = URLSessionPoster()
    let url = try #require(URL(string: "http://\(server.address)/x"))
    let response = try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5))
    #expect(response.status == 200)
    #expect(response.body == body)
    await server.stop(gracePeriod: .seconds(1))
  }

  /// A cancelled caller throws at once and its URLSessionTask is never cancelled (FoundationNetworking
  /// 6.3.1 deadlocks or crashes when a cancel races the task's completion): callers cancelled at
  /// every point of a slow answer's life, many times, each return promptly, and the poster goes on.
  @Test("callers cancelled at any point throw CancellationError at once; the poster keeps working")
  func cancelledCallers() async throws {
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
      try? await Task.sleep(for: .milliseconds(150))
      return HTTPResponse(status: 204)
    }
    let poster = URLSessionPoster(followRedirects: false)
    let url = try #require(URL(string: "http://\(server.address)/hook"))
    var cancelled = 0
    for i in 0..<40 {
      let call = Task { try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5)) }
      try await Task.sleep(for: .milliseconds(i % 2 == 0 ? (i * 7) % 200 : 0))
      let asked = ContinuousClock.now
      call.cancel()
      switch await call.result {
      case .success(let response): #expect(response.status == 204)
      case .failure(let error):
        #expect(error is CancellationError, "\(error)")
        cancelled += 1
      }
      #expect(ContinuousClock.now - asked < .seconds(2), "call \(i) returned promptly after its cancellation")
    }
    #expect(cancelled > 0)
    let after = try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5))
    #expect(after.status == 204)
    await server.stop(gracePeriod: .seconds(1))
  }
}
