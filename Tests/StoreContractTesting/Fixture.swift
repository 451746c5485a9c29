import SubscriptionDomain
import SubscriptionStorage

/// Test data builders shared by the store test targets.
public enum Fixture {
  /// The time the contract's writes happen at (`ingest(_:atMs:)`): after every fixture purchase.
  public static let now: Int64 = 1_000_000_000

  /// A tenant with a fixed creation time.
  public static func tenant(_ id: String = "t1") -> TenantRecord {
    TenantRecord(tenantId: id, name: "Tenant \(id)", createdMs: 1_000)
  }

  /// An app of `tenant` (bundle id derived from the app id unless given).
  public static func app(_ id: String = "a1", tenant: String = "t1", bundle: String? = nil) -> AppRecord {
    AppRecord(
      appId: id, tenantId: tenant, bundleId: bundle ?? "com.example.\(id)", appleAppId: 12345,
      displayName: "App \(id)", createdMs: 2_000)
  }

  /// An API key whose hash is derived from its id.
  public static func key(
    _ id: String, tenant: String? = "t1", role: ApiKeyRecord.Role = .admin, apps: [String] = []
  ) -> ApiKeyRecord {
    ApiKeyRecord(
      keyId: id, tenantId: tenant, role: role, appIds: apps, description: "key \(id)",
      keyHash: SHA256.hash("secret-of-\(id)"), displayPrefix: "sk_\(id.prefix(4))", createdMs: 3_000
    )
  }

  /// An auto-renewable transaction of group g1 in production.
  public static func transaction(
    _ id: String, original: String? = nil, product: String = "monthly", purchase: Int64,
    expires: Int64? = nil, trial: Bool = false, signed: Int64? = nil, revoked: Int64? = nil
  ) -> Transaction {
    Transaction(
      transactionId: id, originalTransactionId: original, productId: product,
      subscriptionGroupIdentifier: "g1", purchaseDate: purchase, expiresDate: expires,
      isTrialPeriod: trial, revocationDate: revoked, environment: .production, signedDate: signed)
  }

  /// A renewal info with auto-renew on.
  public static func renewal(
    _ original: String, product: String = "monthly", signed: Int64? = nil, retry: Bool = false
  )
    -> RenewalInfo
  {
    RenewalInfo(
      originalTransactionId: original, productId: product, autoRenewProductId: product,
      autoRenewStatus: .on, isInBillingRetryPeriod: retry, signedDate: signed)
  }

  /// A user key of app a1 in production unless given.
  public static func user(_ id: String, app: String = "a1", environment: Environment = .production)
    -> UserKey
  {
    UserKey(appId: app, environment: environment, userId: id)
  }

  /// A store with tenant t1 and app a1.
  public static func seed(_ store: any Store) async throws {
    try await store.createTenant(tenant())
    try await store.createApp(app())
  }
}
