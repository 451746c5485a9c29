public import RPCCore
public import SubstatusClock
import CLinuxShims
import RPCWebProtocols
import Foundation
import Synchronization

/// A gRPC server transport on HTTP/2 (libnghttp2) and epoll.
///
/// Each stream's `content-type` chooses its protocol: gRPC (`application/grpc`, the fast path), or
/// Connect and gRPC-Web (`application/json`, `application/proto`, `application/connect+…`,
/// `application/grpc-web…`), framed by `RPCWebProtocols` with the same admission, limits,
/// deadlines and cancellation; Connect and gRPC-Web streams are full duplex. Browser origins in
/// ``Configuration/corsAllowedOrigins`` get CORS answers, preflight included.
///
/// One event loop per thread, each with its own listening socket on the same address
/// (`SO_REUSEPORT`), nonblocking sockets, one nghttp2 session per connection. The kernel spreads
/// new connections over the listening sockets by a hash, so a few connections can land on one
/// loop while the others idle; the loop that accepts a connection therefore hands it to the loop
/// serving the fewest connections. By default handlers
/// run in Swift tasks off the loops; their responses come back through each loop's eventfd-woken
/// queue (one wake-up however many arrive), so a slow handler never stalls other connections.
/// Methods registered with ``HandlerExecution/transportThread`` run in tasks whose executor is the
/// connection's event loop: they start, and resume after an `await`, on the loop thread between
/// polls, and their response is applied to the session directly, so an echo-sized call costs no
/// thread hop and no wake-up at all (see `docs/transport-performance.md`).
///
/// The socket is bound in `init`, so ``port`` is known before ``listen(_:)`` (bind port 0 in tests):
///
/// ```swift
/// let transport = try HTTP2ServerTransport(configuration: .init(host: "127.0.0.1", port: 0))
/// let server = RPCServer(transport: transport, router: router)
/// print("listening on", transport.port)
/// try await server.run()
/// ```
public final class HTTP2ServerTransport: ServerTransport {
  /// Settings of the server transport; defaults follow grpc-go.
  public struct Configuration: Sendable {
    /// The host or address to bind, such as `127.0.0.1`, `::` or `0.0.0.0`.
    public var host: String
    /// The port; 0 picks a free port (see ``HTTP2ServerTransport/port``).
    public var port: Int
    /// The number of event loop threads (one listening socket each). Default: one per CPU the
    /// process may run on (``availableCPUs``), as Go's `GOMAXPROCS`.
    public var threads: Int = Configuration.availableCPUs

