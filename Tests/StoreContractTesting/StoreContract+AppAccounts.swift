import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The Apple Account part of the Store contract (docs/architecture.md rule 24).
extension StoreContract {
  /// Apple Accounts: save, replace and read back per user and environment, several users in one
  /// read, unknown app and bad input refused, erased with the user
  static func appAccounts(_ store: any Store) async throws {
    let accounts: any AppAccountStore = store
    let first = AppAccountLink(
      user: Fixture.user("u1"), appTransactionId: "704289572311810221", originalPurchaseDate: 1_600_000_000_000,
      originalApplicationVersion: "1.4", linkedMs: 100)
    await expectStoreError(.notFound) { try await accounts.saveAppAccount(first) }
    try await Fixture.seed(store)
    #expect(try await accounts.appAccount(of: Fixture.user("u1")) == nil)
    try await accounts.saveAppAccount(first)
    #expect(try await accounts.appAccount(of: Fixture.user("u1")) == first)
    // A later submission replaces it; absent optionals stay absent.
    var later = AppAccountLink(user: Fixture.user("u1"), appTransactionId: "704289572311810222", linkedMs: 200)
    try await accounts.saveAppAccount(later)
    #expect(try await accounts.appAccount(of: Fixture.user("u1")) == later)
    later.historyVerifiedMs = 210
    try await accounts.saveAppAccount(later)
    #expect(try await accounts.appAccount(of: Fixture.user("u1"))?.historyVerifiedMs == 210)
    // Per environment and user; several users in one read, the unknown ones absent.
    let sandbox = AppAccountLink(user: Fixture.user("u2", environment: .sandbox), appTransactionId: "9", linkedMs: 5)
    try await accounts.saveAppAccount(sandbox)
    #expect(try await accounts.appAccount(of: Fixture.user("u1", environment: .sandbox)) == nil)
    #expect(try await accounts.appAccount(of: Fixture.user("u2")) == nil)
    let u3 = AppAccountLink(user: Fixture.user("u3"), appTransactionId: "704289572311810223", linkedMs: 300)
    try await accounts.saveAppAccount(u3)
    let read = try await accounts.appAccounts(appId: "a1", environment: .production, userIds: ["u1", "u3", "nobody"])
    #expect(read == ["u1": later, "u3": u3])
    #expect(try await accounts.appAccounts(appId: "a1", environment: .production, userIds: []).isEmpty)
    // Bad input.
    await expectStoreError(.invalidArgument) {
      try await accounts.saveAppAccount(AppAccountLink(user: Fixture.user("u4"), appTransactionId: "", linkedMs: 1))
    }
    await expectStoreError(.invalidArgument) {
      try await accounts.saveAppAccount(AppAccountLink(user: Fixture.user(""), appTransactionId: "1", linkedMs: 1))
    }
    await expectStoreError(.invalidArgument) {
      try await accounts.saveAppAccount(
        AppAccountLink(user: Fixture.user("u4"), appTransactionId: String(repeating: "1", count: 65), linkedMs: 1))
    }
    // Erasing a user removes their links in every environment, and only theirs.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
    #expect(try await accounts.appAccount(of: Fixture.user("u1")) == nil)
    #expect(try await accounts.appAccount(of: Fixture.user("u2", environment: .sandbox)) == nil)
    #expect(try await accounts.appAccount(of: Fixture.user("u3")) == u3)
  }
}
