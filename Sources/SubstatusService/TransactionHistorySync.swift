import AppStoreSignedData
import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusAppleUpstream
import SubstatusBackgroundJobs
import SubstatusJSON
import SubstatusServiceCore
import SubstatusWire
import Synchronization

/// Signs App Store Server API tokens with an app's In-App Purchase key and keeps each token until
/// shortly before it expires (one signature per ~10 minutes per app, not per request).
package final class InAppPurchaseKeyAuthorizer: AppStoreServerAPIAuthorizer {
  /// What identifies the key (a new key makes a new authorizer).
  let identity: String
  private let key: ES256PrivateKey
  private let keyId: String
  private let issuerId: String
  private let bundleId: String
  private let lifetime: Duration = .seconds(600)
  private let cache = Mutex<(token: String, issuedMs: Int64)?>(nil)

  init(key: InAppPurchaseKey, bundleId: String) throws(AppStoreServerAPIError) {
    do {
      self.key = try ES256PrivateKey(pkcs8PEM: key.privateKeyPEM)
    } catch {
      throw AppStoreServerAPIError(code: .keyRefused, message: "the app's In-App Purchase key cannot be read: \(error)")
    }
    self.identity = Self.identity(keyId: key.keyId, issuerId: key.issuerId, fingerprint: key.publicKeyFingerprint, bundleId: bundleId)
    self.keyId = key.keyId
    self.issuerId = key.issuerId
    self.bundleId = bundleId
  }

  /// Apple's rate limit is per app: one token bucket per bundle id.
  package var rateLimitKey: String { bundleId }

  static func identity(keyId: String, issuerId: String, fingerprint: String, bundleId: String) -> String {
    [keyId, issuerId, fingerprint, bundleId].joined(separator: "\u{0}")
  }

  package func bearerToken(nowMs: Int64) throws(AppStoreServerAPIError) -> String {
    let lifetimeMs = lifetime.milliseconds
    if let cached = cache.withLock({ $0 }), cached.issuedMs <= nowMs, nowMs < cached.issuedMs + lifetimeMs - 60_000 {
      return cached.token
    }
    do {
      let token = try AppStoreServerAPIToken.make(
        key: key, keyId: keyId, issuerId: issuerId, bundleId: bundleId, issuedAt: nowMs, lifetime: lifetime)
      cache.withLock { $0 = (token, nowMs) }
      return token
    } catch {
      throw AppStoreServerAPIError(code: .keyRefused, message: "cannot sign an App Store Server API token: \(error)")
    }
  }
}

extension SubstatusService {
  // MARK: IngestService.SyncTransactionHistory

  public func syncTransactionHistory(
    _ request: Substatus_V1_SyncTransactionHistoryRequest, _ context: ServerContext
  ) async throws -> Substatus_V1_SyncTransactionHistoryResponse {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    if !request.transactionID.isEmpty { try requireTransactionID(request.transactionID, "transaction_id") }
    let environment: SubscriptionDomain.Environment? =
      request.environment == .unspecified ? nil : try SubscriptionDomain.Environment(wire: request.environment)
    let result = try await syncHistory(
      cached, userId: request.userID, transactionId: request.transactionID.isEmpty ? nil : request.transactionID,
      environment: environment, fullResync: request.fullResync, submission: true)
    var response = Substatus_V1_SyncTransactionHistoryResponse()
    response.userID = request.userID
    response.groups = result.evaluation.groups.map(\.wire)
    response.entitlements = result.evaluation.entitlements.map(\.wire)
    response.asOfMs = result.evaluation.time
    response.environment = result.user.environment.wire
    response.transactionCount = Int32(clamping: result.transactionCount)
    response.storedTransactionCount = Int32(clamping: result.storedTransactionCount)
    response.revision = result.revision
    response.refusedOriginalTransactions = result.refused.map(Self.refusedOriginalTransaction)
    return response
  }

  // MARK: IngestService.SubmitReceipt, modern path

