import AppStoreSimulator
import Foundation
import SubscriptionDomain
import SubstatusJSON
import SubstatusService
import Testing

// The simulator's output read by our own domain layer: the parsers must accept every body the
// simulator produces, and evaluation must see the state the simulator meant.

private let app = "/control/apps/com.example.app"

private let domainCatalog = Catalog(products: [
  Product(productId: "pro.monthly", type: .autoRenewable, subscriptionGroupId: "pro",
          hasIntroductoryOffer: true, promotionalOfferIds: ["comeback"]),
  Product(productId: "pro.monthly.b", type: .autoRenewable, subscriptionGroupId: "pro"),
  Product(productId: "pro.quarterly", type: .autoRenewable, subscriptionGroupId: "pro"),
  Product(productId: "pro.yearly", type: .autoRenewable, subscriptionGroupId: "pro", hasIntroductoryOffer: true),
  Product(productId: "lite.weekly", type: .autoRenewable, subscriptionGroupId: "lite", hasIntroductoryOffer: true),
  Product(productId: "lifetime", type: .nonConsumable),
  Product(productId: "coins", type: .consumable),
])

private func evaluate(_ sim: Sim, user: String, environment: String = "production") async throws
  -> SubscriptionEvaluation
{
  let receipt = try #require(try await sim.ok("GET", "\(app)/users/\(user)/receipt")["receipt"]?.string)
  let body = try await sim.verify(receipt, environment: environment)
  let response = try VerifyReceiptResponse(json: body)
  #expect(response.bundleId == "com.example.app")
  let now = try #require(body["receipt"]?["request_date_ms"]?.int64)
  return SubscriptionEvaluator.evaluate(
    history: response.transactions, renewals: response.pendingRenewalInfo, catalog: domainCatalog, at: now)
}

@Suite("Simulator output through SubscriptionDomain")
struct DomainInteropTests {
  @Test func statesFollowTheLifecycle() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(graceDays: 16, notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"a","environment":"production"}"#)
    #expect(try await evaluate(sim, user: "a").status(ofGroup: "pro")?.state == .neverSubscribed)

    try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    var evaluation = try await evaluate(sim, user: "a")
    var pro = try #require(evaluation.status(ofGroup: "pro"))
    #expect(pro.state == .active)
    #expect(pro.inTrial)
    #expect(pro.autoRenewEnabled)
    let yearly = evaluation.eligibility(for: "pro.yearly")
    #expect(yearly.introductory.reason == .introAlreadyUsed)
    #expect(yearly.promotional.reason == .existingSubscriber)
    #expect(evaluation.eligibility(for: "lite.weekly").introductory.reason == .newCustomer)

