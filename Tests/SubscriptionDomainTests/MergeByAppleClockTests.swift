import Testing

@testable import SubscriptionDomain

/// Every order of `items` (small arrays only).
func permutations<T>(_ items: [T]) -> [[T]] {
  if items.count <= 1 { return [items] }
  var result: [[T]] = []
  for (i, item) in items.enumerated() {
    var rest = items
    rest.remove(at: i)
    for tail in permutations(rest) { result.append([item] + tail) }
  }
  return result
}

/// A copy of transaction 1 (premium.monthly, Jan 1 – Feb 1) as one source gives it.
private func copy(
  revoked: Bool = false, signed: Int64? = nil, asOf: Int64? = nil, notification: String? = nil,
  revocationType: RevocationType? = nil, expires: Int64 = utc(2024, 2, 1)
) -> Transaction {
  var t = tx(
    "1", "premium.monthly", jan1, expires, revoked: revoked ? jan1 + 5 * day : nil,
    revocationType: revocationType, signed: signed, notification: notification)
  t.asOfDate = asOf
  return t
}

/// One row of the transaction merge table: the copies, and the one every order must keep.
struct TransactionMergeCase: Sendable, CustomTestStringConvertible {
  var testDescription: String
  var copies: [Transaction]
  var winner: Int
  /// The revocation type the kept copy has from another copy (rule 14, field by field).
  var keptRevocationType: RevocationType? = nil

  /// What every order keeps: the winning copy, with what it lacks from the others.
  var kept: Transaction {
    var t = copies[winner]
    if let keptRevocationType { t.revocationType = keptRevocationType }
    return t
  }
}

/// One row of the renewal-info merge table.
struct RenewalMergeCase: Sendable, CustomTestStringConvertible {
  var testDescription: String
  var versions: [RenewalInfoVersion]
  var winner: Int
}

/// `info` as a receipt dated `asOf` gives it.
private func dated(_ info: RenewalInfo, _ asOf: Int64) -> RenewalInfo {
  var info = info
  info.asOfDate = asOf
  return info
}

private let t100 = jan1 + 10 * day
private let t200 = jan1 + 20 * day
private let t300 = jan1 + 30 * day

@Suite("Merge by Apple's clock (rules 13, 14)")
struct MergeByAppleClockTests {
  static let transactionCases: [TransactionMergeCase] = [
    .init(
      testDescription: "StoreKit 2 copy, then a newer verifyReceipt body with the refund: the refund is kept",
      copies: [copy(signed: t100), copy(revoked: true, asOf: t200)], winner: 1),
    .init(
      testDescription: "a signed copy newer than the receipt's refund restores it (REFUND_REVERSED)",
      copies: [copy(revoked: true, asOf: t100), copy(signed: t200)], winner: 1),
    .init(
      testDescription: "a tie on the clock: the revoked copy wins",
      copies: [copy(signed: t200), copy(revoked: true, asOf: t200)], winner: 1),
    .init(
      testDescription: "a revoked copy of unknown time wins over any unrevoked copy",
      copies: [copy(signed: t300), copy(revoked: true), copy(asOf: t200)], winner: 1),
    .init(
      testDescription: "an unrevoked copy of unknown time never undoes a dated revocation",
      copies: [copy(), copy(revoked: true, asOf: t100)], winner: 1),
    .init(
      testDescription: "a V1 notification's arrival orders it among signed copies",
      copies: [copy(signed: t100), copy(revoked: true, asOf: t200, notification: "REFUND"), copy(signed: t300)],
      winner: 2),
    .init(
      testDescription: "unrevoked copies: the newest on the clock wins, whatever the source",
      copies: [copy(signed: t100, expires: utc(2024, 3, 1)), copy(asOf: t200), copy()], winner: 1),
    .init(
      testDescription: "revoked copies: the newest wins, a revocation of unknown time is the newest",
      copies: [copy(revoked: true, signed: t100, revocationType: .refundFull), copy(revoked: true), copy(signed: t300)],
      winner: 1, keptRevocationType: .refundFull),
    .init(
      testDescription: "same time: the copy that knows more (a notification type) wins, with the other's revocation type",
      copies: [
        copy(revoked: true, asOf: t200), copy(revoked: true, signed: t200, revocationType: .refundFull),
        copy(revoked: true, asOf: t200, notification: "REFUND"),
      ],
      winner: 2, keptRevocationType: .refundFull),
  ]

  @Test("every order of a transaction's copies keeps the same copy", arguments: transactionCases)
  func transactionMerge(_ row: TransactionMergeCase) {
    for order in permutations(row.copies) {
      #expect(Transaction.merged(order) == [row.kept])
      // The pairwise merge the stores apply to their stored row gives the same.
      var stored = order[0]
      for incoming in order.dropFirst() { stored = stored.merging(incoming) }
      #expect(stored == row.kept)
    }
  }

  static let renewalCases: [RenewalMergeCase] = [
    .init(
      testDescription: "a newer snapshot without the renewal info removes it (cancelled during grace)",
      versions: [.present(renewal("1", "premium.monthly", grace: t300, signed: t100)), .removed(originalTransactionId: "1", asOfDate: t200)],
      winner: 1),
    .init(
      testDescription: "an older snapshot never removes what a newer copy added",
      versions: [.removed(originalTransactionId: "1", asOfDate: t100), .present(renewal("1", "premium.monthly", signed: t200))],
      winner: 1),
    .init(
      testDescription: "a removal and a renewal info of the same time: the removal wins",
      versions: [.present(renewal("1", "premium.monthly", signed: t200)), .removed(originalTransactionId: "1", asOfDate: t200)],
      winner: 1),
    .init(
      testDescription: "a removal of unknown time removes only undated data",
      versions: [.removed(originalTransactionId: "1", asOfDate: nil), .present(dated(renewal("1", "premium.monthly"), t100))],
      winner: 1),
    .init(
      testDescription: "renewal infos from a receipt and a signed copy: the newest wins",
      versions: [
        .present(dated(renewal("1", "premium.monthly", retry: true), t300)),
        .present(renewal("1", "premium.monthly", signed: t200)),
        .removed(originalTransactionId: "1", asOfDate: t100),
      ],
      winner: 0),
  ]

