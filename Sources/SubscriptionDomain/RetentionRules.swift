// Retention rules (docs/architecture.md "Retention Messaging"): what an app answers Apple's
// realtime "Get Retention Message" request with
// (https://developer.apple.com/documentation/retentionmessaging/responding-to-realtime-retention-messaging-requests),
// chosen by the first rule whose condition holds for the subscriber's facts, else the default
// message. Pure: the facts come from the per-user summary (``UserSummary/retentionFacts(productId:catalog:policy:at:)``).

/// What a retention rule answers: one of the three bodies of Apple's `RealtimeResponseBody`
/// (https://developer.apple.com/documentation/retentionmessaging/realtimeresponsebody).
public enum RetentionAnswer: Sendable, Hashable {
  /// A text message, with or without an image (Apple's `message`).
  case message(messageIdentifier: String)
  /// A switch-plan message suggesting `productId` (Apple's `alternateProduct`).
  case alternateProduct(messageIdentifier: String, productId: String)
  /// A promotional offer for `productId` (`nil`: the request's product), Apple's `promotionalOffer`.
  case promotionalOffer(messageIdentifier: String, offerId: String, productId: String?)

  /// The message identifier the answer names.
  public var messageIdentifier: String {
    switch self {
    case .message(let id), .alternateProduct(let id, _), .promotionalOffer(let id, _, _): id
    }
  }
}

/// What must hold of a subscriber for a rule to answer; `nil` (and empty lists, and minimums of
/// 0) are not tested. Every tested field must hold.
public struct RetentionCondition: Sendable, Hashable {
  /// The request's product is one of these.
  public var productIds: [String] = []
  /// At least this many paid periods in the group.
  public var minPaidPeriods: Int = 0
  /// At most this many paid periods in the group.
  public var maxPaidPeriods: Int? = nil
  /// At least this many days since the first purchase in the group.
  public var minTenureDays: Int = 0
  /// At most this many days since the first purchase in the group.
  public var maxTenureDays: Int? = nil
  /// An introductory offer was (not) used in the group.
  public var introUsed: Bool? = nil
  /// A free trial was (not) used in the group.
  public var trialUsed: Bool? = nil
  /// At most this many promotional offers redeemed in the group.
  public var maxPromotionalOffersUsed: Int? = nil
  /// A promotional offer may (not) be redeemed now.
  public var promotionalOfferEligible: Bool? = nil
  /// A win-back offer may (not) be redeemed now.
  public var winBackEligible: Bool? = nil
  /// The group is (not) in a billing issue.
  public var billingIssue: Bool? = nil
  /// A transaction of the group was (not) refunded.
  public var refunded: Bool? = nil
  /// The current billing plan is one of these.
  public var billingPlanTypes: [BillingPlanType] = []
  /// Auto-renewal is (not) on.
  public var autoRenewEnabled: Bool? = nil

  /// A condition that always holds.
  public init() {}

  /// Whether every tested field holds for `facts`.
  public func holds(for facts: RetentionFacts) -> Bool {
    func same(_ wanted: Bool?, _ actual: Bool) -> Bool { wanted.map { $0 == actual } ?? true }
    if !productIds.isEmpty && !productIds.contains(facts.productId) { return false }
    if facts.paidPeriods < minPaidPeriods { return false }
    if let maxPaidPeriods, facts.paidPeriods > maxPaidPeriods { return false }
    if facts.tenureDays < minTenureDays { return false }
    if let maxTenureDays, facts.tenureDays > maxTenureDays { return false }
    if let maxPromotionalOffersUsed, facts.promotionalOffersUsed > maxPromotionalOffersUsed { return false }
    if !billingPlanTypes.isEmpty && !billingPlanTypes.contains(facts.billingPlan) { return false }
    return same(introUsed, facts.introUsed) && same(trialUsed, facts.trialUsed)
      && same(promotionalOfferEligible, facts.promotionalOfferEligible)
      && same(winBackEligible, facts.winBackEligible) && same(billingIssue, facts.billingIssue)
      && same(refunded, facts.refunded) && same(autoRenewEnabled, facts.autoRenewEnabled)
  }
}

/// One rule: an id, a condition and an answer.
public struct RetentionRule: Sendable, Hashable {
  /// The tenant's id of the rule.
  public var ruleId: String
  /// What must hold.
  public var condition: RetentionCondition
  /// What it answers.
  public var answer: RetentionAnswer

  /// Creates a rule.
  public init(ruleId: String, condition: RetentionCondition = RetentionCondition(), answer: RetentionAnswer) {
    self.ruleId = ruleId
    self.condition = condition
    self.answer = answer
  }
}

/// What answers a retention request, and which rule decided (`nil`: the default message).
public struct RetentionDecision: Sendable, Hashable {
  /// The rule that matched; `nil` when none did.
  public var ruleId: String?
  /// The answer (the default message when no rule matched).
  public var answer: RetentionAnswer

