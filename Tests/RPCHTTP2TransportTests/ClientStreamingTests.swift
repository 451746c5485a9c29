import Foundation
import SubstatusProcessTestKit
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

/// The bytes a stream may hold for a consumer that stopped: the buffer, the stream's whole
/// HTTP/2 window (4 MiB) and the message that crossed the buffer's limit.
func streamMemoryBound(bufferSize: Int, messageSize: Int) -> Int { bufferSize + (4 << 20) + messageSize }

/// Waits until the client has one open stream and its receive window is closed: the server can
/// send nothing more until the consumer catches up.
func waitForClosedWindow(_ client: HTTP2ClientTransport) async -> Bool {
  await waitUntil(timeout: .seconds(5)) { await client.openStreamReceiveWindows() == [0] }
}

extension ClientStreamingAgainstOwnServerTests {
  @Test func aConsumerThatStopsReadingStopsTheServerAtABoundedBuffer() async throws {
    try await withStreamingServer { _, client in
      let messageSize = 64 << 10
      let count = 256  // 16 MiB, four times what the stream may hold
      let stream = try await streamingCall(client, "Flood", "\(messageSize) \(count)")
      #expect(try await stream.next()?.count == messageSize)
      #expect(await waitForClosedWindow(client), "the window stays open for a consumer that is not reading")
      #expect(stream.bufferedBytes >= 256 << 10)
      #expect(stream.bufferedBytes <= streamMemoryBound(bufferSize: 256 << 10, messageSize: messageSize))
      // The connection is not held up by the stalled stream.
      #expect(try await call(client, "Echo", "meanwhile").message == Array("meanwhile".utf8))
      #expect(await drain(try await streamingCall(client, "Stream", "2")).messages == ["m0", "m1"])
      // Reading again reopens the window: everything arrives.
      var received = 1
      while let message = try await stream.next() {
        #expect(message.count == messageSize)
        received += 1
      }
      #expect(received == count)
      #expect(stream.bufferedBytes == 0)
    }
  }

  @Test func streamsResetWhileTheirWindowIsHeldGiveBackTheConnectionWindow() async throws {
    try await withStreamingServer { _, client in
      // Each stream is reset holding its whole 4 MiB window; the connection's 16 MiB window
      // would be spent after four if the connection's share were held with the stream's.
      for _ in 0..<8 {
        let stream = try await streamingCall(client, "Flood", "\(64 << 10) 256")
        _ = try await stream.next()
        #expect(await waitForClosedWindow(client))
      }
      let (messages, error) = await drain(try await streamingCall(client, "Flood", "\(64 << 10) 256"))
      #expect(error == nil)
      #expect(messages.count == 256)
    }
  }

  @Test func theDeadlineCoversTheWholeStreamAndReachesTheServer() async throws {
    try await withStreamingServer { server, client in
      let start = ContinuousClock.now
      let (messages, error) = await drain(try await streamingCall(client, "Ticks", "", timeout: .milliseconds(300)))
      #expect(messages == ["first"])
      #expect(error?.code == .deadlineExceeded)
      #expect(ContinuousClock.now - start < .seconds(5))
      #expect(await server.probe.waitUntil(timeout: .seconds(5)) { $0.sleepsCancelled.withLock { $0 } == 1 })
    }
  }

  @Test func cancellingTheConsumingTaskCancelsTheServerHandler() async throws {
    try await withStreamingServer { server, client in
      let stream = try await streamingCall(client, "Ticks", "")
      let reader = Task { await drain(stream) }
      #expect(await server.probe.waitUntil(timeout: .seconds(5)) { $0.sleepsStarted.withLock { $0 } == 1 })
      reader.cancel()
      let (_, error) = await reader.value
      #expect(error?.code == .cancelled)
      #expect(await server.probe.waitUntil(timeout: .seconds(5)) { $0.sleepsCancelled.withLock { $0 } == 1 })
      #expect(try await call(client, "Echo", "still").message == Array("still".utf8))
    }
  }

  @Test func releasingAStreamEarlyCancelsTheServerHandler() async throws {
    try await withStreamingServer { server, client in
      do {
        let stream = try await streamingCall(client, "Ticks", "")
        for try await _ in stream { break }
      }
      #expect(await server.probe.waitUntil(timeout: .seconds(5)) { $0.sleepsCancelled.withLock { $0 } == 1 })
      #expect(await client.openStreamReceiveWindows() == [])
    }
  }

  @Test func aMessageOverTheLimitEndsTheStreamWithResourceExhausted() async throws {
    try await withTestServer(router: streamingRouter(probe:)) { server in
      let client = try makeClient(port: server.port) { $0.maxReceiveMessageSize = 1000 }
      defer { client.close() }
      let (messages, error) = await drain(try await streamingCall(client, "Flood", "1001 3"))
      #expect(messages.isEmpty)
      #expect(error?.code == .resourceExhausted)
    }
  }
}

