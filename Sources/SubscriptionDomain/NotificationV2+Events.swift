// Rule 25 (docs/architecture.md "Domain rules"): every V2 notification is kept, and what a
// notification says beyond its transaction data becomes an event. Apple's list of types and what
// each means: https://developer.apple.com/documentation/appstoreservernotifications/notificationtype
// (the 23 values of apple/app-store-server-library-python's `NotificationTypeV2`).

extension NotificationV2 {
  /// What a notification adds to the event log besides the events its transaction data derives.
  public enum EventDisposition: Sendable, Hashable {
    /// Nothing: the events derived from its signed transaction and renewal info tell it
    /// (SUBSCRIBED, DID_RENEW, EXPIRED, REFUND, ONE_TIME_CHARGE...), or another rule answers it
    /// (CONSUMPTION_REQUEST, rule 27).
    case derived
    /// ``SubscriptionEventType/subscriptionExtended`` for each user of its transaction
    /// (`RENEWAL_EXTENDED`: "the App Store extended the subscription renewal date for a specific
    /// subscription", after Extend a Subscription Renewal Date or a mass extension).
    case extended
    /// ``SubscriptionEventType/consentRescinded`` for each user linked to its `appData`'s Apple
    /// Account (`RESCIND_CONSENT`, notifications 2.19: "a parent or guardian withdrew consent for
    /// a child's app usage").
    case rescinded
    /// ``SubscriptionEventType/appleNotification``: a type no other event carries, today's (TEST,
    /// PRICE_INCREASE, REFUND_DECLINED, RENEWAL_EXTENSION, EXTERNAL_PURCHASE_TOKEN, the Advanced
    /// Commerce API's METADATA_UPDATE, MIGRATION, PRICE_CHANGE) or one Apple adds later.
    case appleNotification
  }

  /// What this notification adds to the event log (rule 25).
  public var eventDisposition: EventDisposition {
    guard let type = notificationType else { return .appleNotification }
    switch type {
    case .subscribed, .didChangeRenewalPref, .didChangeRenewalStatus, .offerRedeemed, .didRenew, .expired,
      .didFailToRenew, .gracePeriodExpired, .refund, .refundReversed, .revoke, .oneTimeCharge,
      .consumptionRequest:
      return .derived
    case .renewalExtended: return .extended
    case .rescindConsent: return .rescinded
    case .test, .priceIncrease, .refundDeclined, .renewalExtension, .externalPurchaseToken, .metadataUpdate,
      .migration, .priceChange:
      return .appleNotification
    }
  }

  /// The events this notification causes by itself for `userIds` (empty user id: the app, for a
  /// notification that names no user), one per user, each with a deterministic id (the app,
  /// environment, user and `notificationUUID`: Apple's retries log nothing new). `transaction` is
  /// its verified `signedTransactionInfo`, when it has one. `.derived` notifications cause none.
  public func events(
    appId: String, environment: Environment, userIds: [String], transaction: Transaction?,
    receivedMs: Int64, derivation: EventDerivation
  ) -> [SubscriptionEvent] {
    let type: SubscriptionEventType
    switch eventDisposition {
    case .derived: return []
    case .extended: type = .subscriptionExtended
    case .rescinded: type = .consentRescinded
    case .appleNotification: type = .appleNotification
    }
    return userIds.map { userId in
      var key = Array("notification".utf8)
      for part in [appId, environment.rawValue, userId, notificationUUID] {
        key.append(0)
        key += Array(part.utf8)
      }
      var e = SubscriptionEvent(
        eventId: derivation.eventId(canonicalBytes: key), appId: appId, userId: userId,
        environment: environment, type: type, occurredMs: signedDate ?? receivedMs, detectedMs: receivedMs,
        subscriptionGroupId: transaction?.subscriptionGroupIdentifier, productId: transaction?.productId,
        transactionId: transaction?.transactionId, originalTransactionId: transaction?.originalTransactionId,
        ownershipType: transaction?.inAppOwnershipType)
      e.notificationType = rawNotificationType
      e.notificationSubtype = rawSubtype
      e.billingPlanType = transaction?.billingPlanType
      return e
    }
  }
}