    /// The CPUs the process may run on: its affinity mask (`taskset`, a cpuset), not all the
    /// machine's. More loops than CPUs only take turns on them, a scheduler slice at a time.
    public static var availableCPUs: Int {
      let n = Int(clinux_available_cpus())
      return n > 0 ? n : max(1, ProcessInfo.processInfo.activeProcessorCount)
    }
    /// The largest request message accepted; larger ones fail with `RESOURCE_EXHAUSTED`.
    public var maxReceiveMessageSize: Int = 4 << 20
    /// The largest response message sent; larger ones fail with `RESOURCE_EXHAUSTED`.
    public var maxSendMessageSize: Int = 4 << 20
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` per connection.
    public var maxConcurrentStreams: Int = 1024
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`; a larger header block resets the stream.
    public var maxHeaderListSize: Int = 64 << 10
    /// After this long without reading anything, the server sends a keepalive PING.
    public var keepaliveTime: Duration = .seconds(7200)
    /// A keepalive PING not acknowledged within this time closes the connection.
    public var keepaliveTimeout: Duration = .seconds(20)
    /// Client PINGs more often than this count as strikes (grpc-go's `MinTime`).
    public var minPingInterval: Duration = .seconds(300)
    /// Whether clients may ping when no call is active (grpc-go's `PermitWithoutStream`).
    public var permitPingWithoutCalls: Bool = false
    /// Strikes tolerated before `GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")`.
    public var maxPingStrikes: Int = 2
    /// A connection without calls for this long is sent GOAWAY and closed; `nil` never.
    public var maxConnectionIdle: Duration? = .seconds(300)
    /// A connection older than this is sent GOAWAY; `nil` never.
    public var maxConnectionAge: Duration? = nil
    /// After GOAWAY for age (or idleness), calls get this long to finish before the connection
    /// closes.
    public var maxConnectionAgeGrace: Duration = .seconds(30)
    /// The most connections served at once; `nil` is unlimited. At the cap the connection idle
    /// the longest (no call open) is sent GOAWAY and closed to make room; when every connection
    /// has calls open, the listeners stop accepting (new clients wait in the kernel's backlog)
    /// until a connection closes. Keep it below the process's descriptor limit.
    public var maxConnections: Int? = nil
    /// The most calls in flight over all connections (from HEADERS until the stream closes);
    /// beyond it a new call gets `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo`. `nil` is
    /// unlimited.
    public var maxCallsInFlight: Int? = nil
    /// The most reply bytes written by handlers and not yet taken by a socket, over all
    /// connections; while more are pending, new calls get `RESOURCE_EXHAUSTED` with a
    /// `google.rpc.RetryInfo`. `nil` is unlimited.
    public var maxReplyBytesInFlight: Int? = nil
    /// After `accept` fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM),
    /// the listener pauses this long, or until a connection closes.
    public var acceptBackoff: Duration = .milliseconds(100)
    /// A connection that has not completed the TLS handshake (with ``tls``) and sent the HTTP/2
    /// preface and SETTINGS within this time is closed.
    public var handshakeTimeout: Duration = .seconds(10)
    /// A connection whose replies could not move for this long (the socket full, or the client's
    /// flow-control windows closed: a reader that stopped reading) is closed and its buffers
    /// freed; `nil` never.
    ///
    /// A stream whose own window stays closed while the connection's is open (a watcher that reads
    /// one stream slowly or pauses) does not count: its handler, waiting for room
    /// (``RPCResponseWriter/waitForRoom()``) for this long, loses that stream (RST_STREAM CANCEL)
    /// and the connection's other calls go on.
    public var writeTimeout: Duration? = .seconds(60)
    /// The unsent response bytes one stream may hold before a handler waiting for room
    /// (``RPCResponseWriter/waitForRoom()``, a streamed response paced by its reader) waits.
    public var maxPendingStreamResponseBytes: Int = 64 << 10
    /// The most request bytes one connection may hold buffered (partial messages) across its
    /// streams: data beyond it ends its call with `RESOURCE_EXHAUSTED`, and a new stream on a
    /// connection whose buffer is full is refused (`REFUSED_STREAM`). Keep it at least
    /// ``maxReceiveMessageSize`` + 5; `nil` is unlimited.
    public var maxConnectionBufferedRequestBytes: Int? = 8 << 20
    /// The most request bytes all connections together may hold buffered: data beyond it ends
    /// its call with `RESOURCE_EXHAUSTED`; `nil` is unlimited.
    public var maxBufferedRequestBytes: Int? = 256 << 20
    /// The clock of every timer and deadline (a ``ManualClock`` in tests).
    public var clock: any ServiceClock = SystemClock()
    /// After ``HTTP2ServerTransport/beginGracefulShutdown()``, calls get this long to finish.
    public var shutdownGracePeriod: Duration = .seconds(30)
    /// `SETTINGS_INITIAL_WINDOW_SIZE` for each stream.
    public var initialWindowSize: Int = 1 << 20
    /// The receive window of each connection.
    public var connectionWindowSize: Int = 16 << 20
    /// TLS for every connection (ALPN `h2` required); `nil` serves cleartext HTTP/2 (h2c).
    public var tls: TLSConfiguration? = nil
    /// Browser origins (`scheme://host[:port]`, or `*` for any) allowed to call over Connect and
    /// gRPC-Web (CORS, preflight included); empty, the default, allows none.
    public var corsAllowedOrigins: [String] = []

    /// Creates a configuration with defaults.
    /// - Parameters:
    ///   - host: The host or address to bind.
    ///   - port: The port; 0 picks a free one.
    public init(host: String, port: Int) {
      self.host = host
      self.port = port
    }
  }

  /// The configuration this transport was created with.
  public let configuration: Configuration
  /// The bound port (the chosen one when the configuration said 0).
  public let port: Int
  /// The bound host, as configured.
  public var host: String { configuration.host }

