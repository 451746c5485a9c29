public import SubstatusClock
import CMicroHTTPD
import Dispatch
import Synchronization
import SubstatusMetrics

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// How an ``HTTPServer`` listens and what it accepts.
public struct HTTPServerConfiguration: Sendable {
  /// The address to bind: an IPv4 or IPv6 literal or a host name (`127.0.0.1`, `::1`, `localhost`).
  public var host: String
  /// The TCP port; 0 binds a free port, see ``HTTPServer/port``.
  public var port: Int
  /// The largest request body accepted; larger ones get 413 before the body is read.
  public var maxBodySize: Int
  /// The most simultaneous connections (`MHD_OPTION_CONNECTION_LIMIT`); at the limit
  /// libmicrohttpd stops accepting until one closes. Keep it below the descriptor limit.
  public var connectionLimit: Int
  /// The most simultaneous connections from one client address; 0 is unlimited. A connection past
  /// it is still accepted, with the short head deadline
  /// (``requestHeadTimeoutUnderPressure``), and its first request is answered
  /// ``HTTPServerConfiguration/overCapResponse`` (503, `Retry-After`, `Connection: close`) instead
  /// of being closed without an answer; only past ``overCapConnectionLimit`` such connections at
  /// once are new ones closed as they are accepted. Connections from a trusted proxy
  /// (``trustedProxies``) do not count: there the cap counts the requests in flight of each
  /// forwarded client.
  public var perAddressConnectionLimit: Int = 0
  /// Trusted reverse proxies: for a connection from one of these ranges, the client is the
  /// address named by `X-Forwarded-For` or `Forwarded` (``ForwardedClient``), the request's
  /// ``HTTPRequest/peer`` names it, and ``perAddressConnectionLimit`` counts its requests in
  /// flight (a client over it gets ``overCapResponse``, the proxy's connection stays open).
  public var trustedProxies: [IPNetwork] = []
  /// Requests that a client cap never refuses (Apple's notifications: another client's abuse
  /// from the same address must not lose them). An exempt request on a connection over the
  /// per-address cap is served, and that connection closed after it.
  public var exemptFromClientCaps: (@Sendable (HTTPRequest) -> Bool)? = nil
  /// Told of each request refused by a cap or the framing rules (on libmicrohttpd's thread:
  /// return quickly).
  public var onRefusal: (@Sendable (HTTPRefusal) -> Void)? = nil
  /// The most connections over their address's cap open at once, all addresses together
  /// (a quarter of ``connectionLimit``, at least ``perAddressConnectionLimit``).
  public var overCapConnectionLimit: Int { max(perAddressConnectionLimit, connectionLimit / 4) }
  /// The answer to a request over a client cap: 503 with `Retry-After: 1`.
  public static var overCapResponse: HTTPResponse {
    var response = HTTPResponse.error(status: 503, message: "too many connections or requests from this client; retry later")
    response.headers.add(name: "Retry-After", value: "1")
    return response
  }
  /// Idle seconds after which a connection is closed (`MHD_OPTION_CONNECTION_TIMEOUT`); 0 never.
  public var connectionTimeoutSeconds: Int
  /// The time a connection has to send a whole request head (request line and headers), from
  /// its opening or from the end of its previous response; a connection late with its head is
  /// shut down, however steadily it trickles bytes. `nil` never.
  public var requestHeadTimeout: Duration? = .seconds(10)
  /// The shorter head deadline that applies while at least 3/4 of ``connectionLimit``
  /// connections are open, so that slow clients cannot hold the last slots.
  public var requestHeadTimeoutUnderPressure: Duration = .seconds(1)
  /// Per-connection buffer for the request line and headers (`MHD_OPTION_CONNECTION_MEMORY_LIMIT`).
  public var connectionMemoryLimit: Int
  /// HTTPS (libmicrohttpd's GnuTLS) with this certificate and key; `nil` serves plain HTTP.
  public var tls: HTTPServerTLS? = nil
  /// The clock that stamps each request's arrival (``HTTPRequest/receivedAt``): the one the
  /// handlers measure deadlines with.
  public var clock: any ServiceClock = SystemClock()
  /// Decides the body limit of a request from its head (the request it is given has no body yet);
  /// when it is `nil` or returns `nil`, the limit is ``maxBodySize`` and a larger body gets 413.
  /// A protocol served on some paths answers oversized bodies its own way with it.
  public var bodyLimit: (@Sendable (HTTPRequest) -> HTTPBodyLimit?)? = nil
  /// The request body bytes all connections together may hold (bodies being received, and those
  /// of requests not yet answered); a body that would pass it is answered with its limit's
  /// ``HTTPBodyLimit/busyResponse`` (by default 503 with `Retry-After: 1`). `nil` is unlimited.
  public var maxBufferedBodyBytes: Int? = nil

  /// Creates a configuration; the defaults suit a notifications/health endpoint.
  public init(
    host: String = "127.0.0.1", port: Int = 0, maxBodySize: Int = 1 << 20,
    connectionLimit: Int = 1024, connectionTimeoutSeconds: Int = 30,
    connectionMemoryLimit: Int = 64 * 1024
  ) {
    self.host = host
    self.port = port
    self.maxBodySize = maxBodySize
    self.connectionLimit = connectionLimit
    self.connectionTimeoutSeconds = connectionTimeoutSeconds
    self.connectionMemoryLimit = connectionMemoryLimit
  }

