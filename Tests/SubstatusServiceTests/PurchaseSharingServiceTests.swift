import Foundation
import HTTPServer
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire
import Testing

@testable import SubstatusService

/// Purchase sharing through the service (issue 20 item 2): the policy in SetPolicy, a restore by a
/// second account under each policy, answers before and after a transfer with `as_of_ms`, the
/// per-item refusal under KEEP_FIRST, and notifications reaching the current owner only.
@Suite struct PurchaseSharingServiceTests {
  static let (t0, day) = (ReceiptRulesServiceTests.t0, ReceiptRulesServiceTests.day)
  /// A sandbox receipt body with one premium.monthly subscription, active at the world's clock.
  static let subscription = [
    ReceiptRulesServiceTests.element("s1", original: "s1", purchase: t0 - 40 * day, expires: t0 - 10 * day),
    ReceiptRulesServiceTests.element("s2", original: "s1", purchase: t0 - 10 * day, expires: t0 + 20 * day),
  ]

  static func body(_ elements: [String]) -> [UInt8] {
    Array(#"{"status":0,"environment":"Sandbox","latest_receipt_info":[\#(elements.joined(separator: ","))]}"#.utf8)
  }

  /// An app of a fresh tenant with its shared secret and `sharing`; returns (admin key, app id).
  static func app(_ h: Harness, _ sharing: Substatus_V1_PurchaseSharing) async throws -> (String, String) {
    let (admin, app) = try await h.makeTenantWithApp()
    var secret = Substatus_V1_SetSharedSecretRequest()
    secret.appID = app
    secret.sharedSecret = ReceiptRulesServiceTests.secret
    _ = try await h.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
    var set = Substatus_V1_SetPolicyRequest()
    set.appID = app
    set.policy = Substatus_V1_EligibilityPolicy()
    set.policy?.purchaseSharing = sharing
    set.updateMask = ["purchase_sharing"]
    let updated = try await h.call(Substatus_V1_AdminService.setPolicy, set, key: admin)
    #expect(updated.app?.policy?.purchaseSharing == (sharing == .unspecified ? .share : sharing))
    // The other switches kept their defaults.
    #expect(updated.app?.policy?.lapsedSubscribersGetIntro == true)
    return (admin, app)
  }

  @discardableResult
  static func restore(_ h: Harness, _ app: String, _ user: String, key: String, _ elements: [String] = subscription)
    async throws -> Substatus_V1_ImportReceiptResponseResponse
  {
    var request = Substatus_V1_ImportReceiptResponseRequest()
    request.appID = app
    request.userID = user
    request.verifyReceiptResponseJson = body(elements)
    return try await h.call(Substatus_V1_IngestService.importReceiptResponse, request, key: key)
  }

  static func premium(_ status: Substatus_V1_GetStatusResponse) -> Substatus_V1_SubscriptionState? {
    status.groups.first { $0.subscriptionGroupID == "20001001" }?.state
  }

  @Test("SHARE (the default): both accounts have the restored subscription, as before")
  func share() async throws {
    try await withService { h in
      let (admin, app) = try await Self.app(h, .unspecified)
      try await Self.restore(h, app, "u1", key: admin)
      h.world.now.withLock { $0 += 3_600_000 }
      let second = try await Self.restore(h, app, "u2", key: admin)
      #expect(second.refusedOriginalTransactions.isEmpty)
      for user in ["u1", "u2"] {
        #expect(Self.premium(try await h.statusResponse(app, user, key: admin)) == .active)
      }
      #expect(try await h.report(app, key: admin).active == 2)
      #expect(try await h.service.store.app(id: app).ownershipTracked == false)
    }
  }

  @Test("TRANSFER: the second account has it from its restore on; the first until then (status, eligibility, report with as_of_ms)")
  func transfer() async throws {
    try await withService { h in
      let (admin, app) = try await Self.app(h, .transfer)
      try await Self.restore(h, app, "u1", key: admin)
      h.world.now.withLock { $0 += 3_600_000 }
      let restoredAt = h.world.clock.wallMs
      let second = try await Self.restore(h, app, "u2", key: admin)
      #expect(second.refusedOriginalTransactions.isEmpty)
      #expect(second.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .active)
      // The transfer is recorded for the event log.
      #expect(
        try await h.service.store.ownershipTransfers(appId: app, environment: .sandbox, originalTransactionId: "s1") == [
          OwnershipTransfer(
            appId: app, environment: .sandbox, originalTransactionId: "s1", previousUserId: "u1", newUserId: "u2",
            atMs: restoredAt)
        ])

      // Now: u2 has it, u1 is evaluated without it (never subscribed: intro eligible again).
      #expect(Self.premium(try await h.statusResponse(app, "u1", key: admin)) == .neverSubscribed)
      #expect(Self.premium(try await h.statusResponse(app, "u2", key: admin)) == .active)
      #expect(try await h.statusResponse(app, "u1", key: admin).entitlements.isEmpty)
      #expect(try await h.eligibility(app, "u1", "premium.monthly", key: admin).introductory?.reason == .newCustomer)
      #expect(try await h.eligibility(app, "u2", "premium.monthly", key: admin).introductory?.reason == .activeSubscription)
      #expect(try await h.report(app, key: admin).active == 1)
      // Just before the restore: u1 had it, u2 did not.
      let before = restoredAt - 1
      #expect(Self.premium(try await h.statusResponse(app, "u1", key: admin, asOf: before)) == .active)
      #expect(Self.premium(try await h.statusResponse(app, "u2", key: admin, asOf: before)) == .neverSubscribed)
      #expect(try await h.report(app, key: admin, asOf: before).active == 1)
      #expect(Self.premium(try await h.statusResponse(app, "u1", key: admin, asOf: restoredAt)) == .neverSubscribed)

      // A V1 renewal notification for the transferred subscription reaches u2 only.
      let renewal = ReceiptRulesServiceTests.element("s3", original: "s1", purchase: Self.t0 + 20 * Self.day, expires: Self.t0 + 50 * Self.day)
      #expect(await ErasureServiceTests.postV1(h, app, type: "DID_RENEW", Self.subscription + [renewal]) == 200)
      let u1 = try await h.service.store.history(of: UserKey(appId: app, environment: .sandbox, userId: "u1"))
      let u2 = try await h.service.store.history(of: UserKey(appId: app, environment: .sandbox, userId: "u2"))
      #expect(u1.transactions.map(\.transactionId) == ["s1", "s2"])
      #expect(u2.transactions.map(\.transactionId) == ["s1", "s2", "s3"])

      // u1 restores again an hour later and takes it back.
      h.world.now.withLock { $0 += 3_600_000 }
      try await Self.restore(h, app, "u1", key: admin)
      #expect(Self.premium(try await h.statusResponse(app, "u1", key: admin)) == .active)
      #expect(Self.premium(try await h.statusResponse(app, "u2", key: admin)) == .neverSubscribed)
      #expect(Self.premium(try await h.statusResponse(app, "u2", key: admin, asOf: restoredAt)) == .active)
    }
  }

