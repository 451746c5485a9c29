import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusAppleUpstream
import SubstatusJSON
import SubstatusServiceCore
import Synchronization

// MARK: Due policy

/// When a user's stored receipt is verified with Apple again, decided from the evaluation made
/// right after each verification (a pure function: time is a parameter).
///
/// Per subscription group, from its state at `now` (`e` = the deciding transaction's expiry, `p` =
/// its period `e - purchase`, when known):
///
/// | state | next due |
/// | --- | --- |
/// | `ACTIVE`, `e - now > window` | `e - window` (look again shortly before the expiry) |
/// | `ACTIVE`, `e - now <= window` | `e + delay` (the renewal, or its failure, is in Apple's answer by then) |
/// | `GRACE_PERIOD` | `now + billingIssueInterval`, or the end of grace `+ delay` if sooner |
/// | `BILLING_RETRY` | `now + billingIssueInterval` |
/// | `EXPIRED`, auto-renew on | `e + delay`, then once more at `e + followUp`, then never |
/// | `EXPIRED` (auto-renew off), `REVOKED`, `NEVER_SUBSCRIBED` | never (`nil`) |
///
/// with `window = min(expiryWindow, p / 2)`, `delay = min(afterExpiryDelay, p / 60)` and
/// `followUp = min(lapsedFollowUp, p)` (at least `2 × delay`): Apple's sandbox compresses periods
/// (a month renews every 5 minutes), so the window and delays shrink with the period instead of
/// being constants. The user's next due time is the earliest over the groups, never sooner than
/// `now + minimumGap`. The two `EXPIRED` checks catch a late renewal (Apple retries a failed
/// charge; the billing-retry state shows only after Apple reports it).
public struct ReceiptRefreshPolicy: Sendable, Hashable {
  /// How long before its expiry an active subscription is looked at (Apple charges a renewal up to
  /// 24 hours ahead), ms.
  public var expiryWindowMs: Int64 = 86_400_000
  /// How long after an expiry the receipt is verified again, ms.
  public var afterExpiryDelayMs: Int64 = 60_000
  /// How often a subscription in billing grace or billing retry is verified, ms.
  public var billingIssueIntervalMs: Int64 = 6 * 3_600_000
  /// How long after its expiry a lapsed subscription with auto-renew on gets its last check, ms.
  public var lapsedFollowUpMs: Int64 = 86_400_000
  /// The next due time is at least this long after the verification, ms (no hot loops).
  public var minimumGapMs: Int64 = 1_000

  /// The defaults in the table above.
  public init() {}

  /// The next due time of one group; `nil`: this group needs no refresh.
  /// - Parameters:
  ///   - group: the group's status at `now`.
  ///   - periodStart: the purchase date of the group's deciding transaction, if known.
  ///   - now: the instant evaluated.
  public func nextDue(for group: GroupStatus, periodStart: Int64?, now: Int64) -> Int64? {
    let period = group.expiresDate.flatMap { e in periodStart.map { max(1, e - $0) } }
    let delay = min(afterExpiryDelayMs, period.map { max(1, $0 / 60) } ?? afterExpiryDelayMs)
    switch group.state {
    case .active:
      guard let e = group.expiresDate else { return nil }  // no end: nothing to watch
      let window = min(expiryWindowMs, period.map { $0 / 2 } ?? expiryWindowMs)
      return e - now > window ? e - window : e + delay
    case .gracePeriod:
      var due = now + billingIssueIntervalMs
      if let end = group.gracePeriodExpiresDate, end > now { due = min(due, end + delay) }
      return due
    case .billingRetry:
      return now + billingIssueIntervalMs
    case .expired:
      guard group.autoRenewEnabled, let e = group.expiresDate else { return nil }
      let followUp = max(2 * delay, min(lapsedFollowUpMs, period ?? lapsedFollowUpMs))
      return [e + delay, e + followUp].first { $0 > now }
    case .revoked, .neverSubscribed:
      return nil
    }
  }

  /// The user's next due time: the earliest of its groups', at least ``minimumGapMs`` after `now`;
  /// `nil` when no group needs a refresh.
  /// - Parameters:
  ///   - groups: the evaluation's group statuses at `now`.
  ///   - periodStarts: purchase dates by transaction id (to know each period's length).
  ///   - now: the instant evaluated.
  public func nextDue(groups: [GroupStatus], periodStarts: [String: Int64], now: Int64) -> Int64? {
    let due = groups.compactMap { g in
      nextDue(for: g, periodStart: g.transactionId.flatMap { periodStarts[$0] }, now: now)
    }.min()
    return due.map { max($0, now + minimumGapMs) }
  }

