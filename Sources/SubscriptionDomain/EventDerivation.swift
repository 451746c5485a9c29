// Event derivation (docs/architecture.md "Events"): which events a change of one user's stored
// purchase data adds, and which changes happen by time alone. Pure and deterministic: no clock, no
// I/O, no randomness; the hash that turns a cause into an event id is passed in.
//
// The model. A user's data (``PurchaseHistory``: the transactions and renewal infos a store holds)
// has a *timeline*: one purchase event per transaction, one revocation event per revocation, and the
// changes of each group's state at the instants nothing was bought (a period ends without a
// following one, a grace period ends, billing retry's 60 days end), each named by its *cause*.
// A write from `before` to `after` adds the events of `after`'s timeline whose cause is not in
// `before`'s (so re-deriving the same data adds nothing, importing a whole history adds all of it,
// and data arriving in any order adds each transaction's events once), plus what only a comparison
// can tell: a revocation undone (REFUND_REVERSED) and auto-renewal turned off or on.
//
// Renewal infos describe the present: the store keeps only the latest per subscription. So the state
// at a past instant is evaluated with a renewal info only while no later transaction of its
// subscription exists (it describes what followed the last one); during a write, `before`'s renewal
// info still describes the instants before `after`'s new transactions (a billing retry that a
// renewal ends is a recovery, not a resubscription). What only an older renewal info knew (a
// billing retry that later recovered) is not in the stored data any more: replaying a history from
// scratch gives the same transaction-caused events, but its state changes are those the final data
// tells.

/// Whose data an event is about: the app, the environment and the app's user.
public struct EventSubject: Sendable, Hashable {
  /// The app.
  public var appId: String
  /// The environment of the data.
  public var environment: Environment
  /// The app's user id.
  public var userId: String

  /// Creates a subject.
  public init(appId: String, environment: Environment, userId: String) {
    self.appId = appId
    self.environment = environment
    self.userId = userId
  }
}

/// One user's stored purchase data in one app and environment: what a store holds (one copy per
/// transaction id, one renewal info per original transaction id).
public struct PurchaseHistory: Sendable, Hashable {
  /// The transactions, in any order (duplicates merge by ``Transaction/supersedes(_:)``).
  public var transactions: [Transaction] {
    didSet { transactionsAreMerged = false }
  }
  /// The renewal infos, in any order (duplicates merge by ``RenewalInfo/supersedes(_:)``); a
  /// stored removal (``RenewalInfoVersion/removed(originalTransactionId:asOfDate:)``) is none.
  public var renewals: [RenewalInfo]
  /// Whether ``transactions`` are known to be merged already (one per transaction id, as
  /// ``Transaction/merged(_:)`` leaves them), so a timeline only sorts them. Not part of equality.
  private(set) var transactionsAreMerged = false

  /// Creates a history.
  public init(transactions: [Transaction] = [], renewals: [RenewalInfo] = []) {
    self.transactions = transactions
    self.renewals = renewals
  }

  /// Creates a history of transactions already merged: one per transaction id, each the merge of
  /// its copies (``Transaction/merged(_:)``; a store's rows, which its writes merged), so deriving
  /// from it skips merging them again. The same history as ``init(transactions:renewals:)``.
  public init(mergedTransactions: [Transaction], renewals: [RenewalInfo] = []) {
    self.transactions = mergedTransactions
    self.renewals = renewals
    transactionsAreMerged = true
  }

  /// Equal data, however it was created.
  public static func == (a: PurchaseHistory, b: PurchaseHistory) -> Bool {
    a.transactions == b.transactions && a.renewals == b.renewals
  }

  /// Hashes the data (as ``==`` compares it).
  public func hash(into hasher: inout Hasher) {
    hasher.combine(transactions)
    hasher.combine(renewals)
  }

  /// No data: the `before` of a user's first write.
  public static let empty = PurchaseHistory()

  /// The latest instant Apple's data vouches for (the greatest ``Transaction/appleClock`` or
  /// ``RenewalInfo/appleClock``): by Apple's clock, everything up to it has happened. `nil`: unknown.
  public var appleNow: Int64? {
    var latest: Int64?
    for i in transactions.indices { if let c = transactions[i].appleClock { latest = max(latest ?? c, c) } }
    for r in renewals { if let c = r.appleClock { latest = max(latest ?? c, c) } }
    return latest
  }
}

