import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import SubstatusClock
import Synchronization
import Testing

/// The client's connection management on the shared pump: the connect deadline and the drain
/// after the server's GOAWAY, on manual clocks.
@Suite struct ClientConnectionTests {
  @Test func handshakeThatNeverCompletesFailsAtTheConnectTimeout() async throws {
    // A TCP listener that never answers: the kernel completes the connection, the ClientHello
    // goes unanswered.
    let silent = try await LineProcess(
      python,
      [
        "-c",
        "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8); "
          + "print(s.getsockname()[1], flush=True); sys.stdin.read()",
      ])
    let port = try #require(Int(silent.firstLine))
    let clock = ManualClock()
    let client = try makeClient(port: port) {
      $0.clock = clock
      $0.connectTimeout = .seconds(20)
      $0.tls = ClientTLSConfiguration()
    }
    defer { client.close() }
    let failure = Mutex<RPCError?>(nil)
    let attempt = Task {
      do throws(RPCError) {
        _ = try await call(client, "Echo", "x", timeout: nil)
      } catch {
        failure.withLock { $0 = error }
      }
    }
    #expect(await advance(clock, by: .seconds(1)) { failure.withLock { $0 != nil } })
    await attempt.value
    let error = failure.withLock { $0 }
    #expect(error?.code == .unavailable)
    #expect(error?.message.contains("timed out") == true, "\(String(describing: error))")
    #expect(clock.monotonicNow >= .seconds(20) && clock.monotonicNow <= .seconds(22), "\(clock.monotonicNow)")
    _ = await silent.stop()
  }

  @Test func goawayMovesTheNextCallToANewConnection() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.maxConnectionIdle = nil
      $0.maxConnectionAge = .seconds(600)
      $0.maxConnectionAgeGrace = .seconds(30)
    }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      #expect(try await call(client, "Echo", "first").message == Array("first".utf8))
      clock.advance(by: .seconds(600))
      #expect(await waitUntil { server.transport.metrics.ageGoaways == 1 })
      // The client closes the drained connection itself, before any grace ends.
      #expect(await waitForNoConnections(port: server.port, timeout: .seconds(5)))
      #expect(try await call(client, "Echo", "second").message == Array("second".utf8))
      #expect(server.transport.metrics.graceExpirations == 0)
    }
  }
}
