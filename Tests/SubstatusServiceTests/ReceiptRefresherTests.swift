import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusClock
import SubstatusWire
import Synchronization
import Testing

@testable import SubstatusService

private let hour: Int64 = 3_600_000
private let day: Int64 = 24 * hour

// MARK: Due policy

@Suite("Receipt refresh policy")
struct ReceiptRefreshPolicyTests {
  struct Row: Sendable, CustomTestStringConvertible {
    var name: String
    var state: SubscriptionState
    var expires: Int64?
    var purchase: Int64?
    var grace: Int64? = nil
    var autoRenew = true
    var now: Int64 = 100 * day
    var due: Int64?
    var testDescription: String { name }
  }

  static let t: Int64 = 100 * day
  static let rows: [Row] = [
    Row(
      name: "active, a month left: look again a day before the expiry", state: .active,
      expires: t + 20 * day, purchase: t - 10 * day, due: t + 19 * day),
    Row(
      name: "active, expires within the day: just after the expiry", state: .active,
      expires: t + hour, purchase: t - 30 * day + hour, due: t + hour + 60_000),
    Row(
      name: "active, auto-renew off: still looked at (it may be turned back on)", state: .active,
      expires: t + hour, purchase: t - 30 * day, autoRenew: false, due: t + hour + 60_000),
    Row(
      name: "active, period unknown: the full window and delay", state: .active,
      expires: t + 2 * day, purchase: nil, due: t + day),
    Row(
      name: "sandbox 5-minute month, 4 minutes left: half the period before expiry", state: .active,
      expires: t + 240_000, purchase: t - 60_000, due: t + 90_000),
    Row(
      name: "sandbox 5-minute month, 2 minutes left: 5 s after expiry", state: .active,
      expires: t + 120_000, purchase: t - 180_000, due: t + 125_000),
    Row(
      name: "sandbox 3-minute trial, 4 s left: 3 s after expiry", state: .active,
      expires: t + 4_000, purchase: t - 176_000, due: t + 7_000),
    Row(
      name: "active without an end (free subscription): never", state: .active, expires: nil,
      purchase: t - day, due: nil),
    Row(
      name: "grace for 10 more days: every 6 hours", state: .gracePeriod, expires: t - day,
      purchase: t - 31 * day, grace: t + 10 * day, due: t + 6 * hour),
    Row(
      name: "grace ending in an hour: just after it ends", state: .gracePeriod,
      expires: t - 15 * day, purchase: t - 45 * day, grace: t + hour, due: t + hour + 60_000),
    Row(
      name: "billing retry: every 6 hours", state: .billingRetry, expires: t - 20 * day,
      purchase: t - 50 * day, due: t + 6 * hour),
    Row(
      name: "expired a moment ago, auto-renew on: first check after the delay", state: .expired,
      expires: t - 1_000, purchase: t - 30 * day, due: t - 1_000 + 60_000),
    Row(
      name: "expired, first check done: second and last a day after expiry", state: .expired,
      expires: t - 2 * 60_000, purchase: t - 30 * day, due: t - 2 * 60_000 + day),
    Row(
      name: "expired two days ago, auto-renew on: no more checks", state: .expired,
      expires: t - 2 * day, purchase: t - 32 * day, due: nil),
    Row(
      name: "sandbox month expired 10 s ago: second check one period after expiry", state: .expired,
      expires: t - 10_000, purchase: t - 310_000, due: t - 10_000 + 300_000),
    Row(
      name: "expired, auto-renew off: never", state: .expired, expires: t - 1_000,
      purchase: t - 30 * day, autoRenew: false, due: nil),
    Row(
      name: "revoked: never", state: .revoked, expires: t + 10 * day, purchase: t - 20 * day,
      due: nil),
    Row(
      name: "never subscribed: never", state: .neverSubscribed, expires: nil, purchase: nil,
      due: nil),
  ]

