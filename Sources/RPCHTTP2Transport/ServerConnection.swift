import RPCCore
import RPCWebProtocols
import SubstatusWire

/// The server's state for one request stream. A connection keeps the states of closed streams
/// for its next streams (``reset(id:)``): one allocation fewer per call, two with its request stream.
final class ServerStream {
  private(set) var id: Int32
  var deframer: GRPCDeframer
  var context: ServerContext?
  var requests: RPCRequestStream?
  var task: Task<Void, Never>?
  /// The transport cancelled the call while its handler was starting (``task`` not yet set):
  /// the task is cancelled as soon as it is.
  var cancelRequested = false
  /// Response headers have been submitted.
  var responseStarted = false
  /// The final status has been submitted; later writes are dropped.
  var finished = false
  var deadlineTimer: UInt64?
  /// The request bytes of this stream counted in the connection's buffer budget.
  var bufferedBytes = 0
  /// The call holds a slot of the transport's budget of calls in flight
  /// (``TransportCounters/admitCall()``).
  var admitted = false
  /// The framing of a Connect or gRPC-Web call; `nil` for gRPC, which uses ``deframer`` and
  /// HTTP/2 trailers.
  var web: WebFraming?
  /// The deframer of a gRPC call whose requests are gzip (`grpc-encoding: gzip`); `nil` on the
  /// fast path, which uses ``deframer``.
  var inflating: InflatingDeframer?
  /// Replies of 1 KiB and more are gzipped: the request was gzip and the client accepts it (as
  /// grpc-go answers in the request's compressor).
  var compressReplies = false
  /// A gRPC call in the JSON codec (`application/grpc+json`): its replies say so in `content-type`.
  var grpcJSON = false
  /// The handler waiting for the stream's unsent response to drop to the bound
  /// (``RPCResponseWriter/waitForRoom()``).
  var roomWaiter: CheckedContinuation<Void, Never>?
  /// Resets the stream when its handler has waited for room for the write timeout.
  var roomTimer: UInt64?

  init(id: Int32, maxMessageLength: Int) {
    self.id = id
    deframer = GRPCDeframer(maxMessageLength: maxMessageLength)
  }

  /// Cancels the call's handler, now or as soon as its task is known.
  func cancelTask() {
    if let task { task.cancel() } else { cancelRequested = true }
  }

  /// Whether the state can serve another stream: the stream is over and nothing waits on it.
  var isReusable: Bool { finished && !admitted && roomWaiter == nil && roomTimer == nil && deadlineTimer == nil }

  /// Makes a closed stream's state new for stream `id`. Its request stream is kept, emptied, when
  /// nothing else holds it (the call's handler has let go of it), else dropped.
  func reset(id: Int32) {
    self.id = id
    deframer = GRPCDeframer(maxMessageLength: deframer.maxMessageLength)
    context = nil
    if requests != nil, isKnownUniquelyReferenced(&requests!) {
      requests!.reset()
    } else {
      requests = nil
    }
    task = nil
    cancelRequested = false
    responseStarted = false
    finished = false
    bufferedBytes = 0
    web = nil
    inflating = nil
    compressReplies = false
    grpcJSON = false
  }

  /// The request stream for the call: the kept one, or a new one.
  func makeRequestStream() -> RPCRequestStream {
    if let requests { return requests }
    let requests = RPCRequestStream()
    self.requests = requests
    return requests
  }
}

/// The request deframer and response encoder of a Connect or gRPC-Web stream (a class, so that a
/// gRPC stream carries one `nil` pointer for it).
final class WebFraming {
  var deframer: RequestDeframer
  var encoder: ResponseEncoder

  init(deframer: RequestDeframer, encoder: ResponseEncoder) {
    self.deframer = deframer
    self.encoder = encoder
  }
}

/// The inflating deframer of a gRPC stream with `grpc-encoding: gzip` (a class, so that other
/// streams carry one `nil` pointer for it).
final class InflatingDeframer {
  var deframer: RequestDeframer

  init(_ deframer: RequestDeframer) {
    self.deframer = deframer
  }
}

