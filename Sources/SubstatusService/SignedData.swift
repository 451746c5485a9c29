import AppStoreSignedData
import Foundation
import HTTPServer
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusJSON
import SubstatusServiceCore
import SubstatusWire

/// Why one piece of App Store signed data was refused: the reasons SubmitSignedTransactions
/// reports per item and the V2 notification endpoint answers with.
enum SignedDataRejection: String, Sendable, Hashable, CaseIterable {
  /// The ES256 signature does not verify, or the JWS is not ES256.
  case invalidSignature = "INVALID_SIGNATURE"
  /// The `x5c` chain is broken, does not end at a trusted root, lacks Apple's marker OIDs, or was
  /// not valid at the payload's `signedDate`.
  case untrustedChain = "UNTRUSTED_CHAIN"
  /// The payload is for another app (`bundleId`, or `appAppleId` in production).
  case wrongApp = "WRONG_APP"
  /// The payload's environment is not `Sandbox`/`Production`, or not the call's.
  case wrongEnvironment = "WRONG_ENVIRONMENT"
  /// Not a compact JWS, or its payload is not the expected Apple type.
  case malformed = "MALFORMED"
}

/// A refused piece of signed data: why, and a one-line explanation without the data itself.
struct SignedDataFailure: Error, Sendable, CustomStringConvertible {
  var reason: SignedDataRejection
  var detail: String

  init(_ reason: SignedDataRejection, _ detail: String) {
    self.reason = reason
    self.detail = detail
  }

  init(_ error: SignedDataVerificationError) {
    switch error {
    case .malformed: reason = .malformed
    case .unsupportedAlgorithm, .invalidSignature: reason = .invalidSignature
    case .invalidCertificateChain, .untrustedRoot, .missingAppleMarkerOID, .certificateNotValidAtSignedDate:
      reason = .untrustedChain
    case .wrongBundleId, .wrongAppAppleId: reason = .wrongApp
    case .wrongEnvironment, .unsupportedEnvironment: reason = .wrongEnvironment
    }
    detail = error.description
  }

  /// `REASON: detail`, the per-item message (the reason leads so a caller can tell the cases apart).
  var description: String { "\(reason.rawValue): \(detail)" }

  /// The per-item error of SubmitSignedTransactions.
  func itemError(field: String) -> Substatus_V1_ItemError {
    var e = Substatus_V1_ItemError()
    e.code = Int32(RPCError.Code.invalidArgument.rawValue)
    e.field = field
    e.message = description
    e.reason = reason.rawValue
    return e
  }
}

/// Verifies one app's signed data: the signature and chain against the service's trusted roots
/// first, then the app checks with the verifier of the environment the verified payload names.
struct AppSignedDataVerifiers {
  let roots: [X509Certificate]
  let app: AppRecord

  /// The verifier for an environment.
  func verifier(_ environment: SubscriptionDomain.Environment) -> SignedDataVerifier {
    SignedDataVerifier(trustedRoots: roots, bundleId: app.bundleId, appAppleId: app.appleAppId, environment: environment)
  }

  /// Signature and chain; the environment the payload names (an environment Apple does not sign
  /// goes to the sandbox verifier, which refuses it as such).
  func verified(_ jws: String) throws(SignedDataFailure) -> (VerifiedSignedData, SubscriptionDomain.Environment) {
    do {
      let verified = try SignedDataVerifier.verifySignature(jws, trustedRoots: roots)
      return (verified, verified.origin.environment ?? .sandbox)
    } catch {
      throw SignedDataFailure(error)
    }
  }

  /// Verifies a signed transaction; returns it and its environment.
  func transaction(_ jws: String, notificationType: String? = nil) throws(SignedDataFailure)
    -> (SubscriptionDomain.Transaction, SubscriptionDomain.Environment)
  {
    let (verified, environment) = try verified(jws)
    do {
      var t = try verifier(environment).decodeTransaction(verified: verified)
      t.notificationType = notificationType
      return (t, environment)
    } catch {
      throw SignedDataFailure(error)
    }
  }

  /// Verifies a signed renewal info; returns it and its environment.
  func renewalInfo(_ jws: String) throws(SignedDataFailure) -> (RenewalInfo, SubscriptionDomain.Environment) {
    let (verified, environment) = try verified(jws)
    do {
      return (try verifier(environment).decodeRenewalInfo(verified: verified), environment)
    } catch {
      throw SignedDataFailure(error)
    }
  }

