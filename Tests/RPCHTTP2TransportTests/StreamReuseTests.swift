import Foundation
import RPCCore
import RPCHTTP2Transport
import Testing

/// A connection reuses the states of its closed streams and the previous call's metadata: every
/// call must still see exactly its own headers and get its own answer.
@Suite struct StreamReuseTests {
  /// The metadata of successive calls on one connection repeats, grows, shrinks, changes value,
  /// changes order and carries binary values; the Echo handler returns the `x-` pairs it saw.
  @Test(arguments: [HandlerExecution.pool, .transportThread])
  func successiveCallsSeeTheirOwnMetadata(execution: HandlerExecution) async throws {
    try await withTestServer(router: { interopRouter(probe: $0, execution: execution) }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      let calls: [[(String, Metadata.Value)]] = [
        [("x-a", "1")], [("x-a", "1")], [("x-a", "1"), ("x-b", "2")], [("x-a", "1")], [], [("x-a", "2")],
        [("x-a", "1"), ("x-b", "2")], [("x-b", "2"), ("x-a", "1")], [("x-c-bin", .binary([0, 1, 255]))],
        [("x-c-bin", .binary([0, 1, 255]))], [("x-c-bin", .binary([2]))], [("x-a", "1")], [],
      ]
      for (index, pairs) in calls.enumerated() {
        var metadata = Metadata()
        for (key, value) in pairs {
          switch value {
          case .string(let string): metadata.addString(string, forKey: key)
          case .binary(let bytes): metadata.addBinary(bytes, forKey: key)
          }
        }
        let reply = try await call(client, "Echo", "call \(index)", metadata: metadata)
        #expect(reply.message == Array("call \(index)".utf8))
        let echoed = reply.initialMetadata.filter { $0.key.hasPrefix("x-") }.map { "\($0.key)=\($0.value)" }
        #expect(echoed == pairs.map { "\($0.0)=\($0.1)" }, "call \(index)")
      }
    }
  }

  /// Calls that end every way (OK, an error status, a deadline, a cancellation, an unknown
  /// method) on one connection, over and over: the streams they leave are reused by the next ones.
  @Test(arguments: [HandlerExecution.pool, .transportThread])
  func callsEndingEveryWayLeaveReusableStreams(execution: HandlerExecution) async throws {
    try await withTestServer(router: { interopRouter(probe: $0, execution: execution) }) { server in
      let client = try makeClient(port: server.port)
      defer { client.close() }
      for round in 0..<5 {
        try await withThrowingTaskGroup(of: Void.self) { group in
          for i in 0..<20 {
            group.addTask {
              switch i % 5 {
              case 0, 1:
                let reply = try await call(client, "Echo", "r\(round) c\(i)")
                #expect(reply.message == Array("r\(round) c\(i)".utf8))
              case 2:
                _ = await expectCode(.invalidArgument) { _ = try await call(client, "Fail", "") }
              case 3:
                _ = await expectCode(.deadlineExceeded) {
                  _ = try await call(client, "Sleep", "2000", timeout: .milliseconds(20))
                }
              default:
                _ = await expectCode(.unimplemented) { _ = try await call(client, "Nope", "") }
              }
            }
          }
          try await group.waitForAll()
        }
        #expect(try await call(client, "Echo", "after \(round)").message == Array("after \(round)".utf8))
      }
    }
  }
}
