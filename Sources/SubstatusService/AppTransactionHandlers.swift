// The Apple Account behind an app user (docs/architecture.md rule 24): IngestService.
// SubmitAppTransaction verifies the device's signed AppTransaction
// (https://developer.apple.com/documentation/appstoreserverapi/jwsapptransactiondecodedpayload),
// stores its `appTransactionId` with the user and, with the app's In-App Purchase key, fetches
// that account's whole history by it (Get Transaction History accepts "any transactionId,
// originalTransactionId, or appTransactionId that belongs to the customer", App Store Server API
// 1.20: https://developer.apple.com/documentation/appstoreserverapi/get-transaction-history).
// Once Apple has answered, an intro offer no transaction of the account used is
// NEW_CUSTOMER_VERIFIED instead of NEW_CUSTOMER.
import AppStoreSignedData
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

extension AppSignedDataVerifiers {
  /// Verifies a signed `AppTransaction`; returns it and its environment (its `receiptType`; one
  /// Apple does not sign goes to the sandbox verifier, which refuses it as such).
  func appTransaction(_ jws: String) throws(SignedDataFailure) -> (AppTransaction, SubscriptionDomain.Environment) {
    let verified: VerifiedSignedData
    do { verified = try SignedDataVerifier.verifySignature(jws, trustedRoots: roots) } catch {
      throw SignedDataFailure(error)
    }
    let environment = verified.appTransactionEnvironment ?? .sandbox
    do {
      return (try verifier(environment).decodeAppTransaction(verified: verified), environment)
    } catch {
      throw SignedDataFailure(error)
    }
  }
}

extension SubstatusService {
  // MARK: IngestService.SubmitAppTransaction

  public func submitAppTransaction(_ request: Substatus_V1_SubmitAppTransactionRequest, _ context: ServerContext)
    async throws -> Substatus_V1_SubmitAppTransactionResponse
  {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    guard !request.signedAppTransaction.isEmpty else {
      throw invalidArgument("signed_app_transaction", "must not be empty")
    }
    guard request.signedAppTransaction.utf8.count <= 64 << 10 else {
      throw invalidArgument("signed_app_transaction", "longer than 64 KiB")
    }
    let verifiers = AppSignedDataVerifiers(roots: appleRootCertificates, app: cached.app)
    let appTransaction: AppTransaction
    let environment: SubscriptionDomain.Environment
    do { (appTransaction, environment) = try verifiers.appTransaction(request.signedAppTransaction) } catch {
      log.info(
        "app transaction rejected", [("app_id", .string(cached.app.appId)), ("reason", .string(error.reason.rawValue))])
      throw invalidArgument("signed_app_transaction", error.description)
    }
    try requireTransactionID(appTransaction.appTransactionId, "signed_app_transaction")
    let user = UserKey(appId: cached.app.appId, environment: environment, userId: request.userID)
    var link = AppAccountLink(
      user: user, appTransactionId: appTransaction.appTransactionId,
      originalPurchaseDate: appTransaction.originalPurchaseDate,
      originalApplicationVersion: appTransaction.originalApplicationVersion, linkedMs: self.environment.now())
    // The link is stored first: should Apple not answer now, a retry (or the next submission)
    // finds it, and the account is known even without a key.
    try await stored { () throws(StoreError) in try await appAccountStore.saveAppAccount(link) }
    var synced: HistorySyncResult?
    if cached.app.inAppPurchaseKey != nil {
      let result = try await syncHistory(
        cached, userId: request.userID, transactionId: appTransaction.appTransactionId, environment: environment,
        fullResync: false, submission: true)
      // Apple's answer is the account's whole history only if all of it is stored for the user:
      // under KEEP_FIRST another user may own part of it, and then "no purchase here" is no
      // longer Apple's word.
      if result.refused.isEmpty {
        link.historyVerifiedMs = self.environment.now()
        try await stored { () throws(StoreError) in try await appAccountStore.saveAppAccount(link) }
      }
      synced = result
    }
    let evaluation: SubscriptionEvaluation
    if let synced {
      evaluation = synced.evaluation
    } else {
      let history = try await owning(try await stored { () throws(StoreError) in try await purchaseStore.history(of: user) }, cached)
      evaluation = evaluate(history, cached, at: self.environment.now())
    }
    var response = Substatus_V1_SubmitAppTransactionResponse()
    response.userID = request.userID
    response.groups = evaluation.groups.map(\.wire)
    response.entitlements = evaluation.entitlements.map(\.wire)
    response.asOfMs = evaluation.time
    response.environment = environment.wire
    response.appTransactionID = appTransaction.appTransactionId
    response.originalPurchaseDateMs = appTransaction.originalPurchaseDate ?? 0
    response.originalApplicationVersion = appTransaction.originalApplicationVersion ?? ""
    response.historyVerified = link.historyVerifiedMs != nil
    response.transactionCount = Int32(clamping: synced?.transactionCount ?? 0)
    response.storedTransactionCount = Int32(clamping: synced?.storedTransactionCount ?? 0)
    response.refusedOriginalTransactions = (synced?.refused ?? []).map(Self.refusedOriginalTransaction)
    return response
  }

