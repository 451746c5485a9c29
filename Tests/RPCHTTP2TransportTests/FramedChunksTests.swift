import RPCCore
import RPCHTTP2Transport
import Testing

/// Request bodies whose gRPC messages are cut across DATA frames anywhere: whole messages at the
/// start of a chunk are taken from it directly, the rest goes through the deframer; both give the
/// same messages, and a refused prefix fails the call as before, wherever it starts.
@Suite struct FramedChunksTests {
  /// The test service plus Collect, which answers with its request messages joined by "|".
  static func router(probe: ServiceProbe) -> RPCRouter {
    var router = interopRouter(probe: probe)
    router.registerStreaming(method: "/interop.Test/Collect", execution: .transportThread) { requests, _, context in
      var messages: [String] = []
      for try await message in requests { messages.append(String(decoding: message, as: UTF8.self)) }
      return [.metadata(context.response.initial), .message(Array(messages.joined(separator: "|").utf8))]
    }
    return router
  }

  @Test(arguments: [
    ("split", 0, "m1|m2|message-3|m4"),
    ("prefixcut", 0, "m1|m2"),
    ("compressed", 13, ""),
    ("oversize", 8, ""),
  ])
  func messagesCutAcrossFrames(name: String, status: Int, message: String) async throws {
    try await withTestServer(configure: { $0.maxReceiveMessageSize = 1000 }, router: Self.router(probe:)) { server in
      let result = try await runProcess(python, [fixture("h2_framed_chunks.py"), String(server.port), name])
      #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
      let line = result.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT ") }.map(String.init) ?? ""
      #expect(line.contains("\"status\": \(status)"), "\(name): \(line)")
      #expect(line.contains("\"message\": \"\(message)\""), "\(name): \(line)")
    }
  }
}