  /// Parses `HOST:PORT` (`127.0.0.1:8080`, `[::1]:0`, `localhost:0`) into a configuration.
  /// - Throws: ``HTTPServerError`` when the text is not `HOST:PORT` with a port in 0...65535.
  public init(listen: String) throws(HTTPServerError) {
    guard let colon = listen.lastIndex(of: ":") else {
      throw HTTPServerError(message: "listen address '\(listen)' is not HOST:PORT")
    }
    var host = String(listen[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    guard !host.isEmpty, let port = Int(listen[listen.index(after: colon)...]), (0...65535).contains(port)
    else { throw HTTPServerError(message: "listen address '\(listen)' is not HOST:PORT") }
    self.init(host: host, port: port)
  }
}

/// The body limit of one request, and the answer when its body is larger
/// (``HTTPServerConfiguration/bodyLimit``).
public struct HTTPBodyLimit: Sendable {
  /// The largest body accepted, in bytes.
  public var maxBytes: Int
  /// The answer to a larger body, sent before the body is read when `Content-Length` announces
  /// it, else once the limit is passed.
  public var response: HTTPResponse
  /// The answer when the server holds too many request bytes already
  /// (``HTTPServerConfiguration/maxBufferedBodyBytes``).
  public var busyResponse: HTTPResponse

  /// Creates a limit.
  public init(maxBytes: Int, response: HTTPResponse, busyResponse: HTTPResponse = HTTPBodyLimit.defaultBusyResponse) {
    self.maxBytes = maxBytes
    self.response = response
    self.busyResponse = busyResponse
  }

  /// 503 with `Retry-After: 1` and a JSON error body.
  public static var defaultBusyResponse: HTTPResponse {
    var response = HTTPResponse.error(status: 503, message: "the server holds too many request bytes; retry later")
    response.headers.add(name: "Retry-After", value: "1")
    return response
  }
}

/// A request the listener refused before its handler (``HTTPServerConfiguration/onRefusal``).
public struct HTTPRefusal: Sendable {
  /// Why: `connections_per_address` (a connection over its address's cap),
  /// `requests_per_client` (a trusted proxy's client with too many requests in flight), or
  /// `framing` (``HTTPFraming``).
  public var reason: String
  /// The client as ``HTTPRequest/peer`` names it (the forwarded client behind a trusted proxy).
  public var client: String
  /// The status answered.
  public var status: Int
  /// The request's method and path.
  public var method: String, path: String
}

/// The HTTPS certificate of an ``HTTPServer``, as PEM text (read the files before starting).
public struct HTTPServerTLS: Sendable {
  /// The certificate, then any intermediates (PEM).
  public var certificateChainPEM: String
  /// The private key (PEM).
  public var privateKeyPEM: String

  /// Creates HTTPS settings.
  /// - Parameters:
  ///   - certificateChainPEM: The certificate chain (PEM).
  ///   - privateKeyPEM: The private key (PEM).
  public init(certificateChainPEM: String, privateKeyPEM: String) {
    self.certificateChainPEM = certificateChainPEM
    self.privateKeyPEM = privateKeyPEM
  }

  /// Whether the linked libmicrohttpd supports HTTPS (Debian's is built with GnuTLS).
  public static var isSupported: Bool { substatus_mhd_supports_tls() != 0 }
}

/// A failure to start the server (bad address, port in use, libmicrohttpd refusing the options).
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
  /// What went wrong.
  public var message: String
  /// Creates an error.
  public init(message: String) { self.message = message }
  /// The message.
  public var description: String { message }
}

/// An HTTP/1.1 server on libmicrohttpd.
///
/// Threading: libmicrohttpd runs one internal epoll thread (`MHD_USE_INTERNAL_POLLING_THREAD |
/// MHD_USE_EPOLL`). When a request's body is complete, its connection is suspended
/// (`MHD_suspend_connection`) and the handler runs as a Swift task on the cooperative pool; when
/// it returns, the connection is resumed (`MHD_resume_connection`) and the response queued from
/// the event thread. The event thread therefore never waits on a handler: a slow handler holds
/// only its own suspended connection, and the number of handlers in flight is bounded by the
/// connection limit rather than by a thread pool's size (which is what blocking worker threads
/// with a bounded wait would cost). Handlers must not block their thread (use `await`): the
/// cooperative pool has one thread per core.
///
/// A response may stream its body (``HTTPResponse/streamed(status:headers:maxPendingBytes:_:)``):
/// its producer runs in a task and writes through an ``HTTPBodyWriter``, whose writes wait while
/// the connection has not taken the bytes already written (backpressure); the connection sleeps
/// while the producer has nothing to send, and the producer is cancelled when the client goes.
///
/// A client that closes its connection is noticed whatever the request's state, and what serves
/// it is cancelled:
/// - while a response is being sent or waits for the socket (a paused reader), libmicrohttpd
///   polls the connection and sees the close or reset at once; a streamed body's writes then
///   throw and its producer's task is cancelled;
/// - while a handler runs, or a streamed body has nothing to send, the connection is suspended,
///   and libmicrohttpd does not watch a suspended connection ("while a connection is suspended,
///   MHD will not detect disconnects by the client", `MHD_suspend_connection`). A sweep every
///   250 ms peeks at the socket of each such connection (`recv` with `MSG_PEEK`): at its end
///   (the client closed or shut down its sending side) or on a reset, the handler's task is
///   cancelled, or the idle stream ended; the connection then closes once the handler returns
///   (a handler that ignores cancellation holds its connection until it returns);
/// - an idle keep-alive connection is polled by libmicrohttpd and closes with its client (or
///   after ``HTTPServerConfiguration/connectionTimeoutSeconds``).
///
/// Over TLS a close is seen the same way, but bytes the client sent after its request (a TLS
/// alert) count as data, so a suspended connection's close is only seen when it resumes.
///
/// ```swift
/// let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
///   .text("hello \(request.path)")
/// }
/// print(server.port)
/// await server.stop()
/// ```
public final class HTTPServer: MetricsSource, Sendable {
  /// The port the server is bound to (the chosen one when the configuration asked for port 0).
  public let port: Int
  /// The host the server was bound to, as configured.
  public let host: String
  private let core: ServerCore

  /// Binds and starts serving at once.
  /// - Parameters:
  ///   - configuration: where to listen and the limits.
  ///   - handler: answers every request; it runs off libmicrohttpd's threads.
  /// - Throws: ``HTTPServerError`` if the address does not resolve or cannot be bound.
  public init(
    configuration: HTTPServerConfiguration,
    handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse
  ) throws(HTTPServerError) {
    let core = ServerCore(handler: handler, configuration: configuration)
    self.port = try core.start(configuration)
    self.host = configuration.host
    self.core = core
  }

  /// Binds and starts serving the routes of `router`.
  /// - Throws: ``HTTPServerError`` if the address does not resolve or cannot be bound.
  public convenience init(configuration: HTTPServerConfiguration, router: HTTPRouter) throws(HTTPServerError) {
    try self.init(configuration: configuration) { request in await router.respond(to: request) }
  }

  /// Connections open now.
  public var openConnections: Int { core.state.withLock { $0.connections.count } }

