import SubstatusProcessTestKit
import Synchronization
import Testing
import RPCCore
import RPCInProcessTransport

/// Counts what a stream's transport side hears from its consumer.
final class StreamSignals: Sendable {
  let resumes = Atomic(0)
  let cancels = Atomic(0)
}

func makeStream(bufferSize: Int = .max, signals: StreamSignals) -> (
  stream: ClientResponseStream, continuation: ClientResponseStream.Continuation
) {
  ClientResponseStream.makeStream(
    initialMetadata: ["x-initial": "1"], bufferSize: bufferSize,
    onResume: { signals.resumes.add(1, ordering: .relaxed) },
    onCancel: { signals.cancels.add(1, ordering: .relaxed) })
}

@Suite struct ClientResponseStreamTests {
  @Test func deliversBufferedMessagesThenTheOKEnd() async throws {
    let signals = StreamSignals()
    let (stream, continuation) = makeStream(signals: signals)
    continuation.yield([1])
    continuation.yield([2])
    continuation.finish(trailingMetadata: ["x-trailer": "t"])
    continuation.yield([3])
    var received: [[UInt8]] = []
    for try await message in stream { received.append(message) }
    #expect(received == [[1], [2]])
    #expect(stream.initialMetadata.firstString(forKey: "x-initial") == "1")
    #expect(stream.trailingMetadata.firstString(forKey: "x-trailer") == "t")
    #expect(try await stream.next() == nil)
    #expect(signals.cancels.load(ordering: .relaxed) == 0)
  }

  @Test func throwsTheStatusAfterTheBufferedMessagesThenEnds() async throws {
    let signals = StreamSignals()
    let (stream, continuation) = makeStream(signals: signals)
    let reader = Task { () throws(RPCError) -> [[UInt8]] in
      var received: [[UInt8]] = []
      do throws(RPCError) {
        for try await message in stream { received.append(message) }
      } catch {
        #expect(error.code == .aborted)
        #expect(error.metadata.firstBinary(forKey: "grpc-status-details-bin") == [7])
      }
      return received
    }
    continuation.yield([1])
    var trailers = Metadata()
    trailers.addBinary([7], forKey: "grpc-status-details-bin")
    continuation.finish(throwing: RPCError(code: .aborted, message: "stop", metadata: trailers))
    #expect(try await reader.value == [[1]])
    #expect(stream.trailingMetadata.firstBinary(forKey: "grpc-status-details-bin") == [7])
    #expect(try await stream.next() == nil)
  }

