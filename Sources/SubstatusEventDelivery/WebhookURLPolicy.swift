import Foundation
import SubscriptionStorage
import SubstatusServiceCore

#if canImport(Glibc)
  import Glibc
#endif

// Which webhook URLs substatus POSTs to (docs/architecture.md "Events"): `https://` or `http://`, and,
// unless the operator allows them (`substatusd --allow-private-webhooks`), never an address of the
// machine itself or one that is not globally reachable: a webhook is a URL a tenant admin chooses,
// and the server must not become a way to reach what only it can reach (SSRF). Checked at creation
// on the URL (an IP literal, or a name reserved for the local host) and again on every address a
// delivery connects to, since DNS answers change.
//
// "Not globally reachable" is read from IANA's two registries (the "Globally Reachable" column):
//   IPv4: https://www.iana.org/assignments/iana-ipv4-special-registry/iana-ipv4-special-registry.xhtml
//   IPv6: https://www.iana.org/assignments/iana-ipv6-special-registry/iana-ipv6-special-registry.xhtml
// (RFC 6890 and its updates), plus multicast (224.0.0.0/4, ff00::/8, from the multicast
// registries) and all IPv6 outside 2000::/3, the only block IANA allocates for global unicast. The
// tables below list every entry of both registries, the globally reachable ones too, so that the
// next registry change is a one-line diff. Deliberate departures, each stricter than the registry:
// - the anycast entries of the IETF protocol blocks (192.0.0.9 and 192.0.0.10, 2001:1::1 to ::3:
//   PCP, TURN and DNS-SD SRP servers) are refused with their blocks: an anycast address reaches
//   the nearest such server, which is typically the operator's own gateway;
// - 6to4 (2002::/16, and its deprecated relay block 192.88.99.0/24) and Teredo (2001::/32) are
//   refused outright ("N/A" in the registry): a relay chosen by the network, not by us, would
//   carry the request to whatever IPv4 address is embedded in them;
// - the local-use NAT64 prefix 64:ff9b:1::/48 is refused outright (not globally reachable; where its
//   IPv4 sits depends on the operator's prefix length).
// IPv4-mapped addresses (::ffff:a.b.c.d) reach a.b.c.d, and the well-known NAT64 prefix
// 64:ff9b::/96 (globally reachable) translates to a.b.c.d: both are judged by the IPv4 address they
// embed. The deprecated IPv4-compatible form (::a.b.c.d) is refused outright.

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

  /// Why the address is not globally reachable (`loopback`, `private`, `documentation`, …), or
  /// `nil` for an address a webhook may reach. Pure: the machine's own addresses are
  /// ``WebhookURLPolicy/checkAddress(_:)``'s business.
  public var nonPublicKind: String? {
    if let v4 = embeddedIPv4 { return SpecialAddressBlock.kind(of: v4.bytes) }
    if let kind = SpecialAddressBlock.kind(of: bytes) { return kind }
    // IPv6 outside 2000::/3 is reserved by the IETF, or one of the blocks listed above.
    if bytes.count == 16 && bytes[0] & 0xe0 != 0x20 { return "reserved (outside 2000::/3)" }
    return nil
  }

  /// The IPv4 address reached through this IPv6 address: the last 4 bytes of an IPv4-mapped
  /// address (`::ffff:a.b.c.d`) or of the well-known NAT64 prefix (`64:ff9b::a.b.c.d`, RFC 6052);
  /// `nil` for any other address.
  public var embeddedIPv4: WebhookIPAddress? {
    guard bytes.count == 16 else { return nil }
    let mapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
    let nat64 = bytes[0..<12].elementsEqual([0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0])
    guard mapped || nat64 else { return nil }
    return WebhookIPAddress(bytes: Array(bytes[12..<16]))
  }
}

/// One entry of IANA's special-purpose address registries (or of the multicast and IPv6 address
/// space registries): a prefix, and why it is refused, `nil` when it is globally reachable.
struct SpecialAddressBlock: Sendable {
  package let prefix: [UInt8]
  package let length: Int
  package let kind: String?

  package init(_ cidr: String, _ kind: String?) {
    let parts = cidr.split(separator: "/")
    // The tables are constants of this file, parsed once: a typo is a crash at the first check,
    // which every test run makes.
    guard parts.count == 2, let address = WebhookIPAddress(String(parts[0])), let length = Int(parts[1]),
      length <= address.bytes.count * 8
    else { preconditionFailure("bad CIDR \(cidr) in the special-purpose table") }
    self.prefix = address.bytes
    self.length = length
    self.kind = kind
  }

