// Rule 26's second half (docs/architecture.md "Domain rules", "Access model"): when purchase
// sharing moves an original transaction to another app user (TRANSFER, or TRANSFER_IF_NO_ACTIVE
// when it transfers) and the app has an In-App Purchase key, the new owner's token is written back
// to Apple with Set App Account Token (API 1.16,
// https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token), so that
// Apple's later notifications and Server API answers name the new owner.
//
// Only a new owner whose user id is a UUID is written (Apple accepts a UUID only); other ids are
// counted as `not_uuid` and nothing is sent. The write runs after the submission's commit, off the
// RPC; the Server API client retries network failures, 5xx and Apple's retryable codes with
// backoff and honours 429 `Retry-After`. It is not durable: a write still failing after those
// retries, or lost to a restart, is counted (`failed`) and logged, and the next transfer of that
// purchase writes again.
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusJSON
import SubstatusServiceCore

extension IngestPath {
  /// Writes each transfer's new owner back to Apple as the original transaction's
  /// `appAccountToken`, in the background (one write per original transaction and new owner).
  package func writeBackAppAccountTokens(_ transfers: [OwnershipTransfer]) {
    if transfers.isEmpty { return }
    var seen = Set<[String]>()
    let writes = transfers.filter {
      seen.insert([$0.appId, $0.environment.rawValue, $0.originalTransactionId, $0.newUserId]).inserted
    }
    Task.detached { [self] in
      for transfer in writes { await writeBackAppAccountToken(transfer) }
    }
  }

  /// One Set App Account Token call for `transfer`, counted by outcome.
  func writeBackAppAccountToken(_ transfer: OwnershipTransfer) async {
    guard isUUID(transfer.newUserId) else {
      metrics.appAccountTokenWrite(outcome: "not_uuid")
      return
    }
    let fields: [(String, JSONValue)] = [
      ("app_id", .string(transfer.appId)), ("environment", .string(transfer.environment.rawValue)),
      ("original_transaction_id", .string(transfer.originalTransactionId)),
    ]
    do throws(RPCError) {
      guard let cached = try await loadApp(transfer.appId), cached.app.inAppPurchaseKey != nil else {
        metrics.appAccountTokenWrite(outcome: "no_key")
        return
      }
      let authorizer = try await serverAPIAuthorizer(cached)
      do {
        try await appStoreServerAPI.setAppAccountToken(
          originalTransactionId: transfer.originalTransactionId, appAccountToken: transfer.newUserId.lowercased(),
          environment: transfer.environment, authorizer: authorizer, nowMs: appStoreServerAPI.clock.wallMs)
      } catch {
        throw rpcError(error, appId: transfer.appId)
      }
      metrics.appAccountTokenWrite(outcome: "ok")
      log.info("app account token written", fields)
    } catch {
      metrics.appAccountTokenWrite(outcome: "failed")
      log.info("app account token not written", fields + [("code", .string(error.code.description)), ("error", .string(error.message))])
    }
  }
}
