import Foundation
import HTTPTestSupport
import Synchronization
import Testing

import HTTPServer

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

private struct Boom: Error {}

private func makeRouter() -> HTTPRouter {
  var router = HTTPRouter()
  router.add("GET", "/healthz") { _ in .text("ok") }
  router.add("POST", "/v1/apps/{app_id}/apple/notifications") { request in
    let echo: [String: Any] = [
      "app_id": request.pathParameters["app_id"] ?? "",
      "method": request.method,
      "path": request.path,
      "mode": request.query("mode") ?? "",
      "content_type": request.headers["content-type"] ?? "",
      "body": String(decoding: request.body, as: UTF8.self),
    ]
    let data = try JSONSerialization.data(withJSONObject: echo, options: [.sortedKeys])
    return .json(Array(data), status: 201)
  }
  router.add("GET", "/v1/apps/{app_id}/apple/notifications") { _ in .text("list") }
  router.add("GET", "/bad") { _ in throw HTTPError.badRequest("field 'x' is missing") }
  router.add("GET", "/crash") { _ in throw Boom() }
  return router
}

private func withServer(
  _ configuration: HTTPServerConfiguration = HTTPServerConfiguration(maxBodySize: 1024),
  _ body: (HTTPServer) async throws -> Void
) async throws {
  let server = try HTTPServer(configuration: configuration, router: makeRouter())
  do {
    try await body(server)
  } catch {
    await server.stop(gracePeriod: .milliseconds(100))
    throw error
  }
  await server.stop(gracePeriod: .seconds(2))
}

