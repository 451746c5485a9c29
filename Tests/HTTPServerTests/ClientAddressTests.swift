import Testing

import HTTPServer

struct ClientAddressTests {
  @Test(arguments: [
    ("127.0.0.1/32", "127.0.0.1", true), ("127.0.0.1/32", "127.0.0.2", false),
    ("10.0.0.0/8", "10.255.1.2", true), ("10.0.0.0/8", "11.0.0.1", false),
    ("10.1.2.3/8", "10.9.9.9", true),  // host bits are cleared
    ("192.0.2.0/25", "192.0.2.127", true), ("192.0.2.0/25", "192.0.2.128", false),
    ("0.0.0.0/0", "203.0.113.1", true), ("0.0.0.0/0", "2001:db8::1", false),
    ("2001:db8::/32", "2001:db8:ffff::1", true), ("2001:db8::/32", "2001:db9::1", false),
    ("::1", "::1", true), ("127.0.0.1", "::ffff:127.0.0.1", true),  // an IPv4-mapped address is IPv4
    ("::ffff:10.0.0.0/104", "10.2.3.4", true),
  ])
  func networksContainTheirAddresses(network: String, address: String, contained: Bool) throws {
    let range = try #require(IPNetwork(network))
    let candidate = try #require(IPAddress(address))
    #expect(range.contains(candidate) == contained)
  }

  @Test(arguments: ["", "10.0.0.0/33", "10.0.0.0/", "10.0.0/8", "example.com", "::1/129", "10.0.0.0/-1", "10.0.0.0/8/8"])
  func rejectsWhatIsNotARange(text: String) {
    #expect(IPNetwork(text) == nil)
  }

  @Test func parsesLists() {
    #expect(IPNetwork.list("127.0.0.1/32, 10.0.0.0/8")?.map(\.description) == ["127.0.0.1/32", "10.0.0.0/8"])
    #expect(IPNetwork.list("127.0.0.1,,10.0.0.0/8") == nil)
    #expect(IPNetwork.list("127.0.0.1,nonsense") == nil)
  }

  static let proxies = [IPNetwork("10.0.0.0/8")!, IPNetwork("127.0.0.1")!]

  @Test(arguments: [
    // The right-most address that is not a trusted proxy; what the client wrote stays left of it.
    (["X-Forwarded-For": "198.51.100.7"], "198.51.100.7"),
    (["X-Forwarded-For": "1.2.3.4, 198.51.100.7"], "198.51.100.7"),
    (["X-Forwarded-For": "1.2.3.4, 198.51.100.7, 10.0.0.5"], "198.51.100.7"),
    (["X-Forwarded-For": " 2001:db8::7 ,10.1.1.1"], "2001:db8::7"),
    (["X-Forwarded-For": "[2001:db8::7]:443"], "2001:db8::7"),
    (["X-Forwarded-For": "198.51.100.7:5555"], "198.51.100.7"),
    // Only trusted hops: the left-most of them.
    (["X-Forwarded-For": "10.0.0.9, 10.0.0.5"], "10.0.0.9"),
    // A hop that is not an address ends the walk at the nearest trusted hop.
    (["X-Forwarded-For": "198.51.100.7, unknown, 10.0.0.5"], "10.0.0.5"),
    (["X-Forwarded-For": "garbage"], nil),
    // RFC 7239.
    (["Forwarded": "for=192.0.2.60;proto=http;by=203.0.113.43"], "192.0.2.60"),
    (["Forwarded": "for=192.0.2.43, for=\"[2001:db8:cafe::17]:4711\""], "2001:db8:cafe::17"),
    (["Forwarded": "For=\"192.0.2.1:80\";proto=https, for=10.0.0.2"], "192.0.2.1"),
    (["Forwarded": "for=_hidden, for=10.0.0.2"], "10.0.0.2"),
    (["Forwarded": "proto=https"], nil),
    // X-Forwarded-For wins: it is the header proxies append to.
    (["Forwarded": "for=203.0.113.99", "X-Forwarded-For": "198.51.100.7"], "198.51.100.7"),
    ([:], nil),
  ] as [([String: String], String?)])
  func resolvesTheForwardedClient(fields: [String: String], client: String?) {
    let headers = HTTPHeaders(fields.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) })
    #expect(ForwardedClient.resolve(headers: headers, trusted: Self.proxies) == client.flatMap { IPAddress($0) })
  }

  @Test func joinsRepeatedForwardedForFields() {
    let headers = HTTPHeaders([(name: "X-Forwarded-For", value: "198.51.100.7"), (name: "x-forwarded-for", value: "10.0.0.1")])
    #expect(ForwardedClient.resolve(headers: headers, trusted: Self.proxies) == IPAddress("198.51.100.7"))
  }

  @Test(arguments: [
    ([("Content-Length", "5"), ("Transfer-Encoding", "chunked")], "HTTP/1.1", HTTPFraming.Fault.contentLengthWithTransferEncoding),
    ([("Transfer-Encoding", "xchunked")], "HTTP/1.1", .unknownTransferCoding("xchunked")),
    ([("Transfer-Encoding", "chunked, identity")], "HTTP/1.1", .unknownTransferCoding("identity")),
    ([("Transfer-Encoding", "gzip, chunked")], "HTTP/1.1", .unknownTransferCoding("gzip")),
    ([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], "HTTP/1.1", .badTransferEncoding),
    ([("Transfer-Encoding", "chunked,")], "HTTP/1.1", .badTransferEncoding),
    ([("Transfer-Encoding", "chunked")], "HTTP/1.0", .badTransferEncoding),
    ([("Content-Length", "5"), ("Content-Length", "6")], "HTTP/1.1", .badContentLength),
    ([("Content-Length", "5, 6")], "HTTP/1.1", .badContentLength),
    ([("Content-Length", "+5")], "HTTP/1.1", .badContentLength),
    ([("Content-Length", "")], "HTTP/1.1", .badContentLength),
  ] as [([(String, String)], String, HTTPFraming.Fault)])
  func refusesAmbiguousFraming(fields: [(String, String)], version: String, fault: HTTPFraming.Fault) {
    let headers = HTTPHeaders([(name: "Host", value: "x")] + fields.map { (name: $0.0, value: $0.1) })
    #expect(HTTPFraming.check(headers: headers, version: version) == fault)
    let response = fault.response
    #expect(response.status == (fault == .unknownTransferCoding("xchunked") || fault == .unknownTransferCoding("identity") || fault == .unknownTransferCoding("gzip") ? 501 : 400))
    #expect(response.headers["Connection"] == "close")
  }

  @Test(arguments: [
    [("Transfer-Encoding", "chunked")], [("transfer-encoding", "Chunked")], [("Content-Length", "5")],
    [("Content-Length", "5"), ("Content-Length", "5")], [("Content-Length", "5, 5")], [],
  ] as [[(String, String)]])
  func acceptsPlainFraming(fields: [(String, String)]) {
    let headers = HTTPHeaders([(name: "host", value: "x")] + fields.map { (name: $0.0, value: $0.1) })
    #expect(HTTPFraming.check(headers: headers, version: "HTTP/1.1") == nil)
  }

  @Test func http11NeedsExactlyOneHost() {
    #expect(HTTPFraming.check(headers: HTTPHeaders(), version: "HTTP/1.1") == .badHost)
    #expect(HTTPFraming.check(headers: ["Host": "a", "host": "b"], version: "HTTP/1.1") == .badHost)
    #expect(HTTPFraming.check(headers: HTTPHeaders(), version: "HTTP/1.0") == nil)
  }
}
