public import HTTPServer
public import RPCCore
import RPCWebProtocols
public import SubstatusClock
import SubstatusWire
import Synchronization

/// Connect and gRPC-Web calls on the HTTP/1.1 listener: `POST /package.Service/Method` becomes an
/// ``RPCServerCall`` served by ``RPCServer/handle(_:router:interceptors:)`` with the same router
/// and interceptors as the gRPC port (authentication, rate limits, access log, metrics), framed
/// by `RPCWebProtocols` (the rules both listeners share).
///
/// - Connect unary (`application/json`, `application/proto`) is answered whole: its HTTP status
///   depends on the outcome.
/// - Connect streaming (`application/connect+json`, `+proto`) and gRPC-Web (`application/grpc-web`,
///   `+proto`, `-text`) answer as the handler writes: a call that ends in its first write (every
///   unary method) is answered whole with `Content-Length`; a server stream is sent chunked as its
///   messages come (``HTTPResponse/streamed(status:headers:maxPendingBytes:_:)``).
/// - `Connect-Timeout-Ms` and `grpc-timeout` set the deadline: when it passes the call ends
///   `DEADLINE_EXCEEDED` and its handler is cancelled.
/// - A client that closes its connection ends its call and its handler is cancelled, whatever the
///   call's state: a unary handler running (the listener cancels ``respond(to:)``'s task, within
///   250 ms, see `HTTPServer`), a stream idle between messages, or one held by a reader that
///   stopped reading (its write fails).
/// - A body over the limit (``bodyLimit(for:)``, installed as the listener's body limit) answers
///   `RESOURCE_EXHAUSTED` as the protocol says, before the body is read.
/// - `OPTIONS` preflights and the CORS fields of answers follow ``Configuration/corsAllowedOrigins``.
/// - Connect's GET form of a unary call (`GET /pkg.Service/Method?encoding=json&message=...`,
///   ``ConnectGetRequest``) is served for the methods ``Configuration/allowsGET`` names (those that
///   declare `NO_SIDE_EFFECTS`); a GET of any other method is 405 with `allow: POST`.
///
/// ```swift
/// let gateway = RPCWebGateway(router: router, interceptors: service.interceptors())
/// var routes = service.httpRouter()
/// routes.fallback = { request in await gateway.respond(to: request) }   // routes keep precedence
/// configuration.bodyLimit = { gateway.bodyLimit(for: $0) }
/// ```
public struct RPCWebGateway: Sendable {
  /// The gateway's limits and CORS origins.
  public struct Configuration: Sendable {
    /// Web origins (`scheme://host[:port]`) whose pages may call (CORS); none by default.
    public var corsAllowedOrigins: [String] = []
    /// The largest request message, in bytes (as on the gRPC port).
    public var maxReceiveMessageSize = 4 << 20
    /// The largest response message, in bytes; a larger one ends the call `RESOURCE_EXHAUSTED`.
    public var maxSendMessageSize = 4 << 20
    /// Response bytes of a streamed call that may wait for a slow client. A handler that paces
    /// itself (``RPCCore/RPCResponseWriter/waitForRoom()``) waits once 64 KiB are waiting; writes
    /// never block, so beyond this the call of a handler that does not ends `RESOURCE_EXHAUSTED`
    /// and its handler is cancelled rather than buffering without bound.
    public var maxPendingResponseBytes = 4 << 20
    /// The clock of call deadlines (a manual clock in tests).
    public var clock: any ServiceClock = SystemClock()
    /// Whether a method (its path) may be called with Connect's GET form: by default the methods
    /// whose `rpc` declares `idempotency_level = NO_SIDE_EFFECTS` (`ProtoMethodOptions`).
    public var allowsGET: @Sendable (String) -> Bool = { ProtoMethodOptions.idempotencyLevels[$0] == .noSideEffects }

    /// The defaults.
    public init() {}
  }

  /// The method table, shared with the gRPC port.
  public let router: RPCRouter
  /// The interceptors, outermost first, shared with the gRPC port.
  public let interceptors: [any ServerInterceptor]
  /// The limits and CORS origins.
  public let configuration: Configuration
  private let cors: CORSPolicy

  /// Creates a gateway.
  public init(router: RPCRouter, interceptors: [any ServerInterceptor], configuration: Configuration = Configuration()) {
    self.router = router
    self.interceptors = interceptors
    self.configuration = configuration
    self.cors = CORSPolicy(allowedOrigins: configuration.corsAllowedOrigins)
  }

  /// Whether `path` has the form of an RPC, `/package.Service/Method`.
  public static func isRPCPath(_ path: String) -> Bool {
    let parts = path.split(separator: "/", omittingEmptySubsequences: false)
    return parts.count == 3 && parts[0].isEmpty && parts[1].contains(".") && !parts[2].isEmpty
  }

