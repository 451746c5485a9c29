import HTTPServer
import HTTPTestSupport
import Synchronization
import Testing

/// What the slow handler did.
private final class HandlerProbe: Sendable {
  let started = Mutex(0)
  let cancelled = Mutex(0)
}

/// A client that closes its connection, whatever the request's state, leaves no handler running
/// and no connection open. (Streams: `StreamedBodyTests`; the gateway's calls: `RPCWebGatewayTests`.)
@Suite("HTTPServer clients that leave")
struct ClientGoneTests {
  /// `/slow` waits up to an hour (until cancelled); `/fast` answers at once.
  private func server(_ probe: HandlerProbe) throws -> HTTPServer {
    try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
      guard request.path == "/slow" else { return .text("fast") }
      probe.started.withLock { $0 += 1 }
      do { try await Task.sleep(for: .seconds(3600)) } catch { probe.cancelled.withLock { $0 += 1 } }
      return .text("late")
    }
  }

  @Test(arguments: [false, true])
  func aClientLeavingWhileItsHandlerRunsCancelsTheHandler(reset: Bool) async throws {
    let probe = HandlerProbe()
    let server = try server(probe)
    let client = try RawConnection(port: server.port)
    client.send("GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
    #expect(await waitUntil { probe.started.withLock { $0 } == 1 })
    // The connection is suspended while the handler runs, out of libmicrohttpd's polling.
    client.close(reset: reset)
    #expect(await waitUntil(timeout: .seconds(5)) { probe.cancelled.withLock { $0 } == 1 }, "the handler outlived its client")
    #expect(await waitUntil(timeout: .seconds(5)) { server.openConnections == 0 })
    await server.stop()
  }

  @Test func anIdleKeepAliveConnectionClosesWithItsClient() async throws {
    let probe = HandlerProbe()
    let server = try server(probe)
    let client = try RawConnection(port: server.port)
    client.send("GET /fast HTTP/1.1\r\nHost: test\r\n\r\n")
    var answer = ""
    while !answer.hasSuffix("fast") {
      let bytes = await client.read()
      if bytes.isEmpty { break }
      answer += String(decoding: bytes, as: UTF8.self)
    }
    #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
    #expect(server.openConnections == 1, "the connection is kept alive")
    client.close()
    #expect(await waitUntil(timeout: .seconds(5)) { server.openConnections == 0 })
    await server.stop()
  }
}