  @Test("one group", arguments: rows)
  func oneGroup(row: Row) {
    let group = GroupStatus(
      subscriptionGroupId: "g", state: row.state, transactionId: "t1", expiresDate: row.expires,
      gracePeriodExpiresDate: row.grace, autoRenewEnabled: row.autoRenew)
    let starts = row.purchase.map { ["t1": $0] } ?? [:]
    #expect(
      ReceiptRefreshPolicy().nextDue(groups: [group], periodStarts: starts, now: row.now) == row.due
    )
  }

  @Test("several groups: the earliest; never sooner than the minimum gap")
  func severalGroups() {
    let t = Self.t
    let policy = ReceiptRefreshPolicy()
    let far = GroupStatus(
      subscriptionGroupId: "a", state: .active, transactionId: "1", expiresDate: t + 20 * day,
      autoRenewEnabled: true)
    let retry = GroupStatus(
      subscriptionGroupId: "b", state: .billingRetry, transactionId: "2", expiresDate: t - day)
    let never = GroupStatus(subscriptionGroupId: "c", state: .neverSubscribed)
    #expect(
      policy.nextDue(groups: [far, retry, never], periodStarts: ["1": t - 10 * day], now: t) == t
        + 6 * hour)
    #expect(policy.nextDue(groups: [never], periodStarts: [:], now: t) == nil)
    #expect(policy.nextDue(groups: [], periodStarts: [:], now: t) == nil)
    // A 10 ms sandbox period would ask for "now"; the gap keeps it a second away.
    let tiny = GroupStatus(
      subscriptionGroupId: "a", state: .active, transactionId: "1", expiresDate: t + 1,
      autoRenewEnabled: true)
    #expect(policy.nextDue(groups: [tiny], periodStarts: ["1": t - 9], now: t) == t + 1_000)
  }
}

// MARK: A verifyReceipt stand-in

/// Answers verifyReceipt from a script, records every call and measures how many are in flight,
/// overall and per tenant (the receipt data starts with `TENANT/`).
final class FakeAppStore: HTTPPoster {
  struct Call: Sendable {
    var receipt: String
    var password: String?
  }

  struct State {
    var calls: [Call] = []
    var inFlight = 0
    var maxInFlight = 0
    var inFlightByTenant: [String: Int] = [:]
    var maxInFlightByTenant: [String: Int] = [:]
  }

  let state = Mutex(State())
  let delay: Duration
  let clock: any ServiceClock
  let answer: Mutex<@Sendable (Call) -> (Int, String)>

  /// A fake whose every answer takes `delay` of `clock`'s time.
  init(
    delay: Duration = .zero, clock: any ServiceClock = SystemClock(),
    answer: @escaping @Sendable (Call) -> (Int, String)
  ) {
    self.delay = delay
    self.clock = clock
    self.answer = Mutex(answer)
  }

  func setAnswer(_ answer: @escaping @Sendable (Call) -> (Int, String)) {
    self.answer.withLock { $0 = answer }
  }

  var calls: [Call] { state.withLock { $0.calls } }

  func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
  {
    let json = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
    let call = Call(
      receipt: json?["receipt-data"] as? String ?? "", password: json?["password"] as? String)
    let tenant = String(call.receipt.split(separator: "/").first ?? "")
    state.withLock {
      $0.calls.append(call)
      $0.inFlight += 1
      $0.maxInFlight = max($0.maxInFlight, $0.inFlight)
      $0.inFlightByTenant[tenant, default: 0] += 1
      $0.maxInFlightByTenant[tenant] = max(
        $0.maxInFlightByTenant[tenant] ?? 0, $0.inFlightByTenant[tenant] ?? 0)
    }
    defer {
      state.withLock {
        $0.inFlight -= 1
        $0.inFlightByTenant[tenant, default: 1] -= 1
      }
    }
    if delay > .zero { try await clock.sleep(for: delay) }
    let (status, text) = answer.withLock { $0 }(call)
    return HTTPPostResponse(status: status, body: Array(text.utf8))
  }

  /// A verifyReceipt body: one monthly subscription of group 20001001 with the given periods
  /// (purchase, expires) and its renewal info; `latest_receipt` is `latest`.
  static func body(
    periods: [(Int64, Int64)], latest: String, autoRenew: Bool = true, retry: Bool = false
  ) -> String {
    let infos = periods.enumerated().map { n, p in
      """
      {"product_id":"premium.monthly","transaction_id":"\(7000 + n)","original_transaction_id":"7000",
       "purchase_date_ms":"\(p.0)","original_purchase_date_ms":"\(periods[0].0)","expires_date_ms":"\(p.1)",
       "is_trial_period":"\(n == 0)","is_in_intro_offer_period":"false","in_app_ownership_type":"PURCHASED",
       "subscription_group_identifier":"20001001"}
      """
    }
    return """
      {"status":0,"environment":"Production","receipt":{"bundle_id":"com.example.app","in_app":[]},
       "latest_receipt_info":[\(infos.joined(separator: ","))],
       "pending_renewal_info":[{"original_transaction_id":"7000","product_id":"premium.monthly",
         "auto_renew_product_id":"premium.monthly","auto_renew_status":"\(autoRenew ? 1 : 0)",
         "is_in_billing_retry_period":"\(retry ? 1 : 0)"}],
       "latest_receipt":"\(latest)"}
      """
  }
}

