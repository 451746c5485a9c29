// Win-back offers (docs/architecture.md rule 19): Apple's third offer kind, for customers whose
// subscription lapsed. Apple alone decides who may redeem one (App Store Connect criteria: paid
// duration, time since expiry, wait between offers, regions) and says so in each subscription's
// renewal info (`eligibleWinBackOfferIds`, best first). Evaluation only reads that list.

/// One win-back offer's answer (rule 19): eligible or not, why, and the renewal info that said so.
public struct WinBackOfferEligibility: Sendable, Hashable, Codable {
  /// The win-back offer identifier, one of the product's ``Product/winBackOfferIds``.
  public var offerId: String
  /// Whether Apple lets the user redeem the offer.
  public var eligible: Bool
  /// ``EligibilityReason/winBackOffered`` or ``EligibilityReason/winBackNotOffered``.
  public var reason: EligibilityReason
  /// The original transaction id of the renewal info that decided it; `nil` when the group has no
  /// renewal info.
  public var evidenceTransactionId: String?

  /// Creates an answer.
  public init(
    offerId: String, eligible: Bool, reason: EligibilityReason, evidenceTransactionId: String? = nil
  ) {
    self.offerId = offerId
    self.eligible = eligible
    self.reason = reason
    self.evidenceTransactionId = evidenceTransactionId
  }
}

/// The renewal info that answers a group's win-back offers: its subscription and Apple's list.
struct WinBackSource: Sendable, Hashable {
  /// The renewal info's `originalTransactionId`: the evidence of every answer.
  var originalTransactionId: String
  /// Its `eligibleWinBackOfferIds`.
  var eligibleOfferIds: [String]
}

extension EligibilityAnswers {
  /// The answers for a product's catalog win-back offers, in catalog order (rule 19).
  ///
  /// An offer is eligible (`WIN_BACK_OFFERED`) iff its id is in the `eligibleWinBackOfferIds` of
  /// the group's latest renewal info, else `WIN_BACK_NOT_OFFERED`; the evidence is that renewal
  /// info's original transaction id. The latest renewal info of a group is the one with the
  /// latest `signedDate` (a renewal info without one, from a receipt, comes last); on a tie, the
  /// one whose subscription has the newest transaction purchased by the evaluated instant (one without
  /// transactions comes last); then the smaller original transaction id. A renewal info belongs to
  /// the group of its subscription's transactions, or without any to its product's group, and
  /// counts only at the instants it describes (from its subscription's latest transaction on,
  /// ``RenewalInfo/describes(_:subscriptionLatestPurchase:)``, as for grace and billing retry).
  ///
  /// Renewal infos have no history: the stored one answers at every instant it describes, since
  /// Apple's list is a statement about the present when it was signed.
  func winBackOffers(_ offerIds: [String], group: Int) -> [WinBackOfferEligibility] {
    guard !offerIds.isEmpty else { return [] }
    guard let source = facts[group].winBack else {
      return offerIds.map {
        WinBackOfferEligibility(offerId: $0, eligible: false, reason: .winBackNotOffered)
      }
    }
    return offerIds.map { offerId in
      let offered = source.eligibleOfferIds.contains(offerId)
      return WinBackOfferEligibility(
        offerId: offerId, eligible: offered,
        reason: offered ? .winBackOffered : .winBackNotOffered,
        evidenceTransactionId: source.originalTransactionId)
    }
  }
}

extension Engine {
  /// Keeps renewal info `r` as its group's win-back source when it is later than the current one
  /// (see ``EligibilityAnswers/winBackOffers(_:group:)`` for the order). `lapsed` is the newest
  /// transaction of its subscription purchased by `time`, or -1 when it has none.
  func considerForWinBack(_ r: Int, lapsed: Int, in acc: inout GroupAccumulator) {
    if acc.winBack < 0 || isLaterForWinBack(r, lapsed, than: acc.winBack, acc.winBackLapsed) {
      acc.winBack = r
      acc.winBackLapsed = lapsed
    }
  }

  /// Renewal `a` (whose subscription's newest transaction is `lapsedA`) is later than `b`.
  func isLaterForWinBack(_ a: Int, _ lapsedA: Int, than b: Int, _ lapsedB: Int) -> Bool {
    let signedA = renewals[a].signedDate ?? .min
    let signedB = renewals[b].signedDate ?? .min
    if signedA != signedB { return signedA > signedB }
    if lapsedA != lapsedB {
      if lapsedA < 0 || lapsedB < 0 { return lapsedA >= 0 }
      return isNewer(lapsedA, than: lapsedB)
    }
    return renewals[a].originalTransactionId < renewals[b].originalTransactionId
  }

  /// The group's win-back source, if any renewal info belongs to the group.
  func winBackSource(_ acc: GroupAccumulator) -> WinBackSource? {
    guard acc.winBack >= 0 else { return nil }
    return WinBackSource(
      originalTransactionId: renewals[acc.winBack].originalTransactionId,
      eligibleOfferIds: renewals[acc.winBack].eligibleWinBackOfferIds)
  }
}
