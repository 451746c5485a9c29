// A per-user summary of an evaluation: what answering the user's eligibility and status needs at
// every instant of a window, computed when the user's data is written and read in place of the
// history (docs/evaluation-cache.md "Per-user summaries").

/// One user's evaluation at an instant `t0` (``computedAtMs``), kept so that reads at any instant
/// `t` with `t0 <= t < validUntilMs` answer from it without the history: the groups' statuses,
/// entitlements, revocations and the facts eligibility reads (per group and app, win-back
/// sources). It holds only for the catalog and policy it was computed with (``fingerprint``).
///
/// ```swift
/// let summary = UserSummary(
///   transactions: history, renewals: renewals, gaps: [], catalog: catalog, policy: policy,
///   at: nowMs)
/// let bytes = summary.encoded()  // stored beside the history, in the write's commit
/// // later, at `t`:
/// if let evaluation = try UserSummary(decoding: bytes).evaluation(catalog: catalog, policy: policy, at: t) {
///   // identical to SubscriptionEvaluator.evaluate(history:renewals:catalog:policy:at: t)
/// }
/// ```
public struct UserSummary: Sendable, Hashable {
  /// The codec's current format, the first byte of ``encoded()``.
  /// Format 3 appends each group's retention history (``retention``); a format 2 summary does not
  /// decode, so its user is read from the history until the next write summarizes it again.
  public static let formatVersion: UInt8 = 3

  /// The ``SummaryFingerprint`` of the catalog and policy it was computed with.
  public let fingerprint: UInt64
  /// The instant evaluated (`t0`).
  public let computedAtMs: Int64
  /// The first instant after ``computedAtMs`` at which time alone could change an answer; `nil`:
  /// time alone never changes it.
  public let validUntilMs: Int64?
  /// The groups' statuses (``SubscriptionEvaluation/groups``).
  public let groups: [GroupStatus]
  /// The entitlements (``SubscriptionEvaluation/entitlements``).
  public let entitlements: [Entitlement]
  /// The revocations (``SubscriptionEvaluation/revocations``).
  public let revocations: [Revocation]
  let facts: [GroupFacts]
  let appFacts: AppFacts
  /// What named entitlements read of the history (``namedEntitlements(_:of:)``).
  let named: NamedEntitlementFacts
  /// What retention rules read of each group's history (``retentionFacts(productId:catalog:policy:at:)``).
  public let retention: [RetentionGroupHistory]

  /// Summarizes a user's history at `time`, as ``SubscriptionEvaluator/evaluate(history:renewals:catalog:policy:at:)``
  /// evaluates it, for the user's ownership at `time` (``OwnershipGap/owned(transactions:renewals:gaps:at:)``).
  /// The window ends at the first instant after `time` at which the evaluation could change by
  /// time alone (``SubscriptionEvaluator/evaluateWithValidity(history:renewals:catalog:policy:at:)``)
  /// or a gap starts or ends (what the user owns changes then).
  public init(
    transactions: [Transaction], renewals: [RenewalInfo], gaps: [OwnershipGap] = [],
    catalog: Catalog, policy: EligibilityPolicy, at time: Int64
  ) {
    let owned = OwnershipGap.owned(transactions: transactions, renewals: renewals, gaps: gaps, at: time)
    let (evaluation, validUntil) = SubscriptionEvaluator.evaluateWithValidity(
      history: owned.transactions, renewals: owned.renewals, catalog: catalog, policy: policy, at: time)
    var until = validUntil ?? .max
    func note(_ instant: Int64) { if instant > time && instant < until { until = instant } }
    for gap in gaps {
      for bound in [gap.fromMs, gap.untilMs] {
        if let bound { note(bound) }
      }
    }
    let named = NamedEntitlementFacts(
      evaluation: evaluation, history: owned.transactions, renewals: owned.renewals, time: time, note: note)
    self.init(
      fingerprint: SummaryFingerprint(catalog: catalog, policy: policy).value, computedAtMs: evaluation.time,
      validUntilMs: until == .max ? nil : until, groups: evaluation.groups, entitlements: evaluation.entitlements,
      revocations: evaluation.revocations, facts: evaluation.facts, appFacts: evaluation.appFacts, named: named,
      retention: RetentionGroupHistory.groups(of: owned.transactions, catalog: catalog, at: time))
  }

