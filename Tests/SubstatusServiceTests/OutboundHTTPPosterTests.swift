import Foundation
import HTTPServer
import OutboundHTTP
import Synchronization
import Testing

@testable import SubstatusService

/// ``OutboundHTTPPoster`` (the webhooks' and Apple's clients on libcurl) against the project's HTTP
/// server on port 0: connections reused, answers bounded, every address checked by the webhook
/// rules at connect time. (The client's own limits are `OutboundHTTPClientTests`.)
@Suite("Outbound HTTP poster", .serialized)
struct OutboundHTTPPosterTests {
  final class Counter: Sendable {
    let n = Atomic<Int>(0)
    let hosts = Mutex<[String]>([])
  }

  /// A server answering `status` with `body` to every request, counting them.
  private static func server(status: Int = 200, body: [UInt8] = [], headers: [(String, String)] = []) throws
    -> (HTTPServer, Counter)
  {
    let counted = Counter()
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
      counted.n.add(1, ordering: .relaxed)
      counted.hosts.withLock { $0.append(request.headers["host"] ?? "") }
      var response = HTTPResponse(status: status, body: body)
      for (name, value) in headers { response.headers.add(name: name, value: value) }
      return response
    }
    return (server, counted)
  }

  @Test("sequential webhook POSTs to one host reuse one kept-alive connection")
  func keepAlive() async throws {
    let (server, counted) = try Self.server(status: 204)
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let poster = OutboundHTTPPoster.webhooks(client: client, policy: WebhookURLPolicy(allowPrivateAddresses: true))
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

  @Test("a webhook answer announcing more than the limit is not read; the status still counts")
  func boundedWebhookBody() async throws {
    let (server, _) = try Self.server(status: 200, body: [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20))
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let poster = OutboundHTTPPoster.webhooks(client: client, policy: WebhookURLPolicy(allowPrivateAddresses: true))
    let url = try #require(URL(string: "http://\(server.address)/hook"))
    for _ in 0..<2 {
      let response = try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5))
      #expect(response.status == 200)
      // Its Content-Length (1 MiB) is past the 4 KiB limit: refused before the body is read.
      #expect(response.body.isEmpty)
    }
    #expect(client.metrics.requests["too_large"] == 2)
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("Apple's answers are read whole up to their limit; a longer one is an error, not a cut body")
  func appleBodies() async throws {
    let body = [UInt8](repeating: UInt8(ascii: "y"), count: 300_000)
    let (server, _) = try Self.server(status: 200, body: body)
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let url = try #require(URL(string: "http://\(server.address)/verifyReceipt"))
    let (status, answer) = try await OutboundHTTPPoster.apple(client: client)
      .send(method: "GET", url: url, headers: [("Accept", "application/json")], body: nil, timeout: .seconds(5))
    #expect(status == 200)
    #expect(answer == body)
    var small = OutboundHTTPPoster.apple(client: client)
    small.maxResponseBytes = 1000
    await #expect(throws: OutboundHTTPError.self) {
      _ = try await small.post(url: url, headers: [], body: [], timeout: .seconds(5))
    }
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("webhooks follow no redirect; Apple's clients follow a few")
  func redirects() async throws {
    let (target, _) = try Self.server(status: 200, body: Array("here".utf8))
    let (redirect, _) = try Self.server(status: 302, headers: [("Location", "http://\(target.address)/")])
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let url = try #require(URL(string: "http://\(redirect.address)/hook"))
    let hooks = OutboundHTTPPoster.webhooks(client: client, policy: WebhookURLPolicy(allowPrivateAddresses: true))
    #expect(try await hooks.post(url: url, headers: [], body: [], timeout: .seconds(5)).status == 302)
    let apple = OutboundHTTPPoster.apple(client: client)
    let answer = try await apple.post(url: url, headers: [], body: [], timeout: .seconds(5))
    #expect(answer.status == 200 && answer.body == Array("here".utf8))
    await target.stop(gracePeriod: .seconds(1))
    await redirect.stop(gracePeriod: .seconds(1))
  }

  @Test(
    "the webhook rules are applied to the address connected to, whatever the name",
    arguments: ["localhost", "127.0.0.1", "[::ffff:127.0.0.1]"])
  func addressCheckedAtConnect(host: String) async throws {
    let (server, counted) = try Self.server(status: 200)
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let poster = OutboundHTTPPoster.webhooks(client: client, policy: WebhookURLPolicy(allowPrivateAddresses: false))
    let url = try #require(URL(string: "http://\(host):\(server.port)/hook"))
    do {
      _ = try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5))
      Issue.record("a loopback address was connected to")
    } catch let error as OutboundHTTPError {
      #expect(error.code == .addressRefused)
      #expect(error.message.hasSuffix("is loopback, refused unless the server allows private webhooks"), "\(error)")
    }
    #expect(counted.n.load(ordering: .relaxed) == 0)
    #expect(client.metrics.connectionsOpen == 0)
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("a name is sent in Host and reached through its checked address")
  func nameKeptInHost() async throws {
    let (server, counted) = try Self.server(status: 200)
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let poster = OutboundHTTPPoster.webhooks(client: client, policy: WebhookURLPolicy(allowPrivateAddresses: true))
    let url = try #require(URL(string: "http://localhost:\(server.port)/hook"))
    #expect(try await poster.post(url: url, headers: [], body: [], timeout: .seconds(5)).status == 200)
    #expect(counted.hosts.withLock { $0 } == ["localhost:\(server.port)"])
    await server.stop(gracePeriod: .seconds(1))
  }
}
