import SubstatusJSON
import Testing

@testable import SubscriptionDomain

/// A V2 notification payload (`ResponseBodyV2DecodedPayload`) of `type` with `data.status`.
private func notificationV2(
  _ type: String, status: Int? = nil, signedDate: Int64? = utc(2024, 2, 10)
) throws -> NotificationV2 {
  var data: JSONObject = ["environment": .string("Production"), "bundleId": .string("com.example.app")]
  if let status { data.append("status", .integer(status)) }
  var body: JSONObject = [
    "notificationType": .string(type), "notificationUUID": .string("u-\(type)"), "data": .object(data),
  ]
  if let signedDate { body.append("signedDate", .integer(Int(signedDate))) }
  return try NotificationV2(json: .object(body))
}

/// One row of rule 15: what a V2 notification does to the transaction it carries.
struct NotificationRevocationCase: Sendable, CustomTestStringConvertible {
  var name: String
  var type: String
  var status: Int?
  var signedDate: Int64? = utc(2024, 2, 10)
  var revocationDate: Int64? = nil
  /// The revocation date the stored transaction must carry (`nil`: not revoked).
  var expected: Int64?
  var kind: RevocationKind?
  var testDescription: String { name }
}

private let received = utc(2024, 2, 11)

let notificationRevocationCases: [NotificationRevocationCase] = [
  .init(
    name: "REVOKE without revocationDate ends access at the notification's signedDate",
    type: "REVOKE", status: 5, expected: utc(2024, 2, 10), kind: .familyRemoval),
  .init(
    name: "REVOKE without revocationDate nor status still ends access",
    type: "REVOKE", status: nil, expected: utc(2024, 2, 10), kind: .familyRemoval),
  .init(
    name: "REVOKE whose status disagrees (1) still ends access: a REVOKE always does",
    type: "REVOKE", status: 1, expected: utc(2024, 2, 10), kind: .familyRemoval),
  .init(
    name: "REFUND without revocationDate ends access at signedDate, as a refund",
    type: "REFUND", status: 5, expected: utc(2024, 2, 10), kind: .refund),
  .init(
    name: "REVOKE with its revocationDate keeps it",
    type: "REVOKE", status: 5, revocationDate: utc(2024, 2, 9), expected: utc(2024, 2, 9),
    kind: .familyRemoval),
  .init(
    name: "status 5 (revoked) on another type without revocationDate: revoked at signedDate",
    type: "DID_CHANGE_RENEWAL_STATUS", status: 5, expected: utc(2024, 2, 10), kind: .familyRemoval),
  .init(
    name: "REVOKE without signedDate: revoked when it arrived",
    type: "REVOKE", status: 5, signedDate: nil, expected: received, kind: .familyRemoval),
  .init(name: "DID_RENEW, status 1: nothing revoked", type: "DID_RENEW", status: 1, expected: nil),
  .init(
    name: "REFUND_REVERSED: nothing revoked", type: "REFUND_REVERSED", status: 1, expected: nil),
]

@Suite("A REVOKE always ends access (rule 15)")
struct NotificationRevocationTests {
  @Test("V2 notifications and the transaction they carry", arguments: notificationRevocationCases)
  func revocation(_ c: NotificationRevocationCase) throws {
    let notification = try notificationV2(c.type, status: c.status, signedDate: c.signedDate)
    // A family member's shared subscription, as the notification's signedTransactionInfo.
    let payload = tx(
      "f2", "family.monthly", jan1 + 31 * day, utc(2024, 3, 1), otx: "f1",
      revoked: c.revocationDate, family: true, signed: utc(2024, 2, 10),
      notification: c.type)
    let stored = notification.applyingRevocation(to: payload, receivedAt: received)
    #expect(stored.revocationDate == c.expected)
    #expect(RevocationKind(classifying: stored) == c.kind)
    let today = utc(2024, 2, 20)
    let evaluation = evaluate([stored], at: today)
    let status = try #require(evaluation.status(ofGroup: Group.family))
    if c.expected != nil {
      #expect(status.state == .revoked)
      #expect(evaluation.entitlements.isEmpty)
    } else {
      #expect(status.state == .active)
      #expect(evaluation.entitlements.map(\.productId) == ["family.monthly"])
    }
  }
}

