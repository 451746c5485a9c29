import Foundation
import Testing
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusWire
@testable import SubstatusService

/// CheckEligibility, GetStatus and GetEntitlements answer from the per-user summaries the writes
/// store, fall back to the history (and rewrite the summary at "now") when a summary does not
/// answer, and answer the same either way.
@Suite struct SummaryReadPathTests {
  static let productIDs = [
    "premium.monthly", "premium.yearly", "premium.weekly", "pro.monthly", "family.monthly", "coins.100", "lifetime", "nope",
  ]

  /// The domain's answers from the store's history at `time`.
  static func expected(_ store: any Store, app: String, user: String, at time: Int64) async throws -> SubscriptionEvaluation {
    let history = try await store.history(of: UserKey(appId: app, environment: .production, userId: user))
    let catalog = Catalog(products: try await store.products(appId: app))
    return SubscriptionEvaluator.evaluate(
      history: history.transactions, renewals: history.renewalInfos, catalog: catalog,
      policy: try await store.app(id: app).policy, at: time)
  }

  func eligibility(_ h: Harness, key: String, app: String, user: String, asOf: Int64 = 0) async throws -> [Substatus_V1_ProductEligibility] {
    var check = Substatus_V1_CheckEligibilityRequest()
    check.appID = app
    check.asOfMs = asOf
    var q = Substatus_V1_EligibilityQuery()
    q.userID = user
    q.productIDs = Self.productIDs
    check.queries = [q]
    return try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: key).users[0].products
  }

  @Test func answersFromTheSummaryThenFallsBackWhenTimeOrTheCatalogChangesIt() async throws {
    let store = InMemoryStore()
    try await withService(store: store) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let catalog = Catalog(products: try await store.products(appId: app))
      var importRequest = Substatus_V1_ImportReceiptResponseRequest()
      importRequest.appID = app
      importRequest.userID = "user-1"
      importRequest.verifyReceiptResponseJson = Array(try fixture("verify_receipt_multi_group.json").utf8)
      _ = try await h.call(Substatus_V1_IngestService.importReceiptResponse, importRequest, key: admin)
      let metrics = h.service.summaryMetrics
      func wire(_ e: SubscriptionEvaluation) -> [Substatus_V1_ProductEligibility] {
        e.eligibility(for: Self.productIDs).map { $0.wire(type: catalog[$0.productId]?.type) }
      }

      // Written with the import: the read answers from it.
      var now = h.world.now.withLock { $0 }
      #expect(try await eligibility(h, key: admin, app: app, user: "user-1") == wire(try await Self.expected(store, app: app, user: "user-1", at: now)))
      #expect(metrics.hitCount == 1)
      #expect(SummaryFallback.allCases.allSatisfy { metrics.fallbacks($0) == 0 })

      // Past its window: from the history, and the summary is rewritten at the read's instant.
      let stored = try #require(try await store.summaries(appId: app, environment: .production, userIds: ["user-1"])["user-1"]?.summary)
      let validUntil = try #require(stored.validUntilMs)
      h.world.now.withLock { $0 = max($0, validUntil) }
      now = h.world.now.withLock { $0 }
      #expect(try await eligibility(h, key: admin, app: app, user: "user-1") == wire(try await Self.expected(store, app: app, user: "user-1", at: now)))
      #expect(metrics.fallbacks(.expired) == 1)
      let rewritten = try #require(try await store.summaries(appId: app, environment: .production, userIds: ["user-1"])["user-1"]?.summary)
      #expect(rewritten.computedAtMs == now)
      _ = try await eligibility(h, key: admin, app: app, user: "user-1")
      #expect(metrics.hitCount == 2)

      // A past as_of: from the history, nothing rewritten.
      let past = stored.computedAtMs - 86_400_000
      #expect(
        try await eligibility(h, key: admin, app: app, user: "user-1", asOf: past)
          == wire(try await Self.expected(store, app: app, user: "user-1", at: past)))
      #expect(metrics.fallbacks(.before) == 1)
      #expect(try await store.summaries(appId: app, environment: .production, userIds: ["user-1"])["user-1"]?.summary == rewritten)

      // A catalog change: the fingerprint no longer matches; the answers follow the new catalog.
      var put = Substatus_V1_PutProductsRequest()
      put.appID = app
      var product = Substatus_V1_Product()
      product.productID = "premium.weekly"
      product.type = .autoRenewable
      product.subscriptionGroupID = "20001001"
      product.hasIntroductoryOffer = true
      put.products = [product]
      _ = try await h.call(Substatus_V1_AdminService.putProducts, put, key: admin)
      let newCatalog = Catalog(products: try await store.products(appId: app))
      let answered = try await eligibility(h, key: admin, app: app, user: "user-1")
      let expected = try await Self.expected(store, app: app, user: "user-1", at: now)
      #expect(answered == expected.eligibility(for: Self.productIDs).map { $0.wire(type: newCatalog[$0.productId]?.type) })
      #expect(metrics.fallbacks(.fingerprint) == 1)
      _ = try await eligibility(h, key: admin, app: app, user: "user-1")
      #expect(metrics.hitCount == 3)

      // A user with no data: from the (empty) history, nothing stored.
      _ = try await eligibility(h, key: admin, app: app, user: "never-seen")
      #expect(metrics.fallbacks(.missing) == 1)
      #expect(try await store.summaries(appId: app, environment: .production, userIds: ["never-seen"]).isEmpty)

      // /metrics shows them.
      let text = h.service.metrics.prometheusText()
      #expect(text.contains("substatus_summary_hits_total 3"), "\(text)")
      #expect(text.contains("substatus_summary_fallbacks_total{reason=\"expired\"} 1"), "\(text)")
      #expect(text.contains("substatus_summary_rewrites_total{outcome=\"stored\"} 2"), "\(text)")
    }
  }

  @Test func getStatusAndGetEntitlementsAnswerAsTheHistoryWithAndWithoutNamedEntitlements() async throws {
    let store = InMemoryStore()
    try await withService(store: store) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      var importRequest = Substatus_V1_ImportReceiptResponseRequest()
      importRequest.appID = app
      importRequest.userID = "user-1"
      importRequest.verifyReceiptResponseJson = Array(try fixture("verify_receipt_multi_group.json").utf8)
      _ = try await h.call(Substatus_V1_IngestService.importReceiptResponse, importRequest, key: admin)
      let metrics = h.service.summaryMetrics
      let now = h.world.now.withLock { $0 }
      let expected = try await Self.expected(store, app: app, user: "user-1", at: now)

      var status = Substatus_V1_GetStatusRequest()
      status.appID = app
      status.userID = "user-1"
      var entitlements = Substatus_V1_GetEntitlementsRequest()
      entitlements.appID = app
      entitlements.userID = "user-1"
      let got = try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin)
      #expect(got.groups == expected.groups.map(\.wire))
      #expect(got.entitlements == expected.entitlements.map(\.wire))
      #expect(got.namedEntitlements.isEmpty)
      let gotEntitlements = try await h.call(Substatus_V1_StatusService.getEntitlements, entitlements, key: admin)
      #expect(gotEntitlements.entitlements == expected.entitlements.map(\.wire))
      #expect(metrics.hitCount == 2)

      // With named entitlements: answered from the summary too, as the history answers them.
      var define = Substatus_V1_PutEntitlementsRequest()
      define.appID = app
      var premium = Substatus_V1_EntitlementDefinition()
      premium.entitlementID = "premium"
      premium.productIDs = ["premium.monthly", "premium.yearly", "lifetime"]
      define.entitlements = [premium]
      _ = try await h.call(Substatus_V1_AdminService.putEntitlements, define, key: admin)
      let named = try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin)
      #expect(named.groups == expected.groups.map(\.wire))
      let history = try await store.history(of: UserKey(appId: app, environment: .production, userId: "user-1"))
      let definitions = try await store.entitlements(appId: app)
      let expectedNamed = expected.namedEntitlements(definitions, history: history.transactions, renewals: history.renewalInfos)
      #expect(named.namedEntitlements == expectedNamed.map(\.wire))
      #expect(named.namedEntitlements.map(\.entitlementID) == ["premium"])
      entitlements.entitlementIDs = ["premium"]
      let namedOnly = try await h.call(Substatus_V1_StatusService.getEntitlements, entitlements, key: admin)
      #expect(namedOnly.namedEntitlements == expectedNamed.map(\.wire))
      #expect(metrics.hitCount == 4)
      #expect(SummaryFallback.allCases.allSatisfy { metrics.fallbacks($0) == 0 })
      // At a past instant (before the summary): from the history, the same answers as there.
      status.asOfMs = now - 86_400_000
      let past = try await h.call(Substatus_V1_StatusService.getStatus, status, key: admin)
      let pastExpected = try await Self.expected(store, app: app, user: "user-1", at: now - 86_400_000)
      #expect(past.groups == pastExpected.groups.map(\.wire))
      #expect(
        past.namedEntitlements
          == pastExpected.namedEntitlements(definitions, history: history.transactions, renewals: history.renewalInfos).map(\.wire))
      #expect(metrics.fallbacks(.before) == 1)
    }
  }
}
