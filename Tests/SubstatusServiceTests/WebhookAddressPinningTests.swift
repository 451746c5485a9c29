import Foundation
import HTTPServer
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Synchronization
import Testing

@testable import SubstatusService

/// DNS rebinding: an `http://` delivery connects to the address the policy checked, never to what a
/// second lookup would answer.
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

  private static func dispatcher(_ url: String, resolver: FixedResolver, allowPrivate: Bool) async throws
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
}
