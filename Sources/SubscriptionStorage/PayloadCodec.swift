// How domain values are kept in BLOB columns (shared by the SQLite and PostgreSQL stores).
//
// Transactions and renewal infos are the bulk of the database and are decoded on every history read,
// so they use a compact binary form (a format byte, then each field in a fixed order: varints,
// length-prefixed UTF-8, presence bytes for optionals): ~3x smaller and much faster than JSON.
// Fields that are also key columns (transaction id, original transaction id, purchase date) are not
// repeated in the payload; Apple's enumerated strings ("Production", "PURCHASED", ...) are stored as
// one-byte references into an append-only table.
// The field lists below must follow the domain types; `PayloadCodecTests` fails when a stored
// property is added to `Transaction` or `RenewalInfo` without being added here.
// Format 2 appends `asOfDate` (rule 14's clock for unsigned copies) to both layouts; format 1
// payloads, written before it existed, are still read (their `asOfDate` is unknown). Transaction
// format 3 appends Apple's `price` and `currency`; format 1 and 2 payloads read with both unknown.
// Transaction format 4 appends Apple's `appTransactionId` (the Apple Account, docs/architecture.md
// rule 24), `billingPlanType` and `commitmentInfo` (rule 22); renewal-info format 3 `appTransactionId`,
// `renewalBillingPlanType` and `commitmentInfo`; renewal-info format 4 its `appAccountToken`
// (rule 26). Older payloads read without them.
// Small, rarely read values (policy, products, key scopes) use JSON through Codable.
import Foundation
import SubscriptionDomain

