// Rule 26's second half (docs/architecture.md "Domain rules", "Access model", "Background
// services"): when purchase sharing moves an original transaction to another app user (TRANSFER,
// or TRANSFER_IF_NO_ACTIVE when it transfers) and the app has an In-App Purchase key, the new
// owner's token is written back to Apple with Set App Account Token (API 1.16,
// https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token), so that
// Apple's later notifications and Server API answers name the new owner.
//
// The write is durable: the ingest commit that records the transfer writes an outbox row
// (``SubscriptionStorage/AppAccountTokenWriteStore``), and the ``AppAccountTokenWriter`` sends it,
// retrying with backoff across restarts, until Apple accepts it, it is given up on, or a later
// transfer of the same purchase replaces it (Apple then gets the last owner's token). Only an
// owner whose user id is a UUID is written (Apple accepts a UUID only); other ids are counted as
// `not_uuid` and nothing is sent.
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusAppleUpstream
import SubstatusClock
import SubstatusJSON
import SubstatusServiceCore

extension IngestPath {
  /// After a commit that transferred purchases: wakes the ``AppAccountTokenWriter``, which sends
  /// the rows that commit wrote (nothing is sent from here).
  package func writeBackAppAccountTokens(_ transfers: [OwnershipTransfer]) {
    if !transfers.isEmpty { appAccountTokenSignal.signal() }
  }
}

/// Sends the Set App Account Token writes the store holds (a ``ServiceLifecycle``-style service:
/// ``run()`` until ``beginGracefulShutdown()``).
///
/// Each pass claims the writes due (a lease, so instances sharing a database never send one at
/// once, and a crash leaves it due again after the lease), and for each: skips an owner id that is
/// not a UUID or an app without an In-App Purchase key (the row is deleted, counted `not_uuid` or
/// `no_key`), sends the new owner's id in lower case, and deletes the row once Apple accepts it
/// (`ok`). A failure Apple may not repeat (network, 5xx, `429`, a refused key) is retried with
/// backoff (``Configuration-swift.struct/initialBackoffMs`` doubling up to
/// ``Configuration-swift.struct/maxBackoffMs``; after a `429`, not before its `Retry-After`)
/// until ``Configuration-swift.struct/maxAttempts`` attempts, then given up (`failed`: the row
/// stays with the reason until a later transfer of the purchase); one Apple refuses (an unknown
/// transaction, a refused token) is given up at once. A transfer made while a write is in flight
/// replaces the row, which is released when the attempt ends, so the new owner's write follows.
/// Time is the service's clock; between passes it waits for the next due write (service clock), a
/// new transfer (``IngestPath/appAccountTokenSignal``) or the periodic pass (real time).
public final class AppAccountTokenWriter: Sendable {
  /// How the writer works.
  public struct Configuration: Sendable {
    /// The longest real time between passes.
    public var maxInterval: Duration
    /// Writes claimed per pass.
    public var batchSize: Int
    /// How long a claim holds a write (service clock) before another pass may take it.
    public var leaseMs: Int64
    /// The wait after a first failed attempt (service clock); it doubles per attempt.
    public var initialBackoffMs: Int64
    /// The longest wait between attempts.
    public var maxBackoffMs: Int64
    /// Attempts before a write is given up (each attempt is the Server API client's own bounded
    /// retries).
    public var maxAttempts: Int

