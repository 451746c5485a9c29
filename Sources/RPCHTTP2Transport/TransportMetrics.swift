import SubstatusMetrics
import Synchronization

/// The server transport's limits and their counters, shared by its loops (relaxed atomics: one
/// add per event, no lock): the budgets of buffered request bytes, of calls in flight and of
/// reply bytes in flight, and what the per-connection limits and the connection cap did.
///
/// A call holds a slot of the calls in flight from its HEADERS until its stream is closed (its
/// handler has answered and the reply has been handed to HTTP/2) or its connection closes; the
/// reply bytes a handler writes are counted from the write until the socket takes them, their
/// stream is reset or their connection closes. A new call is admitted while both are under their
/// limits, and refused with `RESOURCE_EXHAUSTED` and a `google.rpc.RetryInfo` (``CallRefusal``)
/// otherwise, so the memory held by calls stays bounded whatever the clients do: however many
/// connections and streams they open, and whether or not they read their replies. The budget
/// sits in the transport rather than in `RPCServer`'s router because only the transport sees
/// every call (unknown methods, health and reflection included) and knows when a reply's bytes
/// have left for the socket.
final class TransportCounters: Sendable {
  /// The most request bytes all connections together may hold buffered; `nil` is unlimited.
  let maxBufferedRequestBytes: Int?
  /// The most calls in flight; `nil` is unlimited.
  let maxCallsInFlight: Int?
  /// The most reply bytes in flight; `nil` is unlimited.
  let maxReplyBytesInFlight: Int?
  let bufferedRequestBytes = Atomic<Int>(0)
  /// Calls holding a slot now.
  let callsInFlight = Atomic<Int>(0)
  /// The most calls in flight since ``takeCallsInFlightPeak()`` last read it: a burst shorter than
  /// the interval between two readings is still seen.
  let callsInFlightPeak = Atomic<Int>(0)
  /// Reply bytes written by handlers and not yet taken by a socket now.
  let replyBytesInFlight = Atomic<Int>(0)
  let stalledConnections = Atomic<Int>(0)
  let refusedStreams = Atomic<Int>(0)
  let budgetResets = Atomic<Int>(0)
  let idleGoaways = Atomic<Int>(0)
  let ageGoaways = Atomic<Int>(0)
  let handshakeTimeouts = Atomic<Int>(0)
  let keepaliveTimeouts = Atomic<Int>(0)
  let writeTimeouts = Atomic<Int>(0)
  /// Streams reset because their handler waited for room for the write timeout.
  let streamWriteTimeouts = Atomic<Int>(0)
  /// Streams reset because their response headers or trailers could not be sent.
  let unsendableHeaderResets = Atomic<Int>(0)
  let pingFloods = Atomic<Int>(0)
  let graceExpirations = Atomic<Int>(0)
  /// Connections accepted.
  let connectionsAccepted = Atomic<Int>(0)
  /// Idle connections closed (GOAWAY) to make room for a new one at the connection cap.
  let connectionsEvicted = Atomic<Int>(0)
  /// Times a listener stopped accepting because the connection cap was reached.
  let acceptPausesAtCap = Atomic<Int>(0)
  /// `accept` failures for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM):
  /// the listener pauses for a back-off each time.
  let acceptResourceErrors = Atomic<Int>(0)
  /// Calls refused with `RESOURCE_EXHAUSTED` because the budget of calls or reply bytes in
  /// flight was used up.
  let callsRefused = Atomic<Int>(0)

  init(maxBufferedRequestBytes: Int?, maxCallsInFlight: Int?, maxReplyBytesInFlight: Int?) {
    self.maxBufferedRequestBytes = maxBufferedRequestBytes
    self.maxCallsInFlight = maxCallsInFlight
    self.maxReplyBytesInFlight = maxReplyBytesInFlight
  }

