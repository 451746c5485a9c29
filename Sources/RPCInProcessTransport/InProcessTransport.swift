public import RPCCore
import Synchronization

/// A client and a server transport joined in memory, so that service tests need no sockets.
///
/// ```swift
/// let transport = InProcessTransport()
/// let server = RPCServer(transport: transport.server, router: router)
/// try await withThrowingDiscardingTaskGroup { group in
///   group.addTask { try await server.run() }
///   let client = RPCClient(transport: transport.client)
///   ...
///   server.beginGracefulShutdown()
/// }
/// ```
///
/// It behaves like the HTTP/2 transport where handlers can tell: deadlines cancel the handler and
/// fail the call with `DEADLINE_EXCEEDED`, cancelling the caller's task cancels the handler.
public struct InProcessTransport: Sendable {
  /// The server side; give it to ``RPCServer``.
  public let server: Server
  /// The client side; give it to ``RPCClient``.
  public let client: Client

  /// Creates a joined pair.
  /// - Parameter peer: The peer address handlers see.
  public init(peer: String = "in-process") {
    server = Server()
    client = Client(server: server, peer: peer)
  }

  /// The server side of an in-process transport.
  public final class Server: ServerTransport {
    private struct State {
      var handler: (@Sendable (RPCServerCall) async -> Void)?
      var listening = false
      var shuttingDown = false
      var inFlight = 0
      var done: CheckedContinuation<Void, Never>?
      /// Calls made before ``listen(_:)``: they wait for it rather than fail.
      var waitingForListen: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    init() {}

    /// Serves calls from ``InProcessTransport/client`` until shut down and drained.
    public func listen(_ handler: @escaping @Sendable (RPCServerCall) async -> Void) async throws {
      let waiting = try state.withLock { state in
        guard !state.listening else {
          throw RPCError(code: .failedPrecondition, message: "the in-process server is already listening")
        }
        state.listening = true
        state.handler = handler
        defer { state.waitingForListen.removeAll() }
        return state.waitingForListen
      }
      for continuation in waiting { continuation.resume() }
      await withCheckedContinuation { continuation in
        let finished = state.withLock { state -> Bool in
          if state.shuttingDown && state.inFlight == 0 { return true }
          state.done = continuation
          return false
        }
        if finished { continuation.resume() }
      }
    }

    /// Refuses new calls with `UNAVAILABLE`; ``listen(_:)`` returns once in-flight calls end.
    public func beginGracefulShutdown() {
      let (done, waiting) = state.withLock {
        state -> (CheckedContinuation<Void, Never>?, [CheckedContinuation<Void, Never>]) in
        state.shuttingDown = true
        let waiting = state.waitingForListen
        state.waitingForListen.removeAll()
        guard state.inFlight == 0 else { return (nil, waiting) }
        let done = state.done
        state.done = nil
        return (done, waiting)
      }
      for continuation in waiting { continuation.resume() }
      done?.resume()
    }

    /// Registers a call; waits for ``listen(_:)`` if the server has not started yet.
    func begin() async -> (@Sendable (RPCServerCall) async -> Void)? {
      while true {
        enum Step { case handler(@Sendable (RPCServerCall) async -> Void), refused, wait }
        let step = state.withLock { state -> Step in
          if state.shuttingDown { return .refused }
          guard let handler = state.handler else { return .wait }
          state.inFlight += 1
          return .handler(handler)
        }
        switch step {
        case .handler(let handler): return handler
        case .refused: return nil
        case .wait:
          await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state -> Bool in
              if state.shuttingDown || state.handler != nil { return true }
              state.waitingForListen.append(continuation)
              return false
            }
            if resumeNow { continuation.resume() }
          }
        }
      }
    }