  /// Verifies a V2 notification's `signedPayload` (the environment from its `data`, `summary` or
  /// `externalPurchaseToken`); returns it and that environment. Production notifications must carry
  /// the app's Apple app id, so an app without one receives none.
  func notification(_ jws: String) throws(SignedDataFailure) -> (NotificationV2, SubscriptionDomain.Environment) {
    let (verified, environment) = try verified(jws)
    if environment == .production, app.appleAppId == nil {
      throw SignedDataFailure(
        .wrongApp, "production notifications are checked against the app's apple_app_id, and app \"\(app.appId)\" has none")
    }
    do {
      return (try verifier(environment).decodeNotification(verified: verified), environment)
    } catch {
      throw SignedDataFailure(error)
    }
  }
}

/// Reads a JWS payload without verifying it: only to name a refused item.
enum UnverifiedJWS {
  static func payload(_ jws: String) -> JSONValue? {
    let parts = jws.split(separator: ".", maxSplits: 3, omittingEmptySubsequences: false)
    guard parts.count == 3, parts[1].utf8.count <= 1 << 20, let bytes = Base64URL.decode(parts[1]) else { return nil }
    return try? JSONValue(parsing: bytes)
  }

  static func string(_ jws: String, _ key: String) -> String? {
    payload(jws)?[key]?.stringValue
  }
}

// MARK: IngestService.SubmitSignedTransactions

extension SubstatusService {
  public func submitSignedTransactions(_ request: Substatus_V1_SubmitSignedTransactionsRequest, _ context: ServerContext) async throws
    -> Substatus_V1_SubmitSignedTransactionsResponse
  {
    let cached = try await app(request.appID, context)
    try requireID(request.userID, "user_id", limits: limits)
    guard !request.signedTransactions.isEmpty || !request.signedRenewalInfos.isEmpty else {
      throw invalidArgument("signed_transactions", "signed_transactions and signed_renewal_infos are both empty")
    }
    guard request.signedTransactions.count <= limits.maxImportItems else {
      throw batchTooLarge("signed_transactions", limit: limits.maxImportItems, count: request.signedTransactions.count)
    }
    guard request.signedRenewalInfos.count <= limits.maxImportItems else {
      throw batchTooLarge("signed_renewal_infos", limit: limits.maxImportItems, count: request.signedRenewalInfos.count)
    }
    let verifiers = AppSignedDataVerifiers(roots: appleRootCertificates, app: cached.app)
    let (transactionsJWS, renewalsJWS) = (request.signedTransactions, request.signedRenewalInfos)
    // Verifying is CPU work (an ES256 check per item): a big batch runs on a thread of its own so
    // the cooperative pool keeps answering other calls meanwhile.
    let batch =
      transactionsJWS.count + renewalsJWS.count <= 8
      ? SignedBatch(verifying: transactionsJWS, renewalsJWS, with: verifiers)
      : await offloaded { SignedBatch(verifying: transactionsJWS, renewalsJWS, with: verifiers) }
    var (transactionResults, renewalResults) = (batch.transactionResults, batch.renewalResults)
    let environment = batch.environment
    let user = UserKey(appId: cached.app.appId, environment: environment ?? .production, userId: request.userID)
    if environment != nil {
      let outcomes = try await ingestWithOutcomes([
        UserPurchases(
          user: user, transactions: batch.transactions, renewalInfos: batch.renewalInfos, submittedMs: self.environment.now())
      ])
      outcomes.fill(&transactionResults, &renewalResults)
    }
    if !batch.rejected.isEmpty {
      log.info("signed data rejected", [
        ("app_id", .string(cached.app.appId)),
        ("reasons", .string(batch.rejected.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue)=\($0.value)" }.joined(separator: ","))),
      ])
    }
    let history = try await owning(try await stored { () throws(StoreError) in try await purchaseStore.history(of: user) }, cached)
    let evaluation = evaluate(history, cached, at: self.environment.now())
    var response = Substatus_V1_SubmitSignedTransactionsResponse()
    response.userID = request.userID
    response.groups = evaluation.groups.map(\.wire)
    response.entitlements = evaluation.entitlements.map(\.wire)
    response.asOfMs = evaluation.time
    response.environment = environment?.wire ?? .unspecified
    response.transactionResults = transactionResults
    response.renewalInfoResults = renewalResults
    return response
  }
}

/// A SubmitSignedTransactions batch, verified item by item: the first valid item fixes the
/// environment; an item of another environment is refused.
struct SignedBatch: Sendable {
  var environment: SubscriptionDomain.Environment?
  var transactions: [SubscriptionDomain.Transaction] = []
  var renewalInfos: [RenewalInfo] = []
  var transactionResults: [Substatus_V1_TransactionImportResult] = []
  var renewalResults: [Substatus_V1_RenewalInfoImportResult] = []
  /// How many items were refused, by reason.
  var rejected: [SignedDataRejection: Int] = [:]

