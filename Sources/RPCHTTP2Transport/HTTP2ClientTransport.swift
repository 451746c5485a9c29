public import RPCCore
public import SubstatusClock
import CLinuxShims
import Glibc
import Synchronization
import SubstatusWire

/// A gRPC client transport on HTTP/2 (libnghttp2) over one multiplexed connection, driven by an
/// event loop thread of its own.
///
/// The connection opens on the first call and reopens after a failure with exponential backoff
/// (gRPC's connection-backoff: 1 s initial, ×1.6, ±20 % jitter, 120 s cap). While it is backing
/// off, calls fail at once with `UNAVAILABLE`, as gRPC's fail-fast calls do.
///
/// Unary and server-streaming calls share the connection. A response stream's HTTP/2 window is
/// reopened as its consumer reads: one that stops reading holds at most
/// ``Configuration/responseStreamBufferSize`` bytes plus the stream's window, and the server
/// waits; the connection's window is reopened at once, so other calls go on.
///
/// ```swift
/// let transport = try HTTP2ClientTransport(configuration: .init(host: "127.0.0.1", port: 50051))
/// defer { transport.close() }
/// let client = RPCClient(transport: transport)
/// ```
public final class HTTP2ClientTransport: ClientTransport {
  /// Settings of the client transport.
  public struct Configuration: Sendable {
    /// The server's host name or address.
    public var host: String
    /// The server's port.
    public var port: Int
    /// How long one connection attempt may take.
    public var connectTimeout: Duration = .seconds(20)
    /// The wait before the first reconnection attempt.
    public var initialBackoff: Duration = .seconds(1)
    /// The longest wait between attempts.
    public var maxBackoff: Duration = .seconds(120)
    /// The growth of the wait after each failed attempt.
    public var backoffMultiplier: Double = 1.6
    /// The random spread of each wait, as a fraction.
    public var backoffJitter: Double = 0.2
    /// The largest response message accepted; larger ones fail with `RESOURCE_EXHAUSTED`.
    public var maxReceiveMessageSize: Int = 4 << 20
    /// The response bytes a server-streaming call buffers for a consumer that does not keep up.
    /// Past it the transport stops reopening the stream's HTTP/2 window (4 MiB), so the server
    /// stops sending: a call holds at most this, the window and one partial message.
    public var responseStreamBufferSize: Int = 1 << 20
    /// The `:authority` sent; defaults to `host:port`.
    public var authority: String?
    /// TLS (ALPN `h2`, the server verified); `nil` speaks cleartext HTTP/2 (h2c).
    public var tls: ClientTLSConfiguration? = nil
    /// The clock of the connect deadline, call deadlines and backoff (a ``ManualClock`` in tests).
    public var clock: any ServiceClock = SystemClock()

    /// Creates a configuration with defaults.
    public init(host: String, port: Int) {
      self.host = host
      self.port = port
    }
  }

  /// The configuration this transport was created with.
  public let configuration: Configuration
  private let loop: EventLoop
  private let manager: ClientConnectionManager
  private let nextCallID = Atomic<UInt64>(1)
  private let closed = Atomic<Bool>(false)

  /// Starts the transport's event loop; no connection is opened until the first call.
  ///
  /// - Throws: ``TLSError`` when the CA file or client certificate cannot be loaded;
  ///   ``SocketError`` when the event loop cannot be created.
  public init(configuration: Configuration) throws {
    clinux_ignore_sigpipe()
    self.configuration = configuration
    let tlsContext = try configuration.tls.map { try TLSContext.client($0) }
    loop = try EventLoop(name: "h2-client", clock: configuration.clock)
    manager = ClientConnectionManager(loop: loop, configuration: configuration, tlsContext: tlsContext)
    loop.startThread {}
  }

  deinit { close() }

  /// Fails every call in progress with `UNAVAILABLE`, closes the connection and stops the loop.
  public func close() {
    guard !closed.exchange(true, ordering: .relaxed) else { return }
    let manager = manager
    let loop = loop
    loop.execute {
      manager.shutdown()
      loop.stop()
    }
  }