/// Encodes domain values for storage; `package` so every store implementation shares one format.
package enum PayloadCodec {
  /// Format byte of the binary transaction layout written now.
  package static let transactionFormat: UInt8 = 4
  /// Format byte of the binary renewal-info layout written now.
  package static let renewalInfoFormat: UInt8 = 4
  /// The first format, without `asOfDate` (read, never written).
  static let formatWithoutAsOfDate: UInt8 = 1
  /// The transaction format with `asOfDate` but without `price` and `currency` (read, never written).
  static let transactionFormatWithoutPrice: UInt8 = 2
  /// The transaction format with `price` and `currency` but without `appTransactionId` and the
  /// billing plan (read, never written).
  static let transactionFormatWithoutAppTransactionId: UInt8 = 3
  /// The renewal-info format with `asOfDate` but without `appTransactionId` and the billing plan
  /// (read, never written).
  static let renewalInfoFormatWithoutAppTransactionId: UInt8 = 2
  /// The renewal-info format with `appTransactionId` and the billing plan but without
  /// `appAccountToken` (read, never written).
  static let renewalInfoFormatWithoutAppAccountToken: UInt8 = 3
  /// Stored properties the transaction layout covers (checked against the type by a test).
  package static let transactionFieldCount = 31
  /// Stored properties the renewal-info layout covers.
  package static let renewalInfoFieldCount = 20

  package static func encode(_ t: Transaction) -> [UInt8] {
    var w = BinaryWriter()
    w.byte(transactionFormat)
    // transactionId, originalTransactionId and purchaseDate live in their own columns.
    w.string(t.productId)
    w.string(t.subscriptionGroupIdentifier)
    w.int(t.originalPurchaseDate)
    w.int(t.expiresDate)
    w.bool(t.isTrialPeriod)
    w.bool(t.isInIntroOfferPeriod)
    w.int(t.rawOfferType.map(Int64.init))
    w.string(t.offerIdentifier)
    w.interned(t.rawOfferDiscountType)
    w.int(t.revocationDate)
    w.int(t.rawRevocationReason.map(Int64.init))
    w.interned(t.rawRevocationType)
    w.interned(t.rawInAppOwnershipType)
    w.bool(t.isUpgraded)
    w.interned(t.rawEnvironment)
    w.string(t.webOrderLineItemId)
    w.int(Int64(t.quantity))
    w.interned(t.rawType)
    w.string(t.bundleId)
    w.string(t.appAccountToken)
    w.int(t.signedDate)
    w.interned(t.notificationType)
    w.int(t.asOfDate)
    w.int(t.price)
    w.string(t.currency)
    w.string(t.appTransactionId)
    w.interned(t.rawBillingPlanType)
    w.commitment(t.commitment)
    return w.bytes
  }

  /// Decodes a transaction payload; the key columns supply the fields the payload omits.
  package static func decodeTransaction(
    _ bytes: [UInt8], transactionId: String, originalTransactionId: String, purchaseDate: Int64
  ) throws(StoreError) -> Transaction {
    var r = BinaryReader(bytes)
    let format = try r.byte()
    guard
      format == transactionFormat || format == transactionFormatWithoutAppTransactionId
        || format == transactionFormatWithoutPrice || format == formatWithoutAsOfDate
    else {
      throw StoreError(.corrupt, "stored transaction has an unknown format")
    }
    // Every field is read first, in `encode`'s order, and the value built once at the end:
    // building it early and setting the later fields made a copy of the whole transaction
    // (a dozen strings retained and released) on every decode.
    let productId = try r.string()
    let subscriptionGroupIdentifier = try r.optionalString()
    let originalPurchaseDate = try r.optionalInt()
    let expiresDate = try r.optionalInt()
    let isTrialPeriod = try r.bool()
    let isInIntroOfferPeriod = try r.bool()
    let rawOfferType = try r.optionalInt().map { Int($0) }
    let offerIdentifier = try r.optionalString()
    let rawOfferDiscountType = try r.interned()
    let revocationDate = try r.optionalInt()
    let rawRevocationReason = try r.optionalInt().map { Int($0) }
    let rawRevocationType = try r.interned()
    let rawInAppOwnershipType = try r.interned()
    let isUpgraded = try r.bool()
    let rawEnvironment = try r.interned()
    let webOrderLineItemId = try r.optionalString()
    let quantity = Int(try r.int())
    let rawType = try r.interned()
    let bundleId = try r.optionalString()
    let appAccountToken = try r.optionalString()
    let signedDate = try r.optionalInt()
    let notificationType = try r.interned()
    let asOfDate = format >= transactionFormatWithoutPrice ? try r.optionalInt() : nil
    let price = format >= transactionFormatWithoutAppTransactionId ? try r.optionalInt() : nil
    let currency = format >= transactionFormatWithoutAppTransactionId ? try r.optionalString() : nil
    let appTransactionId = format >= transactionFormat ? try r.optionalString() : nil
    let rawBillingPlanType = format >= transactionFormat ? try r.interned() : nil
    let commitment = format >= transactionFormat ? try r.transactionCommitment() : nil
    guard r.isAtEnd else { throw StoreError(.corrupt, "stored transaction has trailing bytes") }
    return Transaction(
      transactionId: transactionId, originalTransactionId: originalTransactionId, productId: productId,
      subscriptionGroupIdentifier: subscriptionGroupIdentifier, purchaseDate: purchaseDate,
      originalPurchaseDate: originalPurchaseDate, expiresDate: expiresDate, isTrialPeriod: isTrialPeriod,
      isInIntroOfferPeriod: isInIntroOfferPeriod, rawOfferType: rawOfferType,
      offerIdentifier: offerIdentifier, rawOfferDiscountType: rawOfferDiscountType, revocationDate: revocationDate,
      rawRevocationReason: rawRevocationReason, rawRevocationType: rawRevocationType,
      rawInAppOwnershipType: rawInAppOwnershipType, isUpgraded: isUpgraded, rawEnvironment: rawEnvironment,
      webOrderLineItemId: webOrderLineItemId, quantity: quantity, rawType: rawType,
      bundleId: bundleId, appAccountToken: appAccountToken, signedDate: signedDate,
      asOfDate: asOfDate, notificationType: notificationType, price: price, currency: currency,
      appTransactionId: appTransactionId, rawBillingPlanType: rawBillingPlanType, commitment: commitment)
  }

  package static func encode(_ i: RenewalInfo) -> [UInt8] {
    var w = BinaryWriter()
    w.byte(renewalInfoFormat)
    // originalTransactionId lives in its own column.
    w.string(i.productId)
    w.string(i.autoRenewProductId)
    w.int(i.rawAutoRenewStatus.map(Int64.init))
    w.int(i.rawExpirationIntent.map(Int64.init))
    w.bool(i.isInBillingRetryPeriod)
    w.int(i.gracePeriodExpiresDate)
    w.int(i.rawPriceConsentStatus.map(Int64.init))
    w.int(i.rawOfferType.map(Int64.init))
    w.string(i.offerIdentifier)
    w.interned(i.rawEnvironment)
    w.int(i.renewalDate)
    w.int(i.recentSubscriptionStartDate)
    w.int(Int64(i.eligibleWinBackOfferIds.count))
    for id in i.eligibleWinBackOfferIds { w.string(id) }
    w.int(i.signedDate)
    w.int(i.asOfDate)
    w.string(i.appTransactionId)
    w.interned(i.rawRenewalBillingPlanType)
    w.renewalCommitment(i.commitment)
    w.string(i.appAccountToken)
    return w.bytes
  }

  /// Decodes a renewal-info payload; the key column supplies the original transaction id.
  package static func decodeRenewalInfo(_ bytes: [UInt8], originalTransactionId: String) throws(StoreError)
    -> RenewalInfo
  {
    var r = BinaryReader(bytes)
    let format = try r.byte()
    guard
      format == renewalInfoFormat || format == renewalInfoFormatWithoutAppAccountToken
        || format == renewalInfoFormatWithoutAppTransactionId || format == formatWithoutAsOfDate
    else {
      throw StoreError(.corrupt, "stored renewal info has an unknown format")
    }
    var i = RenewalInfo(originalTransactionId: originalTransactionId, productId: try r.string())
    i.autoRenewProductId = try r.optionalString()
    i.rawAutoRenewStatus = try r.optionalInt().map { Int($0) }
    i.rawExpirationIntent = try r.optionalInt().map { Int($0) }
    i.isInBillingRetryPeriod = try r.bool()
    i.gracePeriodExpiresDate = try r.optionalInt()
    i.rawPriceConsentStatus = try r.optionalInt().map { Int($0) }
    i.rawOfferType = try r.optionalInt().map { Int($0) }
    i.offerIdentifier = try r.optionalString()
    i.rawEnvironment = try r.interned()
    i.renewalDate = try r.optionalInt()
    i.recentSubscriptionStartDate = try r.optionalInt()
    let count = try r.int()
    guard count >= 0, count < 10_000 else {
      throw StoreError(.corrupt, "stored renewal info has a bad list length")
    }
    var ids: [String] = []
    for _ in 0..<count { ids.append(try r.string()) }
    i.eligibleWinBackOfferIds = ids
    i.signedDate = try r.optionalInt()
    if format >= renewalInfoFormatWithoutAppTransactionId { i.asOfDate = try r.optionalInt() }
    if format >= renewalInfoFormatWithoutAppAccountToken {
      i.appTransactionId = try r.optionalString()
      i.rawRenewalBillingPlanType = try r.interned()
      i.commitment = try r.renewalCommitment()
    }
    if format >= renewalInfoFormat { i.appAccountToken = try r.optionalString() }
    guard r.isAtEnd else { throw StoreError(.corrupt, "stored renewal info has trailing bytes") }
    return i
  }

  package static func encodeJSON<T: Encodable>(_ value: T) throws(StoreError) -> [UInt8] {
    do {
      let encoder = JSONEncoder()
      encoder.outputFormatting = .sortedKeys
      return Array(try encoder.encode(value))
    } catch {
      throw StoreError(.invalidArgument, "cannot encode \(T.self): \(error)")
    }
  }

  package static func decodeJSON<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws(StoreError) -> T {
    do {
      return try JSONDecoder().decode(T.self, from: Data(bytes))
    } catch {
      throw StoreError(.corrupt, "stored \(T.self) cannot be decoded: \(error)")
    }
  }
}

