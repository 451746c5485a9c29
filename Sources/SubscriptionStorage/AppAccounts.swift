// The Apple Account behind an app user (docs/architecture.md rule 24): the app transaction the
// device submitted (IngestService.SubmitAppTransaction), kept per (app, environment, user).
import SubscriptionDomain

/// A user's Apple Account: the verified `AppTransaction` their device submitted, and whether the
/// App Store Server API has answered that account's whole history since.
public struct AppAccountLink: Sendable, Hashable {
  /// The user.
  public var user: UserKey
  /// Apple's `appTransactionId`: one per Apple Account per app.
  public var appTransactionId: String
  /// The app transaction's `originalPurchaseDate`: when the account first got the app.
  public var originalPurchaseDate: Int64?
  /// The app transaction's `originalApplicationVersion`.
  public var originalApplicationVersion: String?
  /// When the link was stored (the last submission).
  public var linkedMs: Int64
  /// When the Server API last answered the account's history (Get Transaction History by
  /// `appTransactionId`) and it was stored; `nil`: never (no In-App Purchase key, or Apple could
  /// not answer). Only then is "no purchase" Apple's word (`NEW_CUSTOMER_VERIFIED`).
  public var historyVerifiedMs: Int64?

  /// Creates a link.
  public init(
    user: UserKey, appTransactionId: String, originalPurchaseDate: Int64? = nil,
    originalApplicationVersion: String? = nil, linkedMs: Int64, historyVerifiedMs: Int64? = nil
  ) {
    self.user = user
    self.appTransactionId = appTransactionId
    self.originalPurchaseDate = originalPurchaseDate
    self.originalApplicationVersion = originalApplicationVersion
    self.linkedMs = linkedMs
    self.historyVerifiedMs = historyVerifiedMs
  }
}

/// Where the stores keep ``AppAccountLink``s. The SQLite, PostgreSQL and in-memory stores conform;
/// a user's erasure (``ErasureStore/deleteUsers(appId:userIds:)``) removes their links.
public protocol AppAccountStore: Sendable {
  /// Stores a user's link, replacing the one stored for that user in that environment.
  /// - Throws: `notFound` (app), `invalidArgument` (empty ids, an id longer than 64 bytes).
  func saveAppAccount(_ link: AppAccountLink) async throws(StoreError)

  /// The links of users of one app and environment, by user id (users without one are absent).
  func appAccounts(appId: String, environment: Environment, userIds: [String]) async throws(StoreError)
    -> [String: AppAccountLink]
}

extension AppAccountStore {
  /// The link of one user, if any.
  public func appAccount(of user: UserKey) async throws(StoreError) -> AppAccountLink? {
    try await appAccounts(appId: user.appId, environment: user.environment, userIds: [user.userId])[user.userId]
  }
}

extension StoreValidation {
  /// Checks a link: app, user and app transaction ids are non-empty, the app transaction id at
  /// most 64 bytes.
  /// - Throws: `invalidArgument` naming the problem.
  public static func validate(_ link: AppAccountLink) throws(StoreError) {
    if link.user.appId.isEmpty { throw StoreError(.invalidArgument, "app account: app_id is empty") }
    if link.user.userId.isEmpty { throw StoreError(.invalidArgument, "app account: user_id is empty") }
    if link.appTransactionId.isEmpty || link.appTransactionId.utf8.count > 64 {
      throw StoreError(.invalidArgument, "app account: app_transaction_id must be 1 to 64 bytes")
    }
  }
}
