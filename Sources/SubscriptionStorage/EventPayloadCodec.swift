// How a logged event is kept in the SQL stores: the whole ``SubscriptionEvent`` in the compact
// binary form of `PayloadCodec` (read on every ListEvents, WatchEvents and trends page, written on
// every deriving ingest). The columns beside it (app, user, type, environment, times) only index
// and filter; the payload alone gives the event back. Enumerations are stored by their raw values,
// so adding a case never renumbers stored events.
import SubscriptionDomain

extension PayloadCodec {
  /// Format byte of the binary event layout written now: 2 appends the ownership type to
  /// format 1's fields (format 1 payloads, written before events carried it, still decode, with
  /// no ownership type).
  /// Format 3 appends the billing plan (rule 22); format 2 payloads decode without one.
  /// Format 4 appends the notification type and subtype (rule 25); older payloads have none.
  /// Format 5 appends the commitment (k, n, its end); older payloads have none.
  /// Format 6 appends the retention answer (`RETENTION_OFFERED`); older payloads have none.
  /// Format 7 appends the refund request's answer (rule 27): the consumption body, detail and
  /// Apple's request reason; older payloads have none.
  package static let eventFormat: UInt8 = 7
  /// Stored properties the event layout covers (checked against the type by a test).
  package static let eventFieldCount = 29

  /// Encodes an event.
  package static func encode(_ e: SubscriptionEvent) -> [UInt8] {
    var w = BinaryWriter()
    w.byte(eventFormat)
    w.string(e.eventId)
    w.string(e.appId)
    w.string(e.userId)
    w.interned(e.environment.rawValue)
    w.string(e.type.rawValue)
    w.int(e.occurredMs)
    w.int(e.detectedMs)
    w.string(e.subscriptionGroupId)
    w.string(e.productId)
    w.string(e.transactionId)
    w.string(e.originalTransactionId)
    w.string(e.stateBefore?.rawValue)
    w.string(e.stateAfter?.rawValue)
    w.string(e.offer?.rawValue)
    w.string(e.offerId)
    w.int(e.priceMilliunits)
    w.string(e.currency)
    w.string(e.expirationReason)
    w.string(e.previousProductId)
    w.string(e.previousUserId)
    w.string(e.ownershipType?.rawValue)
    w.string(e.billingPlanType?.rawValue)
    w.string(e.notificationType)
    w.string(e.notificationSubtype)
    w.int(e.commitment.map { Int64($0.billingPeriodNumber) })
    w.int(e.commitment.map { Int64($0.totalBillingPeriods) })
    w.int(e.commitment?.expiresDate)
    // Format 6: the retention answer, its kind first (absent: no answer).
    w.string(e.retention?.kind.rawValue)
    if let retention = e.retention {
      w.string(retention.ruleId)
      w.string(retention.messageIdentifier)
      w.string(retention.offeredId)
    }
    // Format 7: the refund request's answer.
    w.string(e.consumptionBody)
    w.string(e.consumptionDetail)
    w.string(e.refundRequestReason)
    return w.bytes
  }

  /// Decodes an event payload.
  /// - Throws: `corrupt` for a payload this build cannot read.
  package static func decodeEvent(_ bytes: [UInt8]) throws(StoreError) -> SubscriptionEvent {
    var r = BinaryReader(bytes)
    let format = try r.byte()
    guard format >= 1 && format <= eventFormat else {
      throw StoreError(.corrupt, "stored event has an unknown format")
    }
    func value<T: RawRepresentable<String>>(_: T.Type, _ raw: String?, _ field: String)
      throws(StoreError) -> T?
    {
      guard let raw else { return nil }
      guard let v = T(rawValue: raw) else {
        throw StoreError(.corrupt, "stored event has an unknown \(field) \"\(raw)\"")
      }
      return v
    }
    let eventId = try r.string()
    let appId = try r.string()
    let userId = try r.string()
    guard let environment = try value(Environment.self, r.interned(), "environment") else {
      throw StoreError(.corrupt, "stored event has no environment")
    }
    guard let type = try value(SubscriptionEventType.self, r.string(), "type") else {
      throw StoreError(.corrupt, "stored event has no type")
    }
    var e = SubscriptionEvent(
      eventId: eventId, appId: appId, userId: userId, environment: environment, type: type,
      occurredMs: try r.int(), detectedMs: try r.int(), subscriptionGroupId: try r.optionalString(),
      productId: try r.optionalString(), transactionId: try r.optionalString(),
      originalTransactionId: try r.optionalString(),
      stateBefore: try value(SubscriptionState.self, r.optionalString(), "state"),
      stateAfter: try value(SubscriptionState.self, r.optionalString(), "state"),
      offer: try value(SubscriptionEventOffer.self, r.optionalString(), "offer"),
      offerId: try r.optionalString(), priceMilliunits: try r.optionalInt(),
      currency: try r.optionalString(), expirationReason: try r.optionalString(),
      previousProductId: try r.optionalString(), previousUserId: try r.optionalString())
    if format >= 2 { e.ownershipType = try value(OwnershipType.self, r.optionalString(), "ownership type") }
    if format >= 3 { e.billingPlanType = try value(BillingPlanType.self, r.optionalString(), "billing plan") }
    if format >= 4 {
      e.notificationType = try r.optionalString()
      e.notificationSubtype = try r.optionalString()
    }
    if format >= 5 {
      let (k, n, end) = (try r.optionalInt(), try r.optionalInt(), try r.optionalInt())
      if let k, let n {
        e.commitment = CommitmentStatus(billingPeriodNumber: Int(k), totalBillingPeriods: Int(n), expiresDate: end)
      }
    }
    if format >= 6, let kind = try value(RetentionAnswerKind.self, r.optionalString(), "retention answer") {
      e.retention = RetentionOfferRecord(
        kind: kind, ruleId: try r.optionalString(), messageIdentifier: try r.string(), offeredId: try r.optionalString())
    }
    if format >= 7 {
      e.consumptionBody = try r.optionalString()
      e.consumptionDetail = try r.optionalString()
      e.refundRequestReason = try r.optionalString()
    }
    guard r.isAtEnd else { throw StoreError(.corrupt, "stored event has trailing bytes") }
    return e
  }
}
