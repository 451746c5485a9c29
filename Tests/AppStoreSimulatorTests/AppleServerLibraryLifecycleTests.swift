import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

/// Apple's App Store Server Library decodes what the simulator models beyond purchases and
/// renewals: price increases (`priceIncreaseStatus`, PRICE_INCREASE), refund requests
/// (CONSUMPTION_REQUEST with its reason, REFUND_DECLINED), prorated refunds and their reversal
/// (`revocationType`, `revocationPercentage`, REFUND_REVERSED), Family Sharing revocations
/// (`FAMILY_REVOKE`), upgrades (`isUpgraded`) and win-back eligibility
/// (`eligibleWinBackOfferIds`), each as a typed value of the library's models.
@Suite("Apple's App Store Server Library: modelled events")
struct AppleServerLibraryLifecycleTests {
  @Test func libraryDecodesEveryNewFieldAndNotificationType() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "apple-library-events-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogV2(notificationURL: receiver.url))
    try await sim.ok(
      "PATCH", app,
      #"{"products":[{"product_id":"pro.monthly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M","level":2,"price":9.99,"family_shareable":true,"win_back_offer_ids":["wb.half"]}]}"#
    )
    let key = APIKey()
    try await key.register(sim)
    for user in ["w", "q", "r", "org", "kid"] {
      try await sim.ok(
        "POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
    }
    // w: a paid month, cancelled: lapses eligible for the win-back offer.
    let bought = try await sim.ok("POST", "\(app)/users/w/purchase", #"{"product_id":"pro.monthly"}"#)
    let lapsed = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    try await sim.ok("POST", "\(app)/users/w/cancel-auto-renew", #"{"group_id":"pro"}"#)
    // q: a price increase, consented; then an upgrade.
    let upgradedMonthly = try #require(
      try await sim.ok("POST", "\(app)/users/q/purchase", #"{"product_id":"pro.monthly"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    try await sim.ok("POST", "\(app)/products/pro.monthly/price-increase", #"{"price":12.99}"#)
    try await sim.ok("POST", "\(app)/users/q/price-increase-consent", #"{"group_id":"pro"}"#)
    try await sim.ok("POST", "\(app)/users/q/change-product", #"{"product_id":"pro.yearly"}"#)
    // r: a consumable's refund request declined, a second one granted (prorated), reversed.
    let coins = try #require(
      try await sim.ok("POST", "\(app)/users/r/purchase", #"{"product_id":"coins"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    try await sim.ok(
      "POST", "\(app)/users/r/refund-request",
      #"{"transaction_id":"\#(coins)","reason":"FULFILLMENT_ISSUE"}"#)
    try await sim.ok("POST", "\(app)/users/r/refund-decline", #"{"transaction_id":"\#(coins)"}"#)
    try await sim.ok("POST", "\(app)/users/r/refund-request", #"{"transaction_id":"\#(coins)"}"#)
    try await sim.ok(
      "POST", "\(app)/users/r/refund",
      #"{"transaction_id":"\#(coins)","revocation_type":"REFUND_PRORATED","revocation_percentage":67932}"#
    )
    try await sim.advance(#"{"hours":1}"#)
    try await sim.ok("POST", "\(app)/users/r/refund-reverse", #"{"transaction_id":"\#(coins)"}"#)
    // kid: family access, revoked when the kid leaves.
    try await sim.ok("POST", "/control/users/org/family/members", #"{"user_id":"kid"}"#)
    try await sim.ok("POST", "\(app)/users/org/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "/control/users/kid/family/leave")
    try await sim.advance(#"{"days":32}"#)
    try await sim.drain()
    let payloads = receiver.bodies.compactMap { $0["signedPayload"]?.stringValue }

    let decoded = try await AppleServerLibraryTests.Peer(sim: sim, key: key, directory: directory)
      .run(transactionID: lapsed, signedPayloads: payloads)
    let notifications = try #require(decoded["notifications"]?.arrayValue)
    #expect(notifications.count == payloads.count)
    #expect(decoded["notification_history"]?.arrayValue?.count == payloads.count)
    func first(_ type: String, _ subtype: String? = nil) -> JSONValue? {
      notifications.first {
        $0["notificationType"]?.string == type && $0["subtype"]?.string == subtype
      }
    }
    #expect(first("PRICE_INCREASE", "PENDING")?["renewal"]?["priceIncreaseStatus"] == .integer(0))
    #expect(first("PRICE_INCREASE", "ACCEPTED")?["renewal"]?["priceIncreaseStatus"] == .integer(1))
    #expect(first("PRICE_INCREASE", "ACCEPTED")?["renewal"]?["renewalPrice"] == .integer(12_990))
    let request = first("CONSUMPTION_REQUEST")
    #expect(request?["data"]?["consumptionRequestReason"]?.string == "FULFILLMENT_ISSUE")
    #expect(first("REFUND_DECLINED")?["transaction"]?["transactionId"]?.string == coins)
    let refund = first("REFUND")?["transaction"]
    #expect(refund?["revocationType"]?.string == "REFUND_PRORATED")
    #expect(refund?["revocationPercentage"] == .integer(67_932))
    let reversed = first("REFUND_REVERSED")?["transaction"]
    #expect(reversed?["transactionId"]?.string == coins)
    #expect(reversed?["revocationDate"] == nil && reversed?["revocationType"] == nil)
    #expect(first("REVOKE")?["transaction"]?["revocationType"]?.string == "FAMILY_REVOKE")
    #expect(first("DID_CHANGE_RENEWAL_PREF", "UPGRADE")?["transaction"]?["productId"]?.string == "pro.yearly")
    let expired = try #require(
      notifications.first {
        $0["notificationType"]?.string == "EXPIRED" && $0["transaction"]?["transactionId"]?.string == lapsed
      })
    #expect(strings(expired["renewal"]?["eligibleWinBackOfferIds"]) == ["wb.half"])
    let status = try #require(decoded["statuses"]?[0])
    #expect(status["status"] == .integer(2))
    #expect(strings(status["renewal"]?["eligibleWinBackOfferIds"]) == ["wb.half"])
    // q's history: the upgraded monthly has `isUpgraded`, no revocation.
    let history = try await AppleServerLibraryTests.Peer(sim: sim, key: key, directory: directory)
      .run(transactionID: upgradedMonthly, signedPayloads: [])
    let monthly = try #require(
      history["history"]?.arrayValue?.first { $0["transactionId"]?.string == upgradedMonthly })
    #expect(monthly["isUpgraded"] == .bool(true))
    #expect(monthly["revocationDate"] == nil)
    await sim.stop()
    await receiver.stop()
  }
}
