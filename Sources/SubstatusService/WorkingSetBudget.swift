import RPCCore
import Synchronization
import SubstatusMetrics
import SubstatusWire

/// The memory that calls in flight may hold at once, by estimate (`--max-working-set-bytes`,
/// README "Limits").
///
/// The transport caps the calls in flight and the reply bytes not yet sent; neither says what a
/// call holds while it runs: the store's rows, the decoded values, the reply message being built
/// and its encoding. A heavy call (a page of a user's transactions) estimates that working set
/// from its request, before the store is read (``WorkingSetEstimate``), and reserves it here;
/// the reservation is given back when the call's reply has been encoded and handed to the
/// transport (whose reply-byte budget counts it from there), or when the call fails or is
/// cancelled. A call that cannot reserve is refused at once with `RESOURCE_EXHAUSTED` and a
/// `google.rpc.RetryInfo` (``refusal``), the answer of the transport's call budget: it has read
/// nothing and holds nothing, and the client's retry policy spreads the load. Waiting instead
/// would hold the call's slot, its request and a task for as long as the storm lasts.
///
/// An estimate larger than the whole budget is cut to it: such a call runs when it is alone.
/// Reserving and releasing is one atomic compare-and-exchange each, no lock and no allocation.
///
/// ```swift
/// let budget = WorkingSetBudget(limitBytes: 128 << 20)
/// guard budget.reserve(estimate) else { throw WorkingSetBudget.refusal }
/// defer { budget.release(estimate) }
/// ```
public final class WorkingSetBudget: MetricsSource, Sendable {
  /// The most bytes reserved at once; `Int.max` when unlimited.
  public let limitBytes: Int
  private let reserved = Atomic<Int>(0)
  private let peak = Atomic<Int>(0)
  private let admitted = Atomic<Int>(0)
  private let refused = Atomic<Int>(0)

  /// The default limit (`--max-working-set-bytes`): 2,000 concurrent reads of large histories
  /// then hold at most a few hundred MB (README "Limits").
  public static let defaultLimitBytes = 128 << 20

  /// How long a refused client is told to wait before retrying (the transport's call budget
  /// tells the same).
  public static let retryDelay: Duration = .milliseconds(250)

  /// Creates a budget.
  /// - Parameter limitBytes: the most bytes reserved at once; `nil` is unlimited.
  public init(limitBytes: Int?) {
    self.limitBytes = limitBytes.map { max(1, $0) } ?? .max
  }

  /// Reserves `bytes` (cut to ``limitBytes``) if the budget has room for them.
  /// - Returns: the bytes reserved, to give back to ``release(_:)``; `nil` when refused (counted).
  public func reserve(_ bytes: Int) -> Int? {
    let bytes = min(max(0, bytes), limitBytes)
    var current = reserved.load(ordering: .relaxed)
    while true {
      let (sum, overflow) = current.addingReportingOverflow(bytes)
      guard !overflow, sum <= limitBytes else {
        refused.wrappingAdd(1, ordering: .relaxed)
        return nil
      }
      let (exchanged, original) = reserved.compareExchange(
        expected: current, desired: sum, ordering: .relaxed)
      if exchanged {
        admitted.wrappingAdd(1, ordering: .relaxed)
        peak.max(sum, ordering: .relaxed)
        return bytes
      }
      current = original
    }
  }

  /// Gives back bytes that ``reserve(_:)`` returned.
  public func release(_ bytes: Int) {
    guard bytes > 0 else { return }
    reserved.wrappingSubtract(bytes, ordering: .relaxed)
  }

  /// The bytes reserved now.
  public var reservedBytes: Int { reserved.load(ordering: .relaxed) }

  /// The most bytes reserved at once since the start.
  public var peakBytes: Int { peak.load(ordering: .relaxed) }

  /// Reservations granted since the start.
  public var admittedCount: Int { admitted.load(ordering: .relaxed) }

  /// Reservations refused since the start.
  public var refusedCount: Int { refused.load(ordering: .relaxed) }

  /// The error of a refused call: `RESOURCE_EXHAUSTED` with `grpc-status-details-bin`, a
  /// `google.rpc.Status` holding a `google.rpc.RetryInfo` of ``retryDelay`` (built once).
  public static let refusal: RPCError = {
    var retry = Google_Rpc_RetryInfo()
    var delay = Google_Protobuf_Duration()
    let (seconds, attoseconds) = retryDelay.components
    delay.seconds = seconds
    delay.nanos = Int32(attoseconds / 1_000_000_000)
    retry.retryDelay = delay
    var status = Google_Rpc_Status()
    status.code = Int32(RPCError.Code.resourceExhausted.rawValue)
    status.message = "the server is at its limit of memory for calls in flight; retry later"
    status.details = [Google_Protobuf_Any(packing: retry)]
    var error = RPCError(code: .resourceExhausted, message: status.message)
    error.metadata.addBinary(status.serializedBytes(), forKey: "grpc-status-details-bin")
    return error
  }()

  /// The bytes reserved, the limit, the peak, and the reservations granted and refused, as metric
  /// families.
  public func metricFamilies() -> [MetricFamily] {
    let limit = limitBytes == .max ? 0 : limitBytes
    return [
      .gauge(
        "substatus_working_set_reserved_bytes",
        "Estimated working set of the calls in flight, reserved before the store is read (--max-working-set-bytes).",
        reservedBytes),
      .gauge("substatus_working_set_limit_bytes", "The most working set reserved at once (0: unlimited).", limit),
      .gauge(
        "substatus_working_set_peak_bytes", "The most working set reserved at once since the start.", peakBytes),
      .counter(
        "substatus_working_set_admitted_total", "Calls that reserved their estimated working set.", admittedCount),
      .counter(
        "substatus_working_set_refused_total",
        "Calls refused with RESOURCE_EXHAUSTED because the working-set budget was full.", refusedCount),
    ]
  }
}

/// What a call holds while it runs, estimated from its request before the store is read.
///
/// A page of transactions is held as the store's rows, the decoded transactions, the reply
/// message, protobuf-c's structures while it is packed, and the packed bytes; measured for a page
/// of 350 (RELIABILITY.md "Abuse"): 76 KB of rows, 227 KB decoded, 93 KB of message, 81 KB
/// packed, 58 KB framed by the transport, about 1.5 KiB per transaction with all of them alive.
/// The estimate is that peak, rounded up: about 3 times what an admitted call holds on average.
public enum WorkingSetEstimate {
  /// What any call holds besides its rows: its task, the request, the reply's envelope.
  public static let baseBytes = 16 << 10
  /// One transaction of a page, in all the forms above at once.
  public static let bytesPerTransaction = 2 << 10
  /// The renewal infos that come with a history's first page (one per original transaction:
  /// a few for a user), with the same forms.
  public static let firstPageRenewalInfoBytes = 32 << 10

  /// A page of at most `pageSize` transactions, with the renewal infos on the first page.
  public static func transactionPage(pageSize: Int, firstPage: Bool) -> Int {
    baseBytes + max(0, pageSize + 1) * bytesPerTransaction + (firstPage ? firstPageRenewalInfoBytes : 0)
  }
}
