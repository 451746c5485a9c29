import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusJSON
import SubstatusWire

// MARK: AdminService: retention rules (docs/architecture.md "Retention Messaging")
//
// An app's rules choose what its retention endpoint (`POST /v1/apps/{app_id}/apple/retention`,
// RetentionEndpoint.swift) answers Apple's realtime request with
// (https://developer.apple.com/documentation/retentionmessaging/responding-to-realtime-retention-messaging-requests).

extension SubstatusService {
  /// At most this many rules per app.
  static let maxRetentionRules = 200

  public func putRetentionRules(_ request: Substatus_V1_PutRetentionRulesRequest, _ context: ServerContext) async throws -> Substatus_V1_PutRetentionRulesResponse {
    let cached = try await app(request.appID, context)
    guard var wire = request.rules else { throw invalidArgument("rules", "is required") }
    guard wire.rules.count <= Self.maxRetentionRules else {
      throw batchTooLarge("rules.rules", limit: Self.maxRetentionRules, count: wire.rules.count)
    }
    _ = try RetentionRuleSet(validating: wire)
    wire.updatedMs = environment.now()
    let payload = wire.serializedBytes()
    try await stored { () throws(StoreError) in
      try await retentionRuleStore.putRetentionRules(appId: request.appID, rules: StoredRetentionRules(payload: payload, updatedMs: wire.updatedMs))
    }
    invalidateRetentionRules(request.appID)
    await audit(
      context, tenant: cached.app.tenantId, action: "PutRetentionRules", resource: "apps/\(request.appID)/retention-rules",
      details: "\(wire.rules.count) rules")
    var response = Substatus_V1_PutRetentionRulesResponse()
    response.rules = wire
    return response
  }

  public func getRetentionRules(_ request: Substatus_V1_GetRetentionRulesRequest, _ context: ServerContext) async throws -> Substatus_V1_GetRetentionRulesResponse {
    _ = try await app(request.appID, context)
    var response = Substatus_V1_GetRetentionRulesResponse()
    response.rules = try await storedRetentionRules(appId: request.appID)?.wire
    guard response.rules != nil else { throw Self.noRetentionRules(request.appID) }
    return response
  }