/// Why an event happened: what its id is derived from (never from when it was detected).
///
/// One cause gives at most one event, so the store deduplicates by id. A purchase's cause is its
/// transaction, whatever its type turns out to be: a transaction whose predecessor arrives later is
/// classified when it first arrives and never logged twice (its price counts once in trends).
public enum EventCause: Sendable, Hashable {
  /// A transaction was bought (any purchase type: started, renewed, converted, changed, ...).
  case purchase(transactionId: String)
  /// A transaction was revoked (refund or Family Sharing) at an instant.
  case revocation(transactionId: String, revocationMs: Int64)
  /// The revocation of a transaction at an instant was undone.
  case revocationReversed(transactionId: String, revocationMs: Int64)
  /// A renewal info version turned auto-renewal off or on; `version` is its Apple clock
  /// (``RenewalInfo/appleClock``), or the subscription's newest transaction id when unknown.
  case autoRenew(originalTransactionId: String, enabled: Bool, version: String)
  /// A group entered the billing grace period or retry when `lapsedTransactionId`'s period ended.
  case billingIssue(groupId: String, lapsedTransactionId: String)
  /// The grace period after `lapsedTransactionId`'s period ended.
  case gracePeriodExpired(groupId: String, lapsedTransactionId: String)
  /// The group lapsed after `lapsedTransactionId`'s period (directly, or when billing retry ended).
  case expired(groupId: String, lapsedTransactionId: String)

  /// The canonical text of the cause for `subject`, the input of the event id's hash: a version tag,
  /// then each component as `<UTF-8 length>:<text>` on its own line (so no two causes share it).
  public func canonicalKey(for subject: EventSubject) -> String {
    String(decoding: canonicalBytes(for: subject), as: UTF8.self)
  }

  /// ``canonicalKey(for:)`` as UTF-8, built without intermediate strings (one per event).
  func canonicalBytes(for subject: EventSubject) -> [UInt8] {
    canonicalBytes(continuing: CanonicalKey(subject: subject))
  }

  /// ``canonicalBytes(for:)`` from the subject's part of the key, built once per derivation
  /// (``CanonicalKey/init(subject:)``).
  func canonicalBytes(continuing subjectKey: CanonicalKey) -> [UInt8] {
    var key = CanonicalKey(continuing: subjectKey)
    switch self {
    case .purchase(let id):
      key.add("purchase")
      key.add(id)
    case .revocation(let id, let at):
      key.add("revocation")
      key.add(id)
      key.add(String(at))
    case .revocationReversed(let id, let at):
      key.add("revocation_reversed")
      key.add(id)
      key.add(String(at))
    case .autoRenew(let otx, let enabled, let version):
      key.add("auto_renew")
      key.add(otx)
      key.add(enabled ? "on" : "off")
      key.add(version)
    case .billingIssue(let group, let id):
      key.add("billing_issue")
      key.add(group)
      key.add(id)
    case .gracePeriodExpired(let group, let id):
      key.add("grace_period_expired")
      key.add(group)
      key.add(id)
    case .expired(let group, let id):
      key.add("expired")
      key.add(group)
      key.add(id)
    }
    return key.bytes
  }
}

/// The bytes of a canonical cause key: `substatus.event.v1`, then `\n<UTF-8 length>:<text>` per
/// component (``EventCause/canonicalKey(for:)``).
struct CanonicalKey {
  private(set) var bytes: [UInt8]

  init() {
    bytes = []
    bytes.reserveCapacity(192)
    bytes.append(contentsOf: "substatus.event.v1".utf8)
  }

  /// The key's start for `subject`: the tag, then its app, environment and user.
  init(subject: EventSubject) {
    self.init()
    add(subject.appId)
    add(subject.environment.rawValue)
    add(subject.userId)
  }

  /// A copy of `start` to continue with a cause's components.
  init(continuing start: CanonicalKey) {
    bytes = []
    bytes.reserveCapacity(max(192, start.bytes.count + 128))
    bytes.append(contentsOf: start.bytes)
  }

  mutating func add(_ part: String) {
    var part = part
    part.withUTF8 { utf8 in
      bytes.append(UInt8(ascii: "\n"))
      appendDecimal(utf8.count)
      bytes.append(UInt8(ascii: ":"))
      bytes.append(contentsOf: utf8)
    }
  }

  /// The decimal digits of a length (what `String(n)` spells), without making a string.
  private mutating func appendDecimal(_ n: Int) {
    var divisor = 1
    while divisor <= n / 10 { divisor *= 10 }
    var rest = n
    while divisor > 0 {
      bytes.append(UInt8(ascii: "0") + UInt8(rest / divisor))
      rest %= divisor
      divisor /= 10
    }
  }
}

