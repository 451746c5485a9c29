// History merging (rules 13 and 14): one record per transaction id, one renewal info (or its
// removal) per original transaction id. Copies of the same data come from different sources —
// a verifyReceipt body, a V1 notification, StoreKit 2, a V2 notification, the App Store Server
// API — and merge by Apple's own clock, so the stored history never depends on arrival order.
//
// Each rule below is a strict total order on copies (`supersedes`), so keeping the greatest copy
// gives the same result for every permutation of the same copies. Stores apply exactly these
// functions to their stored row; they do not re-implement them.

extension Transaction {
  /// When Apple said what this copy says, on Apple's clock (rule 14): ``signedDate`` for signed
  /// data, else ``asOfDate`` (a verifyReceipt body's `receipt.request_date_ms`, the latest
  /// instant a V1 notification records); `nil` when unknown.
  @inlinable
  public var appleClock: Int64? { signedDate ?? asOfDate }

  /// Whether this copy of a transaction wins over `other` (same transaction id) in a merge.
  ///
  /// A strict total order, so the winner of any set of copies does not depend on their order:
  /// 1. Apple's clock (``appleClock``): the newer copy wins. A copy without a revocation replaces
  ///    a revoked one only when it is strictly newer (Apple's `REFUND_REVERSED`); so on a tie the
  ///    revoked copy wins, and a copy of unknown time ranks as the oldest possible when it is not
  ///    revoked and as the newest possible when it is (a revocation of unknown time is never
  ///    undone, and an undated copy never undoes one).
  /// 2. On the same time, the copy that knows more: a revocation date, then a notification type,
  ///    then `is_upgraded`; then the later `expiresDate`.
  /// 3. Only for copies that differ but tie on all of that: a fixed order of their contents,
  ///    first without the fields a merge fills in (``merging(_:)``), then with them.
  ///
  /// The fields a merge fills in (``merging(_:)``: price, currency, `revocationType`,
  /// `appAccountToken`, `appTransactionId`) play no part before that last step, so a stored copy that a merge filled
  /// in ranks exactly as the copy that won it: merging copies one at a time into a stored row
  /// gives what ``merged(_:)`` gives of all of them, in any order.
  public func supersedes(_ other: Transaction) -> Bool {
    let (a, b) = (mergeRank, other.mergeRank)
    if a != b { return a > b }
    if (revocationDate != nil) != (other.revocationDate != nil) { return revocationDate != nil }
    if (notificationType != nil) != (other.notificationType != nil) {
      return notificationType != nil
    }
    if isUpgraded != other.isUpgraded { return isUpgraded }
    let ea = expiresDate ?? .min
    let eb = other.expiresDate ?? .min
    if ea != eb { return ea > eb }
    if self == other { return false }
    let (ca, cb) = (withoutMergeFilledFields, other.withoutMergeFilledFields)
    if ca != cb { return String(describing: ca) > String(describing: cb) }
    return String(describing: self) > String(describing: other)
  }

  /// This copy without the fields a merge fills in from another copy when the winning copy lacks
  /// them (docs/architecture.md rule 14, "field by field"; see ``merging(_:)``): ``price`` with
  /// ``currency``, ``rawRevocationType``, ``appAccountToken``, ``appTransactionId``, the billing plan and
  /// commitment.
  var withoutMergeFilledFields: Transaction {
    var copy = self
    copy.price = nil
    copy.currency = nil
    copy.rawRevocationType = nil
    copy.appAccountToken = nil
    copy.appTransactionId = nil
    copy.rawBillingPlanType = nil
    copy.commitment = nil
    return copy
  }

  /// The copy's place on Apple's clock: (0, 0) unknown and not revoked (oldest), (1, time) known,
  /// (2, 0) unknown and revoked (newest). Rule 14 forces this: an undated revoked copy must beat
  /// every unrevoked copy, and a dated unrevoked copy beats an older dated revoked one.
  @usableFromInline
  var mergeRank: (Int, Int64) {
    if let clock = appleClock { return (1, clock) }
    return revocationDate == nil ? (0, 0) : (2, 0)
  }

