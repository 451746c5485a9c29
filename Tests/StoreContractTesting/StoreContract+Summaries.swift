import SubscriptionDomain
import SubscriptionStorage
import Testing

/// Per-user summaries: written with every write of a user's data or ownership, deleted by erasure,
/// rewritten by the read path only while no write came since, and answering as the history does.
enum SummaryFixture {
  /// The catalog of the summary cases (the stores sort products by id).
  static let products = [
    Product(productId: "lifetime", type: .nonConsumable),
    Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1", hasIntroductoryOffer: true, winBackOfferIds: ["wb"]),
    Product(productId: "pass", type: .nonRenewing, duration: ISO8601Duration(days: 30)),
    Product(productId: "pro", type: .autoRenewable, subscriptionGroupId: "g2", hasIntroductoryOffer: true),
    Product(productId: "yearly", type: .autoRenewable, subscriptionGroupId: "g1"),
  ]

  static var catalog: Catalog { Catalog(products: products.sorted { $0.productId < $1.productId }) }

  /// The store's catalog and policy as a reader loads them.
  static func appView(_ store: any Store, app: String = "a1") async throws -> (Catalog, EligibilityPolicy) {
    (Catalog(products: try await store.products(appId: app)), try await store.app(id: app).policy)
  }

  /// The evaluation from the history, as the read path without a summary makes it.
  static func fromHistory(_ store: any Store, _ userId: String, at time: Int64) async throws -> SubscriptionEvaluation {
    let (catalog, policy) = try await appView(store)
    let history = try await store.history(of: Fixture.user(userId))
    let gaps = try await store.ownershipGaps(appId: "a1", environment: .production, userIds: [userId])[userId] ?? []
    let owned = OwnershipGap.owned(transactions: history.transactions, renewals: history.renewalInfos, gaps: gaps, at: time)
    return SubscriptionEvaluator.evaluate(
      history: owned.transactions, renewals: owned.renewals, catalog: catalog, policy: policy, at: time)
  }

  static func stored(_ store: any Store, _ userIds: [String]) async throws -> [String: StoredSummary] {
    try await store.summaries(appId: "a1", environment: .production, userIds: userIds)
  }
}

extension StoreContract {
  /// summaries: written with each write (ingest, notification, transfer) at its time for the
  /// app's catalog and policy, read for many users at once, refreshed by the transition
  /// scheduler's passes, deleted by erasure
  static func summaryWrites(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.putProducts(appId: "a1", products: SummaryFixture.products)
    _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(refundsBlockIntro: true, purchaseSharing: .transfer))
    #expect(try await SummaryFixture.stored(store, ["u1"]).isEmpty)
    let t0 = Fixture.now
    _ = try await store.ingest(
      [
        UserPurchases(
          user: Fixture.user("u1"),
          transactions: [Fixture.transaction("1", purchase: t0 - 1_000, expires: t0 + 5_000, trial: true)],
          renewalInfos: [Fixture.renewal("1")], submittedMs: t0),
        UserPurchases(user: Fixture.user("u2"), transactions: [Fixture.transaction("9", product: "lifetime", purchase: t0 - 10)]),
      ], atMs: t0)
    let (catalog, policy) = try await SummaryFixture.appView(store)
    var rows = try await SummaryFixture.stored(store, ["u1", "u2", "nobody"])
    #expect(Set(rows.keys) == ["u1", "u2"])
    let first = try #require(rows["u1"]?.summary)
    #expect(first.computedAtMs == t0)
    #expect(first.validUntilMs == t0 + 5_000)  // the trial's end
    #expect(first.fingerprint == SummaryFingerprint(catalog: catalog, policy: policy).value)
    for t in [t0, t0 + 4_999] {
      #expect(first.evaluation(catalog: catalog, policy: policy, at: t) == (try await SummaryFixture.fromHistory(store, "u1", at: t)))
    }
    #expect(first.evaluation(catalog: catalog, policy: policy, at: t0 + 5_000) == nil)