  /// Calls a unary method.
  ///
  /// - Throws: ``RPCError`` with the server's status; `UNAVAILABLE` when no connection could be
  ///   made, `DEADLINE_EXCEEDED` after `options.timeout`, `CANCELLED` when the task is cancelled.
  public func unary(
    method: String, request: [UInt8], metadata: Metadata, options: CallOptions
  ) async throws(RPCError) -> ClientResponse {
    try await start(method: method, request: request, metadata: metadata, options: options) { .unary($0) }
  }

  /// Calls a server-streaming method; returns once the response headers arrive.
  ///
  /// Messages are delivered as they arrive. A consumer that falls behind by
  /// ``Configuration/responseStreamBufferSize`` bytes stops the transport from reopening the
  /// stream's flow-control window, so the server waits for it. `options.timeout` covers the whole
  /// stream (`grpc-timeout`); cancelling the iterating task or releasing the stream resets it.
  ///
  /// - Throws: ``RPCError``: a Trailers-Only error with its status, message and trailing
  ///   metadata; `UNAVAILABLE` when no connection could be made, `DEADLINE_EXCEEDED`,
  ///   `CANCELLED` when the task is cancelled before the headers.
  public func serverStreaming(
    method: String, request: [UInt8], metadata: Metadata, options: CallOptions
  ) async throws(RPCError) -> ClientResponseStream {
    try await start(method: method, request: request, metadata: metadata, options: options) { .streamHeaders($0) }
  }

  /// Starts a call on the loop and waits for what `responder` is resumed with: the whole
  /// response, or a stream's headers. Cancelling the task cancels the call.
  private func start<Response: Sendable>(
    method: String, request: [UInt8], metadata: Metadata, options: CallOptions,
    responder: @escaping @Sendable (CheckedContinuation<Result<Response, RPCError>, Never>) -> ClientCall.Responder
  ) async throws(RPCError) -> Response {
    guard !closed.load(ordering: .relaxed) else {
      throw RPCError(code: .unavailable, message: "the client transport is closed")
    }
    let id = nextCallID.wrappingAdd(1, ordering: .relaxed).oldValue
    let manager = manager
    let loop = loop
    let call = ClientCallRequest(id: id, method: method, request: request, metadata: metadata, timeout: options.timeout)
    let result = await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        loop.execute { manager.start(call, responder(continuation)) }
      }
    } onCancel: {
      loop.execute { manager.cancel(id) }
    }
    return try result.get()
  }
}

extension HTTP2ClientTransport {
  /// The HTTP/2 receive windows of the calls' open streams: how many more DATA bytes each
  /// server may send before the transport reopens the window (0: a stream's consumer is behind).
  func openStreamReceiveWindows() async -> [Int] {
    let manager = manager
    return await withCheckedContinuation { continuation in
      let scheduled = loop.execute { continuation.resume(returning: manager.openStreamReceiveWindows()) }
      if !scheduled { continuation.resume(returning: []) }
    }
  }
}

struct ClientCallRequest: Sendable {
  var id: UInt64
  var method: String
  var request: [UInt8]
  var metadata: Metadata
  var timeout: Duration?
}

typealias ClientCallContinuation = CheckedContinuation<Result<ClientResponse, RPCError>, Never>
typealias ClientStreamContinuation = CheckedContinuation<Result<ClientResponseStream, RPCError>, Never>

/// One call in flight on the client.
final class ClientCall {
  /// Who hears of the call's outcome.
  enum Responder {
    /// A unary caller, waiting for the whole response.
    case unary(ClientCallContinuation)
    /// A server-streaming caller, waiting for the response headers.
    case streamHeaders(ClientStreamContinuation)
    /// A server-streaming caller's stream, after the headers.
    case stream(ClientResponseStream.Continuation)
  }

  let request: ClientCallRequest
  private var responder: Responder?
  /// Whether the call is server-streaming (its messages go to a ``ClientResponseStream``).
  let isStreaming: Bool
  var streamID: Int32?
  /// The connection the call's stream is on.
  var connection: ClientConnection?
  var deadlineTimer: UInt64?
  var initialMetadata: Metadata?
  var deframer: GRPCDeframer
  var message: [UInt8]?
  var failure: RPCError?
  /// The stream's consumer is behind: received bytes are not given back to the stream's window.
  var paused = false
  /// DATA bytes received while paused, given back to the stream's window on resume.
  var heldBytes = 0

