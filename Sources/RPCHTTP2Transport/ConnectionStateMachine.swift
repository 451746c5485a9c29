/// What one HTTP/2 connection's management decides, without I/O: handshake deadline, keepalive
/// and ping policing, idle timeout, maximum age, graceful drain, the budget of buffered request
/// bytes and the write timeout for stalled readers.
///
/// The connection's pump (``ConnectionPump``) reports events with the current time (its clock's
/// `monotonicNow`) and carries out the returned ``Action``. The machine keeps one deadline
/// (``nextDeadline``): the pump arms a single timer for it and calls ``timerFired(now:)``. nghttp2
/// stays the HTTP/2 state machine; this one only decides when a connection should ping, go away
/// or close, in the way of grpc-swift-nio-transport's `ServerConnectionManagementHandler`
/// state machine and grpc-go's keepalive enforcement.
///
/// A value type with no allocation per event: every call is a few comparisons.
struct ConnectionStateMachine {
  /// The limits; `nil` turns a policy off.
  struct Configuration {
    /// A connection that has not completed its handshake (TLS and the HTTP/2 preface) by then is
    /// closed.
    var handshakeTimeout: Duration?
    /// After this long without reading anything, a keepalive PING is sent.
    var keepaliveTime: Duration?
    /// A keepalive PING not acknowledged within this time closes the connection.
    var keepaliveTimeout: Duration = .seconds(20)
    /// Whether the peer's PINGs are policed (the server's side: grpc-go's `EnforcementPolicy`).
    var policesPings = false
    /// Peer PINGs closer together than this are strikes (grpc-go's `MinTime`).
    var minPingInterval: Duration = .seconds(300)
    /// Whether the peer may ping while no stream is open (grpc-go's `PermitWithoutStream`).
    var permitPingWithoutCalls = false
    /// Strikes tolerated before `GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")`.
    var maxPingStrikes = 2
    /// A connection without open streams for this long is sent GOAWAY and closed.
    var maxIdle: Duration?
    /// A connection older than this is sent GOAWAY; its streams get ``maxAgeGrace`` to finish.
    var maxAge: Duration?
    /// The time streams get to finish after GOAWAY for age (or idleness, should one open
    /// meanwhile).
    var maxAgeGrace: Duration = .seconds(30)
    /// A connection that has had output pending without being able to send any of it (the
    /// socket full, or the peer's flow-control window closed) for this long is closed.
    var writeTimeout: Duration?
    /// The most request bytes the connection may hold buffered across its streams.
    var maxBufferedRequestBytes: Int?
  }

  /// Why the connection goes away.
  enum GoawayReason: Equatable {
    /// No stream for ``Configuration/maxIdle``.
    case idle
    /// Older than ``Configuration/maxAge``.
    case age
    /// The server shuts down.
    case shutdown

    /// The GOAWAY debug data, as grpc-go sends it.
    var debugData: String {
      switch self {
      case .idle: "max_idle"
      case .age: "max_age"
      case .shutdown: "server shutdown"
      }
    }
  }

  /// Why the connection closes.
  enum CloseReason: Equatable {
    /// The handshake did not complete within ``Configuration/handshakeTimeout``.
    case handshakeTimeout
    /// A keepalive PING was not acknowledged in time.
    case keepaliveTimeout
    /// Output could not move for ``Configuration/writeTimeout``.
    case writeTimeout
    /// After GOAWAY (sent or received), every stream has finished.
    case drained
    /// After GOAWAY, the grace period ended with streams still open.
    case graceExpired
    /// Too many PINGs (after `GOAWAY(ENHANCE_YOUR_CALM)`).
    case tooManyPings
  }

  /// What the pump must do.
  enum Action: Equatable {
    /// Nothing.
    case none
    /// Send a keepalive PING.
    case sendPing
    /// Send `GOAWAY(NO_ERROR)`: no new streams; open ones may finish.
    case goaway(GoawayReason)
    /// Send `GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")`, fail the open streams and close.
    case goawayTooManyPings
    /// Flush what is queued, then close the socket.
    case close(CloseReason)
  }