  @Test func aFullBufferAsksTheTransportToPauseUntilHalfIsTaken() async throws {
    let signals = StreamSignals()
    let (stream, continuation) = makeStream(bufferSize: 40, signals: signals)
    for _ in 0..<3 { #expect(continuation.yield(Array(repeating: 0, count: 10))) }
    #expect(!continuation.yield(Array(repeating: 0, count: 10)))  // 40 buffered
    #expect(!continuation.yield(Array(repeating: 0, count: 10)))  // still paused
    #expect(stream.bufferedBytes == 50)
    for _ in 0..<2 { _ = try await stream.next() }
    #expect(signals.resumes.load(ordering: .relaxed) == 0)  // 30 > 20
    _ = try await stream.next()
    #expect(signals.resumes.load(ordering: .relaxed) == 1)  // 20: half
    #expect(continuation.yield([0]))
    #expect(signals.cancels.load(ordering: .relaxed) == 0)
  }

  @Test func cancellingTheIteratingTaskCancelsTheCallOnce() async throws {
    let signals = StreamSignals()
    let (stream, continuation) = makeStream(signals: signals)
    let reader = Task { () throws(RPCError) -> Int in
      var count = 0
      for try await _ in stream { count += 1 }
      return count
    }
    continuation.yield([1])
    while stream.bufferedBytes > 0 { await Task.yield() }
    reader.cancel()
    let error = await #expect(throws: RPCError.self) { try await reader.value }
    #expect(error?.code == .cancelled)
    continuation.finish(trailingMetadata: [:])
    #expect(signals.cancels.load(ordering: .relaxed) == 1)
  }

  @Test func aConsumerCancelledBeforeReachingTheEndSeesCancelledNotAShortStream() async throws {
    let signals = StreamSignals()
    let (stream, continuation) = makeStream(signals: signals)
    continuation.yield([1])
    continuation.yield([2])
    continuation.finish(trailingMetadata: ["x-trailer": "t"])
    let reader = Task { () throws(RPCError) -> [[UInt8]] in
      var received: [[UInt8]] = []
      withUnsafeCurrentTask { $0?.cancel() }
      for try await message in stream { received.append(message) }
      return received
    }
    let error = await #expect(throws: RPCError.self) { try await reader.value }
    #expect(error?.code == .cancelled)
    #expect(stream.trailingMetadata.firstString(forKey: "x-trailer") == "t")
    #expect(try await stream.next() == nil)
    #expect(signals.cancels.load(ordering: .relaxed) == 0)  // the call was over already
  }

  @Test func releasingAStreamBeforeItsEndCancelsTheCall() async throws {
    let signals = StreamSignals()
    var continuation: ClientResponseStream.Continuation?
    do {
      let made = makeStream(signals: signals)
      continuation = made.continuation
      continuation?.yield([1])
      #expect(try await made.stream.next() == [1])
    }
    #expect(signals.cancels.load(ordering: .relaxed) == 1)
    do {
      let made = makeStream(signals: signals)
      made.continuation.finish(trailingMetadata: [:])
    }
    #expect(signals.cancels.load(ordering: .relaxed) == 1)
    _ = continuation
  }
}

/// Handlers of the streaming tests; the request's text is a number of messages or a mode.
func makeStreamingRouter(probe: Probe) -> RPCRouter {
  var router = RPCRouter()
  router.registerStreaming(method: "/test.Svc/Count") { requests, responses, context in
    let request = try PayloadMessage(serializedBytes: try await requests.single())
    guard let count = Int(request.text) else {
      throw RPCError(code: .invalidArgument, message: "not a count", metadata: ["x-detail": "count"])
    }
    responses.write([.metadata(["x-initial": "i"])])
    for i in 0..<count { responses.write([.message(PayloadMessage("m\(i)").serializedBytes())]) }
    if context.metadata.firstString(forKey: "x-fail") != nil {
      var trailers = Metadata()
      trailers.addBinary([1, 2, 3], forKey: "grpc-status-details-bin")
      throw RPCError(code: .resourceExhausted, message: "quota", metadata: trailers)
    }
    context.response.addTrailing("t", forKey: "x-trailing")
    return []
  }
  router.registerStreaming(method: "/test.Svc/Garbage") { _, responses, _ in
    responses.write([.metadata([:]), .message(PayloadMessage("ok").serializedBytes()), .message([0xFF, 0xFF])])
    probe.started.withLock { $0 += 1 }
    do {
      try await Task.sleep(for: .seconds(30))
    } catch {
      probe.cancelled.withLock { $0 += 1 }
      throw error
    }
    return []
  }
  router.registerStreaming(method: "/test.Svc/Ticks") { _, responses, _ in
    responses.write([.metadata([:]), .message(PayloadMessage("first").serializedBytes())])
    probe.started.withLock { $0 += 1 }
    do {
      try await Task.sleep(for: .seconds(30))
    } catch {
      probe.cancelled.withLock { $0 += 1 }
      throw error
    }
    return []
  }
  return router
}

func withStreamingServer(probe: Probe = Probe(), _ body: (RPCClient) async throws -> Void) async throws {
  let transport = InProcessTransport()
  let server = RPCServer(transport: transport.server, router: makeStreamingRouter(probe: probe))
  try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { try await server.run() }
    defer { server.beginGracefulShutdown() }
    try await body(RPCClient(transport: transport.client))
    server.beginGracefulShutdown()
    try await group.waitForAll()
  }
}