  package func contains(_ bytes: [UInt8]) -> Bool {
    guard bytes.count == prefix.count else { return false }
    var bits = length
    var i = 0
    while bits >= 8 {
      guard bytes[i] == prefix[i] else { return false }
      bits -= 8
      i += 1
    }
    guard bits > 0 else { return true }
    let mask = UInt8(truncatingIfNeeded: 0xff << (8 - bits))
    return bytes[i] & mask == prefix[i] & mask
  }

  /// The kind of the longest listed prefix holding `bytes`; `nil` when none does or when that
  /// entry is globally reachable.
  package static func kind(of bytes: [UInt8]) -> String? {
    var best: SpecialAddressBlock?
    for block in bytes.count == 4 ? ipv4 : ipv6 where block.contains(bytes) {
      if best.map({ block.length > $0.length }) ?? true { best = block }
    }
    return best?.kind
  }

  /// IANA IPv4 Special-Purpose Address Registry (RFC 6890 and updates), every entry, plus
  /// multicast (RFC 5771). `nil`: globally reachable in the registry, and allowed.
  package static let ipv4: [SpecialAddressBlock] = [
    .init("0.0.0.0/8", "unspecified"),  // "this network", RFC 791; 0.0.0.0/32 "this host" too
    .init("10.0.0.0/8", "private"),  // RFC 1918
    .init("100.64.0.0/10", "shared (CGNAT)"),  // RFC 6598
    .init("127.0.0.0/8", "loopback"),  // RFC 1122
    .init("169.254.0.0/16", "link-local"),  // RFC 3927
    .init("172.16.0.0/12", "private"),  // RFC 1918
    // IETF Protocol Assignments (RFC 6890): 192.0.0.0/29 DS-Lite (RFC 7335), 192.0.0.8/32 dummy
    // (RFC 7600), 192.0.0.170-171 NAT64/DNS64 discovery (RFC 7050), and the anycast
    // 192.0.0.9/32 (PCP, RFC 7723) and 192.0.0.10/32 (TURN, RFC 8155): globally reachable in the
    // registry, refused here with the block (see the top of this file).
    .init("192.0.0.0/24", "IETF protocol assignment"),
    .init("192.0.2.0/24", "documentation"),  // TEST-NET-1, RFC 5737
    .init("192.31.196.0/24", nil),  // AS112-v4, RFC 7535
    .init("192.52.193.0/24", nil),  // AMT, RFC 7450
    .init("192.88.99.0/24", "6to4 relay anycast (deprecated)"),  // RFC 7526
    .init("192.168.0.0/16", "private"),  // RFC 1918
    .init("192.175.48.0/24", nil),  // Direct Delegation AS112 Service, RFC 7534
    .init("198.18.0.0/15", "benchmarking"),  // RFC 2544
    .init("198.51.100.0/24", "documentation"),  // TEST-NET-2, RFC 5737
    .init("203.0.113.0/24", "documentation"),  // TEST-NET-3, RFC 5737
    .init("224.0.0.0/4", "multicast"),  // RFC 5771
    .init("240.0.0.0/4", "reserved"),  // RFC 1112
    .init("255.255.255.255/32", "limited broadcast"),  // RFC 919
  ]

