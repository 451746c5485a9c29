import Foundation
import SubscriptionStorage

#if canImport(Glibc)
  import Glibc
#endif

// Which webhook URLs substatus POSTs to (DESIGN.md "Events out"): `https://` or `http://`, and, unless
// the operator allows them (`substatusd --allow-private-webhooks`), never an address of the machine
// itself or of a private network: a webhook is a URL a tenant admin chooses, and the server must not
// become a way to reach what only it can reach (SSRF). Checked at creation on the URL (an IP literal,
// or a name reserved for the local host) and again before each delivery on every address the name
// resolves to, since DNS answers change.

/// An IP address, as 4 (IPv4) or 16 (IPv6) bytes in network order.
public struct WebhookIPAddress: Sendable, Hashable, CustomStringConvertible {
  /// The address bytes: 4 for IPv4, 16 for IPv6.
  public let bytes: [UInt8]

  /// An address from its bytes; `nil` unless there are 4 or 16.
  public init?(bytes: [UInt8]) {
    guard bytes.count == 4 || bytes.count == 16 else { return nil }
    self.bytes = bytes
  }

  /// A textual address (`192.0.2.1`, `2001:db8::1`, with or without brackets); `nil` for anything
  /// else (no zone ids, no abbreviated IPv4 forms: those are parsed by ``WebhookURLPolicy``).
  public init?(_ text: String) {
    var t = Substring(text)
    if t.hasPrefix("["), t.hasSuffix("]") { t = t.dropFirst().dropLast() }
    var v4 = in_addr()
    if inet_pton(AF_INET, String(t), &v4) == 1 {
      self.bytes = withUnsafeBytes(of: v4.s_addr) { Array($0) }
      return
    }
    var v6 = in6_addr()
    if inet_pton(AF_INET6, String(t), &v6) == 1 {
      self.bytes = withUnsafeBytes(of: &v6) { Array($0) }
      return
    }
    return nil
  }

  /// The usual text form (`inet_ntop`).
  public var description: String {
    var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
    let family = bytes.count == 4 ? AF_INET : AF_INET6
    let ok = bytes.withUnsafeBytes { raw in
      inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) != nil
    }
    guard ok else { return Hex.encode(bytes) }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// Why the address is not public, or `nil` for a public address.
  public var nonPublicKind: String? {
    if bytes.count == 4 { return Self.kind(v4: bytes) }
    let b = bytes
    if b.allSatisfy({ $0 == 0 }) { return "unspecified" }
    if b[0..<15].allSatisfy({ $0 == 0 }) && b[15] == 1 { return "loopback" }
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d): what
    // is reached is the embedded IPv4 address.
    if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff
      || b[0..<12].allSatisfy({ $0 == 0 })
      || b[0..<12] == [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0][...]
    {
      return Self.kind(v4: Array(b[12..<16]))
    }
    if b[0] & 0xfe == 0xfc { return "unique local" }  // fc00::/7
    if b[0] == 0xfe && b[1] & 0xc0 == 0x80 { return "link-local" }  // fe80::/10
    if b[0] == 0xfe && b[1] & 0xc0 == 0xc0 { return "site-local" }  // fec0::/10 (deprecated)
    if b[0] == 0xff { return "multicast" }
    return nil
  }

  private static func kind(v4 b: [UInt8]) -> String? {
    switch (b[0], b[1]) {
    case (0, _): return "unspecified"  // 0.0.0.0/8, "this network"
    case (10, _): return "private"
    case (127, _): return "loopback"
    case (169, 254): return "link-local"
    case (172, 16...31): return "private"
    case (192, 168): return "private"
    case (100, 64...127): return "shared (CGNAT)"  // 100.64.0.0/10
    case (224...239, _): return "multicast"
    case (240...255, _): return "reserved"  // 240.0.0.0/4 and the broadcast address
    default: return nil
    }
  }
}

/// Why a webhook URL or address is refused: a sentence for the person who chose the URL.
public struct WebhookURLRejection: Error, Sendable, Hashable, CustomStringConvertible {
  /// What is wrong with the URL, e.g. `the address 10.0.0.5 is private`.
  public var reason: String
  /// Creates a rejection.
  public init(_ reason: String) { self.reason = reason }
  /// The reason.
  public var description: String { reason }
}

/// The webhook URL rules (pure: no DNS; ``WebhookAddressResolver`` resolves names at delivery).
///
/// ```swift
/// let policy = WebhookURLPolicy(allowPrivateAddresses: false)
/// let url = try policy.check("https://hooks.example.com/substatus")   // URL, or WebhookURLRejection
/// ```
public struct WebhookURLPolicy: Sendable, Hashable {
  /// Whether loopback, link-local and private addresses are allowed (`--allow-private-webhooks`).
  public var allowPrivateAddresses: Bool

  /// The longest URL accepted, in bytes.
  public static let maxLength = 2048

  /// Creates a policy.
  public init(allowPrivateAddresses: Bool = false) {
    self.allowPrivateAddresses = allowPrivateAddresses
  }