// MARK: Refresher

/// Lets each call of a fake App Store through as it waits on `clock` (advancing the clock by
/// `delay` whenever one does), until cancelled.
func answerAsTheyWait(_ clock: ManualClock, after delay: Duration) -> Task<Void, Never> {
  Task {
    while !Task.isCancelled {
      if await clock.waitForSleepers(1) { clock.advance(by: delay) }
    }
  }
}

/// A service over an in-memory store with a fake App Store, a manual clock, and tenants with apps.
struct RefreshWorld {
  let world: TestWorld
  let store = InMemoryStore()
  let fake: FakeAppStore
  let service: SubstatusService

  init(fake: FakeAppStore, world: TestWorld = TestWorld()) {
    self.world = world
    self.fake = fake
    service = SubstatusService(
      store: store, environment: world.environment,
      verifyReceipt: VerifyReceiptClient(
        productionURL: URL(string: "http://apple.invalid/production")!,
        sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
        maxAttempts: 1, poster: fake),
      log: world.log)
  }

  var now: Int64 { world.now.withLock { $0 } }
  func advance(_ ms: Int64) { world.now.withLock { $0 += ms } }

  func refresher(_ configuration: ReceiptRefresher.Configuration = .init()) -> ReceiptRefresher {
    ReceiptRefresher(service: service, configuration: configuration)
  }

  /// Tenant `tenant` with app `app` (secret `secret-of-APP`, the monthly product in its catalog).
  func makeApp(_ app: String, tenant: String) async throws {
    if (try? await store.tenant(id: tenant)) == nil {
      try await store.createTenant(TenantRecord(tenantId: tenant, name: tenant, createdMs: 0))
    }
    try await store.createApp(
      AppRecord(appId: app, tenantId: tenant, bundleId: "com.example.\(app)", createdMs: 0))
    _ = try await store.setSharedSecret(
      appId: app, secret: "secret-of-\(app)", atMs: 0, previousValidUntilMs: 0)
    try await store.putProducts(
      appId: app,
      products: [
        Product(productId: "premium.monthly", type: .autoRenewable, subscriptionGroupId: "20001001")
      ])
  }

  /// A receipt due now; its data is `TENANT/APP/USER`.
  func saveDue(_ user: String, app: String, tenant: String, dueIn: Int64 = 0) async throws {
    try await store.saveReceipt(
      StoredReceipt(
        user: UserKey(appId: app, environment: .production, userId: user),
        receiptData: "\(tenant)/\(app)/\(user)",
        lastVerifiedMs: now - day, nextDueMs: now + dueIn))
  }

  func receipt(_ user: String, app: String) async throws -> StoredReceipt? {
    try await store.receipt(of: UserKey(appId: app, environment: .production, userId: user))
  }
}