  /// The listener's limits and what they did, as metric families (`substatus_http_*`):
  /// connections open, the caps, connections shut down for a late request head.
  public func metricFamilies() -> [MetricFamily] {
    let (open, late, buffered, refused) = core.state.withLock {
      ($0.connections.count, $0.lateHeads, $0.bufferedBodyBytes, $0.bufferRefusals)
    }
    let (refusals, acceptRefusals, overCap, proxied) = core.state.withLock {
      ($0.refusals, $0.acceptRefusals, $0.overCapOpen, $0.proxiedRequests)
    }
    return [
      .gauge("substatus_http_connections_open", "HTTP connections open.", open),
      .gauge(
        "substatus_http_connections_limit", "The HTTP connection cap (--http-max-connections).",
        core.configuration.connectionLimit),
      .gauge(
        "substatus_http_connections_per_address_limit",
        "The HTTP connection cap per client address (--http-max-connections-per-address; 0: none).",
        core.configuration.perAddressConnectionLimit),
      .counter(
        "substatus_http_request_head_timeouts_total",
        "HTTP connections shut down because their request head was not complete in time (--http-request-head-timeout).",
        late),
      .gauge("substatus_http_buffered_request_bytes", "HTTP request body bytes held (--http-request-buffer).", buffered),
      .counter(
        "substatus_http_request_buffer_refusals_total",
        "HTTP requests refused because the request buffer was full (--http-request-buffer).", refused),
      .labelled(
        "substatus_http_requests_refused_total",
        "HTTP requests answered by the listener before their handler: "
          + "503 over a client cap (connections_per_address, requests_per_client), 400/501 for their framing (framing).",
        .counter, label: "reason",
        ["connections_per_address", "requests_per_client", "framing"].map { ($0, refusals[$0] ?? 0) }),
      .gauge(
        "substatus_http_connections_over_address_cap",
        "HTTP connections open past their address's cap, to be answered 503 (--http-max-connections-per-address).",
        overCap),
      .counter(
        "substatus_http_connections_refused_total",
        "HTTP connections closed as accepted: past their address's cap while too many such connections were open.",
        acceptRefusals),
      .counter(
        "substatus_http_trusted_proxy_requests_total",
        "HTTP requests that came through a trusted proxy (--trusted-proxies).", proxied),
      .gauge(
        "substatus_http_trusted_proxies", "Address ranges trusted as reverse proxies (--trusted-proxies).",
        core.configuration.trustedProxies.count),
    ]
  }

  /// `host:port` as a client would dial it (`[::1]:PORT` for IPv6).
  public var address: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

  /// Stops gracefully: stops accepting connections, answers new requests on open connections
  /// with 503, waits up to `gracePeriod` for handlers in flight, answers those still running
  /// with 503, then shuts libmicrohttpd down. Calling it again does nothing.
  public func stop(gracePeriod: Duration = .seconds(5)) async {
    guard core.beginStopping() else { return }
    let clock = ContinuousClock()
    let deadline = clock.now + gracePeriod
    while core.liveRequests > 0 && clock.now < deadline {
      try? await Task.sleep(for: .milliseconds(5))
    }
    core.abortInFlight()
    let flushDeadline = clock.now + .milliseconds(500)
    while core.liveRequests > 0 && clock.now < flushDeadline {
      try? await Task.sleep(for: .milliseconds(5))
    }
    core.shutDown()
  }

  deinit {
    core.abortInFlight()
    core.shutDown()
  }
}

// MARK: - libmicrohttpd glue (everything below talks to C)

/// Per-request state, shared by the event thread and the handler task.
private final class RequestContext: Sendable {
  enum Phase {
    case receiving
    case running
    /// The handler's response, and the writer of its body when it is streamed.
    case completed(HTTPResponse, HTTPBodyWriter?)
    case sent
    /// Refused, to be answered once the (empty) body is in, so that the connection stays open.
    case refused(HTTPResponse)
  }

  struct Mutable {
    var body: [UInt8] = []
    var tooLarge = false
    /// The server's request buffer was full.
    var busy = false
    /// Body bytes charged to the server's request buffer, given back when the request is done.
    var charged = 0
    var phase = Phase.receiving
    /// The task running the handler, cancelled when the client goes away while it runs.
    var handler: Task<Void, Never>?
    /// The client closed the connection while the handler ran.
    var clientGone = false
  }

  /// The forwarded client whose requests in flight this request counts in (behind a trusted
  /// proxy), given back when it is done.
  let countedClient: IPAddress?
  /// Close the connection after the response (a request served on a connection over its
  /// address's cap).
  let closeAfterResponse: Bool

  let connection: UnsafeHandle
  /// Its socket, to notice a client that leaves while the handler runs (the connection is
  /// suspended then, so the socket stays this connection's).
  let socket: Int32
  /// The request without its body.
  let head: HTTPRequest
  /// Its body limit.
  let bodyLimit: HTTPBodyLimit
  let state = Mutex(Mutable())

  init(
    connection: UnsafeHandle, socket: Int32, head: HTTPRequest, bodyLimit: HTTPBodyLimit, countedClient: IPAddress?,
    closeAfterResponse: Bool
  ) {
    self.connection = connection
    self.socket = socket
    self.head = head
    self.bodyLimit = bodyLimit
    self.countedClient = countedClient
    self.closeAfterResponse = closeAfterResponse
  }

  /// The handler's task is running: it is cancelled at once if the client has already gone.
  ///
  /// The task's closure holds this context, so the context holds the task only while the handler
  /// runs (``complete(_:writer:)`` lets it go): a finished task kept here would keep both alive.
  func handlerStarted(_ task: Task<Void, Never>) {
    let gone = state.withLock { state -> Bool in
      guard case .running = state.phase else { return false }
      state.handler = task
      return state.clientGone
    }
    if gone { task.cancel() }
  }

  /// If the handler still runs and the client has closed the connection, marks the client gone
  /// and returns the handler's task to cancel. Called by the sweep while the connection is
  /// suspended (under the server's lock, which its resume also takes).
  func takeHandlerIfClientGone() -> Task<Void, Never>? {
    state.withLock { state in
      guard case .running = state.phase, !state.clientGone, peerHasClosed(socket) else { return nil }
      state.clientGone = true
      return state.handler
    }
  }

