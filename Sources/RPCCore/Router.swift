public import SubstatusWire

/// Code that runs around every RPC a server handles: authentication, logging, metrics.
///
/// An interceptor may read the request metadata, reject the RPC by throwing (an ``RPCError`` goes
/// to the caller as it is), and attach typed values to the context for the handler:
///
/// ```swift
/// struct AuthInterceptor: ServerInterceptor {
///   func intercept(
///     _ context: ServerContext, next: (ServerContext) async throws -> Void
///   ) async throws {
///     guard let key = context.metadata.firstString(forKey: "authorization") else {
///       throw RPCError(code: .unauthenticated, message: "missing authorization")
///     }
///     var context = context
///     context[TenantKey.self] = try lookUp(key)
///     try await next(context)
///   }
/// }
/// ```
public protocol ServerInterceptor: Sendable {
  /// Runs the interceptor; call `next` to continue with the next interceptor and the handler.
  ///
  /// - Parameters:
  ///   - context: The RPC's context.
  ///   - next: The rest of the chain; throws what the handler throws.
  func intercept(
    _ context: ServerContext, next: (ServerContext) async throws -> Void
  ) async throws
}

/// A handler at the transport's level: reads serialized requests, writes response parts, and
/// returns the parts to send together with the final `OK` status (a unary handler returns its
/// metadata and message, so that the whole response goes to the transport in one write).
public typealias RPCStreamHandler =
  @Sendable (RPCRequestStream, any RPCResponseWriter, ServerContext) async throws -> [RPCResponsePart]

/// Maps method paths (`/package.Service/Method`) to handlers.
///
/// ```swift
/// var router = RPCRouter()
/// router.registerUnary(
///   method: "/subs.bench.v1.Bench/Echo", request: EchoRequest.self, response: EchoReply.self
/// ) { request, context in
///   EchoReply.with { $0.payload = request.payload }
/// }
/// ```
public struct RPCRouter: Sendable {
  private var handlers: [String: RPCStreamHandler] = [:]
  private var services: Set<Substring> = []
  private var transportThreadMethods: Set<String> = []

  /// An empty router.
  public init() {}

  /// The registered method paths, sorted.
  public var methods: [String] { handlers.keys.sorted() }

  /// The registered service names, sorted (for reflection and health).
  public var serviceNames: [String] { services.map(String.init).sorted() }

  /// Registers a handler that reads and writes serialized messages itself.
  ///
  /// - Parameters:
  ///   - method: The full method path, `/package.Service/Method`.
  ///   - execution: Where the method's RPCs run (see ``HandlerExecution``); `.transportThread` only
  ///     for handlers that never block, served with interceptors that never block either.
  ///   - handler: Reads the request stream and writes `.metadata`/`.message` parts; the router
  ///     writes the parts it returns and the final `.status` when it returns, or the error's status
  ///     when it throws.
  public mutating func registerStreaming(
    method: String, execution: HandlerExecution = .pool, handler: @escaping RPCStreamHandler
  ) {
    precondition(method.hasPrefix("/") && method.dropFirst().contains("/"), "bad method path \(method)")
    handlers[method] = handler
    if execution == .transportThread {
      transportThreadMethods.insert(method)
    } else {
      transportThreadMethods.remove(method)
    }
    let service = method.dropFirst().prefix { $0 != "/" }
    services.insert(service)
  }

  /// Registers a unary handler over bytes.
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - execution: Where the method's RPCs run (see ``HandlerExecution``).
  ///   - handler: Receives the serialized request, returns the serialized response.
  public mutating func registerUnaryBytes(
    method: String, execution: HandlerExecution = .pool,
    handler: @escaping @Sendable ([UInt8], ServerContext) async throws -> [UInt8]
  ) {
    registerStreaming(method: method, execution: execution) { requests, responses, context in
      let request: [UInt8]
      if let complete = requests.takeSingleIfComplete() {
        request = complete
      } else {
        request = try await requests.single()
      }
      let response = try await handler(request, context)
      var parts: [RPCResponsePart] = []
      parts.reserveCapacity(3)  // RPCServer appends the status
      parts.append(.metadata(context.responseInitial))
      parts.append(.message(response))
      return parts
    }
  }