  let connectionCount = Atomic<Int>(0)
  /// Listeners that stopped accepting (at the cap or after an accept error).
  let pausedListeners = Atomic<Int>(0)
  /// The budgets and counters of the limits, for ``metrics``.
  let counters: TransportCounters
  /// The CORS policy of ``Configuration/corsAllowedOrigins``.
  let cors: CORSPolicy
  private let listenFDs: [Int32]
  /// The TLS context new connections use; replaced by ``reloadTLSCertificates()``.
  private let tlsContext: Mutex<TLSContext?>
  private let state = Mutex<State>(.idle)

  private enum State {
    case idle
    case running(loops: [LoopServer], remaining: Int, done: CheckedContinuation<Void, Never>?)
    case shutDownBeforeStart
    case stopped
  }

  /// Binds the listening sockets.
  ///
  /// - Parameter configuration: Address, threads and limits.
  /// - Throws: ``TLSError`` when the certificate, key or client CA cannot be loaded;
  ///   ``SocketError`` when the address cannot be resolved or bound.
  public init(configuration: Configuration) throws {
    clinux_ignore_sigpipe()
    self.configuration = configuration
    cors = CORSPolicy(allowedOrigins: configuration.corsAllowedOrigins)
    counters = TransportCounters(
      maxBufferedRequestBytes: configuration.maxBufferedRequestBytes, maxCallsInFlight: configuration.maxCallsInFlight,
      maxReplyBytesInFlight: configuration.maxReplyBytesInFlight)
    tlsContext = Mutex(try configuration.tls.map { try TLSContext.server($0) })
    (listenFDs, port) = try Sockets.listen(
      host: configuration.host, port: configuration.port, count: configuration.threads, backlog: 1024)
  }

  deinit {
    // Once listening, the loops own and close the sockets.
    switch state.withLock({ $0 }) {
    case .idle, .shutDownBeforeStart: for fd in listenFDs { close(fd) }
    case .running, .stopped: break
    }
  }

  /// Serves until ``beginGracefulShutdown()`` and in-flight calls have finished (or the grace
  /// period has passed).
  ///
  /// - Throws: ``SocketError`` when an event loop cannot be created.
  public func listen(_ handler: @escaping @Sendable (RPCServerCall) async -> Void) async throws {
    try await listen(handler, execution: { _ in .pool })
  }

  /// Serves like ``listen(_:)``; RPCs of methods for which `execution` answers
  /// ``HandlerExecution/transportThread`` run on the event loop thread that received them.
  ///
  /// - Throws: ``SocketError`` when an event loop cannot be created.
  public func listen(
    _ handler: @escaping @Sendable (RPCServerCall) async -> Void,
    execution: @escaping @Sendable (String) -> HandlerExecution
  ) async throws {
    let loops = try listenFDs.enumerated().map { index, fd in
      LoopServer(
        loop: try EventLoop(name: "h2-server-\(index)", clock: configuration.clock), listenFD: fd, transport: self, handler: handler,
        execution: execution)
    }
    for server in loops { server.peers = loops }
    let start = try state.withLock { state -> Bool in
      switch state {
      case .idle:
        state = .running(loops: loops, remaining: loops.count, done: nil)
        return true
      case .shutDownBeforeStart:
        state = .stopped
        return false
      case .running, .stopped:
        throw SocketError(description: "the transport is already listening or stopped")
      }
    }
    guard start else {
      for fd in listenFDs { close(fd) }
      return
    }
    await withCheckedContinuation { continuation in
      state.withLock { state in
        if case .running(let loops, let remaining, _) = state {
          state = .running(loops: loops, remaining: remaining, done: continuation)
        }
      }
      for server in loops {
        server.loop.execute { server.start() }
        server.loop.startThread { [self] in loopExited() }
      }
    }
  }

  /// Reloads the certificate chain, key and client CA from the files named in
  /// ``Configuration/tls``: new connections use them, connections already open keep theirs.
  /// On failure the previous certificates stay in use.
  ///
  /// - Throws: ``TLSError`` when the files cannot be loaded or do not match, or TLS is not configured.
  public func reloadTLSCertificates() throws(TLSError) {
    guard let tls = configuration.tls else {
      throw TLSError(description: "TLS is not configured")
    }
    let context = try TLSContext.server(tls)
    tlsContext.withLock { $0 = context }
  }