    func end() {
      let done = state.withLock { state -> CheckedContinuation<Void, Never>? in
        state.inFlight -= 1
        guard state.shuttingDown && state.inFlight == 0 else { return nil }
        defer { state.done = nil }
        return state.done
      }
      done?.resume()
    }
  }

  /// The client side of an in-process transport.
  public struct Client: ClientTransport {
    let server: Server
    let peer: String

    /// Calls a unary method on the joined server.
    public func unary(
      method: String, request: [UInt8], metadata: Metadata, options: CallOptions
    ) async throws(RPCError) -> ClientResponse {
      guard let handler = await server.begin() else {
        throw RPCError(code: .unavailable, message: "the in-process server is not serving")
      }
      let deadline = options.timeout.map { ContinuousClock.now + $0 }
      let collector = ResponseCollector()
      let context = ServerContext(method: method, metadata: metadata, deadline: deadline, peer: peer)
      let call = RPCServerCall(
        context: context, requests: RPCRequestStream(messages: [request]), responses: collector)
      let server = server
      let handlerTask = Task {
        await handler(call)
        collector.complete(.failure(RPCError(code: .internal, message: "the handler sent no status")))
        server.end()
      }
      let timer = deadline.map { deadline in
        Task {
          try await Task.sleep(until: deadline, clock: .continuous)
          collector.complete(.failure(RPCError(code: .deadlineExceeded, message: "deadline exceeded")))
          handlerTask.cancel()
        }
      }
      defer { timer?.cancel() }
      let result = await withTaskCancellationHandler {
        await collector.result()
      } onCancel: {
        collector.complete(.failure(RPCError(code: .cancelled, message: "the call was cancelled")))
        handlerTask.cancel()
      }
      return try result.get()
    }

    /// Calls a server-streaming method on the joined server.
    ///
    /// The handler's messages wait in the stream's buffer (a handler's writes never block, so
    /// there is no backpressure in process). The deadline covers the whole stream; cancelling
    /// the iterating task, or releasing the stream, cancels the handler.
    public func serverStreaming(
      method: String, request: [UInt8], metadata: Metadata, options: CallOptions
    ) async throws(RPCError) -> ClientResponseStream {
      guard let handler = await server.begin() else {
        throw RPCError(code: .unavailable, message: "the in-process server is not serving")
      }
      let deadline = options.timeout.map { ContinuousClock.now + $0 }
      let collector = StreamCollector()
      let context = ServerContext(method: method, metadata: metadata, deadline: deadline, peer: peer)
      let call = RPCServerCall(
        context: context, requests: RPCRequestStream(messages: [request]), responses: collector)
      let server = server
      let handlerTask = Task {
        await handler(call)
        collector.fail(RPCError(code: .internal, message: "the handler sent no status"))
        server.end()
      }
      let timer = deadline.map { deadline in
        Task {
          try await Task.sleep(until: deadline, clock: .continuous)
          collector.fail(RPCError(code: .deadlineExceeded, message: "deadline exceeded"))
          handlerTask.cancel()
        }
      }
      collector.onEnd {
        timer?.cancel()
        handlerTask.cancel()
      }
      let result = await withTaskCancellationHandler {
        await collector.headers()
      } onCancel: {
        collector.fail(RPCError(code: .cancelled, message: "the call was cancelled"))
      }
      return try result.get()
    }
  }
}

/// Turns the response parts of one in-process server-streaming call into a
/// ``ClientResponseStream``: `.metadata` creates it, `.message` feeds it, `.status` ends it (a
/// `.status` first is a Trailers-Only response).
private final class StreamCollector: RPCResponseWriter {
  private typealias Waiter = CheckedContinuation<Result<ClientResponseStream, RPCError>, Never>
  private struct State {
    /// The caller waiting in ``headers()``.
    var waiter: Waiter?
    /// The outcome of the headers when it came before the caller waited.
    var headers: Result<ClientResponseStream, RPCError>?
    var headersDone = false
    var continuation: ClientResponseStream.Continuation?
    var ended = false
    var onEnd: (@Sendable () -> Void)?
  }
  private let state = Mutex(State())

  /// Sets what runs once the call ends for any reason (status, deadline, cancellation): stop
  /// the timer, cancel the handler. Runs at once when the call has already ended.
  func onEnd(_ body: @escaping @Sendable () -> Void) {
    let ended = state.withLock { state -> Bool in
      if !state.ended { state.onEnd = body }
      return state.ended
    }
    if ended { body() }
  }

  func write(_ parts: [RPCResponsePart]) {
    for part in parts {
      switch part {
      case .metadata(let metadata): open(metadata)
      case .message(let message):
        state.withLock { $0.ended ? nil : $0.continuation }?.yield(message)
      case .status(let code, let message, let trailers):
        if code == .ok {
          open([:])
          end(.success(trailers))
        } else {
          end(.failure(RPCError(code: code, message: message, metadata: trailers)))
        }
      }
    }
  }