/// One HTTP/2 connection of the gRPC server, owned by its loop thread.
///
/// The nghttp2 session is a state machine: its ``ConnectionPump`` feeds it the bytes read and
/// sends its output once per loop iteration; the events it reports are turned into gRPC calls
/// here. What the connection's management decides (keepalive, idleness, age, drain, buffers,
/// stalled readers) is the pump's ``ConnectionStateMachine``'s.
final class ServerConnection: ConnectionPumpOwner {
  private unowned let server: LoopServer
  private let loop: EventLoop
  private let configuration: HTTP2ServerTransport.Configuration
  private let pump: ConnectionPump<ServerConnection>
  private var session: H2Session { pump.session }
  private let peer: String
  private var streams = StreamTable<ServerStream>()
  private var newStreams: [ServerStream] = []
  /// Streams closed during this batch of events, kept for reuse once the batch is done (a state
  /// reused within the batch could still be in ``newStreams`` under its old id).
  private var closedStreams: [ServerStream] = []
  /// The states of closed streams, for the next streams.
  private var spareStreams: [ServerStream] = []
  /// The metadata of the last call opened: the next call usually sends the same headers (the user
  /// agent), and then shares it instead of building a new array.
  private var lastMetadata = Metadata()
  /// The streams whose handler waits for room (``awaitRoom(streamID:_:)``).
  private var roomWaiting: [Int32: ServerStream] = [:]
  /// The method path of the last call dispatched and where its method runs.
  private var lastPlacement: (method: String, execution: HandlerExecution)?

  init(fd: Int32, server: LoopServer, tls: TLSConnection?) {
    self.server = server
    loop = server.loop
    let configuration = server.configuration
    self.configuration = configuration
    peer = Sockets.peer(of: fd)
    let session = H2Session(
      isServer: true,
      settings: H2Settings(
        maxConcurrentStreams: UInt32(clamping: configuration.maxConcurrentStreams),
        initialWindowSize: UInt32(clamping: configuration.initialWindowSize),
        connectionWindowSize: Int32(clamping: configuration.connectionWindowSize),
        maxHeaderListSize: UInt32(clamping: configuration.maxHeaderListSize)))
    pump = ConnectionPump(
      fd: fd, loop: server.loop, session: session, tls: tls, connecting: false,
      management: ConnectionStateMachine.Configuration(
        handshakeTimeout: configuration.handshakeTimeout, keepaliveTime: configuration.keepaliveTime,
        keepaliveTimeout: configuration.keepaliveTimeout, policesPings: true,
        minPingInterval: configuration.minPingInterval, permitPingWithoutCalls: configuration.permitPingWithoutCalls,
        maxPingStrikes: configuration.maxPingStrikes, maxIdle: configuration.maxConnectionIdle,
        maxAge: configuration.maxConnectionAge, maxAgeGrace: configuration.maxConnectionAgeGrace,
        writeTimeout: configuration.writeTimeout,
        maxBufferedRequestBytes: configuration.maxConnectionBufferedRequestBytes),
      highWater: 1 << 20, counters: server.transport.counters)
    pump.owner = self
  }

  /// The connection's key in its loop's tables.
  var token: UInt64 { pump.token }

  func start() {
    pump.start()
  }

  /// Sends GOAWAY; running calls may finish within `grace`, then the connection closes.
  func beginShutdown(grace: Duration) {
    pump.beginShutdown(grace: grace)
  }

  private func scheduleFlush() { pump.scheduleFlush() }

  /// Since when the connection has had no call open, for eviction at the connection cap; `nil`
  /// while calls are open or once it drains.
  var idleSinceForEviction: Duration? { pump.closed ? nil : pump.machine.idleSinceForEviction }

  /// Sends GOAWAY `max_connections` and closes at once: an idle connection evicted at the
  /// connection cap.
  func evict() { pump.evict() }

  // MARK: The pump's reports

  func connectionEstablished() {}

  func connectionWillClose(_ reason: ConnectionStateMachine.CloseReason) {
    let message =
      switch reason {
      case .tooManyPings: "too many pings"
      case .graceExpired: "the server is shutting down and the grace period ended"
      default: "the connection closes"
      }
    for stream in streams.allValues { finish(stream, code: .unavailable, message: message) }
  }

  /// The socket is closed: every call still running on it is cancelled.
  func connectionClosed(_ outcome: ConnectionPumpOutcome) {
    for stream in streams.allValues { abandon(stream, reason: "the connection closed") }
    streams.removeAll()
    newStreams.removeAll()
    resumeRoomWaiters()
    server.connectionClosed(self)
  }

  // MARK: Events