  init(verifying signedTransactions: [String], _ signedRenewalInfos: [String], with verifiers: AppSignedDataVerifiers) {
    for (n, jws) in signedTransactions.enumerated() {
      var result = Substatus_V1_TransactionImportResult()
      do {
        let (t, found) = try verifiers.transaction(jws)
        try sameEnvironment(found)
        result.transactionID = t.transactionId
        transactions.append(t)
      } catch {
        result.transactionID = UnverifiedJWS.string(jws, "transactionId") ?? ""
        result.outcome = .rejected
        result.error = error.itemError(field: "signed_transactions[\(n)]")
        rejected[error.reason, default: 0] += 1
      }
      transactionResults.append(result)
    }
    for (n, jws) in signedRenewalInfos.enumerated() {
      var result = Substatus_V1_RenewalInfoImportResult()
      do {
        let (r, found) = try verifiers.renewalInfo(jws)
        try sameEnvironment(found)
        result.originalTransactionID = r.originalTransactionId
        renewalInfos.append(r)
      } catch {
        result.originalTransactionID = UnverifiedJWS.string(jws, "originalTransactionId") ?? ""
        result.outcome = .rejected
        result.error = error.itemError(field: "signed_renewal_infos[\(n)]")
        rejected[error.reason, default: 0] += 1
      }
      renewalResults.append(result)
    }
  }

  private mutating func sameEnvironment(_ found: SubscriptionDomain.Environment) throws(SignedDataFailure) {
    if let environment, found != environment {
      throw SignedDataFailure(
        .wrongEnvironment, "environment \"\(found.rawValue)\", but this call's signed data is \"\(environment.rawValue)\"")
    }
    environment = found
  }
}

/// Runs synchronous CPU work on a Dispatch thread, off the cooperative pool.
func offloaded<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
  await withCheckedContinuation { continuation in
    DispatchQueue.global(qos: .userInitiated).async { continuation.resume(returning: work()) }
  }
}

// MARK: V2 notifications

