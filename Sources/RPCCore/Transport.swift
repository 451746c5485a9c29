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
///
/// A streaming handler paces itself with ``waitForRoom()``: it returns once the transport holds at
/// most a bounded amount of this call's response (the client's flow-control window or socket is
/// open again), so a slow reader costs bounded memory.
public protocol RPCResponseWriter: Sendable {
  /// Sends parts of the response, in order.
  func write(_ parts: [RPCResponsePart])
  /// Waits while the transport holds more than its bound of this call's unsent response bytes;
  /// returns at once when it holds less, and once the call is over (cancelled, timed out, reset).
  func waitForRoom() async
}

extension RPCResponseWriter {
  /// A transport that never holds a response back (in process, collected whole) has room always.
  public func waitForRoom() async {}
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
    /// The first waiting message, kept apart from ``buffer`` so that a stream of one message (a
    /// unary request) allocates no array for it; when set, it comes before ``buffer``'s.
    var first: [UInt8]?
    var buffer: [[UInt8]] = []
    var head = 0
    var finished = false
    var error: RPCError?
    var waiter: CheckedContinuation<[UInt8]?, any Error>?

    /// The number of messages waiting.
    var count: Int { (first == nil ? 0 : 1) + buffer.count - head }

    mutating func append(_ message: [UInt8]) {
      if first == nil && head == buffer.count {
        first = message
      } else {
        buffer.append(message)
      }
    }

