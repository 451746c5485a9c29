import AppStoreSignedData
import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusAppleUpstream
import SubstatusJSON
import SubstatusServiceCore
import Synchronization

/// Finds what dropped App Store Server Notifications would have told and applies it: for every app
/// with an In-App Purchase key, in both environments, it reads Apple's Get Notification History
/// since the last reconciliation, and for each V2 notification this server never processed
/// (deduplicated by `v2:<notificationUUID>`, the id the notification endpoint records), it syncs
/// the users of the notification's original transaction from the App Store Server API (Get
/// Transaction History from the stored revision and Get All Subscription Statuses, every JWS
/// verified, stored through the normal ingest path), then records the notification as processed.
///
/// Several instances may run it: a lease per app and environment in the store
/// (``Store/claimReconciliation(appId:environment:owner:atMs:leaseUntilMs:)``) lets one instance
/// at a time reconcile it, and the processed-notification record makes each notification done
/// once. A run that fails part-way keeps the reconciled time, so the next run covers the same span.
///
/// It waits its interval in real time (``ServiceEnvironment/wireClock``); the spans it reads, its
/// claims and leases are on the service's clock (``ServiceEnvironment/clock``). Each pass of
/// ``reconcileAll()`` is counted in ``ServiceMetrics`` (`substatus_reconciler_runs_total`, with the
/// notifications found, the users synced and the failed reconciliations).
///
/// ```swift
/// let reconciler = ServerAPIReconciler(service: service, configuration: .init(interval: .seconds(3600)))
/// let task = Task { await reconciler.run() }
/// // on SIGTERM:
/// reconciler.beginGracefulShutdown()
/// await task.value
/// ```
public final class ServerAPIReconciler: Sendable {
  /// How often and how far back the reconciler works.
  public struct Configuration: Sendable {
    /// Time between runs.
    public var interval: Duration
    /// How long one instance holds an app's claim (a crashed instance's claim lapses after it).
    public var lease: Duration
    /// How far back the first run of an app looks.
    public var initialLookback: Duration
    /// How far each run reaches back before the previous run's end (notifications Apple signed
    /// just before it but listed later).
    public var overlap: Duration

    /// Creates a configuration.
    public init(
      interval: Duration = .seconds(3600), lease: Duration = .seconds(600),
      initialLookback: Duration = .seconds(86_400), overlap: Duration = .seconds(600)
    ) {
      self.interval = interval
      self.lease = lease
      self.initialLookback = initialLookback
      self.overlap = overlap
    }
  }

  /// What one reconciliation of an app and environment did.
  public struct Summary: Sendable, Hashable {
    /// Notifications Apple listed.
    public var notifications = 0
    /// Of those, processed here before (delivered, or reconciled already).
    public var alreadyProcessed = 0
    /// Users synced from the App Store Server API.
    public var usersSynced = 0
    /// Notifications recorded as processed by this run.
    public var applied = 0
    /// Notifications that failed verification (skipped, logged).
    public var rejected = 0
    /// Notifications whose users could not be synced for a reason of their own (Apple knows the
    /// transaction no more, for example): skipped, logged, not recorded as processed.
    public var failed = 0
    /// Whether the claim was held by another instance (nothing done).
    public var skippedClaimed = false

    /// An empty summary.
    public init() {}
  }

  /// The service whose store, clients and caches are used.
  let service: any IngestPath
  /// The settings.
  public let configuration: Configuration
  /// This instance's name in the claims.
  public let owner: String

  private let timer: PeriodicJobTimer

  /// Creates a reconciler; it does nothing until ``run()`` or ``reconcileAll()``.
  /// - Parameter owner: this instance's name in the claims; random by default.
  package init(service: any IngestPath, configuration: Configuration = Configuration(), owner: String? = nil) {
    self.service = service
    self.configuration = configuration
    // Real time between runs (the wire clock): under a followed test clock that stands still the
    // runs go on; each covers Apple's history up to the service clock's now.
    self.timer = PeriodicJobTimer(clock: service.environment.wireClock)
    self.owner = owner ?? "reconciler-" + Hex.encode(service.environment.randomBytes(8))
  }