    /// Creates a configuration. The defaults give up after 10 attempts over about 6 hours (30 s,
    /// 1, 2, 4, 8, 16, 32 minutes, then hourly).
    public init(
      maxInterval: Duration = .seconds(30), batchSize: Int = 16, leaseMs: Int64 = 300_000,
      initialBackoffMs: Int64 = 30_000, maxBackoffMs: Int64 = 3_600_000, maxAttempts: Int = 10
    ) {
      self.maxInterval = maxInterval
      self.batchSize = min(max(1, batchSize), 100)
      self.leaseMs = max(1, leaseMs)
      self.initialBackoffMs = max(1, initialBackoffMs)
      self.maxBackoffMs = max(self.initialBackoffMs, maxBackoffMs)
      self.maxAttempts = max(1, maxAttempts)
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

  /// Creates a writer; it does nothing until ``run()`` or ``writeDue()``.
  package init(service: any IngestPath, configuration: Configuration = Configuration()) {
    self.service = service
    self.configuration = configuration
    self.passTimer = PeriodicJobTimer(clock: service.environment.wireClock)
    self.dueTimer = PeriodicJobTimer(clock: service.environment.clock)
  }

  /// Sends due writes until ``beginGracefulShutdown()`` or cancellation.
  public func run() async {
    while !passTimer.isStopping, !Task.isCancelled {
      let seen = service.appAccountTokenSignal.generation
      let next = await writeDue()
      let now = service.environment.now()
      await withTaskGroup(of: Void.self) { group in
        group.addTask { await self.passTimer.wait(self.configuration.maxInterval) }
        if let next, next > now {
          group.addTask { await self.dueTimer.wait(.milliseconds(next - now)) }
        }
        group.addTask { await self.service.appAccountTokenSignal.wait(after: seen) }
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

  /// One pass: claims and sends every write due now.
  /// - Returns: the next due write after the pass, `nil` when none (or the store failed: the next
  ///   pass tries again; failures are logged).
  @discardableResult
  public func writeDue() async -> Int64? {
    let store = service.store
    do {
      while !passTimer.isStopping {
        let now = service.environment.now()
        let claimed = try await store.claimDueAppAccountTokenWrites(
          atMs: now, limit: configuration.batchSize, leaseUntilMs: now + configuration.leaseMs)
        if claimed.isEmpty { break }
        for write in claimed { try await send(write) }
        if claimed.count < configuration.batchSize { break }
      }
      return try await store.nextAppAccountTokenWriteDueMs()
    } catch {
      service.log.info(
        "app account token writer: the store failed; retrying at the next pass", [("error", .string("\(error)"))])
      return nil
    }
  }

  /// Sends one claimed write, then deletes, gives up or reschedules it.
  func send(_ write: AppAccountTokenWrite) async throws {
    let metrics = service.metrics
    var fields: [(String, JSONValue)] = [
      ("app_id", .string(write.appId)), ("environment", .string(write.environment.rawValue)),
      ("original_transaction_id", .string(write.originalTransactionId)),
    ]
    guard isUUID(write.userId) else {
      try await finish(write, givenUp: nil)
      metrics.appAccountTokenWrite(outcome: "not_uuid")
      return
    }
    let cached = try await service.loadApp(write.appId)
    guard let cached, cached.app.inAppPurchaseKey != nil else {
      try await finish(write, givenUp: nil)
      metrics.appAccountTokenWrite(outcome: "no_key")
      return
    }
    let authorizer: any AppStoreServerAPIAuthorizer
    do { authorizer = try await service.serverAPIAuthorizer(cached) } catch {
      try await finish(write, givenUp: nil)
      metrics.appAccountTokenWrite(outcome: "no_key")
      service.log.info("app account token not written", fields + [("error", .string(error.message))])
      return
    }
    let api = service.appStoreServerAPI
    let failure: AppStoreServerAPIError?
    do throws(AppStoreServerAPIError) {
      try await api.setAppAccountToken(
        originalTransactionId: write.originalTransactionId, appAccountToken: write.userId.lowercased(),
        environment: write.environment, authorizer: authorizer, nowMs: api.clock.wallMs)
      failure = nil
    } catch {
      failure = error
    }
    let attempts = write.attempts + 1
    fields.append(("attempts", .integer(Int64(attempts))))
    guard let error = failure else {
      let current = try await finish(write, givenUp: nil)
      metrics.appAccountTokenWrite(outcome: "ok")
      service.log.info("app account token written", fields + [("superseded_meanwhile", .bool(!current))])
      return
    }
    let lasting = error.code == .rejected || error.code == .notFound || error.code == .malformedResponse
    if lasting || attempts >= configuration.maxAttempts {
      var given = write
      given.attempts = attempts
      let reason =
        (lasting ? "rejected" : "gave up after \(attempts) attempts") + ": \(error.code): \(error.message)"
      try await finish(given, givenUp: reason)
      metrics.appAccountTokenWrite(outcome: "failed")
      service.log.info("app account token not written; given up", fields + [("error", .string(reason))])
      return
    }
    let now = service.environment.now()
    var next = now + configuration.backoff(afterAttempts: attempts)
    if error.httpStatus == 429 {
      // Apple's `Retry-After` (UNIX ms on Apple's clock) as a due time on the service's clock.
      let blocked = api.rateLimiter.blockedUntil(key: authorizer.rateLimitKey, environment: write.environment)
      let wait = blocked - api.appleClock.wallMs
      if wait > 0 { next = max(next, now + wait) }
    }
    try await service.store.rescheduleAppAccountTokenWrite(
      write, attempts: attempts, nextAttemptMs: next, detail: "\(error.code): \(error.message)")
    metrics.appAccountTokenWrite(outcome: "retried")
    service.log.info(
      "app account token not written; retrying",
      fields + [("next_attempt_ms", .integer(next)), ("error", .string(error.message))])
  }

  /// Deletes (or gives up) the write; a replacement made meanwhile is released at once.
  @discardableResult
  private func finish(_ write: AppAccountTokenWrite, givenUp detail: String?) async throws -> Bool {
    try await service.store.finishAppAccountTokenWrite(
      write, givenUpDetail: detail, releaseAtMs: service.environment.now())
  }
}