  /// Connections per event loop while listening (handed-over ones included), in loop order.
  var connectionsPerLoop: [Int] {
    state.withLock { state -> [Int] in
      guard case .running(let loops, _, _) = state else { return [] }
      return loops.map { $0.load.load(ordering: .relaxed) }
    }
  }

  /// The most calls that were in flight at once since the previous call of this method (at least
  /// the calls in flight now), for a reader that samples the load at intervals and must not miss
  /// a burst between two samples. Each call starts a new period: give it one reader.
  public func takeCallsInFlightPeak() -> Int { counters.takeCallsInFlightPeak() }

  /// The limits' counters and gauges now (for `/metrics`).
  public var metrics: Metrics {
    counters.snapshot(
      openConnections: connectionCount.load(ordering: .relaxed), connectionLimit: configuration.maxConnections)
  }

  /// Whether the caller runs on an event loop thread of a server transport, as handlers registered
  /// with ``HandlerExecution/transportThread`` do: code that may block can assert that it does not.
  public static var isEventLoopThread: Bool { EventLoop.onAnyLoopThread }

  /// The TLS context for a new connection.
  var currentTLSContext: TLSContext? { tlsContext.withLock { $0 } }

  private func loopExited() {
    let done = state.withLock { state -> CheckedContinuation<Void, Never>? in
      guard case .running(let loops, let remaining, let done) = state else { return nil }
      if remaining == 1 {
        state = .stopped
        return done
      }
      state = .running(loops: loops, remaining: remaining - 1, done: done)
      return nil
    }
    done?.resume()
  }

  /// Stops accepting connections, sends GOAWAY on every connection and lets in-flight calls
  /// finish; ``listen(_:)`` returns once they have (or after the grace period).
  public func beginGracefulShutdown() {
    let loops = state.withLock { state -> [LoopServer] in
      switch state {
      case .idle:
        state = .shutDownBeforeStart
        return []
      case .running(let loops, _, _): return loops
      default: return []
      }
    }
    for server in loops { server.loop.execute { server.beginShutdown() } }
  }
}

/// The part of the server that lives on one event loop: its listening socket and connections.
/// Confined to the loop thread (hence `@unchecked Sendable`: only ``loop`` is used elsewhere).
final class LoopServer: LoopChannel, @unchecked Sendable {
  let loop: EventLoop
  let configuration: HTTP2ServerTransport.Configuration
  let handler: @Sendable (RPCServerCall) async -> Void
  let execution: @Sendable (String) -> HandlerExecution
  let transport: HTTP2ServerTransport
  private var listenFD: Int32
  private var listenToken: UInt64 = 0
  private var connections: [UInt64: ServerConnection] = [:]
  private var stopping = false
  /// The listening socket is out of epoll (at the cap, or backing off after an accept error).
  private var acceptPaused = false
  private var backoffTimer: UInt64?
  /// Connections served by this loop, and handed to it but not yet started (read by every loop
  /// when it accepts a connection, to pick the least loaded).
  let load = Atomic<Int>(0)
  /// Every loop of the transport (this one included); set before the loops start, read and
  /// cleared (at shutdown) only on this loop's thread.
  var peers: [LoopServer] = []

  init(
    loop: EventLoop, listenFD: Int32, transport: HTTP2ServerTransport,
    handler: @escaping @Sendable (RPCServerCall) async -> Void,
    execution: @escaping @Sendable (String) -> HandlerExecution
  ) {
    self.loop = loop
    self.execution = execution
    self.listenFD = listenFD
    self.transport = transport
    self.configuration = transport.configuration
    self.handler = handler
  }

  func start() {
    listenToken = loop.register(fd: listenFD, events: Epoll.input, channel: self)
  }