  /// SubmitReceipt for an app with an In-App Purchase key: the receipt's first transaction id (see
  /// ``AppReceiptTransactionIDs``) names the customer, whose history is synced from the App Store
  /// Server API instead of calling verifyReceipt. `nil` (take the verifyReceipt path) when the app
  /// has no key or the receipt holds no transaction id.
  func submitReceiptThroughServerAPI(
    _ request: Substatus_V1_SubmitReceiptRequest, _ cached: CachedApp
  ) async throws(RPCError) -> Substatus_V1_SubmitReceiptResponse? {
    guard cached.app.inAppPurchaseKey != nil, let ids = AppReceiptTransactionIDs(base64Receipt: request.receiptData) else {
      return nil
    }
    let valid = (ids.transactionIds + ids.originalTransactionIds).first { id in
      (try? requireTransactionID(id, "receipt_data")) != nil
    }
    guard let transactionId = valid else { return nil }
    let result = try await syncHistory(
      cached, userId: request.userID, transactionId: transactionId, environment: nil, fullResync: false, submission: true)
    return IngestedStatus(
      userID: request.userID, environment: result.user.environment, total: result.transactionCount,
      written: result.storedTransactionCount, evaluation: result.evaluation, refused: result.refused
    ).response()
  }

  func requireTransactionID(_ id: String, _ field: String) throws(RPCError) {
    guard id.utf8.count <= 64, id.unicodeScalars.allSatisfy({ $0.isASCII && CharacterSet.alphanumerics.contains($0) }) else {
      throw invalidArgument(field, "must be an App Store transaction id (ASCII letters and digits, at most 64)")
    }
  }

  /// The authorizer of an app's Server API calls; FAILED_PRECONDITION when the app has no key.
  package func serverAPIAuthorizer(_ cached: CachedApp) async throws(RPCError) -> InAppPurchaseKeyAuthorizer {
    let appId = cached.app.appId
    if let info = cached.app.inAppPurchaseKey,
      let hit = serverAPIAuthorizers.withLock({ $0[appId] }),
      hit.identity == InAppPurchaseKeyAuthorizer.identity(
        keyId: info.keyId, issuerId: info.issuerId, fingerprint: info.publicKeyFingerprint, bundleId: cached.app.bundleId)
    {
      return hit
    }
    guard let key = try await stored({ () throws(StoreError) in try await catalogStore.inAppPurchaseKey(appId: appId) }) else {
      throw RPCError(
        code: .failedPrecondition,
        message: "app \(ErrorText.quoted(appId)) has no In-App Purchase key: set one with SetInAppPurchaseKey")
    }
    let authorizer: InAppPurchaseKeyAuthorizer
    do { authorizer = try InAppPurchaseKeyAuthorizer(key: key, bundleId: cached.app.bundleId) } catch {
      throw RPCError(code: .failedPrecondition, message: error.message)
    }
    serverAPIAuthorizers.withLock { $0[appId] = authorizer }
    return authorizer
  }

  /// The verifier of signed data Apple returns for an app in one environment.
  package func signedDataVerifier(_ cached: CachedApp, _ environment: SubscriptionDomain.Environment) -> SignedDataVerifier {
    AppSignedDataVerifiers(roots: appleRootCertificates, app: cached.app).verifier(environment)
  }

  /// Maps a Server API failure to the RPC status the API documents.
  package func rpcError(_ error: AppStoreServerAPIError, appId: String) -> RPCError {
    switch error.code {
    case .notFound: RPCError(code: .notFound, message: "Apple knows no such transaction: \(error.message)")
    case .keyRefused:
      RPCError(
        code: .failedPrecondition,
        message: "Apple refused the In-App Purchase key of app \(ErrorText.quoted(appId)) (\(error.message)): set the right one with SetInAppPurchaseKey")
    case .rejected: RPCError(code: .invalidArgument, message: error.message)
    default: RPCError(code: .unavailable, message: error.message)
    }
  }

