// Refund requests (docs/architecture.md rule 27): a V2 `CONSUMPTION_REQUEST` of an app whose policy
// has a consumption policy becomes a durable row (``SubscriptionStorage/ConsumptionRequestStore``)
// when it arrives; the ``ConsumptionResponder`` answers it with Send Consumption Information well
// within the 12 hours Apple gives
// (https://developer.apple.com/documentation/appstoreserverapi/send-consumption-information),
// retrying with backoff, and closes it with an event (sent, failed, or not sent and why).
import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusAppleUpstream
import SubstatusClock
import SubstatusEventDelivery
import SubstatusMetrics
import SubstatusServiceCore
import Synchronization

/// Counts of refund requests recorded and of their outcomes, for `/metrics`.
public final class ConsumptionMetrics: MetricsSource, Sendable {
  private let counts = Mutex<[String: UInt64]>([:])

  /// Creates zeroed counters.
  public init() {}

  /// Counts one outcome: `recorded`, `sent`, `failed`, `not_sent`, `retried`.
  public func count(_ outcome: String) { counts.withLock { $0[outcome, default: 0] += 1 } }

  /// The count of one outcome.
  public func count(of outcome: String) -> UInt64 { counts.withLock { $0[outcome] ?? 0 } }

  /// The counters as a metric family (`substatus_consumption_requests_total`, by outcome).
  public func metricFamilies() -> [MetricFamily] {
    let counts = counts.withLock { $0 }
    return [
      .labelled(
        "substatus_consumption_requests_total",
        "Apple's refund requests (CONSUMPTION_REQUEST) by outcome: recorded, sent (Send Consumption Information accepted), failed (refused, or 12 hours passed), not_sent (on purpose), retried (an attempt failed and was rescheduled).",
        .counter, label: "outcome",
        ["recorded", "sent", "failed", "not_sent", "retried"].map { ($0, counts[$0] ?? 0) })
    ]
  }
}


/// Answers the refund requests the store holds (a ``ServiceLifecycle``-style service: ``run()``
/// until ``beginGracefulShutdown()``).
///
/// Each pass claims the requests due (a lease, so instances sharing a database never answer one at
/// once, and a crash leaves it due again after the lease), and for each: decides the answer from
/// the app's consumption policy, the transaction and the share of its period used now
/// (``SubscriptionDomain/ConsumptionDecision``), sends it with the app's In-App Purchase key, and
/// closes the row with its event; a failure Apple may not repeat (network, 5xx, 429, a refused
/// key) is retried with backoff (``Configuration-swift.struct/initialBackoff`` doubling up to
/// ``Configuration-swift.struct/maxBackoff``) until Apple's 12 hours have passed, then closed as
/// failed with the last reason. Time is the service's clock; between passes it waits for the next
/// due request (service clock), a new request (``SubstatusService/consumptionSignal``) or the
/// periodic pass (real time).
public final class ConsumptionResponder: Sendable {
  /// Apple's time to answer a refund request: 12 hours from the notification's `signedDate`.
  static let consumptionAnswerWindowMs: Int64 = 12 * 3_600_000

  /// How the responder works.
  public struct Configuration: Sendable {
    /// The longest real time between passes.
    public var maxInterval: Duration
    /// Requests claimed per pass.
    public var batchSize: Int
    /// How long a claim holds a request (service clock) before another pass may take it.
    public var leaseMs: Int64
    /// The wait after a first failed attempt (service clock); it doubles per attempt.
    public var initialBackoffMs: Int64
    /// The longest wait between attempts.
    public var maxBackoffMs: Int64

    /// Creates a configuration.
    public init(
      maxInterval: Duration = .seconds(30), batchSize: Int = 16, leaseMs: Int64 = 300_000,
      initialBackoffMs: Int64 = 60_000, maxBackoffMs: Int64 = 3_600_000
    ) {
      self.maxInterval = maxInterval
      self.batchSize = min(max(1, batchSize), 100)
      self.leaseMs = max(1, leaseMs)
      self.initialBackoffMs = max(1, initialBackoffMs)
      self.maxBackoffMs = max(self.initialBackoffMs, maxBackoffMs)
    }

