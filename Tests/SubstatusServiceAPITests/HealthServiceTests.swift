import RPCCore
import RPCInProcessTransport
import SubstatusServiceAPI
import SubstatusWire
import Testing

/// `grpc.health.v1.Health` through the generated client and registration, in process.
@Suite struct HealthServiceTests {
  typealias Status = HealthService.ServingStatus

  /// Serves a router holding `pkg.Svc/M` and the health service; runs `body` with a client.
  func withHealthServer(
    _ body: (HealthService, Grpc_Health_V1_Health.Client, RPCRouter) async throws -> Void
  ) async throws {
    var router = RPCRouter()
    router.registerUnaryBytes(method: "/pkg.Svc/M") { request, _ in request }
    let health = HealthService()
    health.register(into: &router)
    let transport = InProcessTransport()
    let server = RPCServer(transport: transport.server, router: router)
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask { try await server.run() }
      defer { server.beginGracefulShutdown() }
      try await body(health, Grpc_Health_V1_Health.Client(transport: transport.client), router)
      server.beginGracefulShutdown()
      try await group.waitForAll()
    }
  }

  func request(_ service: String) -> Grpc_Health_V1_HealthCheckRequest {
    var request = Grpc_Health_V1_HealthCheckRequest()
    request.service = service
    return request
  }

  func status(_ client: Grpc_Health_V1_Health.Client, _ service: String) async throws -> Status {
    try await client.check(request(service)).status
  }

  @Test func checkReportsStatuses() async throws {
    try await withHealthServer { (health, client, _) async throws in
      #expect(try await status(client, "") == .serving)
      #expect(try await status(client, "pkg.Svc") == .serving)
      #expect(try await status(client, "grpc.health.v1.Health") == .serving)
      let unknown = await #expect(throws: RPCError.self) { _ = try await client.check(request("other.Svc")) }
      #expect(unknown?.code == .notFound)
      health.markAllNotServing()
      #expect(try await status(client, "") == .notServing)
      #expect(try await status(client, "pkg.Svc") == .notServing)
    }
  }

  /// Calls Watch for `service` through the router as a transport does, and reads its statuses as
  /// they are written; the call ends (its task is cancelled) when the sequence is dropped.
  func watch(_ service: String, router: RPCRouter) -> AsyncThrowingStream<Status, any Error> {
    AsyncThrowingStream { continuation in
      let writer = PartWriter { part in
        switch part {
        case .metadata: break
        case .message(let bytes):
          do {
            continuation.yield(try Grpc_Health_V1_HealthCheckResponse(serializedBytes: bytes).status)
          } catch {
            continuation.finish(throwing: error)
          }
        case .status(let code, let message, _):
          continuation.finish(throwing: RPCError(code: code, message: message))
        }
      }
      let context = ServerContext(method: Grpc_Health_V1_Health.watch.path, metadata: [:], deadline: nil, peer: "test")
      let call = RPCServerCall(
        context: context, requests: RPCRequestStream(messages: [request(service).serializedBytes()]), responses: writer)
      let task = Task { await RPCServer.handle(call, router: router, interceptors: []) }
      continuation.onTermination = { _ in task.cancel() }
    }
  }

  @Test func watchSendsTheCurrentStatusThenEachChange() async throws {
    try await withHealthServer { (health, _, router) async throws in
      var server = watch("", router: router).makeAsyncIterator()
      var service = watch("pkg.Svc", router: router).makeAsyncIterator()
      #expect(try await server.next() == .serving)
      #expect(try await service.next() == .serving)
      health.setStatus(.serving, forService: "")  // no change: nothing sent
      health.setStatus(.notServing, forService: "pkg.Svc")
      #expect(try await service.next() == .notServing)
      health.markAllNotServing()
      #expect(try await server.next() == .notServing)
      health.setStatus(.serving, forService: "pkg.Svc")
      #expect(try await service.next() == .serving)
    }
  }

  @Test func watchOfAnUnknownServiceSaysSoAndStaysOpen() async throws {
    try await withHealthServer { (health, _, router) async throws in
      var unknown = watch("later.Svc", router: router).makeAsyncIterator()
      #expect(try await unknown.next() == .serviceUnknown)
      health.setStatus(.serving, forService: "later.Svc")
      #expect(try await unknown.next() == .serving)
    }
  }
}

/// Hands each response part to a closure.
struct PartWriter: RPCResponseWriter {
  let onPart: @Sendable (RPCResponsePart) -> Void
  func write(_ parts: [RPCResponsePart]) { parts.forEach(onPart) }
}