  public func testRetentionRules(_ request: Substatus_V1_TestRetentionRulesRequest, _ context: ServerContext) async throws -> Substatus_V1_TestRetentionRulesResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    if !request.productID.isEmpty { try requireID(request.productID, "product_id", limits: limits) }
    let environment = try SubscriptionDomain.Environment(wire: request.environment)
    guard let rules = try await storedRetentionRules(appId: request.appID) else { throw Self.noRetentionRules(request.appID) }
    let facts = try await retentionFacts(
      userId: request.userID, productId: request.productID.isEmpty ? nil : request.productID, environment: environment,
      cached, at: self.environment.now())
    var response = Substatus_V1_TestRetentionRulesResponse()
    response.answer = rules.ruleSet.decide(facts).wire(requestProductId: facts.productId)
    response.facts = facts.wire
    return response
  }

  static func noRetentionRules(_ appId: String) -> RPCError {
    RPCError(code: .notFound, message: "app \(ErrorText.quoted(appId)) has no retention rules (substatus retention put)")
  }

  /// An app's stored rules, decoded: the wire form (as stored, with `updated_ms`) and the domain's.
  struct DecodedRetentionRules: Sendable {
    var wire: Substatus_V1_RetentionRules
    var ruleSet: RetentionRuleSet
  }

  /// The retention endpoint's decoded rules per app (``cachedRetentionRules(appId:)``).
  struct RetentionRuleCache: Sendable {
    struct Entry: Sendable {
      /// `nil`: the app had no rules.
      var rules: DecodedRetentionRules?
      var fetchedMs: Int64
    }
    var entries: [String: Entry] = [:]
    /// Counts invalidations: a read that saw one happen meanwhile does not fill the cache.
    var generation: UInt64 = 0
  }

  /// The app's rules for the retention endpoint; `nil` when none were put. Read and decoded once
  /// per `cacheTTLMilliseconds` per app, as ``loadApp(_:)`` keeps apps: PutRetentionRules on this
  /// instance drops the entry at once (``invalidateRetentionRules(_:)``), a put on another instance
  /// sharing the store is seen within the TTL. The admin RPCs read the store itself.
  func cachedRetentionRules(appId: String) async throws(RPCError) -> DecodedRetentionRules? {
    let now = environment.now()
    let (hit, generation) = retentionRuleCache.withLock { cache in
      (cache.entries[appId].flatMap { now - $0.fetchedMs < limits.cacheTTLMilliseconds && $0.fetchedMs <= now ? $0 : nil },
       cache.generation)
    }
    if let hit { return hit.rules }
    let rules = try await storedRetentionRules(appId: appId)
    retentionRuleCache.withLock { cache in
      // An invalidation while the store was read may have dropped newer rules than these: keep none.
      if cache.generation == generation { cache.entries[appId] = RetentionRuleCache.Entry(rules: rules, fetchedMs: now) }
    }
    return rules
  }

  /// Drops an app's cached retention rules (after this instance changed them).
  func invalidateRetentionRules(_ appId: String) {
    retentionRuleCache.withLock { cache in
      cache.entries[appId] = nil
      cache.generation &+= 1
    }
  }

  /// The app's rules as stored; `nil` when none were put.
  func storedRetentionRules(appId: String) async throws(RPCError) -> DecodedRetentionRules? {
    guard let row = try await stored({ () throws(StoreError) in try await retentionRuleStore.retentionRules(appId: appId) }) else {
      return nil
    }
    do {
      let wire = try Substatus_V1_RetentionRules(serializedBytes: row.payload)
      return DecodedRetentionRules(wire: wire, ruleSet: try RetentionRuleSet(validating: wire))
    } catch {
      log.info("stored retention rules do not decode", [("app_id", .string(appId))])
      throw RPCError(code: .internal, message: "the app's stored retention rules cannot be read")
    }
  }

  /// One user's retention facts now (``retentionFacts(userIds:productId:environment:_:at:)``).
  func retentionFacts(
    userId: String, productId: String?, environment: SubscriptionDomain.Environment, _ cached: CachedApp, at time: Int64
  ) async throws(RPCError) -> RetentionFacts {
    try await retentionFacts(userIds: [userId], productId: productId, environment: environment, cached, at: time)[userId]
      ?? RetentionFacts(productId: productId ?? "")
  }

  /// Users' retention facts now, by user id: from their summaries when they answer (one
  /// statement, no history decoded), else from their histories (whose summaries are then stored,
  /// as every summary read does). `productId` `nil`: each user's current subscription
  /// (``UserSummary/currentSubscriptionProductId``).
  func retentionFacts(
    userIds: [String], productId: String?, environment: SubscriptionDomain.Environment, _ cached: CachedApp,
    at time: Int64
  ) async throws(RPCError) -> [String: RetentionFacts] {
    func facts(_ summary: UserSummary) -> RetentionFacts {
      summary.retentionFacts(
        productId: productId ?? summary.currentSubscriptionProductId ?? "", catalog: cached.catalog,
        policy: cached.app.policy, at: time)
    }
    return try await read(
      userIds, environment: environment, cached, at: time, rewrite: true,
      fromSummary: { (encoded) throws(UserSummaryDecodingError) -> RetentionFacts? in facts(try encoded.decoded()) },
      fromHistory: { _, summary in
        // With `rewrite`, every history's summary is computed at `time` and answers then.
        summary.map(facts) ?? RetentionFacts(productId: productId ?? "")
      })
  }
}