  @Test("KEEP_FIRST: the second account is refused the subscription per item (OWNED_BY_ANOTHER_USER); the rest is stored")
  func keepFirst() async throws {
    try await withService { h in
      let (admin, app) = try await Self.app(h, .keepFirst)
      try await Self.restore(h, app, "u1", key: admin)
      h.world.now.withLock { $0 += 3_600_000 }

      // A receipt body: the shared subscription is refused, the user's own one stored.
      let own = ReceiptRulesServiceTests.element("o1", original: "o1", purchase: Self.t0 - Self.day, expires: Self.t0 + Self.day, family: true)
      let second = try await Self.restore(h, app, "u2", key: admin, Self.subscription + [own])
      #expect(second.refusedOriginalTransactions.map(\.originalTransactionID) == ["s1"])
      let error = try #require(second.refusedOriginalTransactions.first?.error)
      #expect(error.code == Int32(RPCError.Code.failedPrecondition.rawValue))
      #expect(error.reason == "OWNED_BY_ANOTHER_USER")
      #expect(second.transactionCount == 3)
      let stored = try await h.service.store.history(of: UserKey(appId: app, environment: .sandbox, userId: "u2"))
      #expect(stored.transactions.map(\.transactionId) == ["o1"])
      #expect(Self.premium(try await h.statusResponse(app, "u2", key: admin)) == .neverSubscribed)
      #expect(Self.premium(try await h.statusResponse(app, "u1", key: admin)) == .active)

      // ImportTransactions: each transaction of the refused original transaction is rejected on its own.
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = app
      request.userID = "u3"
      for (id, original) in [("s2", "s1"), ("l1", "l1")] {
        var t = Substatus_V1_Transaction()
        t.transactionID = id
        t.originalTransactionID = original
        t.productID = id == "l1" ? "lifetime" : "premium.monthly"
        t.purchaseDateMs = Self.t0 - Self.day
        t.environment = .sandbox
        request.transactions.append(t)
      }
      var renewal = Substatus_V1_RenewalInfo()
      renewal.originalTransactionID = "s1"
      renewal.productID = "premium.monthly"
      renewal.autoRenewProductID = "premium.monthly"
      renewal.environment = .sandbox
      request.renewalInfos = [renewal]
      let imported = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
      #expect(imported.transactionResults.map(\.outcome) == [.rejected, .created])
      #expect(imported.transactionResults[0].error?.reason == "OWNED_BY_ANOTHER_USER")
      #expect(imported.transactionResults[0].error?.code == Int32(RPCError.Code.failedPrecondition.rawValue))
      #expect(imported.renewalInfoResults.map(\.outcome) == [.rejected])
      #expect(imported.renewalInfoResults[0].error?.reason == "OWNED_BY_ANOTHER_USER")
      let u3 = try await h.service.store.history(of: UserKey(appId: app, environment: .sandbox, userId: "u3"))
      #expect(u3.transactions.map(\.transactionId) == ["l1"] && u3.renewalInfos.isEmpty)
    }
  }

