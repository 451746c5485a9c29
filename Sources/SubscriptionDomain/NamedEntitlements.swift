/// A named entitlement of an app's catalog (docs/architecture.md "Access model"): what a backend
/// asks about ("is this user `premium`?") and the products that unlock it, as RevenueCat's
/// entitlements and Adapty's access levels model it.
public struct EntitlementDefinition: Sendable, Hashable, Codable {
  /// The entitlement's identifier, chosen by the tenant (`premium`).
  public var entitlementId: String
  /// A name for people.
  public var displayName: String
  /// The catalog products that grant it, in the order given.
  public var productIds: [String]

  /// Creates a definition.
  public init(entitlementId: String, displayName: String = "", productIds: [String]) {
    self.entitlementId = entitlementId
    self.displayName = displayName
    self.productIds = productIds
  }
}

/// One named entitlement of one user at an instant (the API's `NamedEntitlement`).
public struct NamedEntitlement: Sendable, Hashable, Codable {
  /// The entitlement.
  public var entitlementId: String
  /// Whether one of its products grants access at the instant.
  public var active: Bool
  /// As in ``GroupStatus``: `ACTIVE` (a covering subscription, a non-renewing term, an owned
  /// non-consumable or free subscription), `GRACE_PERIOD`, `BILLING_RETRY` (entitled only when the
  /// policy says so), else why not: `BILLING_RETRY`, `REVOKED`, `EXPIRED`, `NEVER_SUBSCRIBED`.
  public var state: SubscriptionState
  /// When the grant ends (exclusive); `nil`: no known end. For an inactive entitlement, when its
  /// last subscription period ended, where the data says.
  public var expiresDate: Int64?
  /// Whether the granting subscription renews into a product of this entitlement (its renewal
  /// info's auto-renew status and next product); `false` for other product kinds and for expired,
  /// revoked and never-bought entitlements.
  public var willRenew: Bool
  /// The product of the grant (the one that lasts longest), or of the transaction that decided
  /// an inactive state; `nil` when the user never bought any of its products.
  public var productId: String?
  /// The transaction of that grant or decision.
  public var transactionId: String?
  /// Whether the grant is the user's purchase or shared by the family; `nil` when inactive.
  public var ownership: OwnershipType?

  /// Creates an answer.
  public init(
    entitlementId: String, active: Bool, state: SubscriptionState, expiresDate: Int64? = nil,
    willRenew: Bool = false, productId: String? = nil, transactionId: String? = nil,
    ownership: OwnershipType? = nil
  ) {
    self.entitlementId = entitlementId
    self.active = active
    self.state = state
    self.expiresDate = expiresDate
    self.willRenew = willRenew
    self.productId = productId
    self.transactionId = transactionId
    self.ownership = ownership
  }
}

/// What named entitlements read of a user's history and renewal infos besides the evaluation,
/// at one instant: kept in a ``UserSummary`` so that they are answered without the history.
struct NamedEntitlementFacts: Sendable, Hashable {
  /// The newest transaction of one product purchased by the instant (named entitlements' order:
  /// non-upgraded first, then the latest purchase, then the smaller transaction id).
  struct Newest: Sendable, Hashable {
    var transactionId: String
    var productId: String
    var isUpgraded: Bool
    var purchaseDate: Int64
    var expiresDate: Int64?
    var revocationDate: Int64?

    /// The order of ``SubscriptionEvaluation/namedEntitlements(_:history:renewals:)``'s inactive
    /// state: whether `self` comes before `other`.
    func precedes(_ other: Newest) -> Bool {
      (isUpgraded ? 1 : 0, -purchaseDate, transactionId) < (other.isUpgraded ? 1 : 0, -other.purchaseDate, other.transactionId)
    }
  }

  /// Per transaction id of an auto-renewable entitlement: its original transaction id.
  var originals: [String: String] = [:]
  /// Per original transaction id whose renewal info describes the instant and renews: the product
  /// it renews into.
  var renewsInto: [String: String] = [:]
  /// Per product id: its newest transaction purchased by the instant.
  var newest: [String: Newest] = [:]

  init() {}

  /// The facts of `history` and `renewals` at `time` for `evaluation`'s entitlements. Every
  /// instant after `time` at which one of them would change is passed to `note`.
  init(
    evaluation: SubscriptionEvaluation, history: [Transaction], renewals: [RenewalInfo], time: Int64,
    note: (Int64) -> Void
  ) {
    for e in evaluation.entitlements where e.type == .autoRenewable {
      if let t = history.first(where: { $0.transactionId == e.transactionId }) {
        originals[e.transactionId] = t.originalTransactionId
      }
    }
    var latest: [String: Int64] = [:]
    for t in history {
      note(t.purchaseDate)
      latest[t.originalTransactionId] = max(latest[t.originalTransactionId] ?? t.purchaseDate, t.purchaseDate)
      guard t.purchaseDate <= time else { continue }
      let candidate = Newest(
        transactionId: t.transactionId, productId: t.productId, isUpgraded: t.isUpgraded, purchaseDate: t.purchaseDate,
        expiresDate: t.expiresDate, revocationDate: t.revocationDate)
      if let current = newest[t.productId], !candidate.precedes(current) { continue }
      newest[t.productId] = candidate
    }
    for n in newest.values { if let revoked = n.revocationDate { note(revoked) } }
    // Merged by original transaction id as evaluation merges them: the newest data wins.
    var found: [String: RenewalInfo] = [:]
    for r in renewals {
      if let current = found[r.originalTransactionId], !r.supersedes(current) { continue }
      found[r.originalTransactionId] = r
    }
    for (original, r) in found {
      let last = latest[original]
      if let last { note(last) }
      guard RenewalInfo.describes(time, subscriptionLatestPurchase: last), r.willAutoRenew else { continue }
      renewsInto[original] = r.autoRenewProductId ?? r.productId
    }
  }
}

