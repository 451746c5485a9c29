import SubscriptionDomain

/// Tenants and their API keys: who may call the service (docs/architecture.md "Access model").
///
/// The API-key interceptor reads a key by its hash on every call and records its use; the admin
/// handlers create, list, disable and revoke. Part of ``Store``; a handler or job that needs only
/// this asks for `any TenantStore`.
public protocol TenantStore: Sendable {
  // MARK: Tenants

  /// Creates a tenant.
  /// - Throws: `alreadyExists` if the id is taken.
  func createTenant(_ tenant: TenantRecord) async throws(StoreError)
  /// The tenant with id `tenantId`.
  /// - Throws: `notFound`.
  func tenant(id tenantId: String) async throws(StoreError) -> TenantRecord
  /// Tenants ordered by id.
  func listTenants(page: PageRequest) async throws(StoreError) -> Page<TenantRecord>
  /// Disables or re-enables a tenant and returns it.
  /// - Throws: `notFound`.
  func setTenantDisabled(id tenantId: String, disabled: Bool) async throws(StoreError)
    -> TenantRecord

  // MARK: API keys

  /// Stores a new key.
  /// - Throws: `alreadyExists` if the id or hash is taken; `notFound` if its tenant does not exist;
  ///   `invalidArgument` unless operator keys have no tenant and other keys have one.
  func createApiKey(_ key: ApiKeyRecord) async throws(StoreError)
  /// The key whose SHA-256 is `hash` (compared in constant time), revoked ones included; `nil` if none.
  func apiKey(hash: [UInt8]) async throws(StoreError) -> ApiKeyRecord?
  /// Keys of a tenant (or operator keys for `nil`), ordered by key id.
  func listApiKeys(tenantId: String?, page: PageRequest) async throws(StoreError) -> Page<
    ApiKeyRecord
  >
  /// Revokes a key of the tenant (`nil`: an operator key) and returns it; revoking twice keeps the
  /// first time.
  /// - Throws: `notFound` if it does not exist or belongs to another tenant.
  func revokeApiKey(tenantId: String?, keyId: String, atMs: Int64) async throws(StoreError)
    -> ApiKeyRecord
  /// Records that a key was used. Cheap and coalesced: implementations may skip the write when the
  /// stored time is less than a minute older.
  func touchApiKey(keyId: String, atMs: Int64) async throws(StoreError)
}