  /// Stores the response if the handler is still running; false if someone answered already.
  func complete(_ response: HTTPResponse, writer: HTTPBodyWriter? = nil) -> Bool {
    state.withLock { state in
      guard case .running = state.phase else { return false }
      state.phase = .completed(response, writer)
      state.handler = nil
      return true
    }
  }
}

/// An open connection, for the request-head deadline.
private struct OpenConnection {
  /// Its socket: only shut down (never closed) from outside libmicrohttpd's thread, under
  /// `ServerCore.state`'s lock, which the close notification also takes (libmicrohttpd notifies
  /// before it closes the socket, so a socket in the table is still this connection's).
  var fd: Int32
  /// When the current request head began to be awaited: the opening, or the previous response.
  var headSince: UInt64
  /// The current request's head has arrived.
  var headComplete = false
  /// The client's address (`nil` when libmicrohttpd does not tell it).
  var address: IPAddress?
  /// It comes from a trusted proxy: not counted in its address's connections.
  var trusted = false
  /// It was opened past its address's cap: its first request is answered 503, unless a place
  /// has freed by then.
  var overCap = false
  /// The current request's target, as sent, has a space or a control character (see
  /// ``ServerCore/targetEvent(_:uri:)``).
  var badTarget = false
}

/// What the listener decided about a request from its head.
private struct Admission {
  /// Answer this at once, for this reason (``HTTPRefusal/reason``).
  var refusal: (reason: String, response: HTTPResponse)?
  /// See ``RequestContext/countedClient``.
  var countedClient: IPAddress?
  /// See ``RequestContext/closeAfterResponse``.
  var closeAfterResponse = false
}

private final class ServerCore: Sendable {
  struct State {
    var daemon: UnsafeHandle?
    var listenSocket: Int32 = -1
    var stopping = false
    var live = 0
    var inFlight: [ObjectIdentifier: RequestContext] = [:]
    /// Open connections by libmicrohttpd's connection pointer.
    var connections: [UInt: OpenConnection] = [:]
    /// Connections shut down for a late request head.
    var lateHeads = 0
    /// Request body bytes held (``HTTPServerConfiguration/maxBufferedBodyBytes``).
    var bufferedBodyBytes = 0
    /// Requests answered with the busy response because the request buffer was full.
    var bufferRefusals = 0
    /// Connections counted against their address's cap, by address (not trusted proxies').
    var connectionsByAddress: [IPAddress: Int] = [:]
    /// Connections open past their address's cap.
    var overCapOpen = 0
    /// Requests in flight of each client behind a trusted proxy.
    var requestsByClient: [IPAddress: Int] = [:]
    /// Requests refused before their handler, by reason (``HTTPRefusal/reason``).
    var refusals: [String: Int] = [:]
    /// Connections closed as accepted (past the cap with too many over-cap connections open).
    var acceptRefusals = 0
    /// Requests that came through a trusted proxy.
    var proxiedRequests = 0
    /// Streamed response bodies being sent.
    var streams: [ObjectIdentifier: HTTPBodyWriter] = [:]
    /// Enforces the request-head deadline and notices clients gone from idle streams
    /// (see ``ServerCore/sweep()``).
    var sweeper: (any DispatchSourceTimer)?
  }

  let handler: @Sendable (HTTPRequest) async -> HTTPResponse
  let configuration: HTTPServerConfiguration
  /// The body limit of a request, from its head.
  func bodyLimit(of head: HTTPRequest) -> HTTPBodyLimit {
    if let limit = configuration.bodyLimit?(head) { return limit }
    let maxBytes = configuration.maxBodySize
    return HTTPBodyLimit(maxBytes: maxBytes, response: .error(status: 413, message: "request body exceeds \(maxBytes) bytes"))
  }
  let state = Mutex(State())

  init(handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse, configuration: HTTPServerConfiguration) {
    self.handler = handler
    self.configuration = configuration
  }

  /// Charges `count` body bytes to the request buffer; false (and counted) when they do not fit.
  func chargeBody(_ count: Int) -> Bool {
    state.withLock { state in
      if let limit = configuration.maxBufferedBodyBytes, state.bufferedBodyBytes + count > limit {
        state.bufferRefusals += 1
        return false
      }
      state.bufferedBodyBytes += count
      return true
    }
  }

  /// The periodic sweep: late request heads, and clients gone from suspended connections (see
  /// ``HTTPServer``): handlers in flight and idle streams.
  func sweep() {
    sweepLateHeads()
    // A context in `inFlight` has its connection suspended: it leaves the table under this lock
    // before the connection is resumed.
    let abandoned = state.withLock { state in state.inFlight.values.compactMap { $0.takeHandlerIfClientGone() } }
    for handler in abandoned { handler.cancel() }
    for writer in state.withLock({ Array($0.streams.values) }) { writer.checkClientGone() }
  }

  /// Shuts down the connections whose request head is late: older than
  /// ``HTTPServerConfiguration/requestHeadTimeout``, or than the shorter deadline under pressure.
  /// Shutting a socket down makes libmicrohttpd's thread see its end and close the connection.
  func sweepLateHeads() {
    guard let timeout = configuration.requestHeadTimeout else { return }
    let now = monotonicNanoseconds()
    state.withLock { state in
      let pressured = state.connections.count * 4 >= configuration.connectionLimit * 3
      let limit = pressured ? min(timeout, configuration.requestHeadTimeoutUnderPressure) : timeout
      let deadline = limit.nanoseconds
      let overCapDeadline = min(limit, configuration.requestHeadTimeoutUnderPressure).nanoseconds
      for (key, connection) in state.connections
      where !connection.headComplete && now &- connection.headSince > (connection.overCap ? overCapDeadline : deadline) {
        shutdown(connection.fd, Int32(SHUT_RDWR))
        state.connections[key]?.headComplete = true  // shut down once
        state.lateHeads += 1
      }
    }
  }

  /// libmicrohttpd's connection notifications (on its thread).
  func connectionEvent(_ connection: OpaquePointer, started: Bool) {
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
    if started {
      let fd = substatus_mhd_connection_fd(connection)
      guard fd >= 0 else { return }
      let now = monotonicNanoseconds()
      var open = OpenConnection(fd: fd, headSince: now)
      open.address = clientAddress(connection)
      let limit = configuration.perAddressConnectionLimit
      state.withLock { state in
        if let address = open.address {
          open.trusted = isTrustedProxy(address)
          if !open.trusted && limit > 0 {
            if state.connectionsByAddress[address, default: 0] < limit {
              state.connectionsByAddress[address, default: 0] += 1
            } else {
              open.overCap = true
              state.overCapOpen += 1
            }
          }
        }
        state.connections[key] = open
      }
    } else {
      state.withLock { state in
        guard let open = state.connections.removeValue(forKey: key) else { return }
        if open.overCap {
          state.overCapOpen -= 1
        } else if !open.trusted, configuration.perAddressConnectionLimit > 0, let address = open.address {
          let left = state.connectionsByAddress[address, default: 1] - 1
          state.connectionsByAddress[address] = left > 0 ? left : nil
        }
      }
    }
  }