  /// Brings a user's stored history up to date from the App Store Server API (the body of
  /// SyncTransactionHistory, shared with SubmitReceipt's modern path and the reconciler):
  /// Get Transaction History from the stored revision (all pages, ASCENDING), Get All Subscription
  /// Statuses for the renewal infos, every JWS verified, stored through the normal ingest path;
  /// then the revision is stored and the fresh history evaluated.
  ///
  /// - Parameters:
  ///   - transactionId: any transaction id of the user; `nil`: the one of the last sync, else the
  ///     most recently purchased stored transaction.
  ///   - environment: where to ask; `nil`: production, then sandbox when production does not know
  ///     the transaction.
  ///   - fullResync: ignore the stored revision.
  ///   - submission: the user asked for it (SyncTransactionHistory, SubmitReceipt's modern path):
  ///     the app's purchase sharing applies; `false` for the reconciliation and revocation syncs,
  ///     which change no owner.
  ///   - creatingUser: a background sync may create the user: the reconciler's first holder of an
  ///     original transaction no user holds (rule 26), as a notification would. Otherwise a
  ///     background sync writes only to a user already stored (never bringing back one erased
  ///     meanwhile).
  package func syncHistory(
    _ cached: CachedApp, userId: String, transactionId: String?, environment: SubscriptionDomain.Environment?,
    fullResync: Bool, submission: Bool, creatingUser: Bool = false
  ) async throws(RPCError) -> HistorySyncResult {
    let appId = cached.app.appId
    let authorizer = try await serverAPIAuthorizer(cached)
    let candidates: [SubscriptionDomain.Environment] = environment.map { [$0] } ?? [.production, .sandbox]
    var lastNotFound: AppStoreServerAPIError?
    for env in candidates {
      let user = UserKey(appId: appId, environment: env, userId: userId)
      let state = try await stored { () throws(StoreError) in try await serverAPISyncStore.transactionHistorySync(of: user) }
      let id: String
      if let transactionId {
        id = transactionId
      } else if let known = state?.transactionId {
        id = known
      } else if let latest = try await stored({ () throws(StoreError) in try await purchaseStore.history(of: user) })
        .transactions.max(by: { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) })
      {
        id = latest.transactionId
      } else {
        continue  // nothing stored in this environment to ask with
      }
      // The stored revision is the user's (one Apple customer); should Apple refuse it for another
      // customer's transaction id, `fetch` starts over.
      let revision = fullResync ? nil : state?.revision
      do {
        return try await sync(
          cached, user: user, transactionId: id, revision: revision, authorizer: authorizer, submission: submission,
          creatingUser: creatingUser)
      } catch let error as AppStoreServerAPIError where error.code == .notFound {
        lastNotFound = error
        continue
      } catch let error as AppStoreServerAPIError {
        throw rpcError(error, appId: appId)
      } catch let error as RPCError {
        throw error
      } catch {
        throw RPCError(code: .internal, message: "internal error")
      }
    }
    if let lastNotFound { throw rpcError(lastNotFound, appId: appId) }
    throw invalidArgument(
      "transaction_id",
      "empty, and no transaction of user \"\(userId)\" is stored\(environment.map { " in \($0.rawValue)" } ?? ""): pass one")
  }

  /// One environment's sync. Throws `AppStoreServerAPIError` (Apple) or `RPCError` (verification,
  /// store).
  private func sync(
    _ cached: CachedApp, user: UserKey, transactionId: String, revision: String?,
    authorizer: InAppPurchaseKeyAuthorizer, submission: Bool, creatingUser: Bool
  ) async throws -> HistorySyncResult {
    let started = environment.clock.monotonicNow
    let (history, statuses) = try await fetch(user: user, transactionId: transactionId, revision: revision, authorizer: authorizer)
    metrics.upstream(status: "server_api", seconds: (environment.clock.monotonicNow - started).seconds)
    // Verify everything before storing anything: Apple's answer is taken whole or not at all, so
    // a failed verification leaves the stored revision where it was.
    var (transactions, renewalInfos) = try verifyAll(
      cached, user, history.signedTransactions + statuses.compactMap(\.signedTransactionInfo),
      statuses.compactMap(\.signedRenewalInfo))
    // Get All Subscription Statuses is Apple's whole current renewal info for the subscriptions it
    // returns (rule 13), as of the newest time Apple signed any of its answer.
    let statusClocks = transactions.dropFirst(history.signedTransactions.count).compactMap(\.appleClock)
      + renewalInfos.compactMap(\.appleClock)
    let snapshot = RenewalInfoSnapshot(
      originalTransactionIds: statuses.map(\.originalTransactionId), asOfDate: statusClocks.max())
    // One copy per transaction id (a subscription's latest transaction comes in both answers).
    var unique: [String: SubscriptionDomain.Transaction] = [:]
    for t in transactions {
      if let seen = unique[t.transactionId], !t.supersedes(seen) { continue }
      unique[t.transactionId] = t
    }
    let historyIds = Set(transactions.prefix(history.signedTransactions.count).map(\.transactionId))
    var kept = Set<String>()
    transactions = transactions.filter { unique[$0.transactionId] == $0 && kept.insert($0.transactionId).inserted }
    let outcomes = try await ingestWithOutcomes([
      UserPurchases(
        user: user, transactions: transactions, renewalInfos: renewalInfos, renewalInfoSnapshot: snapshot,
        submittedMs: submission ? environment.now() : nil,
        // A background sync (reconciler, revocations) must not bring back a user erased meanwhile,
        // unless it is the first holder of what it brings.
        onlyIfStored: !submission && !creatingUser)
    ])
    let now = environment.now()
    if !outcomes.erasedMeanwhile.isEmpty { throw RPCError(code: .notFound, message: "the user was erased during the sync") }
    try await stored { () throws(StoreError) in
      try await serverAPISyncStore.saveTransactionHistorySync(
        TransactionHistorySyncState(user: user, transactionId: transactionId, revision: history.revision, lastSyncMs: now))
    }
    // Apple signs every answer anew: a newer copy that says the same is `.unchanged`, not counted.
    let stored = transactions.filter { t in
      historyIds.contains(t.transactionId) && outcomes.transactions[t.transactionId].map { $0 == .created || $0 == .updated } == true
    }.count
    let fresh = try await owning(try await SubstatusService.storedHistory(self, user), cached)
    return HistorySyncResult(
      user: user, transactionCount: history.signedTransactions.count, storedTransactionCount: stored,
      revision: history.revision, evaluation: evaluate(fresh, cached, at: environment.now()), refused: outcomes.refused)
  }

  /// Get Transaction History (from `revision`, or from the start when Apple refuses it) and Get
  /// All Subscription Statuses.
  private func fetch(
    user: UserKey, transactionId: String, revision: String?, authorizer: InAppPurchaseKeyAuthorizer
  ) async throws(AppStoreServerAPIError) -> (TransactionHistory, [LastTransactionsItem]) {
    let client = appStoreServerAPI
    var history: TransactionHistory
    do {
      history = try await client.transactionHistory(
        transactionId: transactionId, revision: revision, environment: user.environment, authorizer: authorizer,
        nowMs: client.clock.wallMs)
    } catch {
      // 4000005: Apple no longer accepts the stored revision; fetch the whole history again.
      guard revision != nil, error.apiErrorCode == 4_000_005 else { throw error }
      history = try await client.transactionHistory(
        transactionId: transactionId, revision: nil, environment: user.environment, authorizer: authorizer,
        nowMs: client.clock.wallMs)
    }
    var statuses: [LastTransactionsItem] = []
    do {
      statuses = try await client.allSubscriptionStatuses(
        transactionId: transactionId, environment: user.environment, authorizer: authorizer,
        nowMs: client.clock.wallMs)
    } catch {
      guard error.code == .notFound else { throw error }
    }
    return (history, statuses)
  }

  /// Verifies and decodes every signed item; FAILED_PRECONDITION on the first that fails.
  private func verifyAll(
    _ cached: CachedApp, _ user: UserKey, _ signedTransactions: [String], _ signedRenewalInfos: [String]
  ) throws(RPCError) -> ([SubscriptionDomain.Transaction], [RenewalInfo]) {
    let verifier = signedDataVerifier(cached, user.environment)
    var transactions: [SubscriptionDomain.Transaction] = []
    var renewalInfos: [RenewalInfo] = []
    do {
      for jws in signedTransactions { transactions.append(try verifier.verifyAndDecodeTransaction(jws)) }
      for jws in signedRenewalInfos { renewalInfos.append(try verifier.verifyAndDecodeRenewalInfo(jws)) }
    } catch {
      log.info(
        "server api: signed data failed verification",
        [("app_id", .string(user.appId)), ("environment", .string(user.environment.rawValue)), ("error", .string(error.description))])
      throw RPCError(
        code: .failedPrecondition,
        message: "signed data from the App Store Server API failed verification (\(error.description)); check the trusted roots (--apple-root-ca)")
    }
    return (transactions, renewalInfos)
  }

  private static func storedHistory(_ service: SubstatusService, _ user: UserKey) async throws(RPCError) -> UserHistory {
    try await stored { () throws(StoreError) in try await service.purchaseStore.history(of: user) }
  }
}

