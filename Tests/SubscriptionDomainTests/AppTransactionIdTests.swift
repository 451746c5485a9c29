import Testing

@testable import SubscriptionDomain

/// Apple's `appTransactionId` (App Store Server API 1.20: one per Apple Account per app) read from
/// signed transactions and renewal infos, and kept by merges (docs/architecture.md rule 24).
@Suite("appTransactionId")
struct AppTransactionIdTests {
  @Test("a JWSTransactionDecodedPayload's and a JWSRenewalInfoDecodedPayload's appTransactionId are read")
  func signedData() throws {
    let t = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_app_account.json"))
    #expect(t.appTransactionId == "704289572311810221")
    let r = try RenewalInfo(jwsRenewalInfoPayload: Fixture.bytes("v2_renewal_app_account.json"))
    #expect(r.appTransactionId == "704289572311810221")
    // Older signed data has none.
    #expect(try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_priced.json")).appTransactionId == nil)
    #expect(try RenewalInfo(jwsRenewalInfoPayload: Fixture.bytes("v2_renewal_grace.json")).appTransactionId == nil)
  }

  @Test("verifyReceipt data carries none")
  func verifyReceiptHasNone() throws {
    let body = try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_multi_group.json"))
    #expect(!body.transactions.isEmpty)
    #expect(body.transactions.allSatisfy { $0.appTransactionId == nil })
  }

  @Test("a newer copy without the appTransactionId keeps the older copy's, in either order", arguments: [false, true])
  func mergeKeepsIt(newerFirst: Bool) throws {
    var signed = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_app_account.json"))
    signed.signedDate = 1_704_672_000_000
    // A later unsigned copy (a verifyReceipt body requested after the signature) wins but lacks it.
    var receipt = signed
    receipt.signedDate = nil
    receipt.appTransactionId = nil
    receipt.asOfDate = 1_704_672_000_000 + 1_000
    #expect(receipt.supersedes(signed))
    let merged = Transaction.merged(newerFirst ? [receipt, signed] : [signed, receipt])
    #expect(merged.count == 1)
    #expect(merged[0].appTransactionId == "704289572311810221")
    #expect(merged[0].asOfDate == receipt.asOfDate)
    #expect(receipt.merging(signed).appTransactionId == "704289572311810221")
    #expect(signed.merging(receipt).appTransactionId == "704289572311810221")
  }

  @Test("a verified Apple Account turns every NEW_CUSTOMER introductory answer into NEW_CUSTOMER_VERIFIED, and nothing else")
  func verifiedNewCustomers() {
    // Premium active; pro never subscribed.
    let answers = evaluate([tx("1", "premium.monthly", jan1, jan1 + 30 * day)], at: jan1 + day).eligibilityAnswers
    #expect(answers.hasNewCustomerAnswer)
    let verified = answers.withVerifiedAppleAccount()
    #expect(!verified.hasNewCustomerAnswer)
    #expect(verified.eligibility(for: ["pro.monthly"])[0].introductory.reason == .newCustomerVerified)
    #expect(verified.eligibility(for: ["pro.monthly"])[0].introductory.eligible)
    #expect(verified.eligibility(for: ["premium.monthly"]) == answers.eligibility(for: ["premium.monthly"]))
    #expect(verified.eligibility(for: ["premium.weekly"])[0].introductory.reason == .noIntroOffer)
    #expect(verified.eligibility(for: ["pro.monthly"])[0].promotional == answers.eligibility(for: ["pro.monthly"])[0].promotional)
  }
}