  func processEvents() {
    var events = session.takeEvents()
    defer { session.recycleEvents(&events) }
    for event in events {
      switch event {
      case .headers(let streamID, let fields, let endStream):
        if let stream = streams[streamID] {
          if endStream { endOfRequest(stream) }
        } else {
          openStream(streamID, fields: session.receivedFields[fields], endStream: endStream)
        }
      case .data(let streamID, let bytes):
        if let stream = streams[streamID] { receiveData(stream, session.receivedData[bytes]) }
      case .endStream(let streamID):
        if let stream = streams[streamID] { endOfRequest(stream) }
      case .streamClosed(let streamID, _):
        if let stream = streams.removeValue(forKey: streamID) {
          abandon(stream, reason: "the client cancelled the call")
          pump.streamClosed()
          closedStreams.append(stream)
        }
      case .ping:
        pump.pingReceived()
      case .pingAck:
        pump.pingAckReceived()
      case .settings:
        pump.handshakeCompleted()
      case .goaway:
        break
      }
      if pump.closed { return }
    }
    if !newStreams.isEmpty { dispatchNewStreams() }
    if !roomWaiting.isEmpty { resumeRoomWaiters() }
    if !closedStreams.isEmpty { recycleClosedStreams() }
  }

  /// Keeps the states of the streams closed in this batch for the next streams (a bounded number).
  private func recycleClosedStreams() {
    for stream in closedStreams where spareStreams.count < Self.maxSpareStreams && stream.isReusable {
      spareStreams.append(stream)
    }
    closedStreams.removeAll(keepingCapacity: true)
  }

  /// The most closed streams' states a connection keeps.
  private static let maxSpareStreams = 64

  // MARK: Pacing of streamed responses

  /// Resumes `waiter` once the stream holds at most ``HTTP2ServerTransport/Configuration/maxPendingStreamResponseBytes``
  /// unsent (at once if it does, or if the stream is over). A handler that waits for the write
  /// timeout (its reader's window stays closed) loses its stream (RST_STREAM CANCEL), not the
  /// connection: the other calls on it go on.
  func awaitRoom(streamID: Int32, _ waiter: CheckedContinuation<Void, Never>) {
    guard let stream = streams[streamID], !stream.finished, stream.roomWaiter == nil,
      session.pendingBytes(streamID: streamID) > configuration.maxPendingStreamResponseBytes
    else { return waiter.resume() }
    stream.roomWaiter = waiter
    roomWaiting[streamID] = stream
    if let timeout = configuration.writeTimeout {
      stream.roomTimer = loop.schedule(after: timeout) { [weak self] in self?.roomTimedOut(streamID) }
    }
  }

  /// Resumes the handlers whose stream has room again or is over.
  private func resumeRoomWaiters() {
    for (id, stream) in roomWaiting
    where pump.closed || stream.finished || session.pendingBytes(streamID: id) <= configuration.maxPendingStreamResponseBytes {
      roomWaiting[id] = nil
      releaseRoomWaiter(stream)
    }
  }

  private func releaseRoomWaiter(_ stream: ServerStream) {
    if let timer = stream.roomTimer { loop.cancelTimer(timer) }
    stream.roomTimer = nil
    stream.roomWaiter?.resume()
    stream.roomWaiter = nil
  }

  private func roomTimedOut(_ streamID: Int32) {
    guard let stream = roomWaiting.removeValue(forKey: streamID) else { return }
    stream.roomTimer = nil
    server.transport.counters.streamWriteTimeouts.wrappingAdd(1, ordering: .relaxed)
    session.resetStream(streamID: streamID, errorCode: H2ErrorCode.cancel)
    abandon(stream, reason: "the client did not read the response for the write timeout")
    releaseRoomWaiter(stream)
    scheduleFlush()
  }

