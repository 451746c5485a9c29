import Foundation
import RPCCore
@testable import RPCHTTP2Transport
import SubstatusWire
import Synchronization
import Testing

/// The interop test service with its server-streaming methods: Stream (payload "N", "N:fail" or
/// "N:early", as the grpcio fixture), Flood (payload "size count": `count` messages of `size`
/// bytes, then OK) and Ticks (one message, then waits to be cancelled: counted in the probe's
/// sleeps).
func streamingRouter(probe: ServiceProbe) -> RPCRouter {
  var router = interopRouter(probe: probe)
  router.registerStreaming(method: "/interop.Test/Stream") { requests, responses, context in
    let request = String(decoding: try await requests.single(), as: UTF8.self)
    let parts = request.split(separator: ":")
    if parts.dropFirst().first == "early" {
      throw RPCError(code: .failedPrecondition, message: "refused before any message", metadata: ["x-reason": "early"])
    }
    responses.write([.metadata(["x-initial": "i"])])
    for i in 0..<(Int(parts.first ?? "") ?? 0) { responses.write([.message(Array("m\(i)".utf8))]) }
    if parts.dropFirst().first == "fail" {
      var trailers: Metadata = ["x-reason": "quota"]
      trailers.addBinary(quotaStatus.serializedBytes(), forKey: "grpc-status-details-bin")
      throw RPCError(code: .resourceExhausted, message: "quota", metadata: trailers)
    }
    context.response.addTrailing("done", forKey: "x-trailer")
    return []
  }
  router.registerStreaming(method: "/interop.Test/Flood") { requests, responses, _ in
    let numbers = String(decoding: try await requests.single(), as: UTF8.self).split(separator: " ").map { Int($0) ?? 0 }
    responses.write([.metadata([:])])
    let message = [UInt8](repeating: 0x66, count: numbers[0])
    for _ in 0..<numbers[1] { responses.write([.message(message)]) }
    return []
  }
  router.registerStreaming(method: "/interop.Test/Ticks") { _, responses, _ in
    responses.write([.metadata([:]), .message(Array("first".utf8))])
    probe.sleepsStarted.withLock { $0 += 1 }
    do {
      try await Task.sleep(for: .seconds(30))
    } catch {
      probe.sleepsCancelled.withLock { $0 += 1 }
      throw error
    }
    return []
  }
  return router
}

/// The `google.rpc.Status` both test servers send with their `RESOURCE_EXHAUSTED` "quota".
let quotaStatus = {
  var status = Google_Rpc_Status()
  status.code = Int32(RPCError.Code.resourceExhausted.rawValue)
  status.message = "quota"
  return status
}()

func streamingCall(
  _ client: HTTP2ClientTransport, _ method: String, _ payload: String, timeout: Duration? = .seconds(10)
) async throws(RPCError) -> ClientResponseStream {
  try await client.serverStreaming(
    method: "/interop.Test/\(method)", request: Array(payload.utf8), metadata: [:],
    options: CallOptions(timeout: timeout))
}

/// Reads a stream to its end: the messages as text and the error it ended with, if any.
func drain(_ stream: ClientResponseStream) async -> (messages: [String], error: RPCError?) {
  var messages: [String] = []
  do throws(RPCError) {
    for try await message in stream { messages.append(String(decoding: message, as: UTF8.self)) }
    return (messages, nil)
  } catch {
    return (messages, error)
  }
}

func withStreamingServer(_ body: (TestServer, HTTP2ClientTransport) async throws -> Void) async throws {
  try await withTestServer(router: streamingRouter(probe:)) { server in
    let client = try makeClient(port: server.port) { $0.responseStreamBufferSize = 256 << 10 }
    defer { client.close() }
    try await body(server, client)
  }
}

/// Server streaming from our client to our server.
@Suite struct ClientStreamingAgainstOwnServerTests {
  @Test(arguments: [0, 1, 100])
  func streamsEveryMessageThenOK(count: Int) async throws {
    try await withStreamingServer { _, client in
      let stream = try await streamingCall(client, "Stream", "\(count)")
      #expect(stream.initialMetadata.firstString(forKey: "x-initial") == "i")
      let (messages, error) = await drain(stream)
      #expect(error == nil)
      #expect(messages == (0..<count).map { "m\($0)" })
      #expect(stream.trailingMetadata.firstString(forKey: "x-trailer") == "done")
    }
  }

  @Test func aNonOKStatusAfterMessagesKeepsItsDetails() async throws {
    try await withStreamingServer { _, client in
      let (messages, error) = await drain(try await streamingCall(client, "Stream", "3:fail"))
      #expect(messages == ["m0", "m1", "m2"])
      #expect(error?.code == .resourceExhausted)
      #expect(error?.message == "quota")
      #expect(error?.metadata.firstString(forKey: "x-reason") == "quota")
      let details = try #require(error?.metadata.firstBinary(forKey: "grpc-status-details-bin"))
      #expect(try Google_Rpc_Status(serializedBytes: details) == quotaStatus)
    }
  }

  @Test func aTrailersOnlyErrorThrowsFromTheCall() async throws {
    try await withStreamingServer { _, client in
      let error = await expectCode(.failedPrecondition) { _ = try await streamingCall(client, "Stream", "0:early") }
      #expect(error?.message == "refused before any message")
      #expect(error?.metadata.firstString(forKey: "x-reason") == "early")
      _ = await expectCode(.unimplemented) { _ = try await streamingCall(client, "Nope", "") }
    }
  }
}
