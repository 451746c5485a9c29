import AppStoreSignedData
import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubstatusWire
import Synchronization
import Testing

@testable import SubstatusService

/// Rule 27 at the service: the consumption policy on the wire, and the responder that answers the
/// durable refund requests on the injected clock (due, retried with backoff, given up after 12
/// hours, resumed from the row by a new responder over the reopened store).
@Suite("Refund requests: the consumption responder")
struct ConsumptionResponderTests {
  /// The master keyring that seals the In-App Purchase key in the SQLite store.
  static let keyring = MasterKeyring(current: try! MasterKey(bytes: [UInt8](repeating: 0x27, count: 32)))

  static let policyJSON =
    #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"CONSUMPTION_DELIVERY_STATUS_DELIVERED","refundPreference":"REFUND_PREFERENCE_DECLINE"}"#

  /// Sets the app's consumption policy through SetPolicy.
  static func setPolicy(_ h: Harness, admin: String, app: String, json: String?) async throws -> Substatus_V1_App {
    var request = Substatus_V1_SetPolicyRequest()
    request.appID = app
    var policy = Substatus_V1_EligibilityPolicy()
    if let json { policy.consumptionPolicy = try Substatus_V1_ConsumptionPolicy(jsonString: json) }
    request.policy = policy
    request.updateMask = ["consumption_policy"]
    return try await h.call(Substatus_V1_AdminService.setPolicy, request, key: admin).app ?? Substatus_V1_App()
  }