  /// The next due time after a verifyReceipt answer: from the fresh evaluation, the response's
  /// transactions giving the periods.
  package func nextDue(_ evaluation: SubscriptionEvaluation, _ response: VerifyReceiptResponse) -> Int64? {
    var starts: [String: Int64] = [:]
    for t in response.transactions { starts[t.transactionId] = t.purchaseDate }
    return nextDue(groups: evaluation.groups, periodStarts: starts, now: evaluation.time)
  }
}


// MARK: Refresher

/// Re-verifies stored receipts with Apple in the background, so renewals, billing problems and
/// lapses show up without the app submitting its receipt again
/// (docs/architecture.md "Background jobs", issue 6).
///
/// Every tick it claims the receipts due now (``Store/claimDueReceipts(atMs:limit:leaseUntilMs:)``:
/// instances sharing a database each take different receipts, each for the lease's length; the
/// receipts of an instance that dies are due again when its lease ends), verifies each with
/// the app's current shared secret, ingests the answer exactly as SubmitReceipt does and stores the
/// next due time (``ReceiptRefreshPolicy``). At most ``Configuration-swift.struct/maxConcurrent``
/// verifications are in flight, at most ``Configuration-swift.struct/maxConcurrentPerTenant`` of one
/// tenant. Failures:
/// - temporary (Apple unavailable, 5xx, 21005/21009/21100–21199 after the client's own retries, a
///   store error): exponential backoff per receipt, `initialBackoff × 2^(failures-1)` with jitter,
///   capped at `maxBackoff`;
/// - 21004 (wrong shared secret) or no secret set: the app's receipts are not sent to Apple again
///   while the app keeps the same secret (each is pushed back by `wrongSecretBackoff`); when the
///   app's secret changes, the held receipts are due at the next tick (the refresher remembers
///   them in memory; after a restart the backoff applies);
/// - other rejections (21003, 21010, a malformed receipt): the receipt is no longer due;
/// - a disabled tenant's receipts are not sent to Apple (each is pushed back by `wrongSecretBackoff`).
///
/// One log line per batch with counts (never a receipt or a secret); counters by outcome in
/// ``ServiceMetrics`` (`substatus_receipt_refreshes_total`).
///
/// ```swift
/// let refresher = ReceiptRefresher(service: service, configuration: .init(interval: .seconds(60)))
/// let task = Task { await refresher.run() }
/// // on SIGTERM:
/// refresher.beginGracefulShutdown()
/// await task.value
/// ```
public final class ReceiptRefresher: Sendable {
  /// How often and how much the refresher works.
  public struct Configuration: Sendable {
    /// Time between ticks.
    public var interval: Duration
    /// Verifications in flight at once, over all tenants.
    public var maxConcurrent: Int
    /// Verifications in flight at once for one tenant.
    public var maxConcurrentPerTenant: Int
    /// Receipts read per batch; a full batch is followed by another one at once (up to
    /// `maxBatchesPerTick`).
    public var batchSize: Int
    /// Batches per tick at most.
    public var maxBatchesPerTick: Int
    /// First backoff after a temporary failure.
    public var initialBackoff: Duration
    /// Longest backoff after temporary failures.
    public var maxBackoff: Duration
    /// How long an app's receipts wait after Apple rejected its shared secret (21004).
    public var wrongSecretBackoff: Duration
    /// How long a claimed batch is this instance's (``Store/claimDueReceipts(atMs:limit:leaseUntilMs:)``):
    /// other instances skip its receipts meanwhile; if this one dies, they are due again when the
    /// lease ends. Longer than a batch takes (at least a second).
    public var lease: Duration

    /// Creates a configuration.
    public init(
      interval: Duration = .seconds(60), maxConcurrent: Int = 8, maxConcurrentPerTenant: Int = 2,
      batchSize: Int = 200, maxBatchesPerTick: Int = 10, initialBackoff: Duration = .seconds(60),
      maxBackoff: Duration = .seconds(6 * 3600), wrongSecretBackoff: Duration = .seconds(86_400),
      lease: Duration = .seconds(300)
    ) {
      self.interval = interval
      self.maxConcurrent = max(1, maxConcurrent)
      self.maxConcurrentPerTenant = max(1, maxConcurrentPerTenant)
      self.batchSize = min(max(1, batchSize), 1000)
      self.maxBatchesPerTick = max(1, maxBatchesPerTick)
      self.initialBackoff = initialBackoff
      self.maxBackoff = maxBackoff
      self.wrongSecretBackoff = wrongSecretBackoff
      self.lease = max(lease, .seconds(1))
    }
  }

