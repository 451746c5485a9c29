import SubscriptionDomain
import SubscriptionStorage
import Testing

extension StoreContract {
  /// deleting products: gone from the catalog and from entitlements, transactions kept
  static func productDeletion(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let monthly = Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")
    let yearly = Product(productId: "yearly", type: .autoRenewable, subscriptionGroupId: "g1")
    let lifetime = Product(productId: "lifetime", type: .nonConsumable)
    try await store.putProducts(appId: "a1", products: [monthly, yearly, lifetime])
    let premium = EntitlementDefinition(entitlementId: "premium", productIds: ["monthly", "yearly", "lifetime"])
    let adsFree = EntitlementDefinition(entitlementId: "ads_free", productIds: ["lifetime"])
    try await store.putEntitlements(appId: "a1", entitlements: [premium, adsFree])
    let user = Fixture.user("u1")
    _ = try await store.ingest([
      UserPurchases(user: user, transactions: [Fixture.transaction("t1", product: "monthly", purchase: 10, expires: 20)])
    ], atMs: Fixture.now)

    #expect(try await store.deleteProducts(appId: "a1", productIds: ["nope", "lifetime", "monthly", "lifetime"]) == ["lifetime", "monthly"])
    #expect(try await store.products(appId: "a1") == [yearly])
    #expect(
      try await store.entitlements(appId: "a1") == [
        EntitlementDefinition(entitlementId: "ads_free", productIds: []),
        EntitlementDefinition(entitlementId: "premium", productIds: ["yearly"]),
      ])
    // History keeps the transactions.
    #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["t1"])
    // A deleted product can no longer be named by an entitlement.
    await expectStoreError(.invalidArgument) {
      try await store.putEntitlements(appId: "a1", entitlements: [premium])
    }
    #expect(try await store.deleteProducts(appId: "a1", productIds: ["monthly"]) == [])
    await expectStoreError(.notFound) { try await store.deleteProducts(appId: "zz", productIds: ["x"]) }
  }

  /// erasing users: every environment, every kind of data, others untouched, a fresh start after
  static func userErasure(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    try await ErasureFixture.populate(store)
    let erased = try await store.deleteUsers(appId: "a1", userIds: ErasureFixture.erasedUserIds + ["never-seen"])
    #expect(erased == UserErasure(histories: 4, transactions: 7, renewalInfos: 2, receipts: 2))
    #expect(
      try await store.ownershipTransfers(
        appId: "a1", environment: .production, originalTransactionId: ErasureFixture.transferredOriginalTransactionId
      ).isEmpty)
    for environment in Environment.allCases {
      #expect(
        try await store.ownershipGaps(appId: "a1", environment: environment, userIds: ErasureFixture.erasedUserIds).isEmpty)
      for id in ErasureFixture.erasedUserIds {
        let user = Fixture.user(id, environment: environment)
        #expect(try await store.history(of: user) == UserHistory(user: user))
        #expect(try await store.receipt(of: user) == nil)
        #expect(try await store.transactionHistorySync(of: user) == nil)
        #expect(try await store.transactions(of: user, page: PageRequest(size: 10)).items.isEmpty)
      }
      #expect(
        try await store.users(appId: "a1", environment: environment, originalTransactionId: ErasureFixture.originalTransactionId).isEmpty)
      #expect(!(try await store.listUsers(appId: "a1", environment: environment, page: PageRequest(size: 100)).items.contains(ErasureFixture.userId)))
    }
    try await ErasureFixture.expectOthersKept(store)
    #expect(try await store.dueReceipts(atMs: .max, limit: 100).map(\.user.userId) == [ErasureFixture.otherUserId])

    // Erasing again erases nothing; the same id starts afresh, with only what comes after.
    #expect(try await store.deleteUsers(appId: "a1", userIds: [ErasureFixture.userId]) == UserErasure())
    let user = Fixture.user(ErasureFixture.userId)
    _ = try await store.ingest([UserPurchases(user: user, transactions: [Fixture.transaction("new1", purchase: 500, expires: 600)])], atMs: Fixture.now)
    #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["new1"])
    #expect(try await store.renewalInfoCount(of: user) == 0)
    await expectStoreError(.notFound) { try await store.deleteUsers(appId: "zz", userIds: ["u"]) }
    await expectStoreError(.invalidArgument) { try await store.deleteUsers(appId: "a1", userIds: [""]) }
  }
}