  /// Creates the stream from the response headers and hands it to the caller (once).
  private func open(_ initialMetadata: Metadata) {
    guard state.withLock({ !$0.headersDone && !$0.ended }) else { return }
    let (stream, continuation) = ClientResponseStream.makeStream(initialMetadata: initialMetadata) {
      [weak self] in self?.fail(RPCError(code: .cancelled, message: "the call was cancelled"))
    }
    let waiter = state.withLock { state -> Waiter? in
      state.headersDone = true
      state.continuation = continuation
      guard let waiter = state.waiter else {
        state.headers = .success(stream)
        return nil
      }
      state.waiter = nil
      return waiter
    }
    waiter?.resume(returning: .success(stream))
  }

  /// Ends the call with `error` unless it has ended.
  func fail(_ error: RPCError) { end(.failure(error)) }

  private func end(_ outcome: Result<Metadata, RPCError>) {
    enum Delivery {
      case none
      case headers(Waiter?, RPCError)
      case stream(ClientResponseStream.Continuation?)
    }
    let (delivery, onEnd) = state.withLock { state -> (Delivery, (@Sendable () -> Void)?) in
      guard !state.ended else { return (.none, nil) }
      state.ended = true
      defer { state.onEnd = nil }
      guard state.headersDone else {
        state.headersDone = true
        // Only a failure ends a call before its headers (`OK` opens the stream first).
        guard case .failure(let error) = outcome else { return (.none, state.onEnd) }
        let waiter = state.waiter
        state.waiter = nil
        if waiter == nil { state.headers = .failure(error) }
        return (.headers(waiter, error), state.onEnd)
      }
      return (.stream(state.continuation), state.onEnd)
    }
    switch delivery {
    case .none: break
    case .headers(let waiter, let error): waiter?.resume(returning: .failure(error))
    case .stream(let continuation):
      switch outcome {
      case .success(let trailers): continuation?.finish(trailingMetadata: trailers)
      case .failure(let error): continuation?.finish(throwing: error)
      }
    }
    onEnd?()
  }

  /// Waits for the response headers (the stream) or the call's failure before them.
  func headers() async -> Result<ClientResponseStream, RPCError> {
    await withCheckedContinuation { (continuation: Waiter) in
      let ready = state.withLock { state -> Result<ClientResponseStream, RPCError>? in
        if let headers = state.headers {
          state.headers = nil
          return headers
        }
        state.waiter = continuation
        return nil
      }
      if let ready { continuation.resume(returning: ready) }
    }
  }
}

/// Collects the response parts of one in-process call into a result.
private final class ResponseCollector: RPCResponseWriter {
  private struct State {
    var initial: Metadata = [:]
    var message: [UInt8]?
    var result: Result<ClientResponse, RPCError>?
    var waiter: CheckedContinuation<Result<ClientResponse, RPCError>, Never>?
  }
  private let state = Mutex(State())

  func write(_ parts: [RPCResponsePart]) {
    for part in parts {
      switch part {
      case .metadata(let metadata):
        state.withLock { $0.initial = metadata }
      case .message(let message):
        state.withLock { state in
          if state.message == nil { state.message = message }
        }
      case .status(let code, let message, let trailers):
        let result = state.withLock { state -> Result<ClientResponse, RPCError> in
          if code == .ok {
            guard let body = state.message else {
              return .failure(RPCError(code: .internal, message: "the server sent no response message"))
            }
            return .success(
              ClientResponse(initialMetadata: state.initial, message: body, trailingMetadata: trailers))
          }
          return .failure(RPCError(code: code, message: message, metadata: trailers))
        }
        complete(result)
      }
    }
  }

  func complete(_ result: Result<ClientResponse, RPCError>) {
    let waiter = state.withLock { state -> CheckedContinuation<Result<ClientResponse, RPCError>, Never>? in
      guard state.result == nil else { return nil }
      state.result = result
      defer { state.waiter = nil }
      return state.waiter
    }
    waiter?.resume(returning: result)
  }

  func result() async -> Result<ClientResponse, RPCError> {
    await withCheckedContinuation { continuation in
      let ready = state.withLock { state -> Result<ClientResponse, RPCError>? in
        if let result = state.result { return result }
        state.waiter = continuation
        return nil
      }
      if let ready { continuation.resume(returning: ready) }
    }
  }
}
