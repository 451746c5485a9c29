import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The webhook part of the store contract (``WebhookStore``), run like ``StoreContract``:
///
/// ```swift
/// @Test(arguments: WebhookContract.Case.allCases)
/// func webhooks(_ test: WebhookContract.Case) async throws {
///   try await withMyStore { store in try await WebhookContract.run(test, store) }
/// }
/// ```
public enum WebhookContract {
  /// A store with the event log and webhooks.
  public typealias FullStore = any Store & EventLogStore & WebhookStore

  /// One behaviour; each runs against a fresh, empty store.
  public enum Case: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// webhooks: create, conflict, list by id, look-up, secret, fingerprint, delete, app scoping
    case webhooks
    /// fan-out: each webhook gets each later event once, by its types, never earlier events
    case fanOut
    /// concurrent enqueues never create a delivery twice and together create every one
    case concurrentFanOut
    /// claims: log order, only the oldest pending delivery per webhook and user, leases
    case claims
    /// claims bounded per webhook and skipping busy webhooks
    case claimBounds
    /// attempts are recorded; retries are due later; FAILED is final; listed newest first, paged
    case attemptsAndListing
    /// attempts of many deliveries recorded in one call; unknown deliveries answered, not recorded
    case batchedAttempts
    /// replay creates new deliveries of logged events, failed ones included
    case replay
    /// deleting a webhook drops its deliveries and its secret
    case deleteDropsDeliveries
    /// erasing a user drops the deliveries of the user's events, no other
    case userErasure
    /// webhooks per app and per tenant are capped, also when created at once; deleting makes room
    case caps
    /// claims take the tenants' due deliveries in turn, bounded per tenant, skipping busy tenants
    case fairClaims
    /// a webhook's environment filter: fan-out and replay send only that environment's events
    case environmentFilter

