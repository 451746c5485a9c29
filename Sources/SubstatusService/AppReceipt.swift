import CCrypto
import Foundation

/// The transaction ids inside an App Store receipt (the app receipt of
/// `Bundle.main.appStoreReceiptURL`): a PKCS#7 signed-data envelope whose content is a DER
/// `SET OF ReceiptAttribute` (`SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`);
/// attribute 17 holds one in-app purchase receipt each, itself such a set, whose attributes 1703
/// and 1705 are the `transaction_id` and `original_transaction_id` (DER UTF8String inside the
/// OCTET STRING).
///
/// Like Apple's `ReceiptUtility.extractTransactionId(appReceipt:)` this reads, it does not verify:
/// the ids only name what to fetch from the App Store Server API, whose answers are verified.
/// OpenSSL decodes the envelope (`d2i_PKCS7`) and the attributes (`d2i_ASN1_SET_ANY`,
/// `d2i_ASN1_SEQUENCE_ANY`, `d2i_ASN1_TYPE`); nothing here parses DER by hand.
struct AppReceiptTransactionIDs: Sendable, Hashable {
  /// `transaction_id` of each in-app purchase receipt, in receipt order.
  var transactionIds: [String] = []
  /// `original_transaction_id` of each in-app purchase receipt, in receipt order.
  var originalTransactionIds: [String] = []

  /// The receipt attribute types read.
  enum AttributeType {
    static let inAppPurchase = 17
    static let transactionId = 1703
    static let originalTransactionId = 1705
  }

  /// Reads the ids of a base64 receipt; `nil` when it is not a PKCS#7 receipt of that format
  /// (for example a JSON-style iOS 6 transaction receipt).
  init?(base64Receipt: String) {
    let compact = base64Receipt.filter { !$0.isWhitespace }
    guard let der = Data(base64Encoded: compact), !der.isEmpty else { return nil }
    guard let payload = Self.signedContent(Array(der)), let attributes = Self.attributes(payload) else { return nil }
    for (type, value) in attributes where type == AttributeType.inAppPurchase {
      guard let fields = Self.attributes(value) else { continue }
      for (field, fieldValue) in fields {
        guard field == AttributeType.transactionId || field == AttributeType.originalTransactionId,
          let text = Self.string(fieldValue), !text.isEmpty
        else { continue }
        if field == AttributeType.transactionId { transactionIds.append(text) } else { originalTransactionIds.append(text) }
      }
    }
  }

  /// The content of a PKCS#7 signed-data envelope (`d2i_PKCS7`, signed, content of type data).
  static func signedContent(_ der: [UInt8]) -> [UInt8]? {
    der.withUnsafeBufferPointer { buffer -> [UInt8]? in
      var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
      guard let p7 = d2i_PKCS7(nil, &cursor, buffer.count) else { return nil }
      defer { PKCS7_free(p7) }
      guard OBJ_obj2nid(p7.pointee.type) == NID_pkcs7_signed, let signed = p7.pointee.d.sign,
        let contents = signed.pointee.contents, OBJ_obj2nid(contents.pointee.type) == NID_pkcs7_data,
        let data = contents.pointee.d.data
      else { return nil }
      return bytes(data)
    }
  }

  /// The `(type, value)` pairs of a DER `SET OF ReceiptAttribute`; `nil` when it is not one.
  static func attributes(_ der: [UInt8]) -> [(Int, [UInt8])]? {
    der.withUnsafeBufferPointer { buffer -> [(Int, [UInt8])]? in
      var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
      guard let set = d2i_ASN1_SET_ANY(nil, &cursor, buffer.count) else { return nil }
      defer { freeStack(set) }
      var out: [(Int, [UInt8])] = []
      for element in elements(set) {
        guard element.pointee.type == V_ASN1_SEQUENCE, let sequence = element.pointee.value.sequence,
          let encoded = bytes(sequence)
        else { continue }
        if let attribute = attribute(encoded) { out.append(attribute) }
      }
      return out
    }
  }

  /// One `SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
  private static func attribute(_ der: [UInt8]) -> (Int, [UInt8])? {
    der.withUnsafeBufferPointer { buffer -> (Int, [UInt8])? in
      var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
      guard let sequence = d2i_ASN1_SEQUENCE_ANY(nil, &cursor, buffer.count) else { return nil }
      defer { freeStack(sequence) }
      let fields = elements(sequence)
      guard fields.count == 3, fields[0].pointee.type == V_ASN1_INTEGER, fields[2].pointee.type == V_ASN1_OCTET_STRING,
        let integer = fields[0].pointee.value.integer, let octets = fields[2].pointee.value.octet_string,
        let value = bytes(octets)
      else { return nil }
      let type = ASN1_INTEGER_get(integer)
      guard type >= 0 else { return nil }
      return (Int(type), value)
    }
  }

  /// The text of a DER UTF8String or IA5String.
  static func string(_ der: [UInt8]) -> String? {
    der.withUnsafeBufferPointer { buffer -> String? in
      var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
      guard let value = d2i_ASN1_TYPE(nil, &cursor, buffer.count) else { return nil }
      defer { ASN1_TYPE_free(value) }
      let type = value.pointee.type
      guard type == V_ASN1_UTF8STRING || type == V_ASN1_IA5STRING, let string = value.pointee.value.asn1_string,
        let text = bytes(string)
      else { return nil }
      return String(validating: text, as: UTF8.self)
    }
  }

  private static func bytes(_ string: UnsafeMutablePointer<ASN1_STRING>) -> [UInt8]? {
    let length = Int(ASN1_STRING_length(string))
    guard length >= 0 else { return nil }
    guard length > 0, let data = ASN1_STRING_get0_data(string) else { return length == 0 ? [] : nil }
    return Array(UnsafeBufferPointer(start: data, count: length))
  }

  private static func elements(_ stack: OpaquePointer) -> [UnsafeMutablePointer<ASN1_TYPE>] {
    (0..<max(0, Int(OPENSSL_sk_num(stack)))).compactMap {
      OPENSSL_sk_value(stack, Int32($0))?.assumingMemoryBound(to: ASN1_TYPE.self)
    }
  }

  private static func freeStack(_ stack: OpaquePointer) {
    OPENSSL_sk_pop_free(stack) { element in
      ASN1_TYPE_free(element?.assumingMemoryBound(to: ASN1_TYPE.self))
    }
  }
}
