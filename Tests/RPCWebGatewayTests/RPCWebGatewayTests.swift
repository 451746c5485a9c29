import Foundation
@testable import HTTPServer
import HTTPTestSupport
import RPCCore
import RPCWebGateway
import SubstatusClock
import Synchronization
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The Python of the worktree's `.venv`.
private let python = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent().appendingPathComponent(".venv/bin/python").path

private func fixture(_ name: String) -> String {
  Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)!.path
}

/// What the test handlers did.
private final class Probe: Sendable {
  /// Messages the Count handler may write so far.
  let gate = Mutex(0)
  let started = Mutex(0)
  let cancelled = Mutex(0)
  /// Messages the Paced handler has written.
  let written = Mutex(0)
}

/// Byte-level test methods: `Count` streams `m1`...`mN` (N the request), each once the test opens
/// its gate; `Hang` streams `first` then waits forever; `Sleep` waits forever (unary).
private func testRouter(_ probe: Probe) -> RPCRouter {
  var router = RPCRouter()
  router.registerStreaming(method: "/test.v1.Stream/Count") { requests, responses, _ in
    let count = Int(String(decoding: try await requests.single(), as: UTF8.self)) ?? 0
    responses.write([.metadata([:])])
    for k in 1...max(1, count) {
      _ = await waitUntil(timeout: .seconds(60), every: .milliseconds(2)) { probe.gate.withLock({ $0 }) >= k }
      responses.write([.message(Array("m\(k)".utf8))])
    }
    return []
  }
  @Sendable func waitForever() async throws {
    probe.started.withLock { $0 += 1 }
    do { try await Task.sleep(for: .seconds(3600)) } catch {
      probe.cancelled.withLock { $0 += 1 }
      throw error
    }
  }
  router.registerStreaming(method: "/test.v1.Stream/Hang") { _, responses, _ in
    responses.write([.metadata([:]), .message(Array("first".utf8))])
    try await waitForever()
    return []
  }
  router.registerStreaming(method: "/test.v1.Stream/Flood") { _, responses, _ in
    // Writes as fast as it can (writes never wait) until it is cancelled.
    responses.write([.metadata([:])])
    while !Task.isCancelled {
      responses.write([.message([UInt8](repeating: UInt8(ascii: "x"), count: 100))])
      await Task.yield()
    }
    probe.cancelled.withLock { $0 += 1 }
    return []
  }
  router.registerStreaming(method: "/test.v1.Stream/Paced") { _, responses, _ in
    // Writes 1 KiB messages until it is cancelled, waiting for room after each (as WatchEvents).
    responses.write([.metadata([:])])
    while !Task.isCancelled {
      responses.write([.message([UInt8](repeating: UInt8(ascii: "p"), count: 1024))])
      probe.written.withLock { $0 += 1 }
      await responses.waitForRoom()
    }
    probe.cancelled.withLock { $0 += 1 }
    return []
  }
  router.registerUnaryBytes(method: "/test.v1.Stream/Sleep") { _, _ in
    try await waitForever()
    return []
  }
  router.registerUnaryBytes(method: "/test.v1.Echo/Read") { request, _ in request }
  return router
}

private func enveloped(_ text: String) -> [UInt8] {
  let bytes = Array(text.utf8)
  return [0, 0, 0, 0, UInt8(bytes.count)] + bytes
}

private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// A gateway on a real HTTP/1.1 listener, as substatusd installs it.
private func withGateway(
  clock: any ServiceClock = SystemClock(), allowsGET: (@Sendable (String) -> Bool)? = nil,
  _ body: (HTTPServer, Probe) async throws -> Void
) async throws {
  let probe = Probe()
  var configuration = RPCWebGateway.Configuration()
  configuration.clock = clock
  if let allowsGET { configuration.allowsGET = allowsGET }
  let gateway = RPCWebGateway(router: testRouter(probe), interceptors: [], configuration: configuration)
  var routes = HTTPRouter()
  routes.add("GET", "/healthz") { _ in .text("ok") }
  routes.fallback = { request in await gateway.respond(to: request) }
  var serverConfiguration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
  serverConfiguration.bodyLimit = { gateway.bodyLimit(for: $0) }
  serverConfiguration.clock = clock
  let server = try HTTPServer(configuration: serverConfiguration, router: routes)
  do { try await body(server, probe) } catch {
    await server.stop(gracePeriod: .milliseconds(100))
    throw error
  }
  await server.stop(gracePeriod: .milliseconds(500))
}

