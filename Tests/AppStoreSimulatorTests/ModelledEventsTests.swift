import AppStoreSignedData
import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

private let bundle = "com.example.v2"
private let app = "/control/apps/\(bundle)"

/// A received V2 notification, decoded after checking its signatures: the payload, its
/// transaction and renewal info.
private struct Received {
  var payload: JSONValue
  var transaction: JSONValue?
  var renewal: JSONValue?
  var type: String {
    (payload["notificationType"]?.string ?? "")
      + (payload["subtype"]?.string.map { "/" + $0 } ?? "")
  }
  var data: JSONValue? { payload["data"] }
}

/// A V2 app with a receiver and a registered key, its root and users; `reset()` forgets what was
/// received so far.
private struct World {
  let sim: Sim
  let receiver: RecordingReceiver
  let root: X509Certificate

  init(catalog: (String) -> String = { catalogV2(notificationURL: $0) }, users: [String])
    async throws
  {
    receiver = try startReceiver()
    sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(receiver.url))
    for user in users {
      try await sim.ok(
        "POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
    }
    root = try await rootCertificate(sim)
  }

  /// Everything received since the last call, decoded.
  func received() async throws -> [Received] {
    try await sim.drain()
    let bodies = receiver.bodies
    receiver.reset()
    return try bodies.map { body in
      let payload = try verifiedPayload(body["signedPayload"]?.string ?? "", root: root)
      return Received(
        payload: payload,
        transaction: try payload["data"]?["signedTransactionInfo"]?.string.map {
          try verifiedPayload($0, root: root)
        },
        renewal: try payload["data"]?["signedRenewalInfo"]?.string.map {
          try verifiedPayload($0, root: root)
        })
    }
  }

  /// The first transaction id a control operation answered.
  func transactionID(_ response: JSONValue) throws -> String {
    try #require(response["transactions"]?[0]?["transaction_id"]?.string)
  }

  func stop() async {
    await sim.stop()
    await receiver.stop()
  }
}