/// Derives ``SubscriptionEvent``s from users' purchase data (docs/architecture.md "Events").
///
/// Ids: `evt_` and 32 lowercase hex digits, the first 16 bytes of ``digest`` applied to the UTF-8 of
/// ``EventCause/canonicalKey(for:)``. The digest is passed in because the domain has no
/// cryptography; the service passes SHA-256. The same cause always gives the same id.
///
/// ```swift
/// let derivation = EventDerivation(digest: { SHA256.hash($0) })
/// let added = derivation.events(
///   subject: subject, before: stored, after: updated, catalog: catalog, throughMs: now, detectedMs: now)
/// ```
public struct EventDerivation: Sendable {
  /// A cryptographic hash of bytes, at least 16 bytes long (SHA-256 in the service).
  public let digest: @Sendable ([UInt8]) -> [UInt8]

  /// Creates a derivation that names events with `digest`.
  public init(digest: @escaping @Sendable ([UInt8]) -> [UInt8]) {
    self.digest = digest
  }

  /// The id of the event `cause` gives for `subject`.
  public func eventId(for cause: EventCause, subject: EventSubject) -> String {
    eventId(canonicalBytes: cause.canonicalBytes(for: subject))
  }

  /// An event id from the UTF-8 of a canonical cause key (``EventCause/canonicalKey(for:)``):
  /// `evt_` and the first 16 bytes of its ``digest`` in lowercase hex (every event id, ownership
  /// transfers' included).
  func eventId(canonicalBytes: [UInt8]) -> String {
    let hash = digest(canonicalBytes)
    precondition(hash.count >= 16, "an event id digest must be at least 16 bytes")
    return String(unsafeUninitializedCapacity: 36) { id in
      for (i, c) in "evt_".utf8.enumerated() { id[i] = c }
      for i in 0..<16 {
        id[4 + 2 * i] = Self.hexDigit(hash[i] >> 4)
        id[5 + 2 * i] = Self.hexDigit(hash[i] & 0x0f)
      }
      return 36
    }
  }

  /// The lowercase hex digit of a nibble.
  private static func hexDigit(_ nibble: UInt8) -> UInt8 {
    nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
  }

  /// The events that changing a user's stored data from `before` to `after` adds, in Apple's time
  /// order (``SubscriptionEvent/occurredMs``, then a fixed order of types, then id).
  ///
  /// They are: the events of `after`'s timeline (purchases, revocations, and the state changes by
  /// time alone that have happened by the horizon) whose cause is not in `before`'s; a revocation
  /// that `after` no longer has (``SubscriptionEventType/refundReversed``); auto-renewal turned
  /// off or on between the two renewal infos of a subscription (a first renewal info that is off
  /// reports it too; both only while the subscription is current). The horizon is `throughMs`, or
  /// later when Apple's data was signed later (``PurchaseHistory/appleNow``: Apple's own clock says
  /// those instants have passed).
  ///
  /// - Parameters:
  ///   - subject: the app, environment and user.
  ///   - before: the stored data before the write (``PurchaseHistory/empty`` for a new user).
  ///   - after: the stored data after it.
  ///   - catalog: the app's products (products outside it: the transaction's own group and type).
  ///   - throughMs: the instant changes by time alone are derived through (the write's time).
  ///   - loggedThroughMs: the instant through which `before`'s changes by time alone are already
  ///     logged (the user's last write or scheduler run); `nil`: `throughMs`. Those of `before`
  ///     after it are returned when `after` still has them (the store deduplicates by id).
  ///   - detectedMs: when substatus learned it (stored in each event; never part of an id).
  public func events(
    subject: EventSubject, before: PurchaseHistory, after: PurchaseHistory, catalog: Catalog,
    throughMs: Int64, loggedThroughMs: Int64? = nil, detectedMs: Int64
  ) -> [SubscriptionEvent] {
    derive(
      subject: subject, before: before, after: after, catalog: catalog, throughMs: throughMs,
      loggedThroughMs: loggedThroughMs, detectedMs: detectedMs
    ).events
  }

