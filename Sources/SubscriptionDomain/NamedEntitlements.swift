/// A named entitlement of an app's catalog (DESIGN "Access model"): what a backend asks about
/// ("is this user `premium`?") and the products that unlock it, as RevenueCat's entitlements and
/// Adapty's access levels model it.
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

/// One named entitlement of one user at an instant (DESIGN's `NamedEntitlement`).
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
    return definitions.map { definition in
      let products = Set(definition.productIds)
      let grants = entitlements.filter { products.contains($0.productId) }
      if let grant = grants.min(by: { lastsLonger($0, than: $1) }) {
        return active(definition, grant, products: products, history: history, renewals: renewals)
      }
      return inactive(definition, products: products, history: history, renewals: renewals)
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
    _ definition: EntitlementDefinition, _ grant: Entitlement, products: Set<String>,
    history: [Transaction], renewals: [RenewalInfo]
  ) -> NamedEntitlement {
    let state = state(of: grant)
    var willRenew = false
    if grant.type == .autoRenewable {
      // A grace-period grant may carry the original transaction id in place of a transaction id.
      let original =
        history.first { $0.transactionId == grant.transactionId }?.originalTransactionId
        ?? grant.transactionId
      willRenew = renews(original, into: products, renewals, history: history)
    }
    return NamedEntitlement(
      entitlementId: definition.entitlementId, active: true, state: state,
      expiresDate: grant.expiresDate, willRenew: willRenew, productId: grant.productId,
      transactionId: grant.transactionId, ownership: grant.ownership)
  }

  private func inactive(
    _ definition: EntitlementDefinition, products: Set<String>, history: [Transaction],
    renewals: [RenewalInfo]
  ) -> NamedEntitlement {
    // A group in billing retry (not entitled under the policy) on one of the products.
    if let retry = groups.first(where: {
      $0.state == .billingRetry && $0.productId.map(products.contains) == true
    }) {
      return NamedEntitlement(
        entitlementId: definition.entitlementId, active: false, state: .billingRetry,
        expiresDate: retry.expiresDate,
        willRenew: retry.originalTransactionId.map { renews($0, into: products, renewals, history: history) } ?? false,
        productId: retry.productId, transactionId: retry.transactionId)
    }
    // The newest transaction of its products that happened by then (non-upgraded ones first).
    var newest: Transaction?
    for t in history where products.contains(t.productId) && t.purchaseDate <= time {
      guard let current = newest else {
        newest = t
        continue
      }
      if (t.isUpgraded ? 1 : 0, -t.purchaseDate, t.transactionId)
        < (current.isUpgraded ? 1 : 0, -current.purchaseDate, current.transactionId)
      {
        newest = t
      }
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

  /// Whether the subscription `originalTransactionId` renews into one of `products`, by its
  /// renewal info when that describes ``time`` (``RenewalInfo/describes(_:subscriptionLatestPurchase:)``).
  private func renews(
    _ originalTransactionId: String, into products: Set<String>, _ renewals: [RenewalInfo],
    history: [Transaction]
  ) -> Bool {
    let latest = history.lazy.filter { $0.originalTransactionId == originalTransactionId }.map(\.purchaseDate).max()
    guard RenewalInfo.describes(time, subscriptionLatestPurchase: latest) else { return false }
    // Merged by original transaction id as evaluation merges them: the newest data wins.
    var found: RenewalInfo?
    for r in renewals where r.originalTransactionId == originalTransactionId {
      if let current = found, !r.supersedes(current) {
        continue
      }
      found = r
    }
    guard let found, found.willAutoRenew else { return false }
    return products.contains(found.autoRenewProductId ?? found.productId)
  }
}
