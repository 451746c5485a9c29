import AppStoreSignedData
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusAppleUpstream
import SubstatusEventDelivery
import SubstatusServiceCore

/// What the background jobs need of the service, and all they see of it: the ingest path the
/// handlers run (an app and its catalog, a verifyReceipt answer stored and evaluated, a user's
/// history synced from the App Store Server API, events announced) and what the jobs share with
/// the handlers (the store, the environment, the Apple clients, the signals and counters).
///
/// `SubstatusService` conforms; this module never imports the handlers, which depend on it
/// instead (docs/architecture.md "Modules"). A job is made from any conforming value:
///
/// ```swift
/// let refresher = ReceiptRefresher(service: service, configuration: .init())
/// ```
package protocol IngestPath: Sendable {
  /// The counters the jobs add to (the service's metrics).
  associatedtype Counters: BackgroundJobCounters
  /// What signs an app's App Store Server API calls.
  associatedtype Authorizer: AppStoreServerAPIAuthorizer

  /// Where state lives.
  var store: any Store { get }
  /// Time and randomness.
  var environment: ServiceEnvironment { get }
  /// Where log lines go.
  var log: LogSink { get }
  /// The counters the jobs add to.
  var metrics: Counters { get }
  /// Apple's verifyReceipt.
  var verifyReceipt: VerifyReceiptClient { get }
  /// The App Store Server API.
  var appStoreServerAPI: AppStoreServerAPIClient { get }
  /// Wakes the transition scheduler and `WatchEvents` streams when events are appended.
  var eventSignal: EventSignal { get }
  /// Wakes the ``ConsumptionResponder`` when a refund request is recorded.
  var consumptionSignal: EventSignal { get }
  /// Refund requests recorded and answered.
  var consumptionMetrics: ConsumptionMetrics { get }
  /// Wakes the ``AppAccountTokenWriter`` when a commit transferred purchases (rule 26).
  var appAccountTokenSignal: EventSignal { get }
  /// The revocation syncs running, one per user.
  var revocationSyncs: RevocationSyncScheduler { get }
  /// When a stored receipt is verified again.
  var receiptRefreshPolicy: ReceiptRefreshPolicy { get }

  /// The app and its catalog by id (cached); `nil` if it does not exist.
  func loadApp(_ appId: String) async throws(RPCError) -> CachedApp?
  /// Stores a verifyReceipt answer as SubmitReceipt does (`submission` false: a refresh, which
  /// writes only a user still stored) and evaluates the user's fresh history: the environment,
  /// the transactions received and written, the evaluation, the original transactions refused.
  func ingestVerified(_ response: VerifyReceiptResponse, for userId: String, in cached: CachedApp, submission: Bool)
    async throws(RPCError) -> VerifiedIngest
  /// Brings a user's stored history up to date from the App Store Server API, as
  /// SyncTransactionHistory does (`submission` false: the app's purchase sharing changes no owner;
  /// `creatingUser`: the user may be created, the reconciler's first holder of an original
  /// transaction no user holds, rule 26; otherwise only a user still stored is written).
  func syncHistory(
    _ cached: CachedApp, userId: String, transactionId: String?, environment: SubscriptionDomain.Environment?,
    fullResync: Bool, submission: Bool, creatingUser: Bool
  ) async throws(RPCError) -> HistorySyncResult
  /// The signer of an app's Server API calls; FAILED_PRECONDITION when the app has no key.
  func serverAPIAuthorizer(_ cached: CachedApp) async throws(RPCError) -> Authorizer
  /// The verifier of the signed data Apple returns for an app in one environment.
  func signedDataVerifier(_ cached: CachedApp, _ environment: SubscriptionDomain.Environment) -> SignedDataVerifier
  /// A Server API failure as the RPC status the API documents.
  func rpcError(_ error: AppStoreServerAPIError, appId: String) -> RPCError
  /// A write appended `count` events: counts them and wakes their consumers.
  func eventsAppended(_ count: Int, source: String)
}

/// The counters of the background jobs (kept with the service's metrics, rendered in `/metrics`).
package protocol BackgroundJobCounters: Sendable {
  /// A verifyReceipt call answered with `status` after `seconds`.
  func upstream(status: String, seconds: Double)
  /// A stored receipt's refresh ended with `outcome`.
  func refreshed(outcome: String)
  /// A pass of the reconciler over every app began.
  func reconcilerRan()
  /// One app and environment of a pass was reconciled.
  func reconciled(_ summary: ServerAPIReconciler.Summary)
  /// One app and environment of a pass failed, or a pass could not list the apps.
  func reconcileFailed()
  /// A Server API sync after a V2 REFUND or REVOKE ended with `outcome`.
  func revocationSync(outcome: String)
  /// A Set App Account Token write ended with `outcome`.
  func appAccountTokenWrite(outcome: String)
}

/// What one verified receipt's ingest wrote, and the user's answer after it.
package struct VerifiedIngest: Sendable {
  /// The environment Apple answered for.
  package var environment: SubscriptionDomain.Environment
  /// Transactions in Apple's answer.
  package var received: Int
  /// Transactions written (new or changed).
  package var written: Int
  /// The user's evaluation after the write; `nil` when a refresh found the user erased meanwhile
  /// (nothing was written, and no history was read).
  package var evaluation: SubscriptionEvaluation?
  /// Original transactions not stored for the user (purchase sharing).
  package var refused: [String]

  /// A result from its parts.
  package init(
    environment: SubscriptionDomain.Environment, received: Int, written: Int, evaluation: SubscriptionEvaluation?,
    refused: [String]
  ) {
    self.environment = environment
    self.received = received
    self.written = written
    self.evaluation = evaluation
    self.refused = refused
  }
}

/// What one Server API sync of a user did.
package struct HistorySyncResult {
  package var user: UserKey
  package var transactionCount: Int
  package var storedTransactionCount: Int
  package var revision: String
  package var evaluation: SubscriptionEvaluation
  /// Original transactions not stored for the user (purchase sharing).
  package var refused: [String] = []

  package init(
    user: UserKey, transactionCount: Int, storedTransactionCount: Int, revision: String,
    evaluation: SubscriptionEvaluation, refused: [String] = []
  ) {
    self.user = user
    self.transactionCount = transactionCount
    self.storedTransactionCount = storedTransactionCount
    self.revision = revision
    self.evaluation = evaluation
    self.refused = refused
  }
}
