import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

private let app = "/control/apps/com.example.app"

private func latest(_ verify: JSONValue) -> JSONValue? { verify["latest_receipt_info"]?[0] }

@Suite("AppStoreSimulator lifecycles over HTTP")
struct LifecycleTests {
  @Test func trialRenewBillingFailureInGraceThenRecover() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(graceDays: 16, notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"alice","environment":"production"}"#)

    let bought = try await sim.ok(
      "POST", "\(app)/users/alice/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    let trial = try #require(bought["transactions"]?[0])
    #expect(trial["is_trial_period"]?.string == "true")
    #expect(trial["is_in_intro_offer_period"]?.string == "false")
    #expect(trial["purchase_date_ms"]?.string == "1767225600000")
    #expect(trial["expires_date_ms"]?.string == "1767830400000")
    #expect(trial["purchase_date"]?.string == "2026-01-01 00:00:00 Etc/GMT")
    #expect(trial["purchase_date_pst"]?.string == "2025-12-31 16:00:00 America/Los_Angeles")
    #expect(bought["notifications"]?[0]?["notification_type"]?.string == "INITIAL_BUY")
    let receipt = try #require(bought["receipt"]?.string)

    // The trial ends after a week; the first paid month starts exactly then.
    let renewed = try await sim.advance(#"{"days":7}"#)
    let paid = try #require(renewed["transactions"]?[0])
    #expect(renewed["transactions"]?.arrayValue?.count == 1)
    #expect(paid["is_trial_period"]?.string == "false")
    #expect(paid["purchase_date_ms"]?.string == "1767830400000")
    #expect(paid["expires_date_ms"]?.string == "1770508800000")  // 2026-02-08
    #expect(paid["original_transaction_id"] == trial["original_transaction_id"])

    // The card fails; at the next renewal Apple enters billing retry with a 16-day grace period.
    try await sim.ok("POST", "/control/users/alice/billing-failure")
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":1770508800000}"#)
    var verify = try await sim.verify(receipt)
    #expect(verify["status"]?.int64 == 0)
    var pending = try #require(verify["pending_renewal_info"]?[0])
    #expect(pending["is_in_billing_retry_period"]?.string == "1")
    #expect(pending["grace_period_expires_date_ms"]?.string == "1771891200000")  // + 16 days
    #expect(pending["auto_renew_status"]?.string == "1")
    #expect(latest(verify)?["transaction_id"] == paid["transaction_id"])

    // Recovered inside the grace period: the renewal keeps its date, no paid day is lost.
    try await sim.advance(#"{"days":5}"#)
    let recovered = try await sim.ok("POST", "/control/users/alice/billing-recover")
    let renewal = try #require(recovered["transactions"]?[0])
    #expect(renewal["purchase_date_ms"]?.string == "1770508800000")
    #expect(renewal["expires_date_ms"]?.string == "1772928000000")  // 2026-03-08
    #expect(recovered["notifications"]?[0]?["notification_type"]?.string == "DID_RECOVER")
    verify = try await sim.verify(receipt)
    pending = try #require(verify["pending_renewal_info"]?[0])
    #expect(pending["is_in_billing_retry_period"] == nil)
    #expect(pending["grace_period_expires_date_ms"] == nil)
    #expect(verify["latest_receipt_info"]?.arrayValue?.count == 3)
    // The receipt as issued at purchase lists only the trial in `in_app`.
    #expect(verify["receipt"]?["in_app"]?.arrayValue?.count == 1)

    try await sim.drain()
    #expect(receiver.types == ["INITIAL_BUY", "DID_RENEW", "DID_FAIL_TO_RENEW", "DID_RECOVER"])
    for body in receiver.bodies {
      #expect(body["password"]?.string == "s3cret")
      #expect(body["environment"]?.string == "PROD")
      #expect(body["bid"]?.string == "com.example.app")
      #expect(body["auto_renew_status"]?.string == "true")
      #expect(body["unified_receipt"]?["status"]?.int64 == 0)
      #expect(body["unified_receipt"]?["environment"]?.string == "Production")
      #expect(body["unified_receipt"]?["latest_receipt"]?.string?.isEmpty == false)
    }
    let failed = receiver.bodies[2]["unified_receipt"]?["pending_renewal_info"]?[0]
    #expect(failed?["grace_period_expires_date_ms"]?.string == "1771891200000")
    await sim.stop()
    await receiver.stop()
  }

  @Test func billingFailureWithoutGraceShiftsRenewalDateOrExpiresAfterRetry() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(graceDays: 0))
    for user in ["u1", "u2"] {
      try await sim.ok("POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
      try await sim.ok("POST", "\(app)/users/\(user)/purchase", #"{"product_id":"pro.monthly"}"#)
      try await sim.ok("POST", "/control/users/\(user)/billing-failure")
    }
    // 2026-02-01: both renewals fail; no grace period.
    let failed = try await sim.ok("POST", "/control/clock/set", #"{"now_ms":1769904000000}"#)
    #expect(failed["notifications"]?.arrayValue?.compactMap { $0["notification_type"]?.string }
      == ["DID_FAIL_TO_RENEW", "DID_FAIL_TO_RENEW"])
    let receipt = try #require(try await sim.ok("GET", "\(app)/users/u1/receipt")["receipt"]?.string)
    var pending = try #require(try await sim.verify(receipt)["pending_renewal_info"]?[0])
    #expect(pending["is_in_billing_retry_period"]?.string == "1")
    #expect(pending["grace_period_expires_date_ms"] == nil)

    // u1 recovers ten days later: the new period starts at recovery.
    try await sim.advance(#"{"days":10}"#)
    let recovered = try await sim.ok("POST", "/control/users/u1/billing-recover")
    #expect(recovered["transactions"]?[0]?["purchase_date_ms"]?.string == "1770768000000")  // 2026-02-11

    // u2 never recovers: Apple gives up after 60 days, expiration_intent "2".
    try await sim.advance(#"{"days":51}"#)
    let u2 = try #require(try await sim.ok("GET", "\(app)/users/u2/receipt")["receipt"]?.string)
    pending = try #require(try await sim.verify(u2)["pending_renewal_info"]?[0])
    #expect(pending["is_in_billing_retry_period"]?.string == "0")
    #expect(pending["expiration_intent"]?.string == "2")
    let late = try await sim.ok("POST", "/control/users/u2/billing-recover")
    #expect(late["transactions"]?.arrayValue?.isEmpty == true)

    // Resubscribing keeps the original transaction id; the intro offer was never used, so it is offered.
    let again = try await sim.ok(
      "POST", "\(app)/users/u2/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    #expect(again["notifications"]?[0]?["notification_type"]?.string == "INTERACTIVE_RENEWAL")
    let verify = try await sim.verify(u2)
    #expect(latest(verify)?["original_transaction_id"] == verify["latest_receipt_info"]?[1]?["original_transaction_id"])
    #expect(latest(verify)?["is_trial_period"]?.string == "true")
    await sim.stop()
  }

  @Test func upgradeIsImmediateDowngradeWaitsForRenewal() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"bob","environment":"production"}"#)
    let first = try await sim.ok("POST", "\(app)/users/bob/purchase", #"{"product_id":"pro.monthly"}"#)
    let monthlyID = try #require(first["transactions"]?[0]?["transaction_id"]?.string)
    try await sim.advance(#"{"days":10}"#)

    // Upgrade: immediate; the old transaction is marked upgraded and cancelled now.
    let up = try await sim.ok("POST", "\(app)/users/bob/change-product", #"{"product_id":"pro.yearly"}"#)
    let changed = try #require(up["transactions"]?.arrayValue)
    #expect(changed.count == 2)
    #expect(changed[0]["transaction_id"]?.string == monthlyID)
    #expect(changed[0]["is_upgraded"]?.string == "true")
    #expect(changed[0]["cancellation_date_ms"]?.string == "1768089600000")
    #expect(changed[1]["product_id"]?.string == "pro.yearly")
    #expect(changed[1]["purchase_date_ms"]?.string == "1768089600000")
    #expect(changed[1]["expires_date_ms"]?.string == "1799625600000")  // 2027-01-11
    #expect(up["notifications"]?[0]?["notification_type"]?.string == "INTERACTIVE_RENEWAL")

    // Downgrade: nothing changes until the renewal, which then switches product.
    let down = try await sim.ok("POST", "\(app)/users/bob/change-product", #"{"product_id":"pro.monthly"}"#)
    #expect(down["transactions"]?.arrayValue?.isEmpty == true)
    #expect(down["notifications"]?[0]?["notification_type"]?.string == "DID_CHANGE_RENEWAL_PREF")
    let receipt = try #require(down["receipt"]?.string)
    let pending = try #require(try await sim.verify(receipt)["pending_renewal_info"]?[0])
    #expect(pending["product_id"]?.string == "pro.yearly")
    #expect(pending["auto_renew_product_id"]?.string == "pro.monthly")
    let renewed = try await sim.ok("POST", "\(app)/users/bob/renew", #"{"group_id":"pro"}"#)
    #expect(renewed["transactions"]?[0]?["product_id"]?.string == "pro.monthly")
    #expect(renewed["transactions"]?[0]?["purchase_date_ms"]?.string == "1799625600000")
    #expect(renewed["notifications"]?[0]?["notification_type"]?.string == "DID_RENEW")

    // Crossgrade to the same duration is immediate; to another duration waits.
    let cross = try await sim.ok("POST", "\(app)/users/bob/change-product", #"{"product_id":"pro.monthly.b"}"#)
    #expect(cross["notifications"]?[0]?["notification_type"]?.string == "INTERACTIVE_RENEWAL")
    #expect(cross["transactions"]?.arrayValue?.count == 2)
    let later = try await sim.ok("POST", "\(app)/users/bob/change-product", #"{"product_id":"pro.quarterly"}"#)
    #expect(later["notifications"]?[0]?["notification_type"]?.string == "DID_CHANGE_RENEWAL_PREF")
    #expect(later["transactions"]?.arrayValue?.isEmpty == true)

    try await sim.fails(409, "POST", "\(app)/users/bob/change-product", #"{"product_id":"pro.quarterly"}"#)
    try await sim.fails(404, "POST", "\(app)/users/bob/change-product", #"{"product_id":"nope"}"#)
    try await sim.fails(400, "POST", "\(app)/users/bob/change-product", #"{"product_id":"lifetime"}"#)
    await sim.stop()
  }

  @Test func cancelAndReenableAutoRenew() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"kim","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/kim/purchase", #"{"product_id":"pro.monthly"}"#)
    let off = try await sim.ok("POST", "\(app)/users/kim/cancel-auto-renew", #"{"group_id":"pro"}"#)
    #expect(off["notifications"]?[0]?["notification_type"]?.string == "DID_CHANGE_RENEWAL_STATUS")
    try await sim.fails(409, "POST", "\(app)/users/kim/cancel-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.ok("POST", "\(app)/users/kim/enable-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.ok("POST", "\(app)/users/kim/cancel-auto-renew", #"{"group_id":"pro"}"#)
    let lapsed = try await sim.advance(#"{"days":40}"#)
    #expect(lapsed["transactions"]?.arrayValue?.isEmpty == true)
    let current = try await sim.ok("GET", "\(app)/users/kim/receipt")
    let receipt = try #require(current["receipt"]?.string)
    let pending = try #require(try await sim.verify(receipt)["pending_renewal_info"]?[0])
    #expect(pending["auto_renew_status"]?.string == "0")
    #expect(pending["expiration_intent"]?.string == "1")
    try await sim.fails(409, "POST", "\(app)/users/kim/enable-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.fails(404, "POST", "\(app)/users/kim/cancel-auto-renew", #"{"group_id":"lite"}"#)
    await sim.stop()
  }

  @Test func refundCancelsTheSubscriptionAndRevokesFamilyAccess() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(notificationURL: receiver.url))
    for user in ["carol", "dave", "erin"] {
      try await sim.ok("POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
    }
    try await sim.ok("POST", "/control/users/carol/family/members", #"{"user_id":"dave"}"#)
    try await sim.ok("POST", "/control/users/carol/family/members", #"{"user_id":"erin"}"#)
    let bought = try await sim.ok("POST", "\(app)/users/carol/purchase", #"{"product_id":"pro.monthly"}"#)
    let owned = try #require(bought["transactions"]?.arrayValue)
    #expect(owned.count == 3)
    #expect(owned.map { $0["in_app_ownership_type"]?.string } == ["PURCHASED", "FAMILY_SHARED", "FAMILY_SHARED"])
    #expect(Set(owned.compactMap { $0["original_transaction_id"]?.string }).count == 3)
    #expect(Set(owned.compactMap { $0["expires_date_ms"]?.string }).count == 1)

    let renewed = try await sim.advance(#"{"days":31}"#)
    #expect(renewed["transactions"]?.arrayValue?.count == 3)

    let refunded = try await sim.ok(
      "POST", "\(app)/users/carol/refund", #"{"group_id":"pro","cancellation_reason":"1"}"#)
    let types = refunded["notifications"]?.arrayValue?.map {
      "\($0["user_id"]?.string ?? ""):\($0["notification_type"]?.string ?? "")"
    }
    #expect(types == ["carol:CANCEL", "dave:REVOKE", "erin:REVOKE"])
    let cancelled = try #require(refunded["transactions"]?.arrayValue)
    #expect(cancelled.count == 3)
    #expect(cancelled[0]["cancellation_reason"]?.string == "1")
    // Apple: when the purchaser is refunded, the members' revocation reason matches the purchaser's.
    #expect(cancelled[1]["cancellation_reason"]?.string == "1")
    #expect(cancelled.allSatisfy { $0["cancellation_date_ms"]?.string == "1769904000000" })

    let daveReceipt = try #require(try await sim.ok("GET", "\(app)/users/dave/receipt")["receipt"]?.string)
    let dave = try await sim.verify(daveReceipt)
    #expect(latest(dave)?["in_app_ownership_type"]?.string == "FAMILY_SHARED")
    #expect(latest(dave)?["cancellation_date_ms"]?.string == "1769904000000")

    // Nothing renews after the refund.
    let after = try await sim.advance(#"{"days":62}"#)
    #expect(after["transactions"]?.arrayValue?.isEmpty == true)
    try await sim.fails(409, "POST", "\(app)/users/carol/refund", #"{"group_id":"pro"}"#)
    let memberTransaction = try #require(cancelled[1]["transaction_id"]?.string)
    try await sim.fails(409, "POST", "\(app)/users/dave/refund", #"{"transaction_id":"\#(memberTransaction)"}"#)

    try await sim.drain()
    #expect(receiver.types.filter { $0 == "REVOKE" }.count == 2)
    #expect(receiver.types.filter { $0 == "DID_RENEW" }.count == 3)
    await sim.stop()
    await receiver.stop()
  }

  @Test func familySharingLimitsLeavingAndStoppingSharing() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"org","environment":"sandbox"}"#)
    for index in 1...6 {
      try await sim.ok("POST", "/control/users", #"{"user_id":"m\#(index)","environment":"sandbox"}"#)
    }
    try await sim.ok("POST", "/control/users", #"{"user_id":"prod","environment":"production"}"#)
    for index in 1...4 {
      try await sim.ok("POST", "/control/users/org/family/members", #"{"user_id":"m\#(index)"}"#)
    }
    try await sim.fails(409, "POST", "/control/users/org/family/members", #"{"user_id":"prod"}"#)
    try await sim.fails(409, "POST", "/control/users/m1/family/members", #"{"user_id":"m6"}"#)
    try await sim.fails(409, "POST", "/control/users/org/family/members", #"{"user_id":"m1"}"#)

    let bought = try await sim.ok("POST", "\(app)/users/org/purchase", #"{"product_id":"pro.yearly"}"#)
    #expect(bought["transactions"]?.arrayValue?.count == 5)
    // A member who joins later gets the shared subscription at once.
    let joined = try await sim.ok("POST", "/control/users/org/family/members", #"{"user_id":"m5"}"#)
    #expect(joined["transactions"]?[0]?["in_app_ownership_type"]?.string == "FAMILY_SHARED")
    #expect(joined["notifications"]?[0]?["notification_type"]?.string == "INITIAL_BUY")
    let full = try await sim.fails(409, "POST", "/control/users/org/family/members", #"{"user_id":"m6"}"#)
    #expect(full.contains("5"))

    let left = try await sim.ok("POST", "/control/users/m1/family/leave")
    #expect(left["notifications"]?.arrayValue?.map { $0["user_id"]?.string } == ["m1"])
    #expect(left["notifications"]?[0]?["notification_type"]?.string == "REVOKE")
    let removed = try await sim.ok("DELETE", "/control/users/org/family/members/m2")
    #expect(removed["notifications"]?[0]?["user_id"]?.string == "m2")
    try await sim.fails(404, "DELETE", "/control/users/m3/family/members/m4")

    let stopped = try await sim.ok("POST", "\(app)/users/org/stop-family-sharing", #"{"group_id":"pro"}"#)
    #expect(stopped["notifications"]?.arrayValue?.compactMap { $0["user_id"]?.string }.sorted() == ["m3", "m4", "m5"])
    #expect(stopped["transactions"]?.arrayValue?.allSatisfy { $0["cancellation_date_ms"] != nil } == true)

    // The organizer keeps renewing; revoked members do not.
    let renewed = try await sim.advance(#"{"minutes":61}"#)
    let owners = renewed["transactions"]?.arrayValue?.compactMap { $0["user_id"]?.string }
    #expect(owners == ["org"])
    await sim.stop()
  }

  @Test func sandboxCompressesPeriodsAndStopsAfterSixRenewals() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"s1","environment":"sandbox"}"#)
    let bought = try await sim.ok("POST", "\(app)/users/s1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    let trial = try #require(bought["transactions"]?[0])
    #expect(trial["expires_date_ms"]?.int64 == Int64(1_767_225_600_000 + 3 * 60_000))  // a week → 3 minutes
    let receipt = try #require(bought["receipt"]?.string)

    let hour = try await sim.advance(#"{"hours":1}"#)
    let renewals = try #require(hour["transactions"]?.arrayValue)
    #expect(renewals.count == 6)
    for (index, renewal) in renewals.enumerated() {
      let start: Int64 = 1_767_225_600_000 + 3 * 60_000 + Int64(index) * 5 * 60_000
      #expect(renewal["purchase_date_ms"]?.int64 == start)
      #expect(renewal["expires_date_ms"]?.int64 == start + 5 * 60_000)  // a month → 5 minutes
    }
    let verify = try await sim.verify(receipt, environment: "sandbox")
    #expect(verify["environment"]?.string == "Sandbox")
    #expect(verify["receipt"]?["receipt_type"]?.string == "ProductionSandbox")
    let pending = try #require(verify["pending_renewal_info"]?[0])
    #expect(pending["auto_renew_status"]?.string == "0")
    #expect(pending["expiration_intent"]?.string == "1")

    try await sim.ok("POST", "/control/users", #"{"user_id":"s2","environment":"sandbox"}"#)
    let yearly = try await sim.ok("POST", "\(app)/users/s2/purchase", #"{"product_id":"pro.yearly"}"#)
    let now = try #require(yearly["now_ms"]?.int64)
    #expect(yearly["transactions"]?[0]?["expires_date_ms"]?.int64 == now + 3_600_000)
    let weekly = try await sim.ok("POST", "\(app)/users/s2/purchase", #"{"product_id":"lite.weekly","offer":{"type":"introductory"}}"#)
    #expect(weekly["transactions"]?[0]?["is_in_intro_offer_period"]?.string == "true")
    let later = try await sim.advance(#"{"minutes":12}"#)
    let intro = later["transactions"]?.arrayValue?.filter { $0["product_id"]?.string == "lite.weekly" }
      .map { $0["is_in_intro_offer_period"]?.string }
    #expect(intro == ["true", "true", "false", "false"])  // pay as you go: 3 intro periods of 3 minutes
    await sim.stop()
  }

  @Test func offersFollowAppleEligibility() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"o1","environment":"production"}"#)
    let noPromo = try await sim.fails(
      409, "POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"promotional","id":"comeback"}}"#)
    #expect(noPromo.contains("existing or lapsed"))
    try await sim.fails(404, "POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"offer_code","ref_name":"NOPE"}}"#)
    try await sim.fails(409, "POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly.b","offer":{"type":"introductory"}}"#)

    let code = try await sim.ok(
      "POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"offer_code","ref_name":"SUMMER"}}"#)
    let redeemed = try #require(code["transactions"]?[0])
    #expect(redeemed["offer_code_ref_name"]?.string == "SUMMER")
    #expect(redeemed["is_trial_period"]?.string == "false")
    #expect(redeemed["expires_date_ms"]?.string == "1769904000000")
    try await sim.ok("POST", "\(app)/users/o1/expire", #"{"group_id":"pro"}"#)

    // Offer codes do not use up the introductory offer.
    let intro = try await sim.ok("POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.yearly","offer":{"type":"introductory"}}"#)
    #expect(intro["transactions"]?[0]?["is_in_intro_offer_period"]?.string == "true")
    #expect(intro["transactions"]?[0]?["expires_date_ms"]?.string == "1775001600000")  // pay up front P3M → 2026-04-01
    try await sim.ok("POST", "\(app)/users/o1/expire", #"{"group_id":"pro","expiration_intent":"3"}"#)
    let used = try await sim.fails(
      409, "POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    #expect(used.contains("not eligible"))

    // A lapsed subscriber may redeem a promotional offer: two discounted months, then full price.
    try await sim.ok("POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"promotional","id":"comeback"}}"#)
    let months = try await sim.advance(#"{"days":62}"#)
    let promos = months["transactions"]?.arrayValue?.map { $0["promotional_offer_id"]?.string }
    #expect(promos == ["comeback", nil])
    // Redeemed during an active subscription, a promotional offer applies at the next renewal.
    let next = try await sim.ok("POST", "\(app)/users/o1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"promotional","id":"comeback"}}"#)
    #expect(next["transactions"]?.arrayValue?.isEmpty == true)
    let receipt = try #require(next["receipt"]?.string)
    #expect(try await sim.verify(receipt)["pending_renewal_info"]?[0]?["promotional_offer_id"]?.string == "comeback")
    let renewed = try await sim.ok("POST", "\(app)/users/o1/renew", #"{"group_id":"pro"}"#)
    #expect(renewed["transactions"]?[0]?["promotional_offer_id"]?.string == "comeback")
    await sim.stop()
  }

  @Test func nonSubscriptionPurchasesAndRefunds() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"n1","environment":"production"}"#)
    let life = try await sim.ok("POST", "\(app)/users/n1/purchase", #"{"product_id":"lifetime"}"#)
    #expect(life["transactions"]?[0]?["expires_date_ms"] == nil)
    try await sim.fails(409, "POST", "\(app)/users/n1/purchase", #"{"product_id":"lifetime"}"#)
    try await sim.ok("POST", "\(app)/users/n1/purchase", #"{"product_id":"coins"}"#)
    let coins = try await sim.ok("POST", "\(app)/users/n1/purchase", #"{"product_id":"coins"}"#)
    try await sim.fails(400, "POST", "\(app)/users/n1/purchase", #"{"product_id":"coins","offer":{"type":"introductory"}}"#)
    let receipt = try #require(coins["receipt"]?.string)
    // No auto-renewables: no password needed, no latest_receipt_info.
    let verify = try await sim.verify(receipt, password: nil)
    #expect(verify["status"]?.int64 == 0)
    #expect(verify["receipt"]?["in_app"]?.arrayValue?.count == 3)
    #expect(verify["latest_receipt_info"] == nil)
    let id = try #require(life["transactions"]?[0]?["transaction_id"]?.string)
    let refund = try await sim.ok("POST", "\(app)/users/n1/refund", #"{"transaction_id":"\#(id)"}"#)
    #expect(refund["notifications"]?[0]?["notification_type"]?.string == "REFUND")
    #expect(try await sim.verify(receipt, password: nil)["receipt"]?["in_app"]?[0]?["cancellation_date_ms"] != nil)
    try await sim.drain()
    #expect(receiver.types == ["REFUND"])
    await sim.stop()
    await receiver.stop()
  }

  @Test func runsAreDeterministic() async throws {
    func script() async throws -> String {
      let sim = try Sim()
      try await sim.ok("POST", "/control/apps", catalog())
      try await sim.ok("POST", "/control/users", #"{"environment":"production"}"#)
      let bought = try await sim.ok("POST", "\(app)/users/user-1/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
      try await sim.advance(#"{"duration":"P3M"}"#)
      try await sim.ok("POST", "\(app)/users/user-1/change-product", #"{"product_id":"pro.yearly"}"#)
      let verify = try await sim.verify(try #require(bought["receipt"]?.string))
      await sim.stop()
      return verify.serialized()
    }
    let first = try await script()
    #expect(try await script() == first)
    #expect(first.contains("\"transaction_id\":\"2000000000000001\""))
  }
}
