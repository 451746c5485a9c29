import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import SubstatusClock
import Testing

/// A throwaway PKI made by Fixtures/make_test_pki.sh (the `openssl` command) in a temporary
/// directory: see the script for the certificates.
struct TestPKI {
  let directory: String

  /// The path of a file of the PKI, such as `ca.pem`.
  func path(_ name: String) -> String { directory + "/" + name }

  /// Copies `from` (key and certificate) to `to`, as a deployment tool would replace them.
  func install(_ from: String, as to: String) throws {
    for suffix in [".pem", ".key"] {
      let destination = path(to + suffix)
      try? FileManager.default.removeItem(atPath: destination)
      try FileManager.default.copyItem(atPath: path(from + suffix), toPath: destination)
    }
  }
}

/// Makes a PKI for the duration of `body`.
func withTestPKI(_ body: (TestPKI) async throws -> Void) async throws {
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatus-pki-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  defer { try? FileManager.default.removeItem(at: directory) }
  let made = try await runProcess("/bin/sh", [fixture("make_test_pki.sh"), directory.path], timeout: .seconds(60))
  try #require(made.status == 0, "make_test_pki.sh failed: \(made.stderr)")
  try await body(TestPKI(directory: directory.path))
}

/// Server TLS settings with a certificate of the PKI (`server`, `expired`, ...).
func serverTLS(_ pki: TestPKI, _ name: String = "server", clientCA: String? = nil) -> TLSConfiguration {
  TLSConfiguration(
    certificateChainPath: pki.path("\(name).pem"), privateKeyPath: pki.path("\(name).key"),
    clientCAPath: clientCA.map { pki.path($0) })
}

/// A client of the test service trusting `ca` of the PKI, with an optional client certificate.
func makeTLSClient(
  port: Int, _ pki: TestPKI, ca: String = "ca.pem", serverName: String? = nil, certificate: String? = nil
) throws -> HTTP2ClientTransport {
  try makeClient(port: port) {
    $0.tls = ClientTLSConfiguration(
      caFilePath: pki.path(ca), serverName: serverName, certificateChainPath: certificate.map { pki.path("\($0).pem") },
      privateKeyPath: certificate.map { pki.path("\($0).key") })
    $0.connectTimeout = .seconds(5)
  }
}

/// Runs one case of the grpcio TLS client fixture; `certificate` names a client certificate.
func runGRPCIOTLSCase(_ name: String, port: Int, _ pki: TestPKI, certificate: String? = nil) async throws {
  var arguments = [fixture("grpcio_tls_client.py"), String(port), name, pki.path("ca.pem")]
  if let certificate { arguments += [pki.path("\(certificate).pem"), pki.path("\(certificate).key")] }
  let result = try await runProcess(python, arguments)
  #expect(result.status == 0, "grpcio TLS case \(name) failed:\n\(result.stdout)\n\(result.stderr)")
  #expect(result.stdout.contains("PASS \(name)"))
}

/// Runs a raw TLS probe (Fixtures/tls_probe.py); returns its output.
func runTLSProbe(_ name: String, port: Int, _ pki: TestPKI) async throws -> String {
  let result = try await runProcess(python, [fixture("tls_probe.py"), String(port), name, pki.path("ca.pem")])
  #expect(result.status == 0, "TLS probe \(name) failed:\n\(result.stdout)\n\(result.stderr)")
  #expect(result.stdout.contains("PASS \(name)"))
  return result.stdout
}

/// Expects a call to fail with `UNAVAILABLE` and a message containing `text`.
func expectUnavailable(_ client: HTTP2ClientTransport, containing text: String) async {
  do {
    _ = try await call(client, "Echo", "x")
    Issue.record("the call succeeded; expected UNAVAILABLE (\(text))")
  } catch {
    #expect(error.code == .unavailable)
    #expect(text.isEmpty || error.message.contains(text), "\(error.message)")
  }
}

/// Runs the grpcio TLS server fixture for the duration of `body`.
func withGRPCIOTLSServer(_ arguments: [String], _ body: (GRPCIOServerProcess) async throws -> Void) async throws {
  let server = try await GRPCIOServerProcess(script: "grpcio_tls_server.py", arguments: arguments)
  do {
    try await body(server)
  } catch {
    await server.stop()
    throw error
  }
  await server.stop()
}

