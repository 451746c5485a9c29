#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// An IPv4 or IPv6 address, as 4 or 16 bytes; an IPv4-mapped IPv6 address (`::ffff:192.0.2.1`)
/// is the IPv4 address.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
  /// 4 bytes (IPv4) or 16 (IPv6), in network order.
  public let bytes: [UInt8]

  /// Parses an address literal: `192.0.2.1`, `2001:db8::1` (no brackets, port or zone).
  public init?(_ text: some StringProtocol) {
    let text = String(text)
    var v4 = in_addr()
    if inet_pton(AF_INET, text, &v4) == 1 {
      self.init(bytes: withUnsafeBytes(of: &v4) { Array($0) })
      return
    }
    var v6 = in6_addr()
    guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
    self.init(bytes: withUnsafeBytes(of: &v6) { Array($0) })
  }

  /// From 4 or 16 bytes; `nil` for another count.
  public init?(bytes: [UInt8]) {
    switch bytes.count {
    case 4: self.bytes = bytes
    case 16:
      let mapped: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
      self.bytes = Array(bytes.prefix(12)) == mapped ? Array(bytes.suffix(4)) : bytes
    default: return nil
    }
  }

  /// Whether it is an IPv4 address.
  public var isIPv4: Bool { bytes.count == 4 }

  /// The address in its usual text form (`192.0.2.1`, `2001:db8::1`).
  public var description: String {
    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    var copy = bytes
    _ = copy.withUnsafeMutableBytes { raw in
      inet_ntop(isIPv4 ? AF_INET : AF_INET6, raw.baseAddress, &text, socklen_t(text.count))
    }
    return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The address as gRPC names peers, without a port: `ipv4:192.0.2.1`, `ipv6:[2001:db8::1]`.
  public var peerName: String { isIPv4 ? "ipv4:\(description)" : "ipv6:[\(description)]" }
}

/// A range of addresses in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`; an address alone is
/// the range of that one address).
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
  /// The first address of the range (host bits cleared).
  public let address: IPAddress
  /// The number of leading bits that every address of the range shares with ``address``.
  public let prefixLength: Int

  /// Parses `ADDRESS/LENGTH` or `ADDRESS`; `nil` when it is not one (host bits set are cleared).
  public init?(_ text: some StringProtocol) {
    let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
    guard let first = parts.first, var address = IPAddress(first) else { return nil }
    // `::ffff:10.0.0.0/104` names IPv4 addresses: its length counts the 96 bits of the prefix.
    let mappedOffset = first.contains(":") && address.isIPv4 ? 96 : 0
    let bits = address.bytes.count * 8
    var length = bits
    if parts.count == 2 {
      guard let n = Int(parts[1]), parts[1].allSatisfy(\.isASCII), (mappedOffset...bits + mappedOffset).contains(n)
      else { return nil }
      length = n - mappedOffset
    }
    var bytes = address.bytes
    for i in bytes.indices {
      let keep = max(0, min(8, length - i * 8))
      bytes[i] &= keep == 0 ? 0 : UInt8(truncatingIfNeeded: 0xff << (8 - keep))
    }
    address = IPAddress(bytes: bytes)!
    self.address = address
    self.prefixLength = length
  }

  /// Whether `candidate` is in the range.
  public func contains(_ candidate: IPAddress) -> Bool {
    guard candidate.bytes.count == address.bytes.count else { return false }
    for i in address.bytes.indices {
      let keep = max(0, min(8, prefixLength - i * 8))
      if keep == 0 { return true }
      let mask = UInt8(truncatingIfNeeded: 0xff << (8 - keep))
      if candidate.bytes[i] & mask != address.bytes[i] { return false }
    }
    return true
  }

  /// `ADDRESS/LENGTH`.
  public var description: String { "\(address)/\(prefixLength)" }

  /// Parses a comma-separated list (`127.0.0.1/32,10.0.0.0/8`); `nil` if any item is not a range
  /// (spaces around items are allowed, empty items are not).
  public static func list(_ text: String) -> [IPNetwork]? {
    var networks: [IPNetwork] = []
    for item in text.split(separator: ",", omittingEmptySubsequences: false) {
      let trimmed = item.trimmingSpaces
      guard let network = IPNetwork(trimmed) else { return nil }
      if !networks.contains(network) { networks.append(network) }
    }
    return networks
  }
}