  /// What happened to one due receipt.
  public enum Outcome: String, Sendable, Hashable, CaseIterable {
    /// Verified and ingested; the next due time is set.
    case refreshed = "refreshed"
    /// A temporary failure (Apple or the store); backed off.
    case temporaryFailure = "temporary_failure"
    /// Apple answered 21004; the app's receipts wait for a new secret.
    case wrongSharedSecret = "wrong_shared_secret"
    /// Not sent: Apple already rejected the app's current secret, or the app has none.
    case skippedSharedSecret = "skipped_shared_secret"
    /// Apple rejected the receipt itself (21003, 21010, malformed); no longer due.
    case rejected = "rejected"
    /// The app no longer exists; no longer due.
    case appNotFound = "app_not_found"
    /// The app's tenant is disabled; held back like a wrong secret.
    case tenantDisabled = "tenant_disabled"
    /// The user was erased while Apple answered: nothing was written (the write is
    /// ``SubscriptionStorage/UserPurchases/onlyIfStored``) and no receipt is left.
    case userErased = "user_erased"
  }

  /// What one batch did.
  public struct BatchSummary: Sendable, Hashable {
    /// Receipts that were due.
    public var due: Int = 0
    /// How many ended with each outcome.
    public var outcomes: [Outcome: Int] = [:]
    /// The most verifications that were in flight at once.
    public var maxInFlight: Int = 0
  }

  /// The service whose store, clients, caches and metrics are used.
  let service: any IngestPath
  /// The settings.
  public let configuration: Configuration

  private struct State {
    /// Apps whose current secret Apple rejected: app id → that secret's fingerprint ("" for an
    /// app without a secret).
    var rejectedSecrets: [String: String] = [:]
    /// Receipts held back for an app's secret: app id → user → failure count. Released (due at
    /// once) when the app's secret fingerprint changes; after a restart the backoff applies.
    var held: [String: [UserKey: Int]] = [:]
  }

  private let state = Mutex(State())
  private let timer: PeriodicJobTimer

  /// Creates a refresher; it does nothing until ``run()``.
  package init(service: any IngestPath, configuration: Configuration) {
    self.service = service
    self.configuration = configuration
    // Real time between ticks (the wire clock): under a followed test clock that stands still the
    // ticks go on, and what is due is judged on the service clock.
    self.timer = PeriodicJobTimer(clock: service.environment.wireClock)
  }

  /// Refreshes due receipts every ``Configuration-swift.struct/interval`` of real time (the
  /// environment's ``ServiceEnvironment/wireClock``; due times are on its service clock) until
  /// ``beginGracefulShutdown()`` (verifications in flight finish, no new one starts) or until the
  /// task is cancelled.
  public func run() async {
    while !isStopping, !Task.isCancelled {
      var batches = 0
      while !isStopping, !Task.isCancelled, batches < configuration.maxBatchesPerTick {
        batches += 1
        guard let summary = await refreshDue(), summary.due >= configuration.batchSize else {
          break
        }
      }
      await timer.wait(configuration.interval)
    }
  }

  /// Stops ``run()`` after the verifications in flight.
  public func beginGracefulShutdown() {
    timer.stop()
  }

  private var isStopping: Bool { timer.isStopping }