  /// Registers a typed unary handler.
  ///
  /// Messages are read and written in the call's codec (``ServerContext/codec``); a request that
  /// does not decode fails as ``MessageCoding/decode(_:from:codec:)`` says.
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - request: The request message type.
  ///   - response: The response message type.
  ///   - execution: Where the method's RPCs run (see ``HandlerExecution``).
  ///   - handler: Handles one request.
  public mutating func registerUnary<Request: ProtobufJSONMessage, Response: ProtobufJSONMessage>(
    method: String, request: Request.Type, response: Response.Type, execution: HandlerExecution = .pool,
    handler: @escaping @Sendable (Request, ServerContext) async throws -> Response
  ) {
    // Not through registerUnaryBytes: one async closure fewer per call (its frame comes from
    // the call's task allocator, whose first slab a call should not outgrow).
    registerStreaming(method: method, execution: execution) { requests, _, context in
      let bytes: [UInt8]
      if let complete = requests.takeSingleIfComplete() {
        bytes = complete
      } else {
        bytes = try await requests.single()
      }
      let request = try MessageCoding.decode(Request.self, from: bytes, codec: context.codec)
      let response = MessageCoding.encode(try await handler(request, context), codec: context.codec)
      var parts: [RPCResponsePart] = []
      parts.reserveCapacity(3)  // RPCServer appends the status
      parts.append(.metadata(context.responseInitial))
      parts.append(.message(response))
      return parts
    }
  }

  /// Registers a typed server-streaming handler: one request, any number of responses.
  ///
  /// The request is decoded, and each response encoded, in the call's codec
  /// (``ServerContext/codec``); a request that does not decode fails as
  /// ``MessageCoding/decode(_:from:codec:)`` says.
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - request: The request message type.
  ///   - response: The response message type.
  ///   - execution: Where the method's RPCs run (see ``HandlerExecution``).
  ///   - handler: Handles one request, writing responses until it returns; the call then ends
  ///     with `OK`, or with the error it throws.
  public mutating func registerServerStreaming<Request: ProtobufJSONMessage, Response: ProtobufJSONMessage>(
    method: String, request: Request.Type, response: Response.Type, execution: HandlerExecution = .pool,
    handler: @escaping @Sendable (Request, RPCMessageWriter<Response>, ServerContext) async throws -> Void
  ) {
    registerStreaming(method: method, execution: execution) { requests, responses, context in
      let request = try MessageCoding.decode(Request.self, from: try await requests.single(), codec: context.codec)
      try await handler(request, RPCMessageWriter(writer: responses, context: context), context)
      return []
    }
  }

  /// Registers a typed client-streaming handler: any number of requests, one response.
  ///
  /// Messages are read and written in the call's codec (``ServerContext/codec``).
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - request: The request message type.
  ///   - response: The response message type.
  ///   - execution: Where the method's RPCs run (see ``HandlerExecution``).
  ///   - handler: Reads the requests and returns the response.
  public mutating func registerClientStreaming<Request: ProtobufJSONMessage, Response: ProtobufJSONMessage>(
    method: String, request: Request.Type, response: Response.Type, execution: HandlerExecution = .pool,
    handler: @escaping @Sendable (RPCMessageSequence<Request>, ServerContext) async throws -> Response
  ) {
    registerStreaming(method: method, execution: execution) { requests, _, context in
      let response = try await handler(RPCMessageSequence(requests: requests, codec: context.codec), context)
      return [.metadata(context.responseInitial), .message(MessageCoding.encode(response, codec: context.codec))]
    }
  }

  /// Registers a typed bidirectional-streaming handler: requests and responses in both directions
  /// at once.
  ///
  /// Messages are read and written in the call's codec (``ServerContext/codec``).
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - request: The request message type.
  ///   - response: The response message type.
  ///   - execution: Where the method's RPCs run (see ``HandlerExecution``).
  ///   - handler: Reads requests and writes responses until it returns; the call then ends with
  ///     `OK`, or with the error it throws.
  public mutating func registerBidirectionalStreaming<Request: ProtobufJSONMessage, Response: ProtobufJSONMessage>(
    method: String, request: Request.Type, response: Response.Type, execution: HandlerExecution = .pool,
    handler: @escaping @Sendable (RPCMessageSequence<Request>, RPCMessageWriter<Response>, ServerContext) async throws
      -> Void
  ) {
    registerStreaming(method: method, execution: execution) { requests, responses, context in
      try await handler(
        RPCMessageSequence(requests: requests, codec: context.codec), RPCMessageWriter(writer: responses, context: context),
        context)
      return []
    }
  }

  /// The handler for a method path.
  public func handler(for method: String) -> RPCStreamHandler? { handlers[method] }

  /// Where the RPCs of a method path run: as registered, `.pool` for unknown paths.
  public func execution(for method: String) -> HandlerExecution {
    transportThreadMethods.contains(method) ? .transportThread : .pool
  }

  /// Whether a service has any registered method.
  public func hasService(_ service: Substring) -> Bool { services.contains(service) }
}

/// Serves the methods of a router over a transport, running interceptors around each RPC.
///
/// Interceptors run where the RPC's method was registered to run (``HandlerExecution``).
///
/// ```swift
/// let server = RPCServer(transport: transport, router: router, interceptors: [AuthInterceptor()])
/// try await server.run()          // returns after beginGracefulShutdown() and draining
/// ```
public struct RPCServer: Sendable {
  /// The transport RPCs arrive on.
  public let transport: any ServerTransport
  /// The method table.
  public let router: RPCRouter
  /// Interceptors, outermost first.
  public let interceptors: [any ServerInterceptor]