  /// Whether this copy says the same as `other`: equal but for when Apple said it (``signedDate``,
  /// ``asOfDate``). A newer copy that says the same is still stored (its time matters to later
  /// merges) but is not a change worth counting.
  public func saysSame(as other: Transaction) -> Bool {
    var a = self
    a.signedDate = other.signedDate
    a.asOfDate = other.asOfDate
    return a == other
  }

  /// The copy a merge of this copy and `other` (same transaction id) keeps: the one that
  /// ``supersedes(_:)`` the other, field by field (docs/architecture.md rule 14): where it has no
  /// ``price`` (with its ``currency``), no ``rawRevocationType`` or no ``appAccountToken``, the
  /// other's.
  ///
  /// Only signed data (StoreKit 2, the Server API, V2 notifications) carries Apple's price and
  /// revocation type; a verifyReceipt body or a V1 notification carries neither, and not every
  /// source carries the app account token. A newer copy from such a source that wins still keeps
  /// what an older copy told. Apple gives one value of each for a transaction (a price never
  /// changes, a revocation has one type), so whichever copy it comes from, merging copies in any
  /// order keeps the same. A revocation type kept on a copy that is not revoked (Apple reversed
  /// the refund) is not reported: ``revocationType`` reads it only while ``revocationDate`` is set.
  public func merging(_ other: Transaction) -> Transaction {
    var (winner, loser) = other.supersedes(self) ? (other, self) : (self, other)
    winner.fillMissingFields(from: loser)
    return winner
  }

  /// Takes `other`'s value of each field a merge fills in (``merging(_:)``) that this copy lacks.
  mutating func fillMissingFields(from other: Transaction) {
    for field in MergeFilledField.allCases { fill(field, from: other) }
  }

  /// Takes `other`'s value of `field` if this copy lacks it.
  mutating func fill(_ field: MergeFilledField, from other: Transaction) {
    guard carries(field) == false else { return }
    switch field {
    case .price:
      price = other.price
      currency = other.currency
    case .revocationType: rawRevocationType = other.rawRevocationType
    case .appAccountToken: appAccountToken = other.appAccountToken
    case .appTransactionId: appTransactionId = other.appTransactionId
    case .billingPlan:
      rawBillingPlanType = other.rawBillingPlanType
      commitment = other.commitment
    }
  }

  /// Whether this copy has a value of `field`.
  func carries(_ field: MergeFilledField) -> Bool {
    switch field {
    case .price: price != nil
    case .revocationType: rawRevocationType != nil
    case .appAccountToken: appAccountToken != nil
    case .appTransactionId: appTransactionId != nil
    case .billingPlan: rawBillingPlanType != nil || commitment != nil
    }
  }

  /// When a V1 notification's data is as of (rule 14): the latest instant its `unified_receipt`
  /// records (a purchase or a cancellation of `transactions`, or `otherDates` such as
  /// `auto_renew_status_change_date_ms`); `nil` when it records none. A V1 body carries no date of
  /// its own, and its arrival is no clock: Apple retries a failed delivery with the same body, so
  /// an old body can arrive after a newer one. Everything a body records happened before Apple
  /// composed it, so a body composed after a refund records the cancellation and is at least as
  /// new as every body composed before it.
  public static func latestRecordedDate(
    in transactions: some Sequence<Transaction>, otherDates: [Int64?] = []
  ) -> Int64? {
    var latest = otherDates.compactMap { $0 }.max()
    for t in transactions {
      latest = max(latest ?? t.purchaseDate, t.purchaseDate, t.revocationDate ?? .min)
    }
    return latest
  }

  /// Deduplicates a history by `transactionId`, keeping the winning copy per id (see
  /// ``supersedes(_:)``), ordered by purchase date then transaction id; field by field, a winning
  /// copy without a price, a revocation type or an app account token keeps that of the winning copy
  /// among those with one (see ``merging(_:)``). The result does not depend on the input's order.
  public static func merged(_ transactions: some Sequence<Transaction>) -> [Transaction] {
    var position: [String: Int] = [:]
    var result: [Transaction] = []
    // Per id and filled field: the winning copy among those that carry it.
    var carriers: [[MergeFilledField: Transaction]] = []
    for transaction in transactions {
      let index: Int
      if let existing = position[transaction.transactionId] {
        index = existing
        if transaction.supersedes(result[existing]) { result[existing] = transaction }
      } else {
        index = result.count
        position[transaction.transactionId] = index
        result.append(transaction)
        carriers.append([:])
      }
      for field in MergeFilledField.allCases where transaction.carries(field) {
        if carriers[index][field].map(transaction.supersedes) ?? true { carriers[index][field] = transaction }
      }
    }
    for i in result.indices {
      for (field, carrier) in carriers[i] { result[i].fill(field, from: carrier) }
    }
    result.sort(by: inPurchaseOrder)
    return result
  }

