// OWNERSHIP_TRANSFERRED (docs/architecture.md "Events" and "Access model"): under the
// TRANSFER policy a submission moves an original transaction from its owners to the submitter at
// the submission's instant. Both users' states change then, so each gets an event: the new owner's
// says what it gained, the previous owner's what it lost (its user id is the event's
// `previousUserId`). Pure, like the rest of the derivation; the id is a function of the transfer.

/// One change of owner of an original transaction, as the event derivation reads it (a store's
/// transfer record).
public struct OwnershipChange: Sendable, Hashable {
  /// The original transaction that changed owner.
  public var originalTransactionId: String
  /// Who lost it.
  public var previousUserId: String
  /// Who has it since ``atMs``.
  public var newUserId: String
  /// The instant of the submission that moved it (the server's clock).
  public var atMs: Int64

  /// Creates a change.
  public init(originalTransactionId: String, previousUserId: String, newUserId: String, atMs: Int64) {
    self.originalTransactionId = originalTransactionId
    self.previousUserId = previousUserId
    self.newUserId = newUserId
    self.atMs = atMs
  }

  /// The canonical text of the change for `subject` (one of its two users), the input of the event
  /// id's hash, in ``EventCause/canonicalKey(for:)``'s format with its own kind, so no other
  /// cause shares it.
  public func canonicalKey(for subject: EventSubject) -> String {
    String(decoding: canonicalBytes(for: subject), as: UTF8.self)
  }

  /// ``canonicalKey(for:)`` as UTF-8.
  func canonicalBytes(for subject: EventSubject) -> [UInt8] {
    var key = CanonicalKey()
    for part in [
      subject.appId, subject.environment.rawValue, subject.userId, "ownership_transferred",
      originalTransactionId, String(atMs), previousUserId, newUserId,
    ] {
      key.add(part)
    }
    return key.bytes
  }
}

extension EventDerivation {
  /// The ``SubscriptionEventType/ownershipTransferred`` event of one of the change's two users.
  ///
  /// The event occurs at the change's instant. Its states are those of the original transaction's
  /// group at that instant, with and without the transaction's data: for the new owner from
  /// without to with, for the previous owner from with to without (so trends move the subscriber,
  /// and count neither a purchase nor a churn). Product and transaction are the newest of the
  /// original transaction's purchases by then (or at all); ``SubscriptionEvent/previousUserId``
  /// is the change's previous owner on both events.
  ///
  /// - Parameters:
  ///   - subject: the app, environment and one of the change's two users.
  ///   - change: the transfer.
  ///   - history: the subject's data as the subject owns it at the change's instant, with the
  ///     original transaction's data (the subject's copy) included.
  ///   - catalog: the app's products.
  ///   - detectedMs: when substatus made the change (stored in the event; not part of its id).
  public func ownershipTransferred(
    subject: EventSubject, change: OwnershipChange, history: PurchaseHistory, catalog: Catalog,
    detectedMs: Int64
  ) -> SubscriptionEvent {
    let otid = change.originalTransactionId
    let at = change.atMs
    let mine = history.transactions.filter { $0.originalTransactionId == otid }
    let latest =
      mine.filter { $0.purchaseDate <= at }.max(by: Self.purchaseOrder) ?? mine.max(by: Self.purchaseOrder)
    var group: String?
    for t in mine.sorted(by: Self.purchaseOrder).reversed() {
      if case .autoRenewable(let id) = Timeline.kind(of: t, catalog: catalog) {
        group = id
        break
      }
    }
    var states: (with: SubscriptionState?, without: SubscriptionState?) = (nil, nil)
    if let group {
      let with = SubscriptionEvaluator.evaluate(
        history: history.transactions, renewals: history.renewals, catalog: catalog, at: at)
      let without = SubscriptionEvaluator.evaluate(
        history: history.transactions.filter { $0.originalTransactionId != otid },
        renewals: history.renewals.filter { $0.originalTransactionId != otid }, catalog: catalog, at: at)
      states = (with.status(ofGroup: group)?.state ?? .neverSubscribed, without.status(ofGroup: group)?.state ?? .neverSubscribed)
    }
    let gained = subject.userId == change.newUserId
    return SubscriptionEvent(
      eventId: eventId(canonicalBytes: change.canonicalBytes(for: subject)), appId: subject.appId,
      userId: subject.userId, environment: subject.environment, type: .ownershipTransferred,
      occurredMs: at, detectedMs: detectedMs, subscriptionGroupId: group, productId: latest?.productId,
      transactionId: latest?.transactionId, originalTransactionId: otid,
      stateBefore: gained ? states.without : states.with, stateAfter: gained ? states.with : states.without,
      previousUserId: change.previousUserId, ownershipType: latest?.ownership)
  }

  private static func purchaseOrder(_ a: Transaction, _ b: Transaction) -> Bool {
    (a.purchaseDate, a.transactionId) < (b.purchaseDate, b.transactionId)
  }
}

extension OwnershipGap {
  /// The events a user with these gaps has of what they own: without those of an original
  /// transaction that a gap covers at their ``SubscriptionEvent/occurredMs`` (what happened to a
  /// purchase while another user owned it is that user's). Derive from the history
  /// ``owned(transactions:renewals:gaps:at:)`` returns at the write's instant, then filter.
  public static func ownedEvents(_ events: [SubscriptionEvent], gaps: [OwnershipGap]) -> [SubscriptionEvent] {
    if gaps.isEmpty { return events }
    return events.filter { event in
      guard let otid = event.originalTransactionId else { return true }
      return !gaps.contains { $0.originalTransactionId == otid && $0.covers(event.occurredMs) }
    }
  }
}