  /// What a store derives for one write: ``events(subject:before:after:catalog:throughMs:loggedThroughMs:detectedMs:)``
  /// and ``nextTransitionMs(history:catalog:afterMs:)`` of `after` after `nextAfterMs`, equal to
  /// calling both, from one timeline of `after` where `before`'s renewal infos cannot tell the
  /// instants the next transition looks at (always when `before` has none).
  public func write(
    subject: EventSubject, before: PurchaseHistory, after: PurchaseHistory, catalog: Catalog,
    throughMs: Int64, loggedThroughMs: Int64? = nil, detectedMs: Int64, nextAfterMs: Int64
  ) -> (events: [SubscriptionEvent], nextTransitionMs: Int64?) {
    let derived = derive(
      subject: subject, before: before, after: after, catalog: catalog, throughMs: throughMs,
      loggedThroughMs: loggedThroughMs, detectedMs: detectedMs)
    let low = max(nextAfterMs, after.appleNow ?? .min)
    let timeline =
      derived.timeline.flatMap { $0.fallbackIsSilent(after: Timeline.earliestInstant(dueAfter: low)) ? $0 : nil }
      ?? Timeline(history: after, fallback: nil, catalog: catalog)
    return (derived.events, Self.nextTransitionMs(of: timeline, after: low))
  }

  /// The events and, when it was built, `after`'s timeline (with `before` as its fallback).
  private func derive(
    subject: EventSubject, before: PurchaseHistory, after: PurchaseHistory, catalog: Catalog,
    throughMs: Int64, loggedThroughMs: Int64?, detectedMs: Int64
  ) -> (events: [SubscriptionEvent], timeline: Timeline?) {
    if before == after && loggedThroughMs.map({ $0 >= throughMs }) ?? true { return ([], nil) }
    let horizon = max(throughMs, after.appleNow ?? .min, before.appleNow ?? .min)
    // What `before` already had: its purchases and revocations, and (only when `after` has changes
    // by time at all, the costly part) its changes by time logged so far.
    var known = Set<EventCause>()
    known.reserveCapacity(before.transactions.count)
    for i in before.transactions.indices {
      let id = before.transactions[i].transactionId
      known.insert(.purchase(transactionId: id))
      if let at = before.transactions[i].revocationDate { known.insert(.revocation(transactionId: id, revocationMs: at)) }
    }
    let new = Timeline(history: after, fallback: before, catalog: catalog)
    let occurrences = new.occurrences(dueThrough: horizon, skipping: known)
    var old: Timeline?
    if occurrences.contains(where: { $0.dueMs != .min }) {
      let loggedHorizon = loggedThroughMs.map { max($0, before.appleNow ?? .min) } ?? horizon
      let timeline = Timeline(history: before, fallback: nil, catalog: catalog)
      for occurrence in timeline.occurrences(dueThrough: horizon, includeData: false)
      where occurrence.dueMs <= loggedHorizon {
        known.insert(occurrence.cause)
      }
      old = timeline
    }
    let subjectKey = CanonicalKey(subject: subject)
    var result: [SubscriptionEvent] = []
    for var occurrence in occurrences where !known.contains(occurrence.cause) {
      new.complete(&occurrence)
      if case .expired(let group, let lapsed) = occurrence.cause,
        known.contains(.billingIssue(groupId: group, lapsedTransactionId: lapsed)), let timeline = old
      {
        // Apple stopped retrying (EXPIRED / BILLING_RETRY) before the 60 days: the data now shows a
        // plain lapse, but the log has the billing issue; the expiry is when Apple said so.
        let said = new.renewals.first { $0.originalTransactionId == occurrence.originalTransactionId }?.appleClock
        let at = max(occurrence.occurredMs, said ?? throughMs)
        occurrence.occurredMs = at
        occurrence.stateBefore = timeline.state(group, at: at)
        occurrence.stateAfter = new.state(group, at: at)
        occurrence.expirationReason = occurrence.expirationReason ?? "billing_error"
      }
      result.append(event(occurrence, of: new, subject: subject, subjectKey: subjectKey, detectedMs: detectedMs))
    }
    for change in Self.changes(before: before, old: &old, new: new, catalog: catalog) {
      result.append(event(change, of: new, subject: subject, subjectKey: subjectKey, detectedMs: detectedMs))
    }
    return (Self.ordered(withCommitments(result, history: after)), new)
  }

