import Foundation
import SubscriptionDomain
import SubscriptionStorage
import StoreContractTesting
import Testing

@testable import SubscriptionStorageSQLite

/// What only the SQLite store shows of In-App Purchase keys: sealed at rest, the master key's role,
/// re-sealing after a rotation. The behaviour every store shares is the contract's
/// `inAppPurchaseKeys` case.
@Suite("SQLite store: In-App Purchase keys")
struct InAppPurchaseKeyStoreTests {
  private func open(_ dir: TemporaryDirectory, keyring: MasterKeyring? = testKeyring) throws
    -> SQLiteStore
  {
    try SQLiteStore(
      configuration: .init(path: dir.file("store.sqlite"), keyring: keyring, readerCount: 2))
  }

  @Test("the private key is encrypted at rest and needs the right master key")
  func sealedAtRest() async throws {
    let dir = TemporaryDirectory()
    let key = StoreContract.inAppPurchaseKey("at-rest")
    do {
      let store = try open(dir)
      try await Fixture.seed(store)
      try await store.setInAppPurchaseKey(appId: "a1", key: key)
      #expect(try await store.inAppPurchaseKey(appId: "a1") == key)
      store.close()
    }
    // Neither the file nor its WAL holds the PEM or its body; the public part is stored as is.
    var publicFound = false
    for name in try FileManager.default.contentsOfDirectory(atPath: dir.path) {
      let bytes = try Data(contentsOf: URL(fileURLWithPath: dir.file(name)))
      #expect(bytes.range(of: Data(key.privateKeyPEM.utf8)) == nil, "private key PEM in \(name)")
      #expect(bytes.range(of: Data("private-at-rest".utf8)) == nil, "private key body in \(name)")
      if bytes.range(of: Data("public-at-rest".utf8)) != nil { publicFound = true }
    }
    #expect(publicFound, "the public key is stored in the clear (the scan reads the right files)")
    // The non-secret part needs no master key; the private key needs the right one.
    let none = try open(dir, keyring: nil)
    #expect(try await none.app(id: "a1").inAppPurchaseKey == key.info)
    await expectStoreError(.secretUnavailable) { try await none.inAppPurchaseKey(appId: "a1") }
    await expectStoreError(.secretUnavailable) {
      try await none.setInAppPurchaseKey(appId: "a1", key: key)
    }
    none.close()
    let wrong = try open(dir, keyring: MasterKeyring(current: .generate()))
    await expectStoreError(.secretUnavailable) { try await wrong.inAppPurchaseKey(appId: "a1") }
    wrong.close()
  }

  @Test("a sealed key copied to another app's row does not open")
  func boundToItsApp() async throws {
    let dir = TemporaryDirectory()
    let store = try open(dir)
    defer { store.close() }
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    try await store.setInAppPurchaseKey(appId: "a1", key: StoreContract.inAppPurchaseKey("one"))
    try await store.setInAppPurchaseKey(appId: "a2", key: StoreContract.inAppPurchaseKey("two"))
    try await store.writer.write { db throws(StoreError) in
      try db.run(
        """
        UPDATE in_app_purchase_keys SET private_key_box =
          (SELECT private_key_box FROM in_app_purchase_keys WHERE app_id = 'a1') WHERE app_id = 'a2'
        """)
    }
    await expectStoreError(.secretUnavailable) { try await store.inAppPurchaseKey(appId: "a2") }
  }

  @Test("master key rotation: resealSecrets moves In-App Purchase keys to the new key too")
  func rotation() async throws {
    let dir = TemporaryDirectory()
    let oldKey = MasterKey.generate()
    let newKey = MasterKey.generate()
    let key = StoreContract.inAppPurchaseKey("rotated")
    do {
      let store = try open(dir, keyring: MasterKeyring(current: oldKey))
      try await Fixture.seed(store)
      _ = try await store.setSharedSecret(
        appId: "a1", secret: "one", atMs: 1, previousValidUntilMs: 0)
      try await store.setInAppPurchaseKey(appId: "a1", key: key)
      store.close()
    }
    do {
      let store = try open(dir, keyring: MasterKeyring(current: newKey, previous: [oldKey]))
      #expect(try await store.inAppPurchaseKey(appId: "a1") == key)
      #expect(try await store.resealSecrets() == 2)
      #expect(try await store.resealSecrets() == 0)
      store.close()
    }
    let store = try open(dir, keyring: MasterKeyring(current: newKey))
    defer { store.close() }
    #expect(try await store.inAppPurchaseKey(appId: "a1") == key)
  }
}