extension StoreContract {
  /// A background job (a receipt refresh, a Server API sync, a notification routed to the users
  /// holding its original transaction) reads a user, waits on Apple, and writes with
  /// `onlyIfStored`: if the user was erased in between, the write leaves them erased. App a1
  /// shares purchases, a2 transfers them (the stores' two write paths).
  static func erasureNotUndone(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    _ = try await store.setPolicy(appId: "a2", policy: EligibilityPolicy(purchaseSharing: .transfer))
    for appId in ["a1", "a2"] {
      let (kept, gone) = (Fixture.user("kept", app: appId), Fixture.user("gone", app: appId))
      func t(_ id: String, _ purchase: Int64) -> Transaction {
        Fixture.transaction("\(id)-\(appId)", purchase: purchase, expires: purchase + 100)
      }
      _ = try await store.ingest(
        [UserPurchases(user: kept, transactions: [t("k1", 100)]), UserPurchases(user: gone, transactions: [t("g1", 100)])],
        atMs: Fixture.now)
      _ = try await store.deleteUsers(appId: appId, userIds: ["gone"])

      let written = try await store.ingest(
        [
          UserPurchases(user: gone, transactions: [t("g2", 200)], renewalInfos: [Fixture.renewal("g1-\(appId)")], onlyIfStored: true),
          UserPurchases(user: kept, transactions: [t("k2", 200)], onlyIfStored: true),
          UserPurchases(user: Fixture.user("never", app: appId), transactions: [t("n1", 200)], onlyIfStored: true),
        ], atMs: Fixture.now)
      #expect(Set(written.erasedMeanwhile) == [gone, Fixture.user("never", app: appId)], "\(appId)")
      #expect(written.transactionsWritten == 1, "\(appId)")
      #expect(try await store.history(of: kept).transactions.map(\.transactionId) == ["k1-\(appId)", "k2-\(appId)"])
      #expect(try await store.history(of: gone) == UserHistory(user: gone))
      #expect(try await store.users(appId: appId, environment: .production, originalTransactionId: "g2-\(appId)").isEmpty)
      let listed = try await store.listUsers(appId: appId, environment: .production, page: PageRequest(size: 100)).items
      #expect(listed == ["kept"], "\(appId)")

      // A notification's routed write: recorded once, nothing written for the erased user.
      let notified = try await store.applyNotification(
        appId: appId, notificationId: "n-\(appId)", receivedMs: Fixture.now,
        updates: [UserPurchases(user: gone, transactions: [t("g3", 300)], onlyIfStored: true)])
      #expect(notified?.erasedMeanwhile == [gone])
      #expect(try await store.isNotificationProcessed(appId: appId, notificationId: "n-\(appId)"))
      #expect(try await store.history(of: gone) == UserHistory(user: gone))

      // The user's own submission starts afresh, with only what comes after.
      _ = try await store.ingest([UserPurchases(user: gone, transactions: [t("g4", 400)], submittedMs: Fixture.now)], atMs: Fixture.now)
      #expect(try await store.history(of: gone).transactions.map(\.transactionId) == ["g4-\(appId)"])
    }
  }
}

extension Store {
  fileprivate func renewalInfoCount(of user: UserKey) async throws -> Int {
    try await history(of: user).renewalInfos.count
  }
}

/// The data an erasure must remove, in every table a store has: for ``userId`` in app a1, in both
/// environments, transactions, renewal infos, a renewal-info removal by a snapshot, receipts, a
/// Server API sync state; for ``unclaimedUserId`` (what a notification stored before the user
/// submitted the subscription) a transaction; and data that must stay: another user of a1 and the
/// same user id in app a2. The erased data's ids all contain ``marker``, so a test can look for it
/// in every row of every table.
public enum ErasureFixture {
  /// Contained in every id and receipt of the erased data, and in nothing else.
  public static let marker = "erasemexq"
  /// The user to erase.
  public static let userId = "user-\(marker)"
  /// The pseudo-user holding notification data of the user's subscription.
  public static let unclaimedUserId = "apple:otx-\(marker)-1"
  /// The user's subscription.
  public static let originalTransactionId = "otx-\(marker)-1"
  /// Another user of the same app, kept.
  public static let otherUserId = "other-user"
  /// A second user to erase: under TRANSFER it took ``transferredOriginalTransactionId`` from
  /// ``userId`` (so both have ownership gaps and a transfer names both).
  public static let secondUserId = "second-\(marker)"
  /// The subscription that changed owner.
  public static let transferredOriginalTransactionId = "otx-\(marker)-xfer"
  /// Every user id an erasure test erases.
  public static let erasedUserIds = [userId, secondUserId, unclaimedUserId]