@Suite("Receipt refresher")
struct ReceiptRefresherTests {
  @Test(
    "a due receipt is re-verified: the renewal is stored, the receipt replaced, the next due time set"
  )
  func refreshesDueReceipt() async throws {
    let t = TestWorld().now.withLock { $0 }
    let fake = FakeAppStore { call in
      #expect(call.password == "secret-of-app1")
      return (
        200,
        FakeAppStore.body(
          periods: [
            (t - 37 * day, t - 30 * day), (t - 30 * day, t - hour), (t - hour, t + 30 * day - hour),
          ], latest: "fresh-receipt")
      )
    }
    let w = RefreshWorld(fake: fake)
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    try await w.saveDue("later", app: "app1", tenant: "t1", dueIn: 1_000)
    let summary = try #require(await w.refresher().refreshDue())
    #expect(summary.due == 1)
    #expect(summary.outcomes == [.refreshed: 1])
    #expect(fake.calls.map(\.receipt) == ["t1/app1/u1"])
    let history = try await w.store.history(
      of: UserKey(appId: "app1", environment: .production, userId: "u1"))
    #expect(history.transactions.map(\.transactionId) == ["7000", "7001", "7002"])
    let stored = try #require(try await w.receipt("u1", app: "app1"))
    #expect(stored.receiptData == "fresh-receipt")
    #expect(stored.lastVerifiedMs == t)
    #expect(stored.failureCount == 0)
    #expect(stored.nextDueMs == t + 30 * day - hour - day)  // a day before the new expiry
    #expect(try await w.receipt("later", app: "app1")?.lastVerifiedMs == t - day)  // not due yet: untouched
    // Metrics by outcome, one log line per batch, never the receipt or the secret.
    #expect(
      w.service.metrics.prometheusText().contains(
        "substatus_receipt_refreshes_total{outcome=\"refreshed\"} 1"))
    let lines = w.world.lines.withLock { $0 }
    #expect(lines.filter { $0.contains("receipt refresh batch") }.count == 1)
    #expect(lines.contains { $0.contains("\"refreshed\":1") })
    for line in lines {
      #expect(
        !line.contains("t1/app1/u1") && !line.contains("fresh-receipt")
          && !line.contains("secret-of"))
    }
    // Nothing due: an empty batch, no call, no log line.
    #expect(try #require(await w.refresher().refreshDue()).due == 0)
    #expect(fake.calls.count == 1)
    #expect(
      w.world.lines.withLock { $0 }.filter { $0.contains("receipt refresh batch") }.count == 1)
  }

  @Test(
    "concurrency caps: at most N in flight overall and M per tenant",
    arguments: [(4, 2, 4, 2), (8, 1, 3, 1), (2, 5, 2, 2)])
  func caps(maxConcurrent: Int, perTenant: Int, expectedMax: Int, expectedPerTenant: Int)
    async throws
  {
    let world = TestWorld()
    let t = world.now.withLock { $0 }
    let fake = FakeAppStore(delay: .milliseconds(50), clock: world.clock) { call in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: call.receipt))
    }
    let w = RefreshWorld(fake: fake, world: world)
    for tenant in ["t1", "t2", "t3"] {
      try await w.makeApp("\(tenant)-app", tenant: tenant)
      for u in 0..<6 { try await w.saveDue("u\(u)", app: "\(tenant)-app", tenant: tenant) }
    }
    let refresher = w.refresher(.init(maxConcurrent: maxConcurrent, maxConcurrentPerTenant: perTenant))
    let batch = Task { await refresher.refreshDue() }
    // The first wave fills both caps; then each answer is let through as it waits.
    #expect(await world.clock.waitForSleepers(expectedMax))
    let driver = answerAsTheyWait(world.clock, after: .milliseconds(50))
    let summary = try #require(await batch.value)
    driver.cancel()
    #expect(summary.due == 18)
    #expect(summary.outcomes == [.refreshed: 18])
    let measured = fake.state.withLock { $0 }
    #expect(measured.calls.count == 18)
    #expect(measured.maxInFlight == expectedMax, "measured \(measured.maxInFlight) in flight")
    #expect(
      measured.maxInFlightByTenant.values.max() == expectedPerTenant,
      "\(measured.maxInFlightByTenant)")
    #expect(summary.maxInFlight == expectedMax)
  }

  @Test(
    "temporary failures back off exponentially per receipt (with jitter, capped); a success resets")
  func backoff() async throws {
    let fake = FakeAppStore { _ in (503, "unavailable") }
    let w = RefreshWorld(fake: fake)
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let refresher = w.refresher(.init(initialBackoff: .seconds(60), maxBackoff: .seconds(600)))
    var delays: [Int64] = []
    for _ in 0..<6 {
      let summary = try #require(await refresher.refreshDue())
      #expect(summary.outcomes == [.temporaryFailure: 1])
      let stored = try #require(try await w.receipt("u1", app: "app1"))
      let delay = try #require(stored.nextDueMs) - w.now
      delays.append(delay)
      // Not due before its time.
      w.advance(delay - 1)
      #expect(try #require(await refresher.refreshDue()).due == 0)
      w.advance(1)
    }
    #expect(fake.calls.count == 6)
    let ceilings: [Int64] = [60_000, 120_000, 240_000, 480_000, 600_000, 600_000]
    for (delay, ceiling) in zip(delays, ceilings) {
      #expect(delay >= ceiling / 2 && delay <= ceiling, "delays \(delays)")
    }
    #expect(try await w.receipt("u1", app: "app1")?.failureCount == 6)
    let t = w.now
    fake.setAnswer { _ in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: "ok"))
    }
    #expect(try #require(await refresher.refreshDue()).outcomes == [.refreshed: 1])
    #expect(try await w.receipt("u1", app: "app1")?.failureCount == 0)
    #expect(
      w.service.metrics.prometheusText().contains(
        "substatus_receipt_refreshes_total{outcome=\"temporary_failure\"} 6"))
  }

  @Test("21004 stops refreshing the app's receipts until its secret changes; other apps go on")
  func wrongSharedSecret() async throws {
    let fake = FakeAppStore { call in
      call.password == "secret-of-good" || call.password == "the-right-one"
        ? (200, FakeAppStore.body(periods: [(0, 1)], latest: "x", autoRenew: false))
        : (200, #"{"status":21004}"#)
    }
    let w = RefreshWorld(fake: fake)
    try await w.makeApp("bad", tenant: "t1")
    try await w.makeApp("good", tenant: "t1")
    for u in 0..<3 { try await w.saveDue("u\(u)", app: "bad", tenant: "t1") }
    try await w.saveDue("u0", app: "good", tenant: "t1")
    let refresher = w.refresher(.init(maxConcurrent: 1, wrongSecretBackoff: .seconds(86_400)))
    let summary = try #require(await refresher.refreshDue())
    #expect(summary.outcomes == [.wrongSharedSecret: 1, .skippedSharedSecret: 2, .refreshed: 1])
    #expect(fake.calls.filter { $0.password == "secret-of-bad" }.count == 1)  // one rejection, no more calls
    for u in 0..<3 { #expect(try await w.receipt("u\(u)", app: "bad")?.nextDueMs == w.now + day) }
    // The good app's subscription lapsed with auto-renew off: no longer due.
    #expect(try await w.receipt("u0", app: "good")?.nextDueMs == nil)
    w.advance(day - 1)
    #expect(try #require(await refresher.refreshDue()).due == 0)
    // Same secret a day later: still not sent to Apple.
    w.advance(1)
    #expect(try #require(await refresher.refreshDue()).outcomes == [.skippedSharedSecret: 3])
    #expect(fake.calls.filter { $0.password == "secret-of-bad" }.count == 1)
    // A new secret: the held receipts are due at the next tick (once the app cache has seen it).
    _ = try await w.store.setSharedSecret(
      appId: "bad", secret: "the-right-one", atMs: w.now, previousValidUntilMs: w.now)
    w.advance(10_000)
    #expect(try #require(await refresher.refreshDue()).outcomes == [.refreshed: 3])
    #expect(fake.calls.filter { $0.password == "the-right-one" }.count == 3)
    #expect(
      w.service.metrics.prometheusText().contains(
        "substatus_receipt_refreshes_total{outcome=\"wrong_shared_secret\"} 1"))
  }

  @Test("an app without a secret holds its receipts until one is set")
  func noSecretYet() async throws {
    let t = TestWorld().now.withLock { $0 }
    let fake = FakeAppStore { _ in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: "x"))
    }
    let w = RefreshWorld(fake: fake)
    try await w.store.createTenant(TenantRecord(tenantId: "t1", name: "t1", createdMs: 0))
    try await w.store.createApp(
      AppRecord(appId: "app1", tenantId: "t1", bundleId: "b", createdMs: 0))
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let refresher = w.refresher()
    #expect(try #require(await refresher.refreshDue()).outcomes == [.skippedSharedSecret: 1])
    w.advance(hour)
    #expect(try #require(await refresher.refreshDue()).due == 0)
    _ = try await w.store.setSharedSecret(
      appId: "app1", secret: "s", atMs: w.now, previousValidUntilMs: w.now)
    w.advance(10_000)  // the service's app cache (5 s) sees the new fingerprint
    #expect(try #require(await refresher.refreshDue()).outcomes == [.refreshed: 1])
    #expect(fake.calls.map(\.password) == ["s"])
  }

  @Test("a receipt Apple rejects (account deleted, 21010) is no longer due")
  func rejectedReceipts() async throws {
    let fake = FakeAppStore { _ in (200, #"{"status":21010}"#) }
    let w = RefreshWorld(fake: fake)
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let summary = try #require(await w.refresher().refreshDue())
    #expect(summary.outcomes == [.rejected: 1])
    let stored = try #require(try await w.receipt("u1", app: "app1"))
    #expect(stored.nextDueMs == nil)
    #expect(stored.failureCount == 1)
    #expect(stored.receiptData == "t1/app1/u1")
  }

  @Test("a disabled tenant's receipts are held back, not sent to Apple")
  func disabledTenant() async throws {
    let fake = FakeAppStore { _ in (200, FakeAppStore.body(periods: [(0, 1)], latest: "x")) }
    let w = RefreshWorld(fake: fake)
    try await w.makeApp("app1", tenant: "t1")
    try await w.makeApp("app2", tenant: "t2")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    try await w.saveDue("u1", app: "app2", tenant: "t2")
    _ = try await w.store.setTenantDisabled(id: "t1", disabled: true)
    let summary = try #require(
      await w.refresher(.init(wrongSecretBackoff: .seconds(3600))).refreshDue())
    #expect(summary.outcomes == [.tenantDisabled: 1, .refreshed: 1])
    #expect(fake.calls.map(\.receipt) == ["t2/app2/u1"])
    #expect(try await w.receipt("u1", app: "app1")?.nextDueMs == w.now + hour)
  }

  @Test("two refreshers on one store (two instances) split the due receipts: each is verified once")
  func twoRefreshersShareTheWork() async throws {
    let world = TestWorld()
    let t = world.now.withLock { $0 }
    let fake = FakeAppStore(delay: .milliseconds(10), clock: world.clock) { call in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: call.receipt))
    }
    let w = RefreshWorld(fake: fake, world: world)
    try await w.makeApp("app1", tenant: "t1")
    for u in 0..<12 { try await w.saveDue("u\(u)", app: "app1", tenant: "t1") }
    let driver = answerAsTheyWait(world.clock, after: .milliseconds(10))
    defer { driver.cancel() }
    let other = SubstatusService(
      store: w.store, environment: w.world.environment,
      verifyReceipt: VerifyReceiptClient(
        productionURL: URL(string: "http://apple.invalid/production")!,
        sandboxURL: URL(string: "http://apple.invalid/sandbox")!, maxAttempts: 1, poster: fake),
      log: w.world.log)
    let configuration = ReceiptRefresher.Configuration(batchSize: 2)
    let refreshers = [
      w.refresher(configuration), ReceiptRefresher(service: other, configuration: configuration),
    ]
    let counts = await withTaskGroup(of: Int.self) { group in
      for refresher in refreshers {
        group.addTask {
          var refreshed = 0
          while let summary = await refresher.refreshDue(), summary.due > 0 {
            refreshed += summary.outcomes[.refreshed] ?? 0
          }
          return refreshed
        }
      }
      return await group.reduce(into: [Int]()) { $0.append($1) }
    }
    #expect(counts.reduce(0, +) == 12, "\(counts)")
    let receipts = fake.calls.map(\.receipt)
    #expect(receipts.count == 12)
    #expect(Set(receipts).count == 12, "a receipt was verified twice: \(receipts.sorted())")
    #expect(try await w.store.dueReceipts(atMs: t + day, limit: 100).isEmpty)
  }

  @Test("a user erased while Apple answers the refresh stays erased: nothing written, no receipt")
  func erasureDuringARefreshIsNotUndone() async throws {
    let world = TestWorld()
    let t = world.now.withLock { $0 }
    let fake = FakeAppStore(delay: .milliseconds(300), clock: world.clock) { call in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: call.receipt))
    }
    let w = RefreshWorld(fake: fake, world: world)
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let batch = Task { await w.refresher().refreshDue() }
    #expect(await world.clock.waitForSleepers(1))  // verifyReceipt is in flight
    #expect(try await w.store.deleteUsers(appId: "app1", userIds: ["u1"]).receipts == 1)
    world.clock.advance(by: .milliseconds(300))  // Apple answers
    let summary = try #require(await batch.value)
    #expect(summary.outcomes == [.userErased: 1])
    let user = UserKey(appId: "app1", environment: .production, userId: "u1")
    #expect(try await w.store.history(of: user) == UserHistory(user: user))
    #expect(try await w.receipt("u1", app: "app1") == nil)
    #expect(try await w.store.listUsers(appId: "app1", environment: .production, page: PageRequest(size: 10)).items.isEmpty)
    #expect(try await w.store.events(appId: "app1", query: EventQuery(), afterSequence: 0, limit: 10).isEmpty)
  }

  @Test("a graceful shutdown gives the claimed receipts it did not start back (due again at once)")
  func shutdownReleasesUnstartedClaims() async throws {
    let world = TestWorld()
    let t = world.now.withLock { $0 }
    let fake = FakeAppStore(delay: .milliseconds(300), clock: world.clock) { call in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: call.receipt))
    }
    let w = RefreshWorld(fake: fake, world: world)
    try await w.makeApp("app1", tenant: "t1")
    for u in 0..<3 { try await w.saveDue("u\(u)", app: "app1", tenant: "t1", dueIn: -Int64(u)) }
    let refresher = w.refresher(.init(maxConcurrent: 1, lease: .seconds(600)))
    let batch = Task { await refresher.refreshDue() }
    #expect(await world.clock.waitForSleepers(1))
    // While the first verification is in flight, the other two are leased.
    #expect(try await w.receipt("u0", app: "app1")?.nextDueMs == t + 600_000)
    refresher.beginGracefulShutdown()
    world.clock.advance(by: .milliseconds(300))  // Apple answers the one in flight
    let summary = try #require(await batch.value)
    #expect(summary.due == 3)
    #expect(summary.outcomes == [.refreshed: 1])
    #expect(fake.calls.map(\.receipt) == ["t1/app1/u2"])  // the most overdue first
    #expect(try await w.receipt("u0", app: "app1")?.nextDueMs == t)
    #expect(try await w.receipt("u1", app: "app1")?.nextDueMs == t - 1)
    #expect(Set(try await w.store.dueReceipts(atMs: t, limit: 10).map(\.user.userId)) == ["u0", "u1"])
  }

  @Test("run() refreshes at once, then every interval of the clock, and stops at once", .timeLimit(.minutes(1)))
  func runAndStop() async throws {
    let t = TestWorld().now.withLock { $0 }
    let fake = FakeAppStore { _ in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: "ok"))
    }
    let w = RefreshWorld(fake: fake)
    let clock = w.world.clock
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let refresher = w.refresher(.init(interval: .seconds(60)))
    let task = Task { await refresher.run() }
    // The first tick runs at once, then the refresher waits its interval.
    #expect(await clock.waitForSleepers(1))
    #expect(fake.calls.map(\.receipt) == ["t1/app1/u1"])
    // A receipt due now is picked up at the next tick, not before.
    try await w.saveDue("u2", app: "app1", tenant: "t1")
    clock.advance(by: .seconds(59))
    #expect(clock.sleeperCount == 1)
    #expect(fake.calls.count == 1)
    clock.advance(by: .seconds(1))
    #expect(await clock.waitForSleepers(1))
    #expect(fake.calls.map(\.receipt) == ["t1/app1/u1", "t1/app1/u2"])
    // Every interval, not just once.
    try await w.saveDue("u3", app: "app1", tenant: "t1")
    clock.advance(by: .seconds(60))
    #expect(await clock.waitForSleepers(1))
    #expect(fake.calls.map(\.receipt).last == "t1/app1/u3")
    // A graceful shutdown ends the wait at once: no time passes on the clock.
    refresher.beginGracefulShutdown()
    await task.value
    #expect(clock.sleeperCount == 0)
    #expect(fake.calls.count == 3)
    // Cancellation stops it too.
    let cancelled = Task { await w.refresher(.init(interval: .seconds(3600))).run() }
    #expect(await clock.waitForSleepers(1))
    cancelled.cancel()
    await cancelled.value
    #expect(clock.sleeperCount == 0)
  }

  /// Under `--clock-url` the service clock follows the simulator's, which may stand still: ticks
  /// come every interval of real time (the wire clock); what is due is judged on the service clock.
  @Test("run() ticks on the wire clock while the service clock stands still", .timeLimit(.minutes(1)))
  func ticksOnTheWireClock() async throws {
    let world = TestWorld(separateWireClock: true)
    let t = world.now.withLock { $0 }
    let fake = FakeAppStore { _ in
      (200, FakeAppStore.body(periods: [(t - hour, t + 30 * day)], latest: "ok"))
    }
    let w = RefreshWorld(fake: fake, world: world)
    try await w.makeApp("app1", tenant: "t1")
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    let refresher = w.refresher(.init(interval: .seconds(60)))
    let task = Task { await refresher.run() }
    #expect(await world.wireClock.waitForSleepers(1))
    #expect(world.clock.sleeperCount == 0)
    #expect(fake.calls.map(\.receipt) == ["t1/app1/u1"])
    // A receipt due at the service clock's now, which does not move: the next tick, a minute of
    // real time later, takes it.
    try await w.saveDue("u2", app: "app1", tenant: "t1")
    world.wireClock.advance(by: .seconds(60))
    #expect(await world.wireClock.waitForSleepers(1))
    #expect(fake.calls.map(\.receipt) == ["t1/app1/u1", "t1/app1/u2"])
    refresher.beginGracefulShutdown()
    await task.value
    #expect(world.wireClock.sleeperCount == 0)
  }
}

