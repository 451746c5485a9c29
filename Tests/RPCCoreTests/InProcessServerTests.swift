import SubstatusProcessTestKit
import Synchronization
import Testing
import RPCCore
import RPCInProcessTransport

enum UserKey: ServerContextKey { typealias Value = String }

struct AuthInterceptor: ServerInterceptor {
  func intercept(_ context: ServerContext, next: (ServerContext) async throws -> Void) async throws {
    guard let token = context.metadata.firstString(forKey: "authorization"), token.hasPrefix("Bearer ") else {
      throw RPCError(code: .unauthenticated, message: "missing bearer token")
    }
    var context = context
    context[UserKey.self] = String(token.dropFirst("Bearer ".count))
    try await next(context)
  }
}

struct DomainFailure: RPCErrorConvertible {
  var rpcErrorCode: RPCError.Code { .failedPrecondition }
  var rpcErrorMessage: String { "the catalog is empty" }
}

struct SecretFailure: Error { let secret = "hunter2" }

/// Records whether handlers saw task cancellation.
final class Probe: Sendable {
  let cancelled = Mutex(0)
  let started = Mutex(0)
}

func makeRouter(probe: Probe) -> RPCRouter {
  var router = RPCRouter()
  router.registerUnary(method: "/test.Svc/Echo", request: PayloadMessage.self, response: PayloadMessage.self) {
    request, context in
    context.response.addInitial("initial-value", forKey: "x-initial")
    context.response.addTrailing("trailing-value", forKey: "x-trailing")
    var reply = request
    if let user = context[UserKey.self] { reply.payload += Array(" for \(user)".utf8) }
    if let echo = context.metadata.firstString(forKey: "x-echo") { reply.payload += Array(" \(echo)".utf8) }
    return reply
  }
  router.registerUnary(method: "/test.Svc/Fail", request: PayloadMessage.self, response: PayloadMessage.self) {
    request, _ in
    switch request.text {
    case "domain": throw DomainFailure()
    case "rpc": throw RPCError(code: .notFound, message: "no such user", metadata: ["x-detail": "u9"])
    default: throw SecretFailure()
    }
  }
  router.registerUnary(method: "/test.Svc/Sleep", request: PayloadMessage.self, response: PayloadMessage.self) {
    request, _ in
    probe.started.withLock { $0 += 1 }
    do {
      try await Task.sleep(for: .seconds(30))
    } catch {
      probe.cancelled.withLock { $0 += 1 }
      throw error
    }
    return request
  }
  return router
}

/// Runs a server on an in-process transport for the duration of `body`.
func withInProcessServer(
  interceptors: [any ServerInterceptor] = [], probe: Probe = Probe(),
  _ body: (RPCClient) async throws -> Void
) async throws {
  let transport = InProcessTransport()
  let server = RPCServer(transport: transport.server, router: makeRouter(probe: probe), interceptors: interceptors)
  try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { try await server.run() }
    defer { server.beginGracefulShutdown() }
    try await body(RPCClient(transport: transport.client))
    server.beginGracefulShutdown()
    try await group.waitForAll()
  }
}

func expectStatus(_ code: RPCError.Code, _ call: () async throws -> Void) async -> RPCError? {
  do {
    try await call()
    Issue.record("expected \(code), got OK")
    return nil
  } catch let error as RPCError {
    #expect(error.code == code)
    return error
  } catch {
    Issue.record("expected RPCError, got \(error)")
    return nil
  }
}

@Suite struct InProcessServerTests {
  @Test func unaryCallCarriesMetadataBothWays() async throws {
    try await withInProcessServer { client in
      let reply = try await client.transport.unary(
        method: "/test.Svc/Echo", request: PayloadMessage("hi").serializedBytes(),
        metadata: ["x-echo": "there"], options: CallOptions())
      #expect(try PayloadMessage(serializedBytes: reply.message).text == "hi there")
      #expect(reply.initialMetadata.firstString(forKey: "x-initial") == "initial-value")
      #expect(reply.trailingMetadata.firstString(forKey: "x-trailing") == "trailing-value")
    }
  }