  /// Creates a decision.
  public init(ruleId: String?, answer: RetentionAnswer) {
    self.ruleId = ruleId
    self.answer = answer
  }
}

/// An app's retention rules: ordered, the first whose condition holds answers.
public struct RetentionRuleSet: Sendable, Hashable {
  /// The message when no rule matches.
  public var defaultMessageIdentifier: String
  /// The rules, in order.
  public var rules: [RetentionRule]

  /// Creates a rule set.
  public init(defaultMessageIdentifier: String, rules: [RetentionRule]) {
    self.defaultMessageIdentifier = defaultMessageIdentifier
    self.rules = rules
  }

  /// The default message, as a decision.
  public var defaultDecision: RetentionDecision {
    RetentionDecision(ruleId: nil, answer: .message(messageIdentifier: defaultMessageIdentifier))
  }

  /// The first rule whose condition holds for `facts`, else the default message.
  public func decide(_ facts: RetentionFacts) -> RetentionDecision {
    for rule in rules where rule.condition.holds(for: facts) {
      return RetentionDecision(ruleId: rule.ruleId, answer: rule.answer)
    }
    return defaultDecision
  }
}

/// The facts of one subscriber's group that retention rules test, at one instant.
public struct RetentionFacts: Sendable, Hashable {
  /// The product asked about (Apple's request's `productId`).
  public var productId: String
  /// Its subscription group (from the catalog, else the group whose status names the product).
  public var subscriptionGroupId: String?
  /// Whether the user has a transaction in the group.
  public var known = false
  /// Paid periods in the group (``RetentionGroupHistory/paidPeriods``).
  public var paidPeriods = 0
  /// Whole days since the first purchase in the group; 0 when none.
  public var tenureDays = 0
  /// An introductory offer (free or paid) was used in the group.
  public var introUsed = false
  /// A free trial was used in the group.
  public var trialUsed = false
  /// Promotional offers redeemed in the group.
  public var promotionalOffersUsed = 0
  /// A promotional offer for the product may be redeemed now (rule 9).
  public var promotionalOfferEligible = false
  /// Some win-back offer of the product may be redeemed now (rule 19).
  public var winBackEligible = false
  /// The group is in the billing grace period or billing retry.
  public var billingIssue = false
  /// A transaction of the group was refunded.
  public var refunded = false
  /// The deciding transaction's billing plan (``BillingPlanType/billedUpfront`` when Apple did not
  /// say).
  public var billingPlan: BillingPlanType = .billedUpfront
  /// Auto-renewal is on.
  public var autoRenewEnabled = false

  /// Facts of a user unknown in the group.
  public init(productId: String) { self.productId = productId }
}

/// What the per-user summary keeps of one group's history for retention rules (summary format 3):
/// facts the evaluation itself does not need.
public struct RetentionGroupHistory: Sendable, Hashable {
  /// The group.
  public var subscriptionGroupId: String
  /// Paid periods: the group's transactions purchased by then, not free trials, not
  /// Family-Shared access, not priced 0, and not refunded.
  public var paidPeriods = 0
  /// The earliest purchase in the group.
  public var firstPurchaseMs: Int64? = nil
  /// A free trial was used.
  public var trialUsed = false
  /// Promotional offers redeemed (transactions with Apple's offer type 2).
  public var promotionalOffersUsed = 0

  /// An empty history of a group.
  public init(subscriptionGroupId: String) { self.subscriptionGroupId = subscriptionGroupId }

  /// Each group's history at `time` (transactions purchased later are ignored), deduplicated by
  /// transaction id, groups in order of first appearance. A transaction's group is its catalog
  /// product's, else its own `subscriptionGroupIdentifier`; others are not subscriptions.
  public static func groups(of transactions: [Transaction], catalog: Catalog, at time: Int64) -> [RetentionGroupHistory] {
    var out: [RetentionGroupHistory] = []
    var index: [String: Int] = [:]
    var seen = Set<String>()
    for t in transactions where t.purchaseDate <= time && seen.insert(t.transactionId).inserted {
      let group: String
      if let product = catalog[t.productId] {
        guard product.type == .autoRenewable else { continue }
        group = product.subscriptionGroupId ?? product.productId
      } else if let own = t.subscriptionGroupIdentifier, !own.isEmpty {
        group = own
      } else {
        continue
      }
      let i: Int
      if let existing = index[group] {
        i = existing
      } else {
        i = out.count
        index[group] = i
        out.append(RetentionGroupHistory(subscriptionGroupId: group))
      }
      out[i].firstPurchaseMs = min(out[i].firstPurchaseMs ?? .max, t.purchaseDate)
      if t.isFreeTrial { out[i].trialUsed = true }
      if t.rawOfferType == OfferType.promotional.rawValue { out[i].promotionalOffersUsed += 1 }
      let refunded = t.isRevoked(at: time) && RevocationKind(classifying: t) == .refund
      if !t.isFreeTrial && t.ownership != .familyShared && t.price != 0 && !refunded {
        out[i].paidPeriods += 1
      }
    }
    return out
  }
}