  /// Checks a URL as given to CreateWebhook.
  /// - Returns: the parsed URL.
  /// - Throws: ``WebhookURLRejection``: not `http(s)`, no host, credentials in the URL, or (unless
  ///   allowed) a host that is a non-public IP address or a name of the local host.
  public func check(_ text: String) throws(WebhookURLRejection) -> URL {
    guard !text.isEmpty else { throw WebhookURLRejection("is required") }
    guard text.utf8.count <= Self.maxLength else {
      throw WebhookURLRejection("is longer than \(Self.maxLength) bytes")
    }
    guard let components = URLComponents(string: text), let url = components.url else {
      throw WebhookURLRejection("is not a URL")
    }
    guard let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http" else {
      throw WebhookURLRejection("must start with https:// or http://")
    }
    guard let host = components.host, !host.isEmpty else {
      throw WebhookURLRejection("has no host")
    }
    guard components.user == nil && components.password == nil else {
      throw WebhookURLRejection("must not hold credentials (user:password@); sign-in is the signature's job")
    }
    guard !host.contains("%") else { throw WebhookURLRejection("must not name an IPv6 zone") }
    if let port = components.port, !(1...65535).contains(port) {
      throw WebhookURLRejection("has an invalid port \(port)")
    }
    guard !allowPrivateAddresses else { return url }
    let name = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
    if name == "localhost" || name.hasSuffix(".localhost") {
      throw WebhookURLRejection("names the local host (\(host)), refused unless the server allows private webhooks")
    }
    if let address = WebhookIPAddress(host) ?? Self.numericIPv4(name) {
      try checkAddress(address)
    }
    return url
  }

  /// Checks one address a webhook's host resolved to.
  /// - Throws: ``WebhookURLRejection`` for a non-public address unless allowed.
  public func checkAddress(_ address: WebhookIPAddress) throws(WebhookURLRejection) {
    guard !allowPrivateAddresses, let kind = address.nonPublicKind else { return }
    throw WebhookURLRejection(
      "the address \(address) is \(kind), refused unless the server allows private webhooks")
  }

  /// The IPv4 address of the older numeric host forms that resolvers still accept (`127.1`,
  /// `0x7f.0.0.1`, `2130706433`), as `inet_aton` reads them; `nil` for a name.
  static func numericIPv4(_ host: String) -> WebhookIPAddress? {
    guard let last = host.split(separator: ".").last, last.first?.isNumber == true else { return nil }
    var address = in_addr()
    guard inet_aton(host, &address) != 0 else { return nil }
    return WebhookIPAddress(bytes: withUnsafeBytes(of: address.s_addr) { Array($0) })
  }
}

/// Resolves a webhook's host to the addresses a delivery would connect to.
public protocol WebhookAddressResolver: Sendable {
  /// The addresses of `host` (an IP literal resolves to itself).
  /// - Throws: ``WebhookURLRejection`` when the name does not resolve.
  func addresses(of host: String) async throws(WebhookURLRejection) -> [WebhookIPAddress]
}

/// ``WebhookAddressResolver`` through the system resolver (`getaddrinfo`), run off Swift's
/// cooperative pool (a DNS lookup blocks).
public struct SystemWebhookAddressResolver: WebhookAddressResolver {
  /// Creates the resolver.
  public init() {}

  /// See ``WebhookAddressResolver/addresses(of:)``.
  public func addresses(of host: String) async throws(WebhookURLRejection) -> [WebhookIPAddress] {
    if let literal = WebhookIPAddress(host) { return [literal] }
    let result: Result<[WebhookIPAddress], WebhookURLRejection> = await withCheckedContinuation {
      continuation in
      DispatchQueue.global().async { continuation.resume(returning: Self.lookUp(host)) }
    }
    return try result.get()
  }

  private static func lookUp(_ host: String) -> Result<[WebhookIPAddress], WebhookURLRejection> {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var list: UnsafeMutablePointer<addrinfo>?
    let rc = getaddrinfo(host, nil, &hints, &list)
    guard rc == 0 else {
      return .failure(WebhookURLRejection("cannot resolve \(host): \(String(cString: gai_strerror(rc)))"))
    }
    defer { freeaddrinfo(list) }
    var addresses: [WebhookIPAddress] = []
    var node = list
    while let entry = node?.pointee {
      if entry.ai_family == AF_INET, let sa = entry.ai_addr {
        sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { p in
          if let a = WebhookIPAddress(bytes: withUnsafeBytes(of: p.pointee.sin_addr.s_addr) { Array($0) }) {
            addresses.append(a)
          }
        }
      } else if entry.ai_family == AF_INET6, let sa = entry.ai_addr {
        sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
          var a6 = p.pointee.sin6_addr
          if let a = WebhookIPAddress(bytes: withUnsafeBytes(of: &a6) { Array($0) }) {
            addresses.append(a)
          }
        }
      }
      node = entry.ai_next
    }
    guard !addresses.isEmpty else { return .failure(WebhookURLRejection("\(host) has no address")) }
    return .success(addresses)
  }
}
