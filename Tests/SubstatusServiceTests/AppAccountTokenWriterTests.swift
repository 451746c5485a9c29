import AppStoreSignedData
import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusWire
import Synchronization
import Testing

@testable import SubstatusService

/// Rule 26's write-back at the service: the durable Set App Account Token writes that transfers
/// leave in the store, sent by the ``AppAccountTokenWriter`` on the injected clock (due at the
/// transfer, retried with backoff, not before a `429`'s `Retry-After`, replaced by a later
/// transfer so Apple gets the last owner's token, given up after the bound with the reason, ids
/// that are not UUIDs never sent).
@Suite("Rule 26: the app account token writer")
struct AppAccountTokenWriterTests {
  /// Answers every Server API request with the current status (and `Retry-After` when set),
  /// recording each request's path and body.
  final class Apple: HTTPRequester {
    let status = Mutex(200)
    let retryAfterMs = Mutex<Int64?>(nil)
    let requests = Mutex<[(path: String, body: String)]>([])

    func send(method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration)
      async throws -> (status: Int, body: [UInt8])
    {
      let (status, body, _) = try await send(
        method: method, url: url, headers: headers, body: body, timeout: timeout, responseHeaders: [])
      return (status, body)
    }

    func send(
      method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration,
      responseHeaders: [String]
    ) async throws -> (status: Int, body: [UInt8], headers: [String: String]) {
      requests.withLock { $0.append((url.path, String(decoding: body ?? [], as: UTF8.self))) }
      let status = status.withLock { $0 }
      let headers = retryAfterMs.withLock { $0 }.map { ["Retry-After": String($0)] } ?? [:]
      return (status, [], status == 429 ? headers : [:])
    }

    var count: Int { requests.withLock { $0.count } }
    /// The tokens sent, in order.
    var tokens: [String] {
      requests.withLock { $0.map(\.body) }.compactMap { body in
        guard let range = body.range(of: #""appAccountToken":""#) else { return nil }
        return String(body[range.upperBound...].prefix { $0 != "\"" })
      }
    }
  }

  static let u1 = "0f4d2b8e-6c1a-4c55-9d7e-2a1b3c4d5e61"
  static let u2 = "7B6A5C4D-3E2F-4A1B-8C9D-0E1F2A3B4C5D"
  static let u3 = "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d"

  /// The count of one outcome in `/metrics`.
  static func count(_ service: SubstatusService, _ outcome: String) -> Int {
    let prefix = #"substatus_app_account_token_writes_total{outcome=""# + outcome + #""} "#
    for line in service.metrics.prometheusText().split(separator: "\n") where line.hasPrefix(prefix) {
      return Int(line.dropFirst(prefix.count)) ?? -1
    }
    return 0
  }

