public import RPCCore
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
    /// The `:authority` sent; defaults to `host:port`.
    public var authority: String?
    /// TLS (ALPN `h2`, the server verified); `nil` speaks cleartext HTTP/2 (h2c).
    public var tls: ClientTLSConfiguration? = nil

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
    loop = try EventLoop(name: "h2-client")
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
    guard !closed.load(ordering: .relaxed) else {
      throw RPCError(code: .unavailable, message: "the client transport is closed")
    }
    let id = nextCallID.wrappingAdd(1, ordering: .relaxed).oldValue
    let manager = manager
    let loop = loop
    let call = ClientCallRequest(id: id, method: method, request: request, metadata: metadata, timeout: options.timeout)
    let result = await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        loop.execute { manager.start(call, continuation: continuation) }
      }
    } onCancel: {
      loop.execute { manager.cancel(id) }
    }
    return try result.get()
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

/// One call in flight on the client.
final class ClientCall {
  let request: ClientCallRequest
  private var continuation: ClientCallContinuation?
  var streamID: Int32?
  /// The connection the call's stream is on.
  var connection: ClientConnection?
  var deadlineTimer: UInt64?
  var initialMetadata: Metadata?
  var deframer: GRPCDeframer
  var message: [UInt8]?
  var failure: RPCError?

  init(request: ClientCallRequest, continuation: ClientCallContinuation, maxMessageLength: Int) {
    self.request = request
    self.continuation = continuation
    deframer = GRPCDeframer(maxMessageLength: maxMessageLength)
  }

  var isComplete: Bool { continuation == nil }

  func complete(_ result: Result<ClientResponse, RPCError>) {
    continuation?.resume(returning: result)
    continuation = nil
  }
}

/// Owns the client's connection and calls; confined to the client's loop thread.
final class ClientConnectionManager: @unchecked Sendable {
  private enum State {
    case idle
    case connecting(ClientConnection)
    case ready(ClientConnection)
    case backingOff(until: Nanoseconds, reason: String)
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

