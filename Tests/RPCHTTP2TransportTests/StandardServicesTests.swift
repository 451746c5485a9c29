import RPCCore
import RPCHTTP2Transport
import SubstatusServiceAPI
import SubstatusWire
import Testing

/// Health and server reflection over HTTP/2, checked with grpcio (reflection protos compiled by
/// grpc_tools from Protos/ at test time).
@Suite struct StandardServicesTests {
  @Test func reflectionAndHealthWorkWithGRPCIO() async throws {
    let routerWithServices: (ServiceProbe) -> RPCRouter = { _ in
      var router = RPCRouter()
      router.registerUnaryBytes(method: "/subs.bench.v1.Bench/Echo") { request, _ in request }
      HealthService().register(into: &router)
      ReflectionService(files: ProtoFiles.all).register(into: &router)
      return router
    }
    try await withTestServer(router: routerWithServices) { server in
      let result = try await runProcess(
        python,
        [fixture("reflection_client.py"), String(server.port), packageRoot.appendingPathComponent("Protos").path])
      #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
      #expect(result.stdout.contains("PASS reflection"))
    }
  }

  /// Health/Watch with a real grpcio client: SERVING at once, NOT_SERVING on the same stream after
  /// `markAllNotServing`, SERVICE_UNKNOWN with the stream left open for an unknown service.
  @Test func healthWatchWorksWithGRPCIO() async throws {
    let health = HealthService()
    let router: (ServiceProbe) -> RPCRouter = { _ in
      var router = RPCRouter()
      router.registerUnaryBytes(method: "/test.Health/Drain") { _, _ in
        health.markAllNotServing()
        return []
      }
      health.register(into: &router)
      return router
    }
    try await withTestServer(router: router) { server in
      let result = try await runProcess(
        python,
        [fixture("health_watch_client.py"), String(server.port), packageRoot.appendingPathComponent("Protos").path],
        timeout: .seconds(30))
      #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
      #expect(result.stdout.contains("PASS health watch"))
    }
  }
}
