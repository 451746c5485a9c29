import Foundation
import SubscriptionDomain
import SubscriptionStorage
import Testing

/// Expects `body` to throw a StoreError with `code`.
public func expectStoreError<T>(
  _ code: StoreError.Code, sourceLocation: SourceLocation = #_sourceLocation,
  _ body: () async throws -> T
) async {
  do {
    _ = try await body()
    Issue.record("expected StoreError \(code), got success", sourceLocation: sourceLocation)
  } catch let error as StoreError {
    #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
  } catch {
    Issue.record("expected StoreError \(code), got \(error)", sourceLocation: sourceLocation)
  }
}

/// Reads every page of a paged list.
public func collectPages<T>(size: Int, _ read: (PageRequest) async throws -> Page<T>) async throws -> [[T]]
{
  var pages: [[T]] = []
  var cursor: String?
  repeat {
    let page = try await read(PageRequest(size: size, cursor: cursor))
    pages.append(page.items)
    cursor = page.nextCursor
    if pages.count > 100 {
      Issue.record("paging does not end")
      break
    }
  } while cursor != nil
  return pages
}
/// The behaviour every Store implementation must have. A test target runs it against its own stores
/// with one parameterized test:
///
/// ```swift
/// @Test(arguments: StoreContract.Case.allCases)
/// func contract(_ test: StoreContract.Case) async throws {
///   try await withMyStore { store in try await StoreContract.run(test, store) }
/// }
/// ```
public enum StoreContract {
  /// One behaviour of the contract; each runs against a fresh, empty store.
  public enum Case: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// tenants: create, read, conflict, not found, disable
    case tenants
    /// tenants page in id order without gaps or repeats
    case tenantPaging
    /// apps: tenant required, unique id and bundle per tenant, tenant isolation
    case apps
    /// policy is stored and returned; the Apple ID and display name can change
    case policy
    /// shared secrets: current, previous with overlap, fingerprint on the app
    case sharedSecrets
    /// products: upsert by id, sorted catalog, unknown app
    case products
    /// named entitlements: upsert by id, checked against the catalog, sorted, deleted by id
    case entitlements
    /// deleting products: gone from the catalog and from entitlements, transactions kept
    case productDeletion
    /// erasing users: every environment, every kind of data, others untouched, a fresh start after
    case userErasure
    /// a background write (`onlyIfStored`) never brings back an erased user; a submission starts afresh
    case erasureNotUndone
    /// API keys: lookup by hash, uniqueness, roles, listing, revocation, last use
    case apiKeys
    /// ingest: many users in one call, history sorted by purchase, upsert by transaction id
    case ingestAndHistory
    /// newest signed data wins; older signed data is ignored
    case newestWins
    /// a revocation is never lost: a copy without it replaces it only when newer on Apple's clock
    case revocationWins
    /// a winning copy without a price keeps the price another copy carried (StoreKit 2, then verifyReceipt)
    case mergedPrice
    /// field by field: a newer copy without a revocation type, app account token or price keeps the older copy's (V2 REFUND, then V1 REFUND and a receipt)
    case mergedFields
    /// a renewal-info snapshot removes what it lacks unless newer, and the removal is remembered
    case renewalInfoSnapshot
    /// any permutation of generated copies from five sources stores one history and one evaluation
    case copyPermutations
    /// an ingest naming an unknown app stores nothing of the batch
    case ingestIsAtomic
    /// empty ids in purchase data are refused before anything is stored
    case ingestValidation
    /// environments and apps keep separate histories
    case separation
    /// notifications apply exactly once
    case notificationDedupe
    /// old processed notification ids can be pruned
    case pruneNotifications
    /// original transaction id routes to every user holding it
    case routing
    /// histories of many users come back in request order
    case batchHistories
    /// transaction history, renewal infos and users page in order
    case historyPaging
    /// audit log: append, per tenant, paged oldest first
    case audit
    /// concurrent writers and readers all succeed
    case concurrency
    /// receipts: save, read, replace; unknown app and bad input refused
    case receiptsSaveAndRead
    /// due receipts: at or before the time, most overdue first, limited, none without a due time
    case dueReceipts
    /// marking verified and rescheduling change the schedule; unknown receipts are not found
    case receiptSchedule
    /// In-App Purchase keys: set, replace, read back per app, info on the app, unknown app
    case inAppPurchaseKeys
    /// Server API sync state: save, read, replace per user; unknown app and bad input refused
    case historySyncState
    /// reconciliation leases: one owner at a time, taken over after expiry, completion records the time
    case reconciliationLease
    /// claiming due receipts leases them: other claims skip them until the lease expires or the outcome is recorded
    case claimDueReceipts
    /// concurrent claims never hand out the same receipt twice, and together take every due receipt
    case concurrentClaims
    /// purchase sharing SHARE: every submitter has it, no ownership rows, the app is not tracked
    case purchaseSharingShare
    /// purchase sharing TRANSFER: the latest submitter has it from its instant; the history of owners is kept
    case purchaseSharingTransfer
    /// purchase sharing KEEP_FIRST: a later submitter is refused that original transaction only, and stores none of it
    case purchaseSharingKeepFirst
    /// purchase sharing TRANSFER never moves an ASSIGNED original transaction: the first submitter keeps it
    case purchaseSharingAssigned
    /// purchase sharing: a policy change affects later submissions only, and the app stays tracked
    case purchaseSharingPolicyChange
    /// purchase sharing events: a transfer gives both users OWNERSHIP_TRANSFERRED in its commit, with deterministic ids; events follow what each user owns
    case purchaseSharingEvents
    /// purchase sharing TRANSFER_IF_NO_ACTIVE: the latest submitter takes it only when no owner is entitled by it at that instant
    case purchaseSharingTransferIfNoActive
    /// purchase sharing: the sandbox override applies to sandbox data only
    case purchaseSharingSandbox
    /// summaries: written with each write at its time for the app's catalog and policy, read for many users at once, deleted by erasure
    case summaryWrites
    /// summaries: a read path's rewrite is stored only while no write came since its read, never over a newer write's nor for an erased user
    case summaryRewriteRace
    /// summaries: after random writes every stored summary answers as the history at every instant of its window
    case summaryProperty
    /// Apple Accounts (rule 24).
    case appAccounts
    /// Kept V2 notifications and the users of an Apple Account (rule 25).
    case keptNotifications
    case retentionRules
    /// Refund requests to answer (rule 27).
    case consumptionRequests
    /// Set App Account Token writes owed to Apple after transfers (rule 26).
    case appAccountTokenWrites
    /// Kept notifications listed by received time and pruned by age (rule 25).
    case keptNotificationRetention

