import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The In-App Purchase key part of the Store contract.
extension StoreContract {
  /// An In-App Purchase key whose every field is derived from `tag` (the PEMs are stand-ins: a
  /// store keeps them as text and never parses them).
  public static func inAppPurchaseKey(_ tag: String, setMs: Int64 = 10) -> InAppPurchaseKey {
    InAppPurchaseKey(
      keyId: "KEY\(tag.uppercased())0000000".prefix(10).description,
      issuerId: "57246542-96fe-1a63-e053-0824d011072a",
      privateKeyPEM:
        "-----BEGIN PRIVATE KEY-----\nprivate-\(tag)-MIGHAgEAMBMGByqGSM49AgEGCCqGSM49\n-----END PRIVATE KEY-----\n",
      publicKeyPEM: "-----BEGIN PUBLIC KEY-----\npublic-\(tag)\n-----END PUBLIC KEY-----\n",
      publicKeyFingerprint: "sha256:" + Hex.encode(SHA256.hash(tag).prefix(8)), setMs: setMs)
  }

  /// In-App Purchase keys: set, replace, read back per app, info on the app, unknown app
  static func inAppPurchaseKeys(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    let first = Self.inAppPurchaseKey("first", setMs: 10)
    await expectStoreError(.notFound) { try await store.inAppPurchaseKey(appId: "zz") }
    await expectStoreError(.notFound) { try await store.setInAppPurchaseKey(appId: "zz", key: first) }
    #expect(try await store.inAppPurchaseKey(appId: "a1") == nil)
    #expect(try await store.app(id: "a1").inAppPurchaseKey == nil)

    try await store.setInAppPurchaseKey(appId: "a1", key: first)
    #expect(try await store.inAppPurchaseKey(appId: "a1") == first)
    #expect(try await store.app(id: "a1").inAppPurchaseKey == first.info)
    #expect(try await store.app(tenantId: "t1", appId: "a1").inAppPurchaseKey == first.info)
    let listed = try await store.listApps(tenantId: "t1", page: PageRequest()).items
    #expect(listed.map(\.inAppPurchaseKey) == [first.info, nil])
    // Another app's key is never returned.
    #expect(try await store.inAppPurchaseKey(appId: "a2") == nil)
    #expect(try await store.app(id: "a2").inAppPurchaseKey == nil)

    // Setting again replaces the key; other apps keep theirs.
    let second = Self.inAppPurchaseKey("second", setMs: 20)
    let other = Self.inAppPurchaseKey("other", setMs: 30)
    try await store.setInAppPurchaseKey(appId: "a2", key: other)
    try await store.setInAppPurchaseKey(appId: "a1", key: second)
    #expect(try await store.inAppPurchaseKey(appId: "a1") == second)
    #expect(try await store.app(id: "a1").inAppPurchaseKey == second.info)
    #expect(try await store.inAppPurchaseKey(appId: "a2") == other)
    #expect(try await store.app(id: "a2").inAppPurchaseKey == other.info)
    // The shared secret and the policy are independent of the key.
    _ = try await store.setSharedSecret(appId: "a1", secret: "s", atMs: 40, previousValidUntilMs: 0)
    let app = try await store.setPolicy(appId: "a1", policy: .default)
    #expect(app.inAppPurchaseKey == second.info)
    #expect(app.sharedSecretFingerprint == SecretFingerprint.of("s"))
  }
}
