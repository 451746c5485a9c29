import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

/// The V2 test app with `max.annual`: a one-year subscription billed up front (99.99) or monthly
/// (8.99) with a 12-month commitment (App Store Server API 1.21).
func catalogWithCommitment(notificationURL: String?, rate: Double? = nil) -> String {
  let url = notificationURL.map { "\"\($0)\"" } ?? "null"
  let limit = rate.map { #","server_api_rate_limit":\#($0)"# } ?? ""
  return """
    {"bundle_id":"com.example.v2","apple_app_id":6400000001,"shared_secret":"s3cret","notification_version":"v2",
     "notification_url":\(url)\(limit),
     "products":[
      {"product_id":"max.annual","type":"auto_renewable","subscription_group_id":"max","duration":"P1Y",
       "price":99.99,"commitment_plan":{"price":8.99}},
      {"product_id":"pro.monthly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M","price":9.99},
      {"product_id":"lifetime","type":"non_consumable","price":49.99},
      {"product_id":"coins","type":"consumable","price":0.99}
     ]}
    """
}

/// Monthly subscriptions with a 12-month commitment: each month a transaction of its own
/// (`billingPlanType` `MONTHLY`, `commitmentInfo` period k of 12), billing through all 12
/// periods even when the customer cancels the commitment's renewal, then a new commitment or the
/// end (`EXPIRED`/`VOLUNTARY`), as Apple documents.
@Suite("Commitment plans")
struct CommitmentPlanTests {
  @Test("a commitment bills 12 months, cancelled or not, then renews or ends", arguments: [false, true])
  func commitment(renews: Bool) async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"c","environment":"production"}"#)
    let bought = try await sim.ok(
      "POST", "\(app)/users/c/purchase", #"{"product_id":"max.annual","billing_plan":"MONTHLY"}"#)
    let first = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    try await sim.advance(#"{"duration":"P2M"}"#)
    // Cancelling in month 3 turns off the commitment's renewal only.
    try await sim.ok("POST", "\(app)/users/c/cancel-auto-renew", #"{"group_id":"max"}"#)
    if renews {
      try await sim.ok("POST", "\(app)/users/c/enable-auto-renew", #"{"group_id":"max"}"#)
    }
    var signed = try await sim.ok("GET", "\(app)/users/c/signed-transactions")
    var renewal = try #require(signed["renewal_info"]?[0])
    #expect(renewal["autoRenewStatus"] == .integer(1))
    #expect(renewal["renewalBillingPlanType"]?.string == "MONTHLY")
    #expect(renewal["commitmentInfo"]?["commitmentAutoRenewStatus"] == .integer(renews ? 1 : 0))
    #expect(renewal["renewalPrice"] == .integer(8_990))

    let yearEnd = startMs + 365 * dayMs
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":\#(yearEnd + dayMs)}"#)
    try await sim.drain()
    signed = try await sim.ok("GET", "\(app)/users/c/signed-transactions")
    let transactions = try #require(signed["transactions"]?.arrayValue)
    #expect(transactions.count == (renews ? 13 : 12))
    for (index, transaction) in transactions.prefix(12).enumerated() {
      #expect(transaction["billingPlanType"]?.string == "MONTHLY")
      #expect(transaction["originalTransactionId"]?.string == first)
      #expect(transaction["price"] == .integer(8_990))
      let info = try #require(transaction["commitmentInfo"])
      #expect(info["billingPeriodNumber"] == .integer(Int64(index + 1)))
      #expect(info["totalBillingPeriods"] == .integer(12))
      #expect(info["commitmentExpiresDate"] == .integer(yearEnd))
      #expect(info["commitmentPrice"] == .integer(107_880))
    }
    // Each period is one calendar month; the 12th ends with the commitment.
    #expect(transactions[0]["expiresDate"] == .integer(startMs + 31 * dayMs))
    #expect(transactions[11]["expiresDate"] == .integer(yearEnd))
    renewal = try #require(signed["renewal_info"]?[0])
    let notifications = try receiver.notificationsV2(root: try await rootCertificate(sim))
    let names = notifications.map { $0.payload["notificationType"]?.string ?? "" }
    #expect(names.filter { $0 == "DID_RENEW" }.count == (renews ? 12 : 11))
    #expect(names.contains("DID_CHANGE_RENEWAL_STATUS"))
    if renews {
      let next = transactions[12]
      #expect(next["commitmentInfo"]?["billingPeriodNumber"] == .integer(1))
      #expect(next["commitmentInfo"]?["commitmentExpiresDate"] == .integer(startMs + 730 * dayMs))
      #expect(!names.contains("EXPIRED"))
    } else {
      let expired = try #require(notifications.last { $0.payload["notificationType"]?.string == "EXPIRED" })
      #expect(expired.payload["subtype"]?.string == "VOLUNTARY")
      #expect(expired.payload["signedDate"] == .integer(yearEnd))
      #expect(renewal["autoRenewStatus"] == .integer(0))
      #expect(renewal["expirationIntent"] == .integer(1))
    }
    await sim.stop()
    await receiver.stop()
  }

  @Test("a commitment followed by the up-front plan renews into a year billed at once")
  func commitmentThenUpfront() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"c","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/c/purchase", #"{"product_id":"max.annual","billing_plan":"MONTHLY"}"#)
    try await sim.ok(
      "POST", "\(app)/users/c/commitment-renewal-plan", #"{"group_id":"max","billing_plan":"BILLED_UPFRONT"}"#)
    try await sim.fails(
      409, "POST", "\(app)/users/c/commitment-renewal-plan", #"{"group_id":"max","billing_plan":"BILLED_UPFRONT"}"#)
    let yearEnd = startMs + 365 * dayMs
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":\#(yearEnd - dayMs)}"#)
    var signed = try await sim.ok("GET", "\(app)/users/c/signed-transactions")
    let last = try #require(signed["renewal_info"]?[0])
    #expect(last["renewalBillingPlanType"]?.string == "BILLED_UPFRONT")
    #expect(last["renewalPrice"] == .integer(99_990))
    #expect(last["commitmentInfo"]?["commitmentRenewalBillingPlanType"]?.string == "BILLED_UPFRONT")
    #expect(last["commitmentInfo"]?["commitmentRenewalPrice"] == .integer(99_990))
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":\#(yearEnd + dayMs)}"#)
    try await sim.drain()
    signed = try await sim.ok("GET", "\(app)/users/c/signed-transactions")
    let transactions = try #require(signed["transactions"]?.arrayValue)
    #expect(transactions.count == 13)
    let upfront = try #require(transactions.last)
    #expect(upfront["billingPlanType"]?.string == "BILLED_UPFRONT")
    #expect(upfront["commitmentInfo"] == nil)
    #expect(upfront["price"] == .integer(99_990))
    #expect(upfront["expiresDate"] == .integer(startMs + 730 * dayMs))
    #expect(signed["renewal_info"]?[0]?["commitmentInfo"] == nil)
    let types = try receiver.notificationsV2(root: try await rootCertificate(sim)).map {
      $0.payload["notificationType"]?.string ?? ""
    }
    #expect(types.contains("DID_CHANGE_RENEWAL_PREF"))
    await sim.stop()
    await receiver.stop()
  }

  @Test("the up-front plan of a product with both plans says BILLED_UPFRONT; a commitment refuses plan changes")
  func upfrontAndRefusals() async throws {
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: nil))
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"production"}"#)
    try await sim.ok("POST", "/control/users", #"{"user_id":"m","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/u/purchase", #"{"product_id":"max.annual"}"#)
    let signed = try await sim.ok("GET", "\(app)/users/u/signed-transactions")
    #expect(signed["transactions"]?[0]?["billingPlanType"]?.string == "BILLED_UPFRONT")
    #expect(signed["transactions"]?[0]?["commitmentInfo"] == nil)
    #expect(signed["renewal_info"]?[0]?["renewalBillingPlanType"]?.string == "BILLED_UPFRONT")
    try await sim.fails(
      409, "POST", "\(app)/users/m/purchase", #"{"product_id":"pro.monthly","billing_plan":"MONTHLY"}"#)
    try await sim.ok("POST", "\(app)/users/m/purchase", #"{"product_id":"max.annual","billing_plan":"MONTHLY"}"#)
    try await sim.fails(409, "POST", "\(app)/users/m/purchase", #"{"product_id":"max.annual"}"#)
    try await sim.fails(
      400, "PATCH", app,
      #"{"products":[{"product_id":"bad","type":"auto_renewable","subscription_group_id":"g","duration":"P1M","commitment_plan":{"price":1}}]}"#
    )
    await sim.stop()
  }
}