  /// Whether a new stream may open.
  enum StreamAdmission: Equatable {
    /// Serve it.
    case accept
    /// Reset it with `REFUSED_STREAM`: the connection's request buffer is full (the client may
    /// retry it elsewhere, nothing of it was processed).
    case refuse
  }

  let configuration: Configuration
  private let createdAt: Duration
  private var handshakeCompleted = false
  private var lastReadAt: Duration
  private var idleSince: Duration
  private(set) var openStreams = 0
  private var pingSentAt: Duration?
  private var lastPingReceivedAt: Duration?
  private var pingStrikes = 0
  private(set) var goawayReason: GoawayReason?
  private var closeAt: Duration?
  private var stalledSince: Duration?
  private(set) var closed = false
  /// The request bytes buffered across the connection's streams.
  private(set) var bufferedRequestBytes = 0

  /// A connection that opened at `now`.
  init(configuration: Configuration, now: Duration) {
    self.configuration = configuration
    createdAt = now
    lastReadAt = now
    idleSince = now
  }

  /// Whether GOAWAY has been sent (for idle, age or shutdown).
  var isDraining: Bool { goawayReason != nil }

  /// Whether output has been stuck since some time (for metrics).
  var isWriteStalled: Bool { stalledSince != nil }

  /// Since when the connection has had no stream open, for eviction at the server's connection
  /// cap; `nil` while streams are open or once it drains or closed.
  var idleSinceForEviction: Duration? { openStreams == 0 && !isDraining && !closed ? idleSince : nil }

  // MARK: Events

  /// The handshake completed: TLS (when configured) and the peer's HTTP/2 preface and SETTINGS.
  mutating func handshakeCompleted(now: Duration) {
    handshakeCompleted = true
    lastReadAt = now
  }

  /// Bytes arrived from the peer.
  mutating func bytesRead(now: Duration) {
    lastReadAt = now
  }

  /// The peer opened a stream (or, on a client, the connection opened one).
  mutating func streamOpened() -> StreamAdmission {
    if let budget = configuration.maxBufferedRequestBytes, bufferedRequestBytes >= budget { return .refuse }
    openStreams += 1
    return .accept
  }

  /// A stream admitted by ``streamOpened()`` closed; when it was the last, the connection is idle
  /// from `now` (a draining connection then closes: see ``drainedAction()``).
  mutating func streamClosed(now: Duration) {
    openStreams -= 1
    if openStreams == 0 { idleSince = now }
  }

  /// Asks to hold `count` more request bytes: `false` (and nothing reserved) when that would pass
  /// the budget: the stream receiving them must be reset with `RESOURCE_EXHAUSTED`.
  mutating func reserveRequestBytes(_ count: Int) -> Bool {
    if let budget = configuration.maxBufferedRequestBytes, bufferedRequestBytes + count > budget { return false }
    bufferedRequestBytes += count
    return true
  }

  /// Returns request bytes that left the buffer (delivered as messages, or freed with their stream).
  mutating func releaseRequestBytes(_ count: Int) {
    bufferedRequestBytes -= count
  }

  /// The peer sent a PING (nghttp2 has acknowledged it). `sentDataOrHeaders`: whether DATA or
  /// HEADERS went out since the previous one (grpc-go forgives the strikes then).
  mutating func pingReceived(now: Duration, sentDataOrHeaders: Bool) -> Action {
    guard configuration.policesPings, !closed else { return .none }
    let previous = lastPingReceivedAt
    lastPingReceivedAt = now
    if sentDataOrHeaders {
      pingStrikes = 0
      return .none
    }
    // Without calls (and without permission), pings must be 2 hours apart, as in grpc-go.
    let minimum =
      openStreams == 0 && !configuration.permitPingWithoutCalls ? .seconds(7200) : configuration.minPingInterval
    if let previous, now - previous < minimum { pingStrikes += 1 }
    guard pingStrikes > configuration.maxPingStrikes else { return .none }
    closed = true
    return .goawayTooManyPings
  }