  /// Stores the data (apps a1 and a2 must exist).
  public static func populate(_ store: any Store) async throws {
    let user = Fixture.user(userId)
    let sandbox = Fixture.user(userId, environment: .sandbox)
    _ = try await store.ingest([
      UserPurchases(
        user: user,
        transactions: [
          Fixture.transaction(originalTransactionId, purchase: 100, expires: 200),
          Fixture.transaction("tx-\(marker)-2", original: originalTransactionId, purchase: 200, expires: 300),
          Fixture.transaction("otx-\(marker)-3", purchase: 150, expires: 250),
        ],
        renewalInfos: [Fixture.renewal(originalTransactionId, signed: 300), Fixture.renewal("otx-\(marker)-3", signed: 100)]),
      UserPurchases(
        user: sandbox, transactions: [Fixture.transaction("otx-\(marker)-sb", purchase: 100, expires: 200)],
        renewalInfos: [Fixture.renewal("otx-\(marker)-sb", signed: 150)]),
      UserPurchases(
        user: Fixture.user(unclaimedUserId),
        transactions: [Fixture.transaction("tx-\(marker)-apple", original: originalTransactionId, purchase: 300, expires: 400)]),
      UserPurchases(user: Fixture.user(otherUserId), transactions: [Fixture.transaction("keep-1", purchase: 100, expires: 200)]),
      UserPurchases(user: Fixture.user(userId, app: "a2"), transactions: [Fixture.transaction("keep-a2", purchase: 100, expires: 200)]),
    ], atMs: Fixture.now)
    // A snapshot that lacks the third subscription's renewal info records its removal.
    _ = try await store.ingest([
      UserPurchases(
        user: user, transactions: [Fixture.transaction("otx-\(marker)-3", purchase: 150, expires: 250)],
        renewalInfos: [],
        renewalInfoSnapshot: RenewalInfoSnapshot(originalTransactionIds: ["otx-\(marker)-3"], asOfDate: 400)),
    ], atMs: Fixture.now)
    for u in [user, sandbox, Fixture.user(otherUserId)] {
      try await store.saveReceipt(
        StoredReceipt(user: u, receiptData: u.userId == otherUserId ? "keep-receipt" : "receipt-\(marker)", nextDueMs: 1_000))
    }
    try await store.saveTransactionHistorySync(
      TransactionHistorySyncState(user: user, transactionId: originalTransactionId, revision: "rev-\(marker)", lastSyncMs: 500))
    // Purchase sharing: the user restores a subscription, then the second user restores it under
    // TRANSFER (the policy goes back to the default afterwards; the rows stay).
    _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .transfer))
    for (n, id) in [userId, secondUserId].enumerated() {
      _ = try await store.ingest([
        UserPurchases(
          user: Fixture.user(id),
          transactions: [Fixture.transaction(transferredOriginalTransactionId, purchase: 100, expires: 200)],
          submittedMs: 600 + Int64(n) * 100)
      ], atMs: Fixture.now)
    }
    _ = try await store.setPolicy(appId: "a1", policy: .default)
  }

  /// Expects the data that must stay.
  public static func expectOthersKept(_ store: any Store) async throws {
    #expect(try await store.history(of: Fixture.user(otherUserId)).transactions.map(\.transactionId) == ["keep-1"])
    #expect(try await store.history(of: Fixture.user(userId, app: "a2")).transactions.map(\.transactionId) == ["keep-a2"])
    #expect(try await store.receipt(of: Fixture.user(otherUserId))?.receiptData == "keep-receipt")
  }
}
