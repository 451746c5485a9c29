import Foundation
import SubstatusProcessTestKit
import Testing
@testable import SubstatusDaemon

/// Runs a program off the cooperative pool; returns its exit status and output.
func run(_ path: String, _ arguments: [String]) async throws -> (Int32, String, String) {
  try await runProcess(path, arguments)
}

/// Makes a throwaway PKI with the transport tests' script (see its header for the certificates).
func makeTestPKI() async throws -> URL {
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("substatusd-pki-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  let script = packageRoot.appendingPathComponent("Tests/RPCHTTP2TransportTests/Fixtures/make_test_pki.sh").path
  let (status, _, errors) = try await run("/bin/sh", [script, directory.path])
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

  @Test func unusableCertificateStopsTheDaemonWithAClearError() async throws {
    let pki = try await makeTestPKI()
    defer { try? FileManager.default.removeItem(at: pki) }
    let (status, out, err) = try await run(
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

  @Test func servesTheCLIOverTLSAndReloadsOnSIGHUP() async throws {
    let pki = try await makeTestPKI()
    defer { try? FileManager.default.removeItem(at: pki) }
    func path(_ name: String) -> String { pki.appendingPathComponent(name).path }
    try installCertificate("server", in: pki)
    let arguments = [
      "--tls-cert", path("live.pem"), "--tls-key", path("live.key"),
      "--http-tls-cert", path("server.pem"), "--http-tls-key", path("server.key"),
    ]
    let daemon = try await RunningDaemon(extraArguments: arguments)
    let cli = try builtExecutable("substatus")
    func health(_ flags: [String]) async throws -> (Int32, String, String) {
      try await run(cli, ["health", "--addr", daemon.grpc, "--timeout", "5"] + flags)
    }

    let secure = try await health(["--tls", "--ca-file", path("ca.pem")])
    #expect(secure.0 == 0, "\(secure.1)\(secure.2)")
    #expect(secure.1.contains("SERVING"))
    let cleartext = try await health([])
    #expect(cleartext.0 == 1, "a cleartext client must not get an answer: \(cleartext.1)")
    let wrongCA = try await health(["--ca-file", path("other-ca.pem")])
    #expect(wrongCA.0 == 1)
    #expect(wrongCA.2.contains("certificate verify failed"), "\(wrongCA.2)")

    // The HTTP listener (libmicrohttpd + GnuTLS) answers HTTPS, and not plain HTTP.
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    let fetch = """
      import ssl, sys, urllib.request
      context = ssl.create_default_context(cafile=sys.argv[2])
      print(urllib.request.urlopen(sys.argv[1], context=context, timeout=5).read().decode())
      """
    let https = try await run(python, ["-c", fetch, "https://\(daemon.http)/healthz", path("ca.pem")])
    #expect(https.0 == 0, "\(https.2)")
    #expect(https.1.contains("\"ok\""))
    let plainHTTP = try await run(python, ["-c", fetch, "http://\(daemon.http)/healthz", path("ca.pem")])
    #expect(plainHTTP.0 != 0)

    // SIGHUP: new connections get the new certificate (signed by ca2).
    try installCertificate("server2", in: pki)
    kill(daemon.pid, SIGHUP)
    let reloaded = try await waitUntil(timeout: .seconds(5), every: .milliseconds(100)) {
      try await health(["--ca-file", path("ca2.pem")]).0 == 0
    }
    #expect(reloaded, "the new certificate was not served after SIGHUP")
    #expect(try await health(["--ca-file", path("ca.pem")]).0 == 1)

    let (status, log) = await daemon.stop()
    #expect(status == 0)
    #expect(log.contains("reloaded the TLS certificate"))
    #expect(log.contains("\"grpc_tls\":true"))
  }

  @Test func mutualTLSWithTheCLI() async throws {
    let pki = try await makeTestPKI()
    defer { try? FileManager.default.removeItem(at: pki) }
    func path(_ name: String) -> String { pki.appendingPathComponent(name).path }
    let arguments = [
      "--tls-cert", path("server.pem"), "--tls-key", path("server.key"), "--tls-client-ca", path("ca.pem"),
    ]
    let daemon = try await RunningDaemon(extraArguments: arguments)
    let cli = try builtExecutable("substatus")
    let base = ["health", "--addr", daemon.grpc, "--timeout", "5", "--ca-file", path("ca.pem")]
    let withCertificate = try await run(
      cli, base + ["--client-cert", path("client.pem"), "--client-key", path("client.key")])
    let anonymous = try await run(cli, base)
    let otherCA = try await run(
      cli, base + ["--client-cert", path("client-other.pem"), "--client-key", path("client-other.key")])
    let unpaired = try await run(cli, base + ["--client-cert", path("client.pem")])
    let (status, _) = await daemon.stop()
    #expect(withCertificate.0 == 0, "\(withCertificate.1)\(withCertificate.2)")
    #expect(anonymous.0 == 1)
    #expect(otherCA.0 == 1)
    #expect(unpaired.0 == 2)
    #expect(unpaired.2.contains("--client-cert and --client-key go together"))
    #expect(status == 0)
  }
}