  /// Accepts what the listening socket has, within the connection cap.
  ///
  /// A slot is reserved (the shared count raised) before `accept`, so the loops together never
  /// pass the cap. At the cap, the connection of this loop idle the longest is sent GOAWAY and
  /// closed to make room; when this loop has none, the other loops are asked to do the same and
  /// this listener stops accepting until a connection closes. When `accept` fails for want of
  /// descriptors or memory, the listener pauses for
  /// ``HTTP2ServerTransport/Configuration/acceptBackoff`` or until a connection closes.
  /// Never a busy loop: a paused listener is out of epoll's interest set.
  func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
    guard !acceptPaused, listenFD >= 0 else { return }
    for _ in 0..<64 {
      let count = transport.connectionCount.wrappingAdd(1, ordering: .relaxed).newValue
      if let limit = configuration.maxConnections, count > limit {
        transport.connectionCount.wrappingSubtract(1, ordering: .relaxed)
        // Only for a client that is waiting: an idle connection of this loop closes at once and
        // its slot is this client's.
        guard hasPendingConnection() else { return }
        if evictIdleConnection() { continue }
        transport.counters.acceptPausesAtCap.wrappingAdd(1, ordering: .relaxed)
        pauseAccepting(backoff: nil)
        for peer in peers where peer !== self {
          peer.loop.execute { [peer] in peer.evictIdleConnection() }
        }
        return
      }
      let fd = clinux_accept_nonblocking(listenFD, nil, nil)
      if fd < 0 {
        let error = errno
        transport.connectionCount.wrappingSubtract(1, ordering: .relaxed)
        switch error {
        case EAGAIN, EWOULDBLOCK: return
        case EINTR, ECONNABORTED, EPROTO, EPERM: continue
        case EMFILE, ENFILE, ENOBUFS, ENOMEM:
          transport.counters.acceptResourceErrors.wrappingAdd(1, ordering: .relaxed)
          pauseAccepting(backoff: configuration.acceptBackoff)
          return
        default:
          pauseAccepting(backoff: configuration.acceptBackoff)
          return
        }
      }
      transport.counters.connectionsAccepted.wrappingAdd(1, ordering: .relaxed)
      // Serve it here unless another loop has fewer connections.
      var target = self
      var least = load.load(ordering: .relaxed)
      for peer in peers where peer !== self {
        let peerLoad = peer.load.load(ordering: .relaxed)
        if peerLoad < least {
          least = peerLoad
          target = peer
        }
      }
      target.load.wrappingAdd(1, ordering: .relaxed)
      if target === self {
        adopt(fd)
      } else if !target.loop.execute({ [target] in target.adopt(fd) }) {
        target.dropped(fd)
      }
    }
  }

  /// Whether a client waits in this listener's backlog (a zero-timeout poll).
  private func hasPendingConnection() -> Bool {
    var entry = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
    return poll(&entry, 1, 0) > 0 && entry.revents & Int16(POLLIN) != 0
  }

  /// Takes the listening socket out of epoll's interest set (it stays bound: new clients wait
  /// in the backlog); with `backoff`, puts it back after that long whatever happens.
  private func pauseAccepting(backoff: Duration?) {
    if !acceptPaused {
      acceptPaused = true
      transport.pausedListeners.wrappingAdd(1, ordering: .sequentiallyConsistent)
      loop.modify(fd: listenFD, events: 0, token: listenToken)
      // A connection that closed on another loop just before this pause saw no paused listener
      // and resumed none: if its slot is free now, resume at once. (Sequentially consistent with
      // `releaseSlot`: either that close sees this pause, or this sees its slot.)
      if backoff == nil, let limit = configuration.maxConnections,
        transport.connectionCount.load(ordering: .sequentiallyConsistent) < limit
      {
        resumeAccepting()
        return
      }
    }
    if let backoff, backoffTimer == nil {
      backoffTimer = loop.schedule(after: backoff) { [weak self] in
        self?.backoffTimer = nil
        self?.resumeAccepting()
      }
    }
  }

  /// Puts a paused listening socket back into epoll (level-triggered: a waiting client is
  /// reported at once).
  func resumeAccepting() {
    guard acceptPaused, !stopping, listenFD >= 0 else { return }
    acceptPaused = false
    transport.pausedListeners.wrappingSubtract(1, ordering: .relaxed)
    loop.modify(fd: listenFD, events: Epoll.input, token: listenToken)
  }

  /// Closes this loop's connection idle the longest (GOAWAY, then close), if any; false when
  /// every one has calls open. An idle connection costs a descriptor and memory and serves no
  /// one: at the cap, a new client is worth more (grpc clients reconnect on their next call).
  @discardableResult
  func evictIdleConnection() -> Bool {
    var victim: ServerConnection?
    var oldest = Duration.seconds(Int64.max)
    for connection in connections.values {
      if let since = connection.idleSinceForEviction, since < oldest {
        oldest = since
        victim = connection
      }
    }
    guard let victim else { return false }
    transport.counters.connectionsEvicted.wrappingAdd(1, ordering: .relaxed)
    victim.evict()
    return true
  }

  /// Starts serving an accepted connection on this loop.
  func adopt(_ fd: Int32) {
    guard !stopping else { return dropped(fd) }
    _ = clinux_set_nodelay(fd)
    var tls: TLSConnection?
    if let context = transport.currentTLSContext {
      tls = TLSConnection(server: context)
      if tls == nil { return dropped(fd) }
    }
    let connection = ServerConnection(fd: fd, server: self, tls: tls)
    connection.start()
    connections[connection.token] = connection
  }

  /// Closes an accepted connection that will not be served, undoing its counts.
  private func dropped(_ fd: Int32) {
    close(fd)
    load.wrappingSubtract(1, ordering: .relaxed)
    releaseSlot()
  }

  /// Gives back a connection's slot under the cap, and re-arms the listeners that paused.
  private func releaseSlot() {
    transport.connectionCount.wrappingSubtract(1, ordering: .sequentiallyConsistent)
    guard transport.pausedListeners.load(ordering: .sequentiallyConsistent) > 0 else { return }
    for peer in peers {
      if peer === self {
        resumeAccepting()
      } else {
        peer.loop.execute { [peer] in peer.resumeAccepting() }
      }
    }
  }

  /// Delivers response parts from a handler task (runs on the loop).
  func deliver(token: UInt64, streamID: Int32, parts: [RPCResponsePart]) {
    connections[token]?.respond(streamID: streamID, parts: parts)
  }

  /// Resumes `waiter` once the stream has room for more of its response (runs on the loop).
  func awaitRoom(token: UInt64, streamID: Int32, _ waiter: CheckedContinuation<Void, Never>) {
    guard let connection = connections[token] else { return waiter.resume() }
    connection.awaitRoom(streamID: streamID, waiter)
  }

  func connectionClosed(_ connection: ServerConnection) {
    connections[connection.token] = nil
    load.wrappingSubtract(1, ordering: .relaxed)
    releaseSlot()
    if stopping && connections.isEmpty { loop.stop() }
  }

  func beginShutdown() {
    guard !stopping else { return }
    stopping = true
    peers = []  // the loops refer to each other only while accepting: no cycle once stopped
    if let backoffTimer { loop.cancelTimer(backoffTimer) }
    if acceptPaused {
      acceptPaused = false
      transport.pausedListeners.wrappingSubtract(1, ordering: .relaxed)
    }
    if listenFD >= 0 {
      loop.unregister(fd: listenFD, token: listenToken)
      close(listenFD)
      listenFD = -1
    }
    if connections.isEmpty {
      loop.stop()
      return
    }
    for connection in connections.values { connection.beginShutdown(grace: configuration.shutdownGracePeriod) }
  }
}

/// Sends a stream's response parts to its connection's loop: directly when called on the loop
/// thread (a handler running there), else through the loop's mailbox.
struct StreamResponseWriter: RPCResponseWriter {
  let server: LoopServer
  let token: UInt64
  let streamID: Int32

  func write(_ parts: [RPCResponsePart]) {
    if server.loop.isCurrentThread {
      server.deliver(token: token, streamID: streamID, parts: parts)
      return
    }
    let server = server
    let token = token
    let streamID = streamID
    server.loop.execute { server.deliver(token: token, streamID: streamID, parts: parts) }
  }

  func waitForRoom() async {
    let server = server
    let token = token
    let streamID = streamID
    await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
      if server.loop.isCurrentThread {
        server.awaitRoom(token: token, streamID: streamID, waiter)
      } else {
        server.loop.execute { server.awaitRoom(token: token, streamID: streamID, waiter) }
      }
    }
  }
}
