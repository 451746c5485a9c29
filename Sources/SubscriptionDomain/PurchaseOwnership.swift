/// Who owns an original transaction that several of an app's users submitted, as when a customer
/// restores purchases under a second account (docs/architecture.md "Access model").
///
/// The policy decides at each *submission* (a receipt, StoreKit 2 data, an import or a Server API
/// sync for one user); a policy change affects later submissions only. Notifications and the
/// background refresh of a stored receipt are not submissions: they never change who owns what.
public enum PurchaseSharing: String, Sendable, Hashable, Codable, CaseIterable {
  /// Every submitter has it (the default, and the behaviour before the policy existed).
  case share = "SHARE"
  /// The latest submitter has it from the instant of the submission; the users who had it lose it
  /// then (each loss is recorded as a transfer).
  case transfer = "TRANSFER"
  /// The first submitter keeps it; a later submission of it by another user is refused for that
  /// original transaction (`OWNED_BY_ANOTHER_USER`) and nothing of it is stored for that user.
  case keepFirst = "KEEP_FIRST"
  /// The latest submitter has it, as under ``transfer``, only when none of its current owners has
  /// an active entitlement from it at the instant of the submission
  /// (``PurchaseSharing/entitles(originalTransactionId:transactions:renewals:catalog:policy:at:)``);
  /// otherwise as ``keepFirst``: the submission is refused for that original transaction
  /// (`OWNED_BY_ANOTHER_USER`). The decision is taken at the submission and kept with its time.
  case transferIfNoActive = "TRANSFER_IF_NO_ACTIVE"

  /// Whether an original transaction entitles at `time`: the app's evaluation (rules 5, 6: a
  /// covering period, a grace period, billing retry where the policy entitles it, a non-consumable,
  /// a non-renewing term) of its transactions and renewal infos grants an entitlement by one of its
  /// transactions. What ``transferIfNoActive`` asks of each current owner's copy.
  ///
  /// ```swift
  /// let active = PurchaseSharing.entitles(
  ///   originalTransactionId: "1000", transactions: ownerCopy, renewals: ownerRenewals,
  ///   catalog: catalog, policy: policy, at: submittedMs)
  /// ```
  /// - Parameters:
  ///   - originalTransactionId: the original transaction; transactions and renewal infos of
  ///     others are ignored.
  ///   - transactions: its transactions, duplicates allowed (merged newest data first, as every
  ///     evaluation does).
  ///   - renewals: its renewal infos.
  ///   - catalog: the app's catalog.
  ///   - policy: the app's policy.
  ///   - time: the instant.
  public static func entitles(
    originalTransactionId: String, transactions: [Transaction], renewals: [RenewalInfo], catalog: Catalog,
    policy: EligibilityPolicy, at time: Int64
  ) -> Bool {
    let own = transactions.filter { $0.originalTransactionId == originalTransactionId }
    if own.isEmpty { return false }
    let ids = Set(own.map(\.transactionId))
    let evaluation = SubscriptionEvaluator.evaluate(
      history: own, renewals: renewals.filter { $0.originalTransactionId == originalTransactionId },
      catalog: catalog, policy: policy, at: time)
    return evaluation.entitlements.contains { ids.contains($0.transactionId) }
  }
}

/// An interval during which a user did not own an original transaction that their history holds:
/// from its loss to another user until the user acquired it again, or, for a user who acquired it
/// from others by a transfer, from the beginning of time until that transfer. Half-open, like
/// every interval of the domain: `from <= t < until`.
///
/// ```swift
/// // u1 lost 1000 to another account at 1_700_000_000_000 and never got it back.
/// OwnershipGap(originalTransactionId: "1000", fromMs: 1_700_000_000_000, untilMs: nil)
/// ```
public struct OwnershipGap: Sendable, Hashable, Codable {
  /// The original transaction.
  public var originalTransactionId: String
  /// When the user lost it; `nil`: the user never owned it before `untilMs`.
  public var fromMs: Int64?
  /// When the user acquired it again; `nil`: the user does not own it now.
  public var untilMs: Int64?

  /// Creates a gap.
  public init(originalTransactionId: String, fromMs: Int64?, untilMs: Int64?) {
    self.originalTransactionId = originalTransactionId
    self.fromMs = fromMs
    self.untilMs = untilMs
  }

  /// Whether the gap covers `time`.
  public func covers(_ time: Int64) -> Bool {
    (fromMs.map { $0 <= time } ?? true) && (untilMs.map { time < $0 } ?? true)
  }

  /// The original transactions a user with these gaps did not own at `time`.
  public static func disowned(by gaps: [OwnershipGap], at time: Int64) -> Set<String> {
    Set(gaps.lazy.filter { $0.covers(time) }.map(\.originalTransactionId))
  }

  /// A user's history as they owned it at `time`: without the transactions and renewal infos of
  /// every original transaction a gap covers at `time`. Evaluate what this returns to answer for
  /// a user who lost purchases to another account (or gained them by a transfer).
  ///
  /// ```swift
  /// let (owned, renewals) = OwnershipGap.owned(
  ///   transactions: history, renewals: renewalInfos, gaps: gaps, at: nowMs)
  /// let evaluation = SubscriptionEvaluator.evaluate(
  ///   history: owned, renewals: renewals, catalog: catalog, at: nowMs)
  /// ```
  /// - Returns: the inputs, in their order, unchanged when no gap covers `time`.
  public static func owned(
    transactions: [Transaction], renewals: [RenewalInfo], gaps: [OwnershipGap], at time: Int64
  ) -> (transactions: [Transaction], renewals: [RenewalInfo]) {
    let disowned = disowned(by: gaps, at: time)
    if disowned.isEmpty { return (transactions, renewals) }
    return (
      transactions.filter { !disowned.contains($0.originalTransactionId) },
      renewals.filter { !disowned.contains($0.originalTransactionId) }
    )
  }
}