@Suite("HTTPServer")
struct HTTPServerTests {
  @Test func bindsAFreePortWhenAskedForPortZero() async throws {
    let a = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in .text("a") }
    let b = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in .text("b") }
    #expect(a.port > 0 && b.port > 0 && a.port != b.port)
    #expect(try await send("GET", a, "/").text == "a")
    #expect(try await send("GET", b, "/").text == "b")
    await a.stop()
    await b.stop()
  }

  @Test func routesWithPathParametersQueryHeadersAndBody() async throws {
    try await withServer { server in
      let response = try await send(
        "POST", server, "/v1/apps/app%2D7/apple/notifications?mode=test&x",
        body: Data("{\"a\":1}".utf8), headers: ["Content-Type": "application/json"])
      #expect(response.status == 201)
      #expect(response.headers["content-type"] == "application/json")
      let json = try response.json()
      #expect(json["app_id"] as? String == "app-7")
      #expect(json["method"] as? String == "POST")
      #expect(json["path"] as? String == "/v1/apps/app-7/apple/notifications")
      #expect(json["mode"] as? String == "test")
      #expect(json["content_type"] as? String == "application/json")
      #expect(json["body"] as? String == "{\"a\":1}")
      #expect(try await send("GET", server, "/healthz").text == "ok")
    }
  }

  @Test(arguments: [
    ("GET", "/nope", 404), ("DELETE", "/healthz", 405), ("PUT", "/v1/apps/a/apple/notifications", 405),
    ("GET", "/bad", 400), ("GET", "/crash", 500),
  ])
  func errorsHavePreciseStatusesAndJSONBodies(method: String, path: String, status: Int) async throws {
    try await withServer { server in
      let response = try await send(method, server, path)
      #expect(response.status == status)
      #expect(response.headers["content-type"] == "application/json")
      let error = try #require(try response.json()["error"] as? [String: Any])
      #expect(error["status"] as? Int == status)
      #expect((error["message"] as? String)?.isEmpty == false)
      if status == 405 { #expect(response.headers["allow"] != nil) }
      if status == 500 { #expect(error["message"] as? String == "internal error") }
    }
  }

  @Test func headIsAnsweredByTheGetRouteWithoutABody() async throws {
    try await withServer { server in
      let reply = try await rawExchange(
        port: server.port, Array("HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
      #expect(reply.hasPrefix("HTTP/1.1 200"))
      #expect(reply.hasSuffix("\r\n\r\n"))
    }
  }

  @Test func bodyOverTheLimitGets413AndTheServerKeepsServing() async throws {
    try await withServer { server in
      let big = Data(repeating: 0x41, count: 4096)
      let response = try await send("POST", server, "/v1/apps/a/apple/notifications", body: big)
      #expect(response.status == 413)
      #expect(try await send("GET", server, "/healthz").status == 200)
      // At the limit exactly is accepted.
      let exact = Data(repeating: 0x41, count: 1024)
      #expect(try await send("POST", server, "/v1/apps/a/apple/notifications", body: exact).status == 201)
    }
  }

  @Test func chunkedBodyOverTheLimitGets413() async throws {
    try await withServer { server in
      let chunk = String(repeating: "B", count: 800)
      let hex = String(chunk.utf8.count, radix: 16)
      let request =
        "POST /v1/apps/a/apple/notifications HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        + "Connection: close\r\n\r\n\(hex)\r\n\(chunk)\r\n\(hex)\r\n\(chunk)\r\n0\r\n\r\n"
      let reply = try await rawExchange(port: server.port, Array(request.utf8))
      #expect(reply.hasPrefix("HTTP/1.1 413"))
      let small = "POST /v1/apps/a/apple/notifications HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        + "Connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
      let ok = try await rawExchange(port: server.port, Array(small.utf8))
      #expect(ok.hasPrefix("HTTP/1.1 201"))
      #expect(ok.contains("\"body\":\"abc\""))
    }
  }

  @Test(arguments: [
    "GARBAGE\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    "\u{1}\u{2}\u{3}\r\n\r\n",
    "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
  ])
  func malformedRequestsAreRejectedAndTheServerStaysUp(raw: String) async throws {
    try await withServer { server in
      let reply = try await rawExchange(port: server.port, Array(raw.utf8))
      #expect(reply.isEmpty || reply.hasPrefix("HTTP/1.1 4") || reply.hasPrefix("HTTP/1.1 5"))
      #expect(!reply.contains("\r\n\r\nok"))
      #expect(try await send("GET", server, "/healthz").text == "ok")
    }
  }

  @Test func aSlowHandlerDoesNotBlockOthers() async throws {
    // The slow handler holds its request until the test opens the gate, which the test does only
    // after ten other requests were answered: if a handler in flight blocked the server, the
    // fast requests could not complete (no timing assumption).
    let started = Counter()
    let gate = Counter()
    var router = HTTPRouter()
    router.add("GET", "/healthz") { _ in .text("ok") }
    router.add("GET", "/gated") { _ in
      started.increment()
      _ = await waitUntil(timeout: .seconds(20)) { gate.value != 0 }
      return .text(gate.value == 0 ? "gate never opened" : "slow")
    }
    let server = try HTTPServer(configuration: .init(), router: router)
    async let slow = send("GET", server, "/gated")
    try await waitUntilStarted(started)
    for _ in 0..<10 { #expect(try await send("GET", server, "/healthz").text == "ok") }
    gate.increment()
    #expect(try await slow.text == "slow")
    await server.stop()
  }

  @Test func manyConcurrentRequestsAllSucceed() async throws {
    try await withServer { server in
      try await withThrowingTaskGroup(of: Bool.self) { group in
        for i in 0..<64 {
          group.addTask {
            let response = try await send(
              "POST", server, "/v1/apps/app\(i)/apple/notifications", body: Data("\(i)".utf8))
            let json = try response.json()
            return response.status == 201 && json["app_id"] as? String == "app\(i)"
              && json["body"] as? String == "\(i)"
          }
        }
        var ok = 0
        for try await result in group where result { ok += 1 }
        #expect(ok == 64)
      }
    }
  }

  /// A server whose `/slow` handler records that it started, then sleeps `delay`.
  private func slowServer(delay: Duration) throws -> (HTTPServer, Counter) {
    let started = Counter()
    var router = HTTPRouter()
    router.add("GET", "/slow") { _ in
      started.increment()
      try await Task.sleep(for: delay)
      return .text("slow")
    }
    return (try HTTPServer(configuration: .init(), router: router), started)
  }

  private func waitUntilStarted(_ started: Counter) async throws {
    _ = await waitUntil { started.value != 0 }
    try #require(started.value == 1)
  }

  @Test func stopWaitsForHandlersInFlightThenRefusesConnections() async throws {
    let (server, started) = try slowServer(delay: .milliseconds(800))
    async let slow = send("GET", server, "/slow")
    try await waitUntilStarted(started)
    await server.stop(gracePeriod: .seconds(5))
    #expect(try await slow.text == "slow")
    await #expect(throws: (any Error).self) {
      try await rawExchange(port: server.port, Array("GET / HTTP/1.1\r\n\r\n".utf8))
    }
  }

  @Test func aClientThatHangsUpDuringTheHandlerLeavesNothingBehind() async throws {
    let (server, started) = try slowServer(delay: .milliseconds(300))
    // Send a request and hang up at once (timeout 0: read nothing back).
    _ = try? await rawExchange(
      port: server.port, Array("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n".utf8), timeout: .milliseconds(1))
    try await waitUntilStarted(started)
    let clock = ContinuousClock()
    let start = clock.now
    // The abandoned request completes when its handler returns, so stop need not wait long.
    await server.stop(gracePeriod: .seconds(30))
    #expect(clock.now - start < .seconds(10))  // a leaked request would hold stop for 30 s
  }

  @Test func stopAnswers503WhenTheGracePeriodRunsOut() async throws {
    let (server, started) = try slowServer(delay: .seconds(10))
    async let slow = send("GET", server, "/slow")
    try await waitUntilStarted(started)
    let clock = ContinuousClock()
    let start = clock.now
    await server.stop(gracePeriod: .milliseconds(100))
    #expect(clock.now - start < .seconds(5))  // far less than the handler's 10 s
    #expect(try await slow.status == 503)
  }

  @Test func aRequestHeadLateForItsDeadlineIsShutDown() async throws {
    var configuration = HTTPServerConfiguration(maxBodySize: 1024)
    configuration.requestHeadTimeout = .milliseconds(300)
    try await withServer(configuration) { server in
      let clock = ContinuousClock()
      let started = clock.now
      // A head that never ends: cut at the deadline, well before the 30 s idle timeout.
      let answer = try await rawExchange(port: server.port, Array("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n".utf8))
      #expect(answer.isEmpty)
      #expect(clock.now - started < .seconds(3))
      #expect(server.prometheusText().contains("substatus_http_request_head_timeouts_total 1\n"))
      #expect(try await send("GET", server, "/healthz").text == "ok")
    }
  }

  @Test func connectionsOverTheCapPerAddressAreAnswered503AndClosed() async throws {
    var configuration = HTTPServerConfiguration(maxBodySize: 1024)
    configuration.perAddressConnectionLimit = 2
    try await withServer(configuration) { server in
      let answer = try await withHeldConnections(port: server.port, count: 2, sending: Array("GET /".utf8)) {
        try await rawExchange(port: server.port, Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
      }
      // Answered, never closed silently: 503 with Retry-After, and the connection closed after it.
      #expect(answer.hasPrefix("HTTP/1.1 503"), "\(answer)")
      #expect(answer.contains("Retry-After: 1"), "\(answer)")
      #expect(answer.contains("Connection: close"), "\(answer)")
      // The held connections are closed now; once the server has seen the closes, the address is
      // served again.
      let served = await waitUntil(timeout: .seconds(5), every: .milliseconds(100)) {
        (try? await send("GET", server, "/healthz").text) == "ok"
      }
      #expect(served, "the address was not served again after its connections closed")
      #expect(server.prometheusText().contains("substatus_http_requests_refused_total{reason=\"connections_per_address\"} 1"))
    }
  }

  @Test func exemptRequestsOverTheCapAreServedAndTheConnectionClosed() async throws {
    var configuration = HTTPServerConfiguration(maxBodySize: 1024)
    configuration.perAddressConnectionLimit = 1
    configuration.exemptFromClientCaps = { $0.path.hasPrefix("/v1/apps/") }
    try await withServer(configuration) { server in
      let answer = try await withHeldConnections(port: server.port, count: 1, sending: Array("GET /".utf8)) {
        try await rawExchange(
          port: server.port, Array("GET /v1/apps/a1/apple/notifications HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
      }
      #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
      #expect(answer.contains("Connection: close"), "\(answer)")
    }
  }

  @Test func aTrustedProxysClientsAreCountedApartAndNamed() async throws {
    var configuration = HTTPServerConfiguration(maxBodySize: 1024)
    configuration.perAddressConnectionLimit = 1
    configuration.trustedProxies = [IPNetwork("127.0.0.0/8")!]
    let seen = Mutex<[String]>([])
    let release = Mutex(false)
    let server = try HTTPServer(configuration: configuration) { request in
      seen.withLock { $0.append("\(request.peer) via \(request.forwardedBy ?? "-")") }
      if request.path == "/hold" {
        _ = await waitUntil(timeout: .seconds(60), every: .milliseconds(10)) { release.withLock { $0 } }
      }
      return .text("ok")
    }
    // One request of client .7 in flight: its next gets 503 + Retry-After on a kept connection;
    // client .8, on another connection from the same proxy, is served.
    let held = try await connected(
      port: server.port, count: 1,
      sending: Array("GET /hold HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n".utf8))
    defer { held[0].close() }
    _ = await waitUntil(timeout: .seconds(2), every: .milliseconds(10)) { seen.withLock { $0.count } == 1 }
    let refused = try await rawExchange(
      port: server.port, Array("GET /x HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n".utf8),
      timeout: .seconds(1))
    #expect(refused.hasPrefix("HTTP/1.1 503"), "\(refused)")
    #expect(refused.contains("Retry-After: 1"), "\(refused)")
    let served = try await rawExchange(
      port: server.port, Array("GET /x HTTP/1.1\r\nHost: x\r\nForwarded: for=\"[2001:db8::8]:4711\"\r\n\r\n".utf8),
      timeout: .seconds(1))
    #expect(served.hasPrefix("HTTP/1.1 200"), "\(served)")
    release.withLock { $0 = true }
    let names = seen.withLock { $0 }
    #expect(names.first?.hasPrefix("ipv4:198.51.100.7 via ipv4:127.0.0.1:") == true, "\(names)")
    #expect(names.contains { $0.hasPrefix("ipv6:[2001:db8::8] via ipv4:127.0.0.1:") }, "\(names)")
    let metrics = server.prometheusText()
    #expect(metrics.contains("substatus_http_requests_refused_total{reason=\"requests_per_client\"} 1"), "\(metrics)")
    #expect(metrics.contains("substatus_http_trusted_proxy_requests_total 3"), "\(metrics)")
    await server.stop()
  }

  @Test(arguments: [
    ("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
    ("GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: o\u{0}e\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\nHost: x\n\n", 400),
    ("GET /healthz HTTP/1.1\r\n\r\n", 400),  // libmicrohttpd's strict mode: HTTP/1.1 needs Host
  ])
  func badFramingIsRefusedAndTheConnectionClosed(request: String, status: Int) async throws {
    try await withServer(HTTPServerConfiguration(maxBodySize: 1024)) { server in
      let answer = try await rawExchange(
        port: server.port, Array((request + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").utf8), timeout: .seconds(3))
      #expect(answer.hasPrefix("HTTP/1.1 \(status)"), "\(answer)")
      #expect(answer.components(separatedBy: "HTTP/1.1 ").count == 2, "a request behind it was answered: \(answer)")
    }
  }

  @Test(arguments: ["127.0.0.1:0", "[::1]:0", "localhost:0"])
  func parsesListenAddresses(listen: String) async throws {
    let configuration = try HTTPServerConfiguration(listen: listen)
    #expect(configuration.port == 0)
    let server = try HTTPServer(configuration: configuration) { _ in .text("hi") }
    #expect(server.port > 0)
    await server.stop()
  }

  @Test(arguments: ["nohost", "1.2.3.4:99999", ":80", "127.0.0.1:x"])
  func rejectsBadListenAddresses(listen: String) {
    #expect(throws: HTTPServerError.self) { try HTTPServerConfiguration(listen: listen) }
  }

  @Test func bindingAPortInUseThrows() async throws {
    let first = try HTTPServer(configuration: .init()) { _ in .text("1") }
    #expect(throws: HTTPServerError.self) {
      _ = try HTTPServer(configuration: .init(host: "127.0.0.1", port: first.port)) { _ in .text("2") }
    }
    await first.stop()
  }

  @Test func routerMatchesWithoutSockets() async {
    let router = makeRouter()
    let response = await router.respond(to: HTTPRequest(method: "get", path: "/healthz/"))
    #expect(response.status == 200)
    #expect(String(decoding: response.body, as: UTF8.self) == "ok")
    #expect(await router.respond(to: HTTPRequest(method: "GET", path: "/v1/apps//apple/notifications")).status == 404)
  }

  @Test func errorMessagesAreJSONEscaped() {
    let response = HTTPResponse.error(status: 400, message: "bad \"x\"\n\u{1}")
    #expect(String(decoding: response.body, as: UTF8.self)
      == "{\"error\":{\"status\":400,\"message\":\"bad \\\"x\\\"\\n\\u0001\"}}")
  }
}