  @Test func unknownMethodAndServiceAreUnimplemented() async throws {
    try await withInProcessServer { client in
      let method = await expectStatus(.unimplemented) {
        _ = try await client.unary(method: "/test.Svc/Nope", request: PayloadMessage(), response: PayloadMessage.self)
      }
      #expect(method?.message == "unknown method Nope for service test.Svc")
      let service = await expectStatus(.unimplemented) {
        _ = try await client.unary(method: "/other.Svc/Echo", request: PayloadMessage(), response: PayloadMessage.self)
      }
      #expect(service?.message == "unknown service other.Svc")
    }
  }

  @Test(arguments: [
    ("domain", RPCError.Code.failedPrecondition, "the catalog is empty"),
    ("rpc", .notFound, "no such user"),
    ("other", .unknown, "the server failed to handle the request"),
  ])
  func handlerErrorsMapToStatuses(input: String, code: RPCError.Code, message: String) async throws {
    try await withInProcessServer { client in
      let error = await expectStatus(code) {
        _ = try await client.unary(method: "/test.Svc/Fail", request: PayloadMessage(input), response: PayloadMessage.self)
      }
      #expect(error?.message == message)
      #expect(error?.message.contains("hunter2") == false)
      if input == "rpc" { #expect(error?.metadata.firstString(forKey: "x-detail") == "u9") }
    }
  }

  @Test func interceptorRejectsOrPassesTypedValue() async throws {
    try await withInProcessServer(interceptors: [AuthInterceptor()]) { client in
      _ = await expectStatus(.unauthenticated) {
        _ = try await client.unary(method: "/test.Svc/Echo", request: PayloadMessage("x"), response: PayloadMessage.self)
      }
      let reply = try await client.unary(
        method: "/test.Svc/Echo", request: PayloadMessage("x"), response: PayloadMessage.self,
        metadata: ["authorization": "Bearer alice"])
      #expect(reply.text == "x for alice")
    }
  }

  @Test func undecodableRequestIsInternal() async throws {
    try await withInProcessServer { client in
      _ = await expectStatus(.internal) {
        _ = try await client.transport.unary(
          method: "/test.Svc/Echo", request: [0xFF, 0xFF], metadata: [:], options: CallOptions())
      }
    }
  }

  @Test func deadlineCancelsHandler() async throws {
    let probe = Probe()
    try await withInProcessServer(probe: probe) { client in
      let start = ContinuousClock.now
      _ = await expectStatus(.deadlineExceeded) {
        _ = try await client.unary(
          method: "/test.Svc/Sleep", request: PayloadMessage("z"), response: PayloadMessage.self,
          options: CallOptions(timeout: .milliseconds(100)))
      }
      #expect(ContinuousClock.now - start < .seconds(20))
    }
    #expect(probe.cancelled.withLock { $0 } == 1)
  }

  @Test func clientCancellationCancelsHandler() async throws {
    let probe = Probe()
    try await withInProcessServer(probe: probe) { client in
      let call = Task {
        try await client.unary(method: "/test.Svc/Sleep", request: PayloadMessage("z"), response: PayloadMessage.self)
      }
      _ = await waitUntil(every: .milliseconds(2)) { probe.started.withLock({ $0 }) != 0 }
      call.cancel()
      let result = await call.result
      #expect((try? result.get()) == nil)
    }
    #expect(probe.cancelled.withLock { $0 } == 1)
  }

  @Test func requestStreamDeliversYieldedMessagesThenEnds() async throws {
    let stream = RPCRequestStream()
    let reader = Task { () -> [[UInt8]] in
      var all: [[UInt8]] = []
      for try await message in stream { all.append(message) }
      return all
    }
    stream.yield([1])
    try await Task.sleep(for: .milliseconds(5))
    stream.yield([2])
    stream.finish()
    stream.yield([3])
    #expect(try await reader.value == [[1], [2]])
  }
}
