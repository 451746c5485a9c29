import RPCCore
import RPCInProcessTransport
import SubstatusServiceAPI
import SubstatusWire
import Testing

/// `grpc.health.v1.Health` through the generated client and registration, over the in-process
/// transport.
@Suite struct HealthServiceTests {
  typealias Status = HealthService.ServingStatus

  /// Serves a router holding `pkg.Svc/M` and the health service; runs `body` with a client.
  func withHealthServer(
    _ body: (HealthService, Grpc_Health_V1_Health.Client) async throws -> Void
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
      try await body(health, Grpc_Health_V1_Health.Client(transport: transport.client))
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
    try await withHealthServer { (health, client) async throws in
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

  /// Starts Watch for `service` with the generated client; the call ends when the iterator is
  /// released.
  func watch(
    _ service: String, _ client: Grpc_Health_V1_Health.Client
  ) async throws -> ServerStreamingResponse<Grpc_Health_V1_HealthCheckResponse>.AsyncIterator {
    try await client.watch(request(service)).makeAsyncIterator()
  }

  @Test func watchSendsTheCurrentStatusThenEachChange() async throws {
    try await withHealthServer { (health, client) async throws in
      var server = try await watch("", client)
      var service = try await watch("pkg.Svc", client)
      #expect(try await server.next()?.status == .serving)
      #expect(try await service.next()?.status == .serving)
      health.setStatus(.serving, forService: "")  // no change: nothing sent
      health.setStatus(.notServing, forService: "pkg.Svc")
      #expect(try await service.next()?.status == .notServing)
      health.markAllNotServing()
      #expect(try await server.next()?.status == .notServing)
      health.setStatus(.serving, forService: "pkg.Svc")
      #expect(try await service.next()?.status == .serving)
    }
  }

  @Test func watchOfAnUnknownServiceSaysSoAndStaysOpen() async throws {
    try await withHealthServer { (health, client) async throws in
      var unknown = try await watch("later.Svc", client)
      #expect(try await unknown.next()?.status == .serviceUnknown)
      health.setStatus(.serving, forService: "later.Svc")
      #expect(try await unknown.next()?.status == .serving)
    }
  }
}