    // Trial → paid → billing failure at the renewal: grace period (entitled), then billing retry.
    try await sim.advance(#"{"days":7}"#)
    try await sim.ok("POST", "/control/users/a/billing-failure")
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":1770508800000}"#)
    pro = try #require(try await evaluate(sim, user: "a").status(ofGroup: "pro"))
    #expect(pro.state == .gracePeriod)
    #expect(pro.billingIssue)
    #expect(pro.gracePeriodExpiresDate == 1_771_891_200_000)
    try await sim.advance(#"{"days":17}"#)
    pro = try #require(try await evaluate(sim, user: "a").status(ofGroup: "pro"))
    #expect(pro.state == .billingRetry)
    try await sim.ok("POST", "/control/users/a/billing-recover")
    pro = try #require(try await evaluate(sim, user: "a").status(ofGroup: "pro"))
    #expect(pro.state == .active)
    #expect(!pro.billingIssue)

    // Upgrade: the yearly is active, the upgraded monthly is a revocation of kind UPGRADE.
    try await sim.ok("POST", "\(app)/users/a/change-product", #"{"product_id":"pro.yearly"}"#)
    evaluation = try await evaluate(sim, user: "a")
    #expect(evaluation.status(ofGroup: "pro")?.productId == "pro.yearly")
    #expect(evaluation.status(ofGroup: "pro")?.state == .active)

    // Refund: revoked.
    try await sim.ok("POST", "\(app)/users/a/refund", #"{"group_id":"pro"}"#)
    #expect(try await evaluate(sim, user: "a").status(ofGroup: "pro")?.state == .revoked)

    // Every notification the simulator sent parses as V1 with the app's secret.
    try await sim.drain()
    #expect(!receiver.bodies.isEmpty)
    for body in receiver.bodies {
      let notification = try NotificationV1(json: body)
      #expect(notification.password == "s3cret")
      #expect(notification.notificationType != nil, "\(notification.rawNotificationType)")
      #expect(notification.environment == .production)
    }
    await sim.stop()
    await receiver.stop()
  }

  @Test func familySharedAccessAndItsRevocation() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    for user in ["org", "kid"] {
      try await sim.ok("POST", "/control/users", #"{"user_id":"\#(user)","environment":"sandbox"}"#)
    }
    try await sim.ok("POST", "/control/users/org/family/members", #"{"user_id":"kid"}"#)
    try await sim.ok("POST", "\(app)/users/org/purchase", #"{"product_id":"pro.yearly"}"#)
    var kid = try #require(try await evaluate(sim, user: "kid", environment: "sandbox").status(ofGroup: "pro"))
    #expect(kid.state == .active)
    #expect(kid.ownership == .familyShared)
    try await sim.ok("POST", "/control/users/kid/family/leave")
    kid = try #require(try await evaluate(sim, user: "kid", environment: "sandbox").status(ofGroup: "pro"))
    #expect(kid.state == .revoked)
    let org = try await evaluate(sim, user: "org", environment: "sandbox")
    #expect(org.status(ofGroup: "pro")?.state == .active)
    #expect(org.status(ofGroup: "pro")?.ownership == .purchased)
    await sim.stop()
  }

  @Test func lapsedSubscriberEligibility() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"l","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/l/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "\(app)/users/l/cancel-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.advance(#"{"days":40}"#)
    let evaluation = try await evaluate(sim, user: "l")
    #expect(evaluation.status(ofGroup: "pro")?.state == .expired)
    let monthly = evaluation.eligibility(for: "pro.monthly")
    #expect(monthly.introductory.reason == .lapsedNoIntroUsed)
    #expect(monthly.introductory.eligible)
    #expect(monthly.promotional.reason == .lapsedSubscriber)
    // And the simulator agrees: the intro offer and the promotional offer are both redeemable.
    try await sim.ok("POST", "\(app)/users/l/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    await sim.stop()
  }
}

@Suite("SubstatusService's verifyReceipt client against the simulator")
struct VerifyReceiptClientInteropTests {
  private func client(_ sim: Sim, maxAttempts: Int = 3) -> VerifyReceiptClient {
    VerifyReceiptClient(
      productionURL: URL(string: "http://\(sim.base)/production/verifyReceipt")!,
      sandboxURL: URL(string: "http://\(sim.base)/sandbox/verifyReceipt")!,
      timeout: .seconds(5), maxAttempts: maxAttempts, initialBackoff: .milliseconds(5))
  }

  @Test func productionFirstThenSandboxOn21007() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"s","environment":"sandbox"}"#)
    let bought = try await sim.ok("POST", "\(app)/users/s/purchase", #"{"product_id":"pro.monthly"}"#)
    let receipt = try #require(bought["receipt"]?.string)
    let response = try await client(sim).verify(receiptData: receipt, password: "s3cret")
    #expect(response.environment == .sandbox)
    #expect(response.transactions.count == 1)
    #expect(response.pendingRenewalInfo.count == 1)
    do {
      _ = try await client(sim).verify(receiptData: receipt, password: "wrong")
      Issue.record("a wrong secret must fail")
    } catch {
      #expect(error.kind == .wrongSharedSecret)
      #expect(error.status?.code == 21004)
    }
    await sim.stop()
  }

  @Test func retriesInjectedTemporaryFailures() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    let bought = try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    let receipt = try #require(bought["receipt"]?.string)
    try await sim.ok("POST", "/control/faults", #"{"status":21005,"count":1}"#)
    try await sim.ok("POST", "/control/faults", #"{"http_status":503,"count":1}"#)
    let response = try await client(sim).verify(receiptData: receipt, password: "s3cret")
    #expect(response.environment == .production)
    try await sim.ok("POST", "/control/faults", #"{"status":21104,"count":5}"#)
    do {
      _ = try await client(sim, maxAttempts: 2).verify(receiptData: receipt, password: "s3cret")
      Issue.record("a retryable status that persists must fail")
    } catch {
      #expect(error.kind == .unavailable)
    }
    await sim.stop()
  }
}