  func start(_ request: ClientCallRequest, continuation: ClientCallContinuation) {
    let call = ClientCall(
      request: request, continuation: continuation, maxMessageLength: configuration.maxReceiveMessageSize)
    if cancelledBeforeStart.remove(request.id) != nil {
      return call.complete(.failure(RPCError(code: .cancelled, message: "the call was cancelled")))
    }
    calls[request.id] = call
    if let timeout = request.timeout {
      call.deadlineTimer = loop.schedule(at: clinux_monotonic_ns() &+ timeout.nanoseconds) { [weak self] in
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
      if clinux_monotonic_ns() >= until {
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
    guard calls.removeValue(forKey: call.request.id) != nil else { return }
    if let timer = call.deadlineTimer { loop.cancelTimer(timer) }
    call.connection = nil
    call.complete(result)
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
    state = .backingOff(until: clinux_monotonic_ns() &+ wait.nanoseconds, reason: reason)
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

  func shutdown() {
    let error = RPCError(code: .unavailable, message: "the client transport is closed")
    state = .shutDown
    for connection in Array(connections.values) { connection.close(error: error) }
    for id in Array(calls.keys) { fail(id, error, reset: false) }
  }
}

/// One client HTTP/2 connection; confined to the loop thread.
final class ClientConnection: LoopChannel {
  private unowned let manager: ClientConnectionManager
  private let loop: EventLoop
  private let fd: Int32
  private var token: UInt64 = 0
  private let session: H2Session
  private var connected = false
  private(set) var isDraining = false
  private var closed = false
  private var streams: [Int32: ClientCall] = [:]
  private var output: [UInt8] = []
  private var outputOffset = 0
  private var waitingForWritable = true
  private var flushScheduled = false
  private var connectTimer: UInt64?
  private let authority: String
  private let scheme: String
  /// TLS between the socket and the session, when configured; `plaintext` stages session output.
  private let tls: TLSConnection?
  private var plaintext: [UInt8] = []
  /// Connected (and, with TLS, handshake done with ALPN h2): calls can go out.
  private var ready = false

  init(manager: ClientConnectionManager, loop: EventLoop) throws {
    self.manager = manager
    self.loop = loop
    let configuration = manager.configuration
    authority = configuration.authority ?? "\(configuration.host):\(configuration.port)"
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
    fd = clinux_tcp_socket(address.family)
    guard fd >= 0 else { throw SocketError.system("socket", errno) }
    session = H2Session(
      isServer: false,
      settings: H2Settings(
        maxConcurrentStreams: 0, initialWindowSize: 4 << 20, connectionWindowSize: 16 << 20,
        maxHeaderListSize: 64 << 10))
    _ = clinux_set_nodelay(fd)
    let result = withUnsafePointer(to: &address.storage) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
    }
    if result != 0 && errno != EINPROGRESS {
      let code = errno
      Glibc.close(fd)
      throw SocketError.system("connect", code)
    }
    token = loop.register(fd: fd, events: Epoll.output, channel: self)
    connectTimer = loop.schedule(at: clinux_monotonic_ns() &+ configuration.connectTimeout.nanoseconds) {
      [weak self] in
      guard let self, !self.ready else { return }
      self.close(error: RPCError(code: .unavailable, message: "connecting to \(self.authority) timed out"))
    }
  }

  func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
    if !connected {
      guard writable || hangup else { return }
      var error: Int32 = 0
      var length = socklen_t(MemoryLayout<Int32>.size)
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
      if error != 0 || hangup {
        let text = String(cString: strerror(error))
        return close(error: RPCError(code: .unavailable, message: "cannot connect to \(authority): \(text)"))
      }
      connected = true
      waitingForWritable = false
      loop.modify(fd: fd, events: Epoll.input, token: token)
      if let tls {
        // Send the ClientHello; the connection is ready when the handshake completes.
        if case .failed(let reason) = tls.handshake() {
          return close(error: RPCError(code: .unavailable, message: "TLS with \(authority): \(reason)"))
        }
        scheduleFlush()
        return
      }
      becomeReady()
      return
    }
    if writable { writePending() }
    if closed { return }
    if readable && !waitingForWritable {
      readAvailable()
    } else if hangup {
      close(error: RPCError(code: .unavailable, message: "the connection to \(authority) closed"))
    }
  }

  private func becomeReady() {
    ready = true
    if let connectTimer { loop.cancelTimer(connectTimer) }
    manager.connectionReady(self)
    scheduleFlush()
  }

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
    call.streamID = streamID
    call.connection = self
    streams[streamID] = call
    scheduleFlush()
  }

  func reset(streamID: Int32) {
    guard !closed, streams.removeValue(forKey: streamID) != nil else { return }
    session.resetStream(streamID: streamID, errorCode: H2ErrorCode.cancel)
    scheduleFlush()
  }

  private func readAvailable() {
    let buffer = loop.readBuffer
    for _ in 0..<4 {
      let n = recv(fd, buffer.baseAddress, buffer.count, 0)
      if n > 0 {
        let input = UnsafeRawBufferPointer(start: buffer.baseAddress, count: n)
        if let tls {
          guard receiveTLS(input, tls) else { return }
        } else {
          guard receivePlaintext(input) else { return }
        }
        if closed || n < buffer.count { break }
      } else if n == 0 {
        return close(error: RPCError(code: .unavailable, message: "the connection to \(authority) closed"))
      } else {
        if errno == EAGAIN || errno == EINTR { break }
        return close(error: RPCError(code: .unavailable, message: "reading from \(authority) failed"))
      }
    }
    scheduleFlush()
  }

  /// Feeds bytes to the session; false when the connection closed.
  private func receivePlaintext(_ input: UnsafeRawBufferPointer) -> Bool {
    do {
      try session.receive(input)
    } catch {
      close(error: RPCError(code: .internal, message: "HTTP/2 error from \(authority): \(error)"))
      return false
    }
    processEvents()
    return !closed
  }

  /// Feeds ciphertext to TLS, advances the handshake, and the session with what it decrypts.
  /// Returns false when the connection closed.
  private func receiveTLS(_ input: UnsafeRawBufferPointer, _ tls: TLSConnection) -> Bool {
    guard tls.feed(input) else {
      close(error: RPCError(code: .unavailable, message: "TLS with \(authority): out of memory"))
      return false
    }
    if !tls.handshakeComplete {
      switch tls.handshake() {
      case .pending:
        scheduleFlush()
        return true
      case .failed(let reason):
        close(error: RPCError(code: .unavailable, message: "TLS with \(authority): \(reason)"))
        return false
      case .complete:
        guard tls.negotiatedH2 else {
          close(error: RPCError(code: .unavailable, message: "\(authority) did not negotiate HTTP/2 (ALPN h2)"))
          return false
        }
        becomeReady()
      }
    }
    let buffer = loop.readBuffer
    while true {
      switch tls.read(into: buffer) {
      case .bytes(let n):
        guard receivePlaintext(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n)) else { return false }
      case .wantMore:
        return true
      case .closed:
        close(error: RPCError(code: .unavailable, message: "the connection to \(authority) closed"))
        return false
      case .failed(let reason):
        close(error: RPCError(code: .unavailable, message: "TLS with \(authority): \(reason)"))
        return false
      }
    }
  }

