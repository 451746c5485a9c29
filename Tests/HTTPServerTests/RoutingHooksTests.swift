import Foundation
import HTTPTestSupport
import Synchronization
import Testing

import HTTPServer

/// The hooks another protocol on the same listener uses: a router's fallback below every route,
/// a body limit decided per request, and the client's address.
@Suite("HTTPServer routing hooks")
struct RoutingHooksTests {
  @Test func theFallbackAnswersOnlyPathsNoRouteMatches() async throws {
    var router = HTTPRouter()
    router.add("GET", "/healthz") { _ in .text("ok") }
    router.fallback = { request in .text("fallback \(request.method) \(request.path)") }
    #expect(await router.respond(to: HTTPRequest(method: "GET", path: "/healthz")).body == Array("ok".utf8))
    #expect(await router.respond(to: HTTPRequest(method: "POST", path: "/healthz")).status == 405)
    let other = await router.respond(to: HTTPRequest(method: "POST", path: "/pkg.Service/Method"))
    #expect(other.body == Array("fallback POST /pkg.Service/Method".utf8))
  }

  @Test func aBodyLimitPerRequestAnswersItsOwnResponse() async throws {
    var configuration = HTTPServerConfiguration(maxBodySize: 10)
    configuration.bodyLimit = { request in
      guard request.path.hasPrefix("/big") else { return nil }
      return HTTPBodyLimit(maxBytes: 100, response: .text("too big for \(request.path)", status: 429))
    }
    let server = try HTTPServer(configuration: configuration) { request in .text("\(request.body.count)") }
    #expect(try await send("POST", server, "/big", body: Data(count: 50)).text == "50")
    let over = try await send("POST", server, "/big", body: Data(count: 101))
    #expect(over.status == 429)
    #expect(over.text == "too big for /big")
    #expect(try await send("POST", server, "/small", body: Data(count: 11)).status == 413)
    // Chunked: the limit applies as the body arrives.
    let chunked = try await rawExchange(
      port: server.port,
      Array("POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n80\r\n".utf8)
        + [UInt8](repeating: 0x61, count: 128) + Array("\r\n0\r\n\r\n".utf8))
    #expect(chunked.hasPrefix("HTTP/1.1 429"))
    await server.stop()
  }

  @Test func aRequestKnowsItsPeer() async throws {
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in .text(request.peer) }
    let peer = try await send("GET", server, "/").text
    #expect(peer.hasPrefix("ipv4:127.0.0.1:"))
    #expect(Int(peer.split(separator: ":").last ?? "") ?? 0 > 0)
    await server.stop()
  }

  @Test func requestBytesOverTheServersBufferGetTheBusyAnswerUntilTheyAreFreed() async throws {
    var configuration = HTTPServerConfiguration(maxBodySize: 1000)
    configuration.maxBufferedBodyBytes = 1500
    let release = Mutex(false)
    let server = try HTTPServer(configuration: configuration) { request in
      if request.path == "/hold" {
        _ = await waitUntil(timeout: .seconds(60), every: .milliseconds(2)) { release.withLock { $0 } }
      }
      return .text("\(request.body.count)")
    }
    let held = Task { try await send("POST", server, "/hold", body: Data(count: 1000)) }
    #expect(await waitUntil { server.prometheusText().contains("substatus_http_buffered_request_bytes 1000\n") })
    let busy = try await send("POST", server, "/other", body: Data(count: 600))
    #expect(busy.status == 503)
    #expect(busy.headers["retry-after"] == "1")
    #expect(server.prometheusText().contains("substatus_http_request_buffer_refusals_total 1\n"))
    #expect(try await send("POST", server, "/other", body: Data(count: 400)).text == "400")
    release.withLock { $0 = true }
    #expect(try await held.value.text == "1000")
    #expect(await waitUntil { server.prometheusText().contains("substatus_http_buffered_request_bytes 0\n") })
    #expect(try await send("POST", server, "/other", body: Data(count: 600)).text == "600")
    await server.stop()
  }
}