@Suite("Simulator lifecycles: price increases, refunds, plan changes, win-back")
struct ModelledEventsTests {
  @Test func priceIncreaseNeedsConsentAndRenewsAtTheNewPriceOrExpires() async throws {
    let world = try await World(users: ["a", "b", "c"])
    let sim = world.sim
    for user in ["a", "b"] {
      try await sim.ok("POST", "\(app)/users/\(user)/purchase", #"{"product_id":"pro.monthly"}"#)
    }
    try await sim.ok("POST", "\(app)/users/c/purchase", #"{"product_id":"pro.yearly"}"#)
    _ = try await world.received()
    #expect(
      try await sim.fails(400, "POST", "\(app)/products/pro.monthly/price-increase", #"{"price":9.99}"#)
        .contains("higher"))

    try await sim.ok("POST", "\(app)/products/pro.monthly/price-increase", #"{"price":12.99}"#)
    var received = try await world.received()
    #expect(received.map(\.type) == ["PRICE_INCREASE/PENDING", "PRICE_INCREASE/PENDING"])
    for notification in received {
      #expect(notification.renewal?["priceIncreaseStatus"] == .integer(0))
      #expect(notification.renewal?["renewalPrice"] == .integer(12_990))
      #expect(notification.data?["status"] == .integer(1))
    }
    #expect(
      try await sim.fails(409, "POST", "\(app)/users/c/price-increase-consent", #"{"group_id":"pro"}"#)
        .contains("no price increase"))
    try await sim.ok("POST", "\(app)/users/a/price-increase-consent", #"{"group_id":"pro"}"#)
    received = try await world.received()
    #expect(received.map(\.type) == ["PRICE_INCREASE/ACCEPTED"])
    #expect(received.first?.renewal?["priceIncreaseStatus"] == .integer(1))

    // At the renewal: a (consented) renews at the new price; b (no answer) expires, intent 3.
    try await sim.advance(#"{"days":31}"#)
    received = try await world.received()
    let renewed = try #require(received.first { $0.type == "DID_RENEW" })
    #expect(renewed.transaction?["price"] == .integer(12_990))
    #expect(renewed.renewal?["priceIncreaseStatus"] == nil)
    let expired = try #require(received.first { $0.type == "EXPIRED/PRICE_INCREASE" })
    #expect(expired.renewal?["expirationIntent"] == .integer(3))
    #expect(expired.renewal?["autoRenewStatus"] == .integer(0))
    #expect(received.count == 2)

    // An increase that needs no consent is ACCEPTED at once.
    try await sim.ok(
      "POST", "\(app)/products/pro.yearly/price-increase",
      #"{"price":109.99,"requires_consent":false}"#)
    received = try await world.received()
    #expect(received.map(\.type) == ["PRICE_INCREASE/ACCEPTED"])
    #expect(received.first?.renewal?["priceIncreaseStatus"] == .integer(1))
    await world.stop()
  }

  @Test func priceIncreaseConsentInV1() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"v1","environment":"production"}"#)
    let v1App = "/control/apps/com.example.app"
    try await sim.ok("POST", "\(v1App)/users/v1/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "\(v1App)/products/pro.monthly/price-increase", #"{"price":1.99}"#)
    try await sim.ok("POST", "\(v1App)/users/v1/price-increase-consent", #"{"group_id":"pro"}"#)
    try await sim.drain()
    // V1 has PRICE_INCREASE_CONSENT for the request only; consent shows in the receipt.
    #expect(receiver.types == ["INITIAL_BUY", "PRICE_INCREASE_CONSENT"])
    let pending = receiver.bodies.last?["unified_receipt"]?["pending_renewal_info"]?[0]
    #expect(pending?["price_consent_status"]?.string == "0")
    let receipt = try await sim.ok("GET", "\(v1App)/users/v1/receipt")
    let verified = try await sim.verify(try #require(receipt["receipt"]?.string))
    #expect(verified["pending_renewal_info"]?[0]?["price_consent_status"]?.string == "1")
    await sim.stop()
    await receiver.stop()
  }

  @Test func refundRequestsAreDeclinedGrantedAndReversed() async throws {
    let world = try await World(users: ["a"])
    let sim = world.sim
    let coins = try world.transactionID(
      try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"coins"}"#))
    let monthly = try world.transactionID(
      try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"pro.monthly"}"#))
    let lifetime = try world.transactionID(
      try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"lifetime"}"#))
    _ = try await world.received()

    // A consumable: CONSUMPTION_REQUEST with the reason, then declined.
    #expect(
      try await sim.fails(
        409, "POST", "\(app)/users/a/refund-decline", #"{"transaction_id":"\#(coins)"}"#
      ).contains("no refund request"))
    try await sim.ok(
      "POST", "\(app)/users/a/refund-request", #"{"transaction_id":"\#(coins)","reason":"LEGAL"}"#)
    try await sim.fails(
      409, "POST", "\(app)/users/a/refund-request", #"{"transaction_id":"\#(coins)"}"#)
    try await sim.ok("POST", "\(app)/users/a/refund-decline", #"{"transaction_id":"\#(coins)"}"#)
    var received = try await world.received()
    #expect(received.map(\.type) == ["CONSUMPTION_REQUEST", "REFUND_DECLINED"])
    #expect(received.first?.data?["consumptionRequestReason"]?.string == "LEGAL")
    #expect(received.first?.transaction?["transactionId"]?.string == coins)
    #expect(received.last?.transaction?["revocationDate"] == nil)

    // The subscription: a request, then a prorated refund of 40%.
    try await sim.ok("POST", "\(app)/users/a/refund-request", #"{"group_id":"pro"}"#)
    try await sim.fails(
      400, "POST", "\(app)/users/a/refund", #"{"group_id":"pro","revocation_type":"REFUND_PRORATED"}"#)
    try await sim.ok(
      "POST", "\(app)/users/a/refund",
      #"{"group_id":"pro","cancellation_reason":"1","revocation_type":"REFUND_PRORATED","revocation_percentage":40000}"#
    )
    received = try await world.received()
    #expect(received.map(\.type) == ["CONSUMPTION_REQUEST", "REFUND"])
    #expect(received.first?.data?["consumptionRequestReason"]?.string == "UNINTENDED_PURCHASE")
    #expect(received.first?.data?["status"] == .integer(1))
    let refund = try #require(received.last)
    #expect(refund.transaction?["transactionId"]?.string == monthly)
    #expect(refund.transaction?["revocationType"]?.string == "REFUND_PRORATED")
    #expect(refund.transaction?["revocationPercentage"] == .integer(40_000))
    #expect(refund.transaction?["revocationReason"] == .integer(1))
    #expect(refund.data?["status"] == .integer(5))
    let refundSigned = try #require(refund.transaction?["signedDate"]?.int64)

    // A full refund of the non-consumable.
    try await sim.ok("POST", "\(app)/users/a/refund", #"{"transaction_id":"\#(lifetime)"}"#)
    received = try await world.received()
    #expect(received.first?.transaction?["revocationType"]?.string == "REFUND_FULL")
    #expect(received.first?.transaction?["revocationPercentage"] == .integer(100_000))

    // The dispute is won: the subscription's transaction comes back without any revocation.
    try await sim.advance(#"{"days":1}"#)
    try await sim.fails(
      409, "POST", "\(app)/users/a/refund-reverse", #"{"transaction_id":"\#(coins)"}"#)
    try await sim.ok("POST", "\(app)/users/a/refund-reverse", #"{"transaction_id":"\#(monthly)"}"#)
    received = try await world.received()
    #expect(received.map(\.type) == ["REFUND_REVERSED"])
    let reversed = try #require(received.first?.transaction)
    #expect(reversed["transactionId"]?.string == monthly)
    for field in ["revocationDate", "revocationReason", "revocationType", "revocationPercentage"] {
      #expect(reversed[field] == nil, "\(field)")
    }
    #expect(try #require(reversed["signedDate"]?.int64) > refundSigned)
    #expect(received.first?.data?["status"] == .integer(1))
    // Access lasts until the period's end; auto-renew stays off, so it lapses then.
    try await sim.advance(#"{"days":31}"#)
    received = try await world.received()
    #expect(received.map(\.type) == ["EXPIRED/VOLUNTARY"])
    await world.stop()
  }

  @Test func familyRevocationsAreFamilyRevokeWithThePurchasersReason() async throws {
    let world = try await World(users: ["org", "kid", "org2", "kid2"])
    let sim = world.sim
    try await sim.ok("POST", "/control/users/org/family/members", #"{"user_id":"kid"}"#)
    try await sim.ok("POST", "/control/users/org2/family/members", #"{"user_id":"kid2"}"#)
    for user in ["org", "org2"] {
      try await sim.ok("POST", "\(app)/users/\(user)/purchase", #"{"product_id":"pro.monthly"}"#)
    }
    _ = try await world.received()
    try await sim.ok("POST", "\(app)/users/org/refund", #"{"group_id":"pro","cancellation_reason":"1"}"#)
    try await sim.ok("POST", "/control/users/kid2/family/leave")
    let received = try await world.received()
    #expect(received.map(\.type) == ["REFUND", "REVOKE", "REVOKE"])
    #expect(received[0].transaction?["revocationType"]?.string == "REFUND_FULL")
    let refundRevoke = try #require(received[1].transaction)
    #expect(refundRevoke["inAppOwnershipType"]?.string == "FAMILY_SHARED")
    #expect(refundRevoke["revocationType"]?.string == "FAMILY_REVOKE")
    #expect(refundRevoke["revocationReason"] == .integer(1))
    #expect(refundRevoke["revocationPercentage"] == nil)
    let leftRevoke = try #require(received[2].transaction)
    #expect(leftRevoke["revocationType"]?.string == "FAMILY_REVOKE")
    #expect(leftRevoke["revocationReason"] == .integer(0))
    #expect(received[2].data?["status"] == .integer(5))
    await world.stop()
  }

  @Test func upgradeIsImmediateDowngradeChangesTheRenewalProduct() async throws {
    let world = try await World(users: ["a"])
    let sim = world.sim
    let key = APIKey()
    try await key.register(sim)
    let monthly = try world.transactionID(
      try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"pro.monthly"}"#))
    try await sim.advance(#"{"days":10}"#)
    _ = try await world.received()

    // Upgrade (level 2 → 1): at once, a new transaction; the old one is marked isUpgraded.
    try await sim.ok("POST", "\(app)/users/a/change-product", #"{"product_id":"pro.yearly"}"#)
    var received = try await world.received()
    #expect(received.map(\.type) == ["DID_CHANGE_RENEWAL_PREF/UPGRADE"])
    let yearly = try #require(received.first?.transaction)
    #expect(yearly["productId"]?.string == "pro.yearly")
    #expect(yearly["purchaseDate"]?.int64 == startMs + 10 * dayMs)
    #expect(received.first?.renewal?["productId"]?.string == "pro.yearly")
    #expect(received.first?.renewal?["autoRenewProductId"]?.string == "pro.yearly")
    let (_, info, _) = try await api(
      "GET", sim.base, "/inApps/v1/transactions/\(monthly)", token: try key.token(withoutIat: true))
    let old = try verifiedPayload(info["signedTransactionInfo"]?.string ?? "", root: world.root)
    #expect(old["isUpgraded"] == .bool(true))
    #expect(old["revocationDate"] == nil)

    // Downgrade (level 1 → 3): the renewal product changes; the yearly goes on to its end.
    try await sim.ok("POST", "\(app)/users/a/change-product", #"{"product_id":"pro.quarterly"}"#)
    received = try await world.received()
    #expect(received.map(\.type) == ["DID_CHANGE_RENEWAL_PREF/DOWNGRADE"])
    #expect(received.first?.transaction?["productId"]?.string == "pro.yearly")
    #expect(received.first?.renewal?["productId"]?.string == "pro.yearly")
    #expect(received.first?.renewal?["autoRenewProductId"]?.string == "pro.quarterly")
    #expect(received.first?.renewal?["renewalPrice"] == .integer(24_990))
    try await sim.advance(#"{"days":366}"#)
    received = try await world.received()
    let renewal = try #require(received.first)
    #expect(renewal.type == "DID_RENEW")
    #expect(renewal.transaction?["productId"]?.string == "pro.quarterly")
    #expect(renewal.transaction?["purchaseDate"] == yearly["expiresDate"])
    #expect(renewal.renewal?["productId"]?.string == "pro.quarterly")
    await world.stop()
  }

  @Test func lapsedPaidCustomersAreEligibleForWinBackOffers() async throws {
    let catalog: (String) -> String = { url in
      """
      {"bundle_id":"\(bundle)","apple_app_id":6400000001,"shared_secret":"s3cret","notification_version":"v2",
       "notification_url":"\(url)","grace_period_days":16,
       "products":[
        {"product_id":"pro.monthly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M",
         "level":2,"price":9.99,"win_back_offer_ids":["wb.monthly.half","wb.shared"],
         "introductory_offer":{"type":"free_trial","duration":"P1W"}},
        {"product_id":"pro.yearly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1Y",
         "level":1,"price":99.99,"win_back_offer_ids":["wb.yearly","wb.shared"]}
       ]}
      """
    }
    let world = try await World(catalog: catalog, users: ["paid", "trial", "retry"])
    let sim = world.sim
    let key = APIKey()
    try await key.register(sim)
    try await sim.fails(
      400, "PATCH", app,
      #"{"products":[{"product_id":"x","type":"consumable","win_back_offer_ids":["a"]}]}"#)
    let paid = try world.transactionID(
      try await sim.ok("POST", "\(app)/users/paid/purchase", #"{"product_id":"pro.monthly"}"#))
    try await sim.ok(
      "POST", "\(app)/users/trial/purchase",
      #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    try await sim.ok("POST", "\(app)/users/retry/purchase", #"{"product_id":"pro.monthly"}"#)
    for user in ["paid", "trial"] {
      try await sim.ok("POST", "\(app)/users/\(user)/cancel-auto-renew", #"{"group_id":"pro"}"#)
    }
    try await sim.ok("POST", "/control/users/retry/billing-failure")
    let active = try await world.received()
    #expect(active.allSatisfy { $0.renewal?["eligibleWinBackOfferIds"] == nil })

    try await sim.advance(#"{"days":32}"#)
    let received = try await world.received()
    // The paid customer who lapsed: the lapsed product's offers first, then the group's others.
    let lapsed = try #require(
      received.first { $0.type == "EXPIRED/VOLUNTARY" && $0.payload["data"] != nil
        && $0.transaction?["transactionId"]?.string == paid })
    #expect(
      strings(lapsed.renewal?["eligibleWinBackOfferIds"]) == [
        "wb.monthly.half", "wb.shared", "wb.yearly",
      ])
    // A free trial that lapsed has paid nothing; billing retry and grace are not eligible.
    let trial = try #require(
      received.first { $0.type == "EXPIRED/VOLUNTARY" && $0.transaction?["transactionId"]?.string != paid })
    #expect(trial.renewal?["eligibleWinBackOfferIds"] == nil)
    let retry = try #require(received.first { $0.type == "DID_FAIL_TO_RENEW/GRACE_PERIOD" })
    #expect(retry.renewal?["eligibleWinBackOfferIds"] == nil)

    // Get All Subscription Statuses shows it too, until the customer subscribes again.
    let token = try key.token(withoutIat: true)
    var (_, statuses, _) = try await api("GET", sim.base, "/inApps/v1/subscriptions/\(paid)", token: token)
    var renewal = try verifiedPayload(
      statuses["data"]?[0]?["lastTransactions"]?[0]?["signedRenewalInfo"]?.string ?? "", root: world.root)
    #expect(strings(renewal["eligibleWinBackOfferIds"])?.count == 3)
    try await sim.ok("POST", "\(app)/users/paid/purchase", #"{"product_id":"pro.monthly"}"#)
    (_, statuses, _) = try await api("GET", sim.base, "/inApps/v1/subscriptions/\(paid)", token: token)
    renewal = try verifiedPayload(
      statuses["data"]?[0]?["lastTransactions"]?[0]?["signedRenewalInfo"]?.string ?? "", root: world.root)
    #expect(renewal["eligibleWinBackOfferIds"] == nil)
    await world.stop()
  }
}
