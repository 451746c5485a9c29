import Foundation
import RPCCore
import RPCHTTP2Transport
import Testing

/// A Python grpcio server child process; stops when its stdin closes.
final class GRPCIOServerProcess {
  let process = Process()
  let stdin = Pipe()
  let port: Int

  init(script: String = "grpcio_server.py", arguments: [String] = []) async throws {
    process.executableURL = URL(fileURLWithPath: python)
    process.arguments = [fixture(script)] + arguments
    let stdout = Pipe()
    let stderr = Pipe()
    process.standardOutput = stdout
    process.standardError = stderr
    process.standardInput = stdin
    try process.run()
    let handle = stdout.fileHandleForReading
    let line = await withCheckedContinuation { continuation in
      Thread {
        var bytes = [UInt8]()
        while let chunk = try? handle.read(upToCount: 1), let byte = chunk.first, byte != UInt8(ascii: "\n") {
          bytes.append(byte)
        }
        continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
      }.start()
    }
    guard line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)) else {
      process.terminate()
      let errors = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      throw SocketTestError(description: "grpcio server did not start: \(line)\n\(errors)")
    }
    self.port = port
  }

  func stop() {
    try? stdin.fileHandleForWriting.close()
    process.waitUntilExit()
  }
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

/// Our client against a stock Python grpcio server.
@Suite struct ClientAgainstGRPCIOTests {
  @Test func unaryMetadataAndErrors() async throws {
    let server = try await GRPCIOServerProcess()
    defer { server.stop() }
    let client = try makeClient(port: server.port)
    defer { client.close() }
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

  @Test func deadlineAndCancellation() async throws {
    let server = try await GRPCIOServerProcess()
    defer { server.stop() }
    let client = try makeClient(port: server.port)
    defer { client.close() }
    let start = ContinuousClock.now
    _ = await expectCode(.deadlineExceeded) { _ = try await call(client, "Sleep", "5000", timeout: .milliseconds(200)) }
    #expect(ContinuousClock.now - start < .seconds(2))
    let task = Task { try await call(client, "Sleep", "5000") }
    try await Task.sleep(for: .milliseconds(200))
    task.cancel()
    _ = await expectCode(.cancelled) { _ = try await task.value }
    // The connection is still good.
    #expect(try await call(client, "Echo", "again").message == Array("again".utf8))
  }

  @Test func multiplexesConcurrentCalls() async throws {
    let server = try await GRPCIOServerProcess()
    defer { server.stop() }
    let client = try makeClient(port: server.port)
    defer { client.close() }
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
      _ = await expectCode(.deadlineExceeded) { _ = try await call(client, "Sleep", "5000", timeout: .milliseconds(200)) }
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == 1 })
      let task = Task { try await call(client, "Sleep", "5000") }
      #expect(await server.probe.waitUntil { $0.sleepsStarted.withLock { $0 } == 2 })
      task.cancel()
      _ = await expectCode(.cancelled) { _ = try await task.value }
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == 2 })
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
    // Reserve a port, then free it: nothing listens there yet.
    let port = try HTTP2ServerTransport(configuration: .init(host: "127.0.0.1", port: 0)).port
    let client = try makeClient(port: port) {
      $0.initialBackoff = .milliseconds(700)
      $0.backoffJitter = 0
    }
    defer { client.close() }
    let refused = await expectCode(.unavailable) { _ = try await call(client, "Echo", "x") }
    #expect(refused?.message.contains("127.0.0.1:\(port)") == true)
    // While backing off, calls fail fast.
    let start = ContinuousClock.now
    _ = await expectCode(.unavailable) { _ = try await call(client, "Echo", "x") }
    #expect(ContinuousClock.now - start < .milliseconds(500))
    try await withTestServer(configure: { $0.port = port }) { _ in
      try await Task.sleep(for: .milliseconds(800))
      #expect(try await call(client, "Echo", "back").message == Array("back".utf8))
    }
    // The server went away (graceful shutdown): the next call reconnects and fails, then recovers.
    _ = await expectCode(.unavailable) { _ = try await call(client, "Echo", "gone") }
    try await withTestServer(configure: { $0.port = port }) { _ in
      try await Task.sleep(for: .milliseconds(1300))
      #expect(try await call(client, "Echo", "again").message == Array("again".utf8))
    }
  }

  @Test func closedTransportFailsCalls() async throws {
    let client = try makeClient(port: 9)
    client.close()
    _ = await expectCode(.unavailable) { _ = try await call(client, "Echo", "x") }
  }
}