  /// A request line has been read: `uri` is its target as sent (before percent-decoding), where a
  /// space (libmicrohttpd takes `GET /a b HTTP/1.1` as the target `/a b`), a tab or another
  /// control character is refused (RFC 9112 §3.2).
  func targetEvent(_ connection: OpaquePointer, uri: UnsafePointer<CChar>) {
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
    let bad = UnsafeRawBufferPointer(start: uri, count: strlen(uri)).contains { $0 <= 0x20 || $0 == 0x7f }
    state.withLock { $0.connections[key]?.badTarget = bad }
  }

  func isTrustedProxy(_ address: IPAddress) -> Bool {
    configuration.trustedProxies.contains { $0.contains(address) }
  }

  /// libmicrohttpd's accept policy: a connection past its address's cap is accepted (to be
  /// answered 503) while fewer than ``HTTPServerConfiguration/overCapConnectionLimit`` such
  /// connections are open; past that it is closed at once.
  func accepts(_ address: IPAddress?) -> Bool {
    let limit = configuration.perAddressConnectionLimit
    guard limit > 0, let address, !isTrustedProxy(address) else { return true }
    return state.withLock { state in
      if state.connectionsByAddress[address, default: 0] < limit || state.overCapOpen < configuration.overCapConnectionLimit {
        return true
      }
      state.acceptRefusals += 1
      return false
    }
  }

  /// Decides about a request whose head has arrived: its framing, its client (behind a trusted
  /// proxy, the forwarded one: `head.peer` is set to it) and the client caps.
  func admit(_ connection: OpaquePointer, head: inout HTTPRequest, version: String, rawFault: String?) -> Admission {
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
    let open = state.withLock { $0.connections[key] }
    var client: IPAddress?
    if let open, open.trusted {
      client = ForwardedClient.resolve(headers: head.headers, trusted: configuration.trustedProxies)
      if let client {
        head.forwardedBy = head.peer
        head.peer = client.peerName
      }
    }
    if open?.badTarget == true {
      return refuse("framing", HTTPFraming.Fault.malformedHead("a space or control character in the request target").response, head)
    }
    if let rawFault { return refuse("framing", HTTPFraming.Fault.malformedHead(rawFault).response, head) }
    if let fault = HTTPFraming.check(headers: head.headers, version: version) {
      return refuse("framing", fault.response, head)
    }
    let limit = configuration.perAddressConnectionLimit
    let exempt = configuration.exemptFromClientCaps?(head) ?? false
    guard let open, let address = open.address else { return Admission() }
    if open.trusted {
      let counted = client ?? address
      let over = state.withLock { state -> Bool in
        state.proxiedRequests += 1
        guard limit > 0, !exempt else { return false }
        if state.requestsByClient[counted, default: 0] >= limit { return true }
        state.requestsByClient[counted, default: 0] += 1
        return false
      }
      if over { return refuse("requests_per_client", HTTPServerConfiguration.overCapResponse, head) }
      return Admission(countedClient: limit > 0 && !exempt ? counted : nil)
    }
    guard open.overCap else { return Admission() }
    // Over its address's cap when it was opened: admitted if a place has freed since.
    let admitted = state.withLock { state -> Bool in
      guard state.connections[key]?.overCap == true else { return true }
      guard state.connectionsByAddress[address, default: 0] < limit else { return false }
      state.connections[key]?.overCap = false
      state.overCapOpen -= 1
      state.connectionsByAddress[address, default: 0] += 1
      return true
    }
    if admitted { return Admission() }
    if exempt { return Admission(closeAfterResponse: true) }
    var response = HTTPServerConfiguration.overCapResponse
    response.headers.add(name: "Connection", value: "close")
    return refuse("connections_per_address", response, head)
  }

  private func refuse(_ reason: String, _ response: HTTPResponse, _ head: HTTPRequest) -> Admission {
    state.withLock { $0.refusals[reason, default: 0] += 1 }
    configuration.onRefusal?(
      HTTPRefusal(reason: reason, client: head.peer, status: response.status, method: head.method, path: head.path))
    return Admission(refusal: (reason, response))
  }

  /// A request counted in its forwarded client's requests in flight is done.
  func requestDone(countedClient: IPAddress) {
    state.withLock { state in
      let left = state.requestsByClient[countedClient, default: 1] - 1
      state.requestsByClient[countedClient] = left > 0 ? left : nil
    }
  }

  /// The head of a connection's request has arrived (`headComplete`), or its response has been
  /// sent and the next head is awaited.
  func headEvent(_ connection: OpaquePointer, complete: Bool) {
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
    let now = monotonicNanoseconds()
    state.withLock { state in
      guard state.connections[key] != nil else { return }
      state.connections[key]?.headComplete = complete
      if !complete { state.connections[key]?.headSince = now }
    }
  }

  var liveRequests: Int { state.withLock { $0.live } }

  func start(_ configuration: HTTPServerConfiguration) throws(HTTPServerError) -> Int {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
    var result: UnsafeMutablePointer<addrinfo>?
    let rc = getaddrinfo(configuration.host, String(configuration.port), &hints, &result)
    guard rc == 0, let info = result else {
      throw HTTPServerError(message: "cannot resolve host '\(configuration.host)'")
    }
    defer { freeaddrinfo(result) }
    var flags =
      MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
      | MHD_ALLOW_SUSPEND_RESUME.rawValue
    if info.pointee.ai_family == AF_INET6 { flags |= MHD_USE_IPv6.rawValue }
    if configuration.tls != nil && !HTTPServerTLS.isSupported {
      throw HTTPServerError(message: "this libmicrohttpd has no TLS support")
    }
    let cls = Unmanaged.passRetained(self).toOpaque()
    let started: OpaquePointer?
    if let tls = configuration.tls {
      started = substatus_mhd_start_tls(
        flags, info.pointee.ai_addr, UInt32(clamping: configuration.connectionLimit),
        UInt32(clamping: configuration.connectionTimeoutSeconds),
        // The per-address cap is ours (`accepts`, `admit`), not libmicrohttpd's: it would close
        // connections past it without an answer.
        configuration.connectionMemoryLimit, 0, mhdAcceptPolicy, cls, mhdURILog, cls,
        mhdAccessHandler, cls, mhdRequestCompleted, cls, mhdNotifyConnection, cls,
        tls.certificateChainPEM, tls.privateKeyPEM)
    } else {
      started = substatus_mhd_start(
        flags, info.pointee.ai_addr, UInt32(clamping: configuration.connectionLimit),
        UInt32(clamping: configuration.connectionTimeoutSeconds),
        configuration.connectionMemoryLimit, 0, mhdAcceptPolicy, cls, mhdURILog, cls,
        mhdAccessHandler, cls, mhdRequestCompleted, cls, mhdNotifyConnection, cls)
    }
    guard let daemon = started else {
      Unmanaged<ServerCore>.fromOpaque(cls).release()
      let reason = configuration.tls == nil ? "address in use?" : "address in use, or an unusable certificate or key?"
      throw HTTPServerError(
        message: "cannot listen on \(configuration.host):\(configuration.port) (\(reason))")
    }
    state.withLock { $0.daemon = UnsafeHandle(raw: daemon) }
    state.withLock { state in
      let sweeper = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
      sweeper.schedule(deadline: .now() + .milliseconds(250), repeating: .milliseconds(250))
      sweeper.setEventHandler { [weak self] in self?.sweep() }
      sweeper.resume()
      state.sweeper = sweeper
    }
    return Int(substatus_mhd_bound_port(daemon))
  }

