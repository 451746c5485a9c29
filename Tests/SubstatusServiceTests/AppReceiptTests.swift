import AppStoreSignedData
import CCrypto
import Foundation
import RPCCore
import SubstatusWire
import Testing

@testable import SubstatusService

/// Builds App Store style receipts with OpenSSL: the receipt payload (a DER `SET OF
/// ReceiptAttribute`) encoded with OpenSSL's ASN1 API, signed into PKCS#7 with `PKCS7_sign`.
enum TestReceipt {
  /// A DER UTF8String.
  static func utf8(_ text: String) -> [UInt8] {
    let string = ASN1_UTF8STRING_new()!
    let bytes = Array(text.utf8)
    _ = ASN1_STRING_set(string, bytes, Int32(bytes.count))
    let value = ASN1_TYPE_new()!
    ASN1_TYPE_set(value, V_ASN1_UTF8STRING, UnsafeMutableRawPointer(string))
    defer { ASN1_TYPE_free(value) }
    return encoded { i2d_ASN1_TYPE(value, &$0) }
  }

  /// `SEQUENCE { type INTEGER, version INTEGER (1), value OCTET STRING }`.
  static func attribute(_ type: Int, _ value: [UInt8]) -> [UInt8] {
    let stack = OPENSSL_sk_new_null()!
    defer { OPENSSL_sk_pop_free(stack) { ASN1_TYPE_free($0?.assumingMemoryBound(to: ASN1_TYPE.self)) } }
    for number in [type, 1] {
      let integer = ASN1_INTEGER_new()!
      ASN1_INTEGER_set(integer, number)
      let element = ASN1_TYPE_new()!
      ASN1_TYPE_set(element, V_ASN1_INTEGER, UnsafeMutableRawPointer(integer))
      OPENSSL_sk_push(stack, UnsafeRawPointer(element))
    }
    let octets = ASN1_OCTET_STRING_new()!
    _ = ASN1_OCTET_STRING_set(octets, value, Int32(value.count))
    let element = ASN1_TYPE_new()!
    ASN1_TYPE_set(element, V_ASN1_OCTET_STRING, UnsafeMutableRawPointer(octets))
    OPENSSL_sk_push(stack, UnsafeRawPointer(element))
    return encoded { i2d_ASN1_SEQUENCE_ANY(stack, &$0) }
  }

  /// A DER `SET OF` the given DER sequences.
  static func set(_ sequences: [[UInt8]]) -> [UInt8] {
    let stack = OPENSSL_sk_new_null()!
    defer { OPENSSL_sk_pop_free(stack) { ASN1_TYPE_free($0?.assumingMemoryBound(to: ASN1_TYPE.self)) } }
    for der in sequences {
      let string = ASN1_STRING_new()!
      _ = ASN1_STRING_set(string, der, Int32(der.count))
      let element = ASN1_TYPE_new()!
      ASN1_TYPE_set(element, V_ASN1_SEQUENCE, UnsafeMutableRawPointer(string))
      OPENSSL_sk_push(stack, UnsafeRawPointer(element))
    }
    return encoded { i2d_ASN1_SET_ANY(stack, &$0) }
  }

  /// An app receipt payload: bundle id (2) and one in-app receipt (17) per transaction, each with
  /// product id (1702), transaction id (1703) and original transaction id (1705).
  static func payload(bundleID: String, inApps: [(product: String, transactionID: String?, originalTransactionID: String)]) -> [UInt8] {
    var attributes = [attribute(2, utf8(bundleID)), attribute(19, utf8("1.0"))]
    for inApp in inApps {
      var fields = [attribute(1702, utf8(inApp.product)), attribute(1705, utf8(inApp.originalTransactionID))]
      if let id = inApp.transactionID { fields.append(attribute(1703, utf8(id))) }
      attributes.append(attribute(17, set(fields)))
    }
    return set(attributes)
  }

