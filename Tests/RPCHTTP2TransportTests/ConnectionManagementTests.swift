import Foundation
import RPCCore
import RPCHTTP2Transport
import Testing

/// Keepalive, idle and age limits, the connection limit, and graceful shutdown.
@Suite struct ConnectionManagementTests {
  func runAttack(_ name: String, port: Int) async throws {
    let result = try await runProcess(python, [fixture("h2_attacks.py"), String(port), name])
    #expect(result.status == 0, "\(name):\n\(result.stdout)\n\(result.stderr)")
    #expect(result.stdout.contains("DONE \(name)"))
  }

  @Test func unansweredKeepalivePingClosesConnection() async throws {
    try await withTestServer(configure: {
      $0.keepaliveTime = .milliseconds(200)
      $0.keepaliveTimeout = .milliseconds(200)
    }) { server in
      try await runAttack("no_ping_ack", port: server.port)
      #expect(await waitForNoConnections(port: server.port))
    }
  }

  @Test func idleConnectionGetsGoaway() async throws {
    try await withTestServer(configure: { $0.maxConnectionIdle = .milliseconds(300) }) { server in
      try await runAttack("expect_goaway", port: server.port)
    }
  }

  @Test func oldConnectionGetsGoaway() async throws {
    try await withTestServer(configure: {
      $0.maxConnectionAge = .milliseconds(300)
      $0.maxConnectionAgeGrace = .milliseconds(200)
    }) { server in
      try await runAttack("expect_goaway", port: server.port)
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