extension UserSummary {
  /// The retention facts of `productId`'s group at `time` (which must lie in the summary's window:
  /// the caller checked ``usability(fingerprint:at:)``): the group's status and eligibility facts,
  /// the eligibility answers (rules 9, 19), and the group's retention history (format 3).
  public func retentionFacts(productId: String, catalog: Catalog, policy: EligibilityPolicy, at time: Int64)
    -> RetentionFacts
  {
    var facts = RetentionFacts(productId: productId)
    let group: String?
    if let product = catalog[productId] {
      group = product.type == .autoRenewable ? (product.subscriptionGroupId ?? product.productId) : nil
    } else {
      group = groups.first { $0.productId == productId }?.subscriptionGroupId
    }
    facts.subscriptionGroupId = group
    guard let group else { return facts }
    if let status = groups.first(where: { $0.subscriptionGroupId == group }) {
      facts.known = status.state != .neverSubscribed
      facts.billingIssue = status.billingIssue
      facts.autoRenewEnabled = status.autoRenewEnabled
      facts.billingPlan = status.billingPlan ?? .billedUpfront
    }
    if let groupFacts = self.facts.first(where: { $0.id == group }) {
      facts.introUsed = groupFacts.introEvidence != nil
      facts.refunded = groupFacts.refundEvidence != nil
    }
    if let history = retention.first(where: { $0.subscriptionGroupId == group }) {
      facts.paidPeriods = history.paidPeriods
      facts.trialUsed = history.trialUsed
      facts.promotionalOffersUsed = history.promotionalOffersUsed
      if let first = history.firstPurchaseMs, time > first { facts.tenureDays = Int((time - first) / 86_400_000) }
    }
    let answers = EligibilityAnswers(facts: self.facts, appFacts: appFacts, catalog: catalog, policy: policy)
      .eligibility(for: productId)
    facts.promotionalOfferEligible = answers.promotional.eligible
    facts.winBackEligible = answers.winBackOffers.contains(where: \.eligible)
    return facts
  }
}

/// The kind of a retention answer, as events record it.
public enum RetentionAnswerKind: String, Sendable, Hashable, Codable, CaseIterable {
  /// The rules' default message (no rule matched, or the user is unknown).
  case defaultMessage = "DEFAULT_MESSAGE"
  /// A rule's message.
  case message = "MESSAGE"
  /// A rule's alternate product.
  case alternateProduct = "ALTERNATE_PRODUCT"
  /// A rule's promotional offer.
  case promotionalOffer = "PROMOTIONAL_OFFER"
}

/// What a `RETENTION_OFFERED` event records of the answer.
public struct RetentionOfferRecord: Sendable, Hashable, Codable {
  /// The kind of answer.
  public var kind: RetentionAnswerKind
  /// The rule that answered; `nil` for the default message.
  public var ruleId: String?
  /// The message identifier answered.
  public var messageIdentifier: String
  /// The alternate product, or the promotional offer's id; `nil` for a message.
  public var offeredId: String?

  /// Creates a record.
  public init(kind: RetentionAnswerKind, ruleId: String?, messageIdentifier: String, offeredId: String?) {
    self.kind = kind
    self.ruleId = ruleId
    self.messageIdentifier = messageIdentifier
    self.offeredId = offeredId
  }

  /// The record of a decision (a rule's message is ``RetentionAnswerKind/message``, the default
  /// ``RetentionAnswerKind/defaultMessage``).
  public init(decision: RetentionDecision, requestProductId: String) {
    switch decision.answer {
    case .message(let id):
      self.init(kind: decision.ruleId == nil ? .defaultMessage : .message, ruleId: decision.ruleId, messageIdentifier: id, offeredId: nil)
    case .alternateProduct(let id, let productId):
      self.init(kind: .alternateProduct, ruleId: decision.ruleId, messageIdentifier: id, offeredId: productId)
    case .promotionalOffer(let id, let offerId, _):
      self.init(kind: .promotionalOffer, ruleId: decision.ruleId, messageIdentifier: id, offeredId: offerId)
    }
  }
}

extension UserSummary {
  /// The product of the user's current auto-renewable subscription: of the groups with a product,
  /// one active, in grace or in billing retry first, then the latest to expire; `nil` when none.
  public var currentSubscriptionProductId: String? {
    func current(_ g: GroupStatus) -> Bool { g.state == .active || g.state == .gracePeriod || g.state == .billingRetry }
    return groups.filter { $0.productId != nil }.max { a, b in
      if current(a) != current(b) { return !current(a) }
      return (a.expiresDate ?? .min) < (b.expiresDate ?? .min)
    }?.productId
  }
}
