import RPCCore
import Synchronization
import SubstatusWire

/// The budget of calls and reply bytes in flight across every connection of a server transport.
///
/// A call holds one slot from its HEADERS until its stream is closed (its handler has answered
/// and the reply has been handed to HTTP/2) or its connection closes; the reply bytes a handler
/// writes are counted from the write until the socket takes them (or the connection closes).
/// A new call is admitted while both are under their limits, and refused with
/// `RESOURCE_EXHAUSTED` and a `google.rpc.RetryInfo` otherwise, so the memory held by calls stays
/// bounded whatever the clients do: however many connections and streams they open, and whether
/// or not they read their replies.
///
/// The budget sits in the transport rather than in ``RPCServer``'s router because only the
/// transport sees every call (unknown methods, health and reflection included) and knows when a
/// reply's bytes have left for the socket.
final class CallBudget: Sendable {
  let maxCalls: Int
  let maxReplyBytes: Int
  private let calls = Atomic<Int>(0)
  private let replyBytes = Atomic<Int>(0)

  init(maxCalls: Int?, maxReplyBytes: Int?) {
    self.maxCalls = maxCalls ?? .max
    self.maxReplyBytes = maxReplyBytes ?? .max
  }

  /// Takes a call slot; false (and nothing taken) when the calls or the reply bytes in flight
  /// are at their limit.
  func admitCall() -> Bool {
    if replyBytes.load(ordering: .relaxed) >= maxReplyBytes { return false }
    if calls.wrappingAdd(1, ordering: .relaxed).newValue > maxCalls {
      calls.wrappingSubtract(1, ordering: .relaxed)
      return false
    }
    return true
  }

  /// Gives back the slot of an admitted call.
  func callFinished() { calls.wrappingSubtract(1, ordering: .relaxed) }

  /// Counts reply bytes handed to a connection.
  func charge(replyBytes n: Int) { if n > 0 { replyBytes.wrappingAdd(n, ordering: .relaxed) } }

  /// Uncounts reply bytes written to the socket or dropped with their connection.
  func release(replyBytes n: Int) { if n > 0 { replyBytes.wrappingSubtract(n, ordering: .relaxed) } }

  /// Calls holding a slot now.
  var callsInFlight: Int { calls.load(ordering: .relaxed) }
  /// Reply bytes not yet written to a socket now.
  var replyBytesInFlight: Int { replyBytes.load(ordering: .relaxed) }

  /// How long a refused client is told to wait before retrying.
  static let retryDelay: Duration = .milliseconds(250)

  /// The trailers of a refused call: `grpc-status-details-bin`, a `google.rpc.Status` holding a
  /// `google.rpc.RetryInfo` (built once).
  static let refusal: (message: String, trailers: Metadata) = {
    let message = "the server is at its limit of calls in flight; retry later"
    var retry = Google_Rpc_RetryInfo()
    var delay = Google_Protobuf_Duration()
    let (seconds, attoseconds) = retryDelay.components
    delay.seconds = seconds
    delay.nanos = Int32(attoseconds / 1_000_000_000)
    retry.retryDelay = delay
    var status = Google_Rpc_Status()
    status.code = Int32(RPCError.Code.resourceExhausted.rawValue)
    status.message = message
    status.details = [Google_Protobuf_Any(packing: retry)]
    var trailers = Metadata()
    trailers.addBinary(status.serializedBytes(), forKey: "grpc-status-details-bin")
    return (message, trailers)
  }()
}

/// Counters of a server transport's limits, for Prometheus.
///
/// Counters only grow; gauges (connections open, calls and reply bytes in flight) are read from
/// the transport when the text is made.
final class TransportCounters: Sendable {
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

}