    /// What the case checks, as test output shows it.
    public var testDescription: String {
      switch self {
      case .tenants: "tenants: create, read, conflict, not found, disable"
      case .tenantPaging: "tenants page in id order without gaps or repeats"
      case .apps: "apps: tenant required, unique id and bundle per tenant, tenant isolation"
      case .policy: "policy is stored and returned; the Apple ID and display name can change"
      case .sharedSecrets: "shared secrets: current, previous with overlap, fingerprint on the app"
      case .products: "products: upsert by id, sorted catalog, unknown app"
      case .entitlements: "named entitlements: upsert by id, checked against the catalog, sorted, deleted by id"
      case .productDeletion: "deleting products: gone from the catalog and from entitlements, transactions kept"
      case .userErasure: "erasing users: every environment, every kind of data, others untouched, a fresh start after"
      case .erasureNotUndone: "a background write (`onlyIfStored`) never brings back an erased user; a submission starts afresh"
      case .apiKeys: "API keys: lookup by hash, uniqueness, roles, listing, revocation, last use"
      case .ingestAndHistory: "ingest: many users in one call, history sorted by purchase, upsert by transaction id"
      case .newestWins: "newest signed data wins; older signed data is ignored"
      case .revocationWins: "a revocation is never lost: a copy without it replaces it only when newer on Apple's clock"
      case .mergedPrice: "a winning copy without a price keeps the price another copy carried (StoreKit 2, then verifyReceipt)"
      case .mergedFields: "field by field: a newer copy without a revocation type, app account token or price keeps the older copy's (V2 REFUND, then V1 REFUND and a receipt)"
      case .renewalInfoSnapshot: "a renewal-info snapshot removes what it lacks unless newer, and the removal is remembered"
      case .copyPermutations: "any permutation of generated copies from five sources stores one history and one evaluation"
      case .ingestIsAtomic: "an ingest naming an unknown app stores nothing of the batch"
      case .ingestValidation: "empty ids in purchase data are refused before anything is stored"
      case .separation: "environments and apps keep separate histories"
      case .notificationDedupe: "notifications apply exactly once"
      case .pruneNotifications: "old processed notification ids can be pruned"
      case .routing: "original transaction id routes to every user holding it"
      case .batchHistories: "histories of many users come back in request order"
      case .historyPaging: "transaction history, renewal infos and users page in order"
      case .audit: "audit log: append, per tenant, paged oldest first"
      case .concurrency: "concurrent writers and readers all succeed"
      case .receiptsSaveAndRead: "receipts: save, read, replace; unknown app and bad input refused"
      case .dueReceipts: "due receipts: at or before the time, most overdue first, limited, none without a due time"
      case .receiptSchedule: "marking verified and rescheduling change the schedule; unknown receipts are not found"
      case .inAppPurchaseKeys: "In-App Purchase keys: set, replace, read back per app, info on the app, unknown app"
      case .historySyncState: "Server API sync state: save, read, replace per user; unknown app and bad input refused"
      case .appAccounts: "Apple Accounts: save, replace and read per user and environment, batch reads, bad input refused, erased with the user"
      case .keptNotifications: "kept notifications: once per notificationUUID with their events, in order, paged, bad input refused; an Apple Account's users"
      case .retentionRules: "retention rules: none at first, put and read back per app, replaced whole, unknown app and bad payloads refused"
      case .keptNotificationRetention: "kept notifications: listed by received time, filtered by type and time range, paged, per app; pruned oldest first in bounded batches"
      case .appAccountTokenWrites: "app account token writes: written by a transfer's commit, replaced by a later transfer, claimed under a lease, rescheduled, finished, released when replaced, given up, erased with their user"
      case .consumptionRequests: "refund requests: recorded once per notification, claimed when due under a lease, rescheduled, closed with their events in one commit"
      case .reconciliationLease: "reconciliation leases: one owner at a time, taken over after expiry, completion records the time"
      case .claimDueReceipts: "claiming due receipts leases them: other claims skip them until the lease expires or the outcome is recorded"
      case .concurrentClaims: "concurrent claims never hand out the same receipt twice, and together take every due receipt"
      case .purchaseSharingShare: "purchase sharing SHARE: every submitter has it, no ownership rows, the app is not tracked"
      case .purchaseSharingTransfer: "purchase sharing TRANSFER: the latest submitter has it from its instant; the history of owners is kept"
      case .purchaseSharingKeepFirst: "purchase sharing KEEP_FIRST: a later submitter is refused that original transaction only, and stores none of it"
      case .purchaseSharingAssigned: "purchase sharing TRANSFER never moves an ASSIGNED original transaction: the first submitter keeps it"
      case .purchaseSharingPolicyChange: "purchase sharing: a policy change affects later submissions only, and the app stays tracked"
      case .purchaseSharingEvents: "purchase sharing events: a transfer gives both users OWNERSHIP_TRANSFERRED in its commit, with deterministic ids; events follow what each user owns"
      case .purchaseSharingTransferIfNoActive: "purchase sharing TRANSFER_IF_NO_ACTIVE: the latest submitter takes it only when no owner is entitled by it at that instant; otherwise refused as KEEP_FIRST"
      case .purchaseSharingSandbox: "purchase sharing: the sandbox override applies to sandbox data only (production transfers while sandbox shares); unset, the sandbox follows production"
      case .summaryWrites: "summaries: written with each write at its time for the app's catalog and policy, read for many users at once, deleted by erasure"
      case .summaryRewriteRace: "summaries: a read path's rewrite is stored only while no write came since its read, never over a newer write's nor for an erased user"
      case .summaryProperty: "summaries: after random writes every stored summary answers as the history at every instant of its window"
      }
    }
  }

  /// Runs one case against `store`, which must be fresh and empty.
  public static func run(_ test: Case, _ store: any Store) async throws {
    switch test {
    case .tenants: try await tenants(store)
    case .tenantPaging: try await tenantPaging(store)
    case .apps: try await apps(store)
    case .policy: try await policy(store)
    case .sharedSecrets: try await sharedSecrets(store)
    case .products: try await products(store)
    case .entitlements: try await entitlements(store)
    case .productDeletion: try await productDeletion(store)
    case .userErasure: try await userErasure(store)
    case .erasureNotUndone: try await erasureNotUndone(store)
    case .apiKeys: try await apiKeys(store)
    case .ingestAndHistory: try await ingestAndHistory(store)
    case .newestWins: try await newestWins(store)
    case .revocationWins: try await revocationWins(store)
    case .mergedPrice: try await mergedPrice(store)
    case .mergedFields: try await mergedFields(store)
    case .renewalInfoSnapshot: try await renewalInfoSnapshot(store)
    case .copyPermutations: try await copyPermutations(store)
    case .ingestIsAtomic: try await ingestIsAtomic(store)
    case .ingestValidation: try await ingestValidation(store)
    case .separation: try await separation(store)
    case .notificationDedupe: try await notificationDedupe(store)
    case .pruneNotifications: try await pruneNotifications(store)
    case .routing: try await routing(store)
    case .batchHistories: try await batchHistories(store)
    case .historyPaging: try await historyPaging(store)
    case .audit: try await audit(store)
    case .concurrency: try await concurrency(store)
    case .receiptsSaveAndRead: try await receiptsSaveAndRead(store)
    case .dueReceipts: try await dueReceipts(store)
    case .receiptSchedule: try await receiptSchedule(store)
    case .inAppPurchaseKeys: try await inAppPurchaseKeys(store)
    case .historySyncState: try await historySyncState(store)
    case .appAccounts: try await appAccounts(store)
    case .keptNotifications: try await keptNotifications(store)
    case .retentionRules: try await retentionRules(store)
    case .consumptionRequests: try await consumptionRequests(store)
    case .appAccountTokenWrites: try await appAccountTokenWrites(store)
    case .keptNotificationRetention: try await keptNotificationRetention(store)
    case .reconciliationLease: try await reconciliationLease(store)
    case .claimDueReceipts: try await claimDueReceipts(store)
    case .concurrentClaims: try await concurrentClaims(store)
    case .purchaseSharingShare: try await purchaseSharingShare(store)
    case .purchaseSharingTransfer: try await purchaseSharingTransfer(store)
    case .purchaseSharingKeepFirst: try await purchaseSharingKeepFirst(store)
    case .purchaseSharingAssigned: try await purchaseSharingAssigned(store)
    case .purchaseSharingPolicyChange: try await purchaseSharingPolicyChange(store)
    case .purchaseSharingEvents: try await purchaseSharingEvents(store)
    case .purchaseSharingTransferIfNoActive: try await purchaseSharingTransferIfNoActive(store)
    case .purchaseSharingSandbox: try await purchaseSharingSandbox(store)
    case .summaryWrites: try await summaryWrites(store)
    case .summaryRewriteRace: try await summaryRewriteRace(store)
    case .summaryProperty: try await summaryProperty(store)
    }
  }
  /// tenants: create, read, conflict, not found, disable
  static func tenants(_ store: any Store) async throws {
    try await store.createTenant(Fixture.tenant("t1"))
    #expect(try await store.tenant(id: "t1") == Fixture.tenant("t1"))
    await expectStoreError(.alreadyExists) { try await store.createTenant(Fixture.tenant("t1")) }
    await expectStoreError(.notFound) { try await store.tenant(id: "nope") }
    let disabled = try await store.setTenantDisabled(id: "t1", disabled: true)
    #expect(disabled.disabled)
    #expect(try await store.tenant(id: "t1").disabled)
    await expectStoreError(.notFound) {
      try await store.setTenantDisabled(id: "nope", disabled: true)
    }
  }

  /// tenants page in id order without gaps or repeats
  static func tenantPaging(_ store: any Store) async throws {
    for i in [3, 1, 5, 2, 4] { try await store.createTenant(Fixture.tenant("t\(i)")) }
    let pages = try await collectPages(size: 2) { try await store.listTenants(page: $0) }
    #expect(pages.map { $0.map(\.tenantId) } == [["t1", "t2"], ["t3", "t4"], ["t5"]])
  }

  /// apps: tenant required, unique id and bundle per tenant, tenant isolation
  static func apps(_ store: any Store) async throws {
    await expectStoreError(.notFound) { try await store.createApp(Fixture.app("a1")) }
    try await store.createTenant(Fixture.tenant("t1"))
    try await store.createTenant(Fixture.tenant("t2"))
    try await store.createApp(Fixture.app("a1"))
    #expect(try await store.app(id: "a1") == Fixture.app("a1"))
    #expect(try await store.app(tenantId: "t1", appId: "a1") == Fixture.app("a1"))
    await expectStoreError(.notFound) { try await store.app(tenantId: "t2", appId: "a1") }
    await expectStoreError(.notFound) { try await store.app(id: "zz") }
    await expectStoreError(.alreadyExists) {
      try await store.createApp(Fixture.app("a1", bundle: "other"))
    }
    await expectStoreError(.alreadyExists) {
      try await store.createApp(Fixture.app("a2", bundle: "com.example.a1"))
    }
    // The same bundle id in another tenant is another app.
    try await store.createApp(Fixture.app("a3", tenant: "t2", bundle: "com.example.a1"))
    try await store.createApp(Fixture.app("a2"))
    var noAppleId = Fixture.app("a4")
    noAppleId.appleAppId = nil
    try await store.createApp(noAppleId)
    #expect(try await store.app(id: "a4").appleAppId == nil)
    let pages = try await collectPages(size: 2) {
      try await store.listApps(tenantId: "t1", page: $0)
    }
    #expect(pages.map { $0.map(\.appId) } == [["a1", "a2"], ["a4"]])
    #expect(
      try await store.listApps(tenantId: "t2", page: PageRequest()).items.map(\.appId) == ["a3"])
  }

  /// policy is stored and returned; the Apple ID and display name can change
  static func policy(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let policy = EligibilityPolicy(
      refundsBlockIntro: true, lapsedSubscribersGetIntro: false, billingRetryEntitled: true,
      promoScope: .app)
    #expect(try await store.app(id: "a1").policy == .default)  // read first: no stale cache after
    let updated = try await store.setPolicy(appId: "a1", policy: policy)
    #expect(updated.policy == policy)
    #expect(try await store.app(id: "a1").policy == policy)
    await expectStoreError(.notFound) { try await store.setPolicy(appId: "zz", policy: policy) }

    // The Apple ID and display name change; the bundle id and policy stay.
    let renamed = try await store.updateApp(appId: "a1", appleAppId: 987_654_321, displayName: "Renamed")
    #expect(renamed.appleAppId == 987_654_321 && renamed.displayName == "Renamed")
    let read = try await store.app(id: "a1")
    #expect(read.appleAppId == 987_654_321 && read.displayName == "Renamed")
    #expect(read.bundleId == Fixture.app("a1").bundleId && read.policy == policy)
    #expect(try await store.updateApp(appId: "a1", appleAppId: nil, displayName: "Renamed").appleAppId == nil)
    #expect(try await store.app(id: "a1").appleAppId == nil)
    await expectStoreError(.notFound) {
      try await store.updateApp(appId: "zz", appleAppId: 1, displayName: "x")
    }

    // The Small Business Program membership: false until set, kept by other updates.
    #expect(read.smallBusinessProgram == false)
    #expect(try await store.setSmallBusinessProgram(appId: "a1", true).smallBusinessProgram)
    #expect(try await store.app(id: "a1").smallBusinessProgram)
    #expect(try await store.updateApp(appId: "a1", appleAppId: nil, displayName: "Again").smallBusinessProgram)
    #expect(try await store.setSmallBusinessProgram(appId: "a1", false).smallBusinessProgram == false)
    #expect(try await store.app(id: "a1").smallBusinessProgram == false)
    await expectStoreError(.notFound) { try await store.setSmallBusinessProgram(appId: "zz", true) }
  }

  /// shared secrets: current, previous with overlap, fingerprint on the app
  static func sharedSecrets(_ store: any Store) async throws {
    try await Fixture.seed(store)
    #expect(try await store.sharedSecrets(appId: "a1") == nil)
    await expectStoreError(.notFound) {
      try await store.setSharedSecret(appId: "zz", secret: "s", atMs: 1, previousValidUntilMs: 2)
    }
    let f1 = try await store.setSharedSecret(
      appId: "a1", secret: "first-secret", atMs: 10, previousValidUntilMs: 0)
    #expect(f1 == SecretFingerprint.of("first-secret"))
    let one = try #require(try await store.sharedSecrets(appId: "a1"))
    #expect(
      one.current == SharedSecretVersion(secret: "first-secret", fingerprint: f1, setMs: 10))
    #expect(one.previous == nil)
    #expect(one.valid(at: 11).map(\.secret) == ["first-secret"])
    #expect(try await store.app(tenantId: "t1", appId: "a1").sharedSecretFingerprint == f1)
    #expect(try await store.app(id: "a1").sharedSecretFingerprint == f1)

    let f2 = try await store.setSharedSecret(
      appId: "a1", secret: "second-secret", atMs: 20, previousValidUntilMs: 100)
    let two = try #require(try await store.sharedSecrets(appId: "a1"))
    #expect(two.current.secret == "second-secret")
    #expect(two.previous?.secret == "first-secret")
    #expect(two.previousValidUntilMs == 100)
    #expect(two.valid(at: 99).map(\.secret) == ["second-secret", "first-secret"])
    #expect(two.valid(at: 100).map(\.secret) == ["second-secret"])
    #expect(try await store.app(id: "a1").sharedSecretFingerprint == f2)
  }

  /// products: upsert by id, sorted catalog, unknown app
  static func products(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let monthly = Product(
      productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1",
      duration: try ISO8601Duration(parsing: "P1M"), hasIntroductoryOffer: true,
      promotionalOfferIds: ["promo1"], winBackOfferIds: ["winback2", "winback1"])
    let lifetime = Product(productId: "lifetime", type: .nonConsumable)
    try await store.putProducts(appId: "a1", products: [monthly, lifetime])
    #expect(try await store.products(appId: "a1") == [lifetime, monthly])
    #expect(try await store.products(appId: "a1")[1].winBackOfferIds == ["winback2", "winback1"])
    var changed = monthly
    changed.hasIntroductoryOffer = false
    changed.winBackOfferIds = ["winback3"]
    try await store.putProducts(appId: "a1", products: [changed])
    #expect(try await store.products(appId: "a1") == [lifetime, changed])
    await expectStoreError(.notFound) {
      try await store.putProducts(appId: "zz", products: [monthly])
    }
    await expectStoreError(.notFound) { try await store.products(appId: "zz") }
  }

  /// named entitlements: upsert by id, checked against the catalog, sorted, deleted by id
  static func entitlements(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    try await store.putProducts(
      appId: "a1",
      products: [
        Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1"),
        Product(productId: "lifetime", type: .nonConsumable),
      ])
    #expect(try await store.entitlements(appId: "a1") == [])
    let premium = EntitlementDefinition(
      entitlementId: "premium", displayName: "Premium", productIds: ["monthly", "lifetime"])
    let adsFree = EntitlementDefinition(entitlementId: "ads_free", productIds: ["lifetime"])
    try await store.putEntitlements(appId: "a1", entitlements: [premium, adsFree])
    #expect(try await store.entitlements(appId: "a1") == [adsFree, premium])
    #expect(try await store.entitlements(appId: "a2") == [])

    // Upsert by id; the others stay.
    var changed = premium
    changed.productIds = ["lifetime"]
    changed.displayName = "Premium (lifetime only)"
    try await store.putEntitlements(appId: "a1", entitlements: [changed])
    #expect(try await store.entitlements(appId: "a1") == [adsFree, changed])

    // Checked against the app's own catalog, all or nothing.
    let other = EntitlementDefinition(entitlementId: "other", productIds: ["monthly"])
    let unknown = EntitlementDefinition(entitlementId: "x", productIds: ["monthly", "gone", "nope"])
    await expectStoreError(.invalidArgument) {
      try await store.putEntitlements(appId: "a1", entitlements: [other, unknown])
    }
    await expectStoreError(.invalidArgument) {
      try await store.putEntitlements(appId: "a2", entitlements: [other])
    }
    await expectStoreError(.invalidArgument) {
      try await store.putEntitlements(appId: "a1", entitlements: [other, other])
    }
    await expectStoreError(.invalidArgument) {
      try await store.putEntitlements(
        appId: "a1", entitlements: [EntitlementDefinition(entitlementId: "", productIds: [])])
    }
    #expect(try await store.entitlements(appId: "a1") == [adsFree, changed])
    #expect(try await store.entitlements(appId: "a2") == [])

    // Deleted by id: the ones that existed, in the order given, each once.
    #expect(
      try await store.deleteEntitlements(appId: "a1", entitlementIds: ["nope", "premium", "premium"])
        == ["premium"])
    #expect(try await store.entitlements(appId: "a1") == [adsFree])
    #expect(try await store.deleteEntitlements(appId: "a2", entitlementIds: ["ads_free"]) == [])
    #expect(try await store.entitlements(appId: "a1") == [adsFree])

    await expectStoreError(.notFound) { try await store.entitlements(appId: "zz") }
    await expectStoreError(.notFound) {
      try await store.putEntitlements(appId: "zz", entitlements: [adsFree])
    }
    await expectStoreError(.notFound) {
      try await store.deleteEntitlements(appId: "zz", entitlementIds: ["ads_free"])
    }
  }

  /// API keys: lookup by hash, uniqueness, roles, listing, revocation, last use
  static func apiKeys(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createTenant(Fixture.tenant("t2"))
    let admin = Fixture.key("k1")
    let reader = Fixture.key("k2", role: .read, apps: ["a1"])
    let other = Fixture.key("k3", tenant: "t2", role: .ingest)
    let op = Fixture.key("k0", tenant: nil, role: .operator)
    for k in [admin, reader, other, op] { try await store.createApiKey(k) }
    #expect(try await store.apiKey(hash: SHA256.hash("secret-of-k2")) == reader)
    #expect(try await store.apiKey(hash: SHA256.hash("secret-of-k0")) == op)
    #expect(try await store.apiKey(hash: SHA256.hash("unknown")) == nil)
    await expectStoreError(.alreadyExists) { try await store.createApiKey(admin) }
    var sameHash = Fixture.key("k9")
    sameHash.keyHash = admin.keyHash
    await expectStoreError(.alreadyExists) { try await store.createApiKey(sameHash) }
    await expectStoreError(.invalidArgument) {
      try await store.createApiKey(Fixture.key("k8", tenant: "t1", role: .operator))
    }
    await expectStoreError(.invalidArgument) {
      try await store.createApiKey(Fixture.key("k7", tenant: nil, role: .read))
    }
    await expectStoreError(.notFound) {
      try await store.createApiKey(Fixture.key("k6", tenant: "nope"))
    }

    #expect(
      try await store.listApiKeys(tenantId: "t1", page: PageRequest()).items == [admin, reader])
    #expect(try await store.listApiKeys(tenantId: nil, page: PageRequest()).items == [op])
    let pages = try await collectPages(size: 1) {
      try await store.listApiKeys(tenantId: "t1", page: $0)
    }
    #expect(pages.map { $0.map(\.keyId) } == [["k1"], ["k2"]])

    #expect(try await store.apiKey(hash: admin.keyHash)?.isRevoked == false)  // read before the change
    #expect(try await store.apiKey(hash: reader.keyHash)?.lastUsedMs == nil)
    await expectStoreError(.notFound) {
      try await store.revokeApiKey(tenantId: "t2", keyId: "k1", atMs: 5)
    }
    let revoked = try await store.revokeApiKey(tenantId: "t1", keyId: "k1", atMs: 5_000)
    #expect(revoked.revokedMs == 5_000)
    #expect(
      try await store.revokeApiKey(tenantId: "t1", keyId: "k1", atMs: 9_000).revokedMs == 5_000)
    #expect(try await store.apiKey(hash: admin.keyHash)?.isRevoked == true)

    try await store.touchApiKey(keyId: "k2", atMs: 7_000)
    #expect(try await store.apiKey(hash: reader.keyHash)?.lastUsedMs == 7_000)
  }

  /// ingest: many users in one call, history sorted by purchase, upsert by transaction id
  static func ingestAndHistory(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let t1 = Fixture.transaction("1000", purchase: 300, expires: 400)
    let t2 = Fixture.transaction(
      "999", original: "1000", purchase: 100, expires: 200, trial: true)
    let t3 = Fixture.transaction("2000", purchase: 50)
    let summary = try await store.ingest([
      UserPurchases(
        user: Fixture.user("u1"), transactions: [t1, t2], renewalInfos: [Fixture.renewal("1000")]),
      UserPurchases(user: Fixture.user("u2"), transactions: [t3]),
    ], atMs: Fixture.now)
    #expect(summary.transactionsWritten == 3 && summary.renewalInfosWritten == 1)
    let h1 = try await store.history(of: Fixture.user("u1"))
    #expect(h1.transactions == [t2, t1])
    #expect(h1.renewalInfos == [Fixture.renewal("1000")])
    #expect(try await store.history(of: Fixture.user("u2")).transactions == [t3])
    #expect(try await store.history(of: Fixture.user("nobody")).transactions.isEmpty)

    // The same data again changes nothing; new data for an id replaces the old.
    let again = try await store.ingest([
      UserPurchases(user: Fixture.user("u1"), transactions: [t1, t2])
    ], atMs: Fixture.now)
    #expect(again.transactionsWritten == 0 && again.eventsAppended == 0)
    let refunded = Fixture.transaction("1000", purchase: 300, expires: 400, revoked: 350)
    let r = try await store.ingest([
      UserPurchases(
        user: Fixture.user("u1"), transactions: [refunded],
        renewalInfos: [Fixture.renewal("1000", retry: true)])
    ], atMs: Fixture.now)
    #expect(r.transactionsWritten == 1 && r.renewalInfosWritten == 1)
    let h2 = try await store.history(of: Fixture.user("u1"))
    #expect(h2.transactions == [t2, refunded])
    #expect(h2.renewalInfos.first?.isInBillingRetryPeriod == true)
  }

  /// newest signed data wins; older signed data is ignored
  static func newestWins(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let user = Fixture.user("u1")
    let newer = Fixture.transaction("1", purchase: 10, expires: 20, signed: 500)
    let older = Fixture.transaction("1", purchase: 10, expires: 15, signed: 400)
    _ = try await store.ingest([
      UserPurchases(
        user: user, transactions: [newer], renewalInfos: [Fixture.renewal("1", signed: 500)])
    ], atMs: Fixture.now)
    let s = try await store.ingest([
      UserPurchases(
        user: user, transactions: [older],
        renewalInfos: [Fixture.renewal("1", signed: 400, retry: true)])
    ], atMs: Fixture.now)
    #expect(s == IngestSummary())
    let h = try await store.history(of: user)
    #expect(h.transactions == [newer])
    #expect(h.renewalInfos == [Fixture.renewal("1", signed: 500)])
    let newest = Fixture.transaction("1", purchase: 10, expires: 30, signed: 600)
    _ = try await store.ingest([UserPurchases(user: user, transactions: [newest])], atMs: Fixture.now)
    #expect(try await store.history(of: user).transactions == [newest])
  }

  /// an ingest naming an unknown app stores nothing of the batch
  static func ingestIsAtomic(_ store: any Store) async throws {
    try await Fixture.seed(store)
    await expectStoreError(.notFound) {
      try await store.ingest([
        UserPurchases(
          user: Fixture.user("u1"), transactions: [Fixture.transaction("1", purchase: 1)]),
        UserPurchases(
          user: Fixture.user("u2", app: "nope"),
          transactions: [Fixture.transaction("2", purchase: 1)]),
      ], atMs: Fixture.now)
    }
    #expect(try await store.history(of: Fixture.user("u1")).transactions.isEmpty)
  }

  /// empty ids in purchase data are refused before anything is stored
  static func ingestValidation(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let good = UserPurchases(
      user: Fixture.user("u1"), transactions: [Fixture.transaction("1", purchase: 1)])
    for bad in [
      UserPurchases(
        user: Fixture.user(""), transactions: [Fixture.transaction("2", purchase: 1)]),
      UserPurchases(
        user: Fixture.user("u2"), transactions: [Fixture.transaction("", purchase: 1)]),
      UserPurchases(user: Fixture.user("u2"), renewalInfos: [Fixture.renewal("")]),
    ] {
      await expectStoreError(.invalidArgument) { try await store.ingest([good, bad], atMs: Fixture.now) }
      await expectStoreError(.invalidArgument) {
        try await store.applyNotification(
          appId: "a1", notificationId: "n", receivedMs: 1, updates: [bad])
      }
    }
    #expect(try await store.history(of: Fixture.user("u1")).transactions.isEmpty)
    #expect(try await !store.isNotificationProcessed(appId: "a1", notificationId: "n"))
  }

  /// environments and apps keep separate histories
  static func separation(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    let prod = Fixture.transaction("1", purchase: 1)
    let sandbox = Fixture.transaction("2", purchase: 2)
    _ = try await store.ingest([
      UserPurchases(user: Fixture.user("u1"), transactions: [prod]),
      UserPurchases(user: Fixture.user("u1", environment: .sandbox), transactions: [sandbox]),
    ], atMs: Fixture.now)
    #expect(try await store.history(of: Fixture.user("u1")).transactions == [prod])
    #expect(
      try await store.history(of: Fixture.user("u1", environment: .sandbox)).transactions == [
        sandbox
      ])
    #expect(try await store.history(of: Fixture.user("u1", app: "a2")).transactions.isEmpty)
  }

  /// notifications apply exactly once
  static func notificationDedupe(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let user = Fixture.user("u1")
    #expect(try await !store.isNotificationProcessed(appId: "a1", notificationId: "n1"))
    let first = try await store.applyNotification(
      appId: "a1", notificationId: "n1", receivedMs: 5,
      updates: [UserPurchases(user: user, transactions: [Fixture.transaction("1", purchase: 1)])])
    #expect(first != nil)
    #expect(try await store.isNotificationProcessed(appId: "a1", notificationId: "n1"))
    let second = try await store.applyNotification(
      appId: "a1", notificationId: "n1", receivedMs: 6,
      updates: [UserPurchases(user: user, transactions: [Fixture.transaction("2", purchase: 2)])])
    #expect(second == nil)
    #expect(try await store.history(of: user).transactions.map(\.transactionId) == ["1"])
    // The same id for another app is another notification.
    try await store.createApp(Fixture.app("a2"))
    #expect(
      try await store.applyNotification(
        appId: "a2", notificationId: "n1", receivedMs: 7, updates: []) != nil)
    await expectStoreError(.notFound) {
      try await store.applyNotification(
        appId: "zz", notificationId: "n1", receivedMs: 7, updates: [])
    }
    // A notification whose data names an unknown app is not recorded either.
    await expectStoreError(.notFound) {
      try await store.applyNotification(
        appId: "a1", notificationId: "n2", receivedMs: 8,
        updates: [
          UserPurchases(
            user: Fixture.user("u1", app: "zz"),
            transactions: [Fixture.transaction("3", purchase: 3)])
        ])
    }
    #expect(try await !store.isNotificationProcessed(appId: "a1", notificationId: "n2"))
  }

  /// old processed notification ids can be pruned
  static func pruneNotifications(_ store: any Store) async throws {
    try await Fixture.seed(store)
    for (id, ms) in [("old1", 100), ("old2", 199), ("new", 200)] {
      _ = try await store.applyNotification(
        appId: "a1", notificationId: id, receivedMs: Int64(ms), updates: [])
    }
    #expect(try await store.pruneNotifications(receivedBeforeMs: 200) == 2)
    #expect(try await !store.isNotificationProcessed(appId: "a1", notificationId: "old1"))
    #expect(try await store.isNotificationProcessed(appId: "a1", notificationId: "new"))
    #expect(try await store.pruneNotifications(receivedBeforeMs: 200) == 0)
  }

  /// original transaction id routes to every user holding it
  static func routing(_ store: any Store) async throws {
    try await Fixture.seed(store)
    _ = try await store.ingest([
      UserPurchases(
        user: Fixture.user("u2"),
        transactions: [Fixture.transaction("11", original: "10", purchase: 2)]),
      UserPurchases(
        user: Fixture.user("u1"), transactions: [Fixture.transaction("10", purchase: 1)]),
      UserPurchases(
        user: Fixture.user("u3"), transactions: [Fixture.transaction("20", purchase: 1)]),
      UserPurchases(
        user: Fixture.user("u4", environment: .sandbox),
        transactions: [Fixture.transaction("10", purchase: 1)]),
    ], atMs: Fixture.now)
    #expect(
      try await store.users(appId: "a1", environment: .production, originalTransactionId: "10")
        == ["u1", "u2"])
    #expect(
      try await store.users(appId: "a1", environment: .sandbox, originalTransactionId: "10") == [
        "u4"
      ])
    #expect(
      try await store.users(appId: "a1", environment: .production, originalTransactionId: "99")
        .isEmpty)
  }

  /// histories of many users come back in request order
  static func batchHistories(_ store: any Store) async throws {
    try await Fixture.seed(store)
    _ = try await store.ingest(
      (1...5).map { i in
        UserPurchases(
          user: Fixture.user("u\(i)"),
          transactions: [Fixture.transaction("\(i)", purchase: Int64(i))])
      }, atMs: Fixture.now)
    let hs = try await store.histories(
      appId: "a1", environment: .production, userIds: ["u3", "nobody", "u1"])
    #expect(hs.map(\.user.userId) == ["u3", "nobody", "u1"])
    #expect(hs.map { $0.transactions.map(\.transactionId) } == [["3"], [], ["1"]])
  }

  /// transaction history and users page in order
  static func historyPaging(_ store: any Store) async throws {
    try await Fixture.seed(store)
    let user = Fixture.user("u1")
    // Two transactions share a purchase time: the id breaks the tie.
    let txs = [
      Fixture.transaction("c", purchase: 30), Fixture.transaction("a", purchase: 10),
      Fixture.transaction("b2", purchase: 20), Fixture.transaction("b1", purchase: 20),
      Fixture.transaction("d", purchase: 40),
    ]
    let infos = [Fixture.renewal("c"), Fixture.renewal("a"), Fixture.renewal("b1")]
    _ = try await store.ingest(
      [UserPurchases(user: user, transactions: txs, renewalInfos: infos)], atMs: Fixture.now)
    let pages = try await collectPages(size: 2) {
      try await store.transactions(of: user, page: $0)
    }
    #expect(pages.map { $0.map(\.transactionId) } == [["a", "b1"], ["b2", "c"], ["d"]])
    // The renewal infos alone (a first page's), as the whole history has them, twice (a store
    // with a cache may answer the second read from it).
    let history = try await store.history(of: user)
    #expect(history.renewalInfos.map(\.originalTransactionId) == ["a", "b1", "c"])
    for _ in 0..<2 {
      #expect(try await store.renewalInfos(of: user) == history.renewalInfos)
    }
    #expect(try await store.renewalInfos(of: Fixture.user("nobody")).isEmpty)
    #expect(
      try await store.transactions(of: Fixture.user("nobody"), page: PageRequest()).items.isEmpty)
    await expectStoreError(.invalidArgument) {
      try await store.transactions(of: user, page: PageRequest(size: 2, cursor: "garbage"))
    }

    _ = try await store.ingest(
      (1...5).map { i in
        UserPurchases(
          user: Fixture.user("v\(i)"), transactions: [Fixture.transaction("x\(i)", purchase: 1)])
      }, atMs: Fixture.now)
    let users = try await collectPages(size: 4) {
      try await store.listUsers(appId: "a1", environment: .production, page: $0)
    }
    #expect(users == [["u1", "v1", "v2", "v3"], ["v4", "v5"]])
  }

  /// audit log: append, per tenant, paged oldest first
  static func audit(_ store: any Store) async throws {
    var appended: [AuditEntry] = []
    for i in 0..<5 {
      appended.append(
        try await store.appendAudit(
          AuditEntry(
            tenantId: i == 2 ? "t2" : "t1", atMs: Int64(i), actorKeyId: "k1",
            action: "RegisterApp",
            resource: "apps/a\(i)", details: "bundle com.example.a\(i)")))
    }
    _ = try await store.appendAudit(
      AuditEntry(
        tenantId: nil, atMs: 9, actorKeyId: "op", action: "CreateTenant", resource: "tenants/t1"))
    #expect(Set(appended.map(\.sequence)).count == 5)
    let pages = try await collectPages(size: 3) {
      try await store.auditLog(tenantId: "t1", page: $0)
    }
    #expect(
      pages.map { $0.map(\.resource) } == [["apps/a0", "apps/a1", "apps/a3"], ["apps/a4"]])
    #expect(pages[0][0] == appended[0])
    #expect(
      try await store.auditLog(tenantId: nil, page: PageRequest()).items.map(\.action) == [
        "CreateTenant"
      ])
    await expectStoreError(.invalidArgument) {
      try await store.auditLog(tenantId: "t1", page: PageRequest(size: 1, cursor: "x"))
    }
  }

  /// concurrent writers and readers all succeed
  static func concurrency(_ store: any Store) async throws {
    try await Fixture.seed(store)
    try await withThrowingTaskGroup(of: Void.self) { group in
      for w in 0..<8 {
        group.addTask {
          for i in 0..<25 {
            _ = try await store.ingest([
              UserPurchases(
                user: Fixture.user("w\(w)"),
                transactions: [Fixture.transaction("w\(w)-\(i)", purchase: Int64(i))])
            ], atMs: Fixture.now)
          }
        }
      }
      for r in 0..<8 {
        group.addTask {
          for _ in 0..<25 {
            let h = try await store.history(of: Fixture.user("w\(r)"))
            // A snapshot is a prefix of the writer's sequence: ids 0..<n, nothing torn.
            #expect(
              h.transactions.map(\.purchaseDate) == (0..<Int64(h.transactions.count)).map { $0 })
          }
        }
      }
      try await group.waitForAll()
    }
    for w in 0..<8 {
      #expect(try await store.history(of: Fixture.user("w\(w)")).transactions.count == 25)
    }
  }
}
