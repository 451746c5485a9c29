import Foundation
import SubstatusService
import Testing

/// No address of the machine: the rules alone, whatever machine runs the tests.
let noLocalAddresses = WebhookLocalAddresses.fixed([])

@Suite("Webhook URL policy")
struct WebhookURLPolicyTests {
  /// URLs accepted by default (public hosts and addresses).
  @Test(arguments: [
    "https://hooks.example.com/substatus",
    "http://hooks.example.com:8080/x?y=1",
    "HTTPS://Hooks.Example.com/",
    "https://93.184.216.34/hook",
    "https://[2606:2800:220:1:248:1893:25c8:1946]/hook",
    "https://100.128.0.1/",  // just outside 100.64.0.0/10
    "https://172.32.0.1/",  // just outside 172.16.0.0/12
    "https://localhost.example.com/",
  ])
  func accepted(_ url: String) throws {
    _ = try WebhookURLPolicy(allowPrivateAddresses: false, localAddresses: noLocalAddresses).check(url)
  }

  /// URLs refused by default, and whether `--allow-private-webhooks` lets them through.
  @Test(arguments: [
    ("ftp://hooks.example.com/", "https:// or http://", false),
    ("hooks.example.com/x", "https:// or http://", false),
    ("", "required", false),
    ("https:///path", "no host", false),
    ("https://user:pass@hooks.example.com/", "credentials", false),
    ("http://localhost:8080/", "local host", true),
    ("http://api.localhost/", "local host", true),
    ("http://127.0.0.1/", "loopback", true),
    ("http://127.1/", "loopback", true),
    ("http://2130706433/", "loopback", true),
    ("http://0x7f.0.0.1/", "loopback", true),
    ("http://[::1]/", "loopback", true),
    ("http://0.0.0.0/", "unspecified", true),
    ("http://[::]/", "unspecified", true),
    ("http://10.1.2.3/", "private", true),
    ("http://172.16.0.1/", "private", true),
    ("http://172.31.255.255/", "private", true),
    ("http://192.168.1.1/", "private", true),
    ("http://169.254.169.254/latest/meta-data", "link-local", true),
    ("http://100.64.0.1/", "CGNAT", true),
    ("http://100.127.255.255/", "CGNAT", true),
    ("http://[fe80::1]/", "link-local", true),
    ("http://[fc00::1]/", "unique local", true),
    ("http://[fd12:3456::1]/", "unique local", true),
    ("http://[::ffff:127.0.0.1]/", "loopback", true),
    ("http://[::ffff:10.0.0.1]/", "private", true),
    ("http://[::ffff:169.254.169.254]/", "link-local", true),
    ("http://[64:ff9b::a00:1]/", "private", true),
    ("http://224.0.0.1/", "multicast", true),
    ("http://255.255.255.255/", "limited broadcast", true),
    ("http://198.18.0.1/", "benchmarking", true),
    ("http://[2002:c000:0201::1]/", "6to4", true),
    ("http://192.0.0.9/", "IETF protocol assignment", true),
    ("http://[64:ff9b:1::a00:1]/", "local-use IPv4/IPv6 translation", true),
    ("https://hooks.example.com/\u{1B}[31mred", "contains control characters", false),
    ("https://hooks.example.com/a\r\nX-Injected: 1", "contains control characters", false),
    ("https://hooks.example.com/\u{07}", "contains control characters", false),
    ("https://hooks.example.com/\u{85}", "contains control characters", false),
    ("https://hooks.example.com/\u{202E}gpj.exe", "bidirectional formatting", false),
  ])
  func refused(_ url: String, _ reason: String, _ allowedWithFlag: Bool) throws {
    #expect {
      _ = try WebhookURLPolicy(allowPrivateAddresses: false, localAddresses: noLocalAddresses).check(url)
    } throws: { error in
      (error as? WebhookURLRejection)?.reason.contains(reason) == true
    }
    if allowedWithFlag {
      _ = try WebhookURLPolicy(allowPrivateAddresses: true).check(url)
    } else {
      #expect(throws: WebhookURLRejection.self) {
        _ = try WebhookURLPolicy(allowPrivateAddresses: true).check(url)
      }
    }
  }

  /// Resolved addresses are checked at delivery: the kinds of addresses, by bytes.
  @Test(arguments: [
    ("8.8.8.8", nil),
    ("2001:4860:4860::8888", nil),
    ("127.0.0.53", "loopback"),
    ("::1", "loopback"),
    ("10.255.0.1", "private"),
    ("::ffff:192.168.0.1", "private"),
    ("::ffff:8.8.8.8", nil),
    ("fe80::abcd", "link-local"),
    ("fdff::1", "unique local"),
    ("100.100.100.100", "shared (CGNAT)"),
    ("0.1.2.3", "unspecified"),
  ] as [(String, String?)])
  func addressKinds(_ text: String, _ kind: String?) throws {
    let address = try #require(WebhookIPAddress(text))
    #expect(address.nonPublicKind == kind)
    if kind == nil {
      try WebhookURLPolicy(localAddresses: noLocalAddresses).checkAddress(address)
    } else {
      #expect(throws: WebhookURLRejection.self) { try WebhookURLPolicy(localAddresses: noLocalAddresses).checkAddress(address) }
      try WebhookURLPolicy(allowPrivateAddresses: true).checkAddress(address)
    }
  }
}

@Suite("Webhook signing")
struct WebhookSigningTests {
  @Test("a secret is whsec_ and 64 hex digits of the injected randomness; its fingerprint is a shared secret's")
  func secretShape() {
    let secret = WebhookSigning.newSecret { Array(repeating: 0xab, count: $0) }
    #expect(secret == "whsec_" + String(repeating: "ab", count: 32))
    #expect(WebhookSigning.fingerprint(secret).hasPrefix("sha256:"))
    #expect(WebhookSigning.fingerprint(secret).count == "sha256:".count + 16)
  }

  /// The header of a known body (computed with Python's hmac; the MAC itself is checked against
  /// RFC 4231 in SubstatusCryptoTests).
  @Test func knownAnswers() {
    let header = WebhookSigning.signatureHeader(secret: "whsec_test", timestamp: 1_700_000_000, body: Array("{\"a\":1}".utf8))
    #expect(header == "t=1700000000,v1=" + Self.python)
  }

  /// The dispatcher's signer signs as the one-shot header does, for keys shorter than, as long as
  /// and longer than SHA-256's block (a real secret is 70 bytes: hashed first), for empty and long
  /// bodies, and again with the same signer; and a known header as Python's hmac computes it.
  @Test(arguments: [0, 4, 63, 64, 65, 70, 300])
  func aSignerSignsAsTheOneShotHeader(keyLength: Int) {
    let secret = String((0..<keyLength).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) })
    let signer = WebhookSigner(secret: secret)
    for body in [[], Array("{\"a\":1}".utf8), [UInt8](repeating: 0x7b, count: 5_000)] {
      for _ in 0..<2 {
        #expect(
          signer.signatureHeader(timestamp: 1_700_000_000, body: body)
            == WebhookSigning.signatureHeader(secret: secret, timestamp: 1_700_000_000, body: body))
      }
    }
    #expect(WebhookSigner(secret: "whsec_test").signatureHeader(timestamp: 1_700_000_000, body: Array("{\"a\":1}".utf8)) == "t=1700000000,v1=" + Self.python)
  }

  /// `hmac.new(b"whsec_test", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()`
  static let python = "38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
}