  private func openStream(_ streamID: Int32, fields: ArraySlice<HeaderField>, endStream: Bool) {
    var method = ""
    var path = ""
    var contentType = ""
    var timeout: String?
    var encoding: String?
    var acceptEncoding: [String] = []
    // The metadata is the last call's as long as the fields repeat it; it is built anew from the
    // first field that differs.
    var metadata = lastMetadata
    var repeated = 0
    var differs = false
    for field in fields {
      switch field.name {
      case ":method": method = field.value
      case ":path": path = field.value
      case "content-type": contentType = field.value
      case "grpc-timeout": timeout = field.value
      case "grpc-encoding": encoding = field.value
      case "grpc-accept-encoding": acceptEncoding.append(field.value)
      default:
        if HeaderCoding.isReserved(field.name) { continue }
        if !differs {
          if !Metadata.isBinaryKey(field.name) && metadata.hasString(field.value, forKey: field.name, at: repeated) {
            repeated += 1
            continue
          }
          differs = true
          metadata = metadata.prefix(repeated)
        }
        if let element = HeaderCoding.metadataElement(name: field.name, value: field.value) {
          metadata.append(element)
        }
      }
    }
    if !differs && repeated < metadata.count {
      metadata = metadata.prefix(repeated)
      differs = true
    }
    if differs { lastMetadata = metadata }
    guard pump.streamOpened() == .accept else {
      session.resetStream(streamID: streamID, errorCode: H2ErrorCode.refusedStream)
      return scheduleFlush()
    }
    let stream: ServerStream
    if let spare = spareStreams.popLast() {
      spare.reset(id: streamID)
      stream = spare
    } else {
      stream = ServerStream(id: streamID, maxMessageLength: configuration.maxReceiveMessageSize)
    }
    streams[streamID] = stream
    // gRPC first and unchanged; everything else (Connect, gRPC-Web, CORS, errors) is classified once.
    guard method == "POST", contentType.hasPrefix("application/grpc"), !contentType.hasPrefix("application/grpc-web")
    else {
      return openWebStream(stream, method: method, path: path, contentType: contentType, fields: fields, endStream: endStream)
    }
    guard path.hasPrefix("/") else {
      return rejectHTTP(stream, status: "404", message: "malformed method path")
    }
    guard server.transport.counters.admitCall() else {
      return finish(stream, code: .resourceExhausted, message: CallRefusal.message, trailers: CallRefusal.trailers)
    }
    stream.admitted = true
    let codec: MessageCodec = contentType.hasSuffix("+json") ? .json : .protobuf
    stream.grpcJSON = codec == .json
    if let encoding, encoding != "identity" {
      guard encoding.lowercased() == "gzip" else {
        return finish(
          stream, code: .unimplemented,
          message: "grpc: Decompressor is not installed for grpc-encoding \"\(encoding)\"",
          trailers: ["grpc-accept-encoding": "gzip,identity"])
      }
      stream.inflating = InflatingDeframer(
        RequestDeframer(
          format: CallFormat(framing: .grpc, codec: codec, responseContentType: contentType),
          maxMessageSize: configuration.maxReceiveMessageSize, compression: .gzip))
      stream.compressReplies = CompressionAlgorithm.negotiated(accept: acceptEncoding, request: .gzip) == .gzip
    }
    var deadline: ContinuousClock.Instant?
    if let timeout {
      guard let duration = HeaderCoding.parseTimeout(timeout) else {
        return finish(stream, code: .internal, message: "malformed grpc-timeout: \(timeout)")
      }
      deadline = .now + duration
      stream.deadlineTimer = loop.schedule(after: duration) { [weak self] in
        self?.deadlineExpired(streamID)
      }
    }
    stream.context = ServerContext(method: path, metadata: metadata, deadline: deadline, peer: peer, codec: codec)
    _ = stream.makeRequestStream()
    newStreams.append(stream)
    if endStream { endOfRequest(stream) }
  }

