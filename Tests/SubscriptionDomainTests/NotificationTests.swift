import SubstatusJSON
import Testing

@testable import SubscriptionDomain

@Suite("Notifications and decoded JWS payloads")
struct NotificationTests {
  @Test("V1 REVOKE: family member's access removed, classified and reported")
  func v1Revoke() throws {
    let notification = try NotificationV1(parsing: Fixture.bytes("notification_v1_revoke.json"))
    #expect(notification.notificationType == .revoke)
    #expect(notification.environment == .production)
    #expect(notification.password == "0123456789abcdef0123456789abcdef")
    #expect(!notification.description.contains("0123456789abcdef"))
    #expect(notification.autoRenewStatus == false)
    #expect(notification.bid == "com.example.app")
    #expect(notification.transactions.map(\.transactionId) == ["6000", "6001"])
    #expect(notification.transactions[1].notificationType == "REVOKE")
    #expect(notification.transactions[0].notificationType == nil)
    #expect(notification.pendingRenewalInfo.first?.willAutoRenew == false)

    let evaluation = SubscriptionEvaluator.evaluate(
      history: notification.transactions, renewals: notification.pendingRenewalInfo,
      catalog: Fixture.catalog, at: utc(2024, 3, 2))
    let family = try #require(evaluation.status(ofGroup: Group.family))
    #expect(family.state == .revoked)
    #expect(family.ownership == .familyShared)
    #expect(evaluation.revocations.map(\.kind) == [.familyRemoval])
    #expect(evaluation.reportCounts.familyAccessRevoked == 1)
    #expect(evaluation.reportCounts.refunded == 0)
  }

  @Test("V1 REFUND in the sandbox: purchaser's refund, intro still used")
  func v1Refund() throws {
    let notification = try NotificationV1(parsing: Fixture.bytes("notification_v1_refund.json"))
    #expect(notification.notificationType == .refund)
    #expect(notification.environment == .sandbox)
    let transaction = try #require(notification.transactions.first)
    #expect(transaction.environment == .sandbox)
    #expect(transaction.notificationType == "REFUND")
    #expect(RevocationKind(classifying: transaction) == .refund)
    let evaluation = SubscriptionEvaluator.evaluate(
      history: notification.transactions, renewals: notification.pendingRenewalInfo,
      catalog: Fixture.catalog, at: utc(2024, 2, 1))
    #expect(evaluation.status(ofGroup: Group.pro)?.state == .revoked)
    #expect(evaluation.entitlements.isEmpty)
    #expect(evaluation.eligibility(for: "pro.monthly").introductory.reason == .introAlreadyUsed)
  }