/// Apple's enumerated string values, stored as a one-byte reference (tag 2 + index). APPEND ONLY:
/// stored payloads refer to these positions.
package enum WellKnownStrings {
  package static let table: [String] = [
    "Production", "Sandbox",
    "Auto-Renewable Subscription", "Non-Renewing Subscription", "Non-Consumable", "Consumable",
    "FREE_SUBSCRIPTION",
    "PURCHASED", "FAMILY_SHARED",
    "FREE_TRIAL", "PAY_AS_YOU_GO", "PAY_UP_FRONT", "ONE_TIME",
    "REFUND_FULL", "REFUND_PRORATED", "FAMILY_REVOKE",
    "SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS",
    "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED", "EXPIRED", "OFFER_REDEEMED", "PRICE_INCREASE",
    "REFUND", "REFUND_DECLINED", "REFUND_REVERSED", "REVOKE", "RENEWAL_EXTENDED",
    "CONSUMPTION_REQUEST",
    "INITIAL_BUY", "INTERACTIVE_RENEWAL", "CANCEL", "DID_RECOVER", "RENEWAL",
    // Rules 22, 23 and 25 (2025-2026).
    "BILLED_UPFRONT", "MONTHLY", "ASSIGNED", "ONE_TIME_CHARGE", "RESCIND_CONSENT",
  ]
  package static let index: [String: Int] = Dictionary(
    uniqueKeysWithValues: table.enumerated().map { ($1, $0) })
}

/// Appends varints and length-prefixed strings.
struct BinaryWriter {
  var bytes: [UInt8] = []

  init() { bytes.reserveCapacity(160) }

  mutating func byte(_ b: UInt8) { bytes.append(b) }

  mutating func varint(_ v: UInt64) {
    var v = v
    while v >= 0x80 {
      bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
      v >>= 7
    }
    bytes.append(UInt8(v))
  }

  /// Zigzag varint.
  mutating func int(_ v: Int64) { varint(UInt64(bitPattern: (v << 1) ^ (v >> 63))) }

  mutating func int(_ v: Int64?) {
    if let v {
      byte(1)
      int(v)
    } else {
      byte(0)
    }
  }