  /// IANA IPv6 Special-Purpose Address Registry (RFC 6890 and updates), every entry, plus
  /// multicast (RFC 4291) and the deprecated site-local block (RFC 3879). `::ffff:0:0/96` and
  /// `64:ff9b::/96` are judged by their IPv4 address before this table is read
  /// (``WebhookIPAddress/embeddedIPv4``); IPv6 outside 2000::/3 not listed is refused as reserved.
  package static let ipv6: [SpecialAddressBlock] = [
    .init("::/96", "IPv4-compatible (deprecated)"),  // RFC 4291
    .init("::/128", "unspecified"),  // RFC 4291
    .init("::1/128", "loopback"),  // RFC 4291
    .init("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),  // RFC 8215
    .init("100::/64", "discard-only"),  // RFC 6666
    .init("2001::/23", "IETF protocol assignment"),  // RFC 2928
    .init("2001::/32", "Teredo"),  // RFC 4380: "N/A", refused
    .init("2001:1::1/128", "anycast (PCP)"),  // RFC 7723: globally reachable, refused
    .init("2001:1::2/128", "anycast (TURN)"),  // RFC 8155: globally reachable, refused
    .init("2001:1::3/128", "anycast (DNS-SD SRP)"),  // RFC 9665: globally reachable, refused
    .init("2001:2::/48", "benchmarking"),  // RFC 5180
    .init("2001:3::/32", nil),  // AMT, RFC 7450
    .init("2001:4:112::/48", nil),  // AS112-v6, RFC 7535
    .init("2001:10::/28", "deprecated (ORCHID)"),  // RFC 4843
    .init("2001:20::/28", nil),  // ORCHIDv2, RFC 7343
    .init("2001:30::/28", nil),  // Drone Remote ID DETs, RFC 9374
    .init("2001:db8::/32", "documentation"),  // RFC 3849
    .init("2002::/16", "6to4"),  // RFC 3056: "N/A", refused
    .init("2620:4f:8000::/48", nil),  // Direct Delegation AS112 Service, RFC 7534
    .init("3fff::/20", "documentation"),  // RFC 9637
    .init("5f00::/16", "SRv6 SIDs"),  // RFC 9602
    .init("fc00::/7", "unique local"),  // RFC 4193
    .init("fe80::/10", "link-local"),  // RFC 4291
    .init("fec0::/10", "site-local (deprecated)"),  // RFC 3879
    .init("ff00::/8", "multicast"),  // RFC 4291
  ]
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

/// The webhook URL rules. No DNS here: the outbound client (libcurl) resolves a name at each
/// connection and passes every address it would connect to through ``checkAddress(_:)``.
///
/// ```swift
/// let policy = WebhookURLPolicy(allowPrivateAddresses: false)
/// let url = try policy.check("https://hooks.example.com/substatus")   // URL, or WebhookURLRejection
/// try policy.checkAddress(WebhookIPAddress("198.18.0.1")!)            // throws: benchmarking
/// ```
public struct WebhookURLPolicy: Sendable, Hashable {
  /// Whether addresses that are not globally reachable (loopback, private, link-local, the IANA
  /// special-purpose blocks) and the machine's own addresses are allowed
  /// (`--allow-private-webhooks`).
  public var allowPrivateAddresses: Bool

  /// The machine's own addresses, refused unless ``allowPrivateAddresses``.
  public var localAddresses: WebhookLocalAddresses

  /// The longest URL accepted, in bytes.
  public static let maxLength = 2048

  /// Creates a policy.
  /// - Parameters:
  ///   - allowPrivateAddresses: `--allow-private-webhooks`.
  ///   - localAddresses: Where the machine's own addresses come from: its interfaces, or a fixed
  ///     list in tests.
  public init(allowPrivateAddresses: Bool = false, localAddresses: WebhookLocalAddresses = .system) {
    self.allowPrivateAddresses = allowPrivateAddresses
    self.localAddresses = localAddresses
  }

  /// Checks a URL as given to CreateWebhook.
  /// - Returns: the parsed URL.
  /// - Throws: ``WebhookURLRejection``: control or bidirectional formatting characters, not
  ///   `http(s)`, no host, credentials in the URL, or (unless allowed) a host that is an address
  ///   ``checkAddress(_:)`` refuses or a name of the local host.
  public func check(_ text: String) throws(WebhookURLRejection) -> URL {
    guard !text.isEmpty else { throw WebhookURLRejection("is required") }
    guard text.utf8.count <= Self.maxLength else {
      throw WebhookURLRejection("is longer than \(Self.maxLength) bytes")
    }
    // Whatever URL parsing makes of them (percent-encoding, or stripping), they are never stored.
    if let problem = DisplayText.problem(in: text) { throw WebhookURLRejection(problem) }
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

  /// Checks one address a webhook connects to (each address its host resolves to, at every
  /// connection): refused unless allowed when it is one of the machine's own addresses
  /// (``localAddresses``, also through an IPv4-mapped or NAT64 form) or not globally reachable
  /// (``WebhookIPAddress/nonPublicKind``). Cheap enough for an event loop and a connect-time
  /// callback: the interface list is kept, and read again (about 0.4 ms) at most every
  /// ``WebhookLocalAddresses/refreshInterval``.
  /// - Throws: ``WebhookURLRejection`` naming the address and why.
  public func checkAddress(_ address: WebhookIPAddress) throws(WebhookURLRejection) {
    guard !allowPrivateAddresses else { return }
    if let kind = address.nonPublicKind {
      throw WebhookURLRejection(
        "the address \(address) is \(kind), refused unless the server allows private webhooks")
    }
    if localAddresses.contains(address) {
      throw WebhookURLRejection(
        "the address \(address) is one of this machine's own, refused unless the server allows private webhooks")
    }
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
