import SubstatusJSON
import Testing

@testable import SubscriptionDomain

/// A verifyReceipt status and what the server must do about it.
struct StatusCodeCase: Sendable, CustomTestStringConvertible {
  var body: String
  var code: Int
  var action: VerifyReceiptAction
  var testDescription: String { body }
}

let statusCodeCases: [StatusCodeCase] = [
  .init(body: #"{"status":21000}"#, code: 21000, action: .fixRequest),
  .init(body: #"{"status":21001}"#, code: 21001, action: .unknown),
  .init(body: #"{"status":21002}"#, code: 21002, action: .retryLater),
  .init(body: #"{"status":21003}"#, code: 21003, action: .rejectNotAuthentic),
  .init(body: #"{"status":21004}"#, code: 21004, action: .checkSharedSecret),
  .init(body: #"{"status":21005}"#, code: 21005, action: .retryLater),
  .init(body: #"{"status":21007, "environment":"Production"}"#, code: 21007, action: .retryInSandbox),
  .init(body: #"{"status":21008, "environment":"Sandbox"}"#, code: 21008, action: .retryInProduction),
  .init(body: #"{"status":21009}"#, code: 21009, action: .retryLater),
  .init(body: #"{"status":21010}"#, code: 21010, action: .rejectUnknownAccount),
  .init(body: #"{"status":21100}"#, code: 21100, action: .retryLater),
  .init(body: #"{"status":21104,"is_retryable":true}"#, code: 21104, action: .retryLater),
  .init(body: #"{"status":21150,"is-retryable":1}"#, code: 21150, action: .retryLater),
  .init(body: #"{"status":21199,"is-retryable":"0"}"#, code: 21199, action: .giveUp),
  .init(body: #"{"status":21199,"is_retryable":false}"#, code: 21199, action: .giveUp),
  .init(body: #"{"status":21200}"#, code: 21200, action: .unknown),
  .init(body: #"{"status":21200,"is_retryable":true}"#, code: 21200, action: .retryLater),
  .init(body: #"{"status":"21002"}"#, code: 21002, action: .retryLater),
  .init(body: #"{"status":1, "receipt":{"in_app":[]}}"#, code: 1, action: .unknown),
]

/// A body that must be rejected: the error code and the field it names.
struct MalformedCase: Sendable, CustomTestStringConvertible {
  var name: String
  var body: String
  var code: AppleDataError.Code
  var field: String?
  var testDescription: String { name }
}

let malformedCases: [MalformedCase] = [
  .init(name: "not JSON", body: #"{"status":0,"#, code: .invalidJSON, field: nil),
  .init(name: "not an object", body: #"[{"status":0}]"#, code: .invalidValue, field: nil),
  .init(name: "no status", body: #"{"environment":"Sandbox"}"#, code: .missingField, field: "status"),
  .init(name: "status not a number", body: #"{"status":"ok"}"#, code: .invalidValue, field: "status"),
  .init(
    name: "latest_receipt_info not an array", body: #"{"status":0,"latest_receipt_info":{}}"#,
    code: .invalidValue, field: "latest_receipt_info"),
  .init(
    name: "element not an object", body: #"{"status":0,"latest_receipt_info":["x"]}"#,
    code: .invalidValue, field: "latest_receipt_info[0]"),
  .init(
    name: "missing transaction_id",
    body: #"{"status":0,"latest_receipt_info":[{"product_id":"a","purchase_date_ms":"1"}]}"#,
    code: .missingField, field: "latest_receipt_info[0].transaction_id"),
  .init(
    name: "missing purchase date",
    body: #"{"status":0,"receipt":{"in_app":[{"product_id":"a","transaction_id":"1"}]}}"#,
    code: .missingField, field: "receipt.in_app[0].purchase_date_ms"),
  .init(
    name: "timestamp not a number",
    body: #"{"status":0,"latest_receipt_info":[{"product_id":"a","transaction_id":"1","purchase_date_ms":"soon"}]}"#,
    code: .invalidValue, field: "latest_receipt_info[0].purchase_date_ms"),
  .init(
    name: "date text unreadable",
    body: #"{"status":0,"latest_receipt_info":[{"product_id":"a","transaction_id":"1","purchase_date":"yesterday"}]}"#,
    code: .invalidValue, field: "latest_receipt_info[0].purchase_date"),
  .init(
    name: "boolean unreadable",
    body: #"{"status":0,"latest_receipt_info":[{"product_id":"a","transaction_id":"1","purchase_date_ms":"1","is_trial_period":"maybe"}]}"#,
    code: .invalidValue, field: "latest_receipt_info[0].is_trial_period"),
  .init(
    name: "boolean as an object",
    body: #"{"status":0,"pending_renewal_info":[{"product_id":"a","original_transaction_id":"1","is_in_billing_retry_period":{}}]}"#,
    code: .invalidValue, field: "pending_renewal_info[0].is_in_billing_retry_period"),
  .init(
    name: "renewal without original_transaction_id",
    body: #"{"status":0,"pending_renewal_info":[{"product_id":"a"}]}"#,
    code: .missingField, field: "pending_renewal_info[0].original_transaction_id"),
  .init(
    name: "fractional timestamp",
    body: #"{"status":0,"latest_receipt_info":[{"product_id":"a","transaction_id":"1","purchase_date_ms":1.5}]}"#,
    code: .invalidValue, field: "latest_receipt_info[0].purchase_date_ms"),
]

/// How one transaction field may be spelled, and what it must read as.
struct LenientCase: Sendable, CustomTestStringConvertible {
  var fields: String
  var check: @Sendable (Transaction) -> Bool
  var testDescription: String { fields }
}

let lenientCases: [LenientCase] = [
  .init(fields: #""is_trial_period":"true""#) { $0.isTrialPeriod },
  .init(fields: #""is_trial_period":true"#) { $0.isTrialPeriod },
  .init(fields: #""is_trial_period":"1""#) { $0.isTrialPeriod },
  .init(fields: #""is_trial_period":1"#) { $0.isTrialPeriod },
  .init(fields: #""is_trial_period":"TRUE""#) { $0.isTrialPeriod },
  .init(fields: #""is_trial_period":"false""#) { !$0.isTrialPeriod },
  .init(fields: #""is_trial_period":false"#) { !$0.isTrialPeriod },
  .init(fields: #""is_trial_period":"0""#) { !$0.isTrialPeriod },
  .init(fields: #""is_trial_period":"""#) { !$0.isTrialPeriod },
  .init(fields: #""is_trial_period":null"#) { !$0.isTrialPeriod },
  .init(fields: #""is_in_intro_offer_period":"true""#) { $0.isInIntroOfferPeriod && $0.usesIntroductoryOffer },
  .init(fields: #""expires_date_ms":"1706745600000""#) { $0.expiresDate == 1_706_745_600_000 },
  .init(fields: #""expires_date_ms":1706745600000"#) { $0.expiresDate == 1_706_745_600_000 },
  .init(fields: #""expires_date_ms":1.7067456E12"#) { $0.expiresDate == 1_706_745_600_000 },
  .init(fields: #""expires_date":"2024-02-01 00:00:00 Etc/GMT""#) { $0.expiresDate == 1_706_745_600_000 },
  .init(fields: #""expires_date":"2024-02-01T00:00:00Z""#) { $0.expiresDate == 1_706_745_600_000 },
  .init(fields: #""expires_date":"1706745600000""#) { $0.expiresDate == 1_706_745_600_000 },
  .init(fields: #""expires_date_ms":"""#) { $0.expiresDate == nil },
  .init(fields: #""cancellation_date_ms":"1706745600000","cancellation_reason":"1""#) {
    $0.revocationDate == 1_706_745_600_000 && $0.revocationReason == .appIssue
  },
  .init(fields: #""cancellation_reason":7"#) { $0.rawRevocationReason == 7 && $0.revocationReason == nil },
  .init(fields: #""in_app_ownership_type":"FAMILY_SHARED""#) { $0.ownership == .familyShared },
  .init(fields: #""in_app_ownership_type":"SOMETHING_NEW""#) {
    $0.rawInAppOwnershipType == "SOMETHING_NEW" && $0.inAppOwnershipType == nil
      && $0.ownership == .purchased
  },
  .init(fields: #""is_upgraded":"true""#) { $0.isUpgraded },
  .init(fields: #""promotional_offer_id":"winback""#) {
    $0.offerType == .promotional && $0.offerIdentifier == "winback"
  },
  .init(fields: #""offer_code_ref_name":"SPRING""#) {
    $0.offerType == .offerCode && $0.offerIdentifier == "SPRING"
  },
  .init(fields: #""quantity":"3""#) { $0.quantity == 3 },
  .init(fields: #""web_order_line_item_id":1000000012345678"#) {
    $0.webOrderLineItemId == "1000000012345678"
  },
  .init(fields: #""original_transaction_id":1000000000000001"#) {
    $0.originalTransactionId == "1000000000000001"
  },
  .init(fields: #""subscription_group_identifier":"""#) { $0.subscriptionGroupIdentifier == nil },
  .init(fields: #""unknown_future_field":{"x":[1]}"#) { $0.transactionId == "42" },
]

@Suite("verifyReceipt parsing (rule 1)")
struct VerifyReceiptTests {
  @Test("every non-zero status is a typed error with Apple's meaning and the action", arguments: statusCodeCases)
  func statusCodes(_ c: StatusCodeCase) throws {
    let error = try #require(throws: AppleDataError.self) {
      try VerifyReceiptResponse(parsing: Array(c.body.utf8))
    }
    #expect(error.code == .verifyReceiptStatus)
    let status = try #require(error.verifyReceiptStatus)
    #expect(status.code == c.code)
    #expect(status.action == c.action)
    #expect(!status.meaning.isEmpty)
    #expect(error.message.contains(String(c.code)))
  }

  @Test("status fixtures: 21007 names the environment, 21104 honours is_retryable")
  func statusFixtures() throws {
    let sandbox = try #require(throws: AppleDataError.self) {
      try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_21007.json"))
    }
    #expect(sandbox.verifyReceiptStatus?.action == .retryInSandbox)
    #expect(sandbox.verifyReceiptStatus?.environment == .production)
    let retry = try #require(throws: AppleDataError.self) {
      try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_21104_retryable.json"))
    }
    #expect(retry.verifyReceiptStatus?.isRetryable == true)
    #expect(retry.verifyReceiptStatus?.isTemporary == true)
  }

  @Test("malformed bodies get a precise error naming the field", arguments: malformedCases)
  func malformed(_ c: MalformedCase) throws {
    let error = try #require(throws: AppleDataError.self) {
      try VerifyReceiptResponse(parsing: Array(c.body.utf8))
    }
    #expect(error.code == c.code)
    #expect(error.field == c.field)
    #expect(!error.message.isEmpty)
  }

  @Test("Apple's value quirks: strings, JSON booleans and numbers", arguments: lenientCases)
  func lenientValues(_ c: LenientCase) throws {
    let body = #"{"status":0,"environment":"Sandbox","latest_receipt_info":[{"product_id":"p","#
      + #""transaction_id":"42","purchase_date_ms":"1704067200000","# + c.fields + "}]}"
    let response = try VerifyReceiptResponse(parsing: Array(body.utf8))
    let transaction = try #require(response.transactions.first)
    #expect(c.check(transaction))
    #expect(transaction.purchaseDate == jan1)
    #expect(transaction.environment == .sandbox)
  }

  @Test("a multi-group production receipt: in_app ∪ latest_receipt_info, latest wins")
  func multiGroupFixture() throws {
    let response = try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_multi_group.json"))
    #expect(response.environment == .production)
    #expect(response.bundleId == "com.example.app")
    #expect(response.latestReceipt != nil)
    #expect(
      response.transactions.map(\.transactionId) == [
        "1000", "1001", "2000", "3000", "1002", "4000", "2001", "1003", "1004",
      ])
    let upgraded = try #require(response.transactions.first { $0.transactionId == "1003" })
    #expect(upgraded.isUpgraded && upgraded.revocationDate == utc(2024, 3, 20))
    #expect(response.transactions.allSatisfy { $0.environment == .production })
    #expect(response.pendingRenewalInfo.map(\.originalTransactionId) == ["1000", "2000"])
    #expect(response.pendingRenewalInfo[0].willAutoRenew)
    #expect(response.pendingRenewalInfo[1].expirationIntent == .customerCancelled)
    #expect(!response.pendingRenewalInfo[1].isInBillingRetryPeriod)

    let evaluation = SubscriptionEvaluator.evaluate(
      history: response.transactions, renewals: response.pendingRenewalInfo,
      catalog: Fixture.catalog, at: utc(2024, 4, 15))
    let premium = try #require(evaluation.status(ofGroup: Group.premium))
    #expect(premium.state == .active)
    #expect(premium.productId == "premium.yearly")
    #expect(premium.expiresDate == utc(2025, 3, 20))
    #expect(premium.autoRenewEnabled && premium.autoRenewProductId == "premium.yearly")
    #expect(premium.originalTransactionId == "1000")
    #expect(evaluation.status(ofGroup: Group.pro)?.state == .revoked)
    #expect(evaluation.status(ofGroup: Group.family)?.state == .neverSubscribed)
    #expect(evaluation.entitlements.map(\.productId) == ["lifetime", "premium.yearly"])
    #expect(evaluation.revocations.map(\.kind) == [.refund, .upgrade])

    let answers = evaluation.eligibility(for: [
      "premium.monthly", "pro.monthly", "family.monthly", "coins.100", "gone",
    ])
    #expect(
      answers.map(\.introductory.reason) == [
        .introAlreadyUsed, .lapsedNoIntroUsed, .newCustomer, .notASubscription, .unknownProduct,
      ])
    #expect(answers[0].introductory.evidenceTransactionId == "1000")
    #expect(
      answers.map(\.promotional.reason) == [
        .existingSubscriber, .lapsedSubscriber, .neverSubscribed, .notASubscription,
        .unknownProduct,
      ])
    let strict = SubscriptionEvaluator.evaluate(
      history: response.transactions, renewals: response.pendingRenewalInfo,
      catalog: Fixture.catalog, policy: EligibilityPolicy(refundsBlockIntro: true),
      at: utc(2024, 4, 15))
    #expect(strict.eligibility(for: "pro.monthly").introductory.reason == .refundedInGroup)
    #expect(strict.eligibility(for: "pro.monthly").introductory.evidenceTransactionId == "2001")
  }

  @Test("a sandbox receipt with JSON booleans and numbers: grace, then retry, read from the data")
  func sandboxFixture() throws {
    let response = try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_sandbox_typed.json"))
    #expect(response.environment == .sandbox)
    let transaction = try #require(response.transactions.first)
    #expect(transaction.ownership == .familyShared)
    #expect(transaction.isInIntroOfferPeriod && !transaction.isTrialPeriod)
    #expect(transaction.webOrderLineItemId == "5900000")
    let renewal = try #require(response.pendingRenewalInfo.first)
    #expect(renewal.originalTransactionId == "5000")
    #expect(renewal.willAutoRenew && renewal.isInBillingRetryPeriod)
    #expect(renewal.expirationIntent == .billingError)

    let start = utc(2024, 4, 15, 10, 0)
    func state(at time: Int64) -> GroupStatus? {
      SubscriptionEvaluator.evaluate(
        history: response.transactions, renewals: response.pendingRenewalInfo,
        catalog: Fixture.catalog, at: time
      ).status(ofGroup: Group.extra)
    }
    #expect(state(at: start + 4 * 60_000)?.state == .active)
    #expect(state(at: start + 4 * 60_000)?.inIntroOffer == true)
    #expect(state(at: start + 4 * 60_000)?.ownership == .familyShared)
    #expect(state(at: start + 6 * 60_000)?.state == .gracePeriod)
    #expect(state(at: start + 10 * 60_000)?.state == .billingRetry)
  }

  @Test("the same id in in_app and latest_receipt_info: latest_receipt_info wins")
  func latestWins() throws {
    let body = #"""
      {"status":0,"receipt":{"in_app":[{"product_id":"premium.monthly","transaction_id":"1",
      "purchase_date_ms":"1704067200000","expires_date_ms":"1706745600000",
      "cancellation_date_ms":"1704153600000"}]},
      "latest_receipt_info":[{"product_id":"premium.monthly","transaction_id":"1",
      "purchase_date_ms":"1704067200000","expires_date_ms":"1706745600000"}]}
      """#
    let response = try VerifyReceiptResponse(parsing: Array(body.utf8))
    #expect(response.transactions.count == 1)
    #expect(response.transactions[0].revocationDate == nil)
  }
}
