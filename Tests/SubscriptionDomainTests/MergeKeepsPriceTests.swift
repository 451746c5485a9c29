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

/// Rule 14, field by field: a winning copy without a price (and currency), a `revocationType` or
/// an `appAccountToken` keeps the value another copy of the transaction carried, whatever order
/// the copies arrive in, and the stores' pairwise merge agrees with the merge of all copies.
@Suite("Merge field by field")
struct MergeFieldByFieldTests {
  /// Transaction 1 refunded on Jan 6, as a source gives it.
  static func refunded(
    signed: Int64? = nil, asOf: Int64? = nil, notification: String? = nil, type: RevocationType? = nil,
    token: String? = nil, price: Int64? = nil
  ) -> Transaction {
    var t = tx(
      "1", "premium.monthly", jan1, utc(2024, 2, 1), revoked: jan1 + 5 * day, revocationType: type,
      signed: signed, notification: notification)
    t.asOfDate = asOf
    t.appAccountToken = token
    if let price {
      t.price = price
      t.currency = "EUR"
    }
    return t
  }

  @Test("a newer verifyReceipt body and V1 REFUND keep the V2 REFUND's type, token and price, in every order")
  func keepsEveryField() {
    let v2 = Self.refunded(signed: jan1 + 6 * day, notification: "REFUND", type: .refundFull, token: "tok-1", price: 9_990)
    let v1 = Self.refunded(asOf: jan1 + 7 * day, notification: "REFUND")
    let receipt = Self.refunded(asOf: jan1 + 9 * day)
    var kept = receipt
    kept.revocationType = .refundFull
    kept.appAccountToken = "tok-1"
    kept.price = 9_990
    kept.currency = "EUR"
    for order in permutations([v2, v1, receipt]) {
      #expect(Transaction.merged(order) == [kept])
      var stored = order[0]
      for incoming in order.dropFirst() { stored = stored.merging(incoming) }
      #expect(stored == kept)
      #expect(stored.revocationType == .refundFull && RevocationKind(classifying: stored) == .refund)
    }
  }

  @Test("a winning copy's own values stay")
  func ownValuesWin() {
    let older = Self.refunded(signed: jan1 + 6 * day, type: .familyRevoke, token: "old")
    let newer = Self.refunded(signed: jan1 + 7 * day, type: .refundFull, token: "new")
    for order in permutations([older, newer]) {
      #expect(Transaction.merged(order) == [newer])
      #expect(order[0].merging(order[1]) == newer)
    }
  }

  @Test("a reversed refund reports no revocation type; a later revocation of unknown kind has the refund's")
  func reversal() {
    let refund = Self.refunded(signed: jan1 + 6 * day, type: .refundFull)
    var reversed = tx("1", "premium.monthly", jan1, utc(2024, 2, 1), signed: jan1 + 8 * day)
    reversed.appAccountToken = nil
    let merged = refund.merging(reversed)
    #expect(merged.revocationDate == nil && merged.revocationType == nil)
    #expect(Transaction.merged([reversed, refund]) == [merged])
    // An undated revoked copy (rule 14: the newest) revokes it again, with the type told.
    let undated = Self.refunded()
    #expect(merged.merging(undated).revocationType == .refundFull)
  }

  /// Random copies of one transaction from every kind of source (signed, dated, undated; revoked
  /// or not; each of the filled fields carried or not, with Apple's one value of each): every
  /// order, merged at once or one copy at a time into a stored row, keeps the same.
  @Test("random copies: merged at once and one at a time agree in every order", arguments: 0..<400)
  func randomCopies(seed: UInt64) {
    var g = SeededGenerator(seed: seed)
    var copies: [Transaction] = []
    for _ in 0..<Int.random(in: 2...5, using: &g) {
      let revoked = Bool.random(using: &g)
      var t = tx(
        "1", "premium.monthly", jan1, utc(2024, 2, 1) + Int64.random(in: 0...1, using: &g) * day,
        revoked: revoked ? jan1 + 5 * day : nil)
      switch Int.random(in: 0..<3, using: &g) {
      case 0: t.signedDate = jan1 + Int64.random(in: 5...8, using: &g) * day
      case 1: t.asOfDate = jan1 + Int64.random(in: 5...8, using: &g) * day
      default: break
      }
      if revoked, Bool.random(using: &g) { t.notificationType = "REFUND" }
      if revoked, Bool.random(using: &g) { t.revocationType = .refundFull }
      if Bool.random(using: &g) { t.appAccountToken = "tok" }
      if Bool.random(using: &g) {
        t.price = 4_990
        t.currency = "USD"
      }
      copies.append(t)
    }
    let expected = Transaction.merged(copies)
    var orders = [copies, copies.reversed()]
    for _ in 0..<4 { orders.append(copies.shuffled(using: &g)) }
    for order in orders {
      #expect(Transaction.merged(order) == expected, "seed \(seed)")
      var stored = order[0]
      for incoming in order.dropFirst() { stored = stored.merging(incoming) }
      #expect([stored] == expected, "seed \(seed)")
    }
  }
}
