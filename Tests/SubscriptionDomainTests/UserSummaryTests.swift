import Testing

@testable import SubscriptionDomain

/// A random but reproducible user and app for the summary's property test: a catalog (products
/// moving between groups, non-renewing terms with and without a duration, intro and win-back
/// offers), a policy, a history from every source's shapes (renewals, upgrades, refunds and
/// family removals labelled every way, family sharing, duplicate copies with newer data, unknown
/// products with and without a group), renewal infos (grace, billing retry, win-back lists, signed
/// and unsigned, placed by product only), and purchase-sharing ownership gaps.
struct RandomSummaryCase {
  var catalog: Catalog
  var policy: EligibilityPolicy
  var history: [Transaction] = []
  var renewals: [RenewalInfo] = []
  var gaps: [OwnershipGap] = []
  /// Instants worth testing at: every instant of the data, and around them.
  var instants: [Int64] = []
  var start: Int64

  static let autoRenewables = ["sub.a", "sub.b", "sub.c", "sub.d", "sub.e"]
  static let groupIds = ["g1", "g2", "g3"]
  static let winBackIds = ["wb.1", "wb.2", "wb.3"]

  init(seed: UInt64) {
    var rng = SeededGenerator(seed: seed &* 0x9E37_79B9 &+ 12_345)
    func chance(_ n: Int) -> Bool { Int.random(in: 0..<n, using: &rng) == 0 }

    // The catalog: each auto-renewable in a random group (so a product's transactions may carry
    // another group than the catalog's), some missing (classified from the transaction).
    var products: [Product] = []
    var groupOf: [String: String] = [:]
    for id in Self.autoRenewables where !chance(6) {
      let group = Self.groupIds.randomElement(using: &rng)!
      groupOf[id] = group
      products.append(
        Product(
          productId: id, type: .autoRenewable, subscriptionGroupId: chance(8) ? nil : group,
          hasIntroductoryOffer: Bool.random(using: &rng),
          winBackOfferIds: Self.winBackIds.filter { _ in Bool.random(using: &rng) }))
    }
    if !chance(4) {
      products.append(Product(productId: "pass.week", type: .nonRenewing, duration: ISO8601Duration(weeks: 1)))
    }
    if !chance(4) {
      products.append(Product(productId: "pass.month", type: .nonRenewing, duration: ISO8601Duration(months: 1)))
    }
    if chance(5) { products.append(Product(productId: "pass.nodur", type: .nonRenewing)) }
    if !chance(4) { products.append(Product(productId: "lifetime", type: .nonConsumable)) }
    if !chance(4) { products.append(Product(productId: "coins", type: .consumable)) }
    if chance(3) { products.append(Product(productId: "free.sub", type: .freeSubscription)) }
    products.shuffle(using: &rng)
    catalog = Catalog(products: products)
    policy = EligibilityPolicy(
      refundsBlockIntro: Bool.random(using: &rng), lapsedSubscribersGetIntro: Bool.random(using: &rng),
      billingRetryEntitled: Bool.random(using: &rng), promoScope: Bool.random(using: &rng) ? .group : .app,
      purchaseSharing: PurchaseSharing.allCases.randomElement(using: &rng)!)

    start = jan1 + Int64.random(in: 0..<(30 * day), using: &rng)
    var nextId = 1
    func newId() -> String {
      defer { nextId += 1 }
      return String(5_000_000 + nextId)
    }
    func revoke(_ t: inout Transaction, within length: Int64) {
      t.revocationDate = t.purchaseDate + Int64.random(in: 0...max(0, length), using: &rng)
      switch Int.random(in: 0..<6, using: &rng) {
      case 0: t.revocationType = .refundFull
      case 1: t.revocationType = .familyRevoke
      case 2: t.notificationType = "REVOKE"
      case 3: t.notificationType = "REFUND"
      case 4: t.revocationReason = .appIssue
      default: t.revocationReason = .other
      }
    }

    let lengths: [Int64] = [5 * 60_000, hour, 7 * day, 30 * day]
    var originals: [String] = []
    for _ in 0..<Int.random(in: 0...4, using: &rng) {
      let otx = newId()
      originals.append(otx)
      let product = (Self.autoRenewables + ["unknown.sub"]).randomElement(using: &rng)!
      // The group the transactions carry: usually the catalog's, sometimes another one.
      let carried = chance(5) ? Self.groupIds.randomElement(using: &rng)! : (groupOf[product] ?? "g9")
      let family = chance(5)
      // Rule 23: an organization's assignment (or a value this build does not know).
      let otherOwnership: String? = family ? nil : chance(8) ? "ASSIGNED" : chance(20) ? "LOANED" : nil
      // Rule 22: a subscription billed monthly within a 12-month commitment.
      let commitment = chance(5)
      var at = start + Int64.random(in: 0..<(40 * day), using: &rng)
      for period in 0..<Int.random(in: 1...5, using: &rng) {
        let length = lengths.randomElement(using: &rng)!
        var t = tx(
          period == 0 ? otx : newId(), chance(4) ? Self.autoRenewables.randomElement(using: &rng)! : product,
          at, chance(20) ? nil : at + length, otx: otx, family: family, group: chance(10) ? nil : carried)
        if let otherOwnership { t.rawInAppOwnershipType = otherOwnership }
        if commitment {
          t.billingPlanType = .monthly
          t.commitment = TransactionCommitmentInfo(
            billingPeriodNumber: period + 1, totalBillingPeriods: 12,
            commitmentExpiresDate: chance(6) ? nil : start + 365 * day, commitmentPrice: 107_880)
        } else if chance(6) {
          t.billingPlanType = .billedUpfront
        }
        if period == 0 || chance(6) {
          switch Int.random(in: 0..<6, using: &rng) {
          case 0: t.isTrialPeriod = true
          case 1: t.isInIntroOfferPeriod = true
          case 2: t.offerType = .introductory; t.offerDiscountType = .payAsYouGo
          case 3: t.offerType = .offerCode
          case 4: t.offerType = .winBack
          default: break
          }
        }
        if chance(6) { revoke(&t, within: length) }
        if chance(8) {
          // An upgrade: a later purchase of the same subscription starts inside this period.
          t.isUpgraded = Bool.random(using: &rng)
          history.append(t)
          at += Int64.random(in: 0...length, using: &rng)
          continue
        }
        if chance(7) { t.signedDate = at + Int64.random(in: 0..<day, using: &rng) }
        history.append(t)
        if chance(6) {
          // Another copy of the same transaction, older or newer on Apple's clock.
          var copy = t
          copy.signedDate = (t.signedDate ?? at) + Int64.random(in: -day...day, using: &rng)
          if copy.revocationDate == nil { revoke(&copy, within: length) } else { copy.revocationDate = nil }
          history.append(copy)
        }
        at += length + (chance(4) ? Int64.random(in: 0..<(70 * day), using: &rng) : 0)
      }
      if !chance(3) {
        var r = renewal(
          otx, product, next: chance(3) ? Self.autoRenewables.randomElement(using: &rng)! : product,
          autoRenew: Bool.random(using: &rng), retry: Bool.random(using: &rng),
          grace: chance(2) ? at + Int64.random(in: -(3 * day)...(20 * day), using: &rng) : nil,
          signed: chance(2) ? at - Int64.random(in: 0..<(2 * day), using: &rng) : nil)
        r.eligibleWinBackOfferIds = Self.winBackIds.filter { _ in chance(2) }
        if chance(2) {
          r.renewalBillingPlanType = .monthly
          r.commitment = RenewalCommitmentInfo(
            rawCommitmentAutoRenewStatus: chance(4) ? nil : Int.random(in: 0...1, using: &rng),
            rawCommitmentRenewalBillingPlanType: chance(2) ? "MONTHLY" : "BILLED_UPFRONT",
            commitmentRenewalDate: start + 365 * day)
        }
        renewals.append(r)
        if chance(5) {
          var older = r
          older.signedDate = (r.signedDate ?? at) - day
          older.isInBillingRetryPeriod.toggle()
          renewals.append(older)
        }
      }
    }
    if chance(4) {
      // A renewal info whose subscription has no transaction: placed by its product.
      var r = renewal(
        newId(), Self.autoRenewables.randomElement(using: &rng)!, retry: Bool.random(using: &rng),
        grace: chance(2) ? start + Int64.random(in: 0..<(90 * day), using: &rng) : nil,
        signed: chance(2) ? start : nil)
      r.eligibleWinBackOfferIds = Self.winBackIds.filter { _ in chance(2) }
      renewals.append(r)
    }
    for product in ["pass.week", "pass.month", "pass.nodur", "lifetime", "coins", "free.sub", "mystery"]
    where chance(3) {
      for _ in 0..<Int.random(in: 1...3, using: &rng) {
        var t = tx(newId(), product, start + Int64.random(in: 0..<(60 * day), using: &rng))
        t.inAppOwnershipType = chance(5) ? .familyShared : .purchased
        if chance(5) { revoke(&t, within: 20 * day) }
        history.append(t)
      }
    }
    // Purchase sharing: the user lost some subscriptions for a while, or got one by a transfer.
    for otx in originals where chance(5) {
      let from: Int64? = chance(3) ? nil : start + Int64.random(in: 0..<(60 * day), using: &rng)
      let until: Int64? = chance(2) ? nil : (from ?? start) + Int64.random(in: 1..<(30 * day), using: &rng)
      gaps.append(OwnershipGap(originalTransactionId: otx, fromMs: from, untilMs: until))
    }
    history.shuffle(using: &rng)

    var instants: Set<Int64> = [start - day, start]
    for t in history {
      for instant in [t.purchaseDate, t.expiresDate, t.revocationDate].compactMap({ $0 }) {
        instants.insert(instant)
        instants.insert(instant - 1)
        instants.insert(instant &+ SubscriptionEvaluator.billingRetryLimit)
        instants.insert(instant &+ SubscriptionEvaluator.billingRetryLimit + 1)
      }
    }
    for r in renewals { if let g = r.gracePeriodExpiresDate { instants.insert(g); instants.insert(g - 1) } }
    for g in gaps { for b in [g.fromMs, g.untilMs].compactMap({ $0 }) { instants.insert(b); instants.insert(b - 1) } }
    self.instants = instants.sorted()
  }

