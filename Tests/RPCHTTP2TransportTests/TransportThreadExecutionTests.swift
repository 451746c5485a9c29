import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import Synchronization
import Testing

/// `loop` on a server event loop thread, else `pool`.
func placement() -> String { HTTP2ServerTransport.isEventLoopThread ? "loop" : "pool" }

/// Suspends until a thread of its own resumes the caller: a task on the loop then resumes through
/// the loop's mailbox (another thread's enqueue), not its local queue. Returns where the resumer
/// ran (`pool`: not on a loop thread).
func resumedFromAnotherThread() async -> String {
  await withCheckedContinuation { continuation in
    Thread { continuation.resume(returning: placement()) }.start()
  }
}

/// `/where.Where/Here` answers where it ran: `<before>|<after being resumed from another
/// thread>|<after a sleep>`, each `loop` or `pool`.
func whereRouter(execution: HandlerExecution) -> RPCRouter {
  var router = RPCRouter()
  router.registerUnaryBytes(method: "/where.Where/Here", execution: execution) { _, _ in
    let before = placement()
    let resumer = await resumedFromAnotherThread()
    let afterResume = placement()
    try await Task.sleep(for: .milliseconds(5))
    let afterSleep = placement()
    #expect(resumer == "pool")
    return Array("\(before)|\(afterResume)|\(afterSleep)".utf8)
  }
  return router
}

/// Handlers registered with `HandlerExecution.transportThread` run on the event loop thread; the
/// semantics (deadlines, cancellation, many streams, errors) must be those of the pool.
@Suite struct TransportThreadExecutionTests {
  @Test func routerRemembersWhereEachMethodRuns() {
    var router = RPCRouter()
    router.registerUnaryBytes(method: "/a.A/Loop", execution: .transportThread) { request, _ in request }
    router.registerUnaryBytes(method: "/a.A/Pool") { request, _ in request }
    #expect(router.execution(for: "/a.A/Loop") == .transportThread)
    #expect(router.execution(for: "/a.A/Pool") == .pool)
    #expect(router.execution(for: "/a.A/Unknown") == .pool)
    router.registerUnaryBytes(method: "/a.A/Loop") { request, _ in request }
    #expect(router.execution(for: "/a.A/Loop") == .pool)
  }

  @Test(arguments: [HandlerExecution.transportThread, .pool])
  func handlersRunWhereRegisteredAndResumeThereAfterSuspending(execution: HandlerExecution) async throws {
    try await withTestServer(router: { _ in whereRouter(execution: execution) }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      let reply = try await client.unary(
        method: "/where.Where/Here", request: [], metadata: [:], options: CallOptions(timeout: .seconds(60)))
      let expected = execution == .transportThread ? "loop" : "pool"
      #expect(String(decoding: reply.message, as: UTF8.self) == "\(expected)|\(expected)|\(expected)")
    }
  }