  /// The body limit of an RPC request and its answer (`RESOURCE_EXHAUSTED` in the call's
  /// protocol); `nil` for any other request, which keeps the listener's limit.
  ///
  /// The limit is one message of ``Configuration/maxReceiveMessageSize`` with its envelope (in
  /// base64 for gRPC-Web text).
  public func bodyLimit(for request: HTTPRequest) -> HTTPBodyLimit? {
    guard Self.isRPCPath(request.path),
      case .success(let format) = CallFormat.classify(method: request.method, contentType: request.headers["content-type"])
    else { return nil }
    var maxBytes = configuration.maxReceiveMessageSize
    switch format.framing {
    case .connectUnary: break
    case .grpcWebText: maxBytes = (maxBytes + 5 + 2) / 3 * 4 + 64  // base64, padding per piece
    case .grpc, .grpcWeb, .connectStreaming: maxBytes += 5
    }
    func answer(_ message: String) -> HTTPResponse {
      var encoder = ResponseEncoder(
        format: format, maxSendMessageSize: configuration.maxSendMessageSize,
        extraFields: cors.responseFields(origin: request.headers["origin"]))
      return Self.whole(encoder.encode([.status(.resourceExhausted, message: message, trailers: [:])]))
    }
    return HTTPBodyLimit(
      maxBytes: maxBytes, response: answer("the request body is larger than the limit of \(maxBytes) bytes"),
      busyResponse: answer("the server's request buffer is full; retry later"))
  }

  /// Answers an RPC request, a CORS preflight, or 404 for a path that is not an RPC's.
  public func respond(to request: HTTPRequest) async -> HTTPResponse {
    let origin = request.headers["origin"]
    if request.method == "OPTIONS" { return preflight(request) }
    guard Self.isRPCPath(request.path) else {
      return HTTPResponse.error(status: 404, message: "no route for \(request.path)")
    }
    let format: CallFormat
    var fields = request.headers.map { HTTPField($0.name, $0.value) }
    var body = request.body
    if request.method == "GET" {
      // Connect's GET form: the message and its encoding in the query.
      guard configuration.allowsGET(request.path) else {
        return Self.response(
          ConnectGetRequest.notAllowed(forSideEffects: request.path), extraFields: cors.responseFields(origin: origin))
      }
      switch ConnectGetRequest.parse(queryItems: request.queryItems) {
      case .success(let get):
        format = get.format
        body = get.message
        fields.removeAll { $0.name == "content-encoding" }
        if let compression = get.compression { fields.append(HTTPField("content-encoding", compression)) }
      case .failure(let rejection): return Self.response(rejection, extraFields: cors.responseFields(origin: origin))
      }
    } else {
      switch CallFormat.classify(method: request.method, contentType: request.headers["content-type"]) {
      case .success(let classified): format = classified
      case .failure(let rejection): return Self.response(rejection, extraFields: cors.responseFields(origin: origin))
      }
    }
    let corsFields = cors.responseFields(origin: origin)
    let head: RequestHead
    switch RequestHead.parse(fields, format: format, supportedCompression: CompressionAlgorithm.supported) {
    case .success(let parsed): head = parsed
    case .failure(let refusal):
      var refusing = ResponseEncoder(
        format: format, maxSendMessageSize: configuration.maxSendMessageSize, extraFields: corsFields)
      return Self.whole(refusing.encode(refusal.responseParts))
    }
    var encoder = ResponseEncoder(
      format: format, maxSendMessageSize: configuration.maxSendMessageSize, extraFields: corsFields,
      compression: ResponseCompression(algorithm: head.responseCompression))
    var messages: [[UInt8]] = []
    do throws(RPCError) {
      var deframer = RequestDeframer(
        format: format, maxMessageSize: configuration.maxReceiveMessageSize, compression: head.compression)
      try deframer.append(body)
      try deframer.finish()
      while let message = try deframer.next() { messages.append(message) }
    } catch {
      return Self.whole(encoder.encode([.status(error.code, message: error.message, trailers: error.metadata)]))
    }

    // The caller's timeout counts from the arrival of the request head, as on the gRPC port (a
    // slow body spends it).
    let clock = configuration.clock
    let remaining = head.timeout.map { timeout in
      timeout - (request.receivedAt.map { clock.monotonicNow - $0 } ?? .zero)
    }
    if let remaining, remaining <= .zero {
      // Already past: the handler is not run (as grpc-go does with an expired deadline).
      return Self.whole(encoder.encode([.status(.deadlineExceeded, message: "deadline exceeded", trailers: [:])]))
    }
    let context = ServerContext(
      method: request.path, metadata: head.metadata, deadline: remaining.map { .now + $0 }, peer: request.peer,
      rpcProtocol: format.rpcProtocol, codec: format.codec)
    let call = GatewayCall(encoder: encoder, maxPendingBytes: configuration.maxPendingResponseBytes)
    let (router, interceptors) = (router, interceptors)
    let handling = Task {
      await RPCServer.handle(
        RPCServerCall(context: context, requests: RPCRequestStream(messages: messages), responses: call),
        router: router, interceptors: interceptors)
    }
    call.setHandler(handling)
    // Cancelled when the call ends: a cancelled deadline lets go of the call at once, whatever
    // deadline the client asked for.
    let deadline = remaining.map { remaining in
      clock.schedule(after: remaining) { call.end(.deadlineExceeded, message: "deadline exceeded") }
    }
    // The listener cancels this task when the client goes away before the first answer (a slow
    // unary handler): the call ends and its handler is cancelled.
    let first = await withTaskCancellationHandler {
      await call.next()
    } onCancel: {
      call.end(.cancelled, message: "the client went away")
    }
    guard !first.ends, let responseHead = first.head else {
      deadline?.cancel()
      return Self.whole(first)
    }
    var headers = HTTPHeaders()
    for field in responseHead.fields { headers.add(name: field.name, value: field.value) }
    return .streamed(status: responseHead.status, headers: headers) { writer in
      defer { deadline?.cancel() }
      do {
        try await withTaskCancellationHandler {
          try await writer.write(first.body)
          while true {
            let output = await call.next()
            try await writer.write(output.body)
            if output.ends { return }
          }
        } onCancel: {
          // The server stops (or the client went away): the stream ends with a status, and the
          // handler is cancelled.
          call.end(.unavailable, message: "the server is shutting down")
        }
      } catch {
        // A write failed: the stream is over (the client went away, or the server ended it),
        // whether or not this task has been cancelled yet. The call ends and its handler is
        // cancelled; otherwise a handler waiting for room (`waitForRoom()`) would wait forever.
        call.end(.cancelled, message: "the client went away")
        throw error
      }
    }
  }