/// The client a request comes from when the connection is a trusted proxy's: the right-most
/// address of `X-Forwarded-For` that is not itself a trusted proxy, or, when the request has no
/// `X-Forwarded-For`, of the `for=` parameters of `Forwarded` (RFC 7239).
///
/// The right-most untrusted address is the one the nearest untrusted hop connected from: what a
/// client writes into the header itself stays to the left of it. `X-Forwarded-For` comes first
/// because that is the header proxies append to (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
/// `forwardfor`, cloud load balancers); a proxy that writes only `Forwarded` must drop a client's
/// own `X-Forwarded-For`.
public enum ForwardedClient {
  /// The client's address, or `nil` when the headers name none: then the request counts as the
  /// proxy's own. A hop that is not an address (`unknown`, an obfuscated `_name`) ends the walk:
  /// the client is then the nearest trusted hop to its right, or `nil`.
  public static func resolve(headers: HTTPHeaders, trusted: [IPNetwork]) -> IPAddress? {
    let forwardedFor = headers.fields.filter { $0.name.lowercased() == "x-forwarded-for" }.map(\.value)
    let hops: [String]
    if !forwardedFor.isEmpty {
      hops = forwardedFor.joined(separator: ",").split(separator: ",").map { String($0.trimmingSpaces) }
    } else {
      let forwarded = headers.fields.filter { $0.name.lowercased() == "forwarded" }.map(\.value)
      guard !forwarded.isEmpty else { return nil }
      hops = forwardedForValues(forwarded.joined(separator: ","))
    }
    var nearestTrusted: IPAddress?
    for hop in hops.reversed() {
      guard let address = hopAddress(hop) else { return nearestTrusted }
      if !trusted.contains(where: { $0.contains(address) }) { return address }
      nearestTrusted = address
    }
    return nearestTrusted
  }

  /// The `for=` values of a `Forwarded` field, in order, unquoted (elements without `for=` are
  /// skipped).
  static func forwardedForValues(_ value: String) -> [String] {
    var result: [String] = []
    for element in splitOutsideQuotes(value, separator: ",") {
      for pair in splitOutsideQuotes(element, separator: ";") {
        let parts = pair.split(separator: "=", maxSplits: 1)
        guard parts.count == 2, parts[0].trimmingSpaces.lowercased() == "for" else { continue }
        var text = String(parts[1].trimmingSpaces)
        if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") { text = String(text.dropFirst().dropLast()) }
        result.append(text)
      }
    }
    return result
  }

  /// The address of one hop: `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]`, `[2001:db8::1]:4711`,
  /// `2001:db8::1`; `nil` otherwise.
  static func hopAddress(_ hop: String) -> IPAddress? {
    if hop.hasPrefix("["), let close = hop.firstIndex(of: "]") {
      let rest = hop[hop.index(after: close)...]
      guard rest.isEmpty || (rest.hasPrefix(":") && rest.dropFirst().allSatisfy(\.isNumber)) else { return nil }
      return IPAddress(hop[hop.index(after: hop.startIndex)..<close])
    }
    if let address = IPAddress(hop) { return address }
    // IPv4 with a port.
    let parts = hop.split(separator: ":", omittingEmptySubsequences: false)
    guard parts.count == 2, !parts[1].isEmpty, parts[1].allSatisfy(\.isNumber), let address = IPAddress(parts[0]),
      address.isIPv4
    else { return nil }
    return address
  }

  private static func splitOutsideQuotes(_ text: String, separator: Character) -> [String] {
    var parts: [String] = []
    var current = ""
    var quoted = false
    var escaped = false
    for character in text {
      if escaped {
        escaped = false
      } else if quoted && character == "\\" {
        escaped = true
      } else if character == "\"" {
        quoted.toggle()
      } else if character == separator && !quoted {
        parts.append(current)
        current = ""
        continue
      }
      current.append(character)
    }
    parts.append(current)
    return parts
  }
}

extension StringProtocol {
  /// Without leading and trailing spaces and tabs.
  var trimmingSpaces: Substring {
    let text = Substring(self)
    guard let first = text.firstIndex(where: { $0 != " " && $0 != "\t" }),
      let last = text.lastIndex(where: { $0 != " " && $0 != "\t" })
    else { return "" }
    return text[first...last]
  }
}
