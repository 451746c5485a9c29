import CLinuxShims
import Glibc
import RPCCore
import SubstatusWire

/// The server's state for one request stream.
final class ServerStream {
  let id: Int32
  var deframer: GRPCDeframer
  var context: ServerContext?
  var requests: RPCRequestStream?
  var task: Task<Void, Never>?
  /// Response headers have been submitted.
  var responseStarted = false
  /// The final status has been submitted; later writes are dropped.
  var finished = false
  var deadlineTimer: UInt64?
  /// The call holds a slot of the transport's ``CallBudget``.
  var admitted = false

  init(id: Int32, maxMessageLength: Int) {
    self.id = id
    deframer = GRPCDeframer(maxMessageLength: maxMessageLength)
  }
}

/// One HTTP/2 connection of the gRPC server, owned by its loop thread.
///
/// The nghttp2 session is a state machine: bytes read go in with `receive`, the events it reports
/// are turned into gRPC calls here, and its output is sent once per loop iteration.
final class ServerConnection: LoopChannel {
  let fd: Int32
  private(set) var token: UInt64 = 0
  private unowned let server: LoopServer
  private let loop: EventLoop
  private let configuration: HTTP2ServerTransport.Configuration
  private let session: H2Session
  private let peer: String
  private var streams: [Int32: ServerStream] = [:]
  private var newStreams: [ServerStream] = []

  private var output: [UInt8] = []
  private var outputOffset = 0
  /// TLS between the socket and the session, when configured; `plaintext` stages session output.
  private let tls: TLSConnection?
  private var plaintext: [UInt8] = []
  private var waitingForWritable = false
  private var flushScheduled = false
  private var closed = false

  private let createdAt: Nanoseconds
  private var lastReadAt: Nanoseconds
  private var idleSince: Nanoseconds
  private var bytesReceived = 0
  private var pingSentAt: Nanoseconds?
  private var lastPingReceivedAt: Nanoseconds?
  private var pingStrikes = 0
  private var draining = false
  private var closeAt: Nanoseconds?
  private var tickTimer: UInt64?
  /// Reply bytes charged to the transport's ``CallBudget`` and not yet written to the socket.
  private var replyBytesCharged = 0

  private static let highWater = 1 << 20

  init(fd: Int32, server: LoopServer, tls: TLSConnection?) {
    self.fd = fd
    self.tls = tls
    self.server = server
    loop = server.loop
    configuration = server.configuration
    peer = Sockets.peer(of: fd)
    session = H2Session(
      isServer: true,
      settings: H2Settings(
        maxConcurrentStreams: UInt32(clamping: configuration.maxConcurrentStreams),
        initialWindowSize: UInt32(clamping: configuration.initialWindowSize),
        connectionWindowSize: Int32(clamping: configuration.connectionWindowSize),
        maxHeaderListSize: UInt32(clamping: configuration.maxHeaderListSize)))
    let now = clinux_monotonic_ns()
    createdAt = now
    lastReadAt = now
    idleSince = now
  }

  func start() {
    token = loop.register(fd: fd, events: Epoll.input, channel: self)
    scheduleTick()
    scheduleFlush()
  }

  // MARK: I/O

