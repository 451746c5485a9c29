import SubstatusClock
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The machine's own addresses, which a webhook may not reach (``WebhookURLPolicy``): a public
/// address on one of its interfaces leads back to the server itself, its admin and metrics
/// listeners included, as surely as 127.0.0.1 does.
///
/// Reading the interfaces (`getifaddrs`, a netlink round trip) costs about 0.4 ms here, too much
/// for every connection, so the list is kept and read again when a check finds it older than
/// ``refreshInterval``. An address added to an interface is refused at most that long after.
///
/// ```swift
/// let policy = WebhookURLPolicy(localAddresses: .system)          // getifaddrs, kept 2 s
/// let fixed = WebhookURLPolicy(localAddresses: .fixed(["93.184.216.34"].compactMap(WebhookIPAddress.init)))
/// ```
public final class WebhookLocalAddresses: Sendable, Hashable {
  /// Reads the current addresses; `nil` when they cannot be read (the last list is then kept).
  public typealias Reader = @Sendable () -> Set<WebhookIPAddress>?

  /// How long a list read is used before it is read again.
  public let refreshInterval: Duration
  private let read: Reader
  private let clock: any ServiceClock
  private struct Snapshot {
    var addresses: Set<WebhookIPAddress> = []
    /// When the list was last read (or a read was tried); `nil` until one succeeded.
    var readAt: Duration?
  }
  private let snapshot = Mutex(Snapshot())
  private let reads = Atomic<Int>(0)

  /// A list read by `read`, again after `refreshInterval` on `clock`.
  /// - Parameters:
  ///   - refreshInterval: How long a list is used before the next check reads it again.
  ///   - clock: The clock that ages the list (a `ManualClock` in tests).
  ///   - read: Reads the addresses.
  public init(
    refreshInterval: Duration = .seconds(2), clock: any ServiceClock = SystemClock(),
    read: @escaping Reader
  ) {
    self.refreshInterval = refreshInterval
    self.clock = clock
    self.read = read
  }

  /// The process's interfaces (`getifaddrs`), read again at most every 2 seconds.
  public static let system = WebhookLocalAddresses(read: { interfaceAddresses() })

  /// A fixed list, never read again: for tests, so that they do not depend on the machine.
  public static func fixed(_ addresses: some Sequence<WebhookIPAddress>) -> WebhookLocalAddresses {
    let list = Set(addresses)
    return WebhookLocalAddresses(refreshInterval: .seconds(1 << 40), read: { list })
  }

  /// The addresses as last read, reading them first when the list is older than
  /// ``refreshInterval`` (or was never read).
  public func current() -> Set<WebhookIPAddress> {
    let now = clock.monotonicNow
    let cached = snapshot.withLock { state -> Set<WebhookIPAddress>? in
      guard let at = state.readAt, now - at < refreshInterval else { return nil }
      return state.addresses
    }
    if let cached { return cached }
    // Read outside the lock: concurrent checks at expiry may each read once, none waits.
    reads.add(1, ordering: .relaxed)
    let fresh = read()
    return snapshot.withLock { state in
      if let fresh {
        state.addresses = fresh
        state.readAt = now
      }
      return state.addresses
    }
  }

  /// Whether `address`, or the IPv4 address it reaches (``WebhookIPAddress/embeddedIPv4``), is one
  /// of the machine's.
  public func contains(_ address: WebhookIPAddress) -> Bool {
    let addresses = current()
    if addresses.contains(address) { return true }
    return address.embeddedIPv4.map(addresses.contains) ?? false
  }

  /// How many times the list was read (tests, and the cost of the checks).
  public var readCount: Int { reads.load(ordering: .relaxed) }

  /// Identity: two sources are equal when they are the same object.
  public static func == (lhs: WebhookLocalAddresses, rhs: WebhookLocalAddresses) -> Bool {
    lhs === rhs
  }

  /// Hashes the identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

  /// The addresses of every interface (`getifaddrs(3)`), IPv4 and IPv6, up or not; `nil` when
  /// the call fails (out of descriptors: it opens a netlink socket).
  public static func interfaceAddresses() -> Set<WebhookIPAddress>? {
    var list: UnsafeMutablePointer<ifaddrs>?
    guard getifaddrs(&list) == 0 else { return nil }
    defer { freeifaddrs(list) }
    var addresses = Set<WebhookIPAddress>()
    var node = list
    while let entry = node?.pointee {
      defer { node = entry.ifa_next }
      guard let sa = entry.ifa_addr else { continue }
      switch Int32(sa.pointee.sa_family) {
      case AF_INET:
        sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { p in
          if let a = WebhookIPAddress(
            bytes: withUnsafeBytes(of: p.pointee.sin_addr.s_addr) { Array($0) })
          {
            addresses.insert(a)
          }
        }
      case AF_INET6:
        sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
          var a6 = p.pointee.sin6_addr
          if let a = WebhookIPAddress(bytes: withUnsafeBytes(of: &a6) { Array($0) }) {
            addresses.insert(a)
          }
        }
      default:
        continue
      }
    }
    return addresses
  }
}