  /// Runs one batch: claims the receipts due now and refreshes them within the concurrency caps;
  /// those not started because of a graceful shutdown are released (due again at once).
  /// - Returns: what it did; `nil` when the store could not be read.
  @discardableResult
  public func refreshDue() async -> BatchSummary? {
    let now = service.environment.now()
    let started = service.environment.clock.monotonicNow
    await releaseHeld(now: now)
    let due: [StoredReceipt]
    do {
      due = try await service.store.claimDueReceipts(
        atMs: now, limit: configuration.batchSize,
        leaseUntilMs: now + configuration.lease.milliseconds)
    } catch {
      service.log.info(
        "receipt refresh: cannot claim due receipts", [("error", .string(error.description))])
      return nil
    }
    var summary = BatchSummary()
    summary.due = due.count
    guard !due.isEmpty else { return summary }

    // Resolve each receipt's tenant (apps are cached) to apply the per-tenant cap.
    var pending: [(StoredReceipt, CachedApp)] = []
    for receipt in due {
      switch await loadApp(receipt.user.appId) {
      case .some(let app): pending.append((receipt, app))
      case .none:
        // The app is gone (or the store failed): count it, and make sure it is not due again at once.
        let outcome = await appMissing(receipt, now: now)
        service.metrics.refreshed(outcome: outcome.rawValue)
        summary.outcomes[outcome, default: 0] += 1
      }
    }

    await withTaskGroup(of: (String, Outcome).self) { group in
      var inFlight = 0
      var perTenant: [String: Int] = [:]
      while !pending.isEmpty || inFlight > 0 {
        let startable =
          isStopping
          ? nil
          : pending.firstIndex {
            perTenant[$0.1.app.tenantId, default: 0] < configuration.maxConcurrentPerTenant
          }
        if inFlight < configuration.maxConcurrent, let index = startable {
          let (receipt, app) = pending.remove(at: index)
          let tenant = app.app.tenantId
          perTenant[tenant, default: 0] += 1
          inFlight += 1
          summary.maxInFlight = max(summary.maxInFlight, inFlight)
          group.addTask { (tenant, await self.refresh(receipt, app)) }
          continue
        }
        guard inFlight > 0, let (tenant, outcome) = await group.next() else { break }
        inFlight -= 1
        perTenant[tenant, default: 1] -= 1
        summary.outcomes[outcome, default: 0] += 1
      }
    }
    // Stopping: give the claimed receipts not started back (their old due time ends the lease).
    for (receipt, _) in pending {
      _ = await reschedule(
        receipt, nextDueMs: receipt.nextDueMs, failureCount: receipt.failureCount)
    }

    var fields: [(String, JSONValue)] = [("due", .integer(summary.due))]
    for outcome in Outcome.allCases {
      fields.append((outcome.rawValue, .integer(summary.outcomes[outcome] ?? 0)))
    }
    fields.append(("max_in_flight", .integer(summary.maxInFlight)))
    fields.append(("duration_ms", .integer(Int64((service.environment.clock.monotonicNow - started).seconds * 1000))))
    service.log.info("receipt refresh batch", fields)
    return summary
  }

  private func loadApp(_ appId: String) async -> CachedApp? {
    do { return try await service.loadApp(appId) } catch { return nil }
  }

  private func appMissing(_ receipt: StoredReceipt, now: Int64) async -> Outcome {
    // loadApp says nil only for a missing app; a store failure backs off instead.
    do {
      _ = try await service.store.app(id: receipt.user.appId)
      return await backOff(receipt, now: now)
    } catch {
      if error.code == .notFound {
        _ = await reschedule(receipt, nextDueMs: nil, failureCount: receipt.failureCount)
        return .appNotFound
      }
      return await backOff(receipt, now: now)
    }
  }

  /// Verifies one receipt and records the result.
  func refresh(_ receipt: StoredReceipt, _ app: CachedApp) async -> Outcome {
    let outcome = await attempt(receipt, app)
    service.metrics.refreshed(outcome: outcome.rawValue)
    return outcome
  }

  private func attempt(_ receipt: StoredReceipt, _ app: CachedApp) async -> Outcome
  {
    let now = service.environment.now()
    let appId = receipt.user.appId
    if (try? await service.store.tenant(id: app.app.tenantId))?.disabled == true {
      _ = await reschedule(
        receipt, nextDueMs: now + configuration.wrongSecretBackoff.milliseconds,
        failureCount: receipt.failureCount)
      return .tenantDisabled
    }
    let secret: SharedSecretVersion
    do {
      guard let current = try await service.store.sharedSecrets(appId: appId)?.current else {
        state.withLock { $0.rejectedSecrets[appId] = "" }
        return await holdForSecret(receipt, now: now, failureCount: receipt.failureCount)
      }
      secret = current
    } catch {
      return await backOff(receipt, now: now)
    }
    let known = state.withLock { s -> Bool in
      guard let rejected = s.rejectedSecrets[appId] else { return false }
      if rejected == secret.fingerprint { return true }
      s.rejectedSecrets[appId] = nil  // a new secret: try again
      return false
    }
    if known { return await holdForSecret(receipt, now: now, failureCount: receipt.failureCount) }

    let started = service.environment.clock.monotonicNow
    let response: VerifyReceiptResponse
    do {
      response = try await service.verifyReceipt.verify(
        receiptData: receipt.receiptData, password: secret.secret)
      service.metrics.upstream(status: "0", seconds: (service.environment.clock.monotonicNow - started).seconds)
    } catch {
      service.metrics.upstream(
        status: error.status.map { String($0.code) } ?? "error",
        seconds: (service.environment.clock.monotonicNow - started).seconds)
      switch error.kind {
      case .wrongSharedSecret:
        state.withLock { $0.rejectedSecrets[appId] = secret.fingerprint }
        _ = await holdForSecret(receipt, now: now, failureCount: receipt.failureCount + 1)
        return .wrongSharedSecret
      case .unavailable:
        return await backOff(receipt, now: now)
      case .rejected:
        _ = await reschedule(receipt, nextDueMs: nil, failureCount: receipt.failureCount + 1)
        return .rejected
      }
    }
    do {
      // Not a submission: a refresh never takes back what another account took (purchase sharing).
      let ingested = try await service.ingestVerified(response, for: receipt.user.userId, in: app, submission: false)
      guard let evaluation = ingested.evaluation else { return .userErased }
      let next = service.receiptRefreshPolicy.nextDue(evaluation, response)
      let fresh = response.latestReceipt.flatMap { $0.isEmpty ? nil : $0 }
      try await service.store.markReceiptVerified(
        user: receipt.user, atMs: evaluation.time, nextDueMs: next, receiptData: fresh)
      return .refreshed
    } catch {
      return await backOff(receipt, now: now)
    }
  }

