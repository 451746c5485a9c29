// Rule 25 (docs/architecture.md "Domain rules"): every verified V2 notification is kept, whatever
// its type, once per notificationUUID, with the events it causes by itself.
import SubscriptionDomain

/// A verified App Store Server Notification V2, as kept.
public struct KeptNotification: Sendable, Hashable {
  /// The app it was sent to.
  public var appId: String
  /// The environment its payload names.
  public var environment: Environment
  /// Apple's `notificationUUID`: one row per app and id.
  public var notificationUUID: String
  /// Apple's `notificationType`, as sent (unknown types too).
  public var notificationType: String
  /// Apple's `subtype`, when it has one.
  public var subtype: String?
  /// Apple's `signedDate`.
  public var signedDateMs: Int64?
  /// When substatus first received it.
  public var receivedMs: Int64
  /// The verified `signedPayload` (the compact JWS), whole.
  public var signedPayload: String
  /// The notification's place in the store's log of kept notifications (assigned by the store;
  /// ignored on write).
  public var sequence: Int64

  /// Creates a kept notification.
  public init(
    appId: String, environment: Environment, notificationUUID: String, notificationType: String,
    subtype: String? = nil, signedDateMs: Int64? = nil, receivedMs: Int64, signedPayload: String,
    sequence: Int64 = 0
  ) {
    self.appId = appId
    self.environment = environment
    self.notificationUUID = notificationUUID
    self.notificationType = notificationType
    self.subtype = subtype
    self.signedDateMs = signedDateMs
    self.receivedMs = receivedMs
    self.signedPayload = signedPayload
    self.sequence = sequence
  }
}

/// What ``NotificationLogStore/keepNotification(_:events:)`` did.
public struct NotificationKept: Sendable, Hashable {
  /// Whether the notification was new (`false`: its `notificationUUID` was kept already).
  public var isNew: Bool
  /// The events appended (those whose ids the log did not hold).
  public var eventsAppended: [LoggedEvent]

  /// Creates a result.
  public init(isNew: Bool, eventsAppended: [LoggedEvent]) {
    self.isNew = isNew
    self.eventsAppended = eventsAppended
  }
}

/// Where the stores keep every verified V2 notification (rule 25) and find the users of an Apple
/// Account (`RESCIND_CONSENT`). The SQLite, PostgreSQL and in-memory stores conform. Kept
/// notifications are app data: they are not erased with a user (they name no user), and they go
/// with their app.
public protocol NotificationLogStore: Sendable {
  /// Keeps `notification` unless its app already holds its `notificationUUID`, and appends the
  /// `events` whose ids the log does not hold, in one commit (a retry after a failure appends what
  /// the first attempt did not).
  /// - Throws: `notFound` (app), `invalidArgument` (an empty or over-long id or type).
  func keepNotification(_ notification: KeptNotification, events: [SubscriptionEvent]) async throws(StoreError)
    -> NotificationKept

  /// The app's kept notifications after `afterSequence`, in the order they were first kept, at
  /// most `limit` (clamped to 1...1000).
  func keptNotifications(appId: String, afterSequence: Int64, limit: Int) async throws(StoreError)
    -> [KeptNotification]

  /// The users of one app and environment whose ``AppAccountLink`` names `appTransactionId`, by id.
  func users(appId: String, environment: Environment, appTransactionId: String) async throws(StoreError)
    -> [String]
}

extension StoreValidation {
  /// Checks a notification to keep: an app id; `notificationUUID` 1 to 128 bytes; the type 1 to 256
  /// bytes and the subtype at most 256 (Apple's are under 32: the bounds only keep rows small).
  /// - Throws: `invalidArgument` naming the problem.
  public static func validate(_ n: KeptNotification) throws(StoreError) {
    if n.appId.isEmpty { throw StoreError(.invalidArgument, "notification: app_id is empty") }
    if n.notificationUUID.isEmpty || n.notificationUUID.utf8.count > 128 {
      throw StoreError(.invalidArgument, "notification: notificationUUID must be 1 to 128 bytes")
    }
    if n.notificationType.isEmpty || n.notificationType.utf8.count > 256 {
      throw StoreError(.invalidArgument, "notification: notificationType must be 1 to 256 bytes")
    }
    if let subtype = n.subtype, subtype.utf8.count > 256 {
      throw StoreError(.invalidArgument, "notification: subtype longer than 256 bytes")
    }
  }
}