extension RetentionRuleSet {
  /// The domain's rules of a wire rule set, checked: every problem is an `INVALID_ARGUMENT`
  /// field violation naming the rule by index and id (`rules[2] (ruleId "x")`).
  init(validating wire: Substatus_V1_RetentionRules) throws(RPCError) {
    var violations: [(field: String, description: String)] = []
    if let problem = RetentionValidation.uuidProblem(wire.defaultMessageIdentifier) {
      violations.append(("default_message_identifier", problem))
    }
    var seen = Set<String>()
    var rules: [RetentionRule] = []
    for (i, rule) in wire.rules.enumerated() {
      let label = "rules[\(i)] (ruleId \(ErrorText.quoted(rule.ruleID, maxBytes: 64)))"
      func bad(_ field: String, _ problem: String) { violations.append((label, "\(field) \(problem)")) }
      if let problem = RetentionValidation.ruleIdProblem(rule.ruleID) {
        bad("rule_id", problem)
      } else if !seen.insert(rule.ruleID).inserted {
        bad("rule_id", "appears twice")
      }
      var condition = RetentionCondition()
      let when = rule.when ?? Substatus_V1_RetentionCondition()
      for (j, productId) in when.productIDs.enumerated() {
        if let problem = RetentionValidation.idProblem(productId) { bad("when.product_ids[\(j)]", problem) }
      }
      condition.productIds = when.productIDs
      func count(_ value: Int32, _ field: String) -> Int {
        if value < 0 { bad(field, "must not be negative") }
        return Int(value)
      }
      condition.minPaidPeriods = count(when.minPaidPeriods, "when.min_paid_periods")
      condition.minTenureDays = count(when.minTenureDays, "when.min_tenure_days")
      if case .maxPaidPeriods(let v)? = when.maxPaidPeriodsSet {
        condition.maxPaidPeriods = count(v, "when.max_paid_periods")
        if v >= 0 && Int(v) < condition.minPaidPeriods { bad("when.max_paid_periods", "is below min_paid_periods") }
      }
      if case .maxTenureDays(let v)? = when.maxTenureDaysSet {
        condition.maxTenureDays = count(v, "when.max_tenure_days")
        if v >= 0 && Int(v) < condition.minTenureDays { bad("when.max_tenure_days", "is below min_tenure_days") }
      }
      if case .maxPromotionalOffersUsed(let v)? = when.maxPromotionalOffersUsedSet {
        condition.maxPromotionalOffersUsed = count(v, "when.max_promotional_offers_used")
      }
      if case .introUsed(let v)? = when.introUsedSet { condition.introUsed = v }
      if case .trialUsed(let v)? = when.trialUsedSet { condition.trialUsed = v }
      if case .promotionalOfferEligible(let v)? = when.promotionalOfferEligibleSet { condition.promotionalOfferEligible = v }
      if case .winBackEligible(let v)? = when.winBackEligibleSet { condition.winBackEligible = v }
      if case .billingIssue(let v)? = when.billingIssueSet { condition.billingIssue = v }
      if case .refunded(let v)? = when.refundedSet { condition.refunded = v }
      if case .autoRenewEnabled(let v)? = when.autoRenewEnabledSet { condition.autoRenewEnabled = v }
      for (j, name) in when.billingPlanTypes.enumerated() {
        if let plan = BillingPlanType(rawValue: name) {
          condition.billingPlanTypes.append(plan)
        } else {
          bad("when.billing_plan_types[\(j)]", "must be BILLED_UPFRONT or MONTHLY, not \(ErrorText.quoted(name, maxBytes: 32))")
        }
      }
      let answer: RetentionAnswer
      switch rule.answer {
      case nil:
        bad("answer", "is required: one of message, alternate_product, promotional_offer")
        continue
      case .message(let m)?:
        if let problem = RetentionValidation.uuidProblem(m.messageIdentifier) { bad("message.message_identifier", problem) }
        answer = .message(messageIdentifier: m.messageIdentifier)
      case .alternateProduct(let a)?:
        if let problem = RetentionValidation.uuidProblem(a.messageIdentifier) {
          bad("alternate_product.message_identifier", problem)
        }
        if let problem = RetentionValidation.idProblem(a.productID) { bad("alternate_product.product_id", problem) }
        answer = .alternateProduct(messageIdentifier: a.messageIdentifier, productId: a.productID)
      case .promotionalOffer(let p)?:
        if let problem = RetentionValidation.uuidProblem(p.messageIdentifier) {
          bad("promotional_offer.message_identifier", problem)
        }
        if let problem = RetentionValidation.idProblem(p.offerID) { bad("promotional_offer.offer_id", problem) }
        if !p.productID.isEmpty, let problem = RetentionValidation.idProblem(p.productID) {
          bad("promotional_offer.product_id", problem)
        }
        answer = .promotionalOffer(
          messageIdentifier: p.messageIdentifier, offerId: p.offerID, productId: p.productID.isEmpty ? nil : p.productID)
      }
      rules.append(RetentionRule(ruleId: rule.ruleID, condition: condition, answer: answer))
    }
    guard violations.isEmpty else { throw invalidArguments(violations) }
    self.init(defaultMessageIdentifier: wire.defaultMessageIdentifier, rules: rules)
  }
}

