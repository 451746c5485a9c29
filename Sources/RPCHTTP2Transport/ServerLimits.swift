import RPCCore
import SubstatusWire

/// The answer to a call refused over the transport's budget of calls or reply bytes in flight
/// (``TransportCounters/admitCall()``): `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo`.
enum CallRefusal {
  /// How long a refused client is told to wait before retrying.
  static let retryDelay: Duration = .milliseconds(250)

  /// The status message of a refused call.
  static let message = "the server is at its limit of calls in flight; retry later"

  /// The trailers of a refused call: `grpc-status-details-bin`, a `google.rpc.Status` holding a
  /// `google.rpc.RetryInfo` (built once).
  static let trailers: Metadata = {
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
    return trailers
  }()
}