  init(request: ClientCallRequest, responder: Responder, maxMessageLength: Int) {
    self.request = request
    self.responder = responder
    if case .unary = responder { isStreaming = false } else { isStreaming = true }
    deframer = GRPCDeframer(maxMessageLength: maxMessageLength)
  }

  var isComplete: Bool { responder == nil }

  /// Ends the call with a unary result or any failure.
  func complete(_ result: Result<ClientResponse, RPCError>) {
    switch (responder, result) {
    case (.unary(let continuation), _): continuation.resume(returning: result)
    case (.streamHeaders(let continuation), .failure(let error)): continuation.resume(returning: .failure(error))
    case (.stream(let continuation), .failure(let error)): continuation.finish(throwing: error)
    case (.streamHeaders, .success), (.stream, .success):
      preconditionFailure("a unary response completes a streaming call")
    case (nil, _): return
    }
    responder = nil
  }

  /// Ends a streaming call with `OK` (a Trailers-Only `OK` gives the caller an ended stream).
  func completeStream(trailingMetadata: Metadata) {
    switch responder {
    case .streamHeaders(let continuation):
      continuation.resume(returning: .success(.finished(trailingMetadata: trailingMetadata)))
    case .stream(let continuation): continuation.finish(trailingMetadata: trailingMetadata)
    case .unary: preconditionFailure("a streaming end completes a unary call")
    case nil: return
    }
    responder = nil
  }

  /// Hands the caller of a streaming call its stream, built from the response headers.
  func openStream(_ stream: ClientResponseStream, _ continuation: ClientResponseStream.Continuation) {
    guard case .streamHeaders(let waiting) = responder else { return }
    responder = .stream(continuation)
    waiting.resume(returning: .success(stream))
  }

  /// Adds a message to the caller's stream; `false` when its buffer is full.
  func yield(_ message: [UInt8]) -> Bool {
    guard case .stream(let continuation) = responder else { return true }
    return continuation.yield(message)
  }
}

/// Owns the client's connection and calls; confined to the client's loop thread.
final class ClientConnectionManager: @unchecked Sendable {
  private enum State {
    case idle
    case connecting(ClientConnection)
    case ready(ClientConnection)
    case backingOff(until: Duration, reason: String)
    case shutDown
  }

  private let loop: EventLoop
  let configuration: HTTP2ClientTransport.Configuration
  let tlsContext: TLSContext?
  private var state: State = .idle
  /// Every open connection, including draining ones, so that shutdown closes them all.
  private var connections: [ObjectIdentifier: ClientConnection] = [:]
  private var waiting: [ClientCall] = []
  private var calls: [UInt64: ClientCall] = [:]
  private var cancelledBeforeStart: Set<UInt64> = []
  private var backoff: Duration

  init(loop: EventLoop, configuration: HTTP2ClientTransport.Configuration, tlsContext: TLSContext?) {
    self.loop = loop
    self.configuration = configuration
    self.tlsContext = tlsContext
    backoff = configuration.initialBackoff
  }

  func start(_ request: ClientCallRequest, _ responder: ClientCall.Responder) {
    let call = ClientCall(
      request: request, responder: responder, maxMessageLength: configuration.maxReceiveMessageSize)
    if cancelledBeforeStart.remove(request.id) != nil {
      return call.complete(.failure(RPCError(code: .cancelled, message: "the call was cancelled")))
    }
    calls[request.id] = call
    if let timeout = request.timeout {
      call.deadlineTimer = loop.schedule(after: timeout) { [weak self] in
        self?.fail(request.id, RPCError(code: .deadlineExceeded, message: "deadline exceeded"), reset: true)
      }
    }
    switch state {
    case .ready(let connection) where !connection.isDraining:
      connection.submit(call)
    case .ready, .idle:
      waiting.append(call)
      connect()
    case .connecting:
      waiting.append(call)
    case .backingOff(let until, let reason):
      if loop.now >= until {
        waiting.append(call)
        connect()
      } else {
        fail(request.id, RPCError(code: .unavailable, message: reason), reset: false)
      }
    case .shutDown:
      fail(request.id, RPCError(code: .unavailable, message: "the client transport is closed"), reset: false)
    }
  }

  func cancel(_ id: UInt64) {
    guard calls[id] != nil else {
      cancelledBeforeStart.insert(id)
      return
    }
    fail(id, RPCError(code: .cancelled, message: "the call was cancelled"), reset: true)
  }

