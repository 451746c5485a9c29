import SubscriptionDomain
import SubscriptionStorage

/// The in-memory store's kept notifications: in the order kept, with the ids already kept per app.
struct InMemoryNotificationLog {
  /// Kept notifications, in sequence order.
  var notifications: [KeptNotification] = []
  /// `app id` and `notificationUUID` of ``notifications``.
  var ids: Set<[String]> = []
  /// The last sequence handed out.
  var lastSequence: Int64 = 0
}

extension InMemoryStore {
  /// See ``NotificationLogStore/keepNotification(_:events:)``.
  public func keepNotification(_ notification: KeptNotification, events: [SubscriptionEvent]) async throws(StoreError)
    -> NotificationKept
  {
    try StoreValidation.validate(notification)
    return try withState { (s: inout State) throws(StoreError) in
      guard s.apps[notification.appId] != nil else { throw StoreError.notFound("app", notification.appId) }
      for e in events where s.apps[e.appId] == nil { throw StoreError.notFound("app", e.appId) }
      let isNew = s.keptNotifications.ids.insert([notification.appId, notification.notificationUUID]).inserted
      if isNew {
        s.keptNotifications.lastSequence += 1
        var kept = notification
        kept.sequence = s.keptNotifications.lastSequence
        s.keptNotifications.notifications.append(kept)
      }
      return NotificationKept(isNew: isNew, eventsAppended: s.eventLog.append(events))
    }
  }

  /// See ``NotificationLogStore/keptNotifications(appId:afterSequence:limit:)``.
  public func keptNotifications(appId: String, afterSequence: Int64, limit: Int) async throws(StoreError)
    -> [KeptNotification]
  {
    state.withLock { s in
      Array(
        s.keptNotifications.notifications.lazy.filter { $0.appId == appId && $0.sequence > afterSequence }
          .prefix(EventLogRules.pageSize(limit)))
    }
  }

  /// See ``NotificationLogStore/users(appId:environment:appTransactionId:)``.
  public func users(appId: String, environment: Environment, appTransactionId: String) async throws(StoreError)
    -> [String]
  {
    state.withLock { s in
      s.appAccounts.values.filter {
        $0.user.appId == appId && $0.user.environment == environment && $0.appTransactionId == appTransactionId
      }.map(\.user.userId).sorted()
    }
  }
}

extension InMemoryStore {
  /// See ``KeptNotificationRetentionStore/listKeptNotifications(_:)``.
  public func listKeptNotifications(_ query: KeptNotificationQuery) async throws(StoreError) -> [KeptNotification] {
    state.withLock { s in
      Array(
        s.keptNotifications.notifications.filter(query.matches)
          .sorted { ($0.receivedMs, $0.sequence) < ($1.receivedMs, $1.sequence) }
          .prefix(query.pageSize))
    }
  }

  /// See ``KeptNotificationRetentionStore/pruneKeptNotifications(receivedBeforeMs:limit:)``.
  public func pruneKeptNotifications(receivedBeforeMs: Int64, limit: Int) async throws(StoreError) -> Int {
    state.withLock { s in
      let old = s.keptNotifications.notifications.filter { $0.receivedMs < receivedBeforeMs }
        .sorted { ($0.receivedMs, $0.sequence) < ($1.receivedMs, $1.sequence) }
        .prefix(min(max(1, limit), 10_000))
      let gone = Set(old.map(\.sequence))
      for n in old { s.keptNotifications.ids.remove([n.appId, n.notificationUUID]) }
      s.keptNotifications.notifications.removeAll { gone.contains($0.sequence) }
      return gone.count
    }
  }
}
