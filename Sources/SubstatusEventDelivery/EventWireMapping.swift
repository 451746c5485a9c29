import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

// Mapping of the event log's values (docs/architecture.md "Events") to and from the wire: shared by
// EventService, the webhook dispatcher (whose body is the `Event` in proto3 JSON) and trends.

// Event log cursors: ``EventCursors`` (opaque per app).

extension SubscriptionEventType {
  /// The wire value.
  package var wire: Substatus_V1_EventType {
    switch self {
    case .subscriptionStarted: .subscriptionStarted
    case .trialConverted: .trialConverted
    case .renewed: .renewed
    case .productChanged: .productChanged
    case .autoRenewDisabled: .autoRenewDisabled
    case .autoRenewEnabled: .autoRenewEnabled
    case .billingIssue: .billingIssue
    case .billingRecovered: .billingRecovered
    case .gracePeriodExpired: .gracePeriodExpired
    case .expired: .expired
    case .refunded: .refunded
    case .refundReversed: .refundReversed
    case .familyAccessRevoked: .familyAccessRevoked
    case .resubscribed: .resubscribed
    case .nonRenewingPurchased: .nonRenewingPurchased
    case .oneTimePurchased: .oneTimePurchased
    case .ownershipTransferred: .ownershipTransferred
    case .subscriptionExtended: .subscriptionExtended
    case .consentRescinded: .consentRescinded
    case .appleNotification: .appleNotification
    case .commitmentStarted: .commitmentStarted
    case .commitmentRenewed: .commitmentRenewed
    case .commitmentEnded: .commitmentEnded
    case .consumptionInfoSent: .consumptionInfoSent
    case .consumptionInfoFailed: .consumptionInfoFailed
    case .consumptionInfoNotSent: .consumptionInfoNotSent
    case .retentionOffered: .retentionOffered
    }
  }

  /// The domain type of a wire value in a request's `field`.
  /// - Throws: `INVALID_ARGUMENT` naming `field` for UNSPECIFIED or an unknown number.
  package init(wire: Substatus_V1_EventType, field: String) throws(RPCError) {
    guard let type = Self.allCases.first(where: { $0.wire == wire }) else {
      throw invalidArgument(field, "not an event type: \(wire.rawValue)")
    }
    self = type
  }

  /// The domain types of a request's repeated `field` (empty: all types).
  package static func set(wire: [Substatus_V1_EventType], field: String) throws(RPCError) -> Set<Self> {
    var types = Set<Self>()
    for (i, w) in wire.enumerated() { types.insert(try Self(wire: w, field: "\(field)[\(i)]")) }
    return types
  }
}

extension RetentionAnswerKind {
  /// The wire value.
  var wire: Substatus_V1_RetentionAnswerKind {
    switch self {
    case .defaultMessage: .defaultMessage
    case .message: .message
    case .alternateProduct: .alternateProduct
    case .promotionalOffer: .promotionalOffer
    }
  }
}

extension SubscriptionEventOffer {
  /// The wire value.
  package var wire: Substatus_V1_EventOffer {
    switch self {
    case .none: .none
    case .freeTrial: .freeTrial
    case .introductory: .introductory
    case .promotional: .promotional
    case .offerCode: .offerCode
    case .winBack: .winBack
    }
  }
}

extension LoggedEvent {
  /// The wire `Event`, its cursor the position after it (``EventCursors``, of the event's app).
  package func wire(_ cursors: EventCursors) -> Substatus_V1_Event {
    var w = event.wire
    w.cursor = cursors.encode(appId: event.appId, sequence: sequence)
    return w
  }
}

extension SubscriptionEvent {
  /// The wire `Event` without a cursor (a webhook test event has none).
  package var wire: Substatus_V1_Event {
    var w = Substatus_V1_Event()
    w.eventID = eventId
    w.appID = appId
    w.userID = userId
    w.environment = environment.wire
    w.type = type.wire
    w.occurredMs = occurredMs
    w.detectedMs = detectedMs
    w.subscriptionGroupID = subscriptionGroupId ?? ""
    w.productID = productId ?? ""
    w.transactionID = transactionId ?? ""
    w.originalTransactionID = originalTransactionId ?? ""
    w.stateBefore = stateBefore?.wire ?? .unspecified
    w.stateAfter = stateAfter?.wire ?? .unspecified
    w.offer = offer?.wire ?? .unspecified
    w.offerID = offerId ?? ""
    w.priceMilliunits = priceMilliunits ?? 0
    w.currency = currency ?? ""
    w.expirationReason = expirationReason ?? ""
    w.previousProductID = previousProductId ?? ""
    w.previousUserID = previousUserId ?? ""
    w.ownership = ownershipType?.wire ?? .unspecified
    w.notificationType = notificationType ?? ""
    w.notificationSubtype = notificationSubtype ?? ""
    w.billingPlan = billingPlanType.wire
    if let commitment {
      var c = Substatus_V1_Commitment()
      c.billingPeriodNumber = Int32(clamping: commitment.billingPeriodNumber)
      c.totalBillingPeriods = Int32(clamping: commitment.totalBillingPeriods)
      c.expiresMs = commitment.expiresDate ?? 0
      w.commitment = c
    }
    if let retention {
      w.retentionRuleID = retention.ruleId ?? ""
      w.retentionAnswer = retention.kind.wire
      w.retentionMessageIdentifier = retention.messageIdentifier
      w.retentionOfferedID = retention.offeredId ?? ""
    }
    w.consumptionBody = consumptionBody ?? ""
    w.consumptionDetail = consumptionDetail ?? ""
    w.refundRequestReason = refundRequestReason ?? ""
    return w
  }
}

extension WebhookRecord {
  /// The wire `Webhook`.
  package var wire: Substatus_V1_Webhook {
    var w = Substatus_V1_Webhook()
    w.webhookID = webhookId
    w.appID = appId
    w.url = url
    w.eventTypes = eventTypes.sorted { $0.wire.rawValue < $1.wire.rawValue }.map(\.wire)
    w.createdMs = createdMs
    w.secretFingerprint = secretFingerprint
    w.environment = environment?.wire ?? .unspecified
    return w
  }
}

extension DeliveryState {
  /// The wire value.
  package var wire: Substatus_V1_DeliveryState {
    switch self {
    case .pending: .pending
    case .delivered: .delivered
    case .failed: .failed
    }
  }
}

extension DeliveryAttemptRecord {
  /// The wire `DeliveryAttempt`.
  package var wire: Substatus_V1_DeliveryAttempt {
    var w = Substatus_V1_DeliveryAttempt()
    w.attemptedMs = attemptedMs
    w.httpStatus = Int32(clamping: httpStatus ?? 0)
    w.error = error ?? ""
    w.durationMs = durationMs
    return w
  }
}

extension DeliveryRecord {
  /// The wire `Delivery` (its event's cursor by `cursors`).
  package func wire(_ cursors: EventCursors) -> Substatus_V1_Delivery {
    var w = Substatus_V1_Delivery()
    w.deliveryID = deliveryId
    w.webhookID = webhookId
    w.event = event.wire(cursors)
    w.state = state.wire
    w.attempts = attempts.map(\.wire)
    w.nextAttemptMs = state == .pending ? (nextAttemptMs ?? 0) : 0
    w.createdMs = createdMs
    return w
  }
}