  /// Opens a Connect or gRPC-Web stream, or answers a CORS preflight or an HTTP-level error.
  private func openWebStream(
    _ stream: ServerStream, method: String, path: String, contentType: String, fields: ArraySlice<HeaderField>, endStream: Bool
  ) {
    let cors = server.transport.cors
    var origin: String?
    var requestMethod: String?
    var requestHeaders: String?
    var httpFields: [HTTPField] = []
    httpFields.reserveCapacity(fields.count)
    for field in fields where !field.name.hasPrefix(":") {
      switch field.name {
      case "origin": origin = field.value
      case "access-control-request-method": requestMethod = field.value
      case "access-control-request-headers": requestHeaders = field.value
      default: break
      }
      httpFields.append(HTTPField(field.name, field.value))
    }
    let corsFields = cors.responseFields(origin: origin)
    if CORSPolicy.isPreflight(method: method, origin: origin, requestMethod: requestMethod),
      let origin, let requestMethod
    {
      switch cors.preflight(origin: origin, requestMethod: requestMethod, requestHeaders: requestHeaders) {
      case .success(let head):
        stream.finished = true
        stream.responseStarted = true
        session.submitResponse(
          streamID: stream.id, headers: [HeaderField(name: ":status", value: String(head.status))] + head.fields.map(\.headerField),
          body: nil)
        return scheduleFlush()
      case .failure(let rejection):
        return rejectPlain(stream, rejection)
      }
    }
    let format: CallFormat
    switch CallFormat.classify(method: method, contentType: contentType) {
    case .success(let classified): format = classified
    case .failure(var rejection):
      if contentType.hasPrefix("application/grpc") && !contentType.hasPrefix("application/grpc-web") {
        // A gRPC client (which reads only grpc-status) sent something other than POST.
        return rejectHTTP(stream, status: String(rejection.status), message: "gRPC requires POST, not \(method)")
      }
      rejection.headers += corsFields
      return rejectPlain(stream, rejection)
    }
    guard format.framing != .grpc else {
      // A gRPC content type spelled differently (upper case, parameters).
      return rejectHTTP(stream, status: "415", message: "invalid gRPC request content-type \"\(contentType)\"")
    }
    guard path.hasPrefix("/") else {
      return rejectPlain(stream, HTTPRejection(status: 404, message: "malformed method path", headers: corsFields))
    }
    let web = WebFraming(
      deframer: RequestDeframer(format: format, maxMessageSize: configuration.maxReceiveMessageSize),
      encoder: ResponseEncoder(
        format: format, maxSendMessageSize: configuration.maxSendMessageSize, extraFields: corsFields))
    stream.web = web
    guard server.transport.counters.admitCall() else {
      return finish(stream, code: .resourceExhausted, message: CallRefusal.message, trailers: CallRefusal.trailers)
    }
    stream.admitted = true
    let head: RequestHead
    switch RequestHead.parse(httpFields, format: format, supportedCompression: CompressionAlgorithm.supported) {
    case .success(let parsed): head = parsed
    case .failure(let refusal):
      return finishWeb(stream, web, refusal.responseParts)
    }
    web.deframer = RequestDeframer(
      format: format, maxMessageSize: configuration.maxReceiveMessageSize, compression: head.compression)
    web.encoder = ResponseEncoder(
      format: format, maxSendMessageSize: configuration.maxSendMessageSize, extraFields: corsFields,
      compression: ResponseCompression(algorithm: head.responseCompression))
    var deadline: ContinuousClock.Instant?
    if let timeout = head.timeout {
      deadline = .now + timeout
      let streamID = stream.id
      stream.deadlineTimer = loop.schedule(after: timeout) { [weak self] in
        self?.deadlineExpired(streamID)
      }
    }
    stream.context = ServerContext(
      method: path, metadata: head.metadata, deadline: deadline, peer: peer, rpcProtocol: format.rpcProtocol,
      codec: format.codec)
    _ = stream.makeRequestStream()
    newStreams.append(stream)
    if endStream { endOfRequest(stream) }
  }