  /// The evaluation from the history, as a read without a summary makes it.
  func evaluate(at time: Int64) -> SubscriptionEvaluation {
    let owned = OwnershipGap.owned(transactions: history, renewals: renewals, gaps: gaps, at: time)
    return SubscriptionEvaluator.evaluate(
      history: owned.transactions, renewals: owned.renewals, catalog: catalog, policy: policy, at: time)
  }

  /// The app's named entitlements: random sets of its products (and of products it lacks).
  var definitions: [EntitlementDefinition] {
    var rng = SeededGenerator(seed: UInt64(truncatingIfNeeded: start) &+ 3)
    let all = askedProducts
    return (0..<4).map { n in
      EntitlementDefinition(entitlementId: "e\(n)", productIds: all.filter { _ in Int.random(in: 0..<3, using: &rng) == 0 })
    }
  }

  /// The named entitlements from the history, as a read without a summary makes them.
  func namedEntitlements(_ evaluation: SubscriptionEvaluation, at time: Int64) -> [NamedEntitlement] {
    let owned = OwnershipGap.owned(transactions: history, renewals: renewals, gaps: gaps, at: time)
    return evaluation.namedEntitlements(definitions, history: owned.transactions, renewals: owned.renewals)
  }

  /// Every product worth asking about: the catalog's, and ones it lacks.
  var askedProducts: [String] {
    catalog.products.map(\.productId) + ["unknown.sub", "mystery", "nope"]
  }
}