  init(
    fingerprint: UInt64, computedAtMs: Int64, validUntilMs: Int64?, groups: [GroupStatus],
    entitlements: [Entitlement], revocations: [Revocation], facts: [GroupFacts], appFacts: AppFacts,
    named: NamedEntitlementFacts, retention: [RetentionGroupHistory]
  ) {
    self.fingerprint = fingerprint
    self.computedAtMs = computedAtMs
    self.validUntilMs = validUntilMs
    self.groups = groups
    self.entitlements = entitlements
    self.revocations = revocations
    self.facts = facts
    self.appFacts = appFacts
    self.named = named
    self.retention = retention
  }

  /// Why a summary cannot answer at an instant (``usability(fingerprint:at:)``).
  public enum Unusable: String, Sendable, Hashable, CaseIterable {
    /// It was computed with another catalog or policy.
    case fingerprint
    /// The instant is before ``UserSummary/computedAtMs`` (a past `as_of`).
    case before
    /// The instant is at or after ``UserSummary/validUntilMs``: time changed an answer.
    case expired
  }

  /// Whether the summary answers at `time` for the catalog and policy of `fingerprint`: `nil`
  /// when it does, else why not.
  public func usability(fingerprint: SummaryFingerprint, at time: Int64) -> Unusable? {
    Self.usability(of: (self.fingerprint, computedAtMs, validUntilMs), fingerprint: fingerprint, at: time)
  }

  /// The evaluation at `time`, identical to evaluating the history then
  /// (``SubscriptionEvaluation/time`` is `time`), or `nil` when the summary does not answer then
  /// (another catalog or policy, or `time` outside `[computedAtMs, validUntilMs)`).
  public func evaluation(catalog: Catalog, policy: EligibilityPolicy, at time: Int64) -> SubscriptionEvaluation? {
    evaluation(catalog: catalog, policy: policy, fingerprint: SummaryFingerprint(catalog: catalog, policy: policy), at: time)
  }

  /// ``evaluation(catalog:policy:at:)`` with the catalog's and policy's fingerprint computed once
  /// by the caller (a service keeps it with its cached catalog).
  public func evaluation(
    catalog: Catalog, policy: EligibilityPolicy, fingerprint: SummaryFingerprint, at time: Int64
  ) -> SubscriptionEvaluation? {
    guard usability(fingerprint: fingerprint, at: time) == nil else { return nil }
    return SubscriptionEvaluation(
      time: time, groups: groups, entitlements: entitlements, revocations: revocations,
      facts: facts, appFacts: appFacts, catalog: catalog, policy: policy)
  }

  /// The named entitlements at `evaluation`'s instant, identical to
  /// ``SubscriptionEvaluation/namedEntitlements(_:history:renewals:)`` with the history then.
  /// - Parameter evaluation: what ``evaluation(catalog:policy:fingerprint:at:)`` returned.
  public func namedEntitlements(
    _ definitions: [EntitlementDefinition], of evaluation: SubscriptionEvaluation
  ) -> [NamedEntitlement] {
    evaluation.namedEntitlements(definitions, facts: named)
  }
}

// MARK: Fingerprint

/// A stable 64-bit fingerprint of a catalog and a policy: FNV-1a over a canonical encoding of
/// every field (never Swift's `Hasher`, which is seeded per process), so a summary written by one
/// process is recognized by another. Compute it once per catalog and policy.
public struct SummaryFingerprint: Sendable, Hashable {
  /// The fingerprint.
  public let value: UInt64

