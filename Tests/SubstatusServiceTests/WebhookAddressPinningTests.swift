import Foundation
import HTTPServer
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Synchronization
import Testing

@testable import SubstatusService

/// DNS rebinding: a delivery connects to an address the policy checked, never to what a later lookup
/// answers: `http://` to the address the dispatcher checked, `https://` through the tunnel proxy,
/// which checks the addresses it connects to.
@Suite("Webhook address pinning")
struct WebhookAddressPinningTests {
  /// Answers one fixed address for the test's name, and counts its lookups.
  final class FixedResolver: WebhookAddressResolver {
    let lookups = Atomic<Int>(0)
    let address: WebhookIPAddress

    init(_ address: String) { self.address = WebhookIPAddress(address)! }

    func addresses(of host: String) async throws(WebhookURLRejection) -> [WebhookIPAddress] {
      lookups.add(1, ordering: .relaxed)
      guard host == "hooks.example.invalid" else { throw WebhookURLRejection("cannot resolve \(host)") }
      return [address]
    }
  }

  final class Hosts: Sendable {
    let list = Mutex<[String]>([])
    var all: [String] { list.withLock { $0 } }
  }

  /// A receiver on 127.0.0.1 that keeps each request's Host header.
  private static func receiver() throws -> (HTTPServer, Hosts) {
    let hosts = Hosts()
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
      hosts.list.withLock { $0.append(request.headers["host"] ?? "") }
      return HTTPResponse(status: 204)
    }
    return (server, hosts)
  }

  private static func dispatcher(_ url: String, resolver: any WebhookAddressResolver, allowPrivate: Bool) async throws
    -> WebhookDispatcher
  {
    let store = InMemoryStore()
    try await Fixture.seed(store)
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: url, createdMs: 1),
      signingSecret: "whsec_" + String(repeating: "7e", count: 32))
    return WebhookDispatcher(
      store: store, environment: TestWorld().environment,
      configuration: .init(urlPolicy: WebhookURLPolicy(allowPrivateAddresses: allowPrivate)), resolver: resolver)
  }

  @Test("the POST goes to the resolved address with the URL's host in Host: a name no DNS knows is reached")
  func pinnedToTheCheckedAddress() async throws {
    let (server, hosts) = try Self.receiver()
    let resolver = FixedResolver("127.0.0.1")
    let url = "http://hooks.example.invalid:\(server.port)/hook"
    let dispatcher = try await Self.dispatcher(url, resolver: resolver, allowPrivate: true)
    let result = try await dispatcher.test(appId: "a1", webhookId: "w1")
    #expect(result.delivered, "\(result.attempt)")
    #expect(hosts.all == ["hooks.example.invalid:\(server.port)"])
    #expect(resolver.lookups.load(ordering: .relaxed) == 1)
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("a name that resolves to a private address is refused before any connection")
  func refusedBeforeConnecting() async throws {
    let (server, hosts) = try Self.receiver()
    let url = "http://hooks.example.invalid:\(server.port)/hook"
    let dispatcher = try await Self.dispatcher(url, resolver: FixedResolver("127.0.0.1"), allowPrivate: false)
    let result = try await dispatcher.test(appId: "a1", webhookId: "w1")
    #expect(!result.delivered)
    #expect(result.attempt.error?.hasPrefix("refused: the address 127.0.0.1 is loopback") == true)
    #expect(hosts.all.isEmpty)
    await server.stop(gracePeriod: .seconds(1))
  }

  /// An HTTPS receiver on 127.0.0.1 with the certificate in `directory`, keeping each Host header.
  private static func tlsReceiver(_ directory: URL) async throws -> (HTTPServer, Hosts) {
    let hosts = Hosts()
    var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
    configuration.tls = try await selfSignedTLS(in: directory)
    let server = try HTTPServer(configuration: configuration) { request in
      hosts.list.withLock { $0.append(request.headers["host"] ?? "") }
      return HTTPResponse(status: 204)
    }
    return (server, hosts)
  }

  @Test("https: a name the check saw public and that then resolves to loopback is refused by the tunnel; nothing connects")
  func httpsRebindingRefused() async throws {
    // What would be reached: a service on the machine itself (it counts connections).
    let inside = try EchoListener()
    // The dispatcher's check sees a public address; the next lookup (the connection's) loopback.
    let resolver = WebhookTunnelProxyTests.ListResolver([["93.184.216.34"], ["127.0.0.1"]])
    let url = "https://localhost:\(inside.port)/hook"
    let dispatcher = try await Self.dispatcher(url, resolver: resolver, allowPrivate: false)
    let result = try await dispatcher.test(appId: "a1", webhookId: "w1")
    #expect(!result.delivered)
    #expect(result.attempt.error?.hasPrefix("refused: the address 127.0.0.1 is loopback") == true, "\(result.attempt)")
    #expect(inside.connections == 0)
    #expect(resolver.lookups.load(ordering: .relaxed) == 2)
  }

  @Test("https through the tunnel keeps TLS end to end: a certificate nobody trusts fails the delivery")
  func httpsUntrustedCertificateFails() async throws {
    guard HTTPServerTLS.isSupported else { return }
    let directory = try tlsTestDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let (server, requests) = try await Self.tlsReceiver(directory)
    let resolver = WebhookTunnelProxyTests.ListResolver([["127.0.0.1"]])
    let dispatcher = try await Self.dispatcher("https://localhost:\(server.port)/hook", resolver: resolver, allowPrivate: true)
    let result = try await dispatcher.test(appId: "a1", webhookId: "w1")
    #expect(!result.delivered)
    #expect(result.attempt.error?.contains("certificate") == true, "\(result.attempt)")
    #expect(requests.all.isEmpty)
    // Resolved by the dispatcher's check, then by the tunnel for the connection.
    #expect(resolver.lookups.load(ordering: .relaxed) == 2)
    await server.stop(gracePeriod: .seconds(1))
  }

  /// The directory of a certificate the process trusts (``httpsTrustedCertificateDelivers()``
  /// runs only in the child that ``httpsTrustedCertificateDeliversInAMountNamespace()`` starts).
  private static let trustedDirectory = ProcessInfo.processInfo.environment["SUBSTATUS_TEST_TRUSTED_TLS_DIR"]

  /// Whether this machine lets an unprivileged process make a user and mount namespace.
  private static let canUnshare: Bool = {
    let probe = Process()
    probe.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
    probe.arguments = ["-r", "-m", "true"]
    probe.standardError = FileHandle.nullDevice
    guard (try? probe.run()) != nil else { return false }
    probe.waitUntilExit()
    return probe.terminationStatus == 0
  }()

  @Test(
    "with private webhooks allowed, an https POST to a loopback receiver goes through the tunnel and verifies its certificate",
    .enabled(if: trustedDirectory != nil))
  func httpsTrustedCertificateDelivers() async throws {
    let directory = URL(fileURLWithPath: try #require(Self.trustedDirectory))
    let (server, hosts) = try await Self.tlsReceiver(directory)
    let resolver = WebhookTunnelProxyTests.ListResolver([["127.0.0.1"]])
    let dispatcher = try await Self.dispatcher("https://localhost:\(server.port)/hook", resolver: resolver, allowPrivate: true)
    let result = try await dispatcher.test(appId: "a1", webhookId: "w1")
    #expect(result.delivered, "\(result.attempt)")
    #expect(result.attempt.httpStatus == 204)
    #expect(hosts.all == ["localhost:\(server.port)"])
    #expect(resolver.lookups.load(ordering: .relaxed) == 2)
    await server.stop(gracePeriod: .seconds(1))
  }

  /// FoundationNetworking on Linux has no way to trust a certificate but the system's CA bundle:
  /// this test runs ``httpsTrustedCertificateDelivers()`` in a child test process in a mount
  /// namespace where the test's self-signed certificate is bind-mounted over that bundle.
  @Test(
    "the trusted-certificate delivery, in a child process whose CA bundle is the test's certificate",
    .enabled(if: HTTPServerTLS.isSupported && trustedDirectory == nil && canUnshare))
  func httpsTrustedCertificateDeliversInAMountNamespace() async throws {
    let directory = try tlsTestDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    _ = try await selfSignedTLS(in: directory)
    var environment = ProcessInfo.processInfo.environment
    environment["SUBSTATUS_TEST_TRUSTED_TLS_DIR"] = directory.path
    // This process's tunnel proxy (installed by an earlier test) is not the child's.
    environment["https_proxy"] = nil
    let output = try await runProgram(
      "/usr/bin/unshare",
      [
        "-r", "-m", "/bin/sh", "-c",
        #"mount --bind "$1" /etc/ssl/certs/ca-certificates.crt && exec "$2" --testing-library swift-testing --filter "$3""#,
        "sh", directory.appendingPathComponent("cert.pem").path, CommandLine.arguments[0],
        "WebhookAddressPinningTests/httpsTrustedCertificateDelivers()",
      ], environment: environment)
    #expect(output.0 == 0, "\(output.1)")
    let ran = output.1.split(separator: "\n").contains { $0.contains("with private webhooks allowed") && $0.contains(" passed after") }
    #expect(ran, "\(output.1)")
  }
}
