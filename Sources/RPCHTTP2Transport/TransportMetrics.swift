import Synchronization

/// The server transport's connection-limit counters, shared by its loops (relaxed atomics: one
/// add per event, no lock).
final class TransportCounters: Sendable {
  /// The most request bytes all connections together may hold buffered; `nil` is unlimited.
  let maxBufferedRequestBytes: Int?
  let bufferedRequestBytes = Atomic<Int>(0)
  let stalledConnections = Atomic<Int>(0)
  let refusedStreams = Atomic<Int>(0)
  let budgetResets = Atomic<Int>(0)
  let idleGoaways = Atomic<Int>(0)
  let ageGoaways = Atomic<Int>(0)
  let handshakeTimeouts = Atomic<Int>(0)
  let keepaliveTimeouts = Atomic<Int>(0)
  let writeTimeouts = Atomic<Int>(0)
  let pingFloods = Atomic<Int>(0)
  let graceExpirations = Atomic<Int>(0)

  init(maxBufferedRequestBytes: Int?) {
    self.maxBufferedRequestBytes = maxBufferedRequestBytes
  }

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

  var snapshot: HTTP2ServerTransport.Metrics {
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
      pingFloodCloses: pingFloods.load(ordering: .relaxed),
      graceExpirations: graceExpirations.load(ordering: .relaxed))
  }
}

extension HTTP2ServerTransport {
  /// A reading of the per-connection limits' counters (``HTTP2ServerTransport/metrics``).
  public struct Metrics: Sendable, Equatable {
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
    /// Connections closed with `GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")`.
    public var pingFloodCloses: Int
    /// Draining connections closed at the end of their grace period with calls still open.
    public var graceExpirations: Int

    /// The counters in the Prometheus text exposition format (version 0.0.4).
    public func prometheusText() -> String {
      var out = ""
      func metric(_ name: String, _ type: String, _ help: String, _ value: Int) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
      }
      metric(
        "substatus_grpc_buffered_request_bytes", "gauge",
        "Request bytes held in gRPC connections' buffers (partial messages).", bufferedRequestBytes)
      metric(
        "substatus_grpc_write_stalled_connections", "gauge",
        "gRPC connections whose replies cannot move now (socket full or flow-control window closed).",
        writeStalledConnections)
      metric(
        "substatus_grpc_refused_streams_total", "counter",
        "Streams refused (REFUSED_STREAM) because their connection's request buffer was full.", refusedStreams)
      metric(
        "substatus_grpc_buffer_budget_resets_total", "counter",
        "Calls ended with RESOURCE_EXHAUSTED because the request buffer budget was spent.", bufferBudgetResets)
      out += "# HELP substatus_grpc_goaways_total Connections sent GOAWAY by the server, by reason.\n"
      out += "# TYPE substatus_grpc_goaways_total counter\n"
      out += "substatus_grpc_goaways_total{reason=\"idle\"} \(idleGoaways)\n"
      out += "substatus_grpc_goaways_total{reason=\"max_age\"} \(ageGoaways)\n"
      out += "# HELP substatus_grpc_connections_closed_total Connections closed by a limit, by limit.\n"
      out += "# TYPE substatus_grpc_connections_closed_total counter\n"
      for (reason, value) in [
        ("handshake_timeout", handshakeTimeouts), ("keepalive_timeout", keepaliveTimeouts),
        ("write_timeout", writeTimeouts), ("too_many_pings", pingFloodCloses), ("grace_expired", graceExpirations),
      ] {
        out += "substatus_grpc_connections_closed_total{reason=\"\(reason)\"} \(value)\n"
      }
      return out
    }
  }
}