  /// The fingerprint of a catalog (its ``Catalog/fingerprint``) and a policy.
  public init(catalog: Catalog, policy: EligibilityPolicy) {
    var hash = FNV1a(state: catalog.fingerprint)
    hash.add(policy.refundsBlockIntro)
    hash.add(policy.lapsedSubscribersGetIntro)
    hash.add(policy.billingRetryEntitled)
    hash.add(policy.promoScope.rawValue)
    hash.add(policy.purchaseSharing.rawValue)
    // Only when set, so that the fingerprints stored before the override existed stay valid.
    if let sandbox = policy.purchaseSharingSandbox { hash.add("sandbox:" + sandbox.rawValue) }
    value = hash.state
  }

  /// A fingerprint read back from storage.
  public init(value: UInt64) { self.value = value }
}

/// FNV-1a, 64 bits, with length-prefixed strings so that no two field sequences collide by
/// concatenation.
struct FNV1a {
  var state: UInt64 = 0xcbf2_9ce4_8422_2325

  mutating func add(byte: UInt8) {
    state = (state ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
  }

  mutating func add(_ value: UInt64) {
    for shift in stride(from: 0, to: 64, by: 8) { add(byte: UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
  }

  mutating func add(_ value: Int) { add(UInt64(bitPattern: Int64(value))) }
  mutating func add(_ value: Bool) { add(byte: value ? 1 : 0) }

  mutating func add(_ value: String) {
    add(value.utf8.count)
    for byte in value.utf8 { add(byte: byte) }
  }

  mutating func add(_ value: String?) {
    if let value {
      add(byte: 1)
      add(value)
    } else {
      add(byte: 0)
    }
  }

  mutating func add(_ values: [String]) {
    add(values.count)
    for value in values { add(value) }
  }
}

extension Catalog {
  /// FNV-1a over every field of every product, in order (what ``Catalog/==`` compares).
  static func fingerprint(of products: [Product]) -> UInt64 {
    var hash = FNV1a()
    hash.add(products.count)
    for product in products {
      hash.add(product.productId)
      hash.add(product.type.rawValue)
      hash.add(product.subscriptionGroupId)
      if let d = product.duration {
        hash.add(byte: 1)
        for part in [d.years, d.months, d.weeks, d.days, d.hours, d.minutes, d.seconds] { hash.add(part) }
      } else {
        hash.add(byte: 0)
      }
      hash.add(product.hasIntroductoryOffer)
      hash.add(product.promotionalOfferIds)
      hash.add(product.winBackOfferIds)
    }
    return hash.state
  }
}

// MARK: Codec

/// Why stored summary bytes could not be decoded.
public struct UserSummaryDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What was wrong.
  public var message: String

  /// Creates an error.
  public init(_ message: String) { self.message = message }

  /// The message.
  public var description: String { "summary: \(message)" }
}

extension UserSummary {
  /// The compact binary form (format ``formatVersion``): a version byte, the fingerprint, the
  /// window, a table of the distinct strings, then the groups, facts, entitlements, revocations
  /// and app facts, with integers as (zigzag) varints and strings as indexes into the table.
  public func encoded() -> [UInt8] {
    var strings = SummaryStrings()
    var body = SummaryWriter()
    body.signed(computedAtMs)
    body.optionalSigned(validUntilMs)
    body.unsigned(UInt64(groups.count))
    for g in groups {
      body.string(g.subscriptionGroupId, &strings)
      body.byte(Self.code(g.state))
      body.optionalString(g.productId, &strings)
      body.optionalString(g.transactionId, &strings)
      body.optionalString(g.originalTransactionId, &strings)
      body.optionalSigned(g.expiresDate)
      body.optionalSigned(g.gracePeriodExpiresDate)
      body.optionalString(g.autoRenewProductId, &strings)
      body.byte(g.ownership.map(Self.code) ?? 0xFF)
      body.byte(
        (g.autoRenewEnabled ? 1 : 0) | (g.billingIssue ? 2 : 0) | (g.inTrial ? 4 : 0)
          | (g.inIntroOffer ? 8 : 0))
      // Format 2: the billing plan and the commitment (rule 22), one byte when there are none.
      body.byte(Self.code(g.billingPlan) | (g.commitment == nil ? 0 : 0x10))
      if let c = g.commitment {
        body.unsigned(UInt64(max(0, c.billingPeriodNumber)))
        body.unsigned(UInt64(max(0, c.totalBillingPeriods)))
        body.optionalSigned(c.expiresDate)
        body.byte(Self.code(c.renewalBillingPlan) | (c.willRenew ? 0x10 : 0))
      }
    }
    body.unsigned(UInt64(facts.count))
    for f in facts {
      body.string(f.id, &strings)
      body.byte(Self.code(f.state))
      body.optionalString(f.stateEvidence, &strings)
      body.optionalString(f.newestTransactionId, &strings)
      body.optionalString(f.introEvidence, &strings)
      body.optionalString(f.refundEvidence, &strings)
      if let winBack = f.winBack {
        body.byte(1)
        body.string(winBack.originalTransactionId, &strings)
        body.unsigned(UInt64(winBack.eligibleOfferIds.count))
        for id in winBack.eligibleOfferIds { body.string(id, &strings) }
      } else {
        body.byte(0)
      }
    }
    body.unsigned(UInt64(entitlements.count))
    for e in entitlements {
      body.string(e.productId, &strings)
      body.byte(Self.code(e.type))
      body.optionalSigned(e.expiresDate)
      body.byte(Self.code(e.ownership))
      body.string(e.transactionId, &strings)
      body.optionalString(e.subscriptionGroupId, &strings)
    }
    body.unsigned(UInt64(revocations.count))
    for r in revocations {
      body.string(r.transactionId, &strings)
      body.string(r.originalTransactionId, &strings)
      body.string(r.productId, &strings)
      body.signed(r.revocationDate)
      body.byte(Self.code(r.kind))
      body.byte(Self.code(r.ownership))
    }
    body.byte(appFacts.hasCurrentSubscription ? 1 : 0)
    body.optionalString(appFacts.currentEvidence, &strings)
    body.optionalString(appFacts.newestTransactionId, &strings)
    // Named entitlements' facts, each map in key order (the encoding is canonical).
    body.unsigned(UInt64(named.originals.count))
    for key in named.originals.keys.sorted() {
      body.string(key, &strings)
      body.string(named.originals[key]!, &strings)
    }
    body.unsigned(UInt64(named.renewsInto.count))
    for key in named.renewsInto.keys.sorted() {
      body.string(key, &strings)
      body.string(named.renewsInto[key]!, &strings)
    }
    body.unsigned(UInt64(named.newest.count))
    for key in named.newest.keys.sorted() {
      let n = named.newest[key]!
      body.string(n.productId, &strings)
      body.string(n.transactionId, &strings)
      body.byte(n.isUpgraded ? 1 : 0)
      body.signed(n.purchaseDate)
      body.optionalSigned(n.expiresDate)
      body.optionalSigned(n.revocationDate)
    }
    // Format 3: each group's retention history.
    body.unsigned(UInt64(retention.count))
    for h in retention {
      body.string(h.subscriptionGroupId, &strings)
      body.unsigned(UInt64(max(0, h.paidPeriods)))
      body.optionalSigned(h.firstPurchaseMs)
      body.byte(h.trialUsed ? 1 : 0)
      body.unsigned(UInt64(max(0, h.promotionalOffersUsed)))
    }

    var out = SummaryWriter()
    out.bytes.reserveCapacity(body.bytes.count + strings.byteCount + 16)
    out.byte(Self.formatVersion)
    for shift in stride(from: 0, to: 64, by: 8) { out.byte(UInt8(truncatingIfNeeded: fingerprint >> UInt64(shift))) }
    out.unsigned(UInt64(strings.list.count))
    for s in strings.list {
      out.unsigned(UInt64(s.utf8.count))
      out.bytes.append(contentsOf: s.utf8)
    }
    out.bytes.append(contentsOf: body.bytes)
    return out.bytes
  }

  // Stable codes of the enumerations: never reuse or renumber one (stored data reads them).

  static func code(_ state: SubscriptionState) -> UInt8 {
    switch state {
    case .active: 0
    case .gracePeriod: 1
    case .billingRetry: 2
    case .revoked: 3
    case .expired: 4
    case .neverSubscribed: 5
    }
  }

  static func state(_ code: UInt8) throws(UserSummaryDecodingError) -> SubscriptionState {
    switch code {
    case 0: .active
    case 1: .gracePeriod
    case 2: .billingRetry
    case 3: .revoked
    case 4: .expired
    case 5: .neverSubscribed
    default: throw UserSummaryDecodingError("bad state code \(code)")
    }
  }

  static func code(_ plan: BillingPlanType?) -> UInt8 {
    switch plan {
    case nil: 0
    case .billedUpfront?: 1
    case .monthly?: 2
    }
  }

  static func billingPlan(_ code: UInt8) throws(UserSummaryDecodingError) -> BillingPlanType? {
    switch code {
    case 0: nil
    case 1: .billedUpfront
    case 2: .monthly
    default: throw UserSummaryDecodingError("bad billing plan code \(code)")
    }
  }

  static func code(_ type: ProductType) -> UInt8 {
    switch type {
    case .autoRenewable: 0
    case .nonRenewing: 1
    case .nonConsumable: 2
    case .consumable: 3
    case .freeSubscription: 4
    }
  }

  static func productType(_ code: UInt8) throws(UserSummaryDecodingError) -> ProductType {
    switch code {
    case 0: .autoRenewable
    case 1: .nonRenewing
    case 2: .nonConsumable
    case 3: .consumable
    case 4: .freeSubscription
    default: throw UserSummaryDecodingError("bad product type code \(code)")
    }
  }

  static func code(_ ownership: OwnershipType) -> UInt8 {
    switch ownership {
    case .purchased: 0
    case .familyShared: 1
    case .assigned: 2
    }
  }

  static func ownership(_ code: UInt8) throws(UserSummaryDecodingError) -> OwnershipType {
    switch code {
    case 0: .purchased
    case 1: .familyShared
    case 2: .assigned
    default: throw UserSummaryDecodingError("bad ownership code \(code)")
    }
  }

  static func code(_ kind: RevocationKind) -> UInt8 {
    switch kind {
    case .refund: 0
    case .familyRemoval: 1
    case .upgrade: 2
    }
  }

  static func revocationKind(_ code: UInt8) throws(UserSummaryDecodingError) -> RevocationKind {
    switch code {
    case 0: .refund
    case 1: .familyRemoval
    case 2: .upgrade
    default: throw UserSummaryDecodingError("bad revocation kind code \(code)")
    }
  }
}

/// The distinct strings of a summary being encoded, numbered in order of first use.
struct SummaryStrings {
  var list: [String] = []
  var index: [String: Int] = [:]
  var byteCount = 0

  mutating func number(_ s: String) -> Int {
    if let n = index[s] { return n }
    let n = list.count
    list.append(s)
    index[s] = n
    byteCount += s.utf8.count + 1
    return n
  }
}

struct SummaryWriter {
  var bytes: [UInt8] = []

  mutating func byte(_ b: UInt8) { bytes.append(b) }

  mutating func unsigned(_ value: UInt64) {
    var v = value
    while v >= 0x80 {
      bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
      v >>= 7
    }
    bytes.append(UInt8(v))
  }

  /// Zigzag: small magnitudes of either sign take few bytes.
  mutating func signed(_ value: Int64) {
    unsigned(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
  }

  /// 0 for `nil`, else 1 then the value.
  mutating func optionalSigned(_ value: Int64?) {
    if let value {
      byte(1)
      signed(value)
    } else {
      byte(0)
    }
  }

  mutating func string(_ s: String, _ strings: inout SummaryStrings) {
    unsigned(UInt64(strings.number(s)))
  }

  /// 0 for `nil`, else the string's number plus one.
  mutating func optionalString(_ s: String?, _ strings: inout SummaryStrings) {
    unsigned(s.map { UInt64(strings.number($0)) + 1 } ?? 0)
  }
}