    /// What the case checks, as test output shows it.
    public var testDescription: String { rawValue }
  }

  /// Runs one case against `store`, which must be fresh and empty.
  public static func run(_ test: Case, _ store: FullStore) async throws {
    try await Fixture.seed(store)
    switch test {
    case .webhooks: try await webhooks(store)
    case .fanOut: try await fanOut(store)
    case .concurrentFanOut: try await concurrentFanOut(store)
    case .claims: try await claims(store)
    case .claimBounds: try await claimBounds(store)
    case .attemptsAndListing: try await attemptsAndListing(store)
    case .batchedAttempts: try await batchedAttempts(store)
    case .replay: try await replay(store)
    case .deleteDropsDeliveries: try await deleteDropsDeliveries(store)
    case .userErasure: try await userErasure(store)
    case .caps: try await caps(store)
    case .fairClaims: try await fairClaims(store)
    case .environmentFilter: try await environmentFilter(store)
    }
  }

  // MARK: Helpers

  /// Base of the purchase dates written by ``addEvents(_:users:)``.
  static let base: Int64 = 1_700_000_000_000
  static let month: Int64 = 30 * 86_400_000

  /// Writes one period of a monthly subscription for each user in turn (the first a start, then
  /// renewals), so each write derives events; returns the events the log gained, in log order.
  @discardableResult
  public static func addEvents(
    _ store: FullStore, users: [String], app: String = "a1", environment: Environment = .production
  ) async throws -> [LoggedEvent] {
    let before = try await store.lastEventSequence()
    for user in users {
      let key = Fixture.user(user, app: app, environment: environment)
      let n = try await store.history(of: key).transactions.count
      let purchase = base + Int64(n) * month
      let prefix = environment == .production ? app : "\(app)-sandbox"
      var transaction = Fixture.transaction(
        "\(prefix)-\(user)-\(n)", original: "\(prefix)-\(user)-0", purchase: purchase, expires: purchase + month,
        signed: purchase)
      transaction.environment = environment
      let update = UserPurchases(user: key, transactions: [transaction])
      _ = try await store.ingest([update], atMs: purchase + 1_000)
    }
    return try await store.events(appId: app, query: EventQuery(), afterSequence: before, limit: 1000)
  }

  static func webhook(
    _ id: String, app: String = "a1", types: Set<SubscriptionEventType> = [], environment: Environment? = nil
  ) -> WebhookRecord {
    WebhookRecord(
      webhookId: id, appId: app, url: "https://hooks.example.com/\(id)", eventTypes: types, environment: environment,
      createdMs: 5_000)
  }

  static func secret(_ id: String) -> String { "whsec_" + String(repeating: "0", count: 60) + id.suffix(4) }

  /// Every delivery of the webhook, newest first, read page by page.
  public static func allDeliveries(_ store: FullStore, _ webhookId: String, app: String = "a1", failedOnly: Bool = false)
    async throws -> [DeliveryRecord]
  {
    try await collectPages(size: 7) {
      try await store.deliveries(appId: app, webhookId: webhookId, failedOnly: failedOnly, page: $0)
    }.flatMap { $0 }
  }

  static func delivered(_ attemptMs: Int64) -> DeliveryAttemptRecord {
    DeliveryAttemptRecord(attemptedMs: attemptMs, httpStatus: 204, error: nil, durationMs: 3)
  }

  static func failure(_ attemptMs: Int64) -> DeliveryAttemptRecord {
    DeliveryAttemptRecord(attemptedMs: attemptMs, httpStatus: 500, error: "the receiver answered HTTP 500", durationMs: 7)
  }

  // MARK: Cases

  static func webhooks(_ store: FullStore) async throws {
    try await store.createTenant(Fixture.tenant("t2"))
    try await store.createApp(Fixture.app("b1", tenant: "t2"))
    await expectStoreError(.notFound) {
      try await store.createWebhook(webhook("w1", app: "zz"), signingSecret: secret("w1"))
    }
    await expectStoreError(.notFound) { try await store.webhooks(appId: "zz") }
    #expect(try await store.webhooks(appId: "a1").isEmpty)

    try await store.createWebhook(webhook("w2", types: [.renewed, .expired]), signingSecret: secret("w2"))
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    try await store.createWebhook(webhook("w3", app: "b1"), signingSecret: secret("w3"))
    await expectStoreError(.alreadyExists) {
      try await store.createWebhook(webhook("w1", app: "a1"), signingSecret: secret("w1"))
    }
    await expectStoreError(.alreadyExists) {
      try await store.createWebhook(webhook("w1", app: "b1"), signingSecret: secret("w1"))
    }
    let listed = try await store.webhooks(appId: "a1")
    #expect(listed.map(\.webhookId) == ["w1", "w2"])
    #expect(listed[1].eventTypes == [.renewed, .expired])
    #expect(listed[1].url == "https://hooks.example.com/w2")
    #expect(listed[1].createdMs == 5_000)
    #expect(listed.map(\.secretFingerprint) == [SecretFingerprint.of(secret("w1")), SecretFingerprint.of(secret("w2"))])
    #expect(try await store.webhooks(appId: "b1").map(\.webhookId) == ["w3"])
    #expect(try await store.webhook(id: "w3").appId == "b1")
    await expectStoreError(.notFound) { try await store.webhook(id: "nope") }
    #expect(try await store.webhookSigningSecret(webhookId: "w2") == secret("w2"))
    await expectStoreError(.notFound) { try await store.webhookSigningSecret(webhookId: "nope") }

    // Deleting is scoped to the app.
    await expectStoreError(.notFound) { try await store.deleteWebhook(appId: "a1", webhookId: "w3") }
    await expectStoreError(.notFound) { try await store.deleteWebhook(appId: "a1", webhookId: "nope") }
    await expectStoreError(.notFound) { try await store.deleteWebhook(appId: "zz", webhookId: "w1") }
    try await store.deleteWebhook(appId: "a1", webhookId: "w1")
    #expect(try await store.webhooks(appId: "a1").map(\.webhookId) == ["w2"])
    await expectStoreError(.notFound) { try await store.webhookSigningSecret(webhookId: "w1") }
    await expectStoreError(.notFound) { try await store.webhook(id: "w1") }
    #expect(try await store.webhook(id: "w3").webhookId == "w3")
  }

  static func fanOut(_ store: FullStore) async throws {
    let early = try await addEvents(store, users: ["u1"])
    #expect(!early.isEmpty, "an ingest logs events")
    try await store.createWebhook(webhook("all"), signingSecret: secret("all"))
    let wanted = SubscriptionEventType.renewed
    try await store.createWebhook(webhook("renewals", types: [wanted]), signingSecret: secret("rnw"))
    #expect(try await store.enqueueDeliveries(atMs: 10, limit: 100) == 0, "events before creation are not delivered")

    let events = try await addEvents(store, users: ["u1", "u2", "u1", "u3", "u2", "u1"])
    // A small limit: several calls, each event once.
    var created = 0
    for _ in 0..<40 { created += try await store.enqueueDeliveries(atMs: 20, limit: 2) }
    let renewals = events.filter { $0.event.type == wanted }
    #expect(!renewals.isEmpty)
    #expect(created == events.count + renewals.count)
    #expect(try await store.enqueueDeliveries(atMs: 30, limit: 100) == 0)

    let all = try await allDeliveries(store, "all")
    #expect(all.map(\.event).reversed() == events, "newest first, each event once")
    #expect(all.allSatisfy { $0.state == .pending && $0.nextAttemptMs == 20 && $0.createdMs == 20 && $0.attempts.isEmpty })
    #expect(Set(all.map(\.deliveryId)).count == all.count)
    #expect(all.allSatisfy { $0.webhookId == "all" })
    let onlyRenewals = try await allDeliveries(store, "renewals")
    #expect(onlyRenewals.map(\.event).reversed() == renewals)

    // Events of another app go to that app's webhooks only.
    try await store.createApp(Fixture.app("a2"))
    let other = try await addEvents(store, users: ["u1"], app: "a2")
    #expect(!other.isEmpty)
    _ = try await store.enqueueDeliveries(atMs: 40, limit: 100)
    #expect(try await allDeliveries(store, "all").count == all.count)
  }

  static func environmentFilter(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("both"), signingSecret: secret("both"))
    try await store.createWebhook(webhook("prod", environment: .production), signingSecret: secret("prod"))
    let renewed = SubscriptionEventType.renewed
    try await store.createWebhook(
      webhook("sbxr", types: [renewed], environment: .sandbox), signingSecret: secret("sbxr"))
    let listed = try await store.webhooks(appId: "a1")
    #expect(listed.map(\.environment) == [nil, .production, .sandbox], "stored and read back")
    #expect(try await store.webhook(id: "sbxr").environment == .sandbox)

    let production = try await addEvents(store, users: ["u1", "u2", "u1"])
    let sandbox = try await addEvents(store, users: ["u1", "u3", "u1", "u1"], environment: .sandbox)
    #expect(!production.isEmpty && !sandbox.isEmpty)
    #expect(sandbox.allSatisfy { $0.event.environment == .sandbox })
    for _ in 0..<10 { _ = try await store.enqueueDeliveries(atMs: 20, limit: 3) }
    #expect(try await allDeliveries(store, "both").map(\.event).reversed() == production + sandbox)
    #expect(try await allDeliveries(store, "prod").map(\.event).reversed() == production)
    let sandboxRenewals = sandbox.filter { $0.event.type == renewed }
    #expect(!sandboxRenewals.isEmpty)
    #expect(try await allDeliveries(store, "sbxr").map(\.event).reversed() == sandboxRenewals, "types and environment")

    // A replay keeps to the filter too.
    #expect(try await store.replay(appId: "a1", webhookId: "prod", afterSequence: 0, atMs: 30) == production.count)
    #expect(try await allDeliveries(store, "prod").map(\.event).reversed() == production + production)
  }

  static func concurrentFanOut(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    try await store.createWebhook(webhook("w2"), signingSecret: secret("w2"))
    let events = try await addEvents(store, users: (0..<12).map { "u\($0 % 4)" })
    let created = try await withThrowingTaskGroup(of: Int.self) { group in
      for _ in 0..<4 {
        group.addTask {
          var n = 0
          for _ in 0..<20 { n += try await store.enqueueDeliveries(atMs: 1, limit: 3) }
          return n
        }
      }
      return try await group.reduce(0, +)
    }
    #expect(created == 2 * events.count)
    for id in ["w1", "w2"] {
      #expect(try await allDeliveries(store, id).map(\.event).reversed() == events)
    }
  }

  static func claims(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    let events = try await addEvents(store, users: ["u1", "u2", "u1", "u2", "u3"])
    _ = try await store.enqueueDeliveries(atMs: 100, limit: 100)
    await expectStoreError(.invalidArgument) {
      try await store.claimDueDeliveries(atMs: 100, limit: 10, leaseUntilMs: 100)
    }
    #expect(try await store.claimDueDeliveries(atMs: 99, limit: 10, leaseUntilMs: 200).isEmpty, "not due yet")

    // The oldest of each user, in log order.
    func firsts(_ events: [LoggedEvent]) -> [LoggedEvent] {
      var seen = Set<String>()
      return events.filter { seen.insert($0.event.userId).inserted }
    }
    let first = try await store.claimDueDeliveries(atMs: 100, limit: 10, leaseUntilMs: 1_000)
    #expect(first.map(\.event) == firsts(events))
    // Leased: nothing more until the lease ends or an outcome is recorded.
    #expect(try await store.claimDueDeliveries(atMs: 500, limit: 10, leaseUntilMs: 2_000).isEmpty)

    // u1's first is delivered: u1's next becomes claimable; u2 stays behind its leased head.
    let u1 = try #require(first.first { $0.event.event.userId == "u1" })
    try await store.recordDeliveryAttempt(deliveryId: u1.deliveryId, attempt: delivered(600), state: .delivered, nextAttemptMs: nil)
    let next = try await store.claimDueDeliveries(atMs: 600, limit: 10, leaseUntilMs: 2_000)
    #expect(next.map(\.event) == [events.filter { $0.event.userId == "u1" }[1]])

    // u2's head fails and is retried later: u2's second waits behind it.
    let u2 = try #require(first.first { $0.event.event.userId == "u2" })
    try await store.recordDeliveryAttempt(deliveryId: u2.deliveryId, attempt: failure(700), state: .pending, nextAttemptMs: 5_000)
    #expect(try await store.claimDueDeliveries(atMs: 700, limit: 10, leaseUntilMs: 2_000).isEmpty)

    // Leases end: u3's head (never recorded) and u1's second are claimable again.
    let expired = try await store.claimDueDeliveries(atMs: 2_000, limit: 10, leaseUntilMs: 10_000)
    #expect(Set(expired.map(\.deliveryId)) == Set([next[0].deliveryId] + first.filter { $0.event.event.userId == "u3" }.map(\.deliveryId)))
    // The retry comes due with its attempt.
    let retried = try await store.claimDueDeliveries(atMs: 5_000, limit: 10, leaseUntilMs: 6_000)
    #expect(retried.map(\.deliveryId) == [u2.deliveryId])
    #expect(retried[0].attempts == [failure(700)])
  }

  static func claimBounds(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    try await store.createWebhook(webhook("w2"), signingSecret: secret("w2"))
    let events = try await addEvents(store, users: ["u1", "u2", "u3", "u4"])
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 100)
    let bounded = try await store.claimDueDeliveries(
      atMs: 1, limit: 100, leaseUntilMs: 10, perWebhookLimit: 2, excludingWebhookIds: [])
    #expect(bounded.filter { $0.webhookId == "w1" }.map(\.event) == Array(events.prefix(2)))
    #expect(bounded.filter { $0.webhookId == "w2" }.map(\.event) == Array(events.prefix(2)))
    #expect(bounded.map(\.event.sequence) == bounded.map(\.event.sequence).sorted(), "log order")
    let skipping = try await store.claimDueDeliveries(
      atMs: 1, limit: 100, leaseUntilMs: 10, perWebhookLimit: 100, excludingWebhookIds: ["w1"])
    #expect(skipping.map(\.webhookId) == ["w2", "w2"])
    #expect(skipping.map(\.event) == Array(events.suffix(2)))
    let limited = try await store.claimDueDeliveries(atMs: 1, limit: 1, leaseUntilMs: 10)
    #expect(limited.map(\.webhookId) == ["w1"])
  }

  static func attemptsAndListing(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    let events = try await addEvents(store, users: ["u1", "u2", "u3"])
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 100)
    let claimed = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(claimed.count == events.count)
    let (a, b, c) = (claimed[0], claimed[1], claimed[2])
    try await store.recordDeliveryAttempt(deliveryId: a.deliveryId, attempt: failure(2), state: .pending, nextAttemptMs: 50)
    try await store.recordDeliveryAttempt(deliveryId: a.deliveryId, attempt: delivered(60), state: .delivered, nextAttemptMs: nil)
    try await store.recordDeliveryAttempt(deliveryId: b.deliveryId, attempt: failure(3), state: .failed, nextAttemptMs: nil)
    await expectStoreError(.notFound) {
      try await store.recordDeliveryAttempt(deliveryId: "dlv_999999999", attempt: failure(3), state: .failed, nextAttemptMs: nil)
    }
    // Neither delivered nor failed deliveries are claimed again.
    #expect(try await store.claimDueDeliveries(atMs: 10_000, limit: 10, leaseUntilMs: 20_000).map(\.deliveryId) == [c.deliveryId])

    let all = try await allDeliveries(store, "w1")
    #expect(all.map(\.deliveryId) == [c, b, a].map(\.deliveryId), "newest first")
    let byId = Dictionary(uniqueKeysWithValues: all.map { ($0.deliveryId, $0) })
    #expect(byId[a.deliveryId]?.state == .delivered)
    #expect(byId[a.deliveryId]?.attempts == [failure(2), delivered(60)])
    #expect(byId[a.deliveryId]?.nextAttemptMs == nil)
    #expect(byId[b.deliveryId]?.state == .failed)
    #expect(byId[b.deliveryId]?.attempts == [failure(3)])
    #expect(byId[c.deliveryId]?.state == .pending)
    #expect(try await allDeliveries(store, "w1", failedOnly: true).map(\.deliveryId) == [b.deliveryId])
    let firstPage = try await store.deliveries(appId: "a1", webhookId: "w1", failedOnly: false, page: PageRequest(size: 2))
    #expect(firstPage.items.map(\.deliveryId) == [c, b].map(\.deliveryId))
    #expect(firstPage.nextCursor != nil)
    await expectStoreError(.notFound) {
      try await store.deliveries(appId: "a1", webhookId: "nope", failedOnly: false, page: PageRequest())
    }
    await expectStoreError(.notFound) {
      try await store.deliveries(appId: "zz", webhookId: "w1", failedOnly: false, page: PageRequest())
    }
    await expectStoreError(.invalidArgument) {
      try await store.deliveries(appId: "a1", webhookId: "w1", failedOnly: false, page: PageRequest(cursor: "not a cursor"))
    }
  }

  static func batchedAttempts(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    _ = try await addEvents(store, users: ["u1", "u2", "u3", "u1"])
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 100)
    let claimed = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(claimed.count == 3)
    let (a, b, c) = (claimed[0], claimed[1], claimed[2])
    #expect(try await store.recordDeliveryAttempts([]).isEmpty)
    let missing = try await store.recordDeliveryAttempts([
      DeliveryOutcome(deliveryId: a.deliveryId, attempt: delivered(2), state: .delivered, nextAttemptMs: nil),
      DeliveryOutcome(deliveryId: "dlv_999999999", attempt: failure(2), state: .failed, nextAttemptMs: nil),
      DeliveryOutcome(deliveryId: b.deliveryId, attempt: failure(3), state: .pending, nextAttemptMs: 40),
      DeliveryOutcome(deliveryId: "not a delivery id", attempt: failure(3), state: .failed, nextAttemptMs: nil),
      DeliveryOutcome(deliveryId: c.deliveryId, attempt: failure(4), state: .failed, nextAttemptMs: nil),
    ])
    #expect(missing == ["dlv_999999999", "not a delivery id"])
    // b again in a second batch: its attempts grow, oldest first.
    #expect(
      try await store.recordDeliveryAttempts([
        DeliveryOutcome(deliveryId: b.deliveryId, attempt: failure(41), state: .pending, nextAttemptMs: nil)
      ]).isEmpty)
    let byId = Dictionary(uniqueKeysWithValues: try await allDeliveries(store, "w1").map { ($0.deliveryId, $0) })
    #expect(byId[a.deliveryId]?.state == .delivered)
    #expect(byId[a.deliveryId]?.attempts == [delivered(2)])
    #expect(byId[b.deliveryId]?.state == .pending)
    #expect(byId[b.deliveryId]?.attempts == [failure(3), failure(41)])
    #expect(byId[b.deliveryId]?.nextAttemptMs == 41, "pending without a due time: due at its attempt")
    #expect(byId[c.deliveryId]?.state == .failed)
    #expect(byId[c.deliveryId]?.nextAttemptMs == nil)
    // a delivered: u1's second is the only one due (b waits for its retry, c failed).
    let next = try await store.claimDueDeliveries(atMs: 41, limit: 10, leaseUntilMs: 200)
    #expect(next.map(\.deliveryId) == [b.deliveryId] + byId.values.filter { $0.attempts.isEmpty }.map(\.deliveryId))
  }

  static func replay(_ store: FullStore) async throws {
    let events = try await addEvents(store, users: ["u1", "u2", "u1"])
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    try await store.createWebhook(webhook("w2", types: [.renewed]), signingSecret: secret("w2"))
    await expectStoreError(.notFound) { try await store.replay(appId: "a1", webhookId: "nope", afterSequence: 0, atMs: 1) }
    await expectStoreError(.notFound) { try await store.replay(appId: "zz", webhookId: nil, afterSequence: 0, atMs: 1) }

    // Events from before the webhook existed, on request.
    #expect(try await store.replay(appId: "a1", webhookId: "w1", afterSequence: 0, atMs: 10) == events.count)
    let replayed = try await allDeliveries(store, "w1")
    #expect(replayed.map(\.event).reversed() == events)
    #expect(replayed.allSatisfy { $0.state == .pending && $0.nextAttemptMs == 10 })

    // A failed delivery is sent again as a new delivery; every webhook gets its types.
    let claimed = try await store.claimDueDeliveries(atMs: 10, limit: 1, leaseUntilMs: 20)
    try await store.recordDeliveryAttempt(deliveryId: claimed[0].deliveryId, attempt: failure(11), state: .failed, nextAttemptMs: nil)
    let after = events[0].sequence
    let renewals = events.dropFirst().filter { $0.event.type == .renewed }
    #expect(
      try await store.replay(appId: "a1", webhookId: nil, afterSequence: after, atMs: 30)
        == events.count - 1 + renewals.count)
    let w1 = try await allDeliveries(store, "w1")
    #expect(w1.count == 2 * events.count - 1)
    #expect(w1.filter { $0.state == .failed }.map(\.deliveryId) == [claimed[0].deliveryId])
    #expect(try await allDeliveries(store, "w2").map(\.event).reversed() == Array(renewals))
  }

  static func deleteDropsDeliveries(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    try await store.createWebhook(webhook("w2"), signingSecret: secret("w2"))
    let events = try await addEvents(store, users: ["u1", "u2"])
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 100)
    let claimed = try await store.claimDueDeliveries(atMs: 1, limit: 10, leaseUntilMs: 100)
    #expect(claimed.count == 2 * events.count)
    try await store.deleteWebhook(appId: "a1", webhookId: "w1")
    // An attempt finishing after the delete finds nothing to record.
    for d in claimed where d.webhookId == "w1" {
      await expectStoreError(.notFound) {
        try await store.recordDeliveryAttempt(deliveryId: d.deliveryId, attempt: delivered(5), state: .delivered, nextAttemptMs: nil)
      }
    }
    #expect(try await store.claimDueDeliveries(atMs: 1_000, limit: 10, leaseUntilMs: 2_000).allSatisfy { $0.webhookId == "w2" })
    // A new webhook with the same id starts afresh.
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w9"))
    #expect(try await allDeliveries(store, "w1").isEmpty)
    #expect(try await store.webhookSigningSecret(webhookId: "w1") == secret("w9"))
    _ = try await addEvents(store, users: ["u1"])
    #expect(try await store.enqueueDeliveries(atMs: 3_000, limit: 100) >= 2)
  }

  static func userErasure(_ store: FullStore) async throws {
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    let events = try await addEvents(store, users: ["u1", "u2", "u1"])
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 100)
    #expect(try await allDeliveries(store, "w1").count == events.count)
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
    let left = try await allDeliveries(store, "w1")
    #expect(left.map(\.event).reversed() == events.filter { $0.event.userId == "u2" })
  }

  static func caps(_ store: FullStore) async throws {
    try await store.createApp(Fixture.app("a2"))
    try await store.createTenant(Fixture.tenant("t2"))
    try await store.createApp(Fixture.app("b1", tenant: "t2"))
    let limits = WebhookLimits(perApp: 2, perTenant: 3)
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"), limits: limits)
    try await store.createWebhook(webhook("w2"), signingSecret: secret("w2"), limits: limits)
    await expectStoreError(.resourceExhausted) {
      try await store.createWebhook(webhook("w3"), signingSecret: secret("w3"), limits: limits)
    }
    // The tenant's other app: one more fits under the tenant's 3.
    try await store.createWebhook(webhook("w4", app: "a2"), signingSecret: secret("w4"), limits: limits)
    await expectStoreError(.resourceExhausted) {
      try await store.createWebhook(webhook("w5", app: "a2"), signingSecret: secret("w5"), limits: limits)
    }
    // Another tenant has its own count; an id taken stays a conflict, not a cap.
    try await store.createWebhook(webhook("w6", app: "b1"), signingSecret: secret("w6"), limits: limits)
    await expectStoreError(.alreadyExists) {
      try await store.createWebhook(webhook("w6", app: "b1"), signingSecret: secret("w6"), limits: limits)
    }
    #expect(try await store.webhooks(appId: "a1").map(\.webhookId) == ["w1", "w2"])
    #expect(try await store.webhooks(appId: "a2").map(\.webhookId) == ["w4"])
    // Deleting makes room.
    try await store.deleteWebhook(appId: "a1", webhookId: "w1")
    try await store.createWebhook(webhook("w7", app: "a2"), signingSecret: secret("w7"), limits: limits)
    // Creates at once never pass the cap together.
    try await store.createTenant(Fixture.tenant("t3"))
    try await store.createApp(Fixture.app("c1", tenant: "t3"))
    let made = try await withThrowingTaskGroup(of: Bool.self) { group in
      for i in 0..<20 {
        group.addTask {
          do {
            try await store.createWebhook(
              webhook("c\(100 + i)", app: "c1"), signingSecret: secret("c\(100 + i)"),
              limits: WebhookLimits(perApp: 5, perTenant: 100))
            return true
          } catch let error as StoreError where error.code == .resourceExhausted {
            return false
          }
        }
      }
      var made = 0
      for try await ok in group where ok { made += 1 }
      return made
    }
    #expect(made == 5)
    #expect(try await store.webhooks(appId: "c1").count == 5)
  }

  static func fairClaims(_ store: FullStore) async throws {
    try await store.createTenant(Fixture.tenant("t2"))
    try await store.createApp(Fixture.app("b1", tenant: "t2"))
    try await store.createWebhook(webhook("w1"), signingSecret: secret("w1"))
    try await store.createWebhook(webhook("w2", app: "b1"), signingSecret: secret("w2"))
    #expect(try await store.webhook(id: "w1").tenantId == "t1")
    #expect(try await store.webhook(id: "w2").tenantId == "t2")
    // t1's backlog is older than all of t2's events.
    func heads(_ events: [LoggedEvent]) -> [LoggedEvent] {
      var users = Set<String>()
      return events.filter { users.insert($0.event.userId).inserted }
    }
    let busy = heads(try await addEvents(store, users: (0..<6).map { "u\($0)" }))
    let quiet = heads(try await addEvents(store, users: ["q1", "q2"], app: "b1"))
    #expect(busy.count == 6 && quiet.count == 2)
    _ = try await store.enqueueDeliveries(atMs: 1, limit: 100)
    // A claim of 4: the tenants in turn, not t1's 4 oldest.
    let turns = try await store.claimDueDeliveries(atMs: 1, limit: 4, leaseUntilMs: 10)
    #expect(Set(turns.map(\.event)) == Set(busy.prefix(2) + quiet))
    // At most 2 of one tenant.
    let bounded = try await store.claimDueDeliveries(
      atMs: 1, limit: 100, leaseUntilMs: 10, perWebhookLimit: 100, excludingWebhookIds: [], claimant: "",
      shares: DeliveryClaimShares(perTenantLimit: 2))
    #expect(bounded.map(\.event) == Array(busy[2..<4]))
    // A busy tenant is left out.
    let skipping = try await store.claimDueDeliveries(
      atMs: 1, limit: 100, leaseUntilMs: 10, perWebhookLimit: 100, excludingWebhookIds: [], claimant: "",
      shares: DeliveryClaimShares(perTenantLimit: 100, excludingTenantIds: ["t1"]))
    #expect(skipping.isEmpty)
    let rest = try await store.claimDueDeliveries(atMs: 1, limit: 100, leaseUntilMs: 10)
    #expect(rest.map(\.event) == Array(busy.suffix(2)))
  }
}