  @Test("SetPolicy stores the consumption policy, validates it naming the field, and clears it")
  func policyOnTheWire() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let set = try await Self.setPolicy(h, admin: admin, app: app, json: Self.policyJSON)
      #expect(set.policy?.consumptionPolicy?.deliveryStatus == .delivered)
      #expect(set.policy?.consumptionPolicy?.refundPreference == .decline)
      #expect(try await h.service.store.app(id: app).policy.consumptionPolicy?.customerConsented == true)
      let error = await expectStatus(.invalidArgument) {
        _ = try await Self.setPolicy(h, admin: admin, app: app, json: #"{"customerConsented":true}"#)
      }
      #expect(error?.message.contains("policy.consumption_policy.delivery_status") == true)
      let cleared = try await Self.setPolicy(h, admin: admin, app: app, json: nil)
      #expect(cleared.policy?.consumptionPolicy == nil)
      #expect(try await h.service.store.app(id: app).policy.consumptionPolicy == nil)
    }
  }

  /// Answers every Server API request with the current status, recording each request's body.
  final class Apple: HTTPRequester {
    let status = Mutex(503)
    let requests = Mutex<[(method: String, path: String, body: String)]>([])

    func send(method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration)
      async throws -> (status: Int, body: [UInt8])
    {
      requests.withLock { $0.append((method, url.path, String(decoding: body ?? [], as: UTF8.self))) }
      return (status.withLock { $0 }, [])
    }

    var count: Int { requests.withLock { $0.count } }
  }

  /// A service over the SQLite store in `directory`, with `apple` as the Server API.
  static func withResponder(
    directory: URL, world: TestWorld, apple: Apple,
    _ body: (SubstatusService, ConsumptionResponder) async throws -> Void
  ) async throws {
    let store = try SQLiteStore(configuration: .dataDirectory(directory.path, keyring: Self.keyring))
    defer { store.close() }
    let service = SubstatusService(
      store: store, environment: world.environment, log: world.log,
      appStoreServerAPI: AppStoreServerAPIClient(
        productionURL: URL(string: "http://apple.invalid")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
        maxAttempts: 1, requester: apple, clock: world.clock))
    let responder = ConsumptionResponder(
      service: service, configuration: .init(initialBackoffMs: 60_000, maxBackoffMs: 3_600_000))
    try await body(service, responder)
  }

  @Test("a due request is sent; a failure is retried with backoff on the injected clock; a new responder over the reopened store resumes it; after 12 hours it gives up")
  func dueRetryRestartGiveUp() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("consumption-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let world = TestWorld()
    let apple = Apple()
    let start = world.clock.wallMs
    var app = ""
    // Set up the app (policy, key, catalog) and a subscriber through a service over the store.
    let store = try SQLiteStore(configuration: .dataDirectory(directory.path, keyring: Self.keyring))
    try await withService(store: store, world: world) { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      app = appID
      _ = try await Self.setPolicy(h, admin: admin, app: app, json: Self.policyJSON)
      let key = ES256PrivateKey.generate()
      try await h.service.store.setInAppPurchaseKey(
        appId: app,
        key: InAppPurchaseKey(
          keyId: "ABCDEFGHIJ", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyPEM: key.pkcs8PEM,
          publicKeyPEM: key.publicKey.pem, publicKeyFingerprint: "sha256:test", setMs: start))
      let user = UserKey(appId: app, environment: .production, userId: "u1")
      _ = try await h.service.store.ingest(
        [
          UserPurchases(
            user: user,
            transactions: [
              Transaction(
                transactionId: "t1", productId: "premium.monthly", subscriptionGroupIdentifier: "20001001",
                purchaseDate: start - 10 * 86_400_000, expiresDate: start + 20 * 86_400_000),
              Transaction(transactionId: "c1", productId: "coins.100", purchaseDate: start - 86_400_000),
            ])
        ], atMs: start)
      for (id, transaction) in [("v2:n-1", "t1"), ("v2:n-2", "c1")] {
        #expect(
          try await h.service.store.recordConsumptionRequest(
            ConsumptionRequest(
              appId: app, notificationId: id, environment: .production, transactionId: transaction,
              originalTransactionId: transaction, requestedMs: start, receivedMs: start, reason: "UNINTENDED_PURCHASE")))
      }
    }
    store.close()

    try await Self.withResponder(directory: directory, world: world, apple: apple) { service, responder in
      // Due at once: both sent, Apple answers 503: rescheduled a minute later (then two, four).
      #expect(await responder.respondDue() == start + 60_000)
      #expect(apple.count == 2)
      let first = try #require(try await service.store.consumptionRequest(appId: app, notificationId: "v2:n-1"))
      #expect(first.attempts == 1 && first.nextAttemptMs == start + 60_000 && first.outcome == nil)
      #expect(first.detail?.contains("503") == true)
      // Not due yet: nothing is sent.
      world.now.withLock { $0 += 59_999 }
      _ = await responder.respondDue()
      #expect(apple.count == 2)
      world.now.withLock { $0 += 1 }
      #expect(await responder.respondDue() == start + 60_000 + 120_000)
      #expect(apple.count == 4)
      #expect(service.consumptionMetrics.count(of: "retried") == 4)
    }

    // A restart: a new service and responder over the reopened store resume from the rows.
    try await Self.withResponder(directory: directory, world: world, apple: apple) { service, responder in
      apple.status.withLock { $0 = 202 }
      world.now.withLock { $0 = start + 180_000 }
      #expect(await responder.respondDue() == nil)
      #expect(apple.count == 6)
      let sent = apple.requests.withLock { Array($0.suffix(2)) }.sorted { $0.path < $1.path }
      #expect(sent.map(\.method) == ["PUT", "PUT"])
      #expect(sent.map(\.path) == ["/inApps/v2/transactions/consumption/c1", "/inApps/v2/transactions/consumption/t1"])
      // The consumable: no share known, so no percentage; the subscription: Apple computes it.
      #expect(
        sent.map(\.body) == [
          #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"DECLINE"}"#,
          #"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"DECLINE"}"#,
        ])
      let request = try #require(try await service.store.consumptionRequest(appId: app, notificationId: "v2:n-1"))
      #expect(request.outcome == .sent && request.attempts == 3)
      let events = try await service.store.events(
        appId: app, query: EventQuery(userId: "u1", types: [.consumptionInfoSent]), afterSequence: 0, limit: 10)
      #expect(events.count == 2)
      #expect(events.allSatisfy { $0.event.refundRequestReason == "UNINTENDED_PURCHASE" && $0.event.consumptionBody != nil })
      #expect(Set(events.compactMap(\.event.transactionId)) == ["t1", "c1"])
      #expect(service.metrics.prometheusText().contains("substatus_consumption_requests_total{outcome=\"sent\"} 2"))
    }

    // Apple never accepts a third request: the responder retries until 12 hours have passed, then
    // gives up with the last failure, never sending after the deadline.
    try await Self.withResponder(directory: directory, world: world, apple: apple) { service, responder in
      apple.status.withLock { $0 = 500 }
      let requested = world.clock.wallMs
      #expect(
        try await service.store.recordConsumptionRequest(
          ConsumptionRequest(
            appId: app, notificationId: "v2:n-3", environment: .production, transactionId: "t1",
            originalTransactionId: "t1", requestedMs: requested, receivedMs: requested)))
      let before = apple.count
      var passes = 0
      while let next = await responder.respondDue(), passes < 100 {
        passes += 1
        world.now.withLock { $0 = max($0, next) }
      }
      let request = try #require(try await service.store.consumptionRequest(appId: app, notificationId: "v2:n-3"))
      #expect(request.outcome == .failed)
      #expect(request.detail?.hasPrefix("expired") == true)
      #expect(world.clock.wallMs == requested + 12 * 3_600_000)
      // 1, 2, 4, ..., 32 minutes, then hourly: 7 + 11 attempts before the deadline.
      #expect(apple.count - before == request.attempts && request.attempts == 17)
      let failed = try await service.store.events(
        appId: app, query: EventQuery(types: [.consumptionInfoFailed]), afterSequence: 0, limit: 10)
      #expect(failed.map { $0.event.consumptionDetail?.hasPrefix("expired") == true } == [true])
    }
  }
}
