import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import Testing

/// Trailers that cannot be sent: the stream is reset (RST_STREAM INTERNAL_ERROR), never left open
/// holding its call, and a status's message and details are cut so that they always fit.
@Suite struct UnsendableTrailersTests {
  /// The test service plus methods whose status does not fit a header block.
  static func router(_ probe: ServiceProbe) -> RPCRouter {
    var router = interopRouter(probe: probe)
    // Trailing metadata the bounds do not cut (the handler's own): 100 KB in one field, past
    // nghttp2's 64 KiB header block.
    router.registerUnaryBytes(method: "/interop.Test/HugeTrailers") { request, context in
      context.response.addTrailing(String(repeating: "t", count: 100_000), forKey: "x-huge")
      return request
    }
    // An error whose message and details quote a megabyte-sized value: cut by StatusBounds.
    router.registerUnaryBytes(method: "/interop.Test/HugeError") { _, _ in
      var error = RPCError.invalidArgument(field: "value", String(repeating: "é", count: 200_000))
      error.message = "bad value: " + String(repeating: "9", count: 1_000_000)
      throw error
    }
    return router
  }

  @Test func trailersOverTheHeaderBlockLimitResetTheStreamAndFreeTheCall() async throws {
    try await withTestServer(router: Self.router) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      // Reset (INTERNAL_ERROR), not left open until the deadline (DEADLINE_EXCEEDED).
      let error = await expectCode(.internal) {
        _ = try await call(client, "HugeTrailers", "x", timeout: .seconds(60))
      }
      #expect(error?.message.contains("HTTP/2 error 2") == true, "\(String(describing: error))")
      #expect(await waitUntil { server.transport.metrics.callsInFlight == 0 })
      #expect(server.transport.metrics.unsendableHeaderResets == 1)
      // The connection goes on serving.
      let reply = try await call(client, "Echo", "after")
      #expect(reply.message == Array("after".utf8))
    }
  }

  @Test func hugeErrorIsCutToTheBoundsAndAnswered() async throws {
    try await withTestServer(router: Self.router) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      let error = try #require(await expectCode(.invalidArgument) {
        _ = try await call(client, "HugeError", "x", timeout: .seconds(60))
      })
      #expect(error.message.utf8.count <= StatusBounds.maxMessageBytes)
      #expect(error.message.hasPrefix("bad value: 999"))
      #expect(error.message.hasSuffix("more bytes)"))
      let details = try #require(error.metadata.firstBinary(forKey: StatusBounds.detailsKey))
      #expect(details.count <= StatusBounds.maxDetailsBytes)
      #expect(await waitUntil { server.transport.metrics.callsInFlight == 0 })
      #expect(server.transport.metrics.unsendableHeaderResets == 0)
    }
  }

  @Test func peerWithATinyHeaderListLimitGetsAResetNotAnOversizedBlock() async throws {
    try await withTestServer(router: Self.router) { server in
      let result = try await runProcess(python, [fixture("h2_trailers.py"), String(server.port)])
      #expect(result.status == 0, "h2_trailers.py failed:\n\(result.stdout)\n\(result.stderr)")
      #expect(result.stdout.contains("DONE"))
      #expect(await waitUntil { server.transport.metrics.callsInFlight == 0 })
      // The reset reply's queued body is released from the reply budget.
      #expect(await waitUntil { server.transport.metrics.replyBytesInFlight == 0 })
      #expect(server.transport.metrics.unsendableHeaderResets == 2)
    }
  }
}