@Suite("RPCWebGateway")
struct RPCWebGatewayTests {
  @Test(arguments: [
    ("application/connect+proto", "FRAME 2 {}"), ("application/grpc-web+proto", "FRAME 128 grpc-status: 0"),
  ])
  func aServerStreamArrivesMessageByMessage(contentType: String, end: String) async throws {
    try await withGateway { server, probe in
      let client = try ScriptedProcess(
        python, [fixture("stream_client.py"), String(server.port), "/test.v1.Stream/Count", contentType, hex(enveloped("3"))])
      defer { client.stop() }
      probe.gate.withLock { $0 = 1 }
      #expect(await client.nextLine() == "HEAD 200 \(contentType)")
      // Each message arrives while the handler still waits to write the next one.
      #expect(await client.nextLine() == "FRAME 0 m1")
      probe.gate.withLock { $0 = 2 }
      #expect(await client.nextLine() == "FRAME 0 m2")
      probe.gate.withLock { $0 = 3 }
      #expect(await client.nextLine() == "FRAME 0 m3")
      #expect(await client.nextLine() == end)
      #expect(await client.nextLine() == "END")
    }
  }

  @Test func aClientLeavingAStreamCancelsItsHandler() async throws {
    try await withGateway { server, probe in
      let client = try ScriptedProcess(
        python,
        [fixture("stream_client.py"), String(server.port), "/test.v1.Stream/Hang", "application/connect+json",
         hex(enveloped("{}"))])
      defer { client.stop() }
      #expect(await client.nextLine() == "HEAD 200 application/connect+json")
      #expect(await client.nextLine() == "FRAME 0 first")
      #expect(await waitUntil { probe.started.withLock { $0 } == 1 })
      #expect(await client.ask("close") == "CLOSED")
      #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 })
      #expect(await waitUntil { server.openConnections == 0 })
    }
  }