  @Test(arguments: [HandlerExecution.transportThread, .pool])
  func deadlineAndCancellationReachTheHandler(execution: HandlerExecution) async throws {
    try await withTestServer(router: { interopRouter(probe: $0, execution: execution) }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      let start = ContinuousClock.now
      _ = await expectCode(.deadlineExceeded) {
        _ = try await call(client, "Sleep", "60000", timeout: .milliseconds(300))
      }
      #expect(ContinuousClock.now - start < .seconds(20))
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == $0.sleepsStarted.withLock { $0 } })
      let started = server.probe.sleepsStarted.withLock { $0 }
      let task = Task { try await call(client, "Sleep", "60000") }
      #expect(await server.probe.waitUntil { $0.sleepsStarted.withLock { $0 } == started + 1 })
      task.cancel()  // RST_STREAM(CANCEL)
      _ = await expectCode(.cancelled) { _ = try await task.value }
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == started + 1 })
      #expect(server.probe.sleepsCompleted.withLock { $0 } == 0)
      // The loop still serves after a cancelled handler.
      #expect(try await call(client, "Echo", "after").message == Array("after".utf8))
    }
  }

  @Test(arguments: [HandlerExecution.transportThread, .pool])
  func manyConcurrentStreamsOnOneConnection(execution: HandlerExecution) async throws {
    try await withTestServer(router: { interopRouter(probe: $0, execution: execution) }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      try await withThrowingTaskGroup(of: Void.self) { group in
        for i in 0..<600 {
          group.addTask {
            switch i % 4 {
            case 0:
              _ = await expectCode(.invalidArgument) { _ = try await call(client, "Fail", "", timeout: .seconds(60)) }
            case 1:
              let reply = try await call(client, "Sleep", "\(i % 7)", timeout: .seconds(60))
              #expect(reply.message == Array("\(i % 7)".utf8))
            default:
              var metadata = Metadata()
              metadata.addString("\(i)", forKey: "x-i")
              let reply = try await call(client, "Echo", "m\(i)", metadata: metadata, timeout: .seconds(60))
              #expect(reply.message == Array("m\(i)".utf8))
              #expect(reply.initialMetadata.firstString(forKey: "x-i") == "\(i)")
            }
          }
        }
        try await group.waitForAll()
      }
      #expect(serverConnectionCount(port: server.port) == 1)
    }
  }

  // The cases the own-client tests above do not cover (a few: each is a Python process).
  @Test(arguments: ["concurrent", "deadline", "cancel"])
  func grpcioClientCaseWithHandlersOnTheLoop(name: String) async throws {
    try await withTestServer(router: { interopRouter(probe: $0, execution: .transportThread) }) { server in
      try await runGRPCIOCase(name, port: server.port)
      #expect(await server.probe.waitUntil { $0.sleepsCancelled.withLock { $0 } == $0.sleepsStarted.withLock { $0 } })
      #expect(server.probe.sleepsCompleted.withLock { $0 } == 0)
    }
  }

  @Test func aSlowPoolCallDoesNotDelayLoopCallsOnTheSameConnection() async throws {
    // The pool handler waits (suspended, so that no thread of the small test pool is held) until
    // the loop handler has answered 50 calls on the same connection.
    let gate = Mutex<(open: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))
    func open() {
      let waiter = gate.withLock { state -> CheckedContinuation<Void, Never>? in
        state.open = true
        defer { state.waiter = nil }
        return state.waiter
      }
      waiter?.resume()
    }
    var router = RPCRouter()
    router.registerUnaryBytes(method: "/mix.Mix/Slow") { request, _ in
      await withCheckedContinuation { continuation in
        let resumeNow = gate.withLock { state -> Bool in
          if state.open { return true }
          state.waiter = continuation
          return false
        }
        if resumeNow { continuation.resume() }
      }
      return request
    }
    router.registerUnaryBytes(method: "/mix.Mix/Echo", execution: .transportThread) { request, _ in request }
    try await withTestServer(router: { _ in router }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      let slow = Task {
        try await client.unary(
          method: "/mix.Mix/Slow", request: [1], metadata: [:], options: CallOptions(timeout: .seconds(60)))
      }
      for i in 0..<50 {
        let reply = try await client.unary(
          method: "/mix.Mix/Echo", request: [UInt8(i)], metadata: [:], options: CallOptions(timeout: .seconds(30)))
        #expect(reply.message == [UInt8(i)])
      }
      open()
      #expect(try await slow.value.message == [1])
    }
  }


  @Test func aLoopHandlerResumedAfterTheServerStoppedStillFinishes() async throws {
    // The handler waits on a gate that opens only after the server (and its loop) has stopped:
    // its task must still run to the end rather than hang on a loop that no longer polls.
    let gate = Mutex<(open: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))
    let started = Mutex(false)
    let finished = Mutex(false)
    var router = RPCRouter()
    router.registerUnaryBytes(method: "/gate.Gate/Wait", execution: .transportThread) { request, _ in
      started.withLock { $0 = true }
      await withCheckedContinuation { continuation in
        let resumeNow = gate.withLock { state -> Bool in
          if state.open { return true }
          state.waiter = continuation
          return false
        }
        if resumeNow { continuation.resume() }
      }
      finished.withLock { $0 = true }
      return request
    }
    var configuration = HTTP2ServerTransport.Configuration(host: "127.0.0.1", port: 0)
    configuration.threads = 1
    configuration.shutdownGracePeriod = .milliseconds(200)
    let transport = try HTTP2ServerTransport(configuration: configuration)
    let server = RPCServer(transport: transport, router: router)
    let running = Task { try await server.run() }
    let client = try makeClient(port: transport.port)
    defer { client.close() }
    let pending = Task {
      try await client.unary(
        method: "/gate.Gate/Wait", request: [7], metadata: [:], options: CallOptions(timeout: .seconds(60)))
    }
    let probe = ServiceProbe()
    #expect(await probe.waitUntil { _ in started.withLock { $0 } })
    server.beginGracefulShutdown()
    try await running.value
    _ = await pending.result  // the connection closed after the grace period
    let waiter = gate.withLock { state -> CheckedContinuation<Void, Never>? in
      state.open = true
      defer { state.waiter = nil }
      return state.waiter
    }
    waiter?.resume()
    #expect(await probe.waitUntil { _ in finished.withLock { $0 } })
  }
}