  /// The changes by time alone of an unchanged history that become due in `(afterMs, throughMs]`
  /// (the scheduler's call; ``SubscriptionEvent/detectedMs`` is `detectedMs`), in Apple's time
  /// order. Instants up to the history's ``PurchaseHistory/appleNow`` were due at its write.
  public func transitionEvents(
    subject: EventSubject, history: PurchaseHistory, catalog: Catalog, afterMs: Int64,
    throughMs: Int64, detectedMs: Int64
  ) -> [SubscriptionEvent] {
    let appleNow = history.appleNow ?? .min
    let low = max(afterMs, appleNow)
    let high = max(throughMs, appleNow)
    guard high > low else { return [] }
    let timeline = Timeline(history: history, fallback: nil, catalog: catalog)
    let subjectKey = CanonicalKey(subject: subject)
    var result: [SubscriptionEvent] = []
    for occurrence in timeline.occurrences(dueThrough: high, dueAfter: low, includeData: false)
    where occurrence.dueMs > low {
      result.append(event(occurrence, of: timeline, subject: subject, subjectKey: subjectKey, detectedMs: detectedMs))
    }
    return Self.ordered(withCommitments(result, history: history))
  }

  /// The next instant after `afterMs` (and after the history's ``PurchaseHistory/appleNow``) at
  /// which a change by time alone happens to the unchanged history: a period ends without a
  /// following one, a grace period ends, billing retry's 60 days end, or an ended period whose
  /// renewal Apple has not decided is settled as expired. `nil` when none will.
  public static func nextTransitionMs(history: PurchaseHistory, catalog: Catalog, afterMs: Int64) -> Int64? {
    nextTransitionMs(
      of: Timeline(history: history, fallback: nil, catalog: catalog), after: max(afterMs, history.appleNow ?? .min))
  }

  /// The next change by time alone of `timeline` due after `low`.
  private static func nextTransitionMs(of timeline: Timeline, after low: Int64) -> Int64? {
    timeline.occurrences(dueThrough: .max, dueAfter: low, includeData: false).lazy.map(\.dueMs)
      .filter { $0 > low }.min()
  }

  // MARK: Changes only a comparison tells

  /// Revocations `after` no longer has (REFUND_REVERSED) and auto-renewal turned off or on.
  /// `old` is `before`'s timeline, built here when first needed.
  static func changes(
    before: PurchaseHistory, old: inout Timeline?, new: Timeline, catalog: Catalog
  ) -> [Occurrence] {
    var result: [Occurrence] = []
    var previous: [String: Transaction] = [:]
    for t in before.transactions where t.revocationDate != nil {
      if let other = previous[t.transactionId], other.supersedes(t) { continue }
      previous[t.transactionId] = t
    }
    if !previous.isEmpty {
      for i in new.transactions.indices where new.transactions[i].revocationDate == nil {
        guard let b = previous[new.transactions[i].transactionId], let revoked = b.revocationDate,
          let kind = RevocationKind(classifying: b), kind != .upgrade, new.kinds[i] != .ignored
        else { continue }
        let t = new.transactions[i]
        let at = max(revoked, t.appleClock ?? revoked)
        let group = new.groupId(i)
        let timeline = old ?? Timeline(history: before, fallback: nil, catalog: catalog)
        let stateBefore = timeline.state(group, at: at)
        old = timeline
        result.append(
          Occurrence(
            cause: .revocationReversed(transactionId: t.transactionId, revocationMs: revoked), type: .refundReversed,
            dueMs: .min, occurredMs: at, groupId: group, productId: t.productId, transaction: i,
            originalTransactionId: t.originalTransactionId, stateBefore: stateBefore,
            stateAfter: new.state(group, at: at)))
      }
    }
    var oldRenewals: [String: RenewalInfo] = [:]
    for r in before.renewals {
      if let other = oldRenewals[r.originalTransactionId], other.supersedes(r) { continue }
      oldRenewals[r.originalTransactionId] = r
    }
    for r in new.renewals {
      let b = oldRenewals[r.originalTransactionId]
      let (was, now) = (b?.autoRenewStatus, r.autoRenewStatus)
      let enabled: Bool
      if was == .off && now == .on {
        enabled = true
      } else if was != .off && now == .off {
        enabled = false
      } else {
        continue
      }
      let newest = new.positionsByOriginal[r.originalTransactionId]?.last.map { new.transactions[$0] }
      let at = r.appleClock ?? newest?.purchaseDate
      guard let at else { continue }
      let group = new.groupId(originalTransactionId: r.originalTransactionId, productId: r.productId)
      let stateAfter = new.state(group, at: at)
      // Only a current subscription's renewal matters: Apple also turns it off when a subscription
      // finally expires, and a first renewal info that is off may be of a long lapsed one.
      guard [.active, .gracePeriod, .billingRetry].contains(stateAfter) else { continue }
      let version = r.appleClock.map { String($0) } ?? "transaction:\(newest?.transactionId ?? "")"
      result.append(
        Occurrence(
          cause: .autoRenew(originalTransactionId: r.originalTransactionId, enabled: enabled, version: version),
          type: enabled ? .autoRenewEnabled : .autoRenewDisabled, dueMs: .min, occurredMs: at, groupId: group,
          productId: r.productId, originalTransactionId: r.originalTransactionId,
          stateBefore: new.state(group, at: at &- 1), stateAfter: stateAfter))
    }
    return result
  }