  /// The order of ``merged(_:)``'s result: by purchase date, then transaction id.
  static func inPurchaseOrder(_ a: Transaction, _ b: Transaction) -> Bool {
    a.purchaseDate != b.purchaseDate ? a.purchaseDate < b.purchaseDate : a.transactionId < b.transactionId
  }
}

/// The fields of a transaction that merging fills in from another copy (``Transaction/merging(_:)``).
enum MergeFilledField: CaseIterable {
  /// ``Transaction/price`` with ``Transaction/currency``.
  case price
  /// ``Transaction/rawRevocationType``.
  case revocationType
  /// ``Transaction/appAccountToken``.
  case appAccountToken
  /// ``Transaction/appTransactionId`` (a verifyReceipt body or a V1 notification carries none).
  case appTransactionId
  /// ``Transaction/rawBillingPlanType`` with ``Transaction/commitment`` (rule 22: only signed
  /// data carries them, and Apple gives one plan per billing period).
  case billingPlan
}

extension RenewalInfo {
  /// When Apple said what this copy says: ``signedDate`` for signed data, else ``asOfDate``;
  /// `nil` when unknown (ranks as the oldest).
  @inlinable
  public var appleClock: Int64? { signedDate ?? asOfDate }

  /// Whether this renewal info wins over `other` (same original transaction id): the newer on
  /// Apple's clock (``appleClock``, unknown is oldest); on the same time, a fixed order of the
  /// contents (a strict total order, so merging never depends on arrival order).
  public func supersedes(_ other: RenewalInfo) -> Bool {
    let a = appleClock ?? .min
    let b = other.appleClock ?? .min
    if a != b { return a > b }
    if self == other { return false }
    return String(describing: self) > String(describing: other)
  }

  /// Whether this renewal info says the same as `other`: equal but for when Apple said it.
  public func saysSame(as other: RenewalInfo) -> Bool {
    var a = self
    a.signedDate = other.signedDate
    a.asOfDate = other.asOfDate
    return a == other
  }

  /// Deduplicates renewal infos by `originalTransactionId`, keeping the newest data (see
  /// ``supersedes(_:)``), ordered by original transaction id.
  public static func merged(_ renewals: some Sequence<RenewalInfo>) -> [RenewalInfo] {
    var position: [String: Int] = [:]
    var result: [RenewalInfo] = []
    for renewal in renewals {
      if let existing = position[renewal.originalTransactionId] {
        if renewal.supersedes(result[existing]) { result[existing] = renewal }
      } else {
        position[renewal.originalTransactionId] = result.count
        result.append(renewal)
      }
    }
    result.sort { $0.originalTransactionId < $1.originalTransactionId }
    return result
  }
}

/// What is known of one original transaction's pending renewal: a renewal info, or its removal by
/// a snapshot that lacked it (rule 13). Stores keep one version per original transaction id and
/// replace it only with a version that ``supersedes(_:)`` it.
public enum RenewalInfoVersion: Sendable, Hashable {
  /// Apple's renewal info.
  case present(RenewalInfo)
  /// A snapshot of Apple's whole renewal info, dated `asOfDate` (`nil`: unknown), did not hold
  /// this original transaction: the customer cancelled during grace or Apple stopped retrying.
  case removed(originalTransactionId: String, asOfDate: Int64?)

  /// The original transaction this version is about.
  public var originalTransactionId: String {
    switch self {
    case .present(let info): info.originalTransactionId
    case .removed(let id, _): id
    }
  }

  /// When Apple said it (``RenewalInfo/appleClock``, or the snapshot's date); `nil`: unknown.
  public var appleClock: Int64? {
    switch self {
    case .present(let info): info.appleClock
    case .removed(_, let asOfDate): asOfDate
    }
  }

  /// The renewal info, or `nil` for a removal.
  public var renewalInfo: RenewalInfo? {
    if case .present(let info) = self { return info }
    return nil
  }