/// The checks of retention rules' strings.
enum RetentionValidation {
  /// Why `value` is not a UUID (8-4-4-4-12 hexadecimal digits), or `nil`.
  static func uuidProblem(_ value: String) -> String? {
    if value.isEmpty { return "is required" }
    let bytes = Array(value.utf8)
    guard bytes.count == 36 else { return "must be a UUID, not \(ErrorText.quoted(value, maxBytes: 40))" }
    for (i, b) in bytes.enumerated() {
      let isHex = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66)
      if [8, 13, 18, 23].contains(i) ? b != 0x2D : !isHex {
        return "must be a UUID, not \(ErrorText.quoted(value, maxBytes: 40))"
      }
    }
    return nil
  }

  /// Why `value` is not a rule id (1 to 64 letters, digits, `-`, `_`, `.`), or `nil`.
  static func ruleIdProblem(_ value: String) -> String? {
    if value.isEmpty { return "is required" }
    guard value.utf8.count <= 64 else { return "is longer than 64 bytes" }
    let ok = value.utf8.allSatisfy { b in
      (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x5F || b == 0x2E
    }
    return ok ? nil : "may hold only letters, digits, '-', '_' and '.'"
  }

  /// Why `value` is not a product or offer id (1 to 255 bytes, no control characters), or `nil`.
  static func idProblem(_ value: String) -> String? {
    if value.isEmpty { return "is required" }
    guard value.utf8.count <= 255 else { return "is longer than 255 bytes" }
    return DisplayText.hasControl(value) ? "contains control characters" : nil
  }
}

extension RetentionDecision {
  /// The wire answer; a promotional offer without a product is for `requestProductId`.
  func wire(requestProductId: String) -> Substatus_V1_RetentionAnswer {
    var w = Substatus_V1_RetentionAnswer()
    w.ruleID = ruleId ?? ""
    switch answer {
    case .message(let id):
      var m = Substatus_V1_RetentionMessage()
      m.messageIdentifier = id
      w.message = m
    case .alternateProduct(let id, let productId):
      var a = Substatus_V1_RetentionAlternateProduct()
      a.messageIdentifier = id
      a.productID = productId
      w.alternateProduct = a
    case .promotionalOffer(let id, let offerId, let productId):
      var p = Substatus_V1_RetentionPromotionalOffer()
      p.messageIdentifier = id
      p.offerID = offerId
      p.productID = productId ?? requestProductId
      w.promotionalOffer = p
    }
    return w
  }
}

extension RetentionFacts {
  /// The wire facts.
  var wire: Substatus_V1_RetentionFacts {
    var w = Substatus_V1_RetentionFacts()
    w.productID = productId
    w.subscriptionGroupID = subscriptionGroupId ?? ""
    w.known = known
    w.paidPeriods = Int32(clamping: paidPeriods)
    w.tenureDays = Int32(clamping: tenureDays)
    w.introUsed = introUsed
    w.trialUsed = trialUsed
    w.promotionalOffersUsed = Int32(clamping: promotionalOffersUsed)
    w.promotionalOfferEligible = promotionalOfferEligible
    w.winBackEligible = winBackEligible
    w.billingIssue = billingIssue
    w.refunded = refunded
    w.billingPlanType = billingPlan.rawValue
    w.autoRenewEnabled = autoRenewEnabled
    return w
  }
}