  /// Stops accepting; returns false if already stopping.
  func beginStopping() -> Bool {
    state.withLock { state in
      guard !state.stopping, let daemon = state.daemon else { return false }
      state.stopping = true
      state.listenSocket = Int32(MHD_quiesce_daemon(daemon.raw))
      return true
    }
  }

  /// Answers every handler still running with 503 and resumes its connection, and cancels the
  /// producers of streamed bodies (what they write before returning is still sent).
  func abortInFlight() {
    let streams = state.withLock { state -> [HTTPBodyWriter] in
      state.stopping = true
      guard let daemon = state.daemon else { return [] }
      _ = daemon
      for context in state.inFlight.values
      where context.complete(.error(status: 503, message: "server is shutting down")) {
        MHD_resume_connection(context.connection.raw)
      }
      state.inFlight.removeAll()
      return Array(state.streams.values)
    }
    for writer in streams { writer.cancelProducer() }
  }

  /// Stops libmicrohttpd (after ``abortInFlight()``: no connection may be suspended).
  func shutDown() {
    let (daemon, listenSocket) = state.withLock { state -> (UnsafeHandle?, Int32) in
      defer {
        state.daemon = nil
        state.listenSocket = -1
        state.sweeper?.cancel()
        state.sweeper = nil
      }
      return (state.daemon, state.listenSocket)
    }
    guard let daemon else { return }
    // No connection may stay suspended in a stream's content reader when the daemon stops.
    for writer in state.withLock({ Array($0.streams.values) }) { writer.close() }
    MHD_stop_daemon(daemon.raw)
    if listenSocket >= 0 { close(listenSocket) }
    Unmanaged.passUnretained(self).release()
  }

  /// Runs the handler for `context` as a task; the connection is already suspended. The task is
  /// cancelled if the client goes away while it runs.
  func dispatch(_ context: RequestContext, body: [UInt8]) {
    var request = context.head
    request.body = body
    let task = Task { [self] in
      var response = await handler(request)
      if context.closeAfterResponse { response.headers.replaceOrAdd(name: "Connection", value: "close") }
      let streamed = response.streamedBody
      let writer = streamed.map { HTTPBodyWriter(maxPendingBytes: $0.maxPendingBytes) }
      let answered = state.withLock { state -> Bool in
        // The daemon is alive while we hold the lock and it is set; resume only if we answered.
        guard state.daemon != nil, context.complete(response, writer: writer) else { return false }
        state.inFlight[ObjectIdentifier(context)] = nil
        MHD_resume_connection(context.connection.raw)
        return true
      }
      if answered, let writer, let streamed { writer.run(streamed.produce) }
    }
    context.handlerStarted(task)
  }

  /// A streamed body's response is queued: the sweep watches it until it is gone.
  func streamStarted(_ writer: HTTPBodyWriter) {
    state.withLock { $0.streams[ObjectIdentifier(writer)] = writer }
  }

  /// A streamed body's response is gone.
  func streamEnded(_ writer: HTTPBodyWriter) {
    _ = state.withLock { $0.streams.removeValue(forKey: ObjectIdentifier(writer)) }
  }
}

private final class ValueCollector {
  var fields: [(name: String, value: String)] = []
}

private func collectValues(_ connection: OpaquePointer, kind: MHD_ValueKind) -> [(
  name: String, value: String
)] {
  let collector = ValueCollector()
  withExtendedLifetime(collector) {
    _ = MHD_get_connection_values_n(
      connection, kind,
      { cls, _, key, keySize, value, valueSize in
        guard let cls, let key else { return MHD_Result.YES }
        let collector = Unmanaged<ValueCollector>.fromOpaque(cls).takeUnretainedValue()
        let name = String(decoding: UnsafeRawBufferPointer(start: key, count: keySize), as: UTF8.self)
        let text =
          value.map {
            String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self)
          } ?? ""
        collector.fields.append((name: name, value: text))
        return MHD_Result.YES
      }, Unmanaged.passUnretained(collector).toOpaque())
  }
  return collector.fields
}

/// What libmicrohttpd's content reader of a streamed body holds: the writer and its server.
private final class StreamRegistration {
  let core: ServerCore
  let writer: HTTPBodyWriter
  init(core: ServerCore, writer: HTTPBodyWriter) {
    self.core = core
    self.writer = writer
  }
}

/// The size of the blocks libmicrohttpd asks a streamed body for (one chunk at most).
private let streamBlockSize = 16 * 1024

@discardableResult
private func queue(
  _ response: HTTPResponse, on connection: OpaquePointer, writer: HTTPBodyWriter? = nil, core: ServerCore? = nil
) -> MHD_Result {
  let created: OpaquePointer?
  if let writer, let core {
    let registration = Unmanaged.passRetained(StreamRegistration(core: core, writer: writer)).toOpaque()
    created = MHD_create_response_from_callback(
      UInt64.max /* MHD_SIZE_UNKNOWN: chunked */, streamBlockSize, mhdStreamRead, registration, mhdStreamFree)
    if created == nil {
      Unmanaged<StreamRegistration>.fromOpaque(registration).release()
      writer.close()
    } else {
      writer.attach(connection)
      core.streamStarted(writer)
    }
  } else {
    created = response.body.withUnsafeBytes { bytes in
      if let base = bytes.baseAddress, bytes.count > 0 {
        return MHD_create_response_from_buffer(
          bytes.count, UnsafeMutableRawPointer(mutating: base), .RESPMEM_MUST_COPY)
      }
      return MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT)
    }
  }
  guard let mhdResponse = created else { return MHD_Result.NO }
  defer { MHD_destroy_response(mhdResponse) }
  for field in response.headers where field.name.lowercased() != "content-length" {
    // MHD rejects fields with CR/LF; such a field is dropped rather than sent.
    _ = MHD_add_response_header(mhdResponse, field.name, field.value)
  }
  return MHD_queue_response(connection, UInt32(clamping: response.status), mhdResponse)
}

