import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import Testing

/// A Python grpcio server child process; stops when its stdin closes.
final class GRPCIOServerProcess {
  let child: LineProcess
  let port: Int

  init(script: String = "grpcio_server.py", arguments: [String] = []) async throws {
    child = try await LineProcess(python, [fixture(script)] + arguments)
    guard child.firstLine.hasPrefix("PORT "), let port = Int(child.firstLine.dropFirst(5)) else {
      _ = await child.stop()
      throw SocketTestError(description: "grpcio server did not start: \(child.firstLine)")
    }
    self.port = port
  }

  func stop() async { _ = await child.stop() }
}

func makeClient(port: Int, configure: (inout HTTP2ClientTransport.Configuration) -> Void = { _ in }) throws
  -> HTTP2ClientTransport
{
  var configuration = HTTP2ClientTransport.Configuration(host: "127.0.0.1", port: port)
  configure(&configuration)
  return try HTTP2ClientTransport(configuration: configuration)
}

func call(
  _ client: HTTP2ClientTransport, _ method: String, _ payload: String, metadata: Metadata = [:],
  timeout: Duration? = .seconds(10)
) async throws(RPCError) -> ClientResponse {
  try await client.unary(
    method: "/interop.Test/\(method)", request: Array(payload.utf8), metadata: metadata,
    options: CallOptions(timeout: timeout))
}

func expectCode(_ code: RPCError.Code, _ body: () async throws -> Void) async -> RPCError? {
  do {
    try await body()
    Issue.record("expected \(code), got OK")
  } catch let error as RPCError {
    #expect(error.code == code, "\(error)")
    return error
  } catch {
    Issue.record("unexpected \(error)")
  }
  return nil
}

/// Runs `body` with a client connected to a fresh grpcio server, then stops both.
func withGRPCIOServer(_ body: (HTTP2ClientTransport) async throws -> Void) async throws {
  let server = try await GRPCIOServerProcess()
  let client = try makeClient(port: server.port)
  do {
    try await body(client)
  } catch {
    client.close()
    await server.stop()
    throw error
  }
  client.close()
  await server.stop()
}

/// Our client against a stock Python grpcio server.
@Suite struct ClientAgainstGRPCIOTests {
  @Test func unaryMetadataAndErrors() async throws {
    try await withGRPCIOServer { client in
      var metadata: Metadata = ["x-a": "1"]
      metadata.addBinary([0, 1, 255], forKey: "x-blob-bin")
      let reply = try await call(client, "Echo", "hello", metadata: metadata)
      #expect(reply.message == Array("hello".utf8))
      #expect(reply.initialMetadata.firstString(forKey: "x-a") == "1")
      #expect(reply.initialMetadata.firstBinary(forKey: "x-blob-bin") == [0, 1, 255])
      #expect(reply.trailingMetadata.firstString(forKey: "x-trailer") == "done")
      let error = await expectCode(.invalidArgument) { _ = try await call(client, "Fail", "") }
      #expect(error?.message == "bad input: ü 100%")
      #expect(error?.metadata.firstString(forKey: "x-reason") == "test")
      _ = await expectCode(.unimplemented) { _ = try await call(client, "Nope", "") }
    }
  }

  @Test func deadlineAndCancellation() async throws {
    try await withGRPCIOServer { client in
      let start = ContinuousClock.now
      _ = await expectCode(.deadlineExceeded) {
        _ = try await call(client, "Sleep", "5000", timeout: .milliseconds(200))
      }
      #expect(ContinuousClock.now - start < .seconds(4))
      let task = Task { try await call(client, "Sleep", "5000") }
      try await Task.sleep(for: .milliseconds(200))
      task.cancel()
      _ = await expectCode(.cancelled) { _ = try await task.value }
      // The connection is still good.
      #expect(try await call(client, "Echo", "again").message == Array("again".utf8))
    }
  }

  @Test func multiplexesConcurrentCalls() async throws {
    try await withGRPCIOServer { client in
      try await withThrowingTaskGroup(of: Void.self) { group in
        for i in 0..<200 {
          group.addTask {
            let reply = try await call(client, "Echo", "m\(i)")
            #expect(reply.message == Array("m\(i)".utf8))
          }
        }
        try await group.waitForAll()
      }
    }
  }
}