/// Typed server streaming over the in-process transport.
@Suite struct InProcessServerStreamingTests {
  @Test(arguments: [0, 1, 50])
  func streamsEveryMessageThenOK(count: Int) async throws {
    try await withStreamingServer { client in
      let response = try await client.serverStreaming(
        method: "/test.Svc/Count", request: PayloadMessage("\(count)"), response: PayloadMessage.self)
      #expect(response.initialMetadata.firstString(forKey: "x-initial") == "i")
      var texts: [String] = []
      for try await message in response { texts.append(message.text) }
      #expect(texts == (0..<count).map { "m\($0)" })
      #expect(response.trailingMetadata.firstString(forKey: "x-trailing") == "t")
    }
  }

  @Test func aNonOKStatusAfterMessagesKeepsItsDetails() async throws {
    try await withStreamingServer { client in
      let response = try await client.serverStreaming(
        method: "/test.Svc/Count", request: PayloadMessage("3"), response: PayloadMessage.self,
        metadata: ["x-fail": "1"])
      var texts: [String] = []
      let error = await expectStatus(.resourceExhausted) {
        for try await message in response { texts.append(message.text) }
      }
      #expect(texts == ["m0", "m1", "m2"])
      #expect(error?.message == "quota")
      #expect(error?.metadata.firstBinary(forKey: "grpc-status-details-bin") == [1, 2, 3])
    }
  }

  @Test func anErrorBeforeAnyMessageThrowsFromTheCall() async throws {
    try await withStreamingServer { client in
      let error = await expectStatus(.invalidArgument) {
        _ = try await client.serverStreaming(
          method: "/test.Svc/Count", request: PayloadMessage("x"), response: PayloadMessage.self)
      }
      #expect(error?.metadata.firstString(forKey: "x-detail") == "count")
      _ = await expectStatus(.unimplemented) {
        _ = try await client.serverStreaming(
          method: "/test.Svc/Nope", request: PayloadMessage(), response: PayloadMessage.self)
      }
    }
  }

  @Test func anUndecodableMessageEndsTheStreamWithInternalAndCancelsTheHandler() async throws {
    let probe = Probe()
    try await withStreamingServer(probe: probe) { client in
      let response = try await client.serverStreaming(
        method: "/test.Svc/Garbage", request: PayloadMessage(), response: PayloadMessage.self)
      var texts: [String] = []
      _ = await expectStatus(.internal) {
        for try await message in response { texts.append(message.text) }
      }
      #expect(texts == ["ok"])
    }
    #expect(probe.cancelled.withLock { $0 } == 1)
  }

  @Test func theDeadlineCoversTheWholeStream() async throws {
    let probe = Probe()
    try await withStreamingServer(probe: probe) { client in
      let response = try await client.serverStreaming(
        method: "/test.Svc/Ticks", request: PayloadMessage(), response: PayloadMessage.self,
        options: CallOptions(timeout: .milliseconds(100)))
      var texts: [String] = []
      _ = await expectStatus(.deadlineExceeded) {
        for try await message in response { texts.append(message.text) }
      }
      #expect(texts == ["first"])
    }
    #expect(probe.cancelled.withLock { $0 } == 1)
  }

  @Test func cancellingTheConsumerCancelsTheHandler() async throws {
    let probe = Probe()
    try await withStreamingServer(probe: probe) { client in
      let response = try await client.serverStreaming(
        method: "/test.Svc/Ticks", request: PayloadMessage(), response: PayloadMessage.self)
      let reader = Task {
        var texts: [String] = []
        for try await message in response { texts.append(message.text) }
        return texts
      }
      _ = await waitUntil(every: .milliseconds(2)) { probe.started.withLock({ $0 }) != 0 }
      reader.cancel()
      _ = await expectStatus(.cancelled) { _ = try await reader.value }
    }
    #expect(probe.cancelled.withLock { $0 } == 1)
  }
}