  /// Reconciles every ``Configuration-swift.struct/interval`` until ``beginGracefulShutdown()`` or
  /// cancellation.
  public func run() async {
    while !isStopping, !Task.isCancelled {
      _ = await reconcileAll()
      await timer.wait(configuration.interval)
    }
  }

  /// Stops ``run()`` after the app in progress.
  public func beginGracefulShutdown() {
    timer.stop()
  }

  private var isStopping: Bool { timer.isStopping }

  /// One pass over every app with an In-App Purchase key (of enabled tenants), both environments.
  /// - Returns: per app id and environment, what was done; failures are logged and left out.
  @discardableResult
  public func reconcileAll() async -> [String: Summary] {
    service.metrics.reconcilerRan()
    var results: [String: Summary] = [:]
    var apps: [AppRecord] = []
    do {
      var tenantCursor: String? = nil
      repeat {
        let tenants = try await service.store.listTenants(page: PageRequest(size: 200, cursor: tenantCursor))
        for tenant in tenants.items where !tenant.disabled {
          var appCursor: String? = nil
          repeat {
            let page = try await service.store.listApps(
              tenantId: tenant.tenantId, page: PageRequest(size: 200, cursor: appCursor))
            apps += page.items.filter { $0.inAppPurchaseKey != nil }
            appCursor = page.nextCursor
          } while appCursor != nil
        }
        tenantCursor = tenants.nextCursor
      } while tenantCursor != nil
    } catch {
      service.metrics.reconcileFailed()
      service.log.info("reconcile: cannot list apps", [("error", .string(error.description))])
      return results
    }
    for app in apps {
      for environment in [SubscriptionDomain.Environment.production, .sandbox] {
        guard !isStopping, !Task.isCancelled else { return results }
        do {
          let summary = try await reconcile(appId: app.appId, environment: environment)
          results["\(app.appId)/\(environment.rawValue)"] = summary
          service.metrics.reconciled(summary)
        } catch {
          service.metrics.reconcileFailed()
          service.log.info(
            "reconcile: failed",
            [
              ("app_id", .string(app.appId)), ("environment", .string(environment.rawValue)),
              ("error", .string(error.message)),
            ])
        }
      }
    }
    return results
  }

  /// Reconciles one app and environment now, if no other instance holds its claim.
  /// - Throws: `RPCError` (UNAVAILABLE when Apple or the store cannot answer, FAILED_PRECONDITION
  ///   for a missing or refused key); the reconciled time then stays where it was.
  public func reconcile(appId: String, environment: SubscriptionDomain.Environment) async throws(RPCError) -> Summary {
    var summary = Summary()
    let now = service.environment.now()
    guard
      let claim = try await stored({ () throws(StoreError) in
        try await service.store.claimReconciliation(
          appId: appId, environment: environment, owner: owner, atMs: now,
          leaseUntilMs: now + max(1, configuration.lease.milliseconds))
      })
    else {
      summary.skippedClaimed = true
      return summary
    }
    do {
      summary = try await reconcileClaimed(claim, now: now)
    } catch {
      try? await service.store.completeReconciliation(
        appId: appId, environment: environment, owner: owner, reconciledThroughMs: nil)
      throw error
    }
    try await stored { () throws(StoreError) in
      try await service.store.completeReconciliation(
        appId: appId, environment: environment, owner: owner, reconciledThroughMs: now)
    }
    service.log.info(
      "reconcile",
      [
        ("app_id", .string(appId)), ("environment", .string(environment.rawValue)),
        ("notifications", .integer(summary.notifications)), ("already_processed", .integer(summary.alreadyProcessed)),
        ("users_synced", .integer(summary.usersSynced)), ("applied", .integer(summary.applied)),
        ("rejected", .integer(summary.rejected)), ("failed", .integer(summary.failed)),
      ])
    return summary
  }

