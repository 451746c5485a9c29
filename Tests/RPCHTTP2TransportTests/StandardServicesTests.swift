import RPCCore
import RPCHTTP2Transport
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
}