  @Test func aReaderSlowerThanTheStreamEndsItWithResourceExhausted() async throws {
    var configuration = RPCWebGateway.Configuration()
    configuration.maxPendingResponseBytes = 4096
    let probe = Probe()
    let gateway = RPCWebGateway(router: testRouter(probe), interceptors: [], configuration: configuration)
    var routes = HTTPRouter()
    routes.fallback = { request in await gateway.respond(to: request) }
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: routes)
    let client = try ScriptedProcess(
      python,
      [fixture("stream_client.py"), String(server.port), "/test.v1.Stream/Flood", "application/grpc-web+proto",
       hex(enveloped("")), "quiet"])
    defer { client.stop() }
    #expect(await client.nextLine() == "HEAD 200 application/grpc-web+proto")
    let count = await client.nextLine() ?? ""
    #expect(count.hasPrefix("COUNT "))
    let end = await client.nextLine() ?? ""
    #expect(end.hasPrefix("FRAME 128 grpc-status: 8"), "\(end)")
    #expect(end.contains("too slowly"))
    #expect(await client.nextLine() == "END")
    #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 })
    await server.stop()
  }

  @Test func aPacedStreamWaitsForAReaderThatPausesInsteadOfEndingIt() async throws {
    // The default 4 MiB limit would end an unpaced stream; the paced handler waits at 64 KiB.
    try await withGateway { server, probe in
      let client = try ScriptedProcess(
        python,
        [fixture("stream_client.py"), String(server.port), "/test.v1.Stream/Paced", "application/connect+proto",
         hex(enveloped("")), "stall"])
      defer { client.stop() }
      #expect(await client.nextLine() == "HEAD 200 application/connect+proto")
      // It writes until the socket buffers and the gateway's 64 KiB are full, then waits (up to
      // 30 s to get there: a loaded 2-core CI machine fills megabytes of loopback buffers slowly).
      var previous = -1
      var settled = false
      for _ in 0..<150 where !settled {
        try await Task.sleep(for: .milliseconds(200))
        let now = probe.written.withLock { $0 }
        settled = now > 64 && now == previous
        previous = now
      }
      #expect(settled, "the handler kept writing to a client that reads nothing: \(previous) messages")
      #expect(previous < 32 << 10, "more than 32 MiB written: \(previous) messages of 1 KiB")
      #expect(probe.cancelled.withLock { $0 } == 0, "the paused stream is not ended")
      #expect(await client.ask("close") == "CLOSED")
      #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 })
    }
  }

  @Test func aStreamWhoseWritesFailCancelsItsHandlerThoughItsTaskIsNotCancelled() async throws {
    // The listener ends a stream whose client went away by failing its writes and cancelling the
    // producer's task; the two are not atomic, and under load the producer can see the failed
    // write first and return before its task is cancelled. Here the writer fails the write and
    // no task is ever cancelled: the call must still end, and its paced handler (waiting for room)
    // be cancelled.
    let probe = Probe()
    let gateway = RPCWebGateway(router: testRouter(probe), interceptors: [])
    let request = HTTPRequest(
      method: "POST", path: "/test.v1.Stream/Paced", headers: ["Content-Type": "application/connect+proto"],
      body: enveloped(""))
    let response = await gateway.respond(to: request)
    let streamed = try #require(response.streamedBody)
    let writer = HTTPBodyWriter(maxPendingBytes: 4096)  // no connection takes its bytes
    let producer = Task { try await streamed.produce(writer) }
    // The handler fills the gateway's 64 KiB and waits for room; the producer waits on the writer.
    #expect(await waitUntil { probe.written.withLock { $0 } > 64 && writer.pendingBytes > 4096 })
    #expect(probe.cancelled.withLock { $0 } == 0)
    writer.close()
    #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 }, "the handler outlived its stream")
    await #expect(throws: CancellationError.self) { try await producer.value }
  }

  @Test func aClientLeavingDuringAUnaryCallCancelsItsHandler() async throws {
    try await withGateway { server, probe in
      let client = try RawConnection(port: server.port)
      client.send(
        "POST /test.v1.Stream/Sleep HTTP/1.1\r\nHost: test\r\nContent-Type: application/proto\r\n"
          + "Content-Length: 0\r\n\r\n")
      #expect(await waitUntil { probe.started.withLock { $0 } == 1 })
      client.close()
      #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 }, "the handler outlived its client")
      #expect(await waitUntil { server.openConnections == 0 })
    }
  }

  @Test func stoppingTheServerEndsAStreamWithUnavailable() async throws {
    let probe = Probe()
    let gateway = RPCWebGateway(router: testRouter(probe), interceptors: [])
    var routes = HTTPRouter()
    routes.fallback = { request in await gateway.respond(to: request) }
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: routes)
    let client = try ScriptedProcess(
      python,
      [fixture("stream_client.py"), String(server.port), "/test.v1.Stream/Hang", "application/connect+json",
       hex(enveloped("{}"))])
    defer { client.stop() }
    #expect(await client.nextLine() == "HEAD 200 application/connect+json")
    #expect(await client.nextLine() == "FRAME 0 first")
    await server.stop(gracePeriod: .milliseconds(100))
    let end = await client.nextLine() ?? ""
    #expect(end.hasPrefix("FRAME 2 ") && end.contains(#""code":"unavailable""#), "\(end)")
    #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 })
  }

  @Test(arguments: [
    ("application/json", "Connect-Timeout-Ms", "250"), ("application/grpc-web+proto", "grpc-timeout", "250m"),
  ])
  func theDeadlineEndsTheCallAndCancelsTheHandler(contentType: String, field: String, value: String) async throws {
    let clock = ManualClock()
    try await withGateway(clock: clock) { server, probe in
      var request = URLRequest(url: URL(string: "http://\(server.address)/test.v1.Stream/Sleep")!)
      request.httpMethod = "POST"
      request.setValue(contentType, forHTTPHeaderField: "Content-Type")
      request.setValue(value, forHTTPHeaderField: field)
      request.httpBody = contentType == "application/json" ? Data("{}".utf8) : Data(enveloped(""))
      let call = Task { try await URLSession.shared.data(for: request) }
      #expect(await waitUntil { probe.started.withLock { $0 } == 1 })
      #expect(await clock.waitForSleepers(1))
      clock.advance(by: .milliseconds(250))
      let (data, response) = try await call.value
      let http = try #require(response as? HTTPURLResponse)
      if contentType == "application/json" {
        #expect(http.statusCode == 504)
        #expect(String(decoding: data, as: UTF8.self).contains(#""code":"deadline_exceeded""#))
      } else {
        #expect(http.statusCode == 200)
        #expect(http.value(forHTTPHeaderField: "grpc-status") == "4")
      }
      #expect(await waitUntil { probe.cancelled.withLock { $0 } == 1 })
    }
  }

  @Test func routesOfTheListenerKeepPrecedenceAndOtherPathsAre404() async throws {
    try await withGateway { server, _ in
      let (health, _) = try await URLSession.shared.data(from: URL(string: "http://\(server.address)/healthz")!)
      #expect(String(decoding: health, as: UTF8.self) == "ok")
      let (_, missing) = try await URLSession.shared.data(from: URL(string: "http://\(server.address)/nothing/here")!)
      #expect((missing as? HTTPURLResponse)?.statusCode == 404)
      var get = URLRequest(url: URL(string: "http://\(server.address)/test.v1.Stream/Sleep")!)
      get.httpMethod = "GET"
      let (_, wrongMethod) = try await URLSession.shared.data(for: get)
      #expect((wrongMethod as? HTTPURLResponse)?.statusCode == 405)
    }
  }

  /// GETs `path?query` and answers (status, content-type, allow, body).
  func get(_ server: HTTPServer, _ pathAndQuery: String) async throws -> (Int, String?, String?, String) {
    let (data, response) = try await URLSession.shared.data(from: URL(string: "http://\(server.address)\(pathAndQuery)")!)
    let http = try #require(response as? HTTPURLResponse)
    return (
      http.statusCode, http.value(forHTTPHeaderField: "content-type"), http.value(forHTTPHeaderField: "allow"),
      String(decoding: data, as: UTF8.self)
    )
  }

  @Test("Connect's GET form calls a method that allows it; others are 405, a bad query 400 or 415")
  func connectGet() async throws {
    try await withGateway(allowsGET: { $0 == "/test.v1.Echo/Read" }) { server, _ in
      // {"a":"b c"} in URL-safe base64 without padding, as connect clients send it.
      let encoded = "eyJhIjoiYiBjIn0"
      let viaBase64 = try await get(server, "/test.v1.Echo/Read?connect=v1&encoding=json&base64=1&message=\(encoded)")
      #expect(viaBase64.0 == 200)
      #expect(viaBase64.1 == "application/json")
      #expect(viaBase64.3 == #"{"a":"b c"}"#)
      let plain = try await get(server, "/test.v1.Echo/Read?encoding=json&message=%7B%22a%22%3A%22b%20c%22%7D")
      #expect(plain.0 == 200 && plain.3 == #"{"a":"b c"}"#)
      let proto = try await get(server, "/test.v1.Echo/Read?encoding=proto&base64=1&message=CgF4")
      #expect(proto.0 == 200 && proto.1 == "application/proto" && Array(proto.3.utf8) == [0x0a, 0x01, 0x78])
      // A method with side effects: 405, POST allowed.
      let refused = try await get(server, "/test.v1.Stream/Sleep?encoding=json&message=%7B%7D")
      #expect(refused.0 == 405 && refused.2 == "POST")
      #expect(refused.3.contains("NO_SIDE_EFFECTS"))
      #expect(try await get(server, "/test.v1.Echo/Read?message=%7B%7D").0 == 400)
      #expect(try await get(server, "/test.v1.Echo/Read?encoding=json").0 == 400)
      #expect(try await get(server, "/test.v1.Echo/Read?encoding=json&base64=1&message=*").0 == 400)
      #expect(try await get(server, "/test.v1.Echo/Read?connect=v2&encoding=json&message=%7B%7D").0 == 400)
      #expect(try await get(server, "/test.v1.Echo/Read?encoding=xml&message=%7B%7D").0 == 415)
    }
  }

  @Test("by default only methods that declare NO_SIDE_EFFECTS allow GET")
  func connectGetDefault() {
    let allows = RPCWebGateway.Configuration().allowsGET
    #expect(allows("/substatus.v1.StatusService/GetStatus"))
    #expect(allows("/substatus.v1.AdminService/GetCallerApiKey"))
    #expect(!allows("/substatus.v1.IngestService/SubmitReceipt"))  // IDEMPOTENT, not safe
    #expect(!allows("/substatus.v1.TenantService/CreateTenant"))
    #expect(!allows("/test.v1.Echo/Read"))
  }

  @Test(arguments: ["/a.B/C", "/pkg.v1.Service/Method"])
  func rpcPaths(path: String) { #expect(RPCWebGateway.isRPCPath(path)) }

  @Test(arguments: ["/", "/healthz", "/a/b", "/a.B/", "/a.B/C/D", "a.B/C", "/v1/apps/x/apple/notifications"])
  func notRPCPaths(path: String) { #expect(!RPCWebGateway.isRPCPath(path)) }
}