  @Test("SetPolicy: an unknown purchase_sharing value is INVALID_ARGUMENT naming the field; GetApp shows the policy")
  func setPolicyValidation() async throws {
    try await withService { h in
      let (admin, app) = try await Self.app(h, .keepFirst)
      var get = Substatus_V1_GetAppRequest()
      get.appID = app
      #expect(try await h.call(Substatus_V1_AdminService.getApp, get, key: admin).app?.policy?.purchaseSharing == .keepFirst)
      var set = Substatus_V1_SetPolicyRequest()
      set.appID = app
      set.policy = Substatus_V1_EligibilityPolicy()
      set.policy?.purchaseSharing = .UNRECOGNIZED(9)
      set.updateMask = ["purchase_sharing"]
      do {
        _ = try await h.call(Substatus_V1_AdminService.setPolicy, set, key: admin)
        Issue.record("an unknown purchase_sharing was accepted")
      } catch let error as RPCError {
        #expect(error.code == .invalidArgument)
        #expect(error.message.contains("policy.purchase_sharing"))
      }
      // A whole-policy replacement without the field means SHARE.
      set.policy = Substatus_V1_EligibilityPolicy()
      set.updateMask = []
      #expect(try await h.call(Substatus_V1_AdminService.setPolicy, set, key: admin).app?.policy?.purchaseSharing == .share)
    }
  }
}

@Suite("Purchase sharing and the receipt refresher")
struct PurchaseSharingRefreshTests {
  @Test("the background refresh of the first account's receipt does not take back what a transfer moved (not a submission)")
  func refreshTakesNothingBack() async throws {
    let t = TestWorld().now.withLock { $0 }
    let (hour, day): (Int64, Int64) = (3_600_000, 86_400_000)
    let body = FakeAppStore.body(
      periods: [(t - 37 * day, t - 30 * day), (t - 30 * day, t - hour), (t - hour, t + 30 * day - hour)],
      latest: "fresh-receipt")
    let w = RefreshWorld(fake: FakeAppStore { _ in (200, body) })
    try await w.makeApp("app1", tenant: "t1")
    _ = try await w.store.setPolicy(appId: "app1", policy: EligibilityPolicy(purchaseSharing: .transfer))
    let response = try VerifyReceiptResponse(parsing: Array(body.utf8))
    func user(_ id: String) -> UserKey { UserKey(appId: "app1", environment: .production, userId: id) }
    // u1 submitted the receipt a day ago; u2 restored it an hour ago and took it.
    for (id, at) in [("u1", t - day), ("u2", t - hour)] {
      _ = try await w.store.ingest([
        UserPurchases(user: user(id), transactions: response.transactions, renewalInfos: response.pendingRenewalInfo, submittedMs: at)
      ], atMs: at)
    }
    try await w.saveDue("u1", app: "app1", tenant: "t1")
    #expect(try #require(await w.refresher().refreshDue()).outcomes == [.refreshed: 1])
    #expect(try await w.store.users(appId: "app1", environment: .production, originalTransactionId: "7000") == ["u2"])
    #expect(
      try await w.store.ownershipGaps(appId: "app1", environment: .production, userIds: ["u1"])["u1"] == [
        OwnershipGap(originalTransactionId: "7000", fromMs: t - hour, untilMs: nil)
      ])
    #expect(try await w.store.ownershipTransfers(appId: "app1", environment: .production, originalTransactionId: "7000").count == 1)
  }
}