    /// The wait after `attempts` failed attempts.
    func backoff(afterAttempts attempts: Int) -> Int64 {
      let shift = min(max(attempts - 1, 0), 30)
      let wait = initialBackoffMs.multipliedReportingOverflow(by: Int64(1) << shift)
      return wait.overflow ? maxBackoffMs : min(wait.partialValue, maxBackoffMs)
    }
  }

  /// The service whose store, clock and Server API client are used.
  let service: any IngestPath
  /// The settings.
  public let configuration: Configuration
  private let passTimer: PeriodicJobTimer
  private let dueTimer: PeriodicJobTimer

  /// Creates a responder; it does nothing until ``run()`` or ``respondDue()``.
  package init(service: any IngestPath, configuration: Configuration = Configuration()) {
    self.service = service
    self.configuration = configuration
    self.passTimer = PeriodicJobTimer(clock: service.environment.wireClock)
    self.dueTimer = PeriodicJobTimer(clock: service.environment.clock)
  }

  /// Answers due requests until ``beginGracefulShutdown()`` or cancellation.
  public func run() async {
    while !passTimer.isStopping, !Task.isCancelled {
      let seen = service.consumptionSignal.generation
      let next = await respondDue()
      let now = service.environment.now()
      await withTaskGroup(of: Void.self) { group in
        group.addTask { await self.passTimer.wait(self.configuration.maxInterval) }
        if let next, next > now {
          group.addTask { await self.dueTimer.wait(.milliseconds(next - now)) }
        }
        group.addTask { await self.service.consumptionSignal.wait(after: seen) }
        await group.next()
        group.cancelAll()
      }
    }
  }

  /// Stops ``run()`` after the pass in progress.
  public func beginGracefulShutdown() {
    passTimer.stop()
    dueTimer.stop()
  }

  /// One pass: claims and answers every request due now.
  /// - Returns: the next due request after the pass, `nil` when none (or the store failed: the
  ///   next pass tries again; failures are logged).
  @discardableResult
  public func respondDue() async -> Int64? {
    let store = service.store
    do {
      while !passTimer.isStopping {
        let now = service.environment.now()
        let claimed = try await store.claimDueConsumptionRequests(
          atMs: now, limit: configuration.batchSize, leaseUntilMs: now + configuration.leaseMs)
        if claimed.isEmpty { break }
        for request in claimed { try await respond(to: request) }
        if claimed.count < configuration.batchSize { break }
      }
      return try await store.nextConsumptionRequestDueMs()
    } catch {
      service.log.info("consumption responder: the store failed; retrying at the next pass", [("error", .string("\(error)"))])
      return nil
    }
  }

  /// Answers one claimed request, then closes or reschedules it.
  func respond(to request: ConsumptionRequest) async throws {
    let now = service.environment.now()
    let attempts = request.attempts
    let deadline = request.requestedMs + Self.consumptionAnswerWindowMs
    let cached = try await service.loadApp(request.appId)
    let owners = try await owners(of: request)
    // The transaction as stored for its first owner (the notification stored it), else nothing.
    let user = UserKey(appId: request.appId, environment: request.environment, userId: owners[0])
    let history = try await service.store.history(of: user).transactions
    guard let cached, let transaction = history.first(where: { $0.transactionId == request.transactionId }) else {
      try await close(request, owners, attempts: attempts, outcome: .notSent, detail: "unknown_transaction", transaction: nil)
      return
    }
    if now >= deadline {
      try await close(
        request, owners, attempts: attempts, outcome: .failed,
        detail: "expired: Apple's 12 hours passed" + (request.detail.map { "; last failure: \($0)" } ?? ""),
        transaction: transaction)
      return
    }
    let catalog = cached.catalog
    let type = catalog.productType(of: transaction.productId) ?? transaction.type
    let used = ConsumptionShare.usedMilliunits(of: transaction, history: history, catalog: catalog, at: now)
    let decision = ConsumptionDecision.decide(
      policy: cached.app.policy.consumptionPolicy, transaction: transaction, productType: type, usedMilliunits: used)
    guard case .send(let body) = decision else {
      if case .notSent(let reason) = decision {
        try await close(request, owners, attempts: attempts, outcome: .notSent, detail: reason, transaction: transaction)
      }
      return
    }
    let authorizer: any AppStoreServerAPIAuthorizer
    do { authorizer = try await service.serverAPIAuthorizer(cached) } catch {
      try await close(
        request, owners, attempts: attempts, outcome: .notSent, detail: "no_in_app_purchase_key: \(error.message)",
        transaction: transaction)
      return
    }
    let failure: AppStoreServerAPIError?
    do throws(AppStoreServerAPIError) {
      try await service.appStoreServerAPI.sendConsumptionInformation(
        transactionId: request.transactionId, body: body, environment: request.environment, authorizer: authorizer,
        nowMs: now)
      failure = nil
    } catch {
      failure = error
    }
    if let error = failure {
      if error.code == .rejected || error.code == .notFound || error.code == .malformedResponse {
        try await close(
          request, owners, attempts: attempts + 1, outcome: .failed, detail: "rejected: \(error.message)",
          transaction: transaction)
        return
      }
      let next = min(now + configuration.backoff(afterAttempts: attempts + 1), deadline)
      try await service.store.rescheduleConsumptionRequest(
        appId: request.appId, notificationId: request.notificationId, attempts: attempts + 1, nextAttemptMs: next,
        detail: "\(error.code): \(error.message)")
      service.consumptionMetrics.count("retried")
      service.log.info("consumption information not sent; retrying", [
        ("app_id", .string(request.appId)), ("transaction_id", .string(request.transactionId)),
        ("attempts", .integer(Int64(attempts + 1))), ("next_attempt_ms", .integer(next)), ("error", .string(error.message)),
      ])
      return
    }
    try await close(
      request, owners, attempts: attempts + 1, outcome: .sent, detail: nil, transaction: transaction, body: body)
  }