@Suite("Per-user summary (seeded properties)")
struct UserSummaryTests {
  /// Seeds per batch: 40 batches of 100 cases.
  static let casesPerBatch: UInt64 = 100

  /// Summarizes at an instant t0, round-trips the summary through its codec, and checks that at
  /// instants in [t0, validUntil) (both ends, the data's own instants, and random ones) its
  /// answers are the history's: groups, entitlements, revocations, app facts, every product's
  /// intro, promotional and win-back answers with reasons and evidence, and report counts.
  @Test("a summary answers as the history at every instant of its window", arguments: 0..<40)
  func answersAsTheHistory(batch: Int) throws {
    for n in 0..<Self.casesPerBatch {
      let seed = UInt64(batch) * Self.casesPerBatch + n
      let c = RandomSummaryCase(seed: seed)
      var rng = SeededGenerator(seed: seed &+ 77)
      let t0 = Bool.random(using: &rng)
        ? c.instants.randomElement(using: &rng)!
        : c.start + Int64.random(in: -day..<(200 * day), using: &rng)
      let summary = UserSummary(
        transactions: c.history, renewals: c.renewals, gaps: c.gaps, catalog: c.catalog, policy: c.policy, at: t0)
      let bytes = summary.encoded()
      let decoded = try UserSummary(decoding: bytes)
      #expect(decoded == summary, "seed \(seed): the codec lost something")
      // CheckEligibility's read: the header, then only the group and app facts.
      let stored = try UserSummary.Encoded(bytes)
      let fingerprint = SummaryFingerprint(catalog: c.catalog, policy: c.policy)
      let until = summary.validUntilMs ?? .max
      #expect(until > t0)
      var times: [Int64] = [t0, until == .max ? t0 + 400 * day : until - 1]
      times += c.instants.filter { $0 >= t0 && $0 < until }.prefix(12)
      for _ in 0..<4 {
        times.append(t0 + Int64.random(in: 0..<min(until - t0, 400 * day), using: &rng))
      }
      for t in times {
        let expected = c.evaluate(at: t)
        guard let answered = decoded.evaluation(catalog: c.catalog, policy: c.policy, at: t) else {
          Issue.record("seed \(seed): no answer at \(t) in [\(t0), \(until))")
          continue
        }
        #expect(answered == expected, "seed \(seed), t0 \(t0), t \(t), until \(until)")
        #expect(
          answered.eligibility(for: c.askedProducts) == expected.eligibility(for: c.askedProducts),
          "seed \(seed), t0 \(t0), t \(t), until \(until)")
        #expect(answered.reportCounts == expected.reportCounts, "seed \(seed), t \(t)")
        let answers = try #require(
          try stored.eligibility(catalog: c.catalog, policy: c.policy, fingerprint: fingerprint, at: t),
          "seed \(seed): no eligibility answers at \(t) in [\(t0), \(until))")
        #expect(
          answers.eligibility(for: c.askedProducts) == expected.eligibility(for: c.askedProducts),
          "seed \(seed), t0 \(t0), t \(t), until \(until): the summary's facts answer otherwise")
        #expect(
          decoded.namedEntitlements(c.definitions, of: answered) == c.namedEntitlements(expected, at: t),
          "seed \(seed), t0 \(t0), t \(t), until \(until)")
        if answered != expected { break }
      }
      // Outside its window, or for another catalog or policy, a summary does not answer.
      #expect(decoded.evaluation(catalog: c.catalog, policy: c.policy, at: t0 - 1) == nil)
      if let validUntil = summary.validUntilMs {
        #expect(decoded.evaluation(catalog: c.catalog, policy: c.policy, at: validUntil) == nil)
      }
      var other = c.policy
      other.refundsBlockIntro.toggle()
      #expect(decoded.evaluation(catalog: c.catalog, policy: other, at: t0) == nil)
      let moved = Catalog(products: c.catalog.products + [Product(productId: "new", type: .consumable)])
      #expect(decoded.evaluation(catalog: moved, policy: c.policy, at: t0) == nil)
      #expect(try stored.eligibility(catalog: c.catalog, policy: c.policy, fingerprint: fingerprint, at: t0 - 1) == nil)
      #expect(
        try stored.eligibility(
          catalog: c.catalog, policy: other, fingerprint: SummaryFingerprint(catalog: c.catalog, policy: other), at: t0)
          == nil)
    }
  }

  /// The property test above catches a fact the codec drops only if the generated cases exercise
  /// it: every field of the summary must be set (and differ from its default) in many cases.
  @Test("the generated cases exercise every fact of the summary")
  func everyFactIsExercised() {
    var seen: [String: Int] = [:]
    func count(_ name: String, _ present: Bool) { if present { seen[name, default: 0] += 1 } }
    for seed in 0..<UInt64(1_000) {
      let c = RandomSummaryCase(seed: seed)
      var rng = SeededGenerator(seed: seed &+ 77)
      let t0 = c.instants.randomElement(using: &rng)!
      let s = UserSummary(
        transactions: c.history, renewals: c.renewals, gaps: c.gaps, catalog: c.catalog, policy: c.policy, at: t0)
      count("validUntil", s.validUntilMs != nil)
      count("validUntil nil", s.validUntilMs == nil)
      for state in SubscriptionState.allCases { count("state \(state)", s.groups.contains { $0.state == state }) }
      count("group product", s.groups.contains { $0.productId != nil })
      count("group transaction", s.groups.contains { $0.transactionId != nil })
      count("group original", s.groups.contains { $0.originalTransactionId != nil })
      count("group expires", s.groups.contains { $0.expiresDate != nil })
      count("group grace", s.groups.contains { $0.gracePeriodExpiresDate != nil })
      count("group autoRenewProduct", s.groups.contains { $0.autoRenewProductId != nil })
      count("group autoRenew", s.groups.contains { $0.autoRenewEnabled })
      count("group family", s.groups.contains { $0.ownership == .familyShared })
      count("group billingIssue", s.groups.contains { $0.billingIssue })
      count("group inTrial", s.groups.contains { $0.inTrial })
      count("group inIntro", s.groups.contains { $0.inIntroOffer })
      count("group assigned", s.groups.contains { $0.ownership == .assigned })
      count("group monthly", s.groups.contains { $0.billingPlan == .monthly })
      count("group upfront", s.groups.contains { $0.billingPlan == .billedUpfront })
      count("group commitment", s.groups.contains { $0.commitment != nil })
      count("group commitment renews", s.groups.contains { $0.commitment?.willRenew == true })
      count("group commitment no end", s.groups.contains { $0.commitment != nil && $0.commitment?.expiresDate == nil })
      count("group commitment upfront next", s.groups.contains { $0.commitment?.renewalBillingPlan == .billedUpfront })
      count("group commitment monthly next", s.groups.contains { $0.commitment?.renewalBillingPlan == .monthly })
      count("entitlement assigned", s.entitlements.contains { $0.ownership == .assigned })
      count("history-only group", s.groups.count > c.catalog.subscriptionGroupIds.count)
      for type in ProductType.allCases where type != .consumable {
        count("entitlement \(type)", s.entitlements.contains { $0.type == type })
      }
      count("entitlement family", s.entitlements.contains { $0.ownership == .familyShared })
      count("entitlement no end", s.entitlements.contains { $0.expiresDate == nil })
      count("entitlement no group", s.entitlements.contains { $0.subscriptionGroupId == nil })
      for kind in RevocationKind.allCases { count("revocation \(kind)", s.revocations.contains { $0.kind == kind }) }
      count("revocation family", s.revocations.contains { $0.ownership == .familyShared })
      count("fact stateEvidence", s.facts.contains { $0.stateEvidence != nil })
      count("fact newest", s.facts.contains { $0.newestTransactionId != nil })
      count("fact intro", s.facts.contains { $0.introEvidence != nil })
      count("fact refund", s.facts.contains { $0.refundEvidence != nil })
      count("fact winBack", s.facts.contains { $0.winBack != nil })
      count("fact winBack ids", s.facts.contains { !($0.winBack?.eligibleOfferIds.isEmpty ?? true) })
      count("app current", s.appFacts.hasCurrentSubscription)
      count("app currentEvidence", s.appFacts.currentEvidence != nil)
      count("app newest", s.appFacts.newestTransactionId != nil)
      count("gap", !c.gaps.isEmpty)
      count("named originals", !s.named.originals.isEmpty)
      count("named renewsInto", !s.named.renewsInto.isEmpty)
      count("named newest", !s.named.newest.isEmpty)
      count("named newest revoked", s.named.newest.values.contains { $0.revocationDate != nil })
      count("named newest upgraded", s.named.newest.values.contains { $0.isUpgraded })
      count("named newest no expiry", s.named.newest.values.contains { $0.expiresDate == nil })
      let named = s.namedEntitlements(c.definitions, of: s.evaluation(catalog: c.catalog, policy: c.policy, at: t0)!)
      for state in SubscriptionState.allCases { count("named \(state)", named.contains { $0.state == state }) }
      count("named willRenew", named.contains { $0.willRenew })
    }
    let expected = [
      "validUntil", "validUntil nil", "group product", "group transaction", "group original", "group expires",
      "group grace", "group autoRenewProduct", "group autoRenew", "group family", "group billingIssue",
      "group inTrial", "group inIntro", "history-only group", "entitlement family", "entitlement no end",
      "entitlement no group", "revocation family", "fact stateEvidence", "fact newest", "fact intro",
      "fact refund", "fact winBack", "fact winBack ids", "app current", "app currentEvidence", "app newest", "gap",
      "named originals", "named renewsInto", "named newest", "named newest revoked", "named newest upgraded",
      "named newest no expiry", "named willRenew", "group assigned", "group monthly", "group upfront",
      "group commitment", "group commitment renews", "group commitment no end", "group commitment upfront next",
      "group commitment monthly next", "entitlement assigned",
    ] + SubscriptionState.allCases.map { "state \($0)" } + SubscriptionState.allCases.map { "named \($0)" }
      + ProductType.allCases.filter { $0 != .consumable }.map { "entitlement \($0)" }
      + RevocationKind.allCases.map { "revocation \($0)" }
    for name in expected {
      #expect(seen[name, default: 0] >= 20, "\(name): \(seen[name, default: 0]) of 1000 cases")
    }
  }

  @Test("the codec is compact: a typical user takes 100 to 300 bytes")
  func compact() {
    var sizes: [Int] = []
    for seed in 0..<UInt64(200) {
      let c = RandomSummaryCase(seed: seed)
      sizes.append(
        UserSummary(transactions: c.history, renewals: c.renewals, gaps: c.gaps, catalog: c.catalog, policy: c.policy, at: c.start + 20 * day)
          .encoded().count)
    }
    sizes.sort()
    let median = sizes[sizes.count / 2]
    #expect(median <= 300, "median \(median) bytes")
  }

  @Test("decoding rejects truncated, extended and garbage input with an error", arguments: 0..<20)
  func rejectsBadInput(seed: Int) throws {
    let c = RandomSummaryCase(seed: UInt64(seed))
    let bytes = UserSummary(
      transactions: c.history, renewals: c.renewals, gaps: c.gaps, catalog: c.catalog, policy: c.policy, at: c.start + 10 * day
    ).encoded()
    let whole = try UserSummary.Encoded(bytes)
    let fingerprint = SummaryFingerprint(value: whole.fingerprint)
    let answers = try #require(
      try whole.eligibility(catalog: c.catalog, policy: c.policy, fingerprint: fingerprint, at: whole.computedAtMs))
    for length in 0..<bytes.count {
      #expect(throws: UserSummaryDecodingError.self) { try UserSummary(decoding: Array(bytes.prefix(length))) }
      // Cut anywhere: the eligibility read throws, or (cut in the named entitlements' facts,
      // which it never reads) answers as the whole summary does.
      if let cut = try? UserSummary.Encoded(Array(bytes.prefix(length))),
        let partial = try? cut.eligibility(catalog: c.catalog, policy: c.policy, fingerprint: fingerprint, at: cut.computedAtMs)
      {
        #expect(partial == answers, "cut at \(length) of \(bytes.count)")
      }
    }
    #expect(throws: UserSummaryDecodingError.self) { try UserSummary(decoding: bytes + [0]) }
    var wrongVersion = bytes
    wrongVersion[0] = UserSummary.formatVersion &+ 1
    #expect(throws: UserSummaryDecodingError.self) { try UserSummary(decoding: wrongVersion) }
    // Random garbage and random byte flips: an error or a summary, never a trap.
    var rng = SeededGenerator(seed: UInt64(seed) &+ 5)
    for _ in 0..<300 {
      var flipped = bytes
      for _ in 0..<Int.random(in: 1...4, using: &rng) {
        flipped[Int.random(in: 0..<flipped.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
      }
      _ = try? UserSummary(decoding: flipped)
      let garbage = (0..<Int.random(in: 0..<64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
      _ = try? UserSummary(decoding: [UserSummary.formatVersion] + garbage)
      // The sections CheckEligibility reads alone: an error or answers, never a trap.
      for input in [flipped, [UserSummary.formatVersion] + garbage] {
        if let stored = try? UserSummary.Encoded(input) {
          _ = try? stored.eligibility(
            catalog: c.catalog, policy: c.policy, fingerprint: SummaryFingerprint(value: stored.fingerprint),
            at: stored.computedAtMs)
        }
      }
    }
  }

  @Test("the fingerprint is stable across processes and tells catalogs and policies apart")
  func fingerprint() {
    let catalog = Catalog(products: [
      Product(productId: "a", type: .autoRenewable, subscriptionGroupId: "g", hasIntroductoryOffer: true),
      Product(productId: "p", type: .nonRenewing, duration: ISO8601Duration(months: 1)),
    ])
    // A constant: FNV-1a of the canonical encoding, the same in every process (Hasher is not).
    #expect(SummaryFingerprint(catalog: catalog, policy: .default).value == Self.knownFingerprint)
    var seen: Set<UInt64> = [SummaryFingerprint(catalog: catalog, policy: .default).value]
    let variants: [Catalog] = [
      Catalog(products: [catalog.products[1], catalog.products[0]]),
      Catalog(products: [Product(productId: "a", type: .autoRenewable, subscriptionGroupId: "h", hasIntroductoryOffer: true), catalog.products[1]]),
      Catalog(products: [Product(productId: "a", type: .autoRenewable, subscriptionGroupId: "g"), catalog.products[1]]),
      Catalog(products: [catalog.products[0], Product(productId: "p", type: .nonRenewing, duration: ISO8601Duration(weeks: 4))]),
      Catalog(products: [
        Product(productId: "a", type: .autoRenewable, subscriptionGroupId: "g", hasIntroductoryOffer: true, winBackOfferIds: ["w"]),
        catalog.products[1],
      ]),
    ]
    for v in variants { seen.insert(SummaryFingerprint(catalog: v, policy: .default).value) }
    for p in [
      EligibilityPolicy(refundsBlockIntro: true), EligibilityPolicy(lapsedSubscribersGetIntro: false),
      EligibilityPolicy(billingRetryEntitled: true), EligibilityPolicy(promoScope: .app),
      EligibilityPolicy(purchaseSharing: .transfer),
    ] {
      seen.insert(SummaryFingerprint(catalog: catalog, policy: p).value)
    }
    #expect(seen.count == 1 + variants.count + 5)
  }

  /// A transaction evaluation ignores (a product neither in the catalog nor with a group) still
  /// decides a named entitlement's inactive state: its revocation ends the window.
  @Test("a named entitlement's revocation of an ignored product ends the window")
  func namedEntitlementOfAnIgnoredProduct() throws {
    let catalog = Catalog(products: [Product(productId: "sub", type: .autoRenewable, subscriptionGroupId: "g")])
    let history = [tx("1", "mystery", jan1, revoked: jan1 + 10 * day)]
    let definitions = [EntitlementDefinition(entitlementId: "old", productIds: ["mystery"])]
    let summary = UserSummary(transactions: history, renewals: [], catalog: catalog, policy: .default, at: jan1 + day)
    #expect(summary.validUntilMs == jan1 + 10 * day)
    for t in [jan1 + day, jan1 + 10 * day - 1] {
      let evaluation = try #require(summary.evaluation(catalog: catalog, policy: .default, at: t))
      #expect(summary.namedEntitlements(definitions, of: evaluation).map(\.state) == [.expired])
    }
    let after = SubscriptionEvaluator.evaluate(history: history, renewals: [], catalog: catalog, at: jan1 + 10 * day)
    #expect(after.namedEntitlements(definitions, history: history, renewals: []).map(\.state) == [.revoked])
  }

  static let knownFingerprint: UInt64 = 6_965_936_269_958_986_545
}