  @Test("V1 with a non-zero unified_receipt status is an error, an unknown type is kept raw")
  func v1Errors() throws {
    let failed = #"{"notification_type":"DID_RENEW","unified_receipt":{"status":21004}}"#
    let error = try #require(throws: AppleDataError.self) {
      try NotificationV1(parsing: Array(failed.utf8))
    }
    #expect(error.verifyReceiptStatus?.action == .checkSharedSecret)
    #expect(error.field == "unified_receipt.status")
    let missing = #"{"password":"x"}"#
    #expect(throws: AppleDataError.self) { try NotificationV1(parsing: Array(missing.utf8)) }
    let future = try NotificationV1(parsing: Array(#"{"notification_type":"BRAND_NEW"}"#.utf8))
    #expect(future.rawNotificationType == "BRAND_NEW" && future.notificationType == nil)
    #expect(future.transactions.isEmpty)
  }

  @Test("V2 transaction payload: family revoke with revocationType, unknown fields ignored")
  func v2Transaction() throws {
    let transaction = try Transaction(
      jwsTransactionPayload: Fixture.bytes("v2_transaction_family_revoke.json"),
      notificationType: "REVOKE")
    #expect(transaction.transactionId == "8001")
    #expect(transaction.originalTransactionId == "8000")
    #expect(transaction.type == .autoRenewable)
    #expect(transaction.rawType == "Auto-Renewable Subscription")
    #expect(transaction.ownership == .familyShared)
    #expect(transaction.revocationType == .familyRevoke)
    #expect(transaction.revocationReason == .other)
    #expect(transaction.environment == .production)
    #expect(transaction.signedDate == utc(2024, 3, 1))
    #expect(transaction.webOrderLineItemId == "8900001")
    #expect(RevocationKind(classifying: transaction) == .familyRemoval)
  }

  @Test("V2 trial and renewal payloads: grace from gracePeriodExpiresDate, intro used")
  func v2TrialAndGrace() throws {
    let trial = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_trial.json"))
    #expect(trial.offerType == .introductory && trial.offerDiscountType == .freeTrial)
    #expect(trial.usesIntroductoryOffer && trial.isFreeTrial)
    #expect(trial.environment == .sandbox)
    let renewal = try RenewalInfo(jwsRenewalInfoPayload: Fixture.bytes("v2_renewal_grace.json"))
    #expect(renewal.autoRenewProductId == "premium.yearly")
    #expect(renewal.willAutoRenew && renewal.isInBillingRetryPeriod)
    #expect(renewal.priceConsentStatus == .consented)
    #expect(renewal.eligibleWinBackOfferIds == ["winback.1", "winback.2"])
    #expect(renewal.gracePeriodExpiresDate == utc(2024, 1, 24))

    let evaluation = SubscriptionEvaluator.evaluate(
      history: [trial], renewals: [renewal], catalog: Fixture.catalog, at: utc(2024, 1, 10))
    let premium = try #require(evaluation.status(ofGroup: Group.premium))
    #expect(premium.state == .gracePeriod)
    #expect(premium.productId == "premium.monthly")
    #expect(premium.autoRenewProductId == "premium.yearly")
    #expect(premium.billingIssue)
    #expect(evaluation.entitlements.map(\.productId) == ["premium.monthly"])
    #expect(evaluation.eligibility(for: "premium.yearly").introductory.reason == .introAlreadyUsed)
  }

  @Test("V2 notification payload")
  func v2Notification() throws {
    let notification = try NotificationV2(parsing: Fixture.bytes("v2_notification_did_fail_to_renew.json"))
    #expect(notification.notificationType == .didFailToRenew)
    #expect(notification.subtype == .gracePeriod)
    #expect(notification.notificationUUID == "002e14d5-51f5-4503-b5a8-c3a1af68eb20")
    #expect(notification.version == "2.0")
    let data = try #require(notification.data)
    #expect(data.appAppleId == 1_234_567_890)
    #expect(data.environment == .sandbox)
    #expect(data.status == .billingGracePeriod)
    #expect(data.signedTransactionInfo?.hasPrefix("eyJ") == true)
    let unknown = try NotificationV2(
      parsing: Array(#"{"notificationType":"NEW_THING","subtype":"ODD","notificationUUID":"u"}"#.utf8))
    #expect(unknown.notificationType == nil && unknown.rawNotificationType == "NEW_THING")
    #expect(unknown.subtype == nil && unknown.rawSubtype == "ODD")
    #expect(unknown.data == nil)
    let error = try #require(throws: AppleDataError.self) {
      try NotificationV2(parsing: Array(#"{"notificationType":"TEST"}"#.utf8))
    }
    #expect(error.code == .missingField && error.field == "notificationUUID")
  }

  @Test("V2 payload strictness and leniency: numbers as strings, booleans as numbers")
  func v2Lenient() throws {
    let text = #"""
      {"transactionId":"1","productId":"premium.monthly","purchaseDate":"1704067200000",
       "expiresDate":1706745600000,"isUpgraded":1,"offerType":"2","quantity":1}
      """#
    let transaction = try Transaction(jwsTransactionPayload: Array(text.utf8))
    #expect(transaction.purchaseDate == jan1 && transaction.expiresDate == feb1)
    #expect(transaction.isUpgraded && transaction.offerType == .promotional)
    #expect(transaction.originalTransactionId == "1")
    let bad = #"{"transactionId":"1","productId":"p","purchaseDate":true}"#
    let error = try #require(throws: AppleDataError.self) {
      try Transaction(jwsTransactionPayload: Array(bad.utf8))
    }
    #expect(error.field == "purchaseDate" && error.code == .invalidValue)
  }
}

@Suite("History merge")
struct HistoryMergeTests {
  @Test("newer signed data wins: a reversed refund restores the transaction")
  func signedDateWins() {
    let refunded = tx("1", "premium.monthly", jan1, feb1, revoked: jan1 + day, signed: jan1 + day)
    let reversed = tx("1", "premium.monthly", jan1, feb1, signed: jan1 + 2 * day)
    for history in [[refunded, reversed], [reversed, refunded]] {
      #expect(Transaction.merged(history) == [reversed])
      #expect(evaluate(history, at: jan1 + 3 * day).status(ofGroup: Group.premium)?.state == .active)
    }
  }

  @Test("unsigned data: the record that knows of the revocation wins, whatever the order")
  func revocationWins() {
    let plain = tx("1", "premium.monthly", jan1, feb1)
    let refunded = tx("1", "premium.monthly", jan1, feb1, revoked: jan1 + day)
    let classified = tx("1", "premium.monthly", jan1, feb1, revoked: jan1 + day, notification: "REFUND")
    for history in [[plain, refunded, classified], [classified, refunded, plain], [refunded, classified, plain]] {
      #expect(Transaction.merged(history) == [classified])
    }
  }

  @Test("renewal infos: one per original transaction id, newest signed wins")
  func renewals() {
    let old = renewal("1", "premium.monthly", retry: true, grace: feb17, signed: jan1)
    let new = renewal("1", "premium.monthly", autoRenew: false, signed: jan1 + day)
    let other = renewal("2", "pro.monthly")
    #expect(RenewalInfo.merged([new, other, old]) == [new, other])
    #expect(RenewalInfo.merged([old, new, other]) == [new, other])
  }
}
