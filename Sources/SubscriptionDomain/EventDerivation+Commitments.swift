// Commitment events (rule 22, docs/architecture.md "Events"): a monthly subscription with a
// 12-month commitment (App Store Server API 1.21) is a transaction per month, so the events derived
// from its transactions are those of any subscription (SUBSCRIPTION_STARTED, RENEWED, EXPIRED...).
// What they do not say is where the commitment stands; Apple: "Managing the life cycle of monthly
// subscriptions with a 12-month commitment"
// (https://developer.apple.com/documentation/storekit/managing-lifecycle-of-monthly-subscriptions-with-a-12-month-commitment-).
// So each event whose transaction is a billing period of a commitment carries it (k of n), and
// three events of their own mark its boundaries:
//   - COMMITMENT_STARTED: a first billing period (k = 1) that follows no commitment (a purchase, or
//     a renewal that moves from a plan billed up front to the monthly plan);
//   - COMMITMENT_RENEWED: a first billing period that follows a billing period of a commitment
//     (the commitment renewed into a new one);
//   - COMMITMENT_ENDED: the subscription lapsed (EXPIRED) during or at the end of a commitment, or
//     renewed out of it into a period billed up front.
// Each is derived beside the event that reveals it, with the same cause, time and states, so they
// are as deterministic and as late-tolerant as the events they follow.

extension EventDerivation {
  /// `events` (derived from `history`) with the commitment of each event whose transaction is in
  /// one, and the commitment events they reveal, each right after its event.
  func withCommitments(_ events: [SubscriptionEvent], history: PurchaseHistory) -> [SubscriptionEvent] {
    guard history.transactions.contains(where: { $0.commitment != nil }) else { return events }
    var byId: [String: Transaction] = [:]
    var chains: [String: [Transaction]] = [:]
    for t in history.transactions {
      byId[t.transactionId] = t
      chains[t.originalTransactionId, default: []].append(t)
    }
    for key in chains.keys {
      chains[key]?.sort { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }
    }
    var out: [SubscriptionEvent] = []
    out.reserveCapacity(events.count + 2)
    for var e in events {
      let chain = e.originalTransactionId.flatMap { chains[$0] } ?? []
      let t = e.transactionId.flatMap { byId[$0] } ?? chain.last { $0.purchaseDate <= e.occurredMs }
      guard let t else {
        out.append(e)
        continue
      }
      let period = Self.commitmentPeriod(t)
      if let period { e.commitment = period }
      out.append(e)
      let previous = chain.last { ($0.purchaseDate, $0.transactionId) < (t.purchaseDate, t.transactionId) }
      let followsCommitment = previous.flatMap(Self.commitmentPeriod) != nil
      var boundary: SubscriptionEventType?
      switch e.type {
      case .subscriptionStarted, .resubscribed, .trialConverted, .renewed, .billingRecovered, .productChanged:
        guard e.transactionId == t.transactionId else { break }
        if let period, period.billingPeriodNumber == 1 {
          boundary = followsCommitment && e.type != .subscriptionStarted && e.type != .resubscribed
            ? .commitmentRenewed : .commitmentStarted
        } else if period == nil, followsCommitment, e.type == .renewed || e.type == .productChanged {
          boundary = .commitmentEnded
        }
      case .expired:
        if period != nil { boundary = .commitmentEnded }
      default: break
      }
      guard let boundary else { continue }
      var c = e
      c.type = boundary
      c.eventId = eventId(canonicalBytes: Array("commitment\u{0}\(boundary.rawValue)\u{0}\(e.eventId)".utf8))
      if boundary == .commitmentEnded, e.type != .expired { c.commitment = previous.flatMap(Self.commitmentPeriod) }
      out.append(c)
    }
    return out
  }

  /// The commitment a transaction is a billing period of: `MONTHLY` with Apple's
  /// `commitmentInfo` (k of n); `nil` otherwise.
  static func commitmentPeriod(_ t: Transaction) -> CommitmentStatus? {
    guard t.billingPlanType == .monthly, let info = t.commitment, let k = info.billingPeriodNumber,
      let n = info.totalBillingPeriods
    else { return nil }
    return CommitmentStatus(billingPeriodNumber: k, totalBillingPeriods: n, expiresDate: info.commitmentExpiresDate)
  }
}
