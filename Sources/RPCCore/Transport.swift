import Synchronization

/// Accepts RPCs from callers and hands each one to a handler.
///
/// A transport owns its sockets (or none, in process) and its threads. It calls `handler` once per
/// RPC, inside a task it cancels when the caller cancels, the deadline passes or the connection
/// goes away. ``RPCServer`` is the usual handler.
public protocol ServerTransport: Sendable {
  /// Serves RPCs until ``beginGracefulShutdown()`` is called and in-flight RPCs have finished.
  ///
  /// - Parameter handler: Called once per RPC, in its own task.
  /// - Throws: When the transport cannot start (for example, the address is in use).
  func listen(_ handler: @escaping @Sendable (RPCServerCall) async -> Void) async throws

  /// Serves RPCs like ``listen(_:)``, running each RPC's task where `execution` says for its
  /// method path. A transport without threads of its own may ignore `execution` (the default
  /// implementation does).
  ///
  /// - Parameters:
  ///   - handler: Called once per RPC, in its own task.
  ///   - execution: Where the task of an RPC for a method path runs.
  /// - Throws: When the transport cannot start.
  func listen(
    _ handler: @escaping @Sendable (RPCServerCall) async -> Void,
    execution: @escaping @Sendable (String) -> HandlerExecution
  ) async throws

  /// Stops accepting new RPCs; in-flight RPCs finish, then ``listen(_:)`` returns.
  func beginGracefulShutdown()
}

extension ServerTransport {
  /// Serves RPCs with every handler on the shared pool: ``listen(_:)``.
  public func listen(
    _ handler: @escaping @Sendable (RPCServerCall) async -> Void,
    execution: @escaping @Sendable (String) -> HandlerExecution
  ) async throws {
    try await listen(handler)
  }
}

/// Where a server transport runs the task of an RPC: the handler and the interceptors around it.
///
/// A handler that never blocks its thread and finishes in microseconds (an echo, a lookup in
/// memory) is cheapest on the transport's own I/O thread: no hand-over to another thread and back
/// for every call (grpc-java calls this a direct executor). Such a handler may still `await`: it
/// resumes on the I/O thread. Anything that blocks a thread (file or database I/O, a lock held
/// long, a long computation) stalls every other connection of that thread there, so it belongs
/// on the pool.
public enum HandlerExecution: Sendable, Hashable {
  /// On Swift's shared concurrent pool (the default): the handler may block its thread.
  case pool
  /// On the transport's I/O thread that received the RPC, when the transport has one.
  case transportThread
}

/// One RPC as a server transport hands it over: the request side and a writer for the response.
public struct RPCServerCall: Sendable {
  /// The request headers and the caller's address.
  public var context: ServerContext
  /// The request messages, serialized.
  public var requests: RPCRequestStream
  /// Where the response goes.
  public var responses: any RPCResponseWriter

  /// Creates a call.
  public init(context: ServerContext, requests: RPCRequestStream, responses: any RPCResponseWriter) {
    self.context = context
    self.requests = requests
    self.responses = responses
  }
}

/// One piece of a response, in the order they are sent.
public enum RPCResponsePart: Sendable {
  /// The response headers with initial metadata; sent at most once, first.
  case metadata(Metadata)
  /// One serialized response message.
  case message([UInt8])
  /// The final status and trailing metadata; ends the RPC. Without a preceding `.metadata`, it
  /// goes out as a Trailers-Only response.
  case status(RPCError.Code, message: String, trailers: Metadata)
}

/// Sends the parts of a response. Writes are buffered by the transport and never block; after a
/// `.status` part, or once the RPC is over (cancelled, timed out), further writes are dropped.
public protocol RPCResponseWriter: Sendable {
  /// Sends parts of the response, in order.
  func write(_ parts: [RPCResponsePart])
}

/// The serialized request messages of one RPC, as an async sequence.
///
/// Unary calls usually arrive whole, so their stream is already finished when the handler starts
/// and iterating it never suspends.
public final class RPCRequestStream: AsyncSequence, Sendable {
  /// The element type: one serialized message.
  public typealias Element = [UInt8]
  /// The error type: `CancellationError` when the waiting task is cancelled, or an ``RPCError``.
  public typealias Failure = any Error

  private struct State {
    var buffer: [[UInt8]] = []
    var head = 0
    var finished = false
    var error: RPCError?
    var waiter: CheckedContinuation<[UInt8]?, any Error>?
  }
  private let state: Mutex<State>

  /// An open stream that a transport feeds with ``yield(_:)`` and ``finish(throwing:)``.
  public init() { state = Mutex(State()) }

