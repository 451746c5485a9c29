// Eligibility answered from facts (rules 8, 9, 10 and 19): the same code for an evaluation of the
// history (``SubscriptionEvaluation/eligibility(for:)-(String)``) and for a stored summary's facts
// (``UserSummary/Encoded/eligibility(catalog:policy:fingerprint:at:)``), which need nothing else.

/// Every product's intro, promotional and win-back answers for one user at one instant, worked
/// out from the per-group and app-wide facts of an evaluation: the intro and promotional answers
/// once per group (every product of a group gets the same ones), so answering a product copies no
/// facts.
public struct EligibilityAnswers: Sendable, Hashable {
  let catalog: Catalog
  /// The catalog's groups first, in catalog order, then the groups seen only in the history.
  let facts: [GroupFacts]
  /// Per group (indexed like `facts`): the introductory answer for a product that has an intro
  /// offer, and the promotional answer.
  private(set) var introductoryAnswers: [OfferEligibility]
  let promotionalAnswers: [OfferEligibility]

  init(facts: [GroupFacts], appFacts: AppFacts, catalog: Catalog, policy: EligibilityPolicy) {
    self.catalog = catalog
    self.facts = facts
    var introductoryAnswers: [OfferEligibility] = []
    var promotionalAnswers: [OfferEligibility] = []
    introductoryAnswers.reserveCapacity(facts.count)
    promotionalAnswers.reserveCapacity(facts.count)
    for group in facts {
      introductoryAnswers.append(Self.introductory(group: group, policy: policy))
      promotionalAnswers.append(Self.promotional(group: group, appFacts: appFacts, policy: policy))
    }
    self.introductoryAnswers = introductoryAnswers
    self.promotionalAnswers = promotionalAnswers
  }

  /// Whether some group's introductory answer is ``EligibilityReason/newCustomer`` (no transaction
  /// of the group is known).
  public var hasNewCustomerAnswer: Bool { introductoryAnswers.contains { $0.reason == .newCustomer } }

  /// These answers for a user whose Apple Account's whole history Apple answered and is stored
  /// (rule 24, docs/architecture.md): every ``EligibilityReason/newCustomer`` introductory answer
  /// is ``EligibilityReason/newCustomerVerified``, Apple's word that the account never bought in
  /// the group (https://developer.apple.com/documentation/appstoreserverapi/get-transaction-history:
  /// history by any id of the customer, the appTransactionId included).
  ///
  /// - Parameter exceptGroups: groups in which the account did buy although these answers know no
  ///   purchase: those of original transactions the user lost to another app user, or acquired
  ///   later, by purchase sharing (the account's history holds them, the user's answers at that
  ///   instant do not). Their answers stay ``EligibilityReason/newCustomer``.
  public func withVerifiedAppleAccount(exceptGroups: Set<String> = []) -> EligibilityAnswers {
    var copy = self
    for i in copy.introductoryAnswers.indices
    where copy.introductoryAnswers[i].reason == .newCustomer && !exceptGroups.contains(facts[i].id) {
      copy.introductoryAnswers[i].reason = .newCustomerVerified
    }
    return copy
  }

  /// Intro and promotional eligibility for several products, in the order asked.
  public func eligibility(for productIds: [String]) -> [ProductEligibility] {
    var result: [ProductEligibility] = []
    result.reserveCapacity(productIds.count)
    for productId in productIds { result.append(eligibility(for: productId)) }
    return result
  }