  /// Creates a server.
  public init(transport: any ServerTransport, router: RPCRouter, interceptors: [any ServerInterceptor] = []) {
    self.transport = transport
    self.router = router
    self.interceptors = interceptors
  }

  /// Serves until ``beginGracefulShutdown()`` and in-flight RPCs have finished.
  ///
  /// - Throws: When the transport cannot start.
  public func run() async throws {
    let router = router
    let interceptors = interceptors
    try await transport.listen(
      { call in await RPCServer.handle(call, router: router, interceptors: interceptors) },
      execution: { router.execution(for: $0) })
  }

  /// Stops accepting RPCs; ``run()`` returns once the in-flight ones are done.
  public func beginGracefulShutdown() { transport.beginGracefulShutdown() }

  /// Handles one call: routes it, runs the interceptors and the handler, writes the status.
  public static func handle(
    _ call: RPCServerCall, router: RPCRouter, interceptors: [any ServerInterceptor]
  ) async {
    let context = call.context
    guard let handler = router.handler(for: context.method) else {
      let service = context.service
      let message =
        router.hasService(service)
        ? "unknown method \(context.method.split(separator: "/").last ?? "") for service \(service)"
        : "unknown service \(service)"
      call.responses.write([.status(.unimplemented, message: message, trailers: [:])])
      return
    }
    do {
      var parts: [RPCResponsePart]
      if interceptors.isEmpty {
        // No chain to run: the handler's parts come back without a closure whose captured
        // `parts` would be boxed (an allocation per call).
        parts = try await handler(call.requests, call.responses, context)
      } else {
        var chained: [RPCResponsePart] = []
        try await run(interceptors[...], context: context) { context in
          chained = try await handler(call.requests, call.responses, context)
        }
        parts = chained
      }
      parts.append(.status(.ok, message: "", trailers: context.responseTrailing))
      call.responses.write(parts)
    } catch {
      var error = RPCError(mapping: error)
      var trailers = context.responseTrailing
      trailers.add(contentsOf: error.metadata)
      // Every transport bounds what it sends; bounding here also keeps the in-process transport's
      // and the logs' copies short.
      (error.message, error.metadata) = StatusBounds.bound(message: error.message, trailers: trailers)
      call.responses.write([.status(error.code, message: error.message, trailers: error.metadata)])
    }
  }

  private static func run(
    _ interceptors: ArraySlice<any ServerInterceptor>, context: ServerContext,
    handler: (ServerContext) async throws -> Void
  ) async throws {
    guard let first = interceptors.first else { return try await handler(context) }
    try await first.intercept(context) { context in
      try await run(interceptors.dropFirst(), context: context, handler: handler)
    }
  }
}

/// A generated client of one service (`Service.Client`): typed methods over a client transport.
///
/// Code that wraps a transport (adding credentials, deadlines or retries) can make any service's
/// client over it:
///
/// ```swift
/// func make<Client: RPCServiceClient>(_ type: Client.Type) -> Client { Client(transport: wrapped) }
/// ```
public protocol RPCServiceClient: Sendable {
  /// Creates a client whose calls go over a transport.
  ///
  /// - Parameter transport: Carries the calls.
  init(transport: any ClientTransport)
}

/// Calls unary and server-streaming methods (``serverStreaming(method:request:response:metadata:options:)``)
/// with typed messages over any client transport.
///
/// ```swift
/// let client = RPCClient(transport: transport)
/// let reply = try await client.unary(
///   method: "/subs.bench.v1.Bench/Echo", request: request, response: EchoReply.self)
/// ```
public struct RPCClient: Sendable {
  /// The transport calls go over.
  public let transport: any ClientTransport

  /// Creates a client.
  public init(transport: any ClientTransport) { self.transport = transport }

  /// Calls a unary method.
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - request: The request message.
  ///   - response: The response message type.
  ///   - metadata: Request metadata.
  ///   - options: Timeout and other options.
  /// - Returns: The decoded response.
  /// - Throws: ``RPCError``; a response that does not decode is `INTERNAL`.
  public func unary<Request: ProtobufMessage, Response: ProtobufMessage>(
    method: String, request: Request, response: Response.Type, metadata: Metadata = [:],
    options: CallOptions = CallOptions()
  ) async throws(RPCError) -> Response {
    let reply = try await transport.unary(
      method: method, request: request.serializedBytes(), metadata: metadata, options: options)
    do throws(WireError) {
      return try Response(serializedBytes: reply.message)
    } catch {
      throw RPCError(
        code: .internal, message: "failed to decode \(Response.protoMessageName): \(error.message)",
        cause: error)
    }
  }
}