  private func reconcileClaimed(_ claim: ReconciliationClaim, now: Int64) async throws(RPCError) -> Summary {
    var summary = Summary()
    let appId = claim.appId
    let environment = claim.environment
    guard let cached = try await service.loadApp(appId) else { throw RPCError(code: .notFound, message: "app \(ErrorText.quoted(appId)) not found") }
    let authorizer = try await service.serverAPIAuthorizer(cached)
    // Apple keeps 180 days of notification history in production, 30 in the sandbox.
    let retention: Int64 = (environment == .production ? 180 : 30) * 86_400_000
    let start = max(
      claim.reconciledThroughMs.map { $0 - configuration.overlap.milliseconds } ?? now - configuration.initialLookback.milliseconds,
      now - retention + 60_000)
    guard start < now else { return summary }
    let items: [NotificationHistoryItem]
    do {
      items = try await service.appStoreServerAPI.notificationHistory(
        startMs: start, endMs: now, environment: environment, authorizer: authorizer,
        nowMs: service.appStoreServerAPI.clock.wallMs)
    } catch {
      throw service.rpcError(error, appId: appId)
    }
    summary.notifications = items.count
    let verifier = service.signedDataVerifier(cached, environment)
    var synced = Set<String>()
    for item in items {
      // The notification is a trigger: its signature and app are checked, the state comes from
      // the Server API (whose signed items are verified in the sync).
      let notification: NotificationV2
      let transaction: SubscriptionDomain.Transaction?
      do {
        let verified = try verifier.verify(item.signedPayload)
        notification = try NotificationV2(json: verified.payload)
        guard verified.origin.bundleId == cached.app.bundleId else {
          throw SignedDataVerificationError.wrongBundleId(expected: cached.app.bundleId, found: verified.origin.bundleId)
        }
        transaction = try notification.data?.signedTransactionInfo.map { jws throws(SignedDataVerificationError) in
          try verifier.verifyAndDecodeTransaction(jws)
        }
      } catch {
        summary.rejected += 1
        service.log.info(
          "reconcile: notification failed verification",
          [("app_id", .string(appId)), ("error", .string("\(error)"))])
        continue
      }
      let id = "v2:" + notification.notificationUUID
      if try await stored({ () throws(StoreError) in try await service.store.isNotificationProcessed(appId: appId, notificationId: id) }) {
        summary.alreadyProcessed += 1
        continue
      }
      if let transaction {
        let users = try await stored { () throws(StoreError) in
          try await service.store.users(appId: appId, environment: environment, originalTransactionId: transaction.originalTransactionId)
        }
        do {
          let first = AppAccountTokenOwnership.firstHolder(
            originalTransactionId: transaction.originalTransactionId, appAccountToken: transaction.appAccountToken,
            policy: cached.app.policy)
          for user in users.isEmpty ? [first] : users where !synced.contains(user) {
            _ = try await service.syncHistory(
              cached, userId: user, transactionId: transaction.originalTransactionId, environment: environment,
              fullResync: false, submission: false, creatingUser: users.isEmpty)
            synced.insert(user)
            summary.usersSynced += 1
          }
        } catch {
          // Apple or the store cannot answer now, or the key is refused: the whole run fails and
          // the next one covers the same span. Anything else concerns this notification only.
          if [.unavailable, .failedPrecondition, .internal, .deadlineExceeded].contains(error.code) { throw error }
          summary.failed += 1
          service.log.info(
            "reconcile: cannot sync the users of a notification",
            [("app_id", .string(appId)), ("notification_uuid", .string(String(notification.notificationUUID.prefix(64)))),
             ("error", .string(error.message))])
          continue
        }
      }
      if try await stored({ () throws(StoreError) in
        try await service.store.applyNotification(appId: appId, notificationId: id, receivedMs: now, updates: [])
      }) != nil {
        summary.applied += 1
      }
    }
    return summary
  }
}