// MARK: SubmitReceipt keeps the receipt

@Suite("SubmitReceipt stores the receipt for refresh")
struct SubmitReceiptStoresReceiptTests {
  @Test(
    "after a successful verify the latest receipt is kept with its due time; a failed verify keeps nothing"
  )
  func submitKeepsReceipt() async throws {
    let t = TestWorld().now.withLock { $0 }
    let fake = FakeAppStore { call in
      call.receipt == "bad"
        ? (200, #"{"status":21003}"#)
        : (
          200,
          FakeAppStore.body(periods: [(t - 7 * day + hour, t + hour)], latest: "latest-from-apple")
        )
    }
    let client = VerifyReceiptClient(
      productionURL: URL(string: "http://apple.invalid/p")!,
      sandboxURL: URL(string: "http://apple.invalid/s")!, maxAttempts: 1, poster: fake)
    try await withService(verifyReceipt: client) { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = appID
      secret.sharedSecret = "0123456789abcdef"
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      var submit = Substatus_V1_SubmitReceiptRequest()
      submit.appID = appID
      submit.userID = "alice"
      submit.receiptData = "submitted-receipt"
      let response = try await h.call(Substatus_V1_IngestService.submitReceipt, submit, key: admin)
      #expect(response.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .active)
      let stored = try #require(
        try await h.service.store.receipt(
          of: UserKey(appId: appID, environment: .production, userId: "alice")))
      #expect(stored.receiptData == "latest-from-apple")
      #expect(stored.lastVerifiedMs == t)
      #expect(stored.nextDueMs == t + hour + 60_000)  // expires within the day: just after the expiry
      submit.userID = "bob"
      submit.receiptData = "bad"
      await expectStatus(.invalidArgument) {
        _ = try await h.call(Substatus_V1_IngestService.submitReceipt, submit, key: admin)
      }
      #expect(
        try await h.service.store.receipt(
          of: UserKey(appId: appID, environment: .production, userId: "bob")) == nil)
    }
  }
}

