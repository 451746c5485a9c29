import SubstatusWire
import Testing

@testable import SubstatusService

/// Apple's `price` and `currency` on the wire `Transaction`: imported, validated and returned.
@Suite("Transaction price on the wire")
struct TransactionPriceTests {
  private func transaction(_ id: String, price: Int64, currency: String) -> Substatus_V1_Transaction {
    var t = Substatus_V1_Transaction()
    t.transactionID = id
    t.productID = "premium.monthly"
    t.purchaseDateMs = 1_711_000_000_000
    t.expiresDateMs = 1_713_000_000_000
    t.priceMilliunits = price
    t.currency = currency
    return t
  }

  @Test("an imported price and currency are stored and returned; a free trial's 0 stays 0")
  func roundTrip() async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = appID
      request.userID = "u"
      var trial = transaction("t1", price: 0, currency: "EUR")
      trial.isTrialPeriod = true
      var paid = transaction("t2", price: 9_990, currency: "EUR")
      paid.purchaseDateMs = trial.expiresDateMs
      paid.expiresDateMs = trial.expiresDateMs + 2_000_000_000
      let unpriced = transaction("t3", price: 0, currency: "")
      request.transactions = [trial, paid, unpriced]
      let imported = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
      #expect(imported.transactionResults.map(\.outcome) == [.created, .created, .created])

      var read = Substatus_V1_GetTransactionHistoryRequest()
      read.appID = appID
      read.userID = "u"
      let history = try await h.call(Substatus_V1_StatusService.getTransactionHistory, read, key: admin)
      let byID = Dictionary(uniqueKeysWithValues: history.transactions.map { ($0.transactionID, $0) })
      #expect(byID["t1"]?.priceMilliunits == 0 && byID["t1"]?.currency == "EUR")
      #expect(byID["t2"]?.priceMilliunits == 9_990 && byID["t2"]?.currency == "EUR")
      #expect(byID["t3"]?.priceMilliunits == 0 && byID["t3"]?.currency == "")
    }
  }

  @Test(
    "a bad price or currency is INVALID_ARGUMENT naming the field",
    arguments: [
      (Int64(-1), "USD", "transactions[0].price_milliunits"),
      (Int64(990), "", "transactions[0].currency"),
      (Int64(990), "usd", "transactions[0].currency"),
      (Int64(990), "EURO", "transactions[0].currency"),
    ])
  func rejected(price: Int64, currency: String, field: String) async throws {
    try await withService { h in
      let (admin, appID) = try await h.makeTenantWithApp()
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = appID
      request.userID = "u"
      request.transactions = [transaction("t1", price: price, currency: currency)]
      let result = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
      #expect(result.transactionResults.map(\.outcome) == [.rejected])
      #expect(result.transactionResults.first?.error?.field == field)
      #expect(result.transactionResults.first?.error?.code == 3)
    }
  }
}
