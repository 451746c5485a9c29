import AppStoreSignedData
import AppStoreSimulator
import Foundation
import HTTPServer
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusClock
import SubstatusJSON
import Synchronization
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

@testable import SubstatusService

/// A clock that reads the simulator's time and whose sleeps move the simulator's clock (through
/// its control API): the client waits on the simulated time its `Retry-After` is dated in.
final class SimulatorDrivenClock: ServiceClock {
  let simulator: AppStoreSimulator
  let base: String
  let sleeps = Mutex<[Int64]>([])

  init(simulator: AppStoreSimulator, base: String) {
    self.simulator = simulator
    self.base = base
  }

  var monotonicNow: Duration { .milliseconds(simulator.nowMs) }
  var wallMs: Int64 { simulator.nowMs }

  func sleep(for duration: Duration) async throws {
    let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    sleeps.withLock { $0.append(ms) }
    guard ms > 0 else { return }
    var request = URLRequest(url: URL(string: "http://\(base)/control/clock/advance")!)
    request.httpMethod = "POST"
    request.httpBody = Data(#"{"ms":\#(ms)}"#.utf8)
    _ = try await URLSession.shared.data(for: request)
  }
}

/// An In-App Purchase key's tokens, for the simulator's Server API.
struct SigningAuthorizer: AppStoreServerAPIAuthorizer {
  let key: ES256PrivateKey
  let bundle: String
  var rateLimitKey: String { bundle }
  func bearerToken(nowMs: Int64) throws(AppStoreServerAPIError) -> String {
    let now = Int64(Date().timeIntervalSince1970)
    let header: JSONValue = .object(["alg": .string("ES256"), "kid": .string("ABCDEFGHIJ"), "typ": .string("JWT")])
    let claims: JSONValue = .object([
      "iss": .string("57246542-96fe-1a63-e053-0824d011072a"), "exp": .integer(now + 600),
      "aud": .string("appstoreconnect-v1"), "bid": .string(bundle),
    ])
    do { return try JWS.sign(header: header, claims: claims, key: key) } catch {
      throw AppStoreServerAPIError(code: .keyRefused, message: "\(error)")
    }
  }
}

/// Apple's rate limits in the App Store Server API client: a token bucket per app and
/// environment (50/s production, 5/s sandbox), a `429`'s `Retry-After` (UNIX ms) honoured with no
/// request before it, and every outcome counted for `/metrics`.
@Suite("App Store Server API client: rate limits")
struct ServerAPIRateLimitTests {
  @Test("the simulator's 429 over real HTTP: one retry, at Retry-After, not before")
  func honoursRetryAfter() async throws {
    let startMs: Int64 = 1_767_225_600_000
    let simulator = AppStoreSimulator(configuration: .init(startMs: startMs))
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: simulator.router())
    defer { simulator.shutdown() }
    let base = server.address
    func control(_ method: String, _ path: String, _ body: String) async throws -> JSONValue {
      var request = URLRequest(url: URL(string: "http://\(base)\(path)")!)
      request.httpMethod = method
      request.httpBody = Data(body.utf8)
      let (data, response) = try await URLSession.shared.data(for: request)
      let status = (response as? HTTPURLResponse)?.statusCode ?? 0
      try #require((200..<300).contains(status), "\(method) \(path): \(String(decoding: data, as: UTF8.self))")
      return try JSONValue(parsing: Array(data))
    }
    // Apple's side allows one request per 100 s for this app.
    _ = try await control(
      "POST", "/control/apps",
      #"{"bundle_id":"com.example.rl","shared_secret":"s","server_api_rate_limit":0.01,"products":[{"product_id":"coins","type":"consumable"}]}"#
    )
    let key = ES256PrivateKey.generate()
    _ = try await control(
      "POST", "/control/apps/com.example.rl/api-keys",
      JSONValue.object([
        "issuer_id": .string("57246542-96fe-1a63-e053-0824d011072a"), "key_id": .string("ABCDEFGHIJ"),
        "public_key_pem": .string(key.publicKey.pem),
      ]).serialized())
    _ = try await control("POST", "/control/users", #"{"user_id":"u","environment":"production"}"#)
    let bought = try await control("POST", "/control/apps/com.example.rl/users/u/purchase", #"{"product_id":"coins"}"#)
    let id = try #require(bought["transactions"]?.arrayValue?.first?["transaction_id"]?.stringValue)

    let clock = SimulatorDrivenClock(simulator: simulator, base: base)
    let url = URL(string: "http://\(base)")!
    let client = AppStoreServerAPIClient(
      productionURL: url, sandboxURL: url.appendingPathComponent("sandbox"), timeout: .seconds(10),
      maxAttempts: 3, initialBackoff: .milliseconds(5), clock: clock,
      rateLimiter: AppStoreServerAPIRateLimiter(maxWait: .seconds(200)))
    let authorizer = SigningAuthorizer(key: key, bundle: "com.example.rl")
    _ = try await client.transactionInfo(transactionId: id, environment: .production, authorizer: authorizer, nowMs: startMs)
    // The second call meets the 429; it waits for Retry-After (100 s of simulated time), then succeeds.
    let signed = try await client.transactionInfo(
      transactionId: id, environment: .production, authorizer: authorizer, nowMs: startMs)
    #expect(!signed.isEmpty)
    let stats = try await control("GET", "/control/server-api/rate-limit", "")
    #expect(stats["production"]?["limited"] == .integer(1), "no request before Retry-After")
    #expect(stats["production"]?["admitted"] == .integer(2))
    let waited = clock.sleeps.withLock { $0 }
    #expect(waited.reduce(0, +) >= 99_000 && waited.reduce(0, +) <= 100_000)
    #expect(client.rateLimiter.count(of: .rateLimited) == 1)
    #expect(client.rateLimiter.count(of: .ok) == 2)
    #expect(client.rateLimiter.count(of: .waited) == 1)
    let text = client.rateLimiter.prometheusText()
    #expect(text.contains(#"substatus_appstore_server_api_requests_total{outcome="rate_limited"} 1"#))
    #expect(text.contains(#"substatus_appstore_server_api_requests_total{outcome="ok"} 2"#))
    await server.stop(gracePeriod: .seconds(1))
  }

  @Test("GET /metrics of the service shows the client's outcomes")
  func metricsEndpoint() async throws {
    let client = AppStoreServerAPIClient()
    client.rateLimiter.count(.rateLimited)
    client.rateLimiter.count(.ok)
    client.rateLimiter.count(.ok)
    let world = TestWorld()
    let service = SubstatusService(
      store: InMemoryStore(), environment: world.environment, log: world.log, appStoreServerAPI: client)
    let response = await service.httpRouter().respond(to: HTTPRequest(method: "GET", path: "/metrics"))
    let text = String(decoding: response.body, as: UTF8.self)
    #expect(response.status == 200)
    #expect(text.contains(#"substatus_appstore_server_api_requests_total{outcome="rate_limited"} 1"#))
    #expect(text.contains(#"substatus_appstore_server_api_requests_total{outcome="ok"} 2"#))
    #expect(text.contains(#"substatus_appstore_server_api_requests_total{outcome="refused_locally"} 0"#))
  }

  @Test("a Retry-After blocks its app and environment only, and only until then")
  func retryAfterIsPerAppAndEnvironment() async throws {
    let limiter = AppStoreServerAPIRateLimiter(maxWait: .seconds(10))
    limiter.block(key: "app", environment: .production, untilMs: 1_060_000)
    limiter.block(key: "app", environment: .production, untilMs: 1_050_000)
    #expect(limiter.blockedUntil(key: "app", environment: .production) == 1_060_000)
    #expect(limiter.blockedUntil(key: "app", environment: .sandbox) == 0)
    #expect(limiter.blockedUntil(key: "other", environment: .production) == 0)
  }

  @Test("a Retry-After further away than maxWait fails at once, unsent")
  func tooLongAWaitIsRefused() async throws {
    let fake = try FakeAppleServer { _, _ in appleError(429, 4_290_000) }
    let clock = ManualClock(wallMs: 1_000_000)
    let client = AppStoreServerAPIClient(
      productionURL: fake.base, sandboxURL: fake.base.appendingPathComponent("sandbox"), timeout: .seconds(5),
      maxAttempts: 3, initialBackoff: .milliseconds(5), clock: clock,
      rateLimiter: AppStoreServerAPIRateLimiter(maxWait: .seconds(10)), rateClock: clock)
    // A Retry-After a minute away (as a 429 sets it) is refused without sending.
    client.rateLimiter.block(key: "", environment: .production, untilMs: 1_060_000)
    await #expect(throws: AppStoreServerAPIError.self) {
      _ = try await client.transactionInfo(
        transactionId: "1", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    }
    #expect(fake.seen.isEmpty)
    #expect(client.rateLimiter.count(of: .refusedLocally) == 1)
    await fake.stop()
  }

  @Test(
    "the bucket: 50 at once in production and 5 in the sandbox, then one per 1/rate s, per app",
    arguments: [(SubscriptionDomain.Environment.production, 50, 20), (.sandbox, 5, 200)])
  func bucket(environment: SubscriptionDomain.Environment, burst: Int, spacingMs: Int64) {
    let limiter = AppStoreServerAPIRateLimiter()
    let now: Int64 = 1_000_000
    for _ in 0..<burst { #expect(limiter.reserve(key: "a", environment: environment, nowMs: now) == now) }
    // The next ones queue: each one interval after the previous.
    #expect(limiter.reserve(key: "a", environment: environment, nowMs: now) == now + spacingMs)
    #expect(limiter.reserve(key: "a", environment: environment, nowMs: now) == now + 2 * spacingMs)
    // Another app has its own bucket.
    #expect(limiter.reserve(key: "b", environment: environment, nowMs: now) == now)
  }

  @Test("a request waits for its token on the client's clock: the 6th sandbox call goes 200 ms later")
  func waitsForItsToken() async throws {
    let seen = Mutex(0)
    let fake = try FakeAppleServer { _, _ in
      seen.withLock { $0 += 1 }
      return json(.object(["signedTransactionInfo": .string("x.y.z")]))
    }
    let clock = ManualClock(wallMs: 1_000_000)
    let client = AppStoreServerAPIClient(
      productionURL: fake.base, sandboxURL: fake.base.appendingPathComponent("sandbox"), timeout: .seconds(5),
      maxAttempts: 1, initialBackoff: .milliseconds(5), clock: clock, rateClock: clock)
    for _ in 0..<5 {
      _ = try await client.transactionInfo(
        transactionId: "1", environment: .sandbox, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    }
    let sixth = Task {
      try await client.transactionInfo(transactionId: "1", environment: .sandbox, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    }
    #expect(await clock.waitForSleepers(1, timeout: .seconds(10)))
    #expect(seen.withLock { $0 } == 5)
    clock.advance(by: .milliseconds(200))
    _ = try await sixth.value
    #expect(seen.withLock { $0 } == 6)
    #expect(client.rateLimiter.count(of: .waited) == 1)
    await fake.stop()
  }
}