/// Runs `body` with a client connected to a fresh grpcio server.
func withGRPCIOStreamingServer(_ body: (GRPCIOServerProcess, HTTP2ClientTransport) async throws -> Void)
  async throws
{
  let server = try await GRPCIOServerProcess()
  let client = try makeClient(port: server.port) { $0.responseStreamBufferSize = 256 << 10 }
  do {
    try await body(server, client)
  } catch {
    client.close()
    await server.stop()
    throw error
  }
  client.close()
  await server.stop()
}

/// The grpcio server's counts: Flood messages produced, Ticks calls seen to end.
func grpcioStats(_ client: HTTP2ClientTransport) async throws -> (flood: Int, cancelled: Int) {
  let numbers = String(decoding: try await call(client, "Stats", "").message, as: UTF8.self)
    .split(separator: " ").map { Int($0) ?? -1 }
  return (numbers[0], numbers[1])
}

/// Waits (up to 5 s) until the grpcio server has seen `count` Ticks calls end.
func waitForGRPCIOEndedTicks(_ client: HTTP2ClientTransport, _ count: Int) async throws -> Bool {
  try await waitUntil(timeout: .seconds(5), every: .milliseconds(10)) { try await grpcioStats(client).cancelled == count }
}

/// Server streaming from our client to a stock Python grpcio server.
@Suite struct ClientStreamingAgainstGRPCIOTests {
  @Test func streamsMessagesThenOKOrANonOKStatusWithDetails() async throws {
    try await withGRPCIOStreamingServer { _, client in
      let stream = try await streamingCall(client, "Stream", "5")
      #expect(stream.initialMetadata.firstString(forKey: "x-initial") == "i")
      let (messages, error) = await drain(stream)
      #expect(error == nil)
      #expect(messages == ["m0", "m1", "m2", "m3", "m4"])
      #expect(stream.trailingMetadata.firstString(forKey: "x-trailer") == "done")

      let (failed, failure) = await drain(try await streamingCall(client, "Stream", "4:fail"))
      #expect(failed == ["m0", "m1", "m2", "m3"])
      #expect(failure?.code == .resourceExhausted)
      #expect(failure?.message == "quota")
      #expect(failure?.metadata.firstString(forKey: "x-reason") == "quota")
      let details = try #require(failure?.metadata.firstBinary(forKey: "grpc-status-details-bin"))
      #expect(try Google_Rpc_Status(serializedBytes: details) == quotaStatus)
    }
  }

  @Test func aTrailersOnlyErrorThrowsFromTheCall() async throws {
    try await withGRPCIOStreamingServer { _, client in
      let error = await expectCode(.failedPrecondition) { _ = try await streamingCall(client, "Stream", "0:early") }
      #expect(error?.message == "refused before any message")
      #expect(error?.metadata.firstString(forKey: "x-reason") == "early")
    }
  }

  @Test func aConsumerThatStopsReadingStopsTheServerAtABoundedBuffer() async throws {
    try await withGRPCIOStreamingServer { _, client in
      let messageSize = 16 << 10
      let stream = try await streamingCall(client, "Flood", "\(messageSize)")
      #expect(try await stream.next()?.count == messageSize)
      #expect(await waitForClosedWindow(client), "the window stays open for a consumer that is not reading")
      let buffered = stream.bufferedBytes
      #expect(buffered >= 256 << 10)
      #expect(buffered <= streamMemoryBound(bufferSize: 256 << 10, messageSize: messageSize))
      // The server is held by flow control: what it produced stays near what the client holds
      // (grpcio buffers a little of its own), far from what an unthrottled loop makes.
      let produced = try await grpcioStats(client).flood
      try await Task.sleep(for: .milliseconds(200))
      #expect(try await grpcioStats(client).flood - produced < 64)
      // Reading again reopens the window.
      for _ in 0..<1000 { _ = try await stream.next() }
    }
  }

  @Test func theDeadlineAndCancellationReachTheServer() async throws {
    try await withGRPCIOStreamingServer { _, client in
      let (messages, error) = await drain(try await streamingCall(client, "Ticks", "", timeout: .milliseconds(300)))
      #expect(messages == ["first"])
      #expect(error?.code == .deadlineExceeded)
      #expect(try await waitForGRPCIOEndedTicks(client, 1), "grpcio did not see the deadline")

      let stream = try await streamingCall(client, "Ticks", "")
      #expect(try await stream.next() == Array("first".utf8))
      let reader = Task { await drain(stream) }
      reader.cancel()
      #expect(await reader.value.error?.code == .cancelled)
      #expect(try await waitForGRPCIOEndedTicks(client, 2), "grpcio did not see the cancellation")
    }
  }

  @Test func losingTheConnectionEndsTheStreamWithUnavailable() async throws {
    try await withGRPCIOStreamingServer { server, client in
      let stream = try await streamingCall(client, "Ticks", "")
      #expect(try await stream.next() == Array("first".utf8))
      server.child.child.send(SIGKILL)
      let (_, error) = await drain(stream)
      #expect(error?.code == .unavailable)
    }
  }
}