  mutating func bool(_ v: Bool) { byte(v ? 1 : 0) }

  mutating func string(_ s: String) {
    var s = s
    s.withUTF8 { utf8 in
      varint(UInt64(utf8.count))
      bytes.append(contentsOf: utf8)
    }
  }

  mutating func string(_ s: String?) {
    if let s {
      byte(1)
      string(s)
    } else {
      byte(0)
    }
  }

  /// A transaction's commitment info: 0 none, else 1 and its four optional fields.
  mutating func commitment(_ c: TransactionCommitmentInfo?) {
    guard let c else { return byte(0) }
    byte(1)
    int(c.billingPeriodNumber.map(Int64.init))
    int(c.totalBillingPeriods.map(Int64.init))
    int(c.commitmentExpiresDate)
    int(c.commitmentPrice)
  }

  /// A renewal info's commitment info: 0 none, else 1 and its five optional fields.
  mutating func renewalCommitment(_ c: RenewalCommitmentInfo?) {
    guard let c else { return byte(0) }
    byte(1)
    string(c.commitmentAutoRenewProductId)
    int(c.rawCommitmentAutoRenewStatus.map(Int64.init))
    interned(c.rawCommitmentRenewalBillingPlanType)
    int(c.commitmentRenewalDate)
    int(c.commitmentRenewalPrice)
  }

  /// An optional string: 0 nil, 1 literal, 2 + i the well-known string i.
  mutating func interned(_ s: String?) {
    guard let s else { return byte(0) }
    if let i = WellKnownStrings.index[s] {
      varint(UInt64(2 + i))
    } else {
      byte(1)
      string(s)
    }
  }
}

/// Reads what ``BinaryWriter`` wrote: the domain's ``ByteReader`` (shared with the summary codec),
/// any overrun a `corrupt` error.
typealias BinaryReader = ByteReader<StoreError>

extension StoreError: ByteReaderError {
  /// A stored payload that cannot be read: `corrupt`.
  package static func byteReader(_ problem: ByteReaderProblem, at position: Int) -> StoreError {
    switch problem {
    case .truncated, .countBeyondInput: StoreError(.corrupt, "stored record is truncated")
    case .badVarint: StoreError(.corrupt, "stored record has a bad varint")
    case .notUTF8: StoreError(.corrupt, "stored record has a string that is not UTF-8")
    }
  }
}

extension ByteReader where Failure == StoreError {
  /// What ``BinaryWriter/int(_:)-(Int64?)`` wrote: a presence byte (0: `nil`), then the value.
  mutating func optionalInt() throws(StoreError) -> Int64? {
    try byte() == 0 ? nil : try int()
  }

  mutating func bool() throws(StoreError) -> Bool { try byte() != 0 }

  /// What ``BinaryWriter/string(_:)-(String?)`` wrote: a presence byte (0: `nil`), then the string.
  mutating func optionalString() throws(StoreError) -> String? {
    try byte() == 0 ? nil : try string()
  }

  /// Reads what ``BinaryWriter/interned(_:)`` wrote.
  mutating func interned() throws(StoreError) -> String? {
    let tag = try varint()
    switch tag {
    case 0: return nil
    case 1: return try string()
    default:
      let i = Int(tag - 2)
      guard i < WellKnownStrings.table.count else {
        throw StoreError(.corrupt, "stored record refers to unknown string \(i)")
      }
      return WellKnownStrings.table[i]
    }
  }

  /// Reads what ``BinaryWriter/commitment(_:)`` wrote.
  mutating func transactionCommitment() throws(StoreError) -> TransactionCommitmentInfo? {
    guard try byte() != 0 else { return nil }
    return TransactionCommitmentInfo(
      billingPeriodNumber: try smallInt(), totalBillingPeriods: try smallInt(),
      commitmentExpiresDate: try optionalInt(), commitmentPrice: try optionalInt())
  }

  /// Reads what ``BinaryWriter/renewalCommitment(_:)`` wrote.
  mutating func renewalCommitment() throws(StoreError) -> RenewalCommitmentInfo? {
    guard try byte() != 0 else { return nil }
    return RenewalCommitmentInfo(
      commitmentAutoRenewProductId: try optionalString(), rawCommitmentAutoRenewStatus: try smallInt(),
      rawCommitmentRenewalBillingPlanType: try interned(), commitmentRenewalDate: try optionalInt(),
      commitmentRenewalPrice: try optionalInt())
  }

  /// An optional integer that fits an `Int` (a stored value out of range is corrupt).
  mutating func smallInt() throws(StoreError) -> Int? {
    guard let v = try optionalInt() else { return nil }
    guard let n = Int(exactly: v) else { throw StoreError(.corrupt, "stored record has an integer out of range") }
    return n
  }

}