  /// A finished stream holding these messages.
  public init(messages: [[UInt8]]) { state = Mutex(State(buffer: messages, finished: true)) }

  /// Adds a message (transport side).
  public func yield(_ message: [UInt8]) {
    let waiter = state.withLock { state -> CheckedContinuation<[UInt8]?, any Error>? in
      guard !state.finished else { return nil }
      if let waiter = state.waiter {
        state.waiter = nil
        return waiter
      }
      state.buffer.append(message)
      return nil
    }
    waiter?.resume(returning: message)
  }

  /// Ends the stream (transport side); `error` fails the next read after buffered messages.
  public func finish(throwing error: RPCError? = nil) {
    let waiter = state.withLock { state -> CheckedContinuation<[UInt8]?, any Error>? in
      guard !state.finished else { return nil }
      state.finished = true
      state.error = error
      defer { state.waiter = nil }
      return state.waiter
    }
    if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
  }

  /// The next message, `nil` at the end.
  public func next() async throws -> [UInt8]? {
    enum Fast { case value([UInt8]?), error(any Error), wait }
    let fast = state.withLock { state -> Fast in
      if state.head < state.buffer.count {
        let message = state.buffer[state.head]
        state.head += 1
        if state.head == state.buffer.count {
          state.buffer.removeAll(keepingCapacity: true)
          state.head = 0
        }
        return .value(message)
      }
      if state.finished { return state.error.map { .error($0) } ?? .value(nil) }
      return .wait
    }
    switch fast {
    case .value(let message): return message
    case .error(let error): throw error
    case .wait: break
    }
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        let resumeNow = state.withLock { state -> Fast in
          if state.head < state.buffer.count {
            let message = state.buffer[state.head]
            state.head += 1
            return .value(message)
          }
          if state.finished { return state.error.map { .error($0) } ?? .value(nil) }
          if Task.isCancelled { return .error(CancellationError()) }
          state.waiter = continuation
          return .wait
        }
        switch resumeNow {
        case .value(let message): continuation.resume(returning: message)
        case .error(let error): continuation.resume(throwing: error)
        case .wait: break
        }
      }
    } onCancel: {
      let waiter = state.withLock { state in
        defer { state.waiter = nil }
        return state.waiter
      }
      waiter?.resume(throwing: CancellationError())
    }
  }

  /// Reads the single message of a unary or server-streaming request.
  ///
  /// - Throws: ``RPCError`` `INTERNAL` when the stream holds no message or more than one.
  public func single() async throws -> [UInt8] {
    guard let message = try await next() else {
      throw RPCError(code: .internal, message: "the request stream ended without a message")
    }
    guard try await next() == nil else {
      throw RPCError(code: .internal, message: "more than one message on a unary request stream")
    }
    return message
  }

  /// Iterates the messages.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let stream: RPCRequestStream
    /// The next message, `nil` at the end.
    public mutating func next() async throws -> [UInt8]? { try await stream.next() }
  }

  /// Returns an iterator.
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}

/// Options for one client call.
public struct CallOptions: Sendable {
  /// How long the caller waits; sent as `grpc-timeout`. `nil` waits indefinitely.
  public var timeout: Duration?
  /// Creates options.
  public init(timeout: Duration? = nil) { self.timeout = timeout }
}

/// A successful unary response with its metadata.
public struct ClientResponse: Sendable {
  /// The response headers' metadata.
  public var initialMetadata: Metadata
  /// The serialized response message.
  public var message: [UInt8]
  /// The trailers' metadata.
  public var trailingMetadata: Metadata
  /// Creates a response.
  public init(initialMetadata: Metadata, message: [UInt8], trailingMetadata: Metadata) {
    self.initialMetadata = initialMetadata
    self.message = message
    self.trailingMetadata = trailingMetadata
  }
}

/// Carries unary RPCs to a server.
///
/// The caller's task cancellation cancels the RPC (the server sees `RST_STREAM`); a failed RPC
/// throws ``RPCError`` with the server's status, message and trailing metadata.
public protocol ClientTransport: Sendable {
  /// Calls a unary method.
  ///
  /// - Parameters:
  ///   - method: The full method path, such as `/grpc.health.v1.Health/Check`.
  ///   - request: The serialized request message.
  ///   - metadata: The request metadata.
  ///   - options: Timeout and other per-call options.
  /// - Returns: The response message and its metadata.
  /// - Throws: ``RPCError`` with the status the server (or the transport) chose.
  func unary(method: String, request: [UInt8], metadata: Metadata, options: CallOptions)
    async throws(RPCError) -> ClientResponse
}