  private func receiveData(_ stream: ServerStream, _ bytes: ArraySlice<UInt8>) {
    guard !stream.finished, let requests = stream.requests else { return }
    guard pump.reserveRequestBytes(bytes.count) else {
      return finish(
        stream, code: .resourceExhausted,
        message: "the request buffer of the connection (\(configuration.maxConnectionBufferedRequestBytes ?? 0) bytes) or of the server is full")
    }
    stream.bufferedBytes += bytes.count
    defer { accountBuffer(of: stream) }
    if stream.web != nil || stream.inflating != nil {
      // The error is answered after the deframer's access ends (finish frees its buffer).
      let failure =
        if let web = stream.web { Self.feed(&web.deframer, bytes, requests) } else {
          Self.feed(&stream.inflating!.deframer, bytes, requests)
        }
      if let failure { finish(stream, code: failure.code, message: failure.message) }
      return
    }
    var bytes = bytes
    if stream.deframer.bufferedByteCount == 0 {
      // Whole messages at the start of the chunk go to the handler straight from it: a unary
      // request usually arrives in one DATA frame, and copying it into the deframer's buffer
      // first cost an allocation and a copy per call. The rest (a partial message, or a prefix
      // the deframer must refuse) goes through the deframer.
      while let message = Self.wholeMessage(&bytes, maxLength: stream.deframer.maxMessageLength) {
        requests.yield(message)
      }
      if bytes.isEmpty { return }
    }
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

  /// Takes the uncompressed message framed at the start of `bytes` when it is all there and
  /// within `maxLength`, leaving the bytes after it; `nil` (and `bytes` untouched) otherwise.
  private static func wholeMessage(_ bytes: inout ArraySlice<UInt8>, maxLength: Int) -> [UInt8]? {
    let start = bytes.startIndex
    guard bytes.count >= GRPCFraming.prefixLength, bytes[start] == 0 else { return nil }
    let length =
      Int(bytes[start + 1]) << 24 | Int(bytes[start + 2]) << 16 | Int(bytes[start + 3]) << 8 | Int(bytes[start + 4])
    guard length <= maxLength, bytes.count - GRPCFraming.prefixLength >= length else { return nil }
    let end = start + GRPCFraming.prefixLength + length
    let message = Array(bytes[(start + GRPCFraming.prefixLength)..<end])
    bytes = bytes[end...]
    return message
  }

  /// Feeds body bytes to a Connect, gRPC-Web or inflating gRPC deframer; the error to answer with.
  private static func feed(
    _ deframer: inout RequestDeframer, _ bytes: ArraySlice<UInt8>, _ requests: RPCRequestStream
  ) -> RPCError? {
    do throws(RPCError) {
      try deframer.append(bytes)
      while let message = try deframer.next() { requests.yield(message) }
      return nil
    } catch {
      return error
    }
  }

  /// Ends the body of a Connect, gRPC-Web or inflating gRPC deframer; the error to answer with.
  private static func finishBody(_ deframer: inout RequestDeframer, _ requests: RPCRequestStream) -> RPCError? {
    do throws(RPCError) {
      try deframer.finish()
      while let message = try deframer.next() { requests.yield(message) }
      requests.finish()
      return nil
    } catch {
      return error
    }
  }

  private func endOfRequest(_ stream: ServerStream) {
    guard !stream.finished, let requests = stream.requests else { return }
    if stream.web != nil || stream.inflating != nil {
      defer { accountBuffer(of: stream) }
      let failure =
        if let web = stream.web { Self.finishBody(&web.deframer, requests) } else {
          Self.finishBody(&stream.inflating!.deframer, requests)
        }
      if let failure { finish(stream, code: failure.code, message: failure.message) }
      return
    }
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
      // The placement of the method the connection called last is kept: a connection usually
      // calls one method again and again, and its path is then the same string (H2Session
      // reuses it), so the check is a comparison instead of a hash lookup.
      let placement: HandlerExecution
      if let last = lastPlacement, last.method == context.method {
        placement = last.execution
      } else {
        placement = execution(context.method)
        lastPlacement = (context.method, placement)
      }
      switch placement {
      case .transportThread:
        // Started at once, on this thread: a handler that does not suspend (the usual one) runs
        // to its end here and its task is gone before the next call's is made, so each call
        // reuses the memory the last one freed; after a suspension it resumes on the loop.
        let task = Task.immediate(executorPreference: loop) { await handler(call) }
        stream.task = task
        if stream.cancelRequested { task.cancel() }
      case .pool:
        stream.task = Task { await handler(call) }
        if stream.cancelRequested { stream.task?.cancel() }
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

  /// Gives the bytes that left the stream's buffer back to the connection's budget.
  private func accountBuffer(of stream: ServerStream) {
    let buffered =
      stream.web?.deframer.bufferedByteCount ?? stream.inflating?.deframer.bufferedByteCount
      ?? stream.deframer.bufferedByteCount
    pump.releaseRequestBytes(stream.bufferedBytes - buffered)
    stream.bufferedBytes = buffered
  }

  /// Frees a finished stream's request buffer.
  private func freeBuffer(of stream: ServerStream) {
    if let web = stream.web {
      guard stream.bufferedBytes > 0 || web.deframer.bufferedByteCount > 0 else { return }
      web.deframer = RequestDeframer(
        format: web.deframer.format, maxMessageSize: web.deframer.maxMessageSize, compression: web.deframer.compression)
      return accountBuffer(of: stream)
    }
    if let inflating = stream.inflating {
      guard stream.bufferedBytes > 0 || inflating.deframer.bufferedByteCount > 0 else { return }
      inflating.deframer = RequestDeframer(
        format: inflating.deframer.format, maxMessageSize: inflating.deframer.maxMessageSize, compression: .gzip)
      return accountBuffer(of: stream)
    }
    guard stream.bufferedBytes > 0 || stream.deframer.bufferedByteCount > 0 else { return }
    stream.deframer = GRPCDeframer(maxMessageLength: configuration.maxReceiveMessageSize)
    accountBuffer(of: stream)
  }

  /// Cancels the call of a stream that is gone. A stream whose status went out has nothing left
  /// to cancel: its handler has returned, or was cancelled by the status the transport chose.
  private func abandon(_ stream: ServerStream, reason: String) {
    if stream.admitted {
      stream.admitted = false
      server.transport.counters.callFinished()
    }
    freeBuffer(of: stream)
    if let timer = stream.deadlineTimer {
      loop.cancelTimer(timer)
      stream.deadlineTimer = nil
    }
    guard !stream.finished else { return }
    stream.cancelTask()
    stream.requests?.finish(throwing: RPCError(code: .cancelled, message: reason))
    stream.finished = true
  }

  // MARK: Responses

  /// Applies response parts written by a handler.
  func respond(streamID: Int32, parts: [RPCResponsePart]) {
    guard let stream = streams[streamID], !stream.finished else { return }
    if let web = stream.web { return sendWeb(stream, web, parts) }
    var initial: Metadata?
    var body: [UInt8] = []
    var bodySize = 0
    var messageCount = 0
    for case .message(let message) in parts {
      bodySize += GRPCFraming.prefixLength + message.count
      messageCount += 1
    }
    // The usual unary reply (headers, one message, status) goes out with the message as it is,
    // framed by the session as it sends it, instead of being copied into a new body.
    let sendsMessageAsIs = messageCount == 1 && !stream.responseStarted && !stream.compressReplies
    var messageAsIs: [UInt8]?
    if !sendsMessageAsIs { body.reserveCapacity(bodySize) }
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
          stream.cancelTask()
        } else if sendsMessageAsIs {
          messageAsIs = message
        } else if stream.compressReplies, message.count >= ResponseCompression.defaultThreshold,
          let packed = Gzip.compress(message)
        {
          let flags = body.count
          GRPCFraming.appendFrame(packed, to: &body)
          body[flags] = 1  // compressed
        } else {
          GRPCFraming.appendFrame(message, to: &body)
        }
      case .status(let code, let message, let trailers):
        status = (code, message, trailers)
      }
    }
    if !stream.responseStarted && body.isEmpty && messageAsIs == nil && initial == nil, let status {
      return finish(stream, code: status.code, message: status.message, trailers: status.trailers)
    }
    pump.chargeReplyBytes(body.count + (messageAsIs.map { GRPCFraming.prefixLength + $0.count } ?? 0))
    if !stream.responseStarted, let messageAsIs, initial?.isEmpty ?? true {
      // The usual reply: no metadata, one message; its header block is laid out once.
      stream.responseStarted = true
      session.submitResponse(
        streamID: streamID, headers: stream.grpcJSON ? Self.preparedJSONResponseHeaders : Self.preparedPlainResponseHeaders,
        message: messageAsIs)
    } else if !stream.responseStarted {
      stream.responseStarted = true
      var headers = responseHeaders(initial ?? [:], json: stream.grpcJSON)
      if stream.compressReplies { headers += Self.gzipResponseHeaders }
      if let messageAsIs {
        session.submitResponse(streamID: streamID, headers: headers, message: messageAsIs)
      } else {
        session.submitResponse(streamID: streamID, headers: headers, body: body)
      }
    } else if !body.isEmpty {
      session.sendData(streamID: streamID, bytes: body)
    }
    if let status {
      stream.finished = true
      freeBuffer(of: stream)
      if let timer = stream.deadlineTimer {
        loop.cancelTimer(timer)
        stream.deadlineTimer = nil
      }
      if status.code == .ok && status.message.isEmpty && status.trailers.isEmpty {
        session.sendTrailers(streamID: streamID, Self.preparedOKTrailers)
      } else {
        session.sendTrailers(
          streamID: streamID, trailerFields(code: status.code, message: status.message, metadata: status.trailers))
      }
    }
    scheduleFlush()
  }