  /// Rule 24 on eligibility answers: the users among `evaluations` whose Apple Account's history
  /// Apple has answered get NEW_CUSTOMER_VERIFIED for every NEW_CUSTOMER answer. The store is read
  /// only for users that have such an answer (those with no purchase known in some group). Under
  /// purchase sharing a group in which the user held, at `time`, an original transaction they did
  /// not own (lost to another user, or acquired later) stays NEW_CUSTOMER: the account did buy in
  /// it (``disownedGroups(of:environment:_:at:)``).
  func verifyingNewCustomers(
    _ evaluations: [String: EligibilityAnswers], environment: SubscriptionDomain.Environment, _ cached: CachedApp,
    at time: Int64
  ) async throws(RPCError) -> [String: EligibilityAnswers] {
    let candidates = evaluations.compactMap { $0.value.hasNewCustomerAnswer ? $0.key : nil }
    guard !candidates.isEmpty else { return evaluations }
    let appId = cached.app.appId
    let links = try await stored { () throws(StoreError) in
      try await appAccountStore.appAccounts(appId: appId, environment: environment, userIds: candidates)
    }
    let verified = links.compactMap { $0.value.historyVerifiedMs != nil ? $0.key : nil }
    let disowned = try await disownedGroups(of: verified, environment: environment, cached, at: time)
    var out = evaluations
    for userId in verified {
      out[userId] = out[userId]?.withVerifiedAppleAccount(exceptGroups: disowned[userId] ?? [])
    }
    return out
  }

  /// Per user, the subscription groups of the original transactions the user holds but did not own
  /// at `time` (purchase sharing's gaps). Read only for an app whose purchase sharing ever left
  /// SHARE, and for users with a gap covering `time`.
  func disownedGroups(
    of userIds: [String], environment: SubscriptionDomain.Environment, _ cached: CachedApp, at time: Int64
  ) async throws(RPCError) -> [String: Set<String>] {
    guard cached.app.ownershipTracked, !userIds.isEmpty else { return [:] }
    let appId = cached.app.appId
    let gaps = try await stored { () throws(StoreError) in
      try await purchaseStore.ownershipGaps(appId: appId, environment: environment, userIds: userIds)
    }
    var out: [String: Set<String>] = [:]
    for (userId, userGaps) in gaps {
      let lost = OwnershipGap.disowned(by: userGaps, at: time)
      if lost.isEmpty { continue }
      let history = try await stored { () throws(StoreError) in
        try await purchaseStore.history(of: UserKey(appId: appId, environment: environment, userId: userId))
      }
      var groups = Set<String>()
      for t in history.transactions where lost.contains(t.originalTransactionId) {
        if let group = cached.catalog[t.productId]?.subscriptionGroupId ?? t.subscriptionGroupIdentifier { groups.insert(group) }
      }
      out[userId] = groups
    }
    return out
  }
}
