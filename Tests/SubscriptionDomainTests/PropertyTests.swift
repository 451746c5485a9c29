import Testing

@testable import SubscriptionDomain

/// A random but reproducible user history.
struct RandomUser {
  var history: [Transaction] = []
  var renewals: [RenewalInfo] = []
  var time: Int64 = 0

  static let groups: [(String, [String])] = [
    (Group.premium, ["premium.monthly", "premium.yearly", "premium.weekly"]),
    (Group.pro, ["pro.monthly", "pro.yearly"]),
    (Group.family, ["family.monthly"]),
    (Group.extra, ["extra.monthly"]),
  ]

  init(seed: UInt64) {
    var rng = SeededGenerator(seed: seed)
    var nextId = 1
    func newId() -> String {
      defer { nextId += 1 }
      return String(1_000_000 + nextId)
    }
    let start = jan1 + Int64.random(in: 0..<(60 * day), using: &rng)
    for (group, products) in RandomUser.groups where Bool.random(using: &rng) {
      let subscriptions = Int.random(in: 1...2, using: &rng)
      for _ in 0..<subscriptions {
        let otx = newId()
        let family = Int.random(in: 0..<5, using: &rng) == 0
        var at = start + Int64.random(in: 0..<(200 * day), using: &rng)
        let periods = Int.random(in: 1...6, using: &rng)
        for period in 0..<periods {
          let product = products.randomElement(using: &rng)!
          let lengths: [Int64] = [7 * day, 30 * day, 31 * day, 5 * 60_000]
          let length = lengths.randomElement(using: &rng)!
          var t = tx(
            period == 0 ? otx : newId(), product, at, at + length, otx: otx, family: family,
            group: group)
          if period == 0 {
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: t.isTrialPeriod = true
            case 1: t.isInIntroOfferPeriod = true
            case 2: t.offerType = .introductory; t.offerDiscountType = .payUpFront
            case 3: t.offerType = .offerCode
            default: break
            }
          }
          if Int.random(in: 0..<8, using: &rng) == 0 {
            t.revocationDate = at + Int64.random(in: 0..<length, using: &rng)
            t.revocationReason = Bool.random(using: &rng) ? .appIssue : .other
            if Bool.random(using: &rng) { t.isUpgraded = true }
          }
          history.append(t)
          // Occasional gap between periods (a lapse).
          at += length + (Int.random(in: 0..<4, using: &rng) == 0 ? 20 * day : 0)
        }
        if Bool.random(using: &rng) {
          let graceEnd: Int64? =
            Bool.random(using: &rng) ? at + Int64.random(in: 0..<(20 * day), using: &rng) : nil
          renewals.append(
            renewal(
              otx, products.randomElement(using: &rng)!,
              next: products.randomElement(using: &rng)!, autoRenew: Bool.random(using: &rng),
              retry: Bool.random(using: &rng), grace: graceEnd))
        }
      }
    }
    for product in ["pass.30days", "pass.1month", "lifetime", "coins.100", "newsstand.free", "mystery"]
    where Int.random(in: 0..<3, using: &rng) == 0 {
      for _ in 0..<Int.random(in: 1...3, using: &rng) {
        var t = tx(newId(), product, start + Int64.random(in: 0..<(200 * day), using: &rng))
        if Int.random(in: 0..<5, using: &rng) == 0 {
          t.revocationDate = t.purchaseDate + Int64.random(in: 0..<(20 * day), using: &rng)
        }
        history.append(t)
      }
    }
    time = start + Int64.random(in: 0..<(300 * day), using: &rng)
  }
}

let allProducts = Fixture.catalog.products.map(\.productId) + ["nope"]

/// What entitlements cover: the group for auto-renewables, the product otherwise.
func entitlementKeys(_ evaluation: SubscriptionEvaluation) -> Set<String> {
  Set(evaluation.entitlements.map { $0.subscriptionGroupId ?? $0.productId })
}

@Suite("Properties (seeded)")
struct PropertyTests {
  @Test("evaluation is invariant under permutation and duplication of the input", arguments: 0..<300)
  func permutationAndDuplication(seed: Int) {
    let user = RandomUser(seed: UInt64(seed))
    var rng = SeededGenerator(seed: UInt64(seed) &+ 7_777)
    let policy = EligibilityPolicy(
      refundsBlockIntro: Bool.random(using: &rng), lapsedSubscribersGetIntro: Bool.random(using: &rng),
      billingRetryEntitled: Bool.random(using: &rng), promoScope: Bool.random(using: &rng) ? .group : .app)
    let reference = evaluate(user.history, user.renewals, at: user.time, policy: policy)

    var noisy = user.history
    for original in user.history where Int.random(in: 0..<3, using: &rng) == 0 {
      noisy.append(original)  // an exact duplicate
      var stale = original  // an older record of the same transaction
      stale.revocationDate = nil
      stale.rawRevocationReason = nil
      stale.isUpgraded = false
      noisy.append(stale)
    }
    noisy.shuffle(using: &rng)
    var renewals = user.renewals + user.renewals
    renewals.shuffle(using: &rng)
    let shuffled = evaluate(noisy, renewals, at: user.time, policy: policy)
    #expect(shuffled == reference)
    #expect(shuffled.eligibility(for: allProducts) == reference.eligibility(for: allProducts))
    #expect(shuffled.reportCounts == reference.reportCounts)
  }