private let mhdStreamRead: MHD_ContentReaderCallback = { cls, _, buffer, max in
  guard let cls, let buffer else { return HTTPBodyWriter.endWithError }
  let registration = Unmanaged<StreamRegistration>.fromOpaque(cls).takeUnretainedValue()
  return registration.writer.read(into: buffer, max: max)
}

private let mhdStreamFree: MHD_ContentReaderFreeCallback = { cls in
  guard let cls else { return }
  let registration = Unmanaged<StreamRegistration>.fromOpaque(cls).takeRetainedValue()
  registration.writer.detach()
  registration.core.streamEnded(registration.writer)
}

private let mhdAccessHandler: MHD_AccessHandlerCallback = {
  cls, connection, url, method, version, uploadData, uploadDataSize, conCls in
  guard let cls, let connection, let conCls, let uploadDataSize else { return MHD_Result.NO }
  let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()

  guard let existing = conCls.pointee else {
    // First call: the request line and headers are in.
    core.headEvent(connection, complete: true)
    var head = HTTPRequest(
      method: method.map { String(cString: $0) } ?? "",
      path: url.map { String(cString: $0) } ?? "/",
      queryItems: collectValues(connection, kind: .GET_ARGUMENT_KIND),
      headers: HTTPHeaders(collectValues(connection, kind: .HEADER_KIND)))
    head.peer = peerAddress(connection)
    head.receivedAt = core.configuration.clock.monotonicNow
    let rawFault = method.flatMap { method in version.flatMap { rawHeadFault(connection, method: method, version: $0) } }
    let admission = core.admit(
      connection, head: &head, version: version.map { String(cString: $0) } ?? "", rawFault: rawFault)
    let context = RequestContext(
      connection: UnsafeHandle(raw: connection), socket: substatus_mhd_connection_fd(connection), head: head,
      bodyLimit: core.bodyLimit(of: head), countedClient: admission.countedClient,
      closeAfterResponse: admission.closeAfterResponse)
    conCls.pointee = Unmanaged.passRetained(context).toOpaque()
    let stopping = core.state.withLock { state in
      state.live += 1
      return state.stopping
    }
    if let refusal = admission.refusal {
      let hasBody =
        head.headers["Transfer-Encoding"] != nil || (head.headers["Content-Length"].flatMap { Int($0) } ?? 0) > 0
      if !hasBody && refusal.response.headers["Connection"] == nil {
        // Answered at the next call (at once: there is no body), as a normal response: the
        // connection stays open for the proxy's other clients.
        context.state.withLock { $0.phase = .refused(refusal.response) }
        return MHD_Result.YES
      }
      // Answered before the body: libmicrohttpd reads nothing more on this connection.
      context.state.withLock { $0.phase = .sent }
      return queue(refusal.response, on: connection)
    }
    if stopping {
      context.state.withLock { $0.phase = .sent }
      var response = HTTPResponse.error(status: 503, message: "server is shutting down")
      response.headers.add(name: "Connection", value: "close")
      return queue(response, on: connection)
    }
    if let length = head.headers["Content-Length"].flatMap({ Int($0) }), length > context.bodyLimit.maxBytes {
      context.state.withLock { $0.phase = .sent }
      var response = context.bodyLimit.response
      if context.closeAfterResponse { response.headers.replaceOrAdd(name: "Connection", value: "close") }
      return queue(response, on: connection)
    }
    return MHD_Result.YES
  }

  let context = Unmanaged<RequestContext>.fromOpaque(existing).takeUnretainedValue()
  let size = uploadDataSize.pointee
  if size > 0 {
    // A chunk of the body: keep it, or discard it once a limit is passed.
    context.state.withLock { state in
      if !state.tooLarge, !state.busy, state.body.count + size <= context.bodyLimit.maxBytes, let uploadData {
        guard core.chargeBody(size) else {
          state.busy = true
          state.body = []
          return
        }
        state.charged += size
        state.body.append(
          contentsOf: UnsafeRawBufferPointer(start: uploadData, count: size))
      } else {
        state.tooLarge = !state.busy
        state.body = []
      }
    }
    uploadDataSize.pointee = 0
    return MHD_Result.YES
  }

  enum Step {
    case dispatch([UInt8])
    case send(HTTPResponse, HTTPBodyWriter?)
    case nothing
  }
  let step = context.state.withLock { state -> Step in
    switch state.phase {
    case .receiving:
      if state.tooLarge || state.busy {
        state.phase = .sent
        return .send(state.busy ? context.bodyLimit.busyResponse : context.bodyLimit.response, nil)
      }
      state.phase = .running
      defer { state.body = [] }
      return .dispatch(state.body)
    case .completed(let response, let writer):
      state.phase = .sent
      return .send(response, writer)
    case .refused(let response):
      state.phase = .sent
      return .send(response, nil)
    case .running, .sent:
      return .nothing
    }
  }
  switch step {
  case .send(let response, let writer):
    return queue(response, on: connection, writer: writer, core: core)
  case .nothing:
    return MHD_Result.YES
  case .dispatch(let body):
    MHD_suspend_connection(connection)
    core.state.withLock { $0.inFlight[ObjectIdentifier(context)] = context }
    core.dispatch(context, body: body)
    return MHD_Result.YES
  }
}

private let mhdNotifyConnection: MHD_NotifyConnectionCallback = { cls, connection, _, code in
  guard let cls, let connection else { return }
  let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
  switch code {
  case .CONNECTION_NOTIFY_STARTED: core.connectionEvent(connection, started: true)
  case .CONNECTION_NOTIFY_CLOSED: core.connectionEvent(connection, started: false)
  default: break
  }
}

private let mhdAcceptPolicy: MHD_AcceptPolicyCallback = { cls, address, _ in
  guard let cls else { return MHD_Result.YES }
  let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
  return core.accepts(address.flatMap(ipAddress)) ? MHD_Result.YES : MHD_Result.NO
}

private let mhdURILog: substatus_mhd_uri_log = { cls, uri, connection in
  guard let cls, let uri, let connection else { return nil }
  Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().targetEvent(connection, uri: uri)
  return nil
}

/// The address of a connection's client.
private func clientAddress(_ connection: OpaquePointer) -> IPAddress? {
  substatus_mhd_connection_client_address(connection).flatMap(ipAddress)
}

