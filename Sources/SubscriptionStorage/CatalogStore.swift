import SubscriptionDomain

/// Apps and what each app configures: its eligibility policy, its secrets (the shared secret and
/// the In-App Purchase key, sealed at rest), its product catalog and its named entitlements.
///
/// Every evaluation reads an app's catalog and policy (the service caches them); the admin handlers
/// write them. Part of ``Store``; a handler or job that needs only this asks for
/// `any CatalogStore`.
public protocol CatalogStore: Sendable {
  // MARK: Apps

  /// Registers an app.
  /// - Throws: `notFound` if the tenant does not exist, `alreadyExists` if the app id or the bundle id
  ///   (within the tenant) is taken.
  func createApp(_ app: AppRecord) async throws(StoreError)
  /// The app with id `appId`, whatever its tenant (the notification endpoint has only the app id).
  /// - Throws: `notFound`.
  func app(id appId: String) async throws(StoreError) -> AppRecord
  /// The app with id `appId` if it belongs to `tenantId`.
  /// - Throws: `notFound` if it does not exist or belongs to another tenant.
  func app(tenantId: String, appId: String) async throws(StoreError) -> AppRecord
  /// The tenant's apps, ordered by app id.
  func listApps(tenantId: String, page: PageRequest) async throws(StoreError) -> Page<AppRecord>
  /// Replaces the app's eligibility policy and returns the app.
  /// - Throws: `notFound`.
  func setPolicy(appId: String, policy: EligibilityPolicy) async throws(StoreError) -> AppRecord
  /// Replaces the app's Apple ID and display name (the bundle id never changes).
  /// - Returns: the app after the change.
  /// - Throws: `notFound` for an unknown app.
  func updateApp(appId: String, appleAppId: Int64?, displayName: String) async throws(StoreError)
    -> AppRecord
  /// Sets whether the app's developer is in the App Store Small Business Program
  /// (``AppRecord/smallBusinessProgram``).
  /// - Returns: the app after the change.
  /// - Throws: `notFound` for an unknown app.
  func setSmallBusinessProgram(appId: String, _ member: Bool) async throws(StoreError)
    -> AppRecord

  // MARK: Shared secrets

  /// Sets the app's shared secret (sealed at rest). The current secret becomes the previous one,
  /// still accepted until `previousValidUntilMs`.
  /// - Returns: the new secret's fingerprint.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if the store has no master key.
  func setSharedSecret(
    appId: String, secret: String, atMs: Int64, previousValidUntilMs: Int64
  ) async throws(StoreError) -> String
  /// The app's secrets, opened; `nil` when none was ever set.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if a secret cannot be opened
  ///   (master key missing or wrong).
  func sharedSecrets(appId: String) async throws(StoreError) -> SharedSecrets?

  // MARK: In-App Purchase keys

  /// Sets the app's In-App Purchase key (the private key sealed at rest), replacing any previous
  /// one. ``AppRecord/inAppPurchaseKey`` shows its non-secret part afterwards.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if the store has no master key.
  func setInAppPurchaseKey(appId: String, key: InAppPurchaseKey) async throws(StoreError)
  /// The app's In-App Purchase key, its private key opened; `nil` when none was set.
  /// - Throws: `notFound` for an unknown app; `secretUnavailable` if the key cannot be opened
  ///   (master key missing or wrong).
  func inAppPurchaseKey(appId: String) async throws(StoreError) -> InAppPurchaseKey?

  // MARK: Catalog

  /// Inserts or replaces products (by product id) in the app's catalog.
  /// - Throws: `notFound` for an unknown app.
  func putProducts(appId: String, products: [Product]) async throws(StoreError)
  /// The app's whole catalog, ordered by product id.
  /// - Throws: `notFound` for an unknown app.
  func products(appId: String) async throws(StoreError) -> [Product]

  // MARK: Named entitlements

  /// Inserts or replaces named entitlement definitions (by entitlement id) of the app; the others
  /// stay. All or nothing, in one commit, checked against the catalog in that commit.
  /// - Throws: `notFound` for an unknown app; `invalidArgument` when a definition has an empty id
  ///   or names a product the app's catalog lacks (the message names them; nothing is written).
  func putEntitlements(appId: String, entitlements: [EntitlementDefinition]) async throws(StoreError)
  /// The app's entitlement definitions, ordered by entitlement id.
  /// - Throws: `notFound` for an unknown app.
  func entitlements(appId: String) async throws(StoreError) -> [EntitlementDefinition]
  /// Deletes entitlement definitions of the app by id, in one commit.
  /// - Returns: the ids that existed and were deleted, in the order given (each once).
  /// - Throws: `notFound` for an unknown app.
  func deleteEntitlements(appId: String, entitlementIds: [String]) async throws(StoreError)
    -> [String]

  // MARK: Product deletion

  /// Deletes products from the app's catalog, and from every named entitlement that lists them,
  /// in one commit. The transactions of those products stay in the users' histories (evaluation
  /// then treats them as unknown products, docs/architecture.md rule 2).
  /// - Returns: the product ids that existed and were deleted, in the order given (each once).
  /// - Throws: `notFound` for an unknown app.
  func deleteProducts(appId: String, productIds: [String]) async throws(StoreError) -> [String]
}
