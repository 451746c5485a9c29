import Testing

@testable import SubscriptionDomain

/// One row of the entitlement table (rule 6): the entitlements expected at an instant.
struct EntitlementCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction]
  var renewals: [RenewalInfo] = []
  var time: Int64
  /// (product, expires, transaction) in product order.
  var expected: [Expected]
  var policy: EligibilityPolicy = .default
  var testDescription: String { name }

  struct Expected: Sendable, Equatable {
    var product: String
    var expires: Int64?
    var transaction: String
    init(_ product: String, _ expires: Int64?, _ transaction: String) {
      self.product = product
      self.expires = expires
      self.transaction = transaction
    }
  }
}

let jan31 = utc(2024, 1, 31)
let mar1 = utc(2024, 3, 1)

let entitlementCases: [EntitlementCase] = [
  EntitlementCase(
    name: "non-renewing terms chain: the second starts where the first ends",
    history: [tx("n1", "pass.30days", jan1), tx("n2", "pass.30days", jan1 + 9 * day)],
    time: utc(2024, 2, 15), expected: [.init("pass.30days", mar1, "n2")]),
  EntitlementCase(
    name: "non-renewing chain reports the end of the whole chain during the first term",
    history: [tx("n1", "pass.30days", jan1), tx("n2", "pass.30days", jan1 + 9 * day)],
    time: jan1 + 15 * day, expected: [.init("pass.30days", mar1, "n1")]),
  EntitlementCase(
    name: "non-renewing chain with a gap: nothing in the gap",
    history: [tx("n1", "pass.30days", jan1), tx("n2", "pass.30days", utc(2024, 3, 15))],
    time: utc(2024, 2, 15), expected: []),
  EntitlementCase(
    name: "non-renewing chain with a gap: the later term starts at its purchase",
    history: [tx("n1", "pass.30days", jan1), tx("n2", "pass.30days", utc(2024, 3, 15))],
    time: utc(2024, 3, 20), expected: [.init("pass.30days", utc(2024, 4, 14), "n2")]),
  EntitlementCase(
    name: "non-renewing chain with a refund: the refunded term is dropped",
    history: [
      tx("n1", "pass.30days", jan1, revoked: jan1 + 4 * day),
      tx("n2", "pass.30days", jan1 + 9 * day),
    ],
    time: jan1 + 20 * day, expected: [.init("pass.30days", utc(2024, 2, 9), "n2")]),
  EntitlementCase(
    name: "non-renewing term end is exclusive",
    history: [tx("n1", "pass.30days", jan1)], time: jan31, expected: []),
  EntitlementCase(
    name: "non-renewing P1M from Jan 31 ends Feb 29 (month-end clamping)",
    history: [tx("n1", "pass.1month", jan31)], time: utc(2024, 2, 28),
    expected: [.init("pass.1month", utc(2024, 2, 29), "n1")]),
  EntitlementCase(
    name: "non-renewing chains are per product",
    history: [tx("n1", "pass.30days", jan1), tx("n2", "pass.1month", jan1 + day)],
    time: jan1 + 2 * day,
    expected: [.init("pass.1month", utc(2024, 2, 2), "n2"), .init("pass.30days", jan31, "n1")]),
  EntitlementCase(
    name: "non-consumable: owned with no end",
    history: [tx("l1", "lifetime", jan1)], time: utc(2030, 1, 1),
    expected: [.init("lifetime", nil, "l1")]),
  EntitlementCase(
    name: "non-consumable refunded: not owned",
    history: [tx("l1", "lifetime", jan1, revoked: jan1 + day)], time: jan1 + 2 * day,
    expected: []),
  EntitlementCase(
    name: "non-consumable bought twice, one refunded: still owned through the other",
    history: [tx("l1", "lifetime", jan1, revoked: jan1 + day), tx("l2", "lifetime", jan1 + 3 * day)],
    time: jan1 + 4 * day, expected: [.init("lifetime", nil, "l2")]),
  EntitlementCase(
    name: "consumables never entitle",
    history: [tx("c1", "coins.100", jan1)], time: jan1 + day, expected: []),
  EntitlementCase(
    name: "free subscription: no end unless revoked",
    history: [tx("f1", "newsstand.free", jan1)], time: utc(2031, 1, 1),
    expected: [.init("newsstand.free", nil, "f1")]),
  EntitlementCase(
    name: "free subscription revoked",
    history: [tx("f1", "newsstand.free", jan1, revoked: jan1 + day)], time: jan1 + day,
    expected: []),
  EntitlementCase(
    name: "auto-renewable, non-consumable and non-renewing together",
    history: [
      tx("p1", "premium.monthly", jan1, feb1), tx("l1", "lifetime", jan1),
      tx("n1", "pass.30days", jan1 + day), tx("c1", "coins.100", jan1),
    ],
    time: jan1 + 2 * day,
    expected: [
      .init("lifetime", nil, "l1"), .init("pass.30days", utc(2024, 1, 31) + day, "n1"),
      .init("premium.monthly", feb1, "p1"),
    ]),
  EntitlementCase(
    name: "grace entitles the lapsed product, not the pending one",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("p1", "premium.monthly", next: "premium.yearly", retry: true, grace: feb17)],
    time: feb1 + day, expected: [.init("premium.monthly", feb17, "p1")]),
  EntitlementCase(
    name: "billing retry does not entitle by default",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("p1", "premium.monthly", retry: true)], time: feb1 + day, expected: []),
  EntitlementCase(
    name: "billing retry entitles under billingRetryEntitled, with no known end",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [renewal("p1", "premium.monthly", retry: true)], time: feb1 + day,
    expected: [.init("premium.monthly", nil, "p1")],
    policy: EligibilityPolicy(billingRetryEntitled: true)),
]