  /// Ends a stream with a status: Trailers-Only before any response headers, else trailers.
  /// A status the transport chose (not the handler) also cancels the handler.
  private func finish(_ stream: ServerStream, code: RPCError.Code, message: String, trailers: Metadata = [:]) {
    guard !stream.finished else { return }
    if let web = stream.web {
      return finishWeb(stream, web, [.status(code, message: message, trailers: trailers)])
    }
    stream.finished = true
    freeBuffer(of: stream)
    if let timer = stream.deadlineTimer { loop.cancelTimer(timer) }
    stream.cancelTask()
    stream.requests?.finish(throwing: RPCError(code: code, message: message))
    let fields = trailerFields(code: code, message: message, metadata: trailers)
    if stream.responseStarted {
      session.sendTrailers(streamID: stream.id, fields)
    } else {
      stream.responseStarted = true
      let headers = stream.grpcJSON ? Self.jsonResponseHeaders : Self.plainResponseHeaders
      session.submitResponse(streamID: stream.id, headers: headers + fields, body: nil)
    }
    scheduleFlush()
  }

  /// Ends a Connect or gRPC-Web stream with parts the transport chose (the last one a status),
  /// cancelling the handler.
  private func finishWeb(_ stream: ServerStream, _ web: WebFraming, _ parts: [RPCResponsePart]) {
    guard !stream.finished, case .status(let code, let message, _)? = parts.last else { return }
    stream.cancelTask()
    stream.requests?.finish(throwing: RPCError(code: code, message: message))
    // Marks the stream finished, frees its buffer and cancels its deadline.
    sendWeb(stream, web, parts)
  }