/// Our client against our server.
@Suite struct ClientAgainstOwnServerTests {
  @Test func unaryMetadataErrorsAndLargeMessages() async throws {
    try await withTestServer { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      let reply = try await call(client, "Echo", "hi", metadata: ["x-b": "2"])
      #expect(reply.message == Array("hi".utf8))
      #expect(reply.initialMetadata.firstString(forKey: "x-b") == "2")
      #expect(reply.trailingMetadata.firstString(forKey: "x-trailer") == "done")
      let error = await expectCode(.invalidArgument) { _ = try await call(client, "Fail", "") }
      #expect(error?.message == "bad input: ü 100% \n done")
      let big = try await call(client, "Big", String(1 << 20))
      #expect(big.message.count == 1 << 20)
      _ = await expectCode(.resourceExhausted) { _ = try await call(client, "Big", String((4 << 20) + 1)) }
      _ = await expectCode(.unimplemented) { _ = try await call(client, "Nope", "") }
    }
  }

  @Test func deadlineAndCancellationReachTheHandler() async throws {
    try await withTestServer { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      _ = await expectCode(.deadlineExceeded) {
        _ = try await call(client, "Sleep", "60000", timeout: .milliseconds(500))
      }
      // Under load the handler may not even have started before the deadline; if it did, it
      // was cancelled. Either way it never runs to completion.
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == $0.sleepsStarted.withLock { $0 } })
      let started = server.probe.sleepsStarted.withLock { $0 }
      let task = Task { try await call(client, "Sleep", "60000") }
      #expect(await server.probe.waitUntil { $0.sleepsStarted.withLock { $0 } == started + 1 })
      task.cancel()
      _ = await expectCode(.cancelled) { _ = try await task.value }
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == started + 1 })
      #expect(server.probe.sleepsCompleted.withLock { $0 } == 0)
    }
  }

  @Test func manyCallsShareOneConnection() async throws {
    try await withTestServer { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      try await withThrowingTaskGroup(of: Void.self) { group in
        for i in 0..<1000 {
          group.addTask {
            let reply = try await call(client, "Echo", "m\(i)")
            #expect(reply.message == Array("m\(i)".utf8))
          }
        }
        try await group.waitForAll()
      }
      #expect(serverConnectionCount(port: server.port) == 1)
    }
  }

  @Test func reconnectsWithBackoffAfterTheServerComesBack() async throws {
    // 127.0.0.2 (loopback too) so that no other test's server can take the port meanwhile.
    let host = "127.0.0.2"
    let port = try HTTP2ServerTransport(configuration: .init(host: host, port: 0)).port
    var configuration = HTTP2ClientTransport.Configuration(host: host, port: port)
    configuration.initialBackoff = .milliseconds(300)
    configuration.backoffJitter = 0
    let client = try HTTP2ClientTransport(configuration: configuration)
    defer { client.close() }
    let refused = await expectCode(.unavailable) { _ = try await call(client, "Echo", "x") }
    #expect(refused?.message.contains("\(host):\(port)") == true)
    // While backing off, calls fail fast with the same reason.
    let again = await expectCode(.unavailable) { _ = try await call(client, "Echo", "x") }
    #expect(again?.message == refused?.message)
    try await withTestServer(configure: { $0.host = host; $0.port = port }, router: nil) { _ in
      let reply = try await callUntilConnected(client)
      #expect(reply == Array("back".utf8))
    }
    // The server went away (graceful shutdown): calls fail, then recover when it is back.
    _ = await expectCode(.unavailable) { _ = try await call(client, "Echo", "gone") }
    try await withTestServer(configure: { $0.host = host; $0.port = port }, router: nil) { _ in
      let reply = try await callUntilConnected(client)
      #expect(reply == Array("back".utf8))
    }
  }

  /// Calls Echo until the client has reconnected (backoff has passed), for up to 30 s.
  func callUntilConnected(_ client: HTTP2ClientTransport) async throws -> [UInt8] {
    let end = ContinuousClock.now + .seconds(30)
    var lastError: RPCError?
    while ContinuousClock.now < end {
      let result: Result<ClientResponse, RPCError>
      do {
        result = .success(try await call(client, "Echo", "back"))
      } catch {
        result = .failure(error)
      }
      switch result {
      case .success(let response): return response.message
      case .failure(let error) where error.code == .unavailable: lastError = error
      case .failure(let error): throw error
      }
      try await Task.sleep(for: .milliseconds(100))
    }
    throw lastError ?? RPCError(code: .unavailable, message: "never connected")
  }

  @Test func bindingAPortInUseFails() async throws {
    try await withTestServer { server in
      let error = #expect(throws: SocketError.self) {
        try HTTP2ServerTransport(configuration: .init(host: "127.0.0.1", port: server.port))
      }
      #expect(error?.description.contains("Address already in use") == true)
    }
  }

  @Test func closedTransportFailsCalls() async throws {
    let client = try makeClient(port: 9)
    client.close()
    _ = await expectCode(.unavailable) { _ = try await call(client, "Echo", "x") }
  }
}