    // A notification's write replaces it, with a new stamp.
    let stamp = try #require(rows["u1"]?.stamp)
    _ = try await store.applyNotification(
      appId: "a1", notificationId: "n1", receivedMs: t0 + 100,
      updates: [
        UserPurchases(
          user: Fixture.user("u1"),
          transactions: [Fixture.transaction("1", purchase: t0 - 1_000, expires: t0 + 5_000, trial: true, revoked: t0 + 50)])
      ])
    rows = try await SummaryFixture.stored(store, ["u1"])
    #expect(rows["u1"]?.stamp != stamp)
    let refunded = try #require(rows["u1"]?.summary)
    #expect(refunded.computedAtMs == t0 + 100)
    #expect(
      refunded.evaluation(catalog: catalog, policy: policy, at: t0 + 100)
        == (try await SummaryFixture.fromHistory(store, "u1", at: t0 + 100)))
    #expect(refunded.groups.first?.state == .revoked)

    // A transfer (TRANSFER policy) rewrites both users' summaries in its commit.
    _ = try await store.ingest(
      [UserPurchases(user: Fixture.user("u2"), transactions: [Fixture.transaction("1", purchase: t0 - 1_000, expires: t0 + 5_000, trial: true)], submittedMs: t0 + 200)],
      atMs: t0 + 200)
    rows = try await SummaryFixture.stored(store, ["u1", "u2"])
    for userId in ["u1", "u2"] {
      let summary = try #require(rows[userId]?.summary, "\(userId)")
      #expect(summary.computedAtMs == t0 + 200, "\(userId)")
      for t in [t0 + 200, t0 + 300] {
        #expect(
          summary.evaluation(catalog: catalog, policy: policy, at: t) == (try await SummaryFixture.fromHistory(store, userId, at: t)),
          "\(userId) at \(t)")
      }
    }
    #expect(rows["u1"]?.summary?.groups.first?.state == .neverSubscribed)  // u1 no longer owns it

    // A catalog or policy change leaves the rows as they are: their fingerprint no longer matches.
    _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .transfer))
    let (_, newPolicy) = try await SummaryFixture.appView(store)
    #expect(rows["u2"]?.summary?.evaluation(catalog: catalog, policy: newPolicy, at: t0 + 300) == nil)

    // The transition scheduler's pass over a user whose period ended refreshes its summary, at
    // the pass's time, for the catalog and policy of then.
    let passMs = t0 + 10_000
    let transitions = try await store.appendDueTransitionEvents(atMs: passMs, limit: 100)
    #expect(transitions.contains { $0.event.userId == "u2" })
    let passed = try #require(try await SummaryFixture.stored(store, ["u2"])["u2"]?.summary)
    #expect(passed.computedAtMs == passMs)
    #expect(passed.fingerprint == SummaryFingerprint(catalog: catalog, policy: newPolicy).value)
    #expect(
      passed.evaluation(catalog: catalog, policy: newPolicy, at: passMs)
        == (try await SummaryFixture.fromHistory(store, "u2", at: passMs)))

    // Erasure deletes them.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
    #expect(Set(try await SummaryFixture.stored(store, ["u1", "u2"]).keys) == ["u2"])
  }

  /// summaries: a read path's rewrite is stored only while no write came since its read (the
  /// stamp), never over a newer write's summary nor for an erased user
  static func summaryRewriteRace(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.putProducts(appId: "a1", products: SummaryFixture.products)
    let (catalog, policy) = try await SummaryFixture.appView(store)
    let t0 = Fixture.now
    func summarize(_ history: UserHistory, at t: Int64) -> UserSummary {
      UserSummary(transactions: history.transactions, renewals: history.renewalInfos, catalog: catalog, policy: policy, at: t)
    }
    let first = [Fixture.transaction("1", purchase: t0 - 100, expires: t0 + 1_000)]
    _ = try await store.ingest([UserPurchases(user: Fixture.user("u1"), transactions: first)], atMs: t0)

    // The reader reads the stamp, then the history; a write comes; the reader's rewrite is refused.
    let read = try #require(try await SummaryFixture.stored(store, ["u1"])["u1"])
    let history = try await store.history(of: Fixture.user("u1"))
    _ = try await store.ingest(
      [UserPurchases(user: Fixture.user("u1"), transactions: [Fixture.transaction("2", original: "1", purchase: t0 + 900, expires: t0 + 2_000)])],
      atMs: t0 + 10)
    let stale = summarize(history, at: t0 + 20)
    #expect(
      try await store.rewriteSummaries(
        appId: "a1", environment: .production, [SummaryRewrite(userId: "u1", expectedStamp: read.stamp, summary: stale)]) == 0)
    let kept = try #require(try await SummaryFixture.stored(store, ["u1"])["u1"])
    #expect(kept.summary?.computedAtMs == t0 + 10)
    #expect(kept.summary?.validUntilMs == t0 + 900)

    // Without a write in between it is stored, keeping the stamp (a later rewrite still matches).
    let fresh = summarize(try await store.history(of: Fixture.user("u1")), at: t0 + 950)
    #expect(
      try await store.rewriteSummaries(
        appId: "a1", environment: .production, [SummaryRewrite(userId: "u1", expectedStamp: kept.stamp, summary: fresh)]) == 1)
    let rewritten = try #require(try await SummaryFixture.stored(store, ["u1"])["u1"])
    #expect(rewritten.stamp == kept.stamp)
    #expect(rewritten.summary == fresh)

    // With no summary read (none stored): stored while there is none and the user exists...
    #expect(
      try await store.rewriteSummaries(
        appId: "a1", environment: .production, [SummaryRewrite(userId: "u1", expectedStamp: nil, summary: stale)]) == 0)
    #expect(
      try await store.rewriteSummaries(
        appId: "a1", environment: .production, [SummaryRewrite(userId: "never-seen", expectedStamp: nil, summary: stale)]) == 0)
    #expect(try await SummaryFixture.stored(store, ["never-seen"]).isEmpty)
    // ...and never for a user erased after the reader read the history.
    let before = try await store.history(of: Fixture.user("u1"))
    let stamp = try #require(try await SummaryFixture.stored(store, ["u1"])["u1"]?.stamp)
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
    for expected in [stamp, nil] {
      #expect(
        try await store.rewriteSummaries(
          appId: "a1", environment: .production, [SummaryRewrite(userId: "u1", expectedStamp: expected, summary: summarize(before, at: t0 + 960))]) == 0)
    }
    #expect(try await SummaryFixture.stored(store, ["u1"]).isEmpty)
    // A user erased and written again: the old stamp does not match the new write's.
    _ = try await store.ingest([UserPurchases(user: Fixture.user("u1"), transactions: first)], atMs: t0 + 970)
    #expect(
      try await store.rewriteSummaries(
        appId: "a1", environment: .production, [SummaryRewrite(userId: "u1", expectedStamp: stamp, summary: summarize(before, at: t0 + 980))]) == 0)
    #expect(try await SummaryFixture.stored(store, ["u1"])["u1"]?.summary?.computedAtMs == t0 + 970)
  }

  /// summaries: after random writes (ingests, submissions under TRANSFER, notifications, erasures),
  /// every user's stored summary answers as the history does at every instant of its window
  static func summaryProperty(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.putProducts(appId: "a1", products: SummaryFixture.products)
    var rng = SummaryRandom(seed: 20_261_205)
    let policy = EligibilityPolicy(
      refundsBlockIntro: true, lapsedSubscribersGetIntro: false, billingRetryEntitled: true, purchaseSharing: .transfer)
    _ = try await store.setPolicy(appId: "a1", policy: policy)
    let (catalog, storedPolicy) = try await SummaryFixture.appView(store)
    let users = (0..<6).map { "u\($0)" }
    let day: Int64 = 86_400_000
    var now = Fixture.now
    var answered = 0
    for step in 0..<40 {
      now += Int64(rng.next(in: 0..<(3 * Int(day))))
      let userId = users[rng.next(in: 0..<users.count)]
      let user = Fixture.user(userId)
      var transactions: [Transaction] = []
      var renewals: [RenewalInfo] = []
      for _ in 0..<rng.next(in: 1..<4) {
        let original = "o\(rng.next(in: 0..<8))"
        let product = ["monthly", "yearly", "pro", "pass", "lifetime", "other"][rng.next(in: 0..<6)]
        let purchase = now - Int64(rng.next(in: 0..<(40 * Int(day))))
        let id = rng.next(in: 0..<3) == 0 ? original : "\(original)-\(purchase)"
        var t = Fixture.transaction(
          id, original: original, product: product, purchase: purchase,
          expires: product == "lifetime" || product == "pass" ? nil : purchase + Int64(rng.next(in: 1..<(30 * Int(day)))),
          trial: rng.next(in: 0..<4) == 0, signed: now - Int64(rng.next(in: 0..<1_000)))
        if rng.next(in: 0..<5) == 0 { t.revocationDate = purchase + Int64(rng.next(in: 0..<(5 * Int(day)))) }
        if rng.next(in: 0..<6) == 0 { t.inAppOwnershipType = .familyShared }
        transactions.append(t)
        if rng.next(in: 0..<3) == 0 {
          var r = Fixture.renewal(original, product: product, signed: now, retry: rng.next(in: 0..<2) == 0)
          if rng.next(in: 0..<2) == 0 { r.gracePeriodExpiresDate = now + Int64(rng.next(in: -Int(day)..<(10 * Int(day)))) }
          if rng.next(in: 0..<2) == 0 { r.eligibleWinBackOfferIds = ["wb"] }
          renewals.append(r)
        }
      }
      switch rng.next(in: 0..<10) {
      case 0:
        _ = try await store.deleteUsers(appId: "a1", userIds: [userId])
      case 1, 2:
        _ = try await store.applyNotification(
          appId: "a1", notificationId: "n\(step)", receivedMs: now,
          updates: [UserPurchases(user: user, transactions: transactions, renewalInfos: renewals)])
      default:
        // A submission: under TRANSFER it takes the original transactions from their other owners.
        _ = try await store.ingest(
          [UserPurchases(user: user, transactions: transactions, renewalInfos: renewals, submittedMs: now)], atMs: now)
      }
      let rows = try await SummaryFixture.stored(store, users)
      for id in users {
        let history = try await store.history(of: Fixture.user(id))
        guard let row = rows[id] else {
          #expect(history.transactions.isEmpty && history.renewalInfos.isEmpty, "step \(step): \(id) has data but no summary")
          continue
        }
        let summary = try #require(row.summary, "step \(step): \(id)'s summary does not decode")
        let until = summary.validUntilMs ?? (summary.computedAtMs + 400 * day)
        var instants = [now, until - 1]
        for _ in 0..<3 { instants.append(now + Int64(rng.next(in: 0..<Int(max(1, until - now))))) }
        for t in instants where t >= summary.computedAtMs && t < until && t >= now {
          let fromSummary = try #require(
            summary.evaluation(catalog: catalog, policy: storedPolicy, at: t), "step \(step): \(id) at \(t)")
          let fromHistory = try await SummaryFixture.fromHistory(store, id, at: t)
          #expect(fromSummary == fromHistory, "step \(step): \(id) at \(t)")
          let products = catalog.products.map(\.productId) + ["other"]
          #expect(fromSummary.eligibility(for: products) == fromHistory.eligibility(for: products), "step \(step): \(id) at \(t)")
          answered += 1
        }
      }
    }
    #expect(answered > 200, "only \(answered) answers compared")
  }
}

/// SplitMix64, seeded: the same writes on every store and every run.
struct SummaryRandom {
  var state: UInt64
  init(seed: UInt64) { state = seed }

  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  mutating func next(in range: Range<Int>) -> Int {
    range.lowerBound + Int(next() % UInt64(range.count))
  }
}