  func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
    if writable { writePending() }
    if closed { return }
    if readable && !waitingForWritable {
      readAvailable()
    } else if hangup {
      close()
    }
  }

  private func readAvailable() {
    let buffer = loop.readBuffer
    for _ in 0..<4 {
      let n = recv(fd, buffer.baseAddress, buffer.count, 0)
      if n > 0 {
        lastReadAt = clinux_monotonic_ns()
        let input = UnsafeRawBufferPointer(start: buffer.baseAddress, count: n)
        if let tls {
          guard receiveTLS(input, tls) else { return }
        } else {
          bytesReceived += n
          guard receivePlaintext(input) else { return }
        }
        if closed || n < buffer.count { break }
      } else if n == 0 {
        close()
        return
      } else {
        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { break }
        close()
        return
      }
    }
    scheduleFlush()
  }

  /// Feeds bytes to the session; false when the connection closed.
  private func receivePlaintext(_ input: UnsafeRawBufferPointer) -> Bool {
    do {
      try session.receive(input)
    } catch {
      // A protocol violation: nghttp2 has queued GOAWAY where it can; send it, then close.
      processEvents()
      flushNow()
      close()
      return false
    }
    processEvents()
    return !closed
  }

  /// Feeds ciphertext to TLS, advances the handshake, and the session with what it decrypts.
  /// A failed handshake (garbage, no ALPN h2, a bad client certificate) closes this connection
  /// only, after sending the alert. Returns false when the connection closed.
  private func receiveTLS(_ input: UnsafeRawBufferPointer, _ tls: TLSConnection) -> Bool {
    guard tls.feed(input) else {
      close()
      return false
    }
    if !tls.handshakeComplete {
      switch tls.handshake() {
      case .pending:
        scheduleFlush()
        return true
      case .failed:
        tls.takeOutput(appendingTo: &output)
        writePending()
        close()
        return false
      case .complete:
        guard tls.negotiatedH2 else {
          close()
          return false
        }
        scheduleFlush()
      }
    }
    // The input buffer has been copied into TLS: reuse it for the plaintext.
    let buffer = loop.readBuffer
    while true {
      switch tls.read(into: buffer) {
      case .bytes(let n):
        bytesReceived += n
        guard receivePlaintext(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n)) else { return false }
      case .wantMore:
        return true
      case .closed, .failed:
        close()
        return false
      }
    }
  }

  private func scheduleFlush() {
    guard !flushScheduled, !closed else { return }
    flushScheduled = true
    loop.deferUntilEndOfIteration { [self] in
      flushScheduled = false
      flushNow()
    }
  }

  /// Moves nghttp2's output to the socket until it has nothing more or the socket is full.
  private func flushNow() {
    var rounds = 0
    while !closed && !waitingForWritable && rounds < 16 {
      rounds += 1
      do {
        if let tls {
          if tls.handshakeComplete {
            plaintext.removeAll(keepingCapacity: true)
            try session.send(into: &plaintext, limit: Self.highWater)
            if !plaintext.isEmpty, tls.write(plaintext) != nil { return close() }
          }
          tls.takeOutput(appendingTo: &output)
        } else {
          try session.send(into: &output, limit: Self.highWater)
        }
      } catch {
        close()
        return
      }
      processEvents()
      if output.count == outputOffset { break }
      writePending()
    }
    checkDone()
  }

  private func writePending() {
    while outputOffset < output.count {
      let n = output.withUnsafeBytes { bytes in
        send(fd, bytes.baseAddress! + outputOffset, bytes.count - outputOffset, Int32(MSG_NOSIGNAL))
      }
      if n > 0 {
        outputOffset += n
        releaseReplyBytes(n)
      } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if errno == EINTR { continue }
        if !waitingForWritable {
          // Not reading is the backpressure: a peer that does not read gets no more service.
          waitingForWritable = true
          loop.modify(fd: fd, events: Epoll.output, token: token)
        }
        return
      } else {
        close()
        return
      }
    }
    output.removeAll(keepingCapacity: output.capacity <= 4 * Self.highWater)
    outputOffset = 0
    if waitingForWritable {
      waitingForWritable = false
      loop.modify(fd: fd, events: Epoll.input, token: token)
      scheduleFlush()
    }
  }

  private func checkDone() {
    guard !closed, outputOffset == output.count else { return }
    if !session.wantsRead && !session.wantsWrite {
      close()
    } else if draining && streams.isEmpty && !session.wantsWrite {
      close()
    }
  }

  /// Closes the socket and cancels every call still running on it.
  func close() {
    guard !closed else { return }
    closed = true
    loop.unregister(fd: fd, token: token)
    Glibc.close(fd)
    if let tickTimer { loop.cancelTimer(tickTimer) }
    releaseReplyBytes(replyBytesCharged)
    for stream in streams.values { abandon(stream, reason: "the connection closed") }
    streams.removeAll()
    newStreams.removeAll()
    server.connectionClosed(self)
  }

  // MARK: Events

  private func processEvents() {
    for event in session.takeEvents() {
      switch event {
      case .headers(let streamID, let fields, let endStream):
        if let stream = streams[streamID] {
          if endStream { endOfRequest(stream) }
        } else {
          openStream(streamID, fields: fields, endStream: endStream)
        }
      case .data(let streamID, let bytes):
        if let stream = streams[streamID] { receiveData(stream, bytes) }
      case .endStream(let streamID):
        if let stream = streams[streamID] { endOfRequest(stream) }
      case .streamClosed(let streamID, _):
        if let stream = streams.removeValue(forKey: streamID) {
          abandon(stream, reason: "the client cancelled the call")
        }
        if streams.isEmpty { idleSince = clinux_monotonic_ns() }
      case .ping:
        policePing()
      case .pingAck:
        pingSentAt = nil
      case .goaway:
        break
      }
    }
    if !newStreams.isEmpty { dispatchNewStreams() }
    releaseReplyBytes(session.takeDroppedOutboundBytes())
  }

  private func openStream(_ streamID: Int32, fields: [HeaderField], endStream: Bool) {
    var method = ""
    var path = ""
    var contentType = ""
    var timeout: String?
    var encoding: String?
    var metadata = Metadata()
    for field in fields {
      switch field.name {
      case ":method": method = field.value
      case ":path": path = field.value
      case "content-type": contentType = field.value
      case "grpc-timeout": timeout = field.value
      case "grpc-encoding": encoding = field.value
      default:
        if let element = HeaderCoding.metadataElement(name: field.name, value: field.value) {
          metadata.append(element)
        }
      }
    }
    let stream = ServerStream(id: streamID, maxMessageLength: configuration.maxReceiveMessageSize)
    streams[streamID] = stream
    guard method == "POST" else {
      return rejectHTTP(stream, status: "405", message: "gRPC requires POST, not \(method)")
    }
    guard contentType.hasPrefix("application/grpc") else {
      return rejectHTTP(stream, status: "415", message: "invalid gRPC request content-type \"\(contentType)\"")
    }
    guard path.hasPrefix("/") else {
      return rejectHTTP(stream, status: "404", message: "malformed method path")
    }
    guard server.budget.admitCall() else {
      server.countRefusedCall()
      return finish(
        stream, code: .resourceExhausted, message: CallBudget.refusal.message, trailers: CallBudget.refusal.trailers)
    }
    stream.admitted = true
    if let encoding, encoding != "identity" {
      return finish(
        stream, code: .unimplemented,
        message: "grpc: Decompressor is not installed for grpc-encoding \"\(encoding)\"",
        trailers: ["grpc-accept-encoding": "identity"])
    }
    var deadline: ContinuousClock.Instant?
    if let timeout {
      guard let duration = HeaderCoding.parseTimeout(timeout) else {
        return finish(stream, code: .internal, message: "malformed grpc-timeout: \(timeout)")
      }
      deadline = .now + duration
      stream.deadlineTimer = loop.schedule(at: clinux_monotonic_ns() &+ duration.nanoseconds) { [weak self] in
        self?.deadlineExpired(streamID)
      }
    }
    stream.context = ServerContext(method: path, metadata: metadata, deadline: deadline, peer: peer)
    let requests = RPCRequestStream()
    stream.requests = requests
    newStreams.append(stream)
    if endStream { endOfRequest(stream) }
  }

  private func receiveData(_ stream: ServerStream, _ bytes: [UInt8]) {
    guard !stream.finished, let requests = stream.requests else { return }
    stream.deframer.append(bytes)
    do {
      while let message = try stream.deframer.next() { requests.yield(message) }
    } catch {
      if error.code == .messageTooLarge {
        let length = stream.deframer.announcedLength ?? 0
        finish(
          stream, code: .resourceExhausted,
          message: "grpc: received message larger than max (\(length) vs. \(configuration.maxReceiveMessageSize))")
      } else if error.code == .compressedMessage {
        finish(stream, code: .internal, message: "grpc: compressed flag set with identity or empty encoding")
      } else {
        finish(stream, code: .internal, message: error.message)
      }
    }
  }

  private func endOfRequest(_ stream: ServerStream) {
    guard !stream.finished, let requests = stream.requests else { return }
    do {
      try stream.deframer.finish()
      requests.finish()
    } catch {
      finish(stream, code: .internal, message: error.message)
    }
  }

  private func dispatchNewStreams() {
    let handler = server.handler
    let execution = server.execution
    for stream in newStreams {
      guard !stream.finished, streams[stream.id] === stream, let context = stream.context,
        let requests = stream.requests
      else { continue }
      let call = RPCServerCall(
        context: context, requests: requests,
        responses: StreamResponseWriter(server: server, token: token, streamID: stream.id))
      switch execution(context.method) {
      case .transportThread:
        // The first job goes on the loop's local queue and runs before this iteration's flush.
        stream.task = Task(executorPreference: loop) { await handler(call) }
      case .pool:
        stream.task = Task { await handler(call) }
      }
    }
    newStreams.removeAll(keepingCapacity: true)
  }

  private func deadlineExpired(_ streamID: Int32) {
    guard let stream = streams[streamID], !stream.finished else { return }
    stream.deadlineTimer = nil
    finish(stream, code: .deadlineExceeded, message: "deadline exceeded")
    scheduleFlush()
  }

  /// Cancels the call of a stream that is gone.
  private func abandon(_ stream: ServerStream, reason: String) {
    if stream.admitted {
      stream.admitted = false
      server.budget.callFinished()
    }
    if let timer = stream.deadlineTimer { loop.cancelTimer(timer) }
    stream.task?.cancel()
    stream.requests?.finish(throwing: RPCError(code: .cancelled, message: reason))
    stream.finished = true
  }

  // MARK: Responses

  /// Applies response parts written by a handler.
  func respond(streamID: Int32, parts: [RPCResponsePart]) {
    guard let stream = streams[streamID], !stream.finished else { return }
    var initial: Metadata?
    var body: [UInt8] = []
    var bodySize = 0
    for case .message(let message) in parts { bodySize += GRPCFraming.prefixLength + message.count }
    body.reserveCapacity(bodySize)
    var status: (code: RPCError.Code, message: String, trailers: Metadata)?
    for part in parts where status == nil {
      switch part {
      case .metadata(let metadata):
        if initial == nil { initial = metadata }
      case .message(let message):
        if message.count > configuration.maxSendMessageSize {
          status = (
            .resourceExhausted,
            "grpc: trying to send message larger than max (\(message.count) vs. \(configuration.maxSendMessageSize))",
            [:]
          )
          stream.task?.cancel()
        } else {
          GRPCFraming.appendFrame(message, to: &body)
        }
      case .status(let code, let message, let trailers):
        status = (code, message, trailers)
      }
    }
    if !stream.responseStarted && body.isEmpty && initial == nil, let status {
      return finish(stream, code: status.code, message: status.message, trailers: status.trailers)
    }
    replyBytesCharged += body.count
    server.budget.charge(replyBytes: body.count)
    if !stream.responseStarted {
      stream.responseStarted = true
      session.submitResponse(streamID: streamID, headers: responseHeaders(initial ?? [:]), body: body)
    } else if !body.isEmpty {
      session.sendData(streamID: streamID, bytes: body)
    }
    if let status {
      stream.finished = true
      if let timer = stream.deadlineTimer { loop.cancelTimer(timer) }
      session.sendTrailers(
        streamID: streamID, trailerFields(code: status.code, message: status.message, metadata: status.trailers))
    }
    scheduleFlush()
  }

  /// Ends a stream with a status: Trailers-Only before any response headers, else trailers.
  /// A status the transport chose (not the handler) also cancels the handler.
  private func finish(_ stream: ServerStream, code: RPCError.Code, message: String, trailers: Metadata = [:]) {
    guard !stream.finished else { return }
    stream.finished = true
    if let timer = stream.deadlineTimer { loop.cancelTimer(timer) }
    stream.task?.cancel()
    stream.requests?.finish(throwing: RPCError(code: code, message: message))
    let fields = trailerFields(code: code, message: message, metadata: trailers)
    if stream.responseStarted {
      session.sendTrailers(streamID: stream.id, fields)
    } else {
      stream.responseStarted = true
      let headers = [
        HeaderField(name: ":status", value: "200"), HeaderField(name: "content-type", value: "application/grpc"),
      ]
      session.submitResponse(streamID: stream.id, headers: headers + fields, body: nil)
    }
    scheduleFlush()
  }

  private func rejectHTTP(_ stream: ServerStream, status: String, message: String) {
    stream.finished = true
    stream.responseStarted = true
    let fields = [
      HeaderField(name: ":status", value: status),
      HeaderField(name: "content-type", value: "application/grpc"),
      HeaderField(name: "grpc-status", value: String(RPCError.Code.internal.rawValue)),
      HeaderField(name: "grpc-message", value: HeaderCoding.percentEncode(message)),
    ]
    session.submitResponse(streamID: stream.id, headers: fields, body: nil)
    scheduleFlush()
  }

  /// The response headers and trailers of most calls (no metadata, `OK`), built once.
  private static let plainResponseHeaders = [
    HeaderField(name: ":status", value: "200"), HeaderField(name: "content-type", value: "application/grpc"),
  ]
  private static let okTrailers = [HeaderField(name: "grpc-status", value: "0")]

  private func responseHeaders(_ metadata: Metadata) -> [HeaderField] {
    if metadata.isEmpty { return Self.plainResponseHeaders }
    var fields = Self.plainResponseHeaders
    appendMetadata(metadata, to: &fields)
    return fields
  }

  private func trailerFields(code: RPCError.Code, message: String, metadata: Metadata) -> [HeaderField] {
    if code == .ok && message.isEmpty && metadata.isEmpty { return Self.okTrailers }
    var fields = [HeaderField(name: "grpc-status", value: String(code.rawValue))]
    if !message.isEmpty {
      fields.append(HeaderField(name: "grpc-message", value: HeaderCoding.percentEncode(message)))
    }
    appendMetadata(metadata, to: &fields)
    return fields
  }

  private func appendMetadata(_ metadata: Metadata, to fields: inout [HeaderField]) {
    for element in metadata where !HeaderCoding.isReserved(element.key) || element.key == "grpc-accept-encoding" {
      fields.append(HeaderField(name: element.key, value: HeaderCoding.headerValue(element.value)))
    }
  }

  // MARK: Connection management

  /// Since when the connection has had no call open, for eviction at the connection cap; `nil`
  /// while calls are open or once it is draining.
  var idleSinceForEviction: Nanoseconds? { streams.isEmpty && !draining && !closed ? idleSince : nil }

  /// Sends GOAWAY and closes at once: an idle connection evicted at the connection cap.
  func evict() {
    guard !closed else { return }
    draining = true
    session.submitGoaway(errorCode: H2ErrorCode.noError, debug: "max_connections")
    flushNow()
    close()
  }

  /// Uncounts reply bytes from the transport's budget as the socket takes bytes (or the
  /// connection closes): at most what this connection was charged.
  private func releaseReplyBytes(_ written: Int) {
    let n = min(written, replyBytesCharged)
    guard n > 0 else { return }
    replyBytesCharged -= n
    server.budget.release(replyBytes: n)
  }

  /// grpc-go's keepalive enforcement: a PING sooner than allowed after the previous one is a
  /// strike, unless the server has sent DATA or HEADERS since; too many strikes end the connection.
  private func policePing() {
    let now = clinux_monotonic_ns()
    let previous = lastPingReceivedAt
    lastPingReceivedAt = now
    if session.takeSentDataOrHeaders() {
      pingStrikes = 0
      return
    }
    // Without calls (and without permission), keepalive pings must be 2 hours apart, as in grpc-go.
    let minimum =
      streams.isEmpty && !configuration.permitPingWithoutCalls
      ? Duration.seconds(7200).nanoseconds : configuration.minPingInterval.nanoseconds
    if let previous, now &- previous < minimum { pingStrikes += 1 }
    if pingStrikes > configuration.maxPingStrikes {
      session.submitGoaway(errorCode: H2ErrorCode.enhanceYourCalm, debug: "too_many_pings")
      draining = true
      closeAt = now
      for stream in streams.values { finish(stream, code: .unavailable, message: "too many pings") }
      flushNow()
      close()
    }
  }

  /// Sends GOAWAY; running calls may finish until `closeAt`, then the connection closes.
  func beginDrain(debug: String, closeAt: Nanoseconds) {
    guard !closed else { return }
    if !draining {
      draining = true
      session.submitGoaway(errorCode: H2ErrorCode.noError, debug: debug)
    }
    self.closeAt = min(self.closeAt ?? closeAt, closeAt)
    scheduleFlush()
    scheduleTick()
  }

  private var tickInterval: UInt64 {
    var interval: UInt64 = 1_000_000_000
    for duration in [
      configuration.keepaliveTime, configuration.keepaliveTimeout, configuration.handshakeTimeout,
      configuration.maxConnectionIdle, configuration.maxConnectionAge,
    ] {
      if let duration { interval = min(interval, duration.nanoseconds / 4) }
    }
    if let closeAt { interval = min(interval, closeAt &- min(closeAt, clinux_monotonic_ns()) + 1_000_000) }
    return max(interval, 5_000_000)
  }

  private func scheduleTick() {
    if let tickTimer { loop.cancelTimer(tickTimer) }
    tickTimer = loop.schedule(at: clinux_monotonic_ns() + tickInterval) { [weak self] in self?.tick() }
  }

  private func tick() {
    tickTimer = nil
    guard !closed else { return }
    let now = clinux_monotonic_ns()
    // With TLS, only decrypted bytes count: the TLS handshake and the preface share the timeout.
    if bytesReceived < 24 + 9 && now - createdAt > configuration.handshakeTimeout.nanoseconds {
      return close()
    }
    if let sent = pingSentAt {
      if now - sent > configuration.keepaliveTimeout.nanoseconds { return close() }
    } else if now - lastReadAt > configuration.keepaliveTime.nanoseconds {
      session.submitPing()
      pingSentAt = now
      scheduleFlush()
    }
    if !draining, let idle = configuration.maxConnectionIdle, streams.isEmpty, now - idleSince > idle.nanoseconds {
      beginDrain(debug: "max_idle", closeAt: now)
    }
    if !draining, let age = configuration.maxConnectionAge, now - createdAt > age.nanoseconds {
      beginDrain(debug: "max_age", closeAt: now + configuration.maxConnectionAgeGrace.nanoseconds)
    }
    if let closeAt, now >= closeAt {
      flushNow()
      return close()
    }
    checkDone()
    if !closed { scheduleTick() }
  }
}
