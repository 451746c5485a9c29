import RPCWebProtocols
import Testing

@Suite struct CORSPolicyTests {
  static let policy = CORSPolicy(allowedOrigins: ["https://Console.example.com", "http://localhost:5173"])

  @Test(arguments: [
    ("https://console.example.com", true), ("HTTPS://CONSOLE.EXAMPLE.COM", true), ("http://localhost:5173", true),
    ("https://console.example.com.evil.test", false), ("http://console.example.com", false), ("null", false),
    ("http://localhost:5174", false),
  ])
  func allowsListedOriginsOnly(_ origin: String, _ allowed: Bool) {
    #expect(Self.policy.allows(origin: origin) == allowed)
    #expect(!Self.policy.responseFields(origin: origin).isEmpty == allowed)
    #expect(((try? Self.policy.preflight(origin: origin, requestMethod: "POST", requestHeaders: nil).get()) != nil) == allowed)
  }

  @Test func noOriginIsAllowedByDefault() {
    let none = CORSPolicy(allowedOrigins: [])
    #expect(!none.isEnabled)
    #expect(none.responseFields(origin: "https://a.example").isEmpty)
    guard case .failure(let rejection) = none.preflight(origin: "https://a.example", requestMethod: "POST", requestHeaders: nil)
    else { Issue.record("allowed"); return }
    #expect(rejection.status == 403)
    #expect(rejection.headers.isEmpty)
  }

  @Test func starAllowsAnyOriginAndEchoesIt() {
    let any = CORSPolicy(allowedOrigins: ["*"])
    #expect(any.responseFields(origin: "https://x.example").first == HTTPField("access-control-allow-origin", "https://x.example"))
  }

  @Test func preflightAllowsTheProtocolHeadersAndTheRequestedOnes() throws {
    let head = try Self.policy.preflight(
      origin: "http://localhost:5173", requestMethod: "POST",
      requestHeaders: "content-type, connect-protocol-version, x-tenant-hint, authorization, bad header"
    ).get()
    #expect(head.status == 204)
    let fields = Dictionary(head.fields.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
    #expect(fields["access-control-allow-origin"] == "http://localhost:5173")
    #expect(fields["access-control-allow-methods"] == "POST")
    let allowed = try #require(fields["access-control-allow-headers"]).split(separator: ",").map {
      $0.trimmingCharacters(in: " ").lowercased()
    }
    for name in [
      "content-type", "connect-protocol-version", "connect-timeout-ms", "grpc-timeout", "x-grpc-web", "x-user-agent",
      "authorization", "x-tenant-hint",
    ] {
      #expect(allowed.contains(name), "\(name)")
    }
    #expect(!allowed.contains("bad header"))
    #expect(allowed.filter { $0 == "authorization" }.count == 1)
    #expect(fields["access-control-max-age"] == "7200")
    #expect(fields["access-control-allow-credentials"] == nil)
  }

  @Test func preflightForAnotherMethodIsRefused() {
    guard case .failure(let rejection) = Self.policy.preflight(origin: "http://localhost:5173", requestMethod: "PUT", requestHeaders: nil)
    else { Issue.record("allowed"); return }
    #expect(rejection.status == 403)
  }

  @Test func actualResponsesExposeTheStatusHeaders() {
    let fields = Self.policy.responseFields(origin: "http://localhost:5173")
    let exposed = fields.first { $0.name == "access-control-expose-headers" }?.value ?? ""
    for name in ["Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin", "Connect-Content-Encoding"] {
      #expect(exposed.contains(name))
    }
    #expect(fields.contains(HTTPField("vary", "Origin")))
  }

  static let preflights: [(String, String?, String?, Bool)] = [
    ("OPTIONS", "o", "POST", true), ("OPTIONS", nil, "POST", false), ("OPTIONS", "o", nil, false),
    ("POST", "o", "POST", false),
  ]

  @Test(arguments: preflights)
  func preflightIsRecognised(_ method: String, _ origin: String?, _ requestMethod: String?, _ expected: Bool) {
    #expect(CORSPolicy.isPreflight(method: method, origin: origin, requestMethod: requestMethod) == expected)
  }
}

extension Substring {
  fileprivate func trimmingCharacters(in set: Character) -> String {
    var s = self
    while s.first == set { s = s.dropFirst() }
    while s.last == set { s = s.dropLast() }
    return String(s)
  }
}