extension SubstatusService {
  /// A V2 notification: verified, deduplicated by `notificationUUID`, its signed transaction and
  /// renewal info (verified too) stored for the users that own the original transaction, all in
  /// one commit with the dedupe record; then kept whole with the events it causes by itself
  /// (rule 25, ``keepNotificationV2(_:signedPayload:environment:cached:transaction:appTransaction:updates:receivedMs:)``:
  /// every type, unknown ones too, and a RESCIND_CONSENT's signed AppTransaction verified like the
  /// rest); answered 200 only after both commits.
  /// A REVOKE or REFUND (or `data.status` 5) whose transaction has no `revocationDate` ends access
  /// at the notification's `signedDate` (rule 15, ``NotificationV2/applyingRevocation(to:receivedAt:)``).
  func receiveNotificationV2(appID: String, signedPayload: JSONValue) async throws -> HTTPResponse {
    guard let jws = signedPayload.stringValue, !jws.isEmpty else {
      metrics.notification(outcome: "malformed")
      throw HTTPError(status: 400, message: "signedPayload must be a compact JWS string")
    }
    guard !appID.isEmpty, let cached = try await loadApp(appID) else {
      metrics.notification(outcome: "unknown_app")
      throw HTTPError(status: 404, message: "app \(ErrorText.quoted(appID)) not found")
    }
    let verifiers = AppSignedDataVerifiers(roots: appleRootCertificates, app: cached.app)
    let notification: NotificationV2
    let environment: SubscriptionDomain.Environment
    var transactions: [SubscriptionDomain.Transaction] = []
    var renewalInfos: [RenewalInfo] = []
    var revokedAtSignedDate = false
    var appTransaction: AppTransaction?
    let now = self.environment.now()
    do throws(SignedDataFailure) {
      (notification, environment) = try verifiers.notification(jws)
      if let signed = notification.data?.signedTransactionInfo {
        let (t, found) = try verifiers.transaction(signed, notificationType: notification.rawNotificationType)
        guard found == environment else {
          throw SignedDataFailure(.wrongEnvironment, "signedTransactionInfo is \"\(found.rawValue)\", the notification \"\(environment.rawValue)\"")
        }
        let stored = notification.applyingRevocation(to: t, receivedAt: now)
        revokedAtSignedDate = stored.revocationDate != t.revocationDate
        transactions.append(stored)
      }
      if let signed = notification.data?.signedRenewalInfo {
        let (r, found) = try verifiers.renewalInfo(signed)
        guard found == environment else {
          throw SignedDataFailure(.wrongEnvironment, "signedRenewalInfo is \"\(found.rawValue)\", the notification \"\(environment.rawValue)\"")
        }
        renewalInfos.append(r)
      }
      if let signed = notification.appData?.signedAppTransactionInfo {
        let (a, found) = try verifiers.appTransaction(signed)
        guard found == environment else {
          throw SignedDataFailure(.wrongEnvironment, "signedAppTransactionInfo is \"\(found.rawValue)\", the notification \"\(environment.rawValue)\"")
        }
        appTransaction = a
      }
    } catch {
      return rejectedNotification(error, appID: appID)
    }
    let updates = try await routeByOriginalTransaction(
      appID: appID, environment: environment, transactions: transactions, renewalInfos: renewalInfos,
      policy: cached.app.policy)
    let id = "v2:" + notification.notificationUUID
    let written = try await applyNotification(appID: appID, id: id, receivedMs: now, updates: updates)
    let applied = written != nil
    if let written { eventsAppended(written.eventsAppended, source: "notification") }
    // Rule 25: the notification itself, whatever its type, and the events it causes by itself.
    _ = try await keepNotificationV2(
      notification, signedPayload: jws, environment: environment, cached: cached, transaction: transactions.first,
      appTransaction: appTransaction, updates: updates, receivedMs: now)
    metrics.notification(outcome: applied ? "applied" : "duplicate")
    // Rule 27: a refund request to answer (also on a duplicate: the row may be what was lost).
    try await recordConsumptionRequest(
      notification, notificationId: id, cached: cached, environment: environment, transactions: transactions)
    var fields: [(String, JSONValue)] = [
      ("app_id", .string(cached.app.appId)), ("version", .integer(2)), ("type", .string(notification.rawNotificationType)),
    ]
    if let subtype = notification.rawSubtype { fields.append(("subtype", .string(subtype))) }
    if let status = notification.data?.rawStatus { fields.append(("apple_status", .integer(status))) }
    if revokedAtSignedDate { fields.append(("revoked_at", .string("signedDate"))) }
    fields += [
      ("notification_uuid", .string(String(notification.notificationUUID.prefix(64)))),
      ("environment", .string(environment.rawValue)), ("users", .integer(updates.count)), ("duplicate", .bool(!applied)),
    ]
    log.info("notification", fields)
    if applied {
      scheduleRevocationSync(
        after: notification, cached: cached, environment: environment, transactions: transactions, updates: updates)
    }
    return HTTPResponse.json(["status": .string(applied ? "applied" : "duplicate")])
  }

  /// The answer to a notification that failed verification: permanent, so a 4xx (401 when it is
  /// not proven to come from Apple, 400 otherwise) whose JSON body names the reason.
  func rejectedNotification(_ failure: SignedDataFailure, appID: String) -> HTTPResponse {
    metrics.notification(outcome: failure.reason.rawValue.lowercased())
    let status = failure.reason == .invalidSignature || failure.reason == .untrustedChain ? 401 : 400
    log.info("notification rejected", [("app_id", .string(appID)), ("version", .integer(2)), ("reason", .string(failure.reason.rawValue))])
    return HTTPResponse.json(
      ["error": .object(["status": .integer(status), "reason": .string(failure.reason.rawValue), "message": .string(failure.detail)])],
      status: status)
  }
}