  /// Takes a call slot; false (nothing taken, the refusal counted) when the calls or the reply
  /// bytes in flight are at their limit.
  func admitCall() -> Bool {
    if let maxReplyBytesInFlight, replyBytesInFlight.load(ordering: .relaxed) >= maxReplyBytesInFlight {
      callsRefused.add(1, ordering: .relaxed)
      return false
    }
    let calls = callsInFlight.add(1, ordering: .relaxed).newValue
    if let maxCallsInFlight, calls > maxCallsInFlight {
      callsInFlight.subtract(1, ordering: .relaxed)
      callsRefused.add(1, ordering: .relaxed)
      return false
    }
    var peak = callsInFlightPeak.load(ordering: .relaxed)
    while calls > peak {
      let (exchanged, original) = callsInFlightPeak.compareExchange(
        expected: peak, desired: calls, ordering: .relaxed)
      if exchanged { break }
      peak = original
    }
    return true
  }

  /// The most calls in flight since the previous call (at least the calls in flight now); starts
  /// the next period at the calls in flight now.
  func takeCallsInFlightPeak() -> Int {
    let now = callsInFlight.load(ordering: .relaxed)
    return max(now, callsInFlightPeak.exchange(now, ordering: .relaxed))
  }

  /// Gives back the slot of an admitted call.
  func callFinished() { callsInFlight.subtract(1, ordering: .relaxed) }

  /// Counts reply bytes handed to a connection.
  func chargeReplyBytes(_ count: Int) { replyBytesInFlight.add(count, ordering: .relaxed) }

  /// Uncounts reply bytes written to the socket, dropped with their stream or their connection.
  func releaseReplyBytes(_ count: Int) { replyBytesInFlight.subtract(count, ordering: .relaxed) }

  /// Takes `count` bytes from the transport-wide request buffer budget; `false` (nothing taken)
  /// when it would be passed.
  func reserveRequestBytes(_ count: Int) -> Bool {
    let total = bufferedRequestBytes.add(count, ordering: .relaxed).newValue
    if let maxBufferedRequestBytes, total > maxBufferedRequestBytes {
      bufferedRequestBytes.subtract(count, ordering: .relaxed)
      return false
    }
    return true
  }

  func goaway(_ reason: ConnectionStateMachine.GoawayReason) {
    switch reason {
    case .idle: idleGoaways.add(1, ordering: .relaxed)
    case .age: ageGoaways.add(1, ordering: .relaxed)
    case .shutdown: break
    }
  }

  func closed(_ reason: ConnectionStateMachine.CloseReason) {
    switch reason {
    case .handshakeTimeout: handshakeTimeouts.add(1, ordering: .relaxed)
    case .keepaliveTimeout: keepaliveTimeouts.add(1, ordering: .relaxed)
    case .writeTimeout: writeTimeouts.add(1, ordering: .relaxed)
    case .tooManyPings: pingFloods.add(1, ordering: .relaxed)
    case .graceExpired: graceExpirations.add(1, ordering: .relaxed)
    case .drained: break
    }
  }