  /// The consumer of a streaming call ended it early (task cancelled, stream released). Unlike
  /// ``cancel(_:)`` the call has started, so an id not found is a call already over.
  func cancelStream(_ id: UInt64) {
    fail(id, RPCError(code: .cancelled, message: "the call was cancelled"), reset: true)
  }

  /// The consumer of a streaming call caught up: reopen its window.
  func resumeStream(_ id: UInt64) {
    guard let call = calls[id] else { return }
    call.connection?.resumeReading(call)
  }

  /// Completes a call with an error, resetting its stream if it has one.
  func fail(_ id: UInt64, _ error: RPCError, reset: Bool) {
    guard let call = calls.removeValue(forKey: id) else { return }
    if let timer = call.deadlineTimer { loop.cancelTimer(timer) }
    waiting.removeAll { $0 === call }
    if reset, let streamID = call.streamID { call.connection?.reset(streamID: streamID) }
    call.connection = nil
    call.complete(.failure(error))
  }

  /// Completes a call (called by the connection when its stream closed).
  func finished(_ call: ClientCall, _ result: Result<ClientResponse, RPCError>) {
    guard remove(call) else { return }
    call.complete(result)
  }

  /// Completes a streaming call with `OK` (called by the connection at the trailers).
  func finishedStream(_ call: ClientCall, trailingMetadata: Metadata) {
    guard remove(call) else { return }
    call.completeStream(trailingMetadata: trailingMetadata)
  }

  private func remove(_ call: ClientCall) -> Bool {
    guard calls.removeValue(forKey: call.request.id) != nil else { return false }
    if let timer = call.deadlineTimer { loop.cancelTimer(timer) }
    call.connection = nil
    return true
  }

  /// Builds the stream of a streaming call whose response headers arrived: its consumer's
  /// progress and cancellation come back to this manager on the loop.
  func makeStream(for call: ClientCall, initialMetadata: Metadata)
    -> (ClientResponseStream, ClientResponseStream.Continuation)
  {
    let id = call.request.id
    let loop = loop
    // The stream holds the manager until it is released (the call's end, once it is over,
    // drops the manager's hold on the stream).
    let manager = self
    return ClientResponseStream.makeStream(
      initialMetadata: initialMetadata, bufferSize: configuration.responseStreamBufferSize,
      onResume: { loop.execute { manager.resumeStream(id) } },
      onCancel: { loop.execute { manager.cancelStream(id) } })
  }

  private func connect() {
    do {
      let connection = try ClientConnection(manager: self, loop: loop)
      connections[ObjectIdentifier(connection)] = connection
      state = .connecting(connection)
    } catch {
      connectionFailed(reason: "cannot connect to \(configuration.host):\(configuration.port): \(error)")
    }
  }

  func connectionReady(_ connection: ClientConnection) {
    guard case .connecting(let current) = state, current === connection else { return }
    state = .ready(connection)
    backoff = configuration.initialBackoff
    let pending = waiting
    waiting.removeAll()
    for call in pending where !call.isComplete { connection.submit(call) }
  }

  /// The connection could not be made: calls waiting fail, and the next attempt waits.
  func connectionFailed(reason: String) {
    let jitter = 1 + Double.random(in: -configuration.backoffJitter...configuration.backoffJitter)
    let wait = backoff * jitter
    backoff = min(backoff * configuration.backoffMultiplier, configuration.maxBackoff)
    state = .backingOff(until: loop.now + wait, reason: reason)
    let pending = waiting
    waiting.removeAll()
    for call in pending { fail(call.request.id, RPCError(code: .unavailable, message: reason), reset: false) }
  }

  /// A connection went away with `error`; its calls have been failed by the connection. One that
  /// was still connecting (TCP or TLS) fails the waiting calls with the same error.
  func connectionClosed(_ connection: ClientConnection, error: RPCError) {
    connections[ObjectIdentifier(connection)] = nil
    switch state {
    case .ready(let current) where current === connection: state = .idle
    case .connecting(let current) where current === connection:
      connectionFailed(reason: error.message)
    default: break
    }
    if !waiting.isEmpty, case .idle = state { connect() }
  }