@Suite struct TLSTests {
  @Test(arguments: ["unary", "concurrent", "large"])
  func grpcioSecureChannel(name: String) async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki) }) { server in
        try await runGRPCIOTLSCase(name, port: server.port, pki)
      }
    }
  }

  @Test func clientAgainstOurTLSServer() async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki) }) { server in
        // By IP address (matched against the certificate's IP SAN), then by name with SNI.
        for serverName in [nil, "localhost"] {
          let client = try makeTLSClient(port: server.port, pki, serverName: serverName)
          defer { client.close() }
          let big = String(repeating: "z", count: 1 << 20)
          #expect(try await call(client, "Echo", big).message == Array(big.utf8))
          async let many = withThrowingTaskGroup(of: Bool.self) { group in
            for i in 0..<100 { group.addTask { try await call(client, "Echo", "\(i)").message == Array("\(i)".utf8) } }
            return try await group.reduce(true) { $0 && $1 }
          }
          #expect(try await many)
        }
        // A name the certificate does not have.
        let client = try makeTLSClient(port: server.port, pki, serverName: "elsewhere.example")
        defer { client.close() }
        await expectUnavailable(client, containing: "certificate verify failed")
      }
    }
  }

  @Test func clientAgainstGRPCIOTLSServer() async throws {
    try await withTestPKI { pki in
      try await withGRPCIOTLSServer([pki.path("server.pem"), pki.path("server.key")]) { server in
        let client = try makeTLSClient(port: server.port, pki, serverName: "localhost")
        defer { client.close() }
        #expect(try await call(client, "Echo", "hello").message == Array("hello".utf8))
        let payload = String(repeating: "q", count: 1 << 20)
        #expect(try await call(client, "Echo", payload).message.count == 1 << 20)
        let wrongCA = try makeTLSClient(port: server.port, pki, ca: "other-ca.pem", serverName: "localhost")
        defer { wrongCA.close() }
        await expectUnavailable(wrongCA, containing: "certificate verify failed")
      }
    }
  }

  @Test func mutualTLSAgainstGRPCIOServer() async throws {
    try await withTestPKI { pki in
      try await withGRPCIOTLSServer([pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem")]) { server in
        let client = try makeTLSClient(port: server.port, pki, serverName: "localhost", certificate: "client")
        defer { client.close() }
        let response = try await call(client, "Echo", "hi")
        #expect(response.trailingMetadata.firstString(forKey: "x-peer-cn") == "client")
        let anonymous = try makeTLSClient(port: server.port, pki, serverName: "localhost")
        defer { anonymous.close() }
        await expectUnavailable(anonymous, containing: "")
      }
    }
  }

  @Test func wrongCAIsRefused() async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki, "server-other") }) { server in
        let client = try makeTLSClient(port: server.port, pki)
        defer { client.close() }
        await expectUnavailable(client, containing: "certificate verify failed (unable to get local issuer certificate)")
        try await runGRPCIOTLSCase("refused", port: server.port, pki)
      }
    }
  }

  @Test func expiredCertificateIsRefused() async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki, "expired") }) { server in
        let client = try makeTLSClient(port: server.port, pki)
        defer { client.close() }
        await expectUnavailable(client, containing: "certificate has expired")
        try await runGRPCIOTLSCase("refused", port: server.port, pki)
      }
    }
  }

  @Test(arguments: ["no_alpn", "http11_alpn"])
  func clientWithoutALPNH2IsRefused(probe: String) async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki) }) { server in
        _ = try await runTLSProbe(probe, port: server.port, pki)
        try await runGRPCIOTLSCase("unary", port: server.port, pki)
      }
    }
  }

  @Test func mutualTLS() async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki, clientCA: "ca.pem") }) { server in
        let client = try makeTLSClient(port: server.port, pki, certificate: "client")
        defer { client.close() }
        #expect(try await call(client, "Echo", "mtls").message == Array("mtls".utf8))
        try await runGRPCIOTLSCase("unary", port: server.port, pki, certificate: "client")
        // TLS 1.3 clients finish their side before the server checks the certificate: the
        // refusal arrives as an alert on the first read.
        for certificate in [nil, "client-other"] {
          let refused = try makeTLSClient(port: server.port, pki, certificate: certificate)
          defer { refused.close() }
          await expectUnavailable(refused, containing: "")
        }
        try await runGRPCIOTLSCase("refused", port: server.port, pki)
        try await runGRPCIOTLSCase("refused", port: server.port, pki, certificate: "client-other")
      }
    }
  }

  @Test func certificateReloadKeepsOpenConnections() async throws {
    try await withTestPKI { pki in
      try pki.install("server", as: "live")
      try await withTestServer(configure: { $0.tls = serverTLS(pki, "live") }) { server in
        let old = try makeTLSClient(port: server.port, pki)
        defer { old.close() }
        #expect(try await call(old, "Echo", "before").message == Array("before".utf8))
        let inFlight = Task { try await call(old, "Sleep", "1500") }
        try await Task.sleep(for: .milliseconds(300))

        try pki.install("server2", as: "live")
        try server.transport.reloadTLSCertificates()

        // New connections get the new certificate (signed by ca2).
        let fresh = try makeTLSClient(port: server.port, pki, ca: "ca2.pem")
        defer { fresh.close() }
        #expect(try await call(fresh, "Echo", "after").message == Array("after".utf8))
        let stale = try makeTLSClient(port: server.port, pki)
        defer { stale.close() }
        await expectUnavailable(stale, containing: "certificate verify failed")
        // The open connection keeps its certificate: its call finishes and it serves more.
        #expect(try await inFlight.value.message == Array("1500".utf8))
        #expect(try await call(old, "Echo", "still").message == Array("still".utf8))

        // A broken reload keeps the current certificate.
        try "not a certificate".write(toFile: pki.path("live.pem"), atomically: true, encoding: .utf8)
        #expect(throws: TLSError.self) { try server.transport.reloadTLSCertificates() }
        let again = try makeTLSClient(port: server.port, pki, ca: "ca2.pem")
        defer { again.close() }
        #expect(try await call(again, "Echo", "kept").message == Array("kept".utf8))
      }
    }
  }

  @Test func stalledHandshakeDoesNotBlockOthersAndIsDropped() async throws {
    let clock = ManualClock()
    try await withTestPKI { pki in
      try await withTestServer(configure: {
        $0.tls = serverTLS(pki)
        $0.clock = clock
        $0.handshakeTimeout = .seconds(10)
      }) { server in
        async let stalled = runTLSProbe("stall", port: server.port, pki)
        #expect(await waitUntil { serverConnectionCount(port: server.port) == 1 })
        for i in 0..<3 {
          let client = try makeTLSClient(port: server.port, pki)
          defer { client.close() }
          #expect(try await call(client, "Echo", "\(i)").message == Array("\(i)".utf8))
        }
        #expect(server.transport.metrics.handshakeTimeouts == 0)
        clock.advance(by: .seconds(10))
        let output = try await stalled
        #expect(output.contains("PASS stall closed after"), "\(output)")
        #expect(server.transport.metrics.handshakeTimeouts == 1)
      }
    }
  }

  @Test func garbageInsteadOfClientHelloClosesOnlyThatConnection() async throws {
    try await withTestPKI { pki in
      try await withTestServer(configure: { $0.tls = serverTLS(pki) }) { server in
        let client = try makeTLSClient(port: server.port, pki)
        defer { client.close() }
        #expect(try await call(client, "Echo", "one").message == Array("one".utf8))
        _ = try await runTLSProbe("garbage", port: server.port, pki)
        #expect(try await call(client, "Echo", "two").message == Array("two".utf8))
      }
    }
  }

  @Test(arguments: [("missing.pem", "server.key"), ("server.pem", "client.key"), ("server.pem", "missing.key")])
  func unusableCertificateFilesFailAtInit(certificate: String, key: String) async throws {
    try await withTestPKI { pki in
      var configuration = HTTP2ServerTransport.Configuration(host: "127.0.0.1", port: 0)
      configuration.tls = TLSConfiguration(certificateChainPath: pki.path(certificate), privateKeyPath: pki.path(key))
      #expect(throws: TLSError.self) { _ = try HTTP2ServerTransport(configuration: configuration) }
      var client = HTTP2ClientTransport.Configuration(host: "127.0.0.1", port: 1)
      client.tls = ClientTLSConfiguration(caFilePath: pki.path("missing-ca.pem"))
      #expect(throws: TLSError.self) { _ = try HTTP2ClientTransport(configuration: client) }
    }
  }
}