  /// `OPTIONS`: a CORS preflight is answered by the policy; any other `OPTIONS` is 405.
  private func preflight(_ request: HTTPRequest) -> HTTPResponse {
    let origin = request.headers["origin"]
    let requestMethod = request.headers["access-control-request-method"]
    guard CORSPolicy.isPreflight(method: request.method, origin: origin, requestMethod: requestMethod),
      let origin, let requestMethod
    else {
      return Self.response(HTTPRejection(status: 405, message: "RPCs use POST", headers: [HTTPField("allow", "POST")]))
    }
    switch cors.preflight(
      origin: origin, requestMethod: requestMethod, requestHeaders: request.headers["access-control-request-headers"])
    {
    case .success(let head): return HTTPResponse(status: head.status, headers: HTTPHeaders(head.fields.map { ($0.name, $0.value) }))
    case .failure(let rejection): return Self.response(rejection)
    }
  }

  /// A rejection as a `text/plain` answer.
  private static func response(_ rejection: HTTPRejection, extraFields: [HTTPField] = []) -> HTTPResponse {
    var response = HTTPResponse.text(rejection.message, status: rejection.status)
    for field in rejection.headers + extraFields { response.headers.add(name: field.name, value: field.value) }
    return response
  }

  /// An encoded response that is complete, with `Content-Length`.
  private static func whole(_ encoded: EncodedResponse) -> HTTPResponse {
    whole(GatewayOutput(head: encoded.head, body: encoded.body, ends: encoded.ends))
  }

  /// A gateway output that is complete, with `Content-Length` (it always has a head: the encoder
  /// makes one with the status).
  private static func whole(_ output: GatewayOutput) -> HTTPResponse {
    let head = output.head ?? ResponseHead(status: 500, fields: [])
    return HTTPResponse(
      status: head.status, headers: HTTPHeaders(head.fields.map { ($0.name, $0.value) }), body: output.body)
  }
}

/// What the HTTP response sends next: the head (first), body bytes, and whether the call is over.
struct GatewayOutput: Sendable {
  var head: ResponseHead?
  var body: [UInt8] = []
  var ends = false
}

/// The response side of one gateway call: encodes what the handler writes (never blocking it) and
/// hands the bytes to the HTTP response as it asks for them.
final class GatewayCall: RPCResponseWriter {
  private struct State {
    var encoder: ResponseEncoder
    var output = GatewayOutput()
    var headTaken = false
    var waiter: CheckedContinuation<GatewayOutput, Never>?
    var handler: Task<Void, Never>?
    /// The handler waiting for the client to take the pending body (``waitForRoom()``).
    var roomWaiter: CheckedContinuation<Void, Never>?
  }

