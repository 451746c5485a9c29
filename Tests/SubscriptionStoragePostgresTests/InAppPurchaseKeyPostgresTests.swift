import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// What only PostgreSQL shows of In-App Purchase keys: sealed in the row, readable by every
/// instance with the master key, re-sealed after a rotation.
@Suite("PostgreSQL store: In-App Purchase keys")
struct InAppPurchaseKeyPostgresTests {
  private func open(_ url: String, keyring: MasterKeyring? = testKeyring) throws -> PostgresStore {
    try PostgresStore(configuration: .init(url: url, keyring: keyring, poolSize: 1))
  }

  @Test func theKeyIsSealedInItsRowAndReadableByEveryInstanceWithTheMasterKey() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    let keyless = try open(url, keyring: nil)
    defer { for s in [a, b, keyless] { s.close() } }
    try await Fixture.seed(a)
    let key = StoreContract.inAppPurchaseKey("pg-at-rest")
    try await a.setInAppPurchaseKey(appId: "a1", key: key)
    #expect(try await b.inAppPurchaseKey(appId: "a1") == key)
    #expect(try await b.app(id: "a1").inAppPurchaseKey == key.info)
    #expect(try await keyless.app(id: "a1").inAppPurchaseKey == key.info)
    await expectStoreError(.secretUnavailable) { try await keyless.inAppPurchaseKey(appId: "a1") }
    let db = try PGConnection(conninfo: url)
    let whole = try #require(
      try db.first("SELECT t::text FROM in_app_purchase_keys t WHERE app_id = 'a1'")
    ).text(0)
    #expect(!whole.contains("private-pg-at-rest"))
    #expect(whole.contains("public-pg-at-rest"))
    let box = try #require(try db.first("SELECT private_key_box FROM in_app_purchase_keys")).bytes(0)
    #expect(!String(decoding: box, as: UTF8.self).contains("private-pg-at-rest"))
  }

  @Test func resealingAfterARotationCoversInAppPurchaseKeys() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let oldKey = try MasterKey(bytes: [UInt8](repeating: 3, count: 32))
    let newKey = try MasterKey(bytes: [UInt8](repeating: 4, count: 32))
    let key = StoreContract.inAppPurchaseKey("pg-rotated")
    let before = try open(url, keyring: MasterKeyring(current: oldKey))
    try await Fixture.seed(before)
    try await before.setInAppPurchaseKey(appId: "a1", key: key)
    before.close()
    let rotating = try open(url, keyring: MasterKeyring(current: newKey, previous: [oldKey]))
    #expect(try await rotating.resealSecrets() == 1)
    #expect(try await rotating.resealSecrets() == 0)
    rotating.close()
    let after = try open(url, keyring: MasterKeyring(current: newKey))
    defer { after.close() }
    #expect(try await after.inAppPurchaseKey(appId: "a1") == key)
  }
}