  /// A reading of the counters, with the connections open now and the connection cap.
  func snapshot(openConnections: Int, connectionLimit: Int?) -> HTTP2ServerTransport.Metrics {
    HTTP2ServerTransport.Metrics(
      bufferedRequestBytes: bufferedRequestBytes.load(ordering: .relaxed),
      writeStalledConnections: stalledConnections.load(ordering: .relaxed),
      refusedStreams: refusedStreams.load(ordering: .relaxed),
      bufferBudgetResets: budgetResets.load(ordering: .relaxed),
      idleGoaways: idleGoaways.load(ordering: .relaxed),
      ageGoaways: ageGoaways.load(ordering: .relaxed),
      handshakeTimeouts: handshakeTimeouts.load(ordering: .relaxed),
      keepaliveTimeouts: keepaliveTimeouts.load(ordering: .relaxed),
      writeTimeouts: writeTimeouts.load(ordering: .relaxed),
      streamWriteTimeouts: streamWriteTimeouts.load(ordering: .relaxed),
      unsendableHeaderResets: unsendableHeaderResets.load(ordering: .relaxed),
      pingFloodCloses: pingFloods.load(ordering: .relaxed),
      graceExpirations: graceExpirations.load(ordering: .relaxed),
      openConnections: openConnections, connectionLimit: connectionLimit ?? 0,
      connectionsAccepted: connectionsAccepted.load(ordering: .relaxed),
      connectionsEvicted: connectionsEvicted.load(ordering: .relaxed),
      acceptPausesAtCap: acceptPausesAtCap.load(ordering: .relaxed),
      acceptResourceErrors: acceptResourceErrors.load(ordering: .relaxed),
      callsInFlight: callsInFlight.load(ordering: .relaxed), callsInFlightLimit: maxCallsInFlight ?? 0,
      replyBytesInFlight: replyBytesInFlight.load(ordering: .relaxed),
      replyBytesInFlightLimit: maxReplyBytesInFlight ?? 0,
      callsRefused: callsRefused.load(ordering: .relaxed))
  }
}

extension HTTP2ServerTransport {
  /// A reading of the transport's limits and counters (``HTTP2ServerTransport/metrics``).
  public struct Metrics: MetricsSource, Sendable, Equatable {
    /// Request bytes held now in connections' buffers (partial messages), all connections.
    public var bufferedRequestBytes: Int
    /// Connections whose output is stuck now (see ``Configuration/writeTimeout``).
    public var writeStalledConnections: Int
    /// Streams refused with `REFUSED_STREAM` because their connection's request buffer was full.
    public var refusedStreams: Int
    /// Streams ended with `RESOURCE_EXHAUSTED` because their data would have passed the
    /// connection's or the transport's request buffer budget.
    public var bufferBudgetResets: Int
    /// Connections sent GOAWAY after ``Configuration/maxConnectionIdle`` without calls.
    public var idleGoaways: Int
    /// Connections sent GOAWAY at ``Configuration/maxConnectionAge``.
    public var ageGoaways: Int
    /// Connections closed for not completing TLS and the HTTP/2 preface in time.
    public var handshakeTimeouts: Int
    /// Connections closed for not acknowledging a keepalive PING in time.
    public var keepaliveTimeouts: Int
    /// Connections closed after ``Configuration/writeTimeout`` without being able to send.
    public var writeTimeouts: Int
    /// Streams reset (RST_STREAM CANCEL) because their client left a paced response unread for
    /// ``Configuration/writeTimeout`` while the connection stayed open.
    public var streamWriteTimeouts: Int
    /// Streams reset (RST_STREAM `INTERNAL_ERROR`) because their response headers or trailers
    /// could not be sent: over the peer's `SETTINGS_MAX_HEADER_LIST_SIZE` or nghttp2's 64 KiB.
    public var unsendableHeaderResets: Int
    /// Connections closed with `GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")`.
    public var pingFloodCloses: Int
    /// Draining connections closed at the end of their grace period with calls still open.
    public var graceExpirations: Int
    /// Connections open now.
    public var openConnections: Int
    /// The connection cap (``Configuration/maxConnections``); 0 when there is none.
    public var connectionLimit: Int
    /// Connections accepted.
    public var connectionsAccepted: Int
    /// Idle connections closed with GOAWAY `max_connections` to make room at the cap.
    public var connectionsEvicted: Int
    /// Times a listener stopped accepting at the cap because every connection had calls open.
    public var acceptPausesAtCap: Int
    /// `accept` failures for want of descriptors or memory (each pauses the listener).
    public var acceptResourceErrors: Int
    /// Calls in flight now (see ``Configuration/maxCallsInFlight``).
    public var callsInFlight: Int
    /// ``Configuration/maxCallsInFlight``; 0 when there is none.
    public var callsInFlightLimit: Int
    /// Reply bytes written by handlers and not yet taken by a socket now.
    public var replyBytesInFlight: Int
    /// ``Configuration/maxReplyBytesInFlight``; 0 when there is none.
    public var replyBytesInFlightLimit: Int
    /// Calls refused with `RESOURCE_EXHAUSTED` over the budget of calls or reply bytes in flight.
    public var callsRefused: Int

