import Testing

@testable import SubscriptionDomain

/// Apple's `price` (milliunits) and `currency` (ISO 4217), read from signed transactions only.
@Suite("Transaction price")
struct TransactionPriceTests {
  @Test("a JWSTransactionDecodedPayload's price and currency are read as Apple sends them")
  func signedTransaction() throws {
    let renewal = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_priced.json"))
    #expect(renewal.price == 9_990)
    #expect(renewal.currency == "EUR")
    // A payload without them (older data, or Apple leaving them out) has neither.
    let trial = try Transaction(jwsTransactionPayload: Fixture.bytes("v2_transaction_trial.json"))
    #expect(trial.price == nil && trial.currency == nil)
  }

  @Test(
    "price arrives as a number or a numeric string; anything else names the field",
    arguments: [
      (#""price":0,"currency":"JPY""#, Int64?.some(0), "JPY"),
      (#""price":"4990","currency":"USD""#, Int64?.some(4_990), "USD"),
      (#""price":"","currency":"""#, Int64?.none, nil),
    ] as [(String, Int64?, String?)])
  func priceValues(fields: String, price: Int64?, currency: String?) throws {
    let json = #"{"transactionId":"1","productId":"p","purchaseDate":1,"# + fields + "}"
    let t = try Transaction(jwsTransactionPayload: Array(json.utf8))
    #expect(t.price == price)
    #expect(t.currency == currency)
  }

  @Test("a price that is not an integer is rejected naming the field")
  func badPrice() {
    let json = #"{"transactionId":"1","productId":"p","purchaseDate":1,"price":"9.99"}"#
    #expect {
      try Transaction(jwsTransactionPayload: Array(json.utf8))
    } throws: { error in
      (error as? AppleDataError)?.field == "price"
    }
  }

  @Test("verifyReceipt data carries no price")
  func verifyReceiptHasNone() throws {
    let body = try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_multi_group.json"))
    #expect(!body.transactions.isEmpty)
    #expect(body.transactions.allSatisfy { $0.price == nil && $0.currency == nil })
  }
}
