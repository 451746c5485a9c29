import Testing

@testable import SubscriptionDomain

/// Only signed copies (StoreKit 2, the Server API, V2 notifications) carry Apple's `price` and
/// `currency`; when a copy without them wins the merge (a newer verifyReceipt body, a V1
/// notification with a refund), the transaction keeps the price a signed copy told.
@Suite("Merge keeps the known price")
struct MergeKeepsPriceTests {
  static func signed(_ at: Int64, price: Int64 = 9_990, currency: String = "EUR") -> Transaction {
    var t = tx("1", "premium.monthly", jan1, utc(2024, 2, 1), signed: at)
    t.price = price
    t.currency = currency
    return t
  }

  static func receipt(asOf: Int64, revoked: Bool = false) -> Transaction {
    var t = tx("1", "premium.monthly", jan1, utc(2024, 2, 1), revoked: revoked ? jan1 + 5 * day : nil)
    t.asOfDate = asOf
    return t
  }

  @Test(
    "a winning copy without a price keeps the signed copy's, in every order",
    arguments: [
      [signed(jan1 + day), receipt(asOf: jan1 + 2 * day)],
      [signed(jan1 + day), receipt(asOf: jan1 + 9 * day, revoked: true)],
      [receipt(asOf: jan1), signed(jan1 + day), receipt(asOf: jan1 + 3 * day)],
    ])
  func keepsPrice(_ copies: [Transaction]) {
    let winner = copies.max { $1.supersedes($0) }!
    for order in permutations(copies) {
      let merged = Transaction.merged(order)
      #expect(merged.count == 1)
      #expect(merged.first?.price == 9_990 && merged.first?.currency == "EUR")
      // Everything else is the winning copy's.
      var rest = merged[0]
      rest.price = nil
      rest.currency = nil
      #expect(rest == winner)
      // The pairwise merge a store applies to its stored row gives the same.
      var stored = order[0]
      for incoming in order.dropFirst() { stored = stored.merging(incoming) }
      #expect(stored == merged[0])
    }
  }

  @Test("a winning copy's own price stays; without any priced copy there is none")
  func ownPriceWins() {
    let older = Self.signed(jan1 + day, price: 4_990, currency: "USD")
    let newer = Self.signed(jan1 + 2 * day)
    for order in permutations([older, newer]) {
      #expect(Transaction.merged(order) == [newer])
    }
    let unpriced = [Self.receipt(asOf: jan1 + day), Self.receipt(asOf: jan1 + 2 * day)]
    #expect(Transaction.merged(unpriced).first?.price == nil)
    #expect(unpriced[0].merging(unpriced[1]) == unpriced[1])
  }
}