  /// `payload` signed into a DER PKCS#7 signed-data envelope (content attached), base64.
  static func signed(_ payload: [UInt8]) throws -> String {
    let authority = try TestCertificateAuthority.make(commonName: "receipt test signer")
    let certificateDER = authority.root.der
    let certificate = try #require(
      certificateDER.withUnsafeBufferPointer { buffer in
        var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
        return d2i_X509(nil, &cursor, buffer.count)
      })
    defer { X509_free(certificate) }
    // A memory BIO reads the caller's buffer in place: keep it alive while reading.
    let keyPEM = Array(authority.rootKeyPEM.utf8)
    let key = try #require(
      keyPEM.withUnsafeBufferPointer { buffer in
        let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count))
        defer { BIO_free(bio) }
        return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
      })
    defer { EVP_PKEY_free(key) }
    let der = try payload.withUnsafeBufferPointer { buffer in
      let data = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count))
      defer { BIO_free(data) }
      let p7 = try #require(PKCS7_sign(certificate, key, nil, data, PKCS7_BINARY))
      defer { PKCS7_free(p7) }
      return encoded { i2d_PKCS7(p7, &$0) }
    }
    return Data(der).base64EncodedString()
  }

  private static func encoded(_ i2d: (inout UnsafeMutablePointer<UInt8>?) -> Int32) -> [UInt8] {
    var out: UnsafeMutablePointer<UInt8>? = nil
    let n = i2d(&out)
    guard n > 0, let out else { return [] }
    defer { CRYPTO_free(out, nil, 0) }
    return Array(UnsafeBufferPointer(start: out, count: Int(n)))
  }
}

@Suite("App receipts: transaction ids from the PKCS#7 payload")
struct AppReceiptTests {
  @Test("the transaction ids of every in-app receipt, in order")
  func extractsIDs() throws {
    let receipt = try TestReceipt.signed(
      TestReceipt.payload(
        bundleID: "com.example.app",
        inApps: [("a", "2000000002", "2000000001"), ("b", "2000000010", "2000000010")]))
    let ids = try #require(AppReceiptTransactionIDs(base64Receipt: receipt))
    #expect(ids.transactionIds == ["2000000002", "2000000010"])
    #expect(ids.originalTransactionIds == ["2000000001", "2000000010"])
    // Line breaks in the base64 (as some clients send it) do not matter.
    let wrapped = stride(from: 0, to: receipt.count, by: 64).map {
      String(receipt.dropFirst($0).prefix(64))
    }.joined(separator: "\n")
    #expect(AppReceiptTransactionIDs(base64Receipt: wrapped) == ids)
  }

  @Test("a receipt without in-app purchases has no ids; an in-app without 1703 gives only its original id")
  func noIDs() throws {
    let empty = try TestReceipt.signed(TestReceipt.payload(bundleID: "com.example.app", inApps: []))
    let none = try #require(AppReceiptTransactionIDs(base64Receipt: empty))
    #expect(none.transactionIds.isEmpty && none.originalTransactionIds.isEmpty)
    let partial = try TestReceipt.signed(TestReceipt.payload(bundleID: "com.example.app", inApps: [("a", nil, "2000000001")]))
    let ids = try #require(AppReceiptTransactionIDs(base64Receipt: partial))
    #expect(ids.transactionIds.isEmpty && ids.originalTransactionIds == ["2000000001"])
  }

  @Test(
    "what is not such a receipt reads as none, never a crash",
    arguments: [
      "", "not base64 !!", Data("{\"signature\" = \"...\"; \"purchase-info\" = \"...\";}".utf8).base64EncodedString(),
      Data([0x30, 0x80, 0x06, 0x09]).base64EncodedString(),  // truncated BER
    ])
  func notAReceipt(text: String) {
    #expect(AppReceiptTransactionIDs(base64Receipt: text) == nil)
  }

  @Test("PKCS#7 whose content is not a SET OF attributes reads as none")
  func wrongContent() throws {
    #expect(AppReceiptTransactionIDs(base64Receipt: try TestReceipt.signed(TestReceipt.utf8("hello"))) == nil)
    #expect(AppReceiptTransactionIDs(base64Receipt: try TestReceipt.signed([0x31, 0x05, 0x02])) == nil)
  }
}