  private func scheduleFlush() {
    guard !flushScheduled, !closed, connected else { return }
    flushScheduled = true
    loop.deferUntilEndOfIteration { [self] in
      flushScheduled = false
      flushNow()
    }
  }

  private func flushNow() {
    var rounds = 0
    while !closed && !waitingForWritable && rounds < 16 {
      rounds += 1
      do {
        if let tls {
          if tls.handshakeComplete {
            plaintext.removeAll(keepingCapacity: true)
            try session.send(into: &plaintext, limit: 1 << 20)
            if !plaintext.isEmpty, let reason = tls.write(plaintext) {
              return close(error: RPCError(code: .unavailable, message: "TLS with \(authority): \(reason)"))
            }
          }
          tls.takeOutput(appendingTo: &output)
        } else {
          try session.send(into: &output, limit: 1 << 20)
        }
      } catch {
        return close(error: RPCError(code: .internal, message: "HTTP/2 error: \(error)"))
      }
      processEvents()
      if output.count == outputOffset { break }
      writePending()
    }
    if !closed && isDraining && streams.isEmpty && outputOffset == output.count {
      close(error: RPCError(code: .unavailable, message: "the connection was drained"))
    }
  }

  private func writePending() {
    while outputOffset < output.count {
      let n = output.withUnsafeBytes { bytes in
        send(fd, bytes.baseAddress! + outputOffset, bytes.count - outputOffset, Int32(MSG_NOSIGNAL))
      }
      if n > 0 {
        outputOffset += n
      } else if n < 0 && (errno == EAGAIN || errno == EINTR) {
        if errno == EINTR { continue }
        if !waitingForWritable {
          waitingForWritable = true
          loop.modify(fd: fd, events: Epoll.output, token: token)
        }
        return
      } else {
        return close(error: RPCError(code: .unavailable, message: "writing to \(authority) failed"))
      }
    }
    output.removeAll(keepingCapacity: output.capacity <= 4 << 20)
    outputOffset = 0
    if waitingForWritable {
      waitingForWritable = false
      loop.modify(fd: fd, events: Epoll.input, token: token)
      scheduleFlush()
    }
  }

  private func processEvents() {
    for event in session.takeEvents() {
      switch event {
      case .headers(let streamID, let fields, let endStream):
        guard let call = streams[streamID] else { continue }
        if call.initialMetadata == nil && !endStream {
          receiveHeaders(call, fields)
        } else {
          receiveTrailers(call, fields)
        }
      case .data(let streamID, let bytes):
        guard let call = streams[streamID], call.failure == nil else { continue }
        call.deframer.append(bytes)
        do {
          while let message = try call.deframer.next() {
            if call.message == nil {
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
        }
      case .streamClosed(let streamID, let errorCode):
        guard let call = streams.removeValue(forKey: streamID) else { continue }
        let error: RPCError
        switch errorCode {
        case 7: error = RPCError(code: .unavailable, message: "the server refused the stream")
        case H2ErrorCode.cancel: error = RPCError(code: .cancelled, message: "the server cancelled the stream")
        case H2ErrorCode.enhanceYourCalm:
          error = RPCError(code: .resourceExhausted, message: "the server reset the stream: enhance your calm")
        default:
          error = RPCError(code: .internal, message: "the stream closed without a status (HTTP/2 error \(errorCode))")
        }
        manager.finished(call, .failure(error))
      case .goaway:
        isDraining = true
        manager.connectionDraining(self)
      case .ping, .pingAck, .endStream:
        break
      }
    }
  }

  private func receiveHeaders(_ call: ClientCall, _ fields: [HeaderField]) {
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
  }

  private func receiveTrailers(_ call: ClientCall, _ fields: [HeaderField]) {
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
    guard !closed else { return }
    closed = true
    if let connectTimer { loop.cancelTimer(connectTimer) }
    loop.unregister(fd: fd, token: token)
    Glibc.close(fd)
    let calls = streams.values
    streams.removeAll()
    for call in calls { manager.fail(call.request.id, error, reset: false) }
    manager.connectionClosed(self, error: error)
  }
}
