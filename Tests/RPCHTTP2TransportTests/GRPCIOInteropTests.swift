import SubstatusProcessTestKit
import Testing
import RPCCore
import RPCHTTP2Transport

/// A stock Python grpcio client against our server, case by case (see Fixtures/grpcio_client.py).
@Suite struct GRPCIOInteropTests {
  @Test(arguments: [
    "unary", "metadata", "unknown", "too_large", "large", "concurrent", "error_message", "compressed",
  ])
  func grpcioClientCase(name: String) async throws {
    try await withTestServer { server in
      try await runGRPCIOCase(name, port: server.port)
    }
  }

  @Test func deadlineExceededCancelsHandler() async throws {
    try await withTestServer { server in
      try await runGRPCIOCase("deadline", port: server.port)
      // The handler was cancelled if it had started (under load it may not have, before 1 s).
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == $0.sleepsStarted.withLock { $0 } })
      #expect(server.probe.sleepsCompleted.withLock { $0 } == 0)
    }
  }

  @Test func clientCancelCancelsHandler() async throws {
    try await withTestServer { server in
      try await runGRPCIOCase("cancel", port: server.port)
      // The client cancels after 1 s; the handler (if it started by then) sees the cancellation.
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == $0.sleepsStarted.withLock { $0 } })
      #expect(server.probe.sleepsCompleted.withLock { $0 } == 0)
    }
  }

  @Test func servesOnSeveralLoopThreads() async throws {
    try await withTestServer(threads: 2) { server in
      try await runGRPCIOCase("unary", port: server.port)
    }
  }
}