  /// The peer acknowledged our keepalive PING.
  mutating func pingAckReceived() {
    pingSentAt = nil
  }

  /// Output is pending and none of it could be sent: the socket is full, or the peer's
  /// flow-control windows are closed. Repeated reports keep the first time.
  mutating func writeStalled(now: Duration) {
    if stalledSince == nil { stalledSince = now }
  }

  /// Output moved (or none is pending any more).
  mutating func writeProgressed() {
    stalledSince = nil
  }

  /// Begins a graceful drain for server shutdown: GOAWAY now, close once the streams are done or
  /// at `now + grace`.
  mutating func shutdownRequested(now: Duration, grace: Duration) -> Action {
    guard !closed else { return .none }
    let end = now + grace
    closeAt = min(closeAt ?? end, end)
    if isDraining { return drainedAction() }
    goawayReason = .shutdown
    return .goaway(.shutdown)
  }

  /// The peer sent GOAWAY (the client's side): no new streams here; close once the open ones are
  /// done.
  mutating func goawayReceived() -> Action {
    guard !closed else { return .none }
    if goawayReason == nil { goawayReason = .shutdown }
    return drainedAction()
  }

  /// The timer armed for ``nextDeadline`` fired (or any time: it acts only on what is due).
  mutating func timerFired(now: Duration) -> Action {
    guard !closed else { return .none }
    if !handshakeCompleted, let timeout = configuration.handshakeTimeout, now - createdAt >= timeout {
      return close(.handshakeTimeout)
    }
    if let closeAt, now >= closeAt { return close(.graceExpired) }
    if let stalledSince, let timeout = configuration.writeTimeout, now - stalledSince >= timeout {
      return close(.writeTimeout)
    }
    if let pingSentAt {
      if now - pingSentAt >= configuration.keepaliveTimeout { return close(.keepaliveTimeout) }
    } else if handshakeCompleted, let time = configuration.keepaliveTime, now - lastReadAt >= time {
      pingSentAt = now
      return .sendPing
    }
    if !isDraining, openStreams == 0, let idle = configuration.maxIdle, now - idleSince >= idle {
      goawayReason = .idle
      closeAt = now + configuration.maxAgeGrace
      return .goaway(.idle)
    }
    if !isDraining, let age = configuration.maxAge, now - createdAt >= age {
      goawayReason = .age
      closeAt = now + configuration.maxAgeGrace
      return .goaway(.age)
    }
    return .none
  }

  /// Asked by the pump once its output is written: after GOAWAY (sent or received), close when no
  /// stream is open.
  mutating func drainedAction() -> Action {
    guard isDraining, openStreams == 0, !closed else { return .none }
    return close(.drained)
  }

  private mutating func close(_ reason: CloseReason) -> Action {
    closed = true
    return .close(reason)
  }

  /// The earliest time at which ``timerFired(now:)`` has something to do; `nil` for none.
  var nextDeadline: Duration? {
    guard !closed else { return nil }
    var next: Duration?
    func consider(_ time: Duration) {
      if next == nil || time < next! { next = time }
    }
    if !handshakeCompleted, let timeout = configuration.handshakeTimeout { consider(createdAt + timeout) }
    if let closeAt { consider(closeAt) }
    if let stalledSince, let timeout = configuration.writeTimeout { consider(stalledSince + timeout) }
    if let pingSentAt {
      consider(pingSentAt + configuration.keepaliveTimeout)
    } else if handshakeCompleted, let time = configuration.keepaliveTime {
      consider(lastReadAt + time)
    }
    if !isDraining, openStreams == 0, let idle = configuration.maxIdle { consider(idleSince + idle) }
    if !isDraining, let age = configuration.maxAge { consider(createdAt + age) }
    return next
  }
}