@Suite("Receipt refresh through the API")
struct ReceiptRefreshThroughAPITests {
  @Test(
    "SubmitReceipt, then a 21004 at refresh time; SetSharedSecret makes the held receipt due at once"
  )
  func setSharedSecretReleasesHeldReceipts() async throws {
    let t = TestWorld().now.withLock { $0 }
    let accepted = Mutex("first-secret")
    let fake = FakeAppStore { call in
      call.password == accepted.withLock { $0 }
        ? (200, FakeAppStore.body(periods: [(t - 7 * day + hour, t + hour)], latest: "latest"))
        : (200, #"{"status":21004}"#)
    }
    let client = VerifyReceiptClient(
      productionURL: URL(string: "http://apple.invalid/p")!,
      sandboxURL: URL(string: "http://apple.invalid/s")!, maxAttempts: 1, poster: fake)
    try await withService(verifyReceipt: client) { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      var secret = Substatus_V1_SetSharedSecretRequest()
      secret.appID = appID
      secret.sharedSecret = "first-secret"
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      var submit = Substatus_V1_SubmitReceiptRequest()
      submit.appID = appID
      submit.userID = "alice"
      submit.receiptData = "submitted"
      _ = try await h.call(Substatus_V1_IngestService.submitReceipt, submit, key: admin)
      let user = UserKey(appId: appID, environment: .production, userId: "alice")
      let due = try #require(try await h.service.store.receipt(of: user)?.nextDueMs)
      // Apple now wants another secret (rotated in App Store Connect, not yet here).
      accepted.withLock { $0 = "second-secret" }
      h.world.now.withLock { $0 = due }
      let refresher = ReceiptRefresher(service: h.service, configuration: .init())
      #expect(try #require(await refresher.refreshDue()).outcomes == [.wrongSharedSecret: 1])
      #expect(try #require(await refresher.refreshDue()).due == 0)
      secret.sharedSecret = "second-secret"
      _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
      #expect(try #require(await refresher.refreshDue()).outcomes == [.refreshed: 1])
      #expect(fake.calls.map(\.password) == ["first-secret", "first-secret", "second-secret"])
      #expect(try await h.service.store.receipt(of: user)?.failureCount == 0)
    }
  }
}