    /// Takes the next waiting message.
    mutating func pop() -> [UInt8]? {
      if let message = first {
        first = nil
        return message
      }
      guard head < buffer.count else { return nil }
      let message = buffer[head]
      head += 1
      if head == buffer.count {
        buffer.removeAll(keepingCapacity: true)
        head = 0
      }
      return message
    }
  }
  private let state: Mutex<State>

  /// An open stream that a transport feeds with ``yield(_:)`` and ``finish(throwing:)``.
  public init() { state = Mutex(State()) }

  /// A finished stream holding these messages.
  public init(messages: [[UInt8]]) { state = Mutex(State(buffer: messages, finished: true)) }

  /// Makes the stream open and empty again, for the next call of a transport that keeps its
  /// streams: only when nothing else holds it (the call's handler is done with it).
  package func reset() {
    state.withLock { state in
      precondition(state.waiter == nil, "RPCRequestStream reset while a reader waits")
      state = State()
    }
  }

  /// Adds a message (transport side).
  public func yield(_ message: [UInt8]) {
    let waiter = state.withLock { state -> CheckedContinuation<[UInt8]?, any Error>? in
      guard !state.finished else { return nil }
      if let waiter = state.waiter {
        state.waiter = nil
        return waiter
      }
      state.append(message)
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
      if let message = state.pop() { return .value(message) }
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
          if let message = state.pop() { return .value(message) }
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

  /// The one message of a stream that has already ended without an error after exactly one
  /// message, taken without suspending; `nil` otherwise (then await ``single()``, which also
  /// reports what is wrong). A unary request usually ends in the DATA frame that carries it, so
  /// its handler gets the message here without the awaits of ``single()``.
  public func takeSingleIfComplete() -> [UInt8]? {
    state.withLock { state in
      guard state.finished, state.error == nil, state.count == 1 else { return nil }
      return state.pop()
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

  /// Calls a server-streaming method.
  ///
  /// Returns once the response headers arrive; the messages then arrive through the returned
  /// stream, which ends at the server's status. A transport with flow control stops reading the
  /// call's messages while the stream's buffer is full (see ``ClientResponseStream``).
  ///
  /// - Parameters:
  ///   - method: The full method path, such as `/substatus.v1.EventService/WatchEvents`.
  ///   - request: The serialized request message.
  ///   - metadata: The request metadata.
  ///   - options: Timeout (for the whole stream) and other per-call options.
  /// - Returns: The response stream, with the initial metadata.
  /// - Throws: ``RPCError`` when the call fails before the response headers: a Trailers-Only
  ///   response with a non-`OK` status (its message and trailing metadata kept), `UNAVAILABLE`
  ///   without a connection, `DEADLINE_EXCEEDED`, `CANCELLED` when the task is cancelled.
  func serverStreaming(method: String, request: [UInt8], metadata: Metadata, options: CallOptions)
    async throws(RPCError) -> ClientResponseStream
}

/// The serialized response messages of a server-streaming call, in order, as they arrive.
///
/// Iteration ends (`nil`) when the server ends the call with `OK`; any other status is thrown
/// as an ``RPCError`` carrying the status message and the trailing metadata (for example
/// `grpc-status-details-bin`). After the end, ``trailingMetadata`` holds the trailers.
///
/// Cancelling the iterating task cancels the RPC (an HTTP/2 transport resets the stream), and so
/// does releasing the stream before its end: a caller that stops early needs to do nothing else.
///
/// ```swift
/// let stream = try await transport.serverStreaming(
///   method: "/substatus.v1.EventService/WatchEvents", request: bytes, metadata: [:],
///   options: CallOptions())
/// for try await message in stream { handle(message) }
/// ```
///
/// Transports feed it through a ``Continuation`` (``makeStream(initialMetadata:bufferSize:onResume:onCancel:)``).
/// Messages wait in a buffer until the consumer takes them; when the buffer holds `bufferSize`
/// bytes or more, ``Continuation/yield(_:)`` returns `false` and the transport stops reading the
/// call until `onResume` runs (the consumer has taken the buffer down to half).
public final class ClientResponseStream: AsyncSequence, Sendable {
  /// The element type: one serialized message.
  public typealias Element = [UInt8]
  /// The error type: the call's non-`OK` status.
  public typealias Failure = RPCError

  /// The response headers' metadata.
  public let initialMetadata: Metadata
  private let core: Core

  private init(initialMetadata: Metadata, core: Core) {
    self.initialMetadata = initialMetadata
    self.core = core
  }

  deinit {
    core.terminate(RPCError(code: .cancelled, message: "the response stream was released"), thrownByCaller: true)
  }

  /// The trailers' metadata once the stream has ended (with any status); empty before.
  public var trailingMetadata: Metadata { core.trailingMetadata }

  /// The bytes of messages received and not yet taken by the consumer.
  public var bufferedBytes: Int { core.bufferedBytes }

  /// Creates a stream and the continuation a transport feeds it with.
  ///
  /// - Parameters:
  ///   - initialMetadata: The response headers' metadata.
  ///   - bufferSize: The buffered bytes at which ``Continuation/yield(_:)`` starts returning
  ///     `false`; `Int.max` for a transport without flow control.
  ///   - onResume: Runs (on the consumer's task, so it must not block) once the consumer has
  ///     taken the buffer down to half of `bufferSize` after a `yield` returned `false`.
  ///   - onCancel: Runs once when the consumer ends the call before its end: its task was
  ///     cancelled, or it released the stream. The transport cancels the RPC.
  /// - Returns: The stream for the caller and the continuation for the transport.
  public static func makeStream(
    initialMetadata: Metadata, bufferSize: Int = .max, onResume: @escaping @Sendable () -> Void = {},
    onCancel: @escaping @Sendable () -> Void
  ) -> (stream: ClientResponseStream, continuation: Continuation) {
    let core = Core(bufferSize: bufferSize, onResume: onResume, onCancel: onCancel)
    return (ClientResponseStream(initialMetadata: initialMetadata, core: core), Continuation(core: core))
  }

  /// A stream that has already ended with `OK`: the response of a Trailers-Only `OK`.
  public static func finished(initialMetadata: Metadata = [:], trailingMetadata: Metadata) -> ClientResponseStream {
    let (stream, continuation) = makeStream(initialMetadata: initialMetadata, onCancel: {})
    continuation.finish(trailingMetadata: trailingMetadata)
    return stream
  }

  /// The transport's side of a ``ClientResponseStream``.
  public struct Continuation: Sendable {
    fileprivate let core: Core

    /// Adds a received message.
    ///
    /// - Returns: `false` when the buffer is full: stop reading the call until `onResume`.
    @discardableResult
    public func yield(_ message: [UInt8]) -> Bool { core.yield(message) }

    /// Ends the stream with `OK`; the consumer sees the end after the buffered messages.
    public func finish(trailingMetadata: Metadata) { core.finish(.success(trailingMetadata)) }

    /// Ends the stream with a non-`OK` status; the consumer gets `error` after the buffered
    /// messages, and ``ClientResponseStream/trailingMetadata`` is `error.metadata`.
    public func finish(throwing error: RPCError) { core.finish(.failure(error)) }
  }

  /// Ends the call with `error` now, dropping buffered messages, and cancels the RPC unless it
  /// has already ended: for a consumer that cannot use what it received and throws `error`
  /// itself (later reads return `nil`).
  func terminate(_ error: RPCError) { core.terminate(error, thrownByCaller: true) }

  /// The next message; `nil` after an `OK` end, or once the error has been thrown.
  public func next() async throws(RPCError) -> [UInt8]? {
    try await core.next()
  }

  /// Iterates the messages.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let stream: ClientResponseStream
    /// The next message, `nil` at the end.
    public mutating func next() async throws(RPCError) -> [UInt8]? { try await stream.next() }
    /// The next message, `nil` at the end.
    public mutating func next(isolation actor: isolated (any Actor)?) async throws(RPCError) -> [UInt8]? {
      try await stream.next()
    }
  }

  /// Returns an iterator.
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }

  /// The state shared by the stream and its continuation.
  fileprivate final class Core: Sendable {
    private typealias Waiter = CheckedContinuation<Result<[UInt8]?, RPCError>, Never>
    private struct State {
      var buffer: [[UInt8]] = []
      var head = 0
      var bufferedBytes = 0
      /// A `yield` returned false and `onResume` has not run since.
      var paused = false
      /// How the call ended, once it has; delivered after the buffered messages.
      var end: Result<Metadata, RPCError>?
      /// The end has been delivered to the consumer (`nil` from then on).
      var endDelivered = false
      var trailing: Metadata = [:]
      var waiter: Waiter?
    }
    private let state = Mutex(State())
    private let bufferSize: Int
    private let onResume: @Sendable () -> Void
    private let onCancel: @Sendable () -> Void

    init(bufferSize: Int, onResume: @escaping @Sendable () -> Void, onCancel: @escaping @Sendable () -> Void) {
      self.bufferSize = bufferSize
      self.onResume = onResume
      self.onCancel = onCancel
    }

    var trailingMetadata: Metadata { state.withLock { $0.trailing } }
    var bufferedBytes: Int { state.withLock { $0.bufferedBytes } }

    func yield(_ message: [UInt8]) -> Bool {
      enum Outcome { case hand(Waiter), room(Bool) }
      let outcome = state.withLock { state -> Outcome in
        guard state.end == nil else { return .room(true) }
        if let waiter = state.waiter {
          state.waiter = nil
          return .hand(waiter)
        }
        state.buffer.append(message)
        state.bufferedBytes += message.count
        if state.bufferedBytes >= bufferSize { state.paused = true }
        return .room(!state.paused)
      }
      switch outcome {
      case .hand(let waiter):
        waiter.resume(returning: .success(message))
        return true
      case .room(let room):
        return room
      }
    }

    func finish(_ end: Result<Metadata, RPCError>) {
      let waiter = state.withLock { state -> Waiter? in
        guard state.end == nil else { return nil }
        state.end = end
        switch end {
        case .success(let trailers): state.trailing = trailers
        case .failure(let error): state.trailing = error.metadata
        }
        guard let waiter = state.waiter else { return nil }
        state.waiter = nil
        state.endDelivered = true
        return waiter
      }
      waiter?.resume(returning: end.map { _ in nil })
    }

    /// Ends the call from the consumer's side: drops the buffer, makes `error` the end the
    /// consumer sees (unless it has seen one; `thrownByCaller`: it throws `error` itself), and
    /// cancels the RPC unless the transport had already ended it.
    func terminate(_ error: RPCError, thrownByCaller: Bool = false) {
      let (waiter, cancel) = state.withLock { state -> (Waiter?, Bool) in
        state.buffer.removeAll()
        state.head = 0
        state.bufferedBytes = 0
        guard !state.endDelivered else { return (nil, false) }
        // An end from the transport that the consumer has not reached is replaced: a consumer
        // that gives up before the end must not see a clean end after dropped messages.
        let transportEnded = state.end != nil
        state.end = .failure(error)
        if !transportEnded { state.trailing = error.metadata }
        state.endDelivered = thrownByCaller
        guard let waiter = state.waiter else { return (nil, !transportEnded) }
        state.waiter = nil
        state.endDelivered = true
        return (waiter, !transportEnded)
      }
      if cancel { onCancel() }
      waiter?.resume(returning: .failure(error))
    }

    private enum Step {
      case value([UInt8]?, resume: Bool)
      case error(RPCError)
      case wait
    }

    /// Takes the next message or the end; `.wait` when neither is there.
    private func take(_ state: inout State) -> Step {
      if state.head < state.buffer.count {
        let message = state.buffer[state.head]
        state.head += 1
        if state.head == state.buffer.count {
          state.buffer.removeAll(keepingCapacity: true)
          state.head = 0
        }
        state.bufferedBytes -= message.count
        var resume = false
        if state.paused && state.bufferedBytes <= bufferSize / 2 && state.end == nil {
          state.paused = false
          resume = true
        }
        return .value(message, resume: resume)
      }
      guard let end = state.end else { return .wait }
      if state.endDelivered { return .value(nil, resume: false) }
      state.endDelivered = true
      switch end {
      case .success: return .value(nil, resume: false)
      case .failure(let error): return .error(error)
      }
    }

    func next() async throws(RPCError) -> [UInt8]? {
      if Task.isCancelled { terminate(RPCError(code: .cancelled, message: "the call was cancelled")) }
      switch state.withLock({ take(&$0) }) {
      case .value(let message, let resume):
        if resume { onResume() }
        return message
      case .error(let error): throw error
      case .wait: break
      }
      let result = await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: Waiter) in
          let step = state.withLock { state -> Step in
            let step = take(&state)
            if case .wait = step {
              precondition(state.waiter == nil, "ClientResponseStream is iterated by two tasks at once")
              state.waiter = continuation
            }
            return step
          }
          switch step {
          case .value(let message, let resume):
            if resume { onResume() }
            continuation.resume(returning: .success(message))
          case .error(let error): continuation.resume(returning: .failure(error))
          case .wait: break
          }
        }
      } onCancel: {
        terminate(RPCError(code: .cancelled, message: "the call was cancelled"))
      }
      return try result.get()
    }
  }
}
