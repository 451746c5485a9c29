public import RPCCore

/// When and how often ``SubstatusClient`` retries a failed call.
///
/// A call is retried only when **both** hold:
/// - it failed with `UNAVAILABLE` (the server, the store or Apple is temporarily unreachable;
///   no other status is ever retried), and
/// - the method is idempotent (see ``SubstatusClient`` for the list: every read, and the ingest
///   calls, which the API deduplicates by transaction id).
///
/// Between attempts the client waits an exponentially growing backoff with jitter:
/// attempt *n* (counting the first retry as 1) waits a uniformly random duration in
/// `[(1 - jitter) × b, b]` where `b = min(maximumBackoff, initialBackoff × multiplier^(n-1))`.
/// The per-call timeout bounds the whole call, retries and backoffs included.
///
/// ```swift
/// let client = SubstatusClient(
///   transport: transport, apiKey: key,
///   retryPolicy: RetryPolicy(maximumAttempts: 5, initialBackoff: .milliseconds(50)))
/// ```
public struct RetryPolicy: Sendable, Hashable {
  /// The most attempts a call makes, the first one included; 1 disables retries.
  public var maximumAttempts: Int
  /// The backoff before the first retry.
  public var initialBackoff: Duration
  /// The longest backoff between two attempts.
  public var maximumBackoff: Duration
  /// The factor the backoff grows by after each retry.
  public var multiplier: Double
  /// The fraction of each backoff that is randomized, from 0 (none) to 1 (full jitter).
  public var jitter: Double

  /// Creates a policy.
  ///
  /// - Parameters:
  ///   - maximumAttempts: The most attempts per call, at least 1.
  ///   - initialBackoff: The wait before the first retry.
  ///   - maximumBackoff: The cap on any wait.
  ///   - multiplier: The growth factor, at least 1.
  ///   - jitter: The randomized fraction of each wait, clamped to `0...1`.
  public init(
    maximumAttempts: Int = 5, initialBackoff: Duration = .milliseconds(200),
    maximumBackoff: Duration = .seconds(3), multiplier: Double = 2, jitter: Double = 0.5
  ) {
    self.maximumAttempts = max(1, maximumAttempts)
    self.initialBackoff = initialBackoff
    self.maximumBackoff = maximumBackoff
    self.multiplier = max(1, multiplier)
    self.jitter = min(1, max(0, jitter))
  }

  /// The default: 5 attempts, backoff 200 ms doubling up to 3 s, half of it jittered (at most
  /// 3 s of waiting in all, enough to span a reconnection of the HTTP/2 transport).
  public static let `default` = RetryPolicy()

  /// No retries at all.
  public static let none = RetryPolicy(maximumAttempts: 1)

  /// Whether a failure with this status may be retried (only `UNAVAILABLE`).
  ///
  /// - Parameter code: The status of the failed attempt.
  public static func isRetryable(_ code: RPCError.Code) -> Bool { code == .unavailable }

  /// The wait before retry number `retry` (1 for the first retry).
  ///
  /// - Parameters:
  ///   - retry: The retry's number, from 1.
  ///   - random: A value in `0...1` that picks the point in the jitter range; 0 gives the
  ///     longest wait, 1 the shortest.
  /// - Returns: A duration in `[(1 - jitter) × b, b]`, `b` the capped exponential backoff.
  public func backoff(beforeRetry retry: Int, random: Double) -> Duration {
    let exponent = Double(max(0, retry - 1))
    let initial = Self.seconds(initialBackoff)
    let cap = Self.seconds(maximumBackoff)
    var base = initial
    var step = 0.0
    while step < exponent && base < cap {
      base *= multiplier
      step += 1
    }
    base = min(base, cap)
    let fraction = 1 - jitter * min(1, max(0, random))
    return .nanoseconds(Int64((base * fraction * 1e9).rounded()))
  }

  static func seconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) + Double(attoseconds) / 1e18
  }
}