    /// The counters as metric families (`substatus_grpc_*`).
    public func metricFamilies() -> [MetricFamily] {
      [
        .gauge(
          "substatus_grpc_buffered_request_bytes",
          "Request bytes held in gRPC connections' buffers (partial messages).", bufferedRequestBytes),
        .gauge(
          "substatus_grpc_write_stalled_connections",
          "gRPC connections whose replies cannot move now (socket full or flow-control window closed).",
          writeStalledConnections),
        .counter(
          "substatus_grpc_refused_streams_total",
          "Streams refused (REFUSED_STREAM) because their connection's request buffer was full.", refusedStreams),
        .counter(
          "substatus_grpc_buffer_budget_resets_total",
          "Calls ended with RESOURCE_EXHAUSTED because the request buffer budget was spent.", bufferBudgetResets),
        .labelled(
          "substatus_grpc_goaways_total", "Connections sent GOAWAY by the server, by reason.", .counter,
          label: "reason", [("idle", idleGoaways), ("max_age", ageGoaways)]),
        .labelled(
          "substatus_grpc_connections_closed_total", "Connections closed by a limit, by limit.", .counter,
          label: "reason",
          [
            ("handshake_timeout", handshakeTimeouts), ("keepalive_timeout", keepaliveTimeouts),
            ("write_timeout", writeTimeouts), ("too_many_pings", pingFloodCloses),
            ("grace_expired", graceExpirations),
          ]),
        .counter(
          "substatus_grpc_stream_write_timeouts_total",
          "Streamed calls reset because their client left the response unread for the write timeout.",
          streamWriteTimeouts),
        .counter(
          "substatus_grpc_unsendable_header_resets_total",
          "Streams reset because their response headers or trailers could not be sent (too large for the peer).",
          unsendableHeaderResets),
        .gauge("substatus_grpc_connections_open", "gRPC connections open.", openConnections),
        .gauge(
          "substatus_grpc_connections_limit", "The gRPC connection cap (--grpc-max-connections; 0: none).",
          connectionLimit),
        .counter("substatus_grpc_connections_accepted_total", "gRPC connections accepted.", connectionsAccepted),
        .counter(
          "substatus_grpc_connections_evicted_total",
          "Idle gRPC connections closed with GOAWAY to make room for a new one at the cap.", connectionsEvicted),
        .counter(
          "substatus_grpc_accept_paused_total",
          "Times a gRPC listener stopped accepting at the cap (every connection busy) until one closed.",
          acceptPausesAtCap),
        .counter(
          "substatus_grpc_accept_errors_total",
          "accept() failures for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM); each pauses the listener.",
          acceptResourceErrors),
        .gauge("substatus_grpc_calls_in_flight", "gRPC calls in flight.", callsInFlight),
        .gauge(
          "substatus_grpc_calls_in_flight_limit", "The budget of calls in flight (--grpc-max-calls; 0: none).",
          callsInFlightLimit),
        .gauge(
          "substatus_grpc_reply_bytes_in_flight", "Reply bytes written by handlers, not yet taken by a socket.",
          replyBytesInFlight),
        .gauge(
          "substatus_grpc_reply_bytes_in_flight_limit",
          "The budget of reply bytes in flight (--grpc-max-reply-bytes; 0: none).", replyBytesInFlightLimit),
        .counter(
          "substatus_grpc_calls_refused_total",
          "Calls refused with RESOURCE_EXHAUSTED because the calls or reply bytes in flight were at their budget.",
          callsRefused),
      ]
    }
  }
}
