import Testing
@testable import RPCCore

/// `RPCRequestStream`'s buffer (its first message is kept apart from the rest) and the unary
/// fast path that takes a finished one-message stream without awaiting.
@Suite struct RequestStreamTests {
  @Test(arguments: [0, 1, 2, 5])
  func bufferedMessagesComeOutInOrder(count: Int) async throws {
    let stream = RPCRequestStream()
    let messages = (0..<count).map { [UInt8($0)] }
    for message in messages { stream.yield(message) }
    stream.finish()
    var read: [[UInt8]] = []
    for try await message in stream { read.append(message) }
    #expect(read == messages)
  }

  @Test func messagesYieldedWhileReadingKeepTheirOrder() async throws {
    let stream = RPCRequestStream()
    stream.yield([1])
    stream.yield([2])
    #expect(try await stream.next() == [1])
    stream.yield([3])  // the first slot is free again, but [2] is still waiting
    #expect(try await stream.next() == [2])
    stream.yield([4])
    stream.finish()
    #expect(try await stream.next() == [3])
    #expect(try await stream.next() == [4])
    #expect(try await stream.next() == nil)
  }

  @Test func takeSingleIfCompleteTakesAFinishedOneMessageStream() async throws {
    let stream = RPCRequestStream()
    stream.yield([7])
    #expect(stream.takeSingleIfComplete() == nil)  // not finished: more may come
    stream.finish()
    #expect(stream.takeSingleIfComplete() == [7])
    #expect(stream.takeSingleIfComplete() == nil)
    #expect(try await stream.next() == nil)
  }

  @Test(arguments: [0, 2])
  func takeSingleIfCompleteLeavesOtherStreamsToSingle(count: Int) async throws {
    let stream = RPCRequestStream()
    for index in 0..<count { stream.yield([UInt8(index)]) }
    stream.finish()
    #expect(stream.takeSingleIfComplete() == nil)
    await #expect(throws: RPCError.self) { try await stream.single() }
  }

  @Test func takeSingleIfCompleteLeavesAFailedStream() async throws {
    let stream = RPCRequestStream()
    stream.yield([1])
    stream.finish(throwing: RPCError(code: .cancelled, message: "gone"))
    #expect(stream.takeSingleIfComplete() == nil)
    #expect(try await stream.next() == [1])
    await #expect(throws: RPCError.self) { try await stream.next() }
  }
}