@Suite("Entitlements (rule 6)")
struct EntitlementTests {
  @Test("entitlement table", arguments: entitlementCases)
  func entitlements(_ c: EntitlementCase) {
    let evaluation = evaluate(c.history, c.renewals, at: c.time, policy: c.policy)
    let actual = evaluation.entitlements.map {
      EntitlementCase.Expected($0.productId, $0.expiresDate, $0.transactionId)
    }
    #expect(actual == c.expected)
  }

  @Test("family-shared entitlements carry their ownership and type")
  func familyOwnership() throws {
    let evaluation = evaluate(
      [tx("f1", "family.monthly", jan1, feb1, family: true), tx("l1", "lifetime", jan1, family: true)],
      at: jan1 + day)
    #expect(evaluation.entitlements.map(\.ownership) == [.familyShared, .familyShared])
    #expect(evaluation.entitlements.map(\.type) == [.autoRenewable, .nonConsumable])
  }
}

/// Revocation classification (rule 7).
struct RevocationCase: Sendable, CustomTestStringConvertible {
  var name: String
  var transaction: Transaction
  var kind: RevocationKind
  var testDescription: String { name }
}

let revocationCases: [RevocationCase] = [
  RevocationCase(
    name: "revocationType FAMILY_REVOKE",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day, reason: .appIssue,
      revocationType: .familyRevoke, family: true), kind: .familyRemoval),
  RevocationCase(
    name: "revocationType REFUND_FULL",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day,
      revocationType: .refundFull, family: true), kind: .refund),
  RevocationCase(
    name: "revocationType REFUND_PRORATED",
    transaction: tx("a", "premium.monthly", jan1, feb1, revoked: jan1 + day,
      revocationType: .refundProrated), kind: .refund),
  RevocationCase(
    name: "is_upgraded",
    transaction: tx("a", "premium.monthly", jan1, feb1, revoked: jan1 + day, upgraded: true),
    kind: .upgrade),
  RevocationCase(
    name: "delivered by a REVOKE notification",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day, reason: .appIssue,
      family: true, notification: "REVOKE"), kind: .familyRemoval),
  RevocationCase(
    name: "delivered by a REFUND notification",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day, family: true,
      notification: "REFUND"), kind: .refund),
  RevocationCase(
    name: "family-shared, reason 1 (the purchaser's refund reason)",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day, reason: .appIssue,
      family: true), kind: .refund),
  RevocationCase(
    name: "family-shared, reason 0: left the family or sharing stopped",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day, reason: .other,
      family: true), kind: .familyRemoval),
  RevocationCase(
    name: "purchased, reason 0: refund (accidental purchase)",
    transaction: tx("a", "premium.monthly", jan1, feb1, revoked: jan1 + day, reason: .other),
    kind: .refund),
]

@Suite("Revocations (rules 3, 7)")
struct RevocationTests {
  @Test("classification table", arguments: revocationCases)
  func classification(_ c: RevocationCase) throws {
    #expect(RevocationKind(classifying: c.transaction) == c.kind)
    let evaluation = evaluate([c.transaction], at: jan1 + day)
    let revocation = try #require(evaluation.revocations.first)
    #expect(revocation.kind == c.kind)
    #expect(revocation.transactionId == "a")
    #expect(revocation.revocationDate == jan1 + day)
    // Every kind ends access.
    #expect(evaluation.entitlements.isEmpty)
  }

  @Test("not revoked: no classification, and revocations after the instant are not reported")
  func notRevoked() {
    #expect(RevocationKind(classifying: tx("a", "premium.monthly", jan1, feb1)) == nil)
    let evaluation = evaluate(
      [tx("a", "premium.monthly", jan1, feb1, revoked: jan1 + 5 * day)], at: jan1 + 4 * day)
    #expect(evaluation.revocations.isEmpty)
  }
}