  @Test("every order of a renewal info's versions keeps the same version", arguments: renewalCases)
  func renewalMerge(_ row: RenewalMergeCase) {
    for order in permutations(row.versions) {
      #expect(RenewalInfoVersion.merged(order) == [row.versions[row.winner]])
    }
  }

  @Test("a verifyReceipt body dates its copies with receipt.request_date_ms and is a snapshot")
  func receiptIsDatedSnapshot() throws {
    let response = try VerifyReceiptResponse(parsing: Fixture.bytes("verify_receipt_multi_group.json"))
    let requestDate: Int64 = 1_710_892_800_000
    #expect(response.requestDate == requestDate)
    #expect(response.transactions.allSatisfy { $0.asOfDate == requestDate && $0.appleClock == requestDate })
    #expect(response.pendingRenewalInfo.allSatisfy { $0.asOfDate == requestDate })
    let snapshot = response.renewalInfoSnapshot
    #expect(snapshot.asOfDate == requestDate)
    // Only subscriptions (transactions with an expiry) are covered: not the consumable or lifetime.
    let subscriptions = Set(response.transactions.filter { $0.expiresDate != nil }.map(\.originalTransactionId))
    #expect(Set(snapshot.originalTransactionIds) == subscriptions)
    #expect(!snapshot.originalTransactionIds.contains("3000") && !snapshot.originalTransactionIds.contains("4000"))
    // It removes exactly the subscriptions its pending_renewal_info lacks; without any, all of them.
    let renewed = Set(response.pendingRenewalInfo.map(\.originalTransactionId))
    let removed = snapshot.versions(of: response.pendingRenewalInfo).filter { $0.renewalInfo == nil }
    #expect(Set(removed.map(\.originalTransactionId)) == subscriptions.subtracting(renewed))
    #expect(
      snapshot.versions(of: []) == subscriptions.sorted().map { .removed(originalTransactionId: $0, asOfDate: requestDate) })
  }

  @Test("refund lost: a StoreKit 2 copy and a later receipt with cancellation_date, in both orders, give REVOKED")
  func refundLostStory() {
    let signed = copy(signed: t100)
    let refunded = copy(revoked: true, asOf: t200)
    for order in [[signed, refunded], [refunded, signed]] {
      let evaluation = evaluate(Transaction.merged(order), at: t300)
      #expect(evaluation.status(ofGroup: Group.premium)?.state == .revoked)
      #expect(evaluation.entitlements.isEmpty)
    }
  }

  @Test("cancelled during grace: a newer snapshot without the renewal info ends the grace period")
  func cancelledDuringGraceStory() {
    let lapsed = copy(expires: jan1 + 31 * day)
    let graceUntil = jan1 + 59 * day
    let first = RenewalInfoSnapshot(originalTransactionIds: ["1"], asOfDate: jan1 + 32 * day)
    let inGrace = dated(renewal("1", "premium.monthly", retry: true, grace: graceUntil), jan1 + 32 * day)
    let second = RenewalInfoSnapshot(originalTransactionIds: ["1"], asOfDate: jan1 + 33 * day)
    let versions = first.versions(of: [inGrace]) + second.versions(of: [])
    for order in permutations(versions) {
      let renewals = RenewalInfoVersion.merged(order).compactMap(\.renewalInfo)
      #expect(renewals.isEmpty)
      let evaluation = evaluate([lapsed], renewals, at: jan1 + 34 * day)
      #expect(evaluation.status(ofGroup: Group.premium)?.state == .expired)
      #expect(evaluation.entitlements.isEmpty)
    }
    // Before the second snapshot the same data is in grace.
    let before = evaluate([lapsed], [inGrace], at: jan1 + 32 * day)
    #expect(before.status(ofGroup: Group.premium)?.state == .gracePeriod)
  }
}

@Suite("V1 notifications' clock (rule 14)")
struct V1ClockTests {
  @Test("a V1 body is as of the latest instant it records: a retried old body never undoes a refund")
  func retriedOldBody() {
    let feb1 = utc(2024, 2, 1)
    let first = tx("1", "premium.monthly", jan1, feb1)
    let second = tx("2", "premium.monthly", feb1, utc(2024, 3, 1), otx: "1")
    var refunded = second
    refunded.revocationDate = feb1 + 5 * day
    #expect(Transaction.latestRecordedDate(in: [first, second]) == feb1)
    #expect(Transaction.latestRecordedDate(in: [first, refunded]) == feb1 + 5 * day)
    #expect(Transaction.latestRecordedDate(in: [first], otherDates: [nil, feb1 + day]) == feb1 + day)
    #expect(Transaction.latestRecordedDate(in: [], otherDates: [nil]) == nil)
    func body(_ transactions: [Transaction]) -> [Transaction] {
      let asOf = Transaction.latestRecordedDate(in: transactions)
      return transactions.map { var t = $0; t.asOfDate = asOf; return t }
    }
    let renewed = body([first, second])
    let refund = body([first, refunded])
    for order in [renewed + refund, refund + renewed] {
      let merged = Transaction.merged(order)
      #expect(merged.first { $0.transactionId == "2" }?.revocationDate == feb1 + 5 * day)
    }
  }
}