  @Test("adding an intro transaction to a group never makes its intro eligible", arguments: 0..<300)
  func introNeverComesBack(seed: Int) {
    let user = RandomUser(seed: UInt64(seed))
    var rng = SeededGenerator(seed: UInt64(seed) &+ 99)
    let (group, products) = RandomUser.groups.randomElement(using: &rng)!
    var trial = tx(
      "trial-\(seed)", products.randomElement(using: &rng)!,
      user.time - Int64.random(in: 0..<(400 * day), using: &rng), nil, group: group)
    trial.expiresDate = trial.purchaseDate + 7 * day
    if Bool.random(using: &rng) { trial.isTrialPeriod = true } else { trial.offerType = .introductory }
    if Bool.random(using: &rng) { trial.revocationDate = trial.purchaseDate + day }
    if Bool.random(using: &rng) { trial.inAppOwnershipType = .familyShared }
    for policy in [EligibilityPolicy.default, EligibilityPolicy(refundsBlockIntro: true, lapsedSubscribersGetIntro: false)] {
      let after = evaluate(user.history + [trial], user.renewals, at: user.time, policy: policy)
      for answer in after.eligibility(for: products) {
        #expect(!answer.introductory.eligible, "\(answer)")
      }
    }
  }

  @Test("revoking a transaction never adds an entitlement", arguments: 0..<300)
  func revocationNeverAdds(seed: Int) {
    let user = RandomUser(seed: UInt64(seed))
    guard !user.history.isEmpty else { return }
    var rng = SeededGenerator(seed: UInt64(seed) &+ 4_242)
    for policy in [EligibilityPolicy.default, EligibilityPolicy(billingRetryEntitled: true)] {
      let before = evaluate(user.history, user.renewals, at: user.time, policy: policy)
      var history = user.history
      let index = Int.random(in: 0..<history.count, using: &rng)
      let purchase = history[index].purchaseDate
      let latest = max(purchase, user.time)
      history[index].revocationDate = purchase + Int64.random(in: 0...(latest - purchase), using: &rng)
      let after = evaluate(history, user.renewals, at: user.time, policy: policy)
      #expect(entitlementKeys(after).isSubset(of: entitlementKeys(before)))
    }
  }

  @Test("at every instant only the documented states, consistent with the data", arguments: 0..<200)
  func documentedStates(seed: Int) {
    let user = RandomUser(seed: UInt64(seed))
    var rng = SeededGenerator(seed: UInt64(seed) &+ 31)
    for _ in 0..<5 {
      let time = jan1 + Int64.random(in: 0..<(400 * day), using: &rng)
      let policy = EligibilityPolicy(billingRetryEntitled: Bool.random(using: &rng))
      let evaluation = evaluate(user.history, user.renewals, at: time, policy: policy)
      // Every catalog group exactly once, in catalog order, first.
      let ids = evaluation.groups.map(\.subscriptionGroupId)
      #expect(Array(ids.prefix(4)) == Fixture.catalog.subscriptionGroupIds)
      #expect(Set(ids).count == ids.count)
      for status in evaluation.groups {
        #expect(SubscriptionState.allCases.contains(status.state))
        let inGroup = user.history.filter {
          $0.subscriptionGroupIdentifier == status.subscriptionGroupId && $0.purchaseDate <= time
        }
        // Rule 12: an upgraded transaction never covers, and a later purchase of the same
        // subscription ends an earlier period.
        let covering = inGroup.filter { t in
          !t.isUpgraded && t.purchaseDate <= time && time < (t.expiresDate ?? .min) && !t.isRevoked(at: time)
            && !inGroup.contains {
              $0.originalTransactionId == t.originalTransactionId && $0.purchaseDate > t.purchaseDate
            }
        }
        #expect((status.state == .active) == !covering.isEmpty)
        #expect(status.billingIssue == (status.state == .gracePeriod || status.state == .billingRetry))
        if status.state == .neverSubscribed { #expect(inGroup.isEmpty) }
        if status.state == .gracePeriod { #expect((status.gracePeriodExpiresDate ?? .min) > time) }
        if status.state != .active { #expect(!status.inTrial && !status.inIntroOffer) }
        let entitled = evaluation.entitlements.contains {
          $0.subscriptionGroupId == status.subscriptionGroupId
        }
        switch status.state {
        case .active, .gracePeriod: #expect(entitled)
        case .billingRetry: #expect(entitled == policy.billingRetryEntitled)
        case .expired, .revoked, .neverSubscribed: #expect(!entitled)
        }
      }
      for entitlement in evaluation.entitlements {
        #expect(entitlement.type != .consumable)
        if let expires = entitlement.expiresDate { #expect(expires > time) }
      }
      for answer in evaluation.eligibility(for: allProducts) {
        #expect(
          answer.introductory.eligible
            == [.newCustomer, .lapsedNoIntroUsed].contains(answer.introductory.reason))
        #expect(
          answer.promotional.eligible
            == [.existingSubscriber, .lapsedSubscriber].contains(answer.promotional.reason))
      }
    }
  }
}
