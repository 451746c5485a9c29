import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import SubstatusClock
import Synchronization
import Testing

/// Keepalive, idle and age limits, the write timeout, the request buffer budget, the connection
/// limit, and graceful shutdown, over real sockets: the pump carries out what the connection state
/// machine decides (its rules are `ConnectionStateMachineTests`'). The limits run on a manual
/// clock: a test moves it, nothing waits for a timeout to pass.
@Suite struct ConnectionManagementTests {
  func runAttack(_ name: String, port: Int) async throws {
    let result = try await runProcess(python, [fixture("h2_attacks.py"), String(port), name])
    #expect(result.status == 0, "\(name):\n\(result.stdout)\n\(result.stderr)")
    #expect(result.stdout.contains("DONE \(name)"))
  }

  /// Runs the attack `name` until it says it is ready, then moves `clock` on in steps of `step`
  /// until the server holds no connection; returns the attack's exit status.
  func runAttack(
    _ name: String, port: Int, clock: ManualClock, step: Duration, _ arguments: [String] = []
  ) async throws -> Int32 {
    let attack = try await LineProcess(python, [fixture("h2_attacks.py"), String(port), name] + arguments)
    #expect(attack.firstLine.hasPrefix("READY"), "\(name): \(attack.firstLine)")
    #expect(await advance(clock, by: step) { serverConnectionCount(port: port) == 0 })
    return await attack.stop()
  }