private func ipAddress(_ address: UnsafePointer<sockaddr>) -> IPAddress? {
  switch Int32(address.pointee.sa_family) {
  case AF_INET:
    return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
      var addr = v4.pointee.sin_addr
      return IPAddress(bytes: withUnsafeBytes(of: &addr) { Array($0) })
    }
  case AF_INET6:
    return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
      var addr = v6.pointee.sin6_addr
      return IPAddress(bytes: withUnsafeBytes(of: &addr) { Array($0) })
    }
  default: return nil
  }
}

/// Whether this libmicrohttpd parses a request head in place the way ``rawHeadFault`` reads it
/// (the 0.9.7x series; Debian 12 has 0.9.75).
private let parsesHeadInPlace: Bool = {
  guard let version = MHD_get_version() else { return false }
  return String(cString: version).hasPrefix("0.9.7")
}()

/// What is wrong with the bytes of a request head that libmicrohttpd has parsed, or `nil`.
///
/// libmicrohttpd 0.9.7x parses the head in its read buffer, in place: the request line's
/// separators and each line end become NULs (CR LF two, a bare LF one), a field's colon becomes a
/// NUL, and the method, target, version, names and values it reports point into that buffer, in
/// the order they arrived. So after it, from the end of the version on, the head must read, for
/// each field, `NUL NUL name NUL [SP/HTAB]* value [SP/HTAB]*` and end in `NUL NUL NUL NUL`:
/// - a bare LF line end leaves a single NUL between two lines;
/// - a NUL inside a value leaves bytes after the value's reported end (it is cut there);
/// - an obs-fold line (one starting with SP or HTAB) is joined into another field by moving its
///   name: the names no longer follow one another, or the name starts with a space;
/// - a bare CR stays inside the value;
/// - a name with a space before its colon is not a token.
/// The bytes read are the head's own, up to the 4 NULs of its end (a bare LF there leaves fewer:
/// then at most 2 bytes past the head are read, still inside the connection's read buffer).
private func rawHeadFault(
  _ connection: OpaquePointer, method: UnsafePointer<CChar>, version: UnsafePointer<CChar>
) -> String? {
  guard parsesHeadInPlace else { return nil }
  struct Field {
    var name: UnsafeRawPointer
    var nameCount: Int
    var value: UnsafeRawPointer?
    var valueCount: Int
  }
  final class Collector { var fields: [Field] = [] }
  let collector = Collector()
  withExtendedLifetime(collector) {
    _ = MHD_get_connection_values_n(
      connection, .HEADER_KIND,
      { cls, _, key, keySize, value, valueSize in
        guard let cls, let key else { return MHD_Result.YES }
        Unmanaged<Collector>.fromOpaque(cls).takeUnretainedValue().fields.append(
          Field(name: UnsafeRawPointer(key), nameCount: keySize, value: value.map(UnsafeRawPointer.init), valueCount: valueSize))
        return MHD_Result.YES
      }, Unmanaged.passUnretained(collector).toOpaque())
  }
  let start = UnsafeRawPointer(method)
  func byte(_ p: UnsafeRawPointer) -> UInt8 { p.load(as: UInt8.self) }
  func skipBlanks(_ p: UnsafeRawPointer) -> UnsafeRawPointer {
    var p = p
    while byte(p) == 0x20 || byte(p) == 0x09 { p += 1 }
    return p
  }
  /// After a line's content (and any trailing blanks): its CR LF, as two NULs.
  func lineEnd(_ p: UnsafeRawPointer) -> UnsafeRawPointer? {
    let p = skipBlanks(p)
    return byte(p) == 0 && byte(p + 1) == 0 ? p + 2 : nil
  }
  let endOfHead = "a line ending in a bare LF, or a NUL in a field"
  let versionStart = UnsafeRawPointer(version)
  guard versionStart > start else { return nil }
  guard var position = lineEnd(versionStart + strlen(version)) else { return endOfHead }
  for field in collector.fields {
    guard field.name == position else { return "a folded (obs-fold) or misplaced field line" }
    guard field.nameCount > 0,
      UnsafeRawBufferPointer(start: field.name, count: field.nameCount).allSatisfy(HTTPFraming.isTokenByte)
    else { return "a field name that is not a token" }
    guard byte(field.name + field.nameCount) == 0 else { return "a field line without a colon" }
    let valueStart = skipBlanks(field.name + field.nameCount + 1)
    if field.valueCount > 0 {
      guard let value = field.value, value == valueStart else { return "a folded (obs-fold) or misplaced field value" }
      if UnsafeRawBufferPointer(start: value, count: field.valueCount).contains(where: { $0 == 0x0d || $0 == 0x0a }) {
        return "a CR or LF in a field value"
      }
      position = value + field.valueCount
    } else {
      position = valueStart
    }
    guard let next = lineEnd(position) else { return endOfHead }
    position = next
  }
  guard byte(position) == 0 && byte(position + 1) == 0 else { return endOfHead }
  return nil
}

/// The client's address as gRPC names peers: `ipv4:127.0.0.1:53122`, `ipv6:[::1]:53122`.
private func peerAddress(_ connection: OpaquePointer) -> String {
  guard let address = substatus_mhd_connection_client_address(connection) else { return "unknown" }
  var host = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
  switch Int32(address.pointee.sa_family) {
  case AF_INET:
    return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
      var addr = v4.pointee.sin_addr
      inet_ntop(AF_INET, &addr, &host, socklen_t(host.count))
      return "ipv4:\(String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)):\(UInt16(bigEndian: v4.pointee.sin_port))"
    }
  case AF_INET6:
    return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
      var addr = v6.pointee.sin6_addr
      inet_ntop(AF_INET6, &addr, &host, socklen_t(host.count))
      return "ipv6:[\(String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))]:\(UInt16(bigEndian: v6.pointee.sin6_port))"
    }
  default:
    return "unknown"
  }
}

private func monotonicNanoseconds() -> UInt64 {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

private let mhdRequestCompleted: MHD_RequestCompletedCallback = { cls, connection, conCls, _ in
  guard let cls else { return }
  let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
  // The response is out: the connection's next request head is awaited from now.
  if let connection { core.headEvent(connection, complete: false) }
  guard let conCls, let existing = conCls.pointee else { return }
  conCls.pointee = nil
  let context = Unmanaged<RequestContext>.fromOpaque(existing).takeRetainedValue()
  let charged = context.state.withLock { $0.charged }
  if let client = context.countedClient { core.requestDone(countedClient: client) }
  core.state.withLock { state in
    state.live -= 1
    state.bufferedBodyBytes -= charged
    state.inFlight[ObjectIdentifier(context)] = nil
  }
}