  /// Intro (rule 8) and promotional (rule 9) eligibility for one product, under the policy
  /// (rule 10). Checks, first match wins:
  /// - both offers: `UNKNOWN_PRODUCT` (not in the catalog), `NOT_A_SUBSCRIPTION` (not
  ///   auto-renewable);
  /// - intro: `NO_INTRO_OFFER`, `INTRO_ALREADY_USED`, `ACTIVE_SUBSCRIPTION` / `IN_GRACE_PERIOD` /
  ///   `IN_BILLING_RETRY`, `REFUNDED_IN_GROUP` (if `refundsBlockIntro`), a lapsed subscriber
  ///   (`LAPSED_NO_INTRO_USED`, eligible, or `LAPSED_SUBSCRIBER`, not eligible, when
  ///   `lapsedSubscribersGetIntro` is off), else `NEW_CUSTOMER`;
  /// - promotional: `EXISTING_SUBSCRIBER` (active, grace or retry), `LAPSED_SUBSCRIBER` (any
  ///   auto-renewable transaction), else `NEVER_SUBSCRIBED`, in the product's group or, with
  ///   `promoScope` `APP`, in any group;
  /// - win-back (rule 19): one answer per catalog win-back offer, from the group's latest renewal
  ///   info (``winBackOffers(_:group:)``); none for unknown and non-auto-renewable products.
  public func eligibility(for productId: String) -> ProductEligibility {
    guard let position = catalog.position(of: productId) else {
      let unknown = OfferEligibility(eligible: false, reason: .unknownProduct)
      return ProductEligibility(
        productId: productId, subscriptionGroupId: nil, introductory: unknown,
        promotional: unknown)
    }
    let groupIndex = catalog.groupIndexOfProduct[position]
    guard groupIndex >= 0 else {
      let none = OfferEligibility(eligible: false, reason: .notASubscription)
      return ProductEligibility(
        productId: productId, subscriptionGroupId: catalog.products[position].subscriptionGroupId,
        introductory: none, promotional: none)
    }
    // The catalog's groups come first in `facts`, in catalog order, so `groupIndex` indexes both.
    return ProductEligibility(
      productId: productId, subscriptionGroupId: catalog.subscriptionGroupIds[groupIndex],
      introductory: catalog.introductoryOffers[position]
        ? introductoryAnswers[groupIndex] : OfferEligibility(eligible: false, reason: .noIntroOffer),
      promotional: promotionalAnswers[groupIndex],
      winBackOffers: winBackOffers(catalog.winBackOfferIds[position], group: groupIndex))
  }

  /// The introductory answer (rule 8) for a product of `group` that has an intro offer.
  private static func introductory(group: GroupFacts, policy: EligibilityPolicy) -> OfferEligibility {
    if let evidence = group.introEvidence {
      return OfferEligibility(
        eligible: false, reason: .introAlreadyUsed, evidenceTransactionId: evidence)
    }
    switch group.state {
    case .active:
      return OfferEligibility(
        eligible: false, reason: .activeSubscription, evidenceTransactionId: group.stateEvidence)
    case .gracePeriod:
      return OfferEligibility(
        eligible: false, reason: .inGracePeriod, evidenceTransactionId: group.stateEvidence)
    case .billingRetry:
      return OfferEligibility(
        eligible: false, reason: .inBillingRetry, evidenceTransactionId: group.stateEvidence)
    case .expired, .revoked, .neverSubscribed: break
    }
    if policy.refundsBlockIntro, let evidence = group.refundEvidence {
      return OfferEligibility(
        eligible: false, reason: .refundedInGroup, evidenceTransactionId: evidence)
    }
    if let newest = group.newestTransactionId {
      return policy.lapsedSubscribersGetIntro
        ? OfferEligibility(eligible: true, reason: .lapsedNoIntroUsed, evidenceTransactionId: newest)
        : OfferEligibility(eligible: false, reason: .lapsedSubscriber, evidenceTransactionId: newest)
    }
    return OfferEligibility(eligible: true, reason: .newCustomer)
  }

  /// The promotional answer (rule 9) for a product of `group`.
  private static func promotional(
    group: GroupFacts, appFacts: AppFacts, policy: EligibilityPolicy
  ) -> OfferEligibility {
    let existing: String?
    let newest: String?
    let current: Bool
    switch policy.promoScope {
    case .group:
      current = group.state == .active || group.state == .gracePeriod
        || group.state == .billingRetry
      existing = group.stateEvidence
      newest = group.newestTransactionId
    case .app:
      current = appFacts.hasCurrentSubscription
      existing = appFacts.currentEvidence
      newest = appFacts.newestTransactionId
    }
    if current {
      return OfferEligibility(
        eligible: true, reason: .existingSubscriber, evidenceTransactionId: existing)
    }
    if let newest {
      return OfferEligibility(
        eligible: true, reason: .lapsedSubscriber, evidenceTransactionId: newest)
    }
    return OfferEligibility(eligible: false, reason: .neverSubscribed)
  }
}