  /// The server sent GOAWAY: new calls go to a new connection.
  func connectionDraining(_ connection: ClientConnection) {
    if case .ready(let current) = state, current === connection { state = .idle }
  }

  /// The receive windows of the streams open on every connection (for tests of backpressure).
  func openStreamReceiveWindows() -> [Int] {
    connections.values.flatMap { $0.openStreamReceiveWindows() }
  }

  func shutdown() {
    let error = RPCError(code: .unavailable, message: "the client transport is closed")
    state = .shutDown
    for connection in Array(connections.values) { connection.close(error: error) }
    for id in Array(calls.keys) { fail(id, error, reset: false) }
  }
}

/// One client HTTP/2 connection; confined to the loop thread. Its ``ConnectionPump`` moves the
/// bytes; the connect deadline (``HTTP2ClientTransport/Configuration/connectTimeout``, TCP and
/// TLS) and the drain after the server's GOAWAY are its ``ConnectionStateMachine``'s.
final class ClientConnection: ConnectionPumpOwner {
  private unowned let manager: ClientConnectionManager
  private let pump: ConnectionPump<ClientConnection>
  private var session: H2Session { pump.session }
  private var streams: [Int32: ClientCall] = [:]
  private let authority: String
  private let scheme: String
  /// The error calls fail with when the owner closes the connection (``close(error:)``).
  private var closeError: RPCError?

