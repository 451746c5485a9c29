import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The retention rules part of the Store contract (docs/architecture.md "Retention Messaging").
extension StoreContract {
  /// Retention rules: none at first, put and read back, replaced whole, per app, unknown app and
  /// bad payloads refused.
  static func retentionRules(_ store: any Store) async throws {
    let first = StoredRetentionRules(payload: [0x0A, 0x02, 0x41, 0x42], updatedMs: 100)
    await expectStoreError(.notFound) { try await store.putRetentionRules(appId: "a1", rules: first) }
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    #expect(try await store.retentionRules(appId: "a1") == nil)
    try await store.putRetentionRules(appId: "a1", rules: first)
    #expect(try await store.retentionRules(appId: "a1") == first)
    #expect(try await store.retentionRules(appId: "a2") == nil)
    // Replaced whole, bytes as given (zeros and high bytes included).
    let second = StoredRetentionRules(payload: [0x00, 0xFF, 0x80, 0x00], updatedMs: 200)
    try await store.putRetentionRules(appId: "a1", rules: second)
    #expect(try await store.retentionRules(appId: "a1") == second)
    #expect(try await store.retentionRules(appId: "unknown") == nil)
    await expectStoreError(.invalidArgument) {
      try await store.putRetentionRules(appId: "a1", rules: StoredRetentionRules(payload: [], updatedMs: 1))
    }
    await expectStoreError(.invalidArgument) {
      try await store.putRetentionRules(
        appId: "a1",
        rules: StoredRetentionRules(payload: Array(repeating: 1, count: StoreValidation.maxRetentionRulesBytes + 1), updatedMs: 1))
    }
    #expect(try await store.retentionRules(appId: "a1") == second)
  }
}
