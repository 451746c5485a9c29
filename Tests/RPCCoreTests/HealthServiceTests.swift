import RPCCore
import RPCInProcessTransport
import SubstatusWire
import Testing

@Suite struct HealthServiceTests {
  @Test func checkReportsStatusesAndWatchIsUnimplemented() async throws {
    var router = RPCRouter()
    router.registerUnaryBytes(method: "/pkg.Svc/M") { request, _ in request }
    let health = HealthService()
    health.register(into: &router)
    let transport = InProcessTransport()
    let server = RPCServer(transport: transport.server, router: router)
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask { try await server.run() }
      defer { server.beginGracefulShutdown() }
      let client = RPCClient(transport: transport.client)
      func check(_ service: String) async throws -> HealthService.ServingStatus {
        var request = Grpc_Health_V1_HealthCheckRequest()
        request.service = service
        return try await client.unary(
          method: "/grpc.health.v1.Health/Check", request: request, response: Grpc_Health_V1_HealthCheckResponse.self
        ).status
      }
      #expect(try await check("") == .serving)
      #expect(try await check("pkg.Svc") == .serving)
      _ = await expectStatus(.notFound) { _ = try await check("other.Svc") }
      health.markAllNotServing()
      #expect(try await check("") == .notServing)
      #expect(try await check("pkg.Svc") == .notServing)
      _ = await expectStatus(.unimplemented) {
        _ = try await client.unary(
          method: "/grpc.health.v1.Health/Watch", request: Grpc_Health_V1_HealthCheckRequest(),
          response: Grpc_Health_V1_HealthCheckResponse.self)
      }
      server.beginGracefulShutdown()
      try await group.waitForAll()
    }
  }
}