  /// Pushes a receipt of an app without a usable secret back by `wrongSecretBackoff` and remembers
  /// it, so a new secret makes it due at once (``releaseHeld(now:)``).
  private func holdForSecret(_ receipt: StoredReceipt, now: Int64, failureCount: Int) async
    -> Outcome
  {
    state.withLock { $0.held[receipt.user.appId, default: [:]][receipt.user] = failureCount }
    _ = await reschedule(
      receipt, nextDueMs: now + configuration.wrongSecretBackoff.milliseconds,
      failureCount: failureCount)
    return .skippedSharedSecret
  }

  /// Makes the held receipts of apps whose secret changed since Apple rejected it due now.
  /// - Returns: how many receipts were released.
  @discardableResult
  func releaseHeld(now: Int64) async -> Int {
    let apps = state.withLock { s in s.held.keys.map { ($0, s.rejectedSecrets[$0]) } }
    var released = 0
    for (appId, rejected) in apps {
      let current: String?
      do {
        guard let app = try await service.loadApp(appId) else {
          _ = state.withLock { $0.held.removeValue(forKey: appId) }  // the app is gone
          continue
        }
        current = app.app.sharedSecretFingerprint
      } catch {
        continue  // the store is failing: try at the next tick
      }
      guard let current, current != rejected else { continue }  // still the rejected secret, or none
      let users = state.withLock { s -> [UserKey: Int] in
        s.rejectedSecrets[appId] = nil
        return s.held.removeValue(forKey: appId) ?? [:]
      }
      for (user, failures) in users {
        do {
          try await service.store.rescheduleReceipt(
            user: user, nextDueMs: now, failureCount: failures)
          released += 1
        } catch {
          continue  // replaced or gone: the stored schedule stands
        }
      }
    }
    return released
  }

  /// Exponential backoff with jitter after a temporary failure.
  private func backOff(_ receipt: StoredReceipt, now: Int64) async -> Outcome {
    let failures = receipt.failureCount + 1
    _ = await reschedule(
      receipt, nextDueMs: now + backoffMs(failures: failures), failureCount: failures)
    return .temporaryFailure
  }

  /// The delay after `failures` consecutive temporary failures: `initial × 2^(failures-1)`, capped,
  /// times a jitter factor in [0.5, 1] (from the environment's randomness).
  func backoffMs(failures: Int) -> Int64 {
    let initial = configuration.initialBackoff.milliseconds
    let cap = configuration.maxBackoff.milliseconds
    let ceiling = min(cap, initial << Int64(min(max(failures - 1, 0), 30)))
    let random = service.environment.randomBytes(2)
    let fraction =
      Double(UInt16(random.first ?? 0) << 8 | UInt16(random.last ?? 0)) / Double(UInt16.max)
    return max(1, Int64(Double(ceiling) * (0.5 + 0.5 * fraction)))
  }

  private func reschedule(_ receipt: StoredReceipt, nextDueMs: Int64?, failureCount: Int) async
    -> Bool
  {
    do {
      try await service.store.rescheduleReceipt(
        user: receipt.user, nextDueMs: nextDueMs, failureCount: failureCount)
      return true
    } catch {
      service.log.info(
        "receipt refresh: cannot reschedule",
        [("app_id", .string(receipt.user.appId)), ("error", .string(error.description))])
      return false
    }
  }
}
