import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import Testing

/// The Store implementations the contract suite runs against.
enum StoreKind: String, CaseIterable, CustomTestStringConvertible {
  case inMemory
  case sqliteFile

  var testDescription: String { rawValue }
}

/// A temporary directory removed at the end of a test.
final class TemporaryDirectory: Sendable {
  let path: String

  init() {
    path =
      FileManager.default.temporaryDirectory
      .appendingPathComponent("substatus-storage-\(UUID().uuidString)").path
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  }

  func file(_ name: String) -> String { path + "/" + name }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A fixed master keyring for tests.
let testKeyring = MasterKeyring(current: try! MasterKey(bytes: [UInt8](repeating: 0x42, count: 32)))

/// Runs `body` with a fresh, empty store of `kind`, closing and deleting it afterwards.
func withStore<T>(
  _ kind: StoreKind, _ body: (any Store) async throws -> T
) async throws -> T {
  switch kind {
  case .inMemory:
    return try await body(InMemoryStore())
  case .sqliteFile:
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 2))
    defer { store.close() }
    return try await body(store)
  }
}

/// Test data builders.
enum Fixture {
  static func tenant(_ id: String = "t1") -> TenantRecord {
    TenantRecord(tenantId: id, name: "Tenant \(id)", createdMs: 1_000)
  }

  static func app(_ id: String = "a1", tenant: String = "t1", bundle: String? = nil) -> AppRecord {
    AppRecord(
      appId: id, tenantId: tenant, bundleId: bundle ?? "com.example.\(id)", appleAppId: 12345,
      displayName: "App \(id)", createdMs: 2_000)
  }

  static func key(
    _ id: String, tenant: String? = "t1", role: ApiKeyRecord.Role = .admin, apps: [String] = []
  ) -> ApiKeyRecord {
    ApiKeyRecord(
      keyId: id, tenantId: tenant, role: role, appIds: apps, description: "key \(id)",
      keyHash: SHA256.hash("secret-of-\(id)"), displayPrefix: "sk_\(id.prefix(4))", createdMs: 3_000
    )
  }

  static func transaction(
    _ id: String, original: String? = nil, product: String = "monthly", purchase: Int64,
    expires: Int64? = nil, trial: Bool = false, signed: Int64? = nil, revoked: Int64? = nil
  ) -> Transaction {
    Transaction(
      transactionId: id, originalTransactionId: original, productId: product,
      subscriptionGroupIdentifier: "g1", purchaseDate: purchase, expiresDate: expires,
      isTrialPeriod: trial, revocationDate: revoked, environment: .production, signedDate: signed)
  }

  static func renewal(
    _ original: String, product: String = "monthly", signed: Int64? = nil, retry: Bool = false
  )
    -> RenewalInfo
  {
    RenewalInfo(
      originalTransactionId: original, productId: product, autoRenewProductId: product,
      autoRenewStatus: .on, isInBillingRetryPeriod: retry, signedDate: signed)
  }

  static func user(_ id: String, app: String = "a1", environment: Environment = .production)
    -> UserKey
  {
    UserKey(appId: app, environment: environment, userId: id)
  }

  /// A store with tenant t1 and app a1.
  static func seed(_ store: any Store) async throws {
    try await store.createTenant(tenant())
    try await store.createApp(app())
  }
}