  @Test func unansweredKeepalivePingClosesConnection() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.keepaliveTime = .seconds(60)
      $0.keepaliveTimeout = .seconds(20)
    }) { server in
      let status = try await runAttack("no_ping_ack", port: server.port, clock: clock, step: .seconds(5))
      #expect(status == 0)
      #expect(server.transport.metrics.keepaliveTimeouts == 1)
    }
  }

  @Test func idleConnectionGetsGoawayThenIsClosed() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.maxConnectionIdle = .seconds(300)
    }) { server in
      let attack = try await LineProcess(python, [fixture("h2_attacks.py"), String(server.port), "expect_goaway"])
      #expect(attack.firstLine == "READY")
      clock.advance(by: .seconds(299))
      try await Task.sleep(for: .milliseconds(50))
      #expect(serverConnectionCount(port: server.port) == 1, "closed before the idle timeout")
      clock.advance(by: .seconds(1))
      #expect(await waitForNoConnections(port: server.port))
      #expect(await attack.stop() == 0, "no GOAWAY before the close")
      #expect(server.transport.metrics.idleGoaways == 1)
    }
  }

  @Test func oldConnectionGetsGoaway() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.maxConnectionIdle = nil
      $0.maxConnectionAge = .seconds(600)
      $0.maxConnectionAgeGrace = .seconds(30)
    }) { server in
      let status = try await runAttack("expect_goaway", port: server.port, clock: clock, step: .seconds(60))
      #expect(status == 0)
      #expect(server.transport.metrics.ageGoaways == 1)
    }
  }

  @Test func readerThatNeverOpensItsWindowIsClosedAfterTheWriteTimeout() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.writeTimeout = .seconds(30)
    }) { server in
      let attack = try await LineProcess(python, [fixture("h2_attacks.py"), String(server.port), "closed_window"])
      #expect(attack.firstLine == "READY")
      #expect(await waitUntil { server.transport.metrics.writeStalledConnections == 1 })
      clock.advance(by: .seconds(29))
      try await Task.sleep(for: .milliseconds(50))
      #expect(serverConnectionCount(port: server.port) == 1, "closed before the write timeout")
      clock.advance(by: .seconds(1))
      #expect(await waitForNoConnections(port: server.port))
      #expect(await attack.stop() == 0)
      let metrics = server.transport.metrics
      #expect(metrics.writeTimeouts == 1)
      #expect(metrics.writeStalledConnections == 0)
    }
  }

  @Test func readerThatStopsReadingTheSocketIsClosedAfterTheWriteTimeout() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.writeTimeout = .seconds(30)
    }) { server in
      // 16 MiB asked for with wide windows and never read: the socket fills up.
      let attack = try await LineProcess(python, [fixture("h2_attacks.py"), String(server.port), "slow_reader"])
      #expect(attack.firstLine == "READY")
      #expect(await waitUntil { server.transport.metrics.writeStalledConnections == 1 })
      clock.advance(by: .seconds(30))
      #expect(await waitForNoConnections(port: server.port))
      #expect(await attack.stop() == 0)
      #expect(server.transport.metrics.writeTimeouts == 1)
    }
  }

  @Test func aPausedWatcherHoldsItsHandlerBackAndLosesOnlyItsStreamAfterTheWriteTimeout() async throws {
    // A handler that streams without end, paced by waitForRoom(), to a client that reads the
    // stream's first 64 KiB window and pauses while the connection's window is wide open.
    let clock = ManualClock()
    let written = Mutex(0)
    let ended = Mutex(false)
    try await withTestServer(
      configure: {
        $0.clock = clock
        $0.writeTimeout = .seconds(30)
      },
      router: { probe in
        var router = interopRouter(probe: probe)
        router.registerStreaming(method: "/interop.Test/Watch") { _, responses, _ in
          responses.write([.metadata([:])])
          while !Task.isCancelled {
            responses.write([.message([UInt8](repeating: 1, count: 1024))])
            written.withLock { $0 += 1 }
            await responses.waitForRoom()
          }
          ended.withLock { $0 = true }
          return []
        }
        return router
      }
    ) { server in
      let attack = try await LineProcess(python, [fixture("h2_attacks.py"), String(server.port), "paused_watcher"])
      #expect(attack.firstLine == "READY")
      try await Task.sleep(for: .milliseconds(300))
      let held = written.withLock { $0 }
      // The client's 64 KiB window, the 64 KiB bound and the message over it: about 130 of 1 KiB.
      #expect(held > 64 && held < 140, "messages written while the client pauses: \(held)")
      try await Task.sleep(for: .milliseconds(100))
      #expect(written.withLock { $0 } == held, "the handler waits while the stream has no room")
      #expect(server.transport.metrics.writeStalledConnections == 0, "one paused stream is not the connection's stall")
      clock.advance(by: .seconds(30))
      #expect(await waitUntil { ended.withLock { $0 } }, "the paused stream's handler is cancelled")
      #expect(await attack.stop() == 0, "the stream was reset and the connection served calls before and after")
      let metrics = server.transport.metrics
      #expect(metrics.streamWriteTimeouts == 1)
      #expect(metrics.writeTimeouts == 0)
    }
  }

  @Test func aResetStreamGivesBackItsUnsentReplyBytesAndItsCallSlot() async throws {
    try await withTestServer(configure: { $0.maxCallsInFlight = 8 }) { server in
      // A 1 MiB reply of which the client's window lets 64 KiB out; the rest waits in nghttp2.
      let attack = try await LineProcess(python, [fixture("h2_attacks.py"), String(server.port), "held_reply_reset"])
      #expect(attack.firstLine == "READY")
      let held = server.transport.metrics
      #expect(held.callsInFlight == 1)
      #expect(held.replyBytesInFlight > 900 << 10, "the unsent part of the reply is counted: \(held.replyBytesInFlight)")
      try attack.child.writeLine("reset")
      #expect(await waitUntil { server.transport.metrics.replyBytesInFlight == 0 }, "the reset stream's bytes are released")
      #expect(server.transport.metrics.callsInFlight == 0)
      #expect(serverConnectionCount(port: server.port) == 1, "released by the reset, not by a close")
      #expect(await attack.stop() == 0)
    }
  }

  @Test func partialMessagesOnManyStreamsHoldNoMoreThanTheBudget() async throws {
    // 256 streams announce 256 KiB messages and send all but the last byte (64 MiB in all): the
    // connection holds one of them, every other stream ends with RESOURCE_EXHAUSTED.
    let budget = 512 << 10
    try await withTestServer(configure: {
      $0.maxReceiveMessageSize = 256 << 10
      $0.maxConnectionBufferedRequestBytes = budget
    }) { server in
      let attack = try await LineProcess(
        python, [fixture("h2_attacks.py"), String(server.port), "partial_messages", String(256 << 10)])
      #expect(attack.firstLine == "READY 8=255", "statuses by count: \(attack.firstLine)")
      let held = server.transport.metrics
      #expect(held.bufferedRequestBytes == (256 << 10) + 4, "the transport's own account of the buffered bytes")
      #expect(held.bufferedRequestBytes <= budget)
      #expect(held.bufferBudgetResets == 255)
      let text = held.prometheusText()
      #expect(text.contains("substatus_grpc_buffer_budget_resets_total 255\n"), "\(text)")
      #expect(text.contains("substatus_grpc_buffered_request_bytes \((256 << 10) + 4)\n"), "\(text)")
      #expect(await attack.stop() == 0)
      #expect(await waitForNoConnections(port: server.port))
      #expect(server.transport.metrics.bufferedRequestBytes == 0, "the buffers are freed with the connection")
      try await runGRPCIOCase("unary", port: server.port)
    }
  }

  @Test func newStreamsAreRefusedWhileTheConnectionBufferIsFull() async throws {
    // The budget is exactly one 256 KiB message and its prefix: the first stream fills it.
    try await withTestServer(configure: {
      $0.maxReceiveMessageSize = 256 << 10
      $0.maxConnectionBufferedRequestBytes = (256 << 10) + 4
    }) { server in
      let attack = try await LineProcess(
        python, [fixture("h2_attacks.py"), String(server.port), "partial_messages", String(256 << 10)])
      #expect(attack.firstLine == "READY reset7=255", "statuses by count: \(attack.firstLine)")
      #expect(server.transport.metrics.refusedStreams == 255)
      #expect(await attack.stop() == 0)
    }
  }

  @Test func transportWideBudgetBoundsAllConnections() async throws {
    try await withTestServer(configure: {
      $0.maxReceiveMessageSize = 256 << 10
      $0.maxConnectionBufferedRequestBytes = nil
      $0.maxBufferedRequestBytes = 1 << 20
    }) { server in
      let attack = try await LineProcess(
        python, [fixture("h2_attacks.py"), String(server.port), "partial_messages", String(256 << 10)])
      #expect(attack.firstLine == "READY 8=253", "statuses by count: \(attack.firstLine)")
      #expect(server.transport.metrics.bufferedRequestBytes == 3 * ((256 << 10) + 4))
      #expect(await attack.stop() == 0)
    }
  }

  @Test func connectionCapEvictsTheLongestIdleConnection() async throws {
    try await withTestServer(configure: { $0.maxConnections = 2 }) { server in
      try await runAttack("connection_limit", port: server.port)
      #expect(await waitForNoConnections(port: server.port))
      try await runGRPCIOCase("unary", port: server.port)
    }
  }

  @Test(arguments: [1, 2])
  func connectionCapWithBusyConnectionsStopsAcceptingUntilOneCloses(threads: Int) async throws {
    try await withTestServer(threads: threads, configure: { $0.maxConnections = 2 }) { server in
      try await runAttack("connection_limit_busy", port: server.port)
      #expect(await waitForNoConnections(port: server.port))
      try await runGRPCIOCase("unary", port: server.port)
    }
  }

  @Test func gracefulShutdownLetsInFlightCallsFinish() async throws {
    var configuration = HTTP2ServerTransport.Configuration(host: "127.0.0.1", port: 0)
    configuration.threads = 1
    let transport = try HTTP2ServerTransport(configuration: configuration)
    let probe = ServiceProbe()
    let server = RPCServer(transport: transport, router: interopRouter(probe: probe))
    let running = Task { try await server.run() }
    let client = Task { try await runProcess(python, [fixture("grpcio_client.py"), String(transport.port), "inflight"]) }
    #expect(await probe.waitUntil { $0.sleepsStarted.withLock { $0 } == 1 })
    server.beginGracefulShutdown()
    let result = try await client.value
    #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
    try await running.value
    #expect(probe.sleepsCompleted.withLock { $0 } == 1)
    #expect(serverConnectionCount(port: transport.port) == 0)
    // The listening socket is closed: a new connection is refused.
    let refused = try await runProcess(
      python, ["-c", "import socket; socket.create_connection(('127.0.0.1', \(transport.port)), timeout=5)"])
    #expect(refused.status != 0)
    #expect(refused.stderr.contains("ConnectionRefusedError"))
  }

  @Test func shutdownBeforeListenReturnsAtOnce() async throws {
    let transport = try HTTP2ServerTransport(configuration: .init(host: "127.0.0.1", port: 0))
    transport.beginGracefulShutdown()
    try await transport.listen { _ in }
  }

  @Test func unresolvableHostFailsPrecisely() throws {
    let error = #expect(throws: SocketError.self) {
      try HTTP2ServerTransport(configuration: .init(host: "256.1.1.1", port: 0))
    }
    #expect(error?.description.contains("256.1.1.1") == true)
  }
}
