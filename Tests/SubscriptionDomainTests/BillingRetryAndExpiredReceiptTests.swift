import Foundation
import Testing

@testable import SubscriptionDomain

/// One row of rule 18: a group in billing retry, an instant, and the state then.
struct RetryEndCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction]
  var renewals: [RenewalInfo]
  var time: Int64
  var state: SubscriptionState
  var intro: EligibilityReason
  var promo: EligibilityReason
  var testDescription: String { name }
}

private let retryDays: Int64 = 60

let retryEndCases: [RetryEndCase] = [
  .init(
    name: "59 days after the period ended: still BILLING_RETRY",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true)], time: feb1 + 59 * day,
    state: .billingRetry, intro: .inBillingRetry, promo: .existingSubscriber),
  .init(
    name: "exactly 60 days after: still BILLING_RETRY (more than 60 days ends it)",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true)], time: feb1 + retryDays * day,
    state: .billingRetry, intro: .inBillingRetry, promo: .existingSubscriber),
  .init(
    name: "60 days and 1 ms after: EXPIRED, whatever the stored flag says",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true)], time: feb1 + retryDays * day + 1,
    state: .expired, intro: .lapsedNoIntroUsed, promo: .lapsedSubscriber),
  .init(
    name: "a stale retry flag a year later: EXPIRED",
    history: [tx("t1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("t1", "premium.monthly", retry: true, grace: feb17)],
    time: utc(2025, 2, 1), state: .expired, intro: .lapsedNoIntroUsed, promo: .lapsedSubscriber),
  .init(
    name: "a refunded last period under a stale retry flag: REVOKED",
    history: [tx("t1", "premium.monthly", jan1, feb1, revoked: feb1 - day)],
    renewals: [renewal("t1", "premium.monthly", retry: true)], time: feb1 + 70 * day,
    state: .revoked, intro: .lapsedNoIntroUsed, promo: .lapsedSubscriber),
  .init(
    name: "the 60 days count from the last period of the subscription",
    history: [
      tx("t1", "premium.monthly", jan1, feb1), tx("t2", "premium.monthly", feb1, utc(2024, 3, 1), otx: "t1"),
    ],
    renewals: [renewal("t1", "premium.monthly", retry: true)], time: feb1 + 61 * day,
    state: .billingRetry, intro: .inBillingRetry, promo: .existingSubscriber),
]

@Suite("Billing retry ends after 60 days (rule 18)")
struct BillingRetryEndTests {
  @Test("retry table", arguments: retryEndCases)
  func retry(_ c: RetryEndCase) throws {
    for policy in [EligibilityPolicy.default, EligibilityPolicy(billingRetryEntitled: true)] {
      let evaluation = evaluate(c.history, c.renewals, at: c.time, policy: policy)
      let status = try #require(evaluation.status(ofGroup: Group.premium))
      #expect(status.state == c.state)
      #expect(status.billingIssue == (c.state == .billingRetry))
      let entitled = c.state == .billingRetry && policy.billingRetryEntitled
      #expect(evaluation.entitlements.isEmpty == !entitled)
      let answer = evaluation.eligibility(for: "premium.monthly")
      #expect(answer.introductory.reason == c.intro)
      #expect(answer.promotional.reason == c.promo)
      #expect(evaluation.reportCounts.inBillingRetry == (c.state == .billingRetry ? 1 : 0))
    }
  }
}

@Suite("Status 21006 is stored like status 0 (rule 20)")
struct ExpiredReceiptStatusTests {
  /// A modern body that Apple answered with 21006.
  static let modern = #"""
    {"status":21006,"environment":"Production","receipt":{"bundle_id":"com.example.app","in_app":[
      {"product_id":"premium.monthly","transaction_id":"t1","original_transaction_id":"t1",
       "purchase_date_ms":"1704067200000","expires_date_ms":"1706745600000"}]},
     "latest_receipt_info":[
      {"product_id":"premium.monthly","transaction_id":"t2","original_transaction_id":"t1",
       "purchase_date_ms":"1706745600000","expires_date_ms":"1709251200000"}],
     "pending_renewal_info":[{"original_transaction_id":"t1","product_id":"premium.monthly",
       "auto_renew_status":"0","expiration_intent":"1"}]}
    """#

  /// An iOS 6-style transaction receipt's answer once the subscription expired: `receipt` is the
  /// transaction itself, `latest_expired_receipt_info` the subscription's newest one (objects);
  /// `expires_date` is milliseconds, `expires_date_formatted` the text.
  static let iOS6 = #"""
    {"status":21006,"environment":"Sandbox","receipt":{
       "quantity":"1","product_id":"premium.monthly","transaction_id":"t1",
       "original_transaction_id":"t1","purchase_date":"2024-01-01 00:00:00 Etc/GMT",
       "purchase_date_ms":"1704067200000","expires_date":"1706745600000",
       "expires_date_formatted":"2024-02-01 00:00:00 Etc/GMT","is_trial_period":"true",
       "bid":"com.example.app","bvrs":"1"},
     "latest_expired_receipt_info":{
       "quantity":"1","product_id":"premium.monthly","transaction_id":"t2",
       "original_transaction_id":"t1","purchase_date_ms":"1706745600000",
       "expires_date":"1709251200000","expires_date_formatted":"2024-03-01 00:00:00 Etc/GMT",
       "is_trial_period":"false","bid":"com.example.app"}}
    """#

  @Test("21006 keeps Apple's meaning but carries a body to store")
  func status() {
    let status = VerifyReceiptStatus(code: 21006)
    #expect(status.action == .treatAsExpired)
    #expect(status.carriesReceipt)
    #expect(VerifyReceiptStatus(code: 0).carriesReceipt)
    #expect(!VerifyReceiptStatus(code: 21007).carriesReceipt)
    #expect(!VerifyReceiptStatus(code: 21010).carriesReceipt)
  }

  @Test("a modern 21006 body is read like status 0")
  func modernBody() throws {
    let response = try VerifyReceiptResponse(parsing: Array(Self.modern.utf8))
    #expect(response.environment == .production)
    #expect(response.transactions.map(\.transactionId) == ["t1", "t2"])
    #expect(response.pendingRenewalInfo.map(\.originalTransactionId) == ["t1"])
    let evaluation = SubscriptionEvaluator.evaluate(
      history: response.transactions, renewals: response.pendingRenewalInfo,
      catalog: Fixture.catalog, at: utc(2024, 3, 5))
    #expect(evaluation.status(ofGroup: Group.premium)?.state == .expired)
    #expect(evaluation.status(ofGroup: Group.premium)?.transactionId == "t2")
  }

  @Test("an iOS 6-style 21006 body: the receipt and the latest expired transaction")
  func iOS6Body() throws {
    let response = try VerifyReceiptResponse(parsing: Array(Self.iOS6.utf8))
    #expect(response.environment == .sandbox)
    #expect(response.bundleId == "com.example.app")
    #expect(response.transactions.map(\.transactionId) == ["t1", "t2"])
    #expect(response.transactions.map(\.expiresDate) == [feb1, utc(2024, 3, 1)])
    #expect(response.transactions.first?.isTrialPeriod == true)
    let evaluation = SubscriptionEvaluator.evaluate(
      history: response.transactions, renewals: [], catalog: Fixture.catalog, at: utc(2024, 3, 5))
    let status = try #require(evaluation.status(ofGroup: Group.premium))
    #expect(status.state == .expired)
    #expect(status.expiresDate == utc(2024, 3, 1))
    #expect(evaluation.eligibility(for: "premium.yearly").introductory.reason == .introAlreadyUsed)
  }

  @Test("an iOS 6-style status 0 body reads its latest_receipt_info object")
  func iOS6Active() throws {
    let body = Self.iOS6.replacingOccurrences(of: "21006", with: "0")
      .replacingOccurrences(of: "latest_expired_receipt_info", with: "latest_receipt_info")
    let response = try VerifyReceiptResponse(parsing: Array(body.utf8))
    #expect(response.transactions.map(\.transactionId) == ["t1", "t2"])
  }
}