  /// Whether this version wins over `other` (same original transaction id): the newer on Apple's
  /// clock (unknown is oldest), so an older snapshot never removes what a newer copy added; on the
  /// same time a removal wins over a renewal info (like a revocation, the version that ends access
  /// wins a tie); two renewal infos of the same time compare by ``RenewalInfo/supersedes(_:)``.
  public func supersedes(_ other: RenewalInfoVersion) -> Bool {
    let a = appleClock ?? .min
    let b = other.appleClock ?? .min
    if a != b { return a > b }
    switch (self, other) {
    case (.present(let x), .present(let y)): return x.supersedes(y)
    case (.removed, .present): return true
    case (.present, .removed), (.removed, .removed): return false
    }
  }

  /// Whether this version says the same as `other`: both removals, or renewal infos that say the
  /// same (``RenewalInfo/saysSame(as:)``).
  public func saysSame(as other: RenewalInfoVersion) -> Bool {
    switch (self, other) {
    case (.present(let x), .present(let y)): x.saysSame(as: y)
    case (.removed(let x, _), .removed(let y, _)): x == y
    default: false
    }
  }

  /// Keeps the winning version per original transaction id (see ``supersedes(_:)``), ordered by
  /// original transaction id; independent of the input's order.
  public static func merged(_ versions: some Sequence<RenewalInfoVersion>) -> [RenewalInfoVersion] {
    var position: [String: Int] = [:]
    var result: [RenewalInfoVersion] = []
    for version in versions {
      if let existing = position[version.originalTransactionId] {
        if version.supersedes(result[existing]) { result[existing] = version }
      } else {
        position[version.originalTransactionId] = result.count
        result.append(version)
      }
    }
    result.sort { $0.originalTransactionId < $1.originalTransactionId }
    return result
  }
}

/// Apple's whole current renewal info for some original transactions, as of one time (rule 13):
/// what a verifyReceipt body's (or a V1 notification's `unified_receipt`) `pending_renewal_info`
/// says of the subscriptions in its transactions, or what Get All Subscription Statuses returns.
/// An original transaction of the snapshot without a renewal info in it has none any more.
public struct RenewalInfoSnapshot: Sendable, Hashable {
  /// The original transactions the snapshot covers, sorted, without repeats.
  public private(set) var originalTransactionIds: [String]
  /// When Apple said it, on Apple's clock (`receipt.request_date_ms`, the latest instant a V1
  /// notification records, the newest `signedDate` of a Server API answer); `nil`: unknown.
  public var asOfDate: Int64?

  /// Creates a snapshot of `originalTransactionIds` as of `asOfDate`.
  public init(originalTransactionIds: some Sequence<String>, asOfDate: Int64?) {
    self.originalTransactionIds = Set(originalTransactionIds).sorted()
    self.asOfDate = asOfDate
  }

  /// The snapshot a receipt's `pending_renewal_info` is: it covers the original transactions of the
  /// receipt's auto-renewable transactions (those with an `expires_date`; Apple gives renewal info
  /// for nothing else).
  public init(receiptTransactions: some Sequence<Transaction>, asOfDate: Int64?) {
    self.init(
      originalTransactionIds: receiptTransactions.lazy.filter { $0.expiresDate != nil }.map(\.originalTransactionId),
      asOfDate: asOfDate)
  }

  /// The same snapshot restricted to the original transactions in `ids` (a notification's data
  /// routed to one user).
  public func restricted(to ids: Set<String>) -> RenewalInfoSnapshot {
    var copy = self
    copy.originalTransactionIds = originalTransactionIds.filter(ids.contains)
    return copy
  }

  /// The versions the snapshot and its `renewalInfos` make: each renewal info as present, each
  /// covered original transaction that `renewalInfos` lacks as removed at ``asOfDate``.
  public func versions(of renewalInfos: [RenewalInfo]) -> [RenewalInfoVersion] {
    let present = Set(renewalInfos.map(\.originalTransactionId))
    return renewalInfos.map(RenewalInfoVersion.present)
      + originalTransactionIds.filter { !present.contains($0) }.map {
        RenewalInfoVersion.removed(originalTransactionId: $0, asOfDate: asOfDate)
      }
  }
}
