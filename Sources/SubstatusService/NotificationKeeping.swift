// Rule 25 (docs/architecture.md "Domain rules" and "Apple's notifications"): every verified V2
// notification is kept, whatever its type, and answered 200; types this build does not know are
// counted; what a notification says beyond its transaction data becomes an event
// (``NotificationV2/eventDisposition``). Apple's types:
// https://developer.apple.com/documentation/appstoreservernotifications/notificationtype;
// RESCIND_CONSENT's `appData` with the signed AppTransaction (notifications 2.19):
// https://developer.apple.com/documentation/appstoreservernotifications/appdata.
import AppStoreSignedData
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import Synchronization
import SubstatusMetrics

/// Counts V2 notification types this build does not know, for `/metrics`
/// (`substatus_unknown_notification_types_total{type=...}`). The label set is bounded: a type
/// that is not plain upper-case ASCII (letters, digits, `_`, at most 64 bytes), or any type after
/// the first ``maxTypes`` distinct ones, is counted as `other`.
public final class NotificationTypeMetrics: MetricsSource, Sendable {
  /// The most distinct type labels, `other` included.
  public static let maxTypes = 32
  private let counts = Mutex<[String: UInt64]>([:])

  /// Creates empty counters.
  public init() {}

  /// One notification of an unknown type was kept.
  public func unknownType(_ rawType: String) {
    let plain =
      !rawType.isEmpty && rawType.utf8.count <= 64
      && rawType.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }
    counts.withLock { c in
      if plain, c[rawType] != nil || c.count < Self.maxTypes - 1 {
        c[rawType, default: 0] += 1
      } else {
        c["other", default: 0] += 1
      }
    }
  }

  /// The counters as a metric family (`substatus_unknown_notification_types_total`, by type).
  public func metricFamilies() -> [MetricFamily] {
    let c = counts.withLock { $0 }
    return [
      .labelled(
        "substatus_unknown_notification_types_total",
        "V2 notifications of a type this build does not know, kept and answered 200.", .counter, label: "type",
        c.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) })
    ]
  }
}

extension SubstatusService {
  /// The derivation that names the events notifications cause by themselves.
  private static let notificationEvents = EventDerivation(digest: { SHA256.hash($0) })

  /// Keeps a verified V2 notification (``NotificationLogStore``) with the events it causes by
  /// itself, after its transaction data was applied. Idempotent by `notificationUUID` and event
  /// ids, so it runs for Apple's retries too (a retry after a failure between the two commits
  /// keeps what the first attempt did not).
  ///
  /// - `RENEWAL_EXTENDED`: `SUBSCRIPTION_EXTENDED` for the users of its transaction (the
  ///   transaction itself, with its new `expiresDate`, was applied like any signed copy: newer by
  ///   its `signedDate`, it replaces the stored one, and the period runs to the new date).
  /// - `RESCIND_CONSENT`: `CONSENT_RESCINDED` for each user linked to the `appData`'s Apple Account
  ///   (`appTransactionId`, rule 24), each erased first as DeleteUser erases when the app's policy
  ///   `erase_on_rescind_consent` is on; an account linked to no user gives one event without a
  ///   user. Users erased by an earlier attempt are not found again (their link went with them).
  /// - Every other type no derived event carries: `APPLE_NOTIFICATION` for the users of its
  ///   transaction, or without a user when it names none.
  func keepNotificationV2(
    _ notification: NotificationV2, signedPayload: String, environment: SubscriptionDomain.Environment,
    cached: CachedApp, transaction: SubscriptionDomain.Transaction?, appTransaction: AppTransaction?,
    updates: [UserPurchases], receivedMs: Int64
  ) async throws(RPCError) -> NotificationKept {
    let appID = cached.app.appId
    var userIds: [String] = []
    var erased: [String] = []
    switch notification.eventDisposition {
    case .derived: break
    case .extended, .appleNotification:
      userIds = transaction == nil ? [""] : updates.map(\.user.userId)
    case .rescinded:
      if let account = appTransaction?.appTransactionId {
        userIds = try await stored { () throws(StoreError) in
          try await notificationLogStore.users(appId: appID, environment: environment, appTransactionId: account)
        }
      }
      if cached.app.policy.eraseOnRescindConsent {
        for user in userIds {
          _ = try await eraseUser(appID: appID, userID: user)
          erased.append(user)
        }
      }
      if userIds.isEmpty { userIds = [""] }
    }
    let events = notification.events(
      appId: appID, environment: environment, userIds: userIds, transaction: transaction, receivedMs: receivedMs,
      derivation: Self.notificationEvents)
    let kept = KeptNotification(
      appId: appID, environment: environment, notificationUUID: notification.notificationUUID,
      notificationType: notification.rawNotificationType, subtype: notification.rawSubtype,
      signedDateMs: notification.signedDate, receivedMs: receivedMs, signedPayload: signedPayload)
    let result = try await stored { () throws(StoreError) in try await notificationLogStore.keepNotification(kept, events: events) }
    if result.isNew, notification.notificationType == nil {
      notificationTypeMetrics.unknownType(notification.rawNotificationType)
    }
    if !result.eventsAppended.isEmpty { eventsAppended(result.eventsAppended.count, source: "notification") }
    if !erased.isEmpty {
      log.info(
        "rescind consent erased users",
        [("app_id", .string(appID)), ("users", .integer(erased.count)), ("environment", .string(environment.rawValue))])
      for user in erased {
        _ = try? await auditStore.appendAudit(
          AuditEntry(
            tenantId: cached.app.tenantId, atMs: receivedMs, actorKeyId: "apple:RESCIND_CONSENT", action: "DeleteUser",
            resource: "apps/\(appID)/users/\(Self.userIDHash(user))",
            details: "erase_on_rescind_consent, notification \(notification.notificationUUID.prefix(64))"))
      }
    }
    return result
  }
}
