// Refund requests to answer (docs/architecture.md rule 27): one durable row per V2
// `CONSUMPTION_REQUEST` notification, written when it arrives, claimed by the consumption
// responder until Apple accepts the answer, the answer is given up on (Apple's 12 hours passed)
// or nothing is to be sent; closing a row appends its event in the same commit.
import SubscriptionDomain

/// How a refund request ended.
public enum ConsumptionRequestOutcome: String, Sendable, Hashable, Codable, CaseIterable {
  /// Apple accepted the answer.
  case sent = "SENT"
  /// Apple refused the answer, or the 12 hours passed while sending kept failing.
  case failed = "FAILED"
  /// Nothing was to be sent (an `ASSIGNED` transaction, no consent, no policy, no key).
  case notSent = "NOT_SENT"
}

/// One refund request (a V2 `CONSUMPTION_REQUEST`) and where its answer stands.
public struct ConsumptionRequest: Sendable, Hashable {
  /// The app.
  public var appId: String
  /// The notification's id in the notification dedupe record (`v2:` + its `notificationUUID`):
  /// one row per notification.
  public var notificationId: String
  /// The environment of the notification.
  public var environment: Environment
  /// The transaction the customer asked a refund for (the answer's path).
  public var transactionId: String
  /// Its original transaction (which users own it).
  public var originalTransactionId: String
  /// The notification's `signedDate`: Apple's 12 hours run from it.
  public var requestedMs: Int64
  /// When the server received it.
  public var receivedMs: Int64
  /// Apple's `consumptionRequestReason`, when given.
  public var reason: String?
  /// Sending attempts made so far.
  public var attempts: Int
  /// When the next attempt is due (also a claim's lease end); `nil` once closed.
  public var nextAttemptMs: Int64?
  /// How it ended; `nil` while open.
  public var outcome: ConsumptionRequestOutcome?
  /// The last failure, or why it ended without an answer.
  public var detail: String?

  /// Creates a request, open and due at once when `nextAttemptMs` is not given.
  public init(
    appId: String, notificationId: String, environment: Environment, transactionId: String,
    originalTransactionId: String, requestedMs: Int64, receivedMs: Int64, reason: String? = nil,
    attempts: Int = 0, nextAttemptMs: Int64? = nil, outcome: ConsumptionRequestOutcome? = nil, detail: String? = nil
  ) {
    self.appId = appId
    self.notificationId = notificationId
    self.environment = environment
    self.transactionId = transactionId
    self.originalTransactionId = originalTransactionId
    self.requestedMs = requestedMs
    self.receivedMs = receivedMs
    self.reason = reason
    self.attempts = attempts
    self.nextAttemptMs = outcome == nil ? (nextAttemptMs ?? receivedMs) : nil
    self.outcome = outcome
    self.detail = detail
  }
}

/// Where the stores keep ``ConsumptionRequest``s. The SQLite, PostgreSQL and in-memory stores
/// conform; rows survive restarts, and instances sharing a database never claim one row at once.
public protocol ConsumptionRequestStore: Sendable {
  /// Records a request unless its notification's is recorded already (Apple retries a
  /// notification with the same id).
  /// - Returns: whether it was new.
  /// - Throws: `notFound` (app), `invalidArgument` (empty ids, an id longer than 64 bytes; a
  ///   notification id longer than 128).
  func recordConsumptionRequest(_ request: ConsumptionRequest) async throws(StoreError) -> Bool

  /// Claims the open requests due at `atMs` (oldest due first, at most `limit`): each one's
  /// ``ConsumptionRequest/nextAttemptMs`` becomes `leaseUntilMs`, so another instance (or a
  /// later claim) takes it only after the lease, when the claimant did not close or reschedule it.
  func claimDueConsumptionRequests(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [ConsumptionRequest]

  /// The earliest ``ConsumptionRequest/nextAttemptMs`` of an open request, `nil` when none.
  func nextConsumptionRequestDueMs() async throws(StoreError) -> Int64?

  /// After a failed attempt: the request stays open, due again at `nextAttemptMs`.
  /// - Throws: `notFound` when no open request has that notification id.
  func rescheduleConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError)

  /// Closes a request with its outcome and appends `events` (the request's event, one per user
  /// who owns its transaction) to the log in the same commit, each id once.
  /// - Returns: the events appended.
  /// - Throws: `notFound` when no open request has that notification id.
  func closeConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, outcome: ConsumptionRequestOutcome, detail: String?,
    events: [SubscriptionEvent]
  ) async throws(StoreError) -> [LoggedEvent]

  /// One request, open or closed.
  func consumptionRequest(appId: String, notificationId: String) async throws(StoreError) -> ConsumptionRequest?
}

extension StoreValidation {
  /// Checks a request's ids.
  /// - Throws: `invalidArgument` naming the problem.
  public static func validate(_ request: ConsumptionRequest) throws(StoreError) {
    for (name, value, limit) in [
      ("app id", request.appId, 64), ("notification id", request.notificationId, 128),
      ("transaction id", request.transactionId, 64), ("original transaction id", request.originalTransactionId, 64),
    ] where value.isEmpty || value.utf8.count > limit {
      throw StoreError(.invalidArgument, "a consumption request's \(name) must have 1 to \(limit) bytes")
    }
  }
}