  // MARK: Building events

  /// The event of an occurrence of `timeline`.
  /// `subjectKey` is `subject`'s part of every id's key (``CanonicalKey/init(subject:)``).
  private func event(
    _ o: Occurrence, of timeline: Timeline, subject: EventSubject, subjectKey: CanonicalKey, detectedMs: Int64
  ) -> SubscriptionEvent {
    let transaction = o.transaction.map { timeline.transactions[$0] }
    var e = SubscriptionEvent(
      eventId: eventId(canonicalBytes: o.cause.canonicalBytes(continuing: subjectKey)), appId: subject.appId,
      userId: subject.userId,
      environment: subject.environment, type: o.type, occurredMs: o.occurredMs, detectedMs: detectedMs,
      subscriptionGroupId: o.groupId, productId: o.productId, transactionId: transaction?.transactionId,
      originalTransactionId: o.originalTransactionId, stateBefore: o.stateBefore, stateAfter: o.stateAfter,
      expirationReason: o.expirationReason, previousProductId: o.previousProductId)
    // The ownership of the subscription or purchase: its own transaction's, else that of the
    // original transaction's latest (Apple gives a family member transactions of their own).
    let owning = transaction
      ?? o.originalTransactionId.flatMap { timeline.positionsByOriginal[$0]?.last }.map { timeline.transactions[$0] }
    e.ownershipType = owning?.ownership
    if let t = transaction {
      if o.isPurchase {
        e.offer = Self.offer(of: t)
        e.offerId = t.offerIdentifier
      }
      e.priceMilliunits = t.price
      e.currency = t.currency
      e.billingPlanType = t.billingPlanType
    }
    return e
  }

  /// How a transaction's period was bought, from its offer fields.
  static func offer(of t: Transaction) -> SubscriptionEventOffer {
    switch t.offerType {
    case .promotional?: return .promotional
    case .offerCode?: return .offerCode
    case .winBack?: return .winBack
    case .introductory?: return t.isFreeTrial ? .freeTrial : .introductory
    case nil:
      if t.isTrialPeriod { return .freeTrial }
      if t.isInIntroOfferPeriod { return .introductory }
      return .none
    }
  }

  /// Apple's time order; at one instant a fixed order of types, then the id.
  /// Positions are sorted and each event moved once (an event is a dozen strings; a write's
  /// events usually come in that order already and are returned as they are).
  static func ordered(_ events: [SubscriptionEvent]) -> [SubscriptionEvent] {
    func before(_ i: Int, _ j: Int) -> Bool {
      let (x, y) = (events[i].occurredMs, events[j].occurredMs)
      if x != y { return x < y }
      let (a, b) = (rank(events[i].type), rank(events[j].type))
      return a != b ? a < b : events[i].eventId < events[j].eventId
    }
    if events.indices.dropFirst().allSatisfy({ !before($0, $0 - 1) }) { return events }
    return events.indices.sorted(by: before).map { events[$0] }
  }

  private static func rank(_ type: SubscriptionEventType) -> Int {
    switch type {
    case .billingIssue: 0
    case .gracePeriodExpired: 1
    case .expired: 2
    case .subscriptionStarted, .resubscribed, .trialConverted, .renewed, .billingRecovered, .productChanged,
      .nonRenewingPurchased, .oneTimePurchased:
      3
    case .refunded, .familyAccessRevoked: 4
    case .refundReversed: 5
    case .autoRenewDisabled, .autoRenewEnabled: 6
    case .ownershipTransferred, .consumptionInfoSent, .consumptionInfoFailed, .consumptionInfoNotSent: 7
    case .subscriptionExtended, .consentRescinded, .appleNotification: 8
    case .commitmentStarted, .commitmentRenewed, .commitmentEnded: 9
    case .retentionOffered: 10
    }
  }
}