  /// Pending body bytes beyond which ``waitForRoom()`` waits for the client to take them.
  static let roomBytes = 64 << 10

  private let state: Mutex<State>
  private let maxPendingBytes: Int

  init(encoder: ResponseEncoder, maxPendingBytes: Int) {
    self.state = Mutex(State(encoder: encoder))
    self.maxPendingBytes = maxPendingBytes
  }

  /// The task running the handler, cancelled when the call ends early.
  ///
  /// The task holds this call (its response writer), so the call holds the task only until the
  /// call is over: a task kept after that would keep both, and the request, alive for good.
  func setHandler(_ task: Task<Void, Never>) {
    let cancel = state.withLock { state -> Bool in
      guard !state.output.ends else { return true }
      state.handler = task
      return false
    }
    if cancel { task.cancel() }
  }

  /// Encodes the handler's parts; after the status, nothing more.
  func write(_ parts: [RPCResponsePart]) { append(parts, endedByGateway: false) }

  /// Ends the call with a status of the gateway's (the deadline's) and cancels the handler.
  func end(_ code: RPCError.Code, message: String) {
    append([.status(code, message: message, trailers: [:])], endedByGateway: true)
  }

  private func append(_ parts: [RPCResponsePart], endedByGateway: Bool) {
    let (waiter, cancel, ready) = state.withLock { state -> (CheckedContinuation<GatewayOutput, Never>?, Task<Void, Never>?, GatewayOutput?) in
      guard !state.output.ends else { return (nil, nil, nil) }
      var encoded = state.encoder.encode(parts)
      var cancel = encoded.exceededSendLimit || endedByGateway
      if !encoded.ends && state.output.body.count + encoded.body.count > maxPendingBytes {
        // The handler cannot be made to wait: end the call rather than buffer without bound.
        let overflow = state.encoder.encode([
          .status(
            .resourceExhausted,
            message: "the client reads the response too slowly: more than \(maxPendingBytes) bytes are waiting",
            trailers: [:])
        ])
        encoded.body += overflow.body
        encoded.ends = true
        cancel = true
      }
      if state.output.head == nil { state.output.head = encoded.head }
      state.output.body += encoded.body
      state.output.ends = encoded.ends
      let handler = cancel ? state.handler : nil
      if state.output.ends { state.handler = nil }
      guard let waiter = state.waiter, let ready = Self.take(&state) else { return (nil, handler, nil) }
      state.waiter = nil
      return (waiter, handler, ready)
    }
    cancel?.cancel()
    if let waiter, let ready { waiter.resume(returning: ready) }
    if let room = state.withLock({ Self.takeRoomWaiter(&$0) }) { room.resume() }
  }

  /// Waits while more than ``roomBytes`` of the body wait for the client; returns at once once
  /// the call is over.
  func waitForRoom() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let wait = state.withLock { state -> Bool in
        guard !state.output.ends, state.output.body.count > Self.roomBytes, state.roomWaiter == nil else { return false }
        state.roomWaiter = continuation
        return true
      }
      if !wait { continuation.resume() }
    }
  }

  /// The next output: the first has the head; later ones body bytes; the last `ends`.
  func next() async -> GatewayOutput {
    await withCheckedContinuation { continuation in
      let (ready, room) = state.withLock { state -> (GatewayOutput?, CheckedContinuation<Void, Never>?) in
        if let ready = Self.take(&state) { return (ready, Self.takeRoomWaiter(&state)) }
        state.waiter = continuation
        return (nil, nil)
      }
      room?.resume()
      if let ready { continuation.resume(returning: ready) }
    }
  }

  /// The handler waiting for room, once it has room (or the call is over).
  private static func takeRoomWaiter(_ state: inout State) -> CheckedContinuation<Void, Never>? {
    guard state.output.ends || state.output.body.count <= roomBytes, let room = state.roomWaiter else { return nil }
    state.roomWaiter = nil
    return room
  }

  /// Takes what is ready to send, if anything: the head first, then body bytes or the end.
  private static func take(_ state: inout State) -> GatewayOutput? {
    if !state.headTaken {
      guard state.output.head != nil || state.output.ends else { return nil }
      state.headTaken = true
    } else if state.output.body.isEmpty && !state.output.ends {
      return nil
    }
    let ready = state.output
    state.output = GatewayOutput(head: nil, body: [], ends: ready.ends)
    return ready
  }
}
