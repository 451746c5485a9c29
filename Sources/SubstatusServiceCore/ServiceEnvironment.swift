import SubscriptionStorage
import SubstatusClock

/// What the service takes from the outside world: time and randomness
/// (docs/architecture.md "Modules": the domain and the handlers read no clock of their own; tests
/// pass a ``ManualClock`` and fixed randomness).
public struct ServiceEnvironment: Sendable {
  /// The clock every timestamp, duration, schedule and retry of the service reads.
  public var clock: any ServiceClock
  /// The clock of what happens on the wire, and of real-time periods: the timeout of an outgoing
  /// request and the duration recorded for it, the period of the transition scheduler's passes
  /// (``EventTransitionScheduler``). It is ``clock`` except when that follows a test's simulated
  /// time (`substatusd --clock-url`): a jump of the simulated clock by days must not time out a
  /// webhook POST that is in flight, and a simulated clock standing still must not stop the
  /// scheduler's periodic pass.
  public var wireClock: any ServiceClock
  /// Cryptographically secure random bytes.
  public var randomBytes: @Sendable (Int) -> [UInt8]

  /// Creates an environment; `wireClock` is `clock` unless given.
  public init(
    clock: any ServiceClock, wireClock: (any ServiceClock)? = nil, randomBytes: @escaping @Sendable (Int) -> [UInt8]
  ) {
    self.clock = clock
    self.wireClock = wireClock ?? clock
    self.randomBytes = randomBytes
  }

  /// Now, in milliseconds since the epoch: the clock's wall reading.
  public func now() -> Int64 { clock.wallMs }

  /// The system clock and OpenSSL's random generator.
  public static let live = ServiceEnvironment(clock: SystemClock(), randomBytes: SecureRandom.bytes)
}
