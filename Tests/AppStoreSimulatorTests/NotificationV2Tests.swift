import AppStoreSignedData
import AppStoreSimulator
import Foundation
import SubscriptionDomain
import SubstatusJSON
import Testing

private let bundle = "com.example.v2"
private let app = "/control/apps/\(bundle)"

private func typeAndSubtype(_ notification: NotificationV2) -> String {
  notification.rawNotificationType + (notification.rawSubtype.map { "/" + $0 } ?? "")
}

@Suite("App Store Server Notifications V2")
struct NotificationV2Tests {
  @Test func lifecycleEventsMapToV2TypesAndSubtypes() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok(
      "POST", "/control/apps", catalogV2(notificationURL: receiver.url, graceDays: 16))
    for user in ["a", "b", "kid"] {
      try await sim.ok(
        "POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
    }
    try await sim.ok("POST", "/control/users/b/family/members", #"{"user_id":"kid"}"#)
    let root = try await rootCertificate(sim)

    // a: trial, renewal, auto-renew off and on, downgrade and its cancellation, upgrade,
    // promotional offer for the next renewal, billing failure in grace, grace end, recovery,
    // refund, resubscribe, voluntary expiry.
    try await sim.ok(
      "POST", "\(app)/users/a/purchase",
      #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    try await sim.advance(#"{"days":7}"#)
    try await sim.ok("POST", "\(app)/users/a/cancel-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.ok("POST", "\(app)/users/a/enable-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.ok("POST", "\(app)/users/a/change-product", #"{"product_id":"pro.quarterly"}"#)
    try await sim.ok("POST", "\(app)/users/a/change-product", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok(
      "POST", "\(app)/users/a/purchase",
      #"{"product_id":"pro.monthly","offer":{"type":"promotional","id":"comeback"}}"#)
    try await sim.ok("POST", "/control/users/a/billing-failure")
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":\#(AppleTimeTestValues.feb8)}"#)
    try await sim.advance(#"{"days":17}"#)
    try await sim.ok("POST", "/control/users/a/billing-recover")
    try await sim.ok("POST", "\(app)/users/a/change-product", #"{"product_id":"pro.yearly"}"#)
    try await sim.ok("POST", "\(app)/users/a/refund", #"{"group_id":"pro"}"#)
    try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "\(app)/users/a/cancel-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.advance(#"{"days":40}"#)
    try await sim.ok("POST", "\(app)/users/a/purchase", #"{"product_id":"lifetime"}"#)
    try await sim.drain()
    let received = try receiver.notificationsV2(root: root)
    #expect(
      received.map { typeAndSubtype($0.notification) } == [
        "SUBSCRIBED/INITIAL_BUY",
        "DID_RENEW",
        "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED",
        "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED",
        "DID_CHANGE_RENEWAL_PREF/DOWNGRADE",
        "DID_CHANGE_RENEWAL_PREF",
        "OFFER_REDEEMED",
        "DID_FAIL_TO_RENEW/GRACE_PERIOD",
        "GRACE_PERIOD_EXPIRED",
        "DID_RENEW/BILLING_RECOVERY",
        "DID_CHANGE_RENEWAL_PREF/UPGRADE",
        "REFUND",
        "SUBSCRIBED/RESUBSCRIBE",
        "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED",
        "EXPIRED/VOLUNTARY",
        "ONE_TIME_CHARGE",
      ])
    let verifier = SignedDataVerifier(
      trustedRoots: [root], bundleId: bundle, appAppleId: 6_400_000_001, environment: .production)
    for body in receiver.bodies {
      let verified = try verifier.verifyAndDecodeNotification(body["signedPayload"]?.string ?? "")
      _ = try verifier.verifyAndDecodeTransaction(verified.data?.signedTransactionInfo ?? "")
      if let renewal = verified.data?.signedRenewalInfo {
        _ = try verifier.verifyAndDecodeRenewalInfo(renewal)
      }
    }
    for (payload, notification) in received {
      #expect(notification.version == "2.0")
      #expect(notification.notificationUUID.count == 36)
      #expect(payload["signedDate"]?.int64Value != nil)
      let data = try #require(notification.data)
      #expect(data.bundleId == bundle)
      #expect(data.appAppleId == 6_400_000_001)
      #expect(data.environment == .production)
      let transaction = try SubscriptionDomain.Transaction(
        jwsTransactionPayload: try verifiedPayload(
          try #require(data.signedTransactionInfo), root: root),
        notificationType: notification.rawNotificationType)
      #expect(transaction.bundleId == bundle)
      if notification.rawNotificationType == "ONE_TIME_CHARGE" {
        #expect(data.signedRenewalInfo == nil)
        #expect(data.rawStatus == nil)
        #expect(transaction.productId == "lifetime")
      } else {
        _ = try RenewalInfo(
          jwsRenewalInfoPayload: try verifiedPayload(
            try #require(data.signedRenewalInfo), root: root))
        #expect(data.status != nil)
      }
    }
    #expect(Set(received.map(\.notification.notificationUUID)).count == received.count)
    // The refund carries the refunded transaction and status 5; expiry carries status 2.
    let refund = try #require(received.first { $0.notification.rawNotificationType == "REFUND" })
    #expect(refund.notification.data?.status == .revoked)
    let refunded = try verifiedPayload(
      refund.notification.data?.signedTransactionInfo ?? "", root: root)
    #expect(refunded["revocationDate"]?.int64Value != nil)
    #expect(
      received.first { $0.notification.rawNotificationType == "EXPIRED" }?.notification.data?.status
        == .expired)
    #expect(
      received.first { $0.notification.rawSubtype == "GRACE_PERIOD" }?.notification.data?.status
        == .billingGracePeriod)

    // Family: the member's first access is SUBSCRIBED with FAMILY_SHARED; the organizer's refund
    // revokes it; a resubscription with an offer code is OFFER_REDEEMED and shares again.
    receiver.reset()
    try await sim.ok("POST", "\(app)/users/b/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "\(app)/users/b/refund", #"{"group_id":"pro"}"#)
    try await sim.ok(
      "POST", "\(app)/users/b/purchase",
      #"{"product_id":"pro.monthly","offer":{"type":"offer_code","ref_name":"SUMMER"}}"#)
    try await sim.drain()
    let family = try receiver.notificationsV2(root: root)
    let summary = try family.map { entry -> String in
      let transaction = try verifiedPayload(
        entry.notification.data?.signedTransactionInfo ?? "", root: root)
      return typeAndSubtype(entry.notification) + " "
        + (transaction["inAppOwnershipType"]?.string ?? "")
    }
    #expect(
      summary == [
        "SUBSCRIBED/INITIAL_BUY PURCHASED", "SUBSCRIBED/INITIAL_BUY FAMILY_SHARED",
        "REFUND PURCHASED",
        "REVOKE FAMILY_SHARED", "OFFER_REDEEMED/RESUBSCRIBE PURCHASED",
        "SUBSCRIBED/INITIAL_BUY FAMILY_SHARED",
      ])
    await sim.stop()
    await receiver.stop()
  }

  @Test func billingRetryThatGivesUpExpiresWithBillingRetry() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogV2(notificationURL: receiver.url))
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/u/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "/control/users/u/billing-failure")
    try await sim.advance(#"{"days":100}"#)
    try await sim.drain()
    let root = try await rootCertificate(sim)
    #expect(
      try receiver.notificationsV2(root: root).map { typeAndSubtype($0.notification) } == [
        "SUBSCRIBED/INITIAL_BUY", "DID_FAIL_TO_RENEW", "EXPIRED/BILLING_RETRY",
      ])
    await sim.stop()
    await receiver.stop()
  }

  @Test func retriesKeepTheUUIDAndNotificationHistoryReportsAttempts() async throws {
    let receiver = try startReceiver(script: [500, 503])
    let sim = try Sim()
    // Compression 3600: Apple's V2 delays 1 h, 12 h, … become 1 s, 12 s, … of simulated time.
    try await sim.ok(
      "POST", "/control/apps", catalogV2(notificationURL: receiver.url, compression: 3600))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    let bought = try await sim.ok(
      "POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    let transactionID = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    try await sim.drain()
    var deliveries = try await sim.notifications()
    #expect(deliveries[0]["next_attempt_ms"]?.int64 == startMs + 1_000)
    #expect(deliveries[0]["subtype"]?.string == "INITIAL_BUY")
    try await sim.advance(#"{"seconds":1}"#)
    try await sim.drain()
    try await sim.advance(#"{"seconds":12}"#)
    try await sim.drain()
    deliveries = try await sim.notifications()
    #expect(deliveries[0]["state"]?.string == "delivered")
    #expect(receiver.bodies.count == 3)
    #expect(Set(receiver.bodies.map { $0.serialized() }).count == 1)
    let root = try await rootCertificate(sim)
    let uuid = try receiver.notificationsV2(root: root)[0].notification.notificationUUID
    #expect(deliveries[0]["notification_uuid"]?.string == uuid)

    // Get Notification History: the same signed payload with its three attempts.
    let token = try key.token()
    let request = #"{"startDate":\#(startMs - 1000),"endDate":\#(startMs + dayMs)}"#
    var (status, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history", token: token, body: request)
    #expect(status == 200)
    let item = try #require(body["notificationHistory"]?[0])
    #expect(item["signedPayload"]?.string == receiver.bodies[0]["signedPayload"]?.string)
    #expect(
      item["sendAttempts"]?.arrayValue?.compactMap { $0["sendAttemptResult"]?.string } == [
        "UNSUCCESSFUL_HTTP_RESPONSE_CODE", "UNSUCCESSFUL_HTTP_RESPONSE_CODE", "SUCCESS",
      ])
    #expect(item["sendAttempts"]?[0]?["attemptDate"]?.int64Value != nil)
    #expect(body["hasMore"] == .bool(false))
    (_, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history", token: token,
      body: #"{"startDate":\#(startMs - 1000),"endDate":\#(startMs + dayMs),"onlyFailures":true}"#)
    #expect(body["notificationHistory"]?.arrayValue?.isEmpty == true)
    (_, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history", token: token,
      body:
        #"{"startDate":\#(startMs - 1000),"endDate":\#(startMs + dayMs),"transactionId":"\#(transactionID)"}"#
    )
    #expect(body["notificationHistory"]?.arrayValue?.count == 1)
    (_, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history", token: token,
      body:
        #"{"startDate":\#(startMs - 1000),"endDate":\#(startMs + dayMs),"notificationType":"DID_RENEW"}"#
    )
    #expect(body["notificationHistory"]?.arrayValue?.isEmpty == true)
    (status, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history", token: token,
      body: #"{"startDate":\#(startMs),"endDate":\#(startMs - 1)}"#)
    #expect(status == 400)
    #expect(body["errorCode"] == .integer(4_000_013))
    (status, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history?paginationToken=zzz", token: token,
      body: request)
    #expect(body["errorCode"] == .integer(4_000_014))

    // Request a Test Notification, then its status.
    (status, body, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/test", token: token)
    #expect(status == 200)
    let testToken = try #require(body["testNotificationToken"]?.string)
    try await sim.drain()
    (status, body, _) = try await api(
      "GET", sim.base, "/inApps/v1/notifications/test/\(testToken)", token: token)
    #expect(status == 200)
    #expect(body["firstSendAttemptResult"]?.string == "SUCCESS")
    let test = try NotificationV2(
      json: try verifiedPayload(body["signedPayload"]?.string ?? "", root: root))
    #expect(test.notificationType == .test)
    #expect(test.data?.bundleId == bundle)
    #expect(test.data?.signedTransactionInfo == nil)
    await sim.stop()
    await receiver.stop()
  }

  @Test func droppedNotificationIsFilledByTheTransactionHistory() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogV2(notificationURL: receiver.url))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    let bought = try await sim.ok(
      "POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    let first = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    let token = try key.token()
    let (_, before, _) = try await api("GET", sim.base, "/inApps/v2/history/\(first)", token: token)
    let revision = try #require(before["revision"]?.string)

    try await sim.ok(
      "POST", "/control/notifications/drop",
      #"{"bundle_id":"\#(bundle)","notification_type":"DID_RENEW","count":1}"#)
    try await sim.advance(#"{"days":31}"#)
    try await sim.advance(#"{"days":28}"#)
    try await sim.drain()
    let root = try await rootCertificate(sim)
    // The first renewal's notification never arrives; the second does.
    #expect(
      try receiver.notificationsV2(root: root).map { typeAndSubtype($0.notification) } == [
        "SUBSCRIBED/INITIAL_BUY", "DID_RENEW",
      ])
    let deliveries = try await sim.notifications()
    #expect(deliveries.map { $0["state"]?.string } == ["delivered", "dropped", "delivered"])
    #expect(deliveries[1]["attempts"]?.arrayValue?.isEmpty == true)
    #expect(
      try await sim.ok("GET", "/control/notifications/drop")["drop"]?.arrayValue?.isEmpty == true)

    // Reconciliation: the history since the stored revision has both renewals.
    let (_, after, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?revision=\(revision)", token: token)
    let renewals = try (after["signedTransactions"]?.arrayValue ?? []).map {
      try SubscriptionDomain.Transaction(
        jwsTransactionPayload: try verifiedPayload($0.stringValue ?? "", root: root))
    }
    #expect(renewals.count == 2)
    #expect(renewals.allSatisfy { $0.originalTransactionId == first })
    // Notification history lists the dropped one as never sent.
    let (_, history, _) = try await api(
      "POST", sim.base, "/inApps/v1/notifications/history", token: token,
      body: #"{"startDate":\#(startMs),"endDate":\#(startMs + 100 * dayMs),"onlyFailures":true}"#)
    #expect(history["notificationHistory"]?.arrayValue?.count == 1)
    #expect(history["notificationHistory"]?[0]?["sendAttempts"]?.arrayValue?.isEmpty == true)
    await sim.stop()
    await receiver.stop()
  }
}