  @Test("due at the transfer; retried with backoff; not before Retry-After; a later transfer replaces the unsent write; given up after the bound; a non-UUID owner is never sent")
  func dueRetryRateLimitSupersedeGiveUp() async throws {
    let world = TestWorld()
    let apple = Apple()
    let store = InMemoryStore()
    let start = world.clock.wallMs
    var app = ""
    try await withService(store: store, world: world) { h in
      let (_, appID) = try await h.makeTenantWithApp()
      app = appID
      _ = try await store.setPolicy(appId: app, policy: EligibilityPolicy(purchaseSharing: .transfer))
      let key = ES256PrivateKey.generate()
      try await store.setInAppPurchaseKey(
        appId: app,
        key: InAppPurchaseKey(
          keyId: "ABCDEFGHIJ", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyPEM: key.pkcs8PEM,
          publicKeyPEM: key.publicKey.pem, publicKeyFingerprint: "sha256:test", setMs: start))
    }
    let service = SubstatusService(
      store: store, environment: world.environment, log: world.log,
      appStoreServerAPI: AppStoreServerAPIClient(
        productionURL: URL(string: "http://apple.invalid")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
        maxAttempts: 1, requester: apple, clock: world.clock))
    let writer = AppAccountTokenWriter(
      service: service, configuration: .init(initialBackoffMs: 30_000, maxBackoffMs: 3_600_000, maxAttempts: 4))
    func advance(_ ms: Int64) { world.now.withLock { $0 += ms } }
    func now() -> Int64 { world.clock.wallMs }
    /// A restore of the purchase by `user` now: TRANSFER moves it to them.
    func restore(_ user: String) async throws {
      let transaction = Transaction(
        transactionId: "otx-1", productId: "premium.monthly", subscriptionGroupIdentifier: "20001001",
        purchaseDate: start - 86_400_000, expiresDate: start + 30 * 86_400_000)
      _ = try await store.ingest(
        [UserPurchases(user: UserKey(appId: app, environment: .production, userId: user), transactions: [transaction], submittedMs: now())],
        atMs: now())
    }
    func row() async throws -> AppAccountTokenWrite? {
      try await store.appAccountTokenWrite(appId: app, environment: .production, originalTransactionId: "otx-1")
    }

    // u1 buys, u2 restores: one write owed, due now; nothing is sent before the writer's pass.
    try await restore(Self.u1)
    #expect(try await row() == nil)
    try await restore(Self.u2)
    #expect(try await row()?.userId == Self.u2)
    #expect(apple.count == 0)

    // Apple answers 503: retried 30 s later, then 60 s later; not before.
    apple.status.withLock { $0 = 503 }
    #expect(await writer.writeDue() == start + 30_000)
    #expect(apple.count == 1)
    #expect(apple.requests.withLock { $0[0].path } == "/inApps/v1/transactions/otx-1/appAccountToken")
    let failed = try #require(try await row())
    #expect(failed.attempts == 1 && failed.nextAttemptMs == start + 30_000 && failed.detail?.contains("503") == true)
    advance(29_999)
    _ = await writer.writeDue()
    #expect(apple.count == 1)
    advance(1)
    #expect(await writer.writeDue() == now() + 60_000)
    #expect(apple.count == 2)
    #expect(Self.count(service, "retried") == 2)

    // A 429 whose Retry-After is 10 minutes away: the next attempt waits for it, not for the
    // 2-minute backoff.
    advance(60_000)
    apple.status.withLock { $0 = 429 }
    let retryAt = now() + 600_000
    apple.retryAfterMs.withLock { $0 = retryAt }
    #expect(await writer.writeDue() == retryAt)
    #expect(apple.count == 3)
    #expect(try await row()?.nextAttemptMs == retryAt)

    // u3 restores before it is sent: the row is u3's (attempts reset) and still waits for the
    // Retry-After; then Apple accepts, and the one token sent is u3's.
    advance(1_000)
    try await restore(Self.u3)
    let replaced = try #require(try await row())
    #expect(replaced.userId == Self.u3 && replaced.attempts == 0 && replaced.nextAttemptMs == retryAt)
    _ = await writer.writeDue()
    #expect(apple.count == 3)
    apple.status.withLock { $0 = 200 }
    advance(retryAt - now())
    #expect(await writer.writeDue() == nil)
    #expect(apple.tokens == [Self.u2.lowercased(), Self.u2.lowercased(), Self.u2.lowercased(), Self.u3])
    #expect(try await row() == nil)
    #expect(Self.count(service, "ok") == 1)

    // u2 (upper-case UUID: sent in lower case) takes it back; Apple keeps failing: after 4
    // attempts it is given up, the reason kept.
    apple.status.withLock { $0 = 500 }
    try await restore(Self.u2)
    var passes = 0
    while let next = await writer.writeDue(), passes < 10 {
      passes += 1
      advance(max(0, next - now()))
    }
    #expect(apple.count == 3 + 1 + 4)
    let givenUp = try #require(try await row())
    #expect(givenUp.isGivenUp && givenUp.attempts == 4 && givenUp.detail?.hasPrefix("gave up after 4 attempts") == true)
    #expect(apple.tokens.last == Self.u2.lowercased())
    #expect(Self.count(service, "failed") == 1)

    // A refusal (HTTP 400) is given up at once.
    apple.status.withLock { $0 = 400 }
    try await restore(Self.u1)
    _ = await writer.writeDue()
    #expect(apple.count == 9)
    #expect(try await row()?.detail?.hasPrefix("rejected") == true)
    #expect(Self.count(service, "failed") == 2)

    // An owner whose id is not a UUID: nothing is sent, the row is gone.
    apple.status.withLock { $0 = 200 }
    try await restore("tablet-user")
    _ = await writer.writeDue()
    #expect(apple.count == 9)
    #expect(try await row() == nil)
    #expect(Self.count(service, "not_uuid") == 1)
  }

  @Test("an app without an In-App Purchase key: the write is dropped, counted no_key, nothing sent")
  func noKey() async throws {
    let world = TestWorld()
    let apple = Apple()
    let store = InMemoryStore()
    var app = ""
    try await withService(store: store, world: world) { h in
      let (_, appID) = try await h.makeTenantWithApp()
      app = appID
      _ = try await store.setPolicy(appId: app, policy: EligibilityPolicy(purchaseSharing: .transfer))
    }
    let service = SubstatusService(
      store: store, environment: world.environment, log: world.log,
      appStoreServerAPI: AppStoreServerAPIClient(
        productionURL: URL(string: "http://apple.invalid")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
        maxAttempts: 1, requester: apple, clock: world.clock))
    let writer = AppAccountTokenWriter(service: service)
    let now = world.clock.wallMs
    for user in [Self.u1, Self.u2] {
      _ = try await store.ingest(
        [
          UserPurchases(
            user: UserKey(appId: app, environment: .production, userId: user),
            transactions: [Transaction(transactionId: "otx-1", productId: "coins", purchaseDate: now - 1_000)],
            submittedMs: now)
        ], atMs: now)
    }
    #expect(try await store.nextAppAccountTokenWriteDueMs() == now)
    #expect(await writer.writeDue() == nil)
    #expect(apple.count == 0)
    #expect(Self.count(service, "no_key") == 1)
  }
}
