// A fake substatus server for the client and CLI tests: records every call and answers what the
// test says, over the in-process transport.
import RPCCore
import RPCInProcessTransport
import SubstatusProcessTestKit
import SubstatusWire
import Synchronization

/// One RPC as the fake server saw it.
public struct RecordedCall: Sendable {
  /// The method path.
  public var method: String
  /// The `authorization` header.
  public var authorization: String?
  /// The request metadata.
  public var metadata: Metadata
  /// The serialized request.
  public var request: [UInt8]
  /// The time left before the call's deadline.
  public var timeRemaining: Duration?
}

/// Records every call the fake handlers receive.
public final class CallLog: Sendable {
  private let calls = Mutex<[RecordedCall]>([])

  /// An empty log.
  public init() {}

  /// Records a call.
  public func record(_ request: [UInt8], _ context: ServerContext) {
    let call = RecordedCall(
      method: context.method, authorization: context.metadata.firstString(forKey: "authorization"),
      metadata: context.metadata, request: request, timeRemaining: context.timeRemaining)
    calls.withLock { $0.append(call) }
  }

  /// Every call, in order.
  public var all: [RecordedCall] { calls.withLock { $0 } }
  /// How many calls arrived.
  public var count: Int { calls.withLock { $0.count } }
}

extension RPCRouter {
  /// Registers a fake handler that records the call and answers `reply(request)`.
  public mutating func fake<Request: ProtobufMessage, Response: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Request, Response>, log: CallLog,
    reply: @escaping @Sendable (Request, Int) async throws -> Response
  ) {
    registerUnaryBytes(method: method.path) { bytes, context in
      log.record(bytes, context)
      let request = try Request(serializedBytes: bytes)
      return try await reply(request, log.count).serializedBytes()
    }
  }

  /// Registers a fake handler that records the call and answers a fixed response.
  public mutating func fake<Request: ProtobufMessage, Response: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Request, Response>, log: CallLog, reply: Response
  ) {
    fake(method, log: log) { _, _ in reply }
  }
}

/// Runs an in-process server with `router` for the duration of `body`.
public func withFakeServer<T: Sendable>(
  _ router: RPCRouter, _ body: (any ClientTransport) async throws -> T
) async throws -> T {
  let transport = InProcessTransport()
  let server = RPCServer(transport: transport.server, router: router)
  return try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { try await server.run() }
    // Wait until the server listens: before that, calls fail with UNAVAILABLE.
    _ = await waitUntil(every: .milliseconds(1)) {
      do {
        _ = try await transport.client.unary(
          method: "/probe.Probe/Ready", request: [], metadata: [:], options: CallOptions())
        return true
      } catch {
        return (error as? RPCError)?.code != .unavailable
      }
    }
    do {
      let result = try await body(transport.client)
      server.beginGracefulShutdown()
      try await group.waitForAll()
      return result
    } catch {
      server.beginGracefulShutdown()
      group.cancelAll()
      throw error
    }
  }
}