/// One row of rule 17's classification order.
struct ClassificationCase: Sendable, CustomTestStringConvertible {
  var name: String
  var transaction: Transaction
  var kind: RevocationKind
  var testDescription: String { name }
}

let classificationCases: [ClassificationCase] = [
  .init(
    name: "V2 REVOKE carrying a refund (REFUND_FULL) is a refund",
    transaction: tx(
      "a", "family.monthly", jan1, feb1, revoked: jan1 + day, revocationType: .refundFull,
      family: true, notification: "REVOKE"), kind: .refund),
  .init(
    name: "V2 REVOKE carrying REFUND_PRORATED is a refund",
    transaction: tx(
      "a", "family.monthly", jan1, feb1, revoked: jan1 + day, revocationType: .refundProrated,
      family: true, notification: "REVOKE"), kind: .refund),
  .init(
    name: "REFUND notification with FAMILY_REVOKE: revocationType wins",
    transaction: tx(
      "a", "family.monthly", jan1, feb1, revoked: jan1 + day, revocationType: .familyRevoke,
      notification: "REFUND"), kind: .familyRemoval),
  .init(
    name: "no revocationType: the notification type (REFUND) beats the ownership",
    transaction: tx(
      "a", "family.monthly", jan1, feb1, revoked: jan1 + day, reason: .other, family: true,
      notification: "REFUND"), kind: .refund),
  .init(
    name: "no revocationType, no notification: FAMILY_SHARED is a family removal",
    transaction: tx("a", "family.monthly", jan1, feb1, revoked: jan1 + day, family: true),
    kind: .familyRemoval),
  .init(
    name: "no signal at all on a purchase: a refund",
    transaction: tx("a", "premium.monthly", jan1, feb1, revoked: jan1 + day), kind: .refund),
]

@Suite("Refund or family removal (rule 17)")
struct RevocationClassificationTests {
  @Test("classification order", arguments: classificationCases)
  func classification(_ c: ClassificationCase) throws {
    #expect(RevocationKind(classifying: c.transaction) == c.kind)
    let counts = evaluate([c.transaction], at: jan1 + 2 * day).reportCounts
    #expect(counts.refunded == (c.kind == .refund ? 1 : 0))
    #expect(counts.familyAccessRevoked == (c.kind == .familyRemoval ? 1 : 0))
  }