  /// Sends the parts of a Connect or gRPC-Web response through the stream's encoder: the head
  /// once, body bytes as DATA, and END_STREAM on the last DATA frame (or on the head when there
  /// is no body).
  private func sendWeb(_ stream: ServerStream, _ web: WebFraming, _ parts: [RPCResponsePart]) {
    let out = web.encoder.encode(parts)
    if out.exceededSendLimit { stream.cancelTask() }
    pump.chargeReplyBytes(out.body.count)
    var endsWithHead = false
    if let head = out.head {
      stream.responseStarted = true
      let headers = [HeaderField(name: ":status", value: String(head.status))] + head.fields.map(\.headerField)
      endsWithHead = out.ends && out.body.isEmpty
      session.submitResponse(streamID: stream.id, headers: headers, body: endsWithHead ? nil : out.body)
    } else if !out.body.isEmpty {
      session.sendData(streamID: stream.id, bytes: out.body)
    }
    if out.ends {
      stream.finished = true
      freeBuffer(of: stream)
      if let timer = stream.deadlineTimer { loop.cancelTimer(timer) }
      if !endsWithHead { session.endStream(streamID: stream.id) }
    }
    scheduleFlush()
  }

  /// Answers at the HTTP level with a `text/plain` message (Connect and gRPC-Web clients, browsers).
  private func rejectPlain(_ stream: ServerStream, _ rejection: HTTPRejection) {
    stream.finished = true
    stream.responseStarted = true
    let headers =
      [
        HeaderField(name: ":status", value: String(rejection.status)),
        HeaderField(name: "content-type", value: "text/plain; charset=utf-8"),
      ] + rejection.headers.map(\.headerField)
    session.submitResponse(streamID: stream.id, headers: headers, body: Array((rejection.message + "\n").utf8))
    session.endStream(streamID: stream.id)
    scheduleFlush()
  }

  private func rejectHTTP(_ stream: ServerStream, status: String, message: String) {
    stream.finished = true
    stream.responseStarted = true
    let fields = [
      HeaderField(name: ":status", value: status),
      HeaderField(name: "content-type", value: "application/grpc"),
      HeaderField(name: "grpc-status", value: String(RPCError.Code.internal.rawValue)),
      HeaderField(name: "grpc-message", value: HeaderCoding.percentEncode(StatusBounds.message(message))),
    ]
    session.submitResponse(streamID: stream.id, headers: fields, body: nil)
    scheduleFlush()
  }

  /// The response headers and trailers of most calls (no metadata, `OK`), built once.
  private static let plainResponseHeaders = [
    HeaderField(name: ":status", value: "200"), HeaderField(name: "content-type", value: "application/grpc"),
  ]
  /// The same for the JSON codec: a gRPC reply repeats the request's content subtype.
  private static let jsonResponseHeaders = [
    HeaderField(name: ":status", value: "200"), HeaderField(name: "content-type", value: "application/grpc+json"),
  ]
  private static let okTrailers = [HeaderField(name: "grpc-status", value: "0")]
  /// The same three blocks laid out for nghttp2 once (no per-call copy of their fields).
  private static let preparedPlainResponseHeaders = PreparedHeaderBlock(plainResponseHeaders)
  private static let preparedJSONResponseHeaders = PreparedHeaderBlock(jsonResponseHeaders)
  private static let preparedOKTrailers = PreparedHeaderBlock(okTrailers)

  /// The fields of a gRPC reply whose messages may be gzip.
  private static let gzipResponseHeaders = [
    HeaderField(name: "grpc-encoding", value: "gzip"),
    HeaderField(name: "grpc-accept-encoding", value: CompressionAlgorithm.acceptFieldValue(CompressionAlgorithm.supported)),
  ]

  private func responseHeaders(_ metadata: Metadata, json: Bool) -> [HeaderField] {
    let plain = json ? Self.jsonResponseHeaders : Self.plainResponseHeaders
    if metadata.isEmpty { return plain }
    var fields = plain
    appendMetadata(metadata, to: &fields)
    return fields
  }

  /// `grpc-status`, `grpc-message` and the metadata, the message and details cut to
  /// ``StatusBounds`` so that the block fits.
  private func trailerFields(code: RPCError.Code, message: String, metadata: Metadata) -> [HeaderField] {
    if code == .ok && message.isEmpty && metadata.isEmpty { return Self.okTrailers }
    let (message, metadata) = StatusBounds.bound(message: message, trailers: metadata)
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
}

extension HTTPField {
  /// The field as nghttp2 sends it.
  var headerField: HeaderField { HeaderField(name: name, value: value) }
}