  init(manager: ClientConnectionManager, loop: EventLoop) throws {
    self.manager = manager
    let configuration = manager.configuration
    authority = configuration.authority ?? "\(configuration.host):\(configuration.port)"
    let tls: TLSConnection?
    if let context = manager.tlsContext {
      guard let connection = TLSConnection(client: context, serverName: configuration.tls?.serverName ?? configuration.host)
      else { throw SocketError(description: "cannot create a TLS connection") }
      tls = connection
      scheme = "https"
    } else {
      tls = nil
      scheme = "http"
    }
    var address = try ResolvedAddress.resolve(host: configuration.host, port: configuration.port)
    let fd = clinux_tcp_socket(address.family)
    guard fd >= 0 else { throw SocketError.system("socket", errno) }
    _ = clinux_set_nodelay(fd)
    let result = withUnsafePointer(to: &address.storage) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
    }
    if result != 0 && errno != EINPROGRESS {
      let code = errno
      Glibc.close(fd)
      throw SocketError.system("connect", code)
    }
    let session = H2Session(
      isServer: false,
      settings: H2Settings(
        maxConcurrentStreams: 0, initialWindowSize: 4 << 20, connectionWindowSize: 16 << 20,
        maxHeaderListSize: 64 << 10),
      manualWindowUpdates: true)
    pump = ConnectionPump(
      fd: fd, loop: loop, session: session, tls: tls, connecting: true,
      management: ConnectionStateMachine.Configuration(handshakeTimeout: configuration.connectTimeout),
      highWater: 1 << 20, counters: nil)
    pump.owner = self
    pump.start()
  }

  /// Whether the server sent GOAWAY: new calls go to another connection.
  var isDraining: Bool { pump.isDraining }

  func connectionEstablished() {
    pump.handshakeCompleted()
    manager.connectionReady(self)
  }

  func connectionWillClose(_ reason: ConnectionStateMachine.CloseReason) {}

  /// Opens a stream for a call.
  func submit(_ call: ClientCall) {
    var headers = [
      HeaderField(name: ":method", value: "POST"), HeaderField(name: ":scheme", value: scheme),
      HeaderField(name: ":path", value: call.request.method), HeaderField(name: ":authority", value: authority),
      HeaderField(name: "content-type", value: "application/grpc"), HeaderField(name: "te", value: "trailers"),
      HeaderField(name: "user-agent", value: "grpc-swift-substatus/0.1"),
    ]
    if let timeout = call.request.timeout {
      headers.append(HeaderField(name: "grpc-timeout", value: HeaderCoding.formatTimeout(timeout)))
    }
    for element in call.request.metadata where !HeaderCoding.isReserved(element.key) {
      headers.append(HeaderField(name: element.key, value: HeaderCoding.headerValue(element.value)))
    }
    guard let streamID = session.submitRequest(headers: headers, body: GRPCFraming.frame(call.request.request)) else {
      return manager.fail(call.request.id, RPCError(code: .unavailable, message: "cannot open a stream"), reset: false)
    }
    _ = pump.streamOpened()
    call.streamID = streamID
    call.connection = self
    streams[streamID] = call
    pump.scheduleFlush()
  }

  /// The receive windows of this connection's open streams.
  func openStreamReceiveWindows() -> [Int] {
    streams.keys.map { session.receiveWindow(streamID: $0) }
  }

  func reset(streamID: Int32) {
    guard !pump.closed, streams.removeValue(forKey: streamID) != nil else { return }
    session.resetStream(streamID: streamID, errorCode: H2ErrorCode.cancel)
    pump.scheduleFlush()
  }

  /// Gives the bytes held back while a streaming call's consumer was behind to the stream's
  /// window: the server may send again.
  func resumeReading(_ call: ClientCall) {
    call.paused = false
    guard let streamID = call.streamID, call.heldBytes > 0, !pump.closed else { return }
    session.consumeStream(streamID: streamID, count: call.heldBytes)
    call.heldBytes = 0
    pump.scheduleFlush()
  }

  func processEvents() {
    var events = session.takeEvents()
    defer { session.recycleEvents(&events) }
    for event in events {
      switch event {
      case .headers(let streamID, let fields, let endStream):
        guard let call = streams[streamID] else { continue }
        if call.initialMetadata == nil && !endStream {
          receiveHeaders(call, session.receivedFields[fields])
        } else {
          receiveTrailers(call, session.receivedFields[fields])
        }
      case .data(let streamID, let range):
        let bytes = session.receivedData[range]
        // The window is ours to reopen (manual window updates): a unary response and bytes of a
        // call that is over are given back at once, a stream's bytes as its consumer keeps up.
        guard let call = streams[streamID], call.failure == nil else {
          session.consume(streamID: streamID, count: bytes.count)
          continue
        }
        if call.isStreaming {
          session.consumeConnection(count: bytes.count)
        } else {
          session.consume(streamID: streamID, count: bytes.count)
        }
        call.deframer.append(bytes)
        do {
          while let message = try call.deframer.next() {
            if call.isStreaming {
              if !call.yield(message) { call.paused = true }
            } else if call.message == nil {
              call.message = message
            } else {
              call.failure = RPCError(code: .internal, message: "more than one response message on a unary call")
            }
          }
        } catch {
          call.failure = RPCError(
            code: error.code == .messageTooLarge ? .resourceExhausted : .internal, message: error.message)
          streams[streamID] = nil
          session.resetStream(streamID: streamID, errorCode: H2ErrorCode.cancel)
          manager.finished(call, .failure(call.failure!))
          continue
        }
        if call.isStreaming {
          if call.paused {
            call.heldBytes += bytes.count
          } else {
            session.consumeStream(streamID: streamID, count: bytes.count)
          }
        }
      case .streamClosed(let streamID, let errorCode):
        pump.streamClosed()
        guard let call = streams.removeValue(forKey: streamID) else { continue }
        let error: RPCError
        switch errorCode {
        case H2ErrorCode.refusedStream: error = RPCError(code: .unavailable, message: "the server refused the stream")
        case H2ErrorCode.cancel: error = RPCError(code: .cancelled, message: "the server cancelled the stream")
        case H2ErrorCode.enhanceYourCalm:
          error = RPCError(code: .resourceExhausted, message: "the server reset the stream: enhance your calm")
        default:
          error = RPCError(code: .internal, message: "the stream closed without a status (HTTP/2 error \(errorCode))")
        }
        manager.finished(call, .failure(error))
      case .goaway:
        manager.connectionDraining(self)
        pump.goawayReceived()
      case .ping, .pingAck, .endStream, .settings:
        break
      }
      if pump.closed { return }
    }
  }

  private func receiveHeaders(_ call: ClientCall, _ fields: ArraySlice<HeaderField>) {
    var status = ""
    var contentType = ""
    var metadata = Metadata()
    for field in fields {
      switch field.name {
      case ":status": status = field.value
      case "content-type": contentType = field.value
      default:
        if let element = HeaderCoding.metadataElement(name: field.name, value: field.value) { metadata.append(element) }
      }
    }
    if status != "200" || !contentType.hasPrefix("application/grpc") {
      call.failure = RPCError(
        code: Self.code(forHTTPStatus: status),
        message: "unexpected HTTP status \(status) / content-type \"\(contentType)\" from \(authority)")
    }
    call.initialMetadata = metadata
    guard call.isStreaming else { return }
    if let failure = call.failure {
      manager.fail(call.request.id, failure, reset: true)
    } else {
      let (stream, continuation) = manager.makeStream(for: call, initialMetadata: metadata)
      call.openStream(stream, continuation)
    }
  }

  private func receiveTrailers(_ call: ClientCall, _ fields: ArraySlice<HeaderField>) {
    guard let streamID = call.streamID else { return }
    var grpcStatus: Int?
    var grpcMessage = ""
    var httpStatus: String?
    var metadata = Metadata()
    for field in fields {
      switch field.name {
      case "grpc-status": grpcStatus = Int(field.value)
      case "grpc-message": grpcMessage = HeaderCoding.percentDecode(field.value)
      case ":status": httpStatus = field.value
      default:
        if let element = HeaderCoding.metadataElement(name: field.name, value: field.value) { metadata.append(element) }
      }
    }
    streams[streamID] = nil
    let result: Result<ClientResponse, RPCError>
    if call.isStreaming, grpcStatus == 0, call.failure == nil {
      guard (try? call.deframer.finish()) != nil else {
        return manager.finished(
          call, .failure(RPCError(code: .internal, message: "the stream ended inside a message")))
      }
      return manager.finishedStream(call, trailingMetadata: metadata)
    }
    if let httpStatus, httpStatus != "200", grpcStatus == nil {
      result = .failure(RPCError(code: Self.code(forHTTPStatus: httpStatus), message: "HTTP status \(httpStatus)"))
    } else if let grpcStatus, let code = RPCError.Code(rawValue: grpcStatus), code != .ok {
      result = .failure(RPCError(code: code, message: grpcMessage, metadata: metadata))
    } else if grpcStatus == nil {
      result = .failure(RPCError(code: .internal, message: "the server sent no grpc-status"))
    } else if let failure = call.failure {
      result = .failure(failure)
    } else if let message = call.message, (try? call.deframer.finish()) != nil {
      result = .success(
        ClientResponse(initialMetadata: call.initialMetadata ?? [:], message: message, trailingMetadata: metadata))
    } else {
      result = .failure(RPCError(code: .internal, message: "the server sent no response message"))
    }
    manager.finished(call, result)
  }

  /// gRPC's mapping of HTTP statuses to codes when no grpc-status came.
  static func code(forHTTPStatus status: String) -> RPCError.Code {
    switch status {
    case "400": .internal
    case "401": .unauthenticated
    case "403": .permissionDenied
    case "404": .unimplemented
    case "429", "502", "503", "504": .unavailable
    default: .unknown
    }
  }

  /// Closes the socket and fails its calls with `error`.
  func close(error: RPCError) {
    guard !pump.closed else { return }
    closeError = error
    pump.close(.local)
  }

  func connectionClosed(_ outcome: ConnectionPumpOutcome) {
    let error = closeError ?? RPCError(code: outcome.failureCode, message: outcome.failureMessage(authority: authority))
    let calls = streams.values
    streams.removeAll()
    for call in calls { manager.fail(call.request.id, error, reset: false) }
    manager.connectionClosed(self, error: error)
  }
}

extension ConnectionPumpOutcome {
  /// The status of the calls a closed client connection fails.
  var failureCode: RPCError.Code {
    if case .protocolError = self { return .internal }
    return .unavailable
  }

  /// Why the calls of a closed client connection fail.
  func failureMessage(authority: String) -> String {
    switch self {
    case .peerClosed, .sessionFinished, .local: "the connection to \(authority) closed"
    case .connectFailed(let code): "cannot connect to \(authority): \(String(cString: strerror(code)))"
    case .readFailed: "reading from \(authority) failed"
    case .writeFailed: "writing to \(authority) failed"
    case .tlsFailed(let reason): "TLS with \(authority): \(reason)"
    case .protocolError(let error): "HTTP/2 error from \(authority): \(error)"
    case .management(.handshakeTimeout): "connecting to \(authority) timed out"
    case .management(.drained): "the connection was drained"
    case .management(let reason): "the connection to \(authority) closed (\(reason))"
    }
  }
}