  /// A V1 REVOKE for a family member whose receipt also holds an older refund of their own.
  static let v1RevokeWithOlderRefund = #"""
    {"notification_type":"REVOKE","password":"s","environment":"PROD","unified_receipt":{
     "status":0,"environment":"Production","latest_receipt_info":[
      {"product_id":"premium.monthly","transaction_id":"p1","original_transaction_id":"p1",
       "purchase_date_ms":"1704067200000","expires_date_ms":"1706745600000",
       "cancellation_date_ms":"1704153600000","cancellation_reason":"0",
       "in_app_ownership_type":"PURCHASED"},
      {"product_id":"family.monthly","transaction_id":"f2","original_transaction_id":"f1",
       "purchase_date_ms":"1706745600000","expires_date_ms":"1709251200000",
       "cancellation_date_ms":"1707523200000","cancellation_reason":"0",
       "in_app_ownership_type":"FAMILY_SHARED"},
      {"product_id":"family.monthly","transaction_id":"f1","original_transaction_id":"f1",
       "purchase_date_ms":"1704067200000","expires_date_ms":"1706745600000",
       "in_app_ownership_type":"FAMILY_SHARED"}]}}
    """#

  @Test("a V1 REVOKE labels only the transactions it revokes, not older refunds")
  func v1RevokeKeepsOlderRefunds() throws {
    let notification = try NotificationV1(parsing: Array(Self.v1RevokeWithOlderRefund.utf8))
    let byId = Dictionary(uniqueKeysWithValues: notification.transactions.map { ($0.transactionId, $0) })
    #expect(byId["f2"]?.notificationType == "REVOKE")
    #expect(byId["p1"]?.notificationType == nil)
    #expect(byId["f1"]?.notificationType == nil)
    let evaluation = evaluate(notification.transactions, at: utc(2024, 2, 20))
    #expect(evaluation.revocations.map(\.transactionId) == ["p1", "f2"])
    #expect(evaluation.revocations.map(\.kind) == [.refund, .familyRemoval])
    #expect(evaluation.reportCounts.refunded == 1)
    #expect(evaluation.reportCounts.familyAccessRevoked == 1)
    // The refund stored earlier by a V1 REFUND keeps its label when the REVOKE re-sends it.
    var earlier = try #require(byId["p1"])
    earlier.notificationType = "REFUND"
    let merged = Transaction.merged([earlier] + notification.transactions)
    #expect(merged.first { $0.transactionId == "p1" }.flatMap(RevocationKind.init(classifying:)) == .refund)
  }
}

/// One row of rule 16: covering transactions of one group and what they entitle.
struct CoverageCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction]
  var time: Int64 = jan1 + 10 * day
  var state: SubscriptionState = .active
  var product: String
  var ownership: OwnershipType
  var entitled: [Entitlement]
  var testDescription: String { name }
}

private func entitled(_ product: String, _ expires: Int64, _ id: String, family: Bool = false)
  -> Entitlement
{
  Entitlement(
    productId: product, type: .autoRenewable, expiresDate: expires,
    ownership: family ? .familyShared : .purchased, transactionId: id,
    subscriptionGroupId: Group.premium)
}

let coverageCases: [CoverageCase] = [
  .init(
    name: "own monthly and family-shared yearly: both entitled, status follows the later expiry",
    history: [
      tx("p1", "premium.monthly", jan1, feb1),
      tx("f1", "premium.yearly", jan1 + day, utc(2025, 1, 2), family: true),
    ],
    product: "premium.yearly", ownership: .familyShared,
    entitled: [
      entitled("premium.monthly", feb1, "p1"),
      entitled("premium.yearly", utc(2025, 1, 2), "f1", family: true),
    ]),
  .init(
    name: "own yearly outlasts the family-shared monthly: status follows the own purchase",
    history: [
      tx("p1", "premium.yearly", jan1, utc(2025, 1, 1)),
      tx("f1", "premium.monthly", jan1 + day, feb1, family: true),
    ],
    product: "premium.yearly", ownership: .purchased,
    entitled: [
      entitled("premium.monthly", feb1, "f1", family: true),
      entitled("premium.yearly", utc(2025, 1, 1), "p1"),
    ]),
  .init(
    name: "own and family-shared of the same product: one entitlement, the later expiry",
    history: [
      tx("p1", "premium.monthly", jan1, feb1),
      tx("f1", "premium.monthly", jan1 + day, feb1 + day, family: true),
    ],
    product: "premium.monthly", ownership: .familyShared,
    entitled: [entitled("premium.monthly", feb1 + day, "f1", family: true)]),
  .init(
    name: "a lapsed family share does not entitle beside the covering purchase",
    history: [
      tx("p1", "premium.monthly", jan1, feb1),
      tx("f1", "premium.yearly", jan1 - 40 * day, jan1 + 5 * day, family: true),
    ],
    product: "premium.monthly", ownership: .purchased,
    entitled: [entitled("premium.monthly", feb1, "p1")]),
  .init(
    name: "an upgraded-away period does not entitle beside the covering one (rules 12, 16)",
    history: [
      tx("y1", "premium.yearly", jan1, utc(2025, 1, 1)),
      tx("m1", "premium.monthly", jan1 + 5 * day, feb1, otx: "y1"),
    ],
    product: "premium.monthly", ownership: .purchased,
    entitled: [entitled("premium.monthly", feb1, "m1")]),
]

@Suite("Every covering transaction entitles its product (rule 16)")
struct CoverageRuleTests {
  @Test("coverage table", arguments: coverageCases)
  func coverage(_ c: CoverageCase) throws {
    let evaluation = evaluate(c.history, at: c.time)
    let status = try #require(evaluation.status(ofGroup: Group.premium))
    #expect(status.state == c.state)
    #expect(status.productId == c.product)
    #expect(status.ownership == c.ownership)
    #expect(evaluation.entitlements == c.entitled)
    #expect(evaluate(c.history.reversed(), at: c.time) == evaluation)
  }

  @Test("family beneficiaries are counted when a family share covers beside an own purchase")
  func reportCountsFamily() {
    let counts = evaluate(coverageCases[1].history, at: jan1 + 10 * day).reportCounts
    #expect(counts.active == 1)
    #expect(counts.familySharedBeneficiaries == 1)
  }
}