extension SubscriptionEvaluation {
  /// The named entitlements of the user at ``time``, one per definition, in the order given.
  ///
  /// An entitlement is active when ``entitlements`` holds a grant of one of its products (so rules
  /// 6, 7 and 16 decide: covering and grace-period subscriptions, billing retry only under the
  /// policy, non-renewing terms, non-consumables and free subscriptions not revoked, family-shared
  /// ones included). Of several grants, the one that lasts longest is reported: no end first, then
  /// the latest end, and a billing-retry grant (its end is unknown: Apple may recover or give up)
  /// last; ties go to the user's own purchase, then the smaller transaction id.
  ///
  /// An inactive entitlement says why, from the history of its products: `BILLING_RETRY` when a
  /// subscription group is in billing retry on one of them, else `REVOKED` or `EXPIRED` from the
  /// newest transaction of its products (upgraded ones count only when nothing else does), else
  /// `NEVER_SUBSCRIBED`.
  ///
  /// - Parameters:
  ///   - definitions: the app's entitlement definitions.
  ///   - history: the transactions that were evaluated.
  ///   - renewals: the renewal infos that were evaluated (for `will_renew`).
  public func namedEntitlements(
    _ definitions: [EntitlementDefinition], history: [Transaction], renewals: [RenewalInfo]
  ) -> [NamedEntitlement] {
    guard !definitions.isEmpty else { return [] }
    return namedEntitlements(
      definitions, facts: NamedEntitlementFacts(evaluation: self, history: history, renewals: renewals, time: time) { _ in })
  }

  /// ``namedEntitlements(_:history:renewals:)`` from the facts it reads of the history.
  func namedEntitlements(_ definitions: [EntitlementDefinition], facts: NamedEntitlementFacts) -> [NamedEntitlement] {
    guard !definitions.isEmpty else { return [] }
    return definitions.map { definition in
      let products = Set(definition.productIds)
      let grants = entitlements.filter { products.contains($0.productId) }
      if let grant = grants.min(by: { lastsLonger($0, than: $1) }) {
        return active(definition, grant, products: products, facts: facts)
      }
      return inactive(definition, products: products, facts: facts)
    }
  }

  /// The state a grant stands in: its group's for a subscription, `ACTIVE` otherwise.
  private func state(of grant: Entitlement) -> SubscriptionState {
    guard grant.type == .autoRenewable, let group = grant.subscriptionGroupId,
      let status = status(ofGroup: group)
    else { return .active }
    return status.state
  }

  /// Whether grant `a` lasts longer than `b` (see ``namedEntitlements(_:history:renewals:)``).
  private func lastsLonger(_ a: Entitlement, than b: Entitlement) -> Bool {
    func rank(_ e: Entitlement) -> (Int, Int64) {
      if state(of: e) == .billingRetry { return (2, 0) }
      guard let expires = e.expiresDate else { return (0, 0) }
      return (1, -expires)
    }
    let (ra, rb) = (rank(a), rank(b))
    if ra != rb { return ra < rb }
    if a.ownership != b.ownership { return a.ownership == .purchased }
    return a.transactionId < b.transactionId
  }

  private func active(
    _ definition: EntitlementDefinition, _ grant: Entitlement, products: Set<String>, facts: NamedEntitlementFacts
  ) -> NamedEntitlement {
    let state = state(of: grant)
    var willRenew = false
    if grant.type == .autoRenewable {
      // A grace-period grant may carry the original transaction id in place of a transaction id.
      let original = facts.originals[grant.transactionId] ?? grant.transactionId
      willRenew = facts.renewsInto[original].map(products.contains) ?? false
    }
    return NamedEntitlement(
      entitlementId: definition.entitlementId, active: true, state: state,
      expiresDate: grant.expiresDate, willRenew: willRenew, productId: grant.productId,
      transactionId: grant.transactionId, ownership: grant.ownership)
  }

  private func inactive(
    _ definition: EntitlementDefinition, products: Set<String>, facts: NamedEntitlementFacts
  ) -> NamedEntitlement {
    // A group in billing retry (not entitled under the policy) on one of the products.
    if let retry = groups.first(where: {
      $0.state == .billingRetry && $0.productId.map(products.contains) == true
    }) {
      return NamedEntitlement(
        entitlementId: definition.entitlementId, active: false, state: .billingRetry,
        expiresDate: retry.expiresDate,
        willRenew: retry.originalTransactionId.flatMap { facts.renewsInto[$0] }.map(products.contains) ?? false,
        productId: retry.productId, transactionId: retry.transactionId)
    }
    // The newest transaction of its products that happened by then (non-upgraded ones first).
    var newest: NamedEntitlementFacts.Newest?
    for product in definition.productIds {
      guard let candidate = facts.newest[product] else { continue }
      if let current = newest, !candidate.precedes(current) { continue }
      newest = candidate
    }
    guard let newest else {
      return NamedEntitlement(
        entitlementId: definition.entitlementId, active: false, state: .neverSubscribed)
    }
    let revoked = newest.revocationDate.map { $0 <= time } ?? false
    return NamedEntitlement(
      entitlementId: definition.entitlementId, active: false,
      state: revoked ? .revoked : .expired, expiresDate: newest.expiresDate,
      productId: newest.productId, transactionId: newest.transactionId)
  }
}
