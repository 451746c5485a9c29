import SubstatusClock
import SubstatusService
import Synchronization
import Testing

/// One address and what the rules say of it: `nil` for globally reachable.
struct AddressVerdict: Sendable, CustomTestStringConvertible {
  let address: String
  let kind: String?
  init(_ address: String, _ kind: String?) {
    self.address = address
    self.kind = kind
  }
  var testDescription: String { "\(address) → \(kind ?? "public")" }
}

/// Every entry of IANA's IPv4 and IPv6 Special-Purpose Address Registries (and multicast): an
/// address inside and one just outside (README "Webhooks"; the tables in WebhookURLPolicy.swift).
let registryVerdicts: [AddressVerdict] = [
  // 0.0.0.0/8 "this network"
  .init("0.0.0.0", "unspecified"), .init("0.255.255.255", "unspecified"), .init("1.0.0.0", nil),
  // 10.0.0.0/8
  .init("10.0.0.0", "private"), .init("10.255.255.255", "private"), .init("9.255.255.255", nil),
  .init("11.0.0.0", nil),
  // 100.64.0.0/10
  .init("100.64.0.0", "shared (CGNAT)"), .init("100.127.255.255", "shared (CGNAT)"),
  .init("100.63.255.255", nil), .init("100.128.0.0", nil),
  // 127.0.0.0/8
  .init("127.0.0.1", "loopback"), .init("127.255.255.255", "loopback"),
  .init("126.255.255.255", nil), .init("128.0.0.0", nil),
  // 169.254.0.0/16
  .init("169.254.0.1", "link-local"), .init("169.254.169.254", "link-local"),
  .init("169.253.255.255", nil), .init("169.255.0.0", nil),
  // 172.16.0.0/12
  .init("172.16.0.0", "private"), .init("172.31.255.255", "private"), .init("172.15.255.255", nil),
  .init("172.32.0.0", nil),
  // 192.0.0.0/24 with its entries: DS-Lite /29, dummy .8, PCP .9 and TURN .10 anycast (refused
  // with the block), NAT64/DNS64 discovery .170 and .171
  .init("192.0.0.0", "IETF protocol assignment"), .init("192.0.0.8", "IETF protocol assignment"),
  .init("192.0.0.9", "IETF protocol assignment"), .init("192.0.0.10", "IETF protocol assignment"),
  .init("192.0.0.170", "IETF protocol assignment"),
  .init("192.0.0.255", "IETF protocol assignment"),
  .init("191.255.255.255", nil), .init("192.0.1.0", nil),
  // 192.0.2.0/24 TEST-NET-1
  .init("192.0.2.1", "documentation"), .init("192.0.2.255", "documentation"),
  .init("192.0.3.0", nil),
  // 192.31.196.0/24 AS112-v4, 192.52.193.0/24 AMT, 192.175.48.0/24 AS112: globally reachable
  .init("192.31.196.1", nil), .init("192.52.193.1", nil), .init("192.175.48.1", nil),
  // 192.88.99.0/24 6to4 relay anycast (deprecated)
  .init("192.88.99.1", "6to4 relay anycast (deprecated)"),
  .init("192.88.99.255", "6to4 relay anycast (deprecated)"),
  .init("192.88.98.255", nil), .init("192.88.100.0", nil),
  // 192.168.0.0/16
  .init("192.168.0.0", "private"), .init("192.168.255.255", "private"),
  .init("192.167.255.255", nil), .init("192.169.0.0", nil),
  // 198.18.0.0/15 benchmarking
  .init("198.18.0.1", "benchmarking"), .init("198.19.255.255", "benchmarking"),
  .init("198.17.255.255", nil), .init("198.20.0.0", nil),
  // 198.51.100.0/24 TEST-NET-2
  .init("198.51.100.7", "documentation"), .init("198.51.99.255", nil), .init("198.51.101.0", nil),
  // 203.0.113.0/24 TEST-NET-3
  .init("203.0.113.255", "documentation"), .init("203.0.112.255", nil), .init("203.0.114.0", nil),
  // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved, 255.255.255.255 limited broadcast
  .init("224.0.0.1", "multicast"), .init("239.255.255.255", "multicast"),
  .init("223.255.255.255", nil),
  .init("240.0.0.1", "reserved"), .init("255.255.255.254", "reserved"),
  .init("255.255.255.255", "limited broadcast"),
  .init("8.8.8.8", nil), .init("93.184.216.34", nil),

  // ::/128, ::1/128, and the deprecated IPv4-compatible ::/96
  .init("::", "unspecified"), .init("::1", "loopback"),
  .init("::2", "IPv4-compatible (deprecated)"),
  .init("::8.8.8.8", "IPv4-compatible (deprecated)"),
  .init("::1:0:0:0", "reserved (outside 2000::/3)"),
  // ::ffff:0:0/96 IPv4-mapped: judged by the IPv4 address
  .init("::ffff:8.8.8.8", nil), .init("::ffff:127.0.0.1", "loopback"),
  .init("::ffff:198.18.0.1", "benchmarking"),
  .init("::fffe:808:808", "reserved (outside 2000::/3)"),
  // 64:ff9b::/96 NAT64 (globally reachable): judged by the IPv4 address
  .init("64:ff9b::8.8.8.8", nil), .init("64:ff9b::10.0.0.1", "private"),
  .init("64:ff9b::192.0.2.1", "documentation"),
  .init("64:ff9b:0:0:0:1:808:808", "reserved (outside 2000::/3)"),
  // 64:ff9b:1::/48 local-use NAT64: refused outright
  .init("64:ff9b:1::808:808", "local-use IPv4/IPv6 translation"),
  .init("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "local-use IPv4/IPv6 translation"),
  .init("64:ff9b:2::808:808", "reserved (outside 2000::/3)"),
  // 100::/64 discard-only
  .init("100::1", "discard-only"), .init("100:0:0:1::1", "reserved (outside 2000::/3)"),
  // 2001::/23 IETF protocol assignments, with its entries
  .init("2001:100::1", "IETF protocol assignment"),
  .init("2001:1ff:ffff::1", "IETF protocol assignment"),
  .init("2001:200::1", nil), .init("2000:ffff::1", nil),
  .init("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
  .init("2001:1::4", "IETF protocol assignment"),
  .init("2001:1::1", "anycast (PCP)"), .init("2001:1::2", "anycast (TURN)"),
  .init("2001:1::3", "anycast (DNS-SD SRP)"),
  .init("2001:2::1", "benchmarking"), .init("2001:2:1::1", "IETF protocol assignment"),
  .init("2001:3::1", nil), .init("2001:3:ffff::1", nil),
  .init("2001:4::1", "IETF protocol assignment"),
  .init("2001:4:112::1", nil), .init("2001:4:113::1", "IETF protocol assignment"),
  .init("2001:10::1", "deprecated (ORCHID)"), .init("2001:1f:ffff::1", "deprecated (ORCHID)"),
  .init("2001:f::1", "IETF protocol assignment"),
  .init("2001:20::1", nil), .init("2001:2f:ffff::1", nil), .init("2001:30::1", nil),
  .init("2001:3f:ffff::1", nil),
  .init("2001:40::1", "IETF protocol assignment"),
  // 2001:db8::/32 documentation
  .init("2001:db8::1", "documentation"), .init("2001:db8:ffff::1", "documentation"),
  .init("2001:db7:ffff::1", nil), .init("2001:db9::1", nil),
  // 2002::/16 6to4: refused outright, whatever IPv4 address it embeds
  .init("2002:c000:201::1", "6to4"), .init("2002:808:808::1", "6to4"), .init("2003::1", nil),
  .init("2001:ffff::1", nil),
  // 2620:4f:8000::/48 AS112: globally reachable
  .init("2620:4f:8000::1", nil),
  // 3fff::/20 documentation
  .init("3fff::1", "documentation"), .init("3fff:fff::1", "documentation"),
  .init("3fff:1000::1", nil), .init("3ffe:ffff::1", nil),
  // 5f00::/16 SRv6 SIDs
  .init("5f00::1", "SRv6 SIDs"), .init("5f01::1", "reserved (outside 2000::/3)"),
  // fc00::/7, fe80::/10, fec0::/10, ff00::/8
  .init("fc00::1", "unique local"), .init("fdff::1", "unique local"),
  .init("fbff::1", "reserved (outside 2000::/3)"),
  .init("fe80::1", "link-local"), .init("febf::1", "link-local"),
  .init("fe7f::1", "reserved (outside 2000::/3)"),
  .init("fec0::1", "site-local (deprecated)"), .init("feff::1", "site-local (deprecated)"),
  .init("ff02::1", "multicast"), .init("ff0e::1", "multicast"),
  // 2000::/3, the global unicast space, and beyond it
  .init("2606:4700::1111", nil), .init("3fff:ffff::1", nil),
  .init("1fff:ffff::1", "reserved (outside 2000::/3)"),
  .init("4000::1", "reserved (outside 2000::/3)"),
]

@Suite("Webhook address rules")
struct WebhookAddressRulesTests {
  @Test(arguments: registryVerdicts)
  func registryEntry(_ verdict: AddressVerdict) throws {
    let address = try #require(WebhookIPAddress(verdict.address))
    #expect(address.nonPublicKind == verdict.kind)
    let policy = WebhookURLPolicy(localAddresses: .fixed([]))
    if let kind = verdict.kind {
      #expect {
        try policy.checkAddress(address)
      } throws: { error in
        (error as? WebhookURLRejection)?.reason.contains("is \(kind), refused") == true
      }
      // The same address as a URL's host, refused at creation.
      let host = address.bytes.count == 16 ? "[\(verdict.address)]" : verdict.address
      #expect(throws: WebhookURLRejection.self) { _ = try policy.check("https://\(host)/hook") }
    } else {
      try policy.checkAddress(address)
    }
    try WebhookURLPolicy(allowPrivateAddresses: true, localAddresses: .fixed([])).checkAddress(
      address)
  }

  static let own = ["93.184.216.34", "2606:2800:220:1::7"].compactMap(WebhookIPAddress.init)

  /// The machine's own addresses are refused, also as IPv4-mapped and NAT64 forms; a neighbour is not.
  @Test(arguments: [
    ("93.184.216.34", true), ("::ffff:93.184.216.34", true), ("64:ff9b::5db8:d822", true),
    ("2606:2800:220:1::7", true), ("93.184.216.35", false), ("2606:2800:220:1::8", false),
  ])
  func ownAddress(_ text: String, _ refused: Bool) throws {
    let address = try #require(WebhookIPAddress(text))
    let policy = WebhookURLPolicy(localAddresses: .fixed(Self.own))
    if refused {
      #expect {
        try policy.checkAddress(address)
      } throws: { error in
        (error as? WebhookURLRejection)?.reason.contains("one of this machine's own") == true
      }
      let host = address.bytes.count == 16 ? "[\(text)]" : text
      #expect(throws: WebhookURLRejection.self) { _ = try policy.check("http://\(host):8080/hook") }
    } else {
      try policy.checkAddress(address)
    }
    try WebhookURLPolicy(allowPrivateAddresses: true, localAddresses: .fixed(Self.own))
      .checkAddress(address)
  }

  @Test(
    "the interface list is read once per refresh interval on the injected clock, and kept when a read fails"
  )
  func refresh() throws {
    let clock = ManualClock()
    let answers = LockedAnswers([["93.184.216.34"], nil, ["8.8.8.8"]])
    let local = WebhookLocalAddresses(refreshInterval: .seconds(2), clock: clock) { answers.next() }
    let first = try #require(WebhookIPAddress("93.184.216.34"))
    let second = try #require(WebhookIPAddress("8.8.8.8"))
    #expect(local.contains(first))
    #expect(local.contains(first) && local.readCount == 1)
    clock.advance(by: .milliseconds(1999))
    #expect(local.contains(first) && local.readCount == 1)
    clock.advance(by: .milliseconds(1))
    // The read fails: the last list stays, and the next check reads again.
    #expect(local.contains(first) && local.readCount == 2)
    #expect(!local.contains(first) && local.contains(second) && local.readCount == 3)
  }

  @Test("getifaddrs lists the loopback interface's address")
  func systemInterfaces() throws {
    let addresses = try #require(WebhookLocalAddresses.interfaceAddresses())
    #expect(addresses.contains(WebhookIPAddress("127.0.0.1")!))
    #expect(WebhookLocalAddresses.system.contains(WebhookIPAddress("127.0.0.1")!))
  }
}

/// Answers handed out in order, then the last one forever.
final class LockedAnswers: Sendable {
  private let answers: Mutex<[[String]?]>
  init(_ answers: [[String]?]) { self.answers = Mutex(answers) }
  func next() -> Set<WebhookIPAddress>? {
    answers.withLock { list in
      let answer = list.count > 1 ? list.removeFirst() : list[0]
      return answer.map { Set($0.compactMap(WebhookIPAddress.init)) }
    }
  }
}
