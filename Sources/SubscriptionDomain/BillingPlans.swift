// Rule 22 (docs/architecture.md "Domain rules"): monthly subscriptions with a 12-month commitment
// (App Store Server API 1.21, iOS 26.4/26.5). Apple: "Supporting monthly subscriptions with a
// 12-month commitment"
// (https://developer.apple.com/documentation/storekit/supporting-monthly-subscriptions-with-a-12-month-commitment)
// and "Managing the life cycle of monthly subscriptions with a 12-month commitment"
// (https://developer.apple.com/documentation/storekit/managing-lifecycle-of-monthly-subscriptions-with-a-12-month-commitment-).
// Each billing period is a transaction of its own covering one month, so rule 4 applies to it
// unchanged; what the plan adds is reported beside the state.

/// How a subscription is billed (`billingPlanType` of a transaction, `renewalBillingPlanType` of a
/// renewal info; https://developer.apple.com/documentation/appstoreserverapi/billingplantype).
public enum BillingPlanType: String, Sendable, Hashable, Codable, CaseIterable {
  /// The whole period billed at once: every subscription before API 1.21.
  case billedUpfront = "BILLED_UPFRONT"
  /// Billed monthly within a 12-month commitment.
  case monthly = "MONTHLY"
}

/// A commitment transaction's `commitmentInfo`
/// (https://developer.apple.com/documentation/appstoreserverapi/transactioncommitmentinfo).
public struct TransactionCommitmentInfo: Sendable, Hashable, Codable {
  /// `billingPeriodNumber`: which billing period of the commitment this transaction is (1-based).
  public var billingPeriodNumber: Int?
  /// `totalBillingPeriods`: how many billing periods the commitment has (12).
  public var totalBillingPeriods: Int?
  /// `commitmentExpiresDate`: when the commitment ends (ms since the epoch).
  public var commitmentExpiresDate: Int64?
  /// `commitmentPrice`: the commitment's total price, in milliunits.
  public var commitmentPrice: Int64?

  /// Creates a commitment info.
  public init(
    billingPeriodNumber: Int? = nil, totalBillingPeriods: Int? = nil, commitmentExpiresDate: Int64? = nil,
    commitmentPrice: Int64? = nil
  ) {
    self.billingPeriodNumber = billingPeriodNumber
    self.totalBillingPeriods = totalBillingPeriods
    self.commitmentExpiresDate = commitmentExpiresDate
    self.commitmentPrice = commitmentPrice
  }
}

/// A renewal info's `commitmentInfo`: what follows the current commitment
/// (https://developer.apple.com/documentation/appstoreserverapi/renewalcommitmentinfo).
public struct RenewalCommitmentInfo: Sendable, Hashable, Codable {
  /// `commitmentAutoRenewProductId`: the product a new commitment would be of.
  public var commitmentAutoRenewProductId: String?
  /// Apple's `commitmentAutoRenewStatus` value: 1 when a new commitment follows this one.
  public var rawCommitmentAutoRenewStatus: Int?
  /// Apple's `commitmentRenewalBillingPlanType` value: how what follows is billed.
  public var rawCommitmentRenewalBillingPlanType: String?
  /// `commitmentRenewalDate`: when the commitment ends and what follows starts.
  public var commitmentRenewalDate: Int64?
  /// `commitmentRenewalPrice`: the price of what follows, in milliunits.
  public var commitmentRenewalPrice: Int64?

  /// Creates a renewal commitment info.
  public init(
    commitmentAutoRenewProductId: String? = nil, rawCommitmentAutoRenewStatus: Int? = nil,
    rawCommitmentRenewalBillingPlanType: String? = nil, commitmentRenewalDate: Int64? = nil,
    commitmentRenewalPrice: Int64? = nil
  ) {
    self.commitmentAutoRenewProductId = commitmentAutoRenewProductId
    self.rawCommitmentAutoRenewStatus = rawCommitmentAutoRenewStatus
    self.rawCommitmentRenewalBillingPlanType = rawCommitmentRenewalBillingPlanType
    self.commitmentRenewalDate = commitmentRenewalDate
    self.commitmentRenewalPrice = commitmentRenewalPrice
  }

  /// Whether a new commitment follows this one (`commitmentAutoRenewStatus` 1).
  public var willRenew: Bool { rawCommitmentAutoRenewStatus == AutoRenewStatus.on.rawValue }

  /// How what follows is billed; `nil` when absent or unknown.
  public var renewalBillingPlan: BillingPlanType? {
    rawCommitmentRenewalBillingPlanType.flatMap(BillingPlanType.init(rawValue:))
  }
}

/// Where a group's subscription stands in its 12-month commitment (``GroupStatus/commitment``).
public struct CommitmentStatus: Sendable, Hashable, Codable {
  /// The billing period of the deciding transaction, 1-based (k of ``totalBillingPeriods``).
  public var billingPeriodNumber: Int
  /// How many billing periods the commitment has (12).
  public var totalBillingPeriods: Int
  /// When the commitment ends, when Apple says.
  public var expiresDate: Int64?
  /// Whether a new commitment (or a year billed up front) follows when this one ends: the
  /// renewal info's `commitmentAutoRenewStatus` (in the last billing period Apple's
  /// `autoRenewStatus` follows it). Cancelling during a commitment changes only this: "billing
  /// continues through all 12 periods even if the customer cancels the commitment renewal early"
  /// (https://developer.apple.com/documentation/storekit/supporting-monthly-subscriptions-with-a-12-month-commitment).
  /// `false` when no renewal info describes the instant.
  public var willRenew: Bool
  /// How what follows is billed (`commitmentRenewalBillingPlanType`), when known.
  public var renewalBillingPlan: BillingPlanType?

  /// Creates a commitment status.
  public init(
    billingPeriodNumber: Int, totalBillingPeriods: Int, expiresDate: Int64? = nil, willRenew: Bool = false,
    renewalBillingPlan: BillingPlanType? = nil
  ) {
    self.billingPeriodNumber = billingPeriodNumber
    self.totalBillingPeriods = totalBillingPeriods
    self.expiresDate = expiresDate
    self.willRenew = willRenew
    self.renewalBillingPlan = renewalBillingPlan
  }

  /// The commitment of a transaction, with what its renewal info (the one that describes the
  /// instant, if any) says follows it; `nil` when the transaction is not part of a commitment.
  public init?(transaction: Transaction, renewal: RenewalInfo?) {
    guard let info = transaction.commitment, let k = info.billingPeriodNumber, let n = info.totalBillingPeriods
    else { return nil }
    let renews: Bool
    if let commitment = renewal?.commitment, commitment.rawCommitmentAutoRenewStatus != nil {
      renews = commitment.willRenew
    } else {
      // Without a commitment info, the last period's auto-renew status is the commitment's.
      renews = k >= n && (renewal?.willAutoRenew ?? false)
    }
    self.init(
      billingPeriodNumber: k, totalBillingPeriods: n, expiresDate: info.commitmentExpiresDate, willRenew: renews,
      renewalBillingPlan: renewal?.commitment?.renewalBillingPlan)
  }
}
