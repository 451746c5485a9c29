import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import Synchronization

/// The App Store Server API syncs that V2 `REFUND` and `REVOKE` notifications trigger, bounded:
/// at most one sync runs per user (app, environment, user id); a revocation that arrives while
/// that user's sync runs asks for one more run after it (coalesced, however many arrive), and no
/// more than ``maximumUsers`` users are tracked at once (beyond that a trigger is dropped and left
/// to the reconciler).
package final class RevocationSyncScheduler: Sendable {
  /// Whose history a sync rebuilds.
  package struct Key: Hashable, Sendable {
    package var appId: String
    package var environment: SubscriptionDomain.Environment
    package var userId: String

    package init(appId: String, environment: SubscriptionDomain.Environment, userId: String) {
      self.appId = appId
      self.environment = environment
      self.userId = userId
    }
  }

  /// What ``claim(_:originalTransactionId:)`` decided.
  package enum Claim: Equatable {
    /// No sync of this user runs: the caller starts one.
    case start
    /// A sync of this user runs: it runs once more when done.
    case coalesced
    /// Too many users are tracked: nothing is started.
    case dropped
  }

  /// Users tracked at once (running, or running with a rerun asked for).
  package let maximumUsers: Int
  /// Per user: the original transaction id the next run asks Apple with when a rerun is pending,
  /// nil when none is.
  private let slots = Mutex<[Key: String?]>([:])

  package init(maximumUsers: Int = 256) {
    self.maximumUsers = maximumUsers
  }

  package func claim(_ key: Key, originalTransactionId: String) -> Claim {
    slots.withLock { slots in
      if slots[key] != nil {
        slots[key] = .some(originalTransactionId)
        return .coalesced
      }
      guard slots.count < maximumUsers else { return .dropped }
      slots[key] = .some(nil)
      return .start
    }
  }

  /// Called when a run ends: the original transaction id of the rerun to do, or nil (the slot is
  /// then released).
  package func finish(_ key: Key) -> String? {
    slots.withLock { slots in
      guard case .some(.some(let next)) = slots[key] else {
        slots[key] = nil
        return nil
      }
      slots[key] = .some(nil)
      return next
    }
  }

  /// Users with a sync running now.
  package var runningCount: Int { slots.withLock { $0.count } }
}

extension IngestPath {
  /// After a V2 `REFUND` or `REVOKE` was committed and before it is answered: when the app has an
  /// In-App Purchase key, starts an incremental App Store Server API sync of the history of each
  /// user the notification's transaction belongs to (Apple advises to rebuild from its history
  /// after a revocation: other changes, such as a renewal, may not have been notified). The sync
  /// runs in the background, never delays or fails the notification's answer, runs one at a time
  /// per user (see ``RevocationSyncScheduler``), and is counted in
  /// `substatus_revocation_syncs_total`; a failed sync is logged and left to the reconciler.
  package func scheduleRevocationSync(
    after notification: NotificationV2, cached: CachedApp, environment: SubscriptionDomain.Environment,
    transactions: [SubscriptionDomain.Transaction], updates: [UserPurchases]
  ) {
    guard notification.rawNotificationType == "REFUND" || notification.rawNotificationType == "REVOKE",
      cached.app.inAppPurchaseKey != nil, let transaction = transactions.first
    else { return }
    for update in updates {
      let key = RevocationSyncScheduler.Key(
        appId: cached.app.appId, environment: environment, userId: update.user.userId)
      switch revocationSyncs.claim(key, originalTransactionId: transaction.originalTransactionId) {
      case .coalesced:
        metrics.revocationSync(outcome: "coalesced")
      case .dropped:
        metrics.revocationSync(outcome: "dropped")
        log.info(
          "revocation sync: too many running; left to the reconciler",
          [("app_id", .string(key.appId)), ("environment", .string(environment.rawValue))])
      case .start:
        Task.detached { [self] in
          await runRevocationSyncs(key, cached: cached, originalTransactionId: transaction.originalTransactionId)
        }
      }
    }
  }

  private func runRevocationSyncs(
    _ key: RevocationSyncScheduler.Key, cached: CachedApp, originalTransactionId: String
  ) async {
    var next: String? = originalTransactionId
    while let transactionId = next {
      do {
        let result = try await syncHistory(
          cached, userId: key.userId, transactionId: transactionId, environment: key.environment,
          fullResync: false, submission: false, creatingUser: false)
        metrics.revocationSync(outcome: "succeeded")
        log.info(
          "revocation sync",
          [
            ("app_id", .string(key.appId)), ("environment", .string(key.environment.rawValue)),
            ("transactions", .integer(result.transactionCount)),
            ("stored", .integer(result.storedTransactionCount)),
          ])
      } catch {
        metrics.revocationSync(outcome: "failed")
        log.info(
          "revocation sync failed; left to the reconciler",
          [
            ("app_id", .string(key.appId)), ("environment", .string(key.environment.rawValue)),
            ("code", .string(error.code.description)), ("error", .string(error.message)),
          ])
      }
      next = revocationSyncs.finish(key)
    }
  }
}