  /// The app users who own the request's original transaction (the pseudo-user of data no user
  /// submitted when none does).
  private func owners(of request: ConsumptionRequest) async throws -> [String] {
    let users = try await service.store.users(
      appId: request.appId, environment: request.environment, originalTransactionId: request.originalTransactionId)
    return users.isEmpty
      ? [PurchaseOwnership.unclaimedUserId(originalTransactionId: request.originalTransactionId)] : users.sorted()
  }

  /// Closes the request with its event for each owner, counts it and wakes event readers.
  private func close(
    _ request: ConsumptionRequest, _ owners: [String], attempts: Int, outcome: ConsumptionRequestOutcome,
    detail: String?, transaction: SubscriptionDomain.Transaction?, body: ConsumptionInformation? = nil
  ) async throws {
    let now = service.environment.now()
    let type: SubscriptionEventType =
      switch outcome {
      case .sent: .consumptionInfoSent
      case .failed: .consumptionInfoFailed
      case .notSent: .consumptionInfoNotSent
      }
    let events = owners.map { userId in
      var event = SubscriptionEvent(
        eventId: Self.eventId(request, userId: userId), appId: request.appId, userId: userId,
        environment: request.environment, type: type, occurredMs: now, detectedMs: now,
        subscriptionGroupId: transaction?.subscriptionGroupIdentifier, productId: transaction?.productId,
        transactionId: request.transactionId, originalTransactionId: request.originalTransactionId,
        ownershipType: transaction?.ownership)
      event.consumptionBody = body?.json
      event.consumptionDetail = detail
      event.refundRequestReason = request.reason
      return event
    }
    let appended = try await service.store.closeConsumptionRequest(
      appId: request.appId, notificationId: request.notificationId, attempts: attempts, outcome: outcome,
      detail: detail, events: events)
    service.consumptionMetrics.count(outcome == .sent ? "sent" : outcome == .failed ? "failed" : "not_sent")
    if !appended.isEmpty { service.eventsAppended(appended.count, source: "consumption") }
    service.log.info("consumption request closed", [
      ("app_id", .string(request.appId)), ("transaction_id", .string(request.transactionId)),
      ("outcome", .string(outcome.rawValue)), ("attempts", .integer(Int64(attempts))),
      ("detail", .string(detail ?? "")),
    ])
  }

  /// A deterministic event id per request and user (`evt_` and 32 hexadecimal digits).
  static func eventId(_ request: ConsumptionRequest, userId: String) -> String {
    let canonical = Array("consumption\u{0}\(request.appId)\u{0}\(request.notificationId)\u{0}\(userId)".utf8)
    return "evt_" + Hex.encode(Array(SHA256.hash(canonical).prefix(16)))
  }
}
