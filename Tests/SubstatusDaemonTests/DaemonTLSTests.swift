import Foundation
import Testing
@testable import SubstatusDaemon

/// Makes a throwaway PKI with the transport tests' script (see its header for the certificates).
func makeTestPKI() throws -> URL {
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-pki-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  let script = packageRoot.appendingPathComponent("Tests/RPCHTTP2TransportTests/Fixtures/make_test_pki.sh").path
  let (status, _, errors) = try runProcess("/bin/sh", [script, directory.path])
  try #require(status == 0, "make_test_pki.sh failed: \(errors)")
  return directory
}

/// Copies a certificate and key of the PKI over `live.pem` / `live.key`.
func installCertificate(_ name: String, in pki: URL) throws {
  for suffix in [".pem", ".key"] {
    let destination = pki.appendingPathComponent("live" + suffix).path
    try? FileManager.default.removeItem(atPath: destination)
    try FileManager.default.copyItem(atPath: pki.appendingPathComponent(name + suffix).path, toPath: destination)
  }
}

@Suite struct DaemonTLSTests {
  @Test func tlsSettingsFromFlagsEnvironmentAndConfigFile() throws {
    let file: [UInt8] = Array(#"{"data_dir": "/d", "tls_cert": "/file/cert.pem", "tls_key": "/file/key.pem"}"#.utf8)
    let c = try #require(
      try DaemonConfiguration.parse(
        arguments: ["--config", "c.json", "--tls-key", "/flag/key.pem"],
        environment: ["SUBSTATUS_TLS_CLIENT_CA": "/env/ca.pem"], readFile: { _ in file }))
    #expect(c.tlsCertificate == "/file/cert.pem")
    #expect(c.tlsKey == "/flag/key.pem")
    #expect(c.tlsClientCA == "/env/ca.pem")
    let plain = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(plain.tlsCertificate == nil && plain.tlsKey == nil && plain.tlsClientCA == nil)
  }

  @Test(arguments: [
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert and --tls-key"),
    (["--http-tls-cert", "c.pem"], "--http-tls-cert and --http-tls-key go together"),
  ])
  func tlsFlagsMustComeTogether(arguments: [String], message: String) {
    #expect(throws: DaemonConfiguration.UsageError(description: message)) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: [:])
    }
  }

  @Test func unusableCertificateStopsTheDaemonWithAClearError() throws {
    let pki = try makeTestPKI()
    defer { try? FileManager.default.removeItem(at: pki) }
    let (status, out, err) = try runProcess(
      try builtExecutable("substatusd"),
      [
        "--data-dir", pki.appendingPathComponent("data").path, "--grpc-listen", "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0", "--tls-cert", pki.appendingPathComponent("server.pem").path,
        "--tls-key", pki.appendingPathComponent("client.key").path,
      ])
    #expect(status == 1)
    #expect((out + err).contains("gRPC TLS: cannot load the private key"), "\(out)\(err)")
    #expect((out + err).contains("key values mismatch"), "\(out)\(err)")
  }

  @Test func servesTheCLIOverTLSAndReloadsOnSIGHUP() throws {
    let pki = try makeTestPKI()
    defer { try? FileManager.default.removeItem(at: pki) }
    func path(_ name: String) -> String { pki.appendingPathComponent(name).path }
    try installCertificate("server", in: pki)
    let daemon = try RunningDaemon(extraArguments: [
      "--tls-cert", path("live.pem"), "--tls-key", path("live.key"),
      "--http-tls-cert", path("server.pem"), "--http-tls-key", path("server.key"),
    ])
    let cli = try builtExecutable("substatus")
    func health(_ flags: [String]) throws -> (Int32, String, String) {
      try runProcess(cli, ["health", "--addr", daemon.grpc, "--timeout", "5"] + flags)
    }

    let secure = try health(["--tls", "--ca-file", path("ca.pem")])
    #expect(secure.0 == 0, "\(secure.1)\(secure.2)")
    #expect(secure.1.contains("SERVING"))
    let cleartext = try health([])
    #expect(cleartext.0 == 1, "a cleartext client must not get an answer: \(cleartext.1)")
    let wrongCA = try health(["--ca-file", path("other-ca.pem")])
    #expect(wrongCA.0 == 1)
    #expect(wrongCA.2.contains("certificate verify failed"), "\(wrongCA.2)")

    // The HTTP listener (libmicrohttpd + GnuTLS) answers HTTPS, and not plain HTTP.
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    let fetch = """
      import ssl, sys, urllib.request
      context = ssl.create_default_context(cafile=sys.argv[2])
      print(urllib.request.urlopen(sys.argv[1], context=context, timeout=5).read().decode())
      """
    let https = try runProcess(python, ["-c", fetch, "https://\(daemon.http)/healthz", path("ca.pem")])
    #expect(https.0 == 0, "\(https.2)")
    #expect(https.1.contains("\"ok\""))
    let plainHTTP = try runProcess(python, ["-c", fetch, "http://\(daemon.http)/healthz", path("ca.pem")])
    #expect(plainHTTP.0 != 0)

    // SIGHUP: new connections get the new certificate (signed by ca2).
    try installCertificate("server2", in: pki)
    kill(daemon.process.processIdentifier, SIGHUP)
    var reloaded = false
    for _ in 0..<50 where !reloaded {
      reloaded = try health(["--ca-file", path("ca2.pem")]).0 == 0
      if !reloaded { Thread.sleep(forTimeInterval: 0.1) }
    }
    #expect(reloaded, "the new certificate was not served after SIGHUP")
    #expect(try health(["--ca-file", path("ca.pem")]).0 == 1)

    let (status, log) = daemon.stop()
    #expect(status == 0)
    #expect(log.contains("reloaded the TLS certificate"))
    #expect(log.contains("\"grpc_tls\":true"))
  }

  @Test func mutualTLSWithTheCLI() throws {
    let pki = try makeTestPKI()
    defer { try? FileManager.default.removeItem(at: pki) }
    func path(_ name: String) -> String { pki.appendingPathComponent(name).path }
    let daemon = try RunningDaemon(extraArguments: [
      "--tls-cert", path("server.pem"), "--tls-key", path("server.key"), "--tls-client-ca", path("ca.pem"),
    ])
    defer { _ = daemon.stop() }
    let cli = try builtExecutable("substatus")
    let base = ["health", "--addr", daemon.grpc, "--timeout", "5", "--ca-file", path("ca.pem")]
    let withCertificate = try runProcess(
      cli, base + ["--client-cert", path("client.pem"), "--client-key", path("client.key")])
    #expect(withCertificate.0 == 0, "\(withCertificate.1)\(withCertificate.2)")
    #expect(try runProcess(cli, base).0 == 1)
    let otherCA = try runProcess(
      cli, base + ["--client-cert", path("client-other.pem"), "--client-key", path("client-other.key")])
    #expect(otherCA.0 == 1)
    let unpaired = try runProcess(cli, base + ["--client-cert", path("client.pem")])
    #expect(unpaired.0 == 2)
    #expect(unpaired.2.contains("--client-cert and --client-key go together"))
  }
}
