// The thin layer over OpenSSL libcrypto (3.x): the only file of this module with unsafe pointers.
// Every OpenSSL object is owned by a final class whose deinit frees it; the classes are immutable
// after creation, and OpenSSL 3 allows concurrent use of a key or certificate from several threads
// for signing and verification (each operation here makes its own EVP_MD_CTX / X509_STORE_CTX).
import CCrypto
import SubstatusCrypto

#if canImport(Glibc)
  import Glibc
#endif

/// Owns an `EVP_PKEY`.
final class EVPKey: @unchecked Sendable {
  let pointer: OpaquePointer
  init(taking pointer: OpaquePointer) { self.pointer = pointer }
  deinit { EVP_PKEY_free(pointer) }
}

/// Owns an `X509`.
final class X509Object: @unchecked Sendable {
  let pointer: OpaquePointer
  init(taking pointer: OpaquePointer) { self.pointer = pointer }
  deinit { X509_free(pointer) }
}

/// One certificate extension to add when building a certificate.
enum CertificateExtension: Sendable, Hashable {
  /// A standard extension in OpenSSL's config syntax, e.g. (NID_basic_constraints, "critical,CA:TRUE").
  case standard(nid: Int32, value: String)
  /// A non-critical extension `oid` whose value is DER NULL (05 00), as Apple's marker extensions.
  case nullMarker(oid: String)
}

/// What `X509_verify_cert` said about a chain.
enum ChainVerdict: Sendable, Equatable {
  /// The chain was built and verified; `length` certificates from leaf to trust anchor.
  case valid(length: Int)
  /// A certificate is not valid at the verification time (expired or not yet valid).
  case notValidAtTime(String)
  /// Any other failure, with OpenSSL's reason.
  case invalid(String)
}

enum LibCrypto {
  // MARK: Errors

  /// Takes and clears OpenSSL's error queue, giving the first reason.
  static func drainErrors() -> String {
    let code = ERR_get_error()
    while ERR_get_error() != 0 {}
    guard code != 0 else { return "no OpenSSL reason" }
    var buffer = [CChar](repeating: 0, count: 256)
    ERR_error_string_n(code, &buffer, buffer.count)
    return String(
      decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  static func failure(_ what: String) -> AppStoreCryptoError {
    AppStoreCryptoError("\(what) (\(drainErrors()))")
  }

  // MARK: DER helpers

  /// Runs an OpenSSL `i2d_*` encoder twice (size, then bytes).
  private static func encodeDER(
    _ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32
  ) -> [UInt8]? {
    let length = encode(nil)
    guard length > 0 else { return nil }
    var out = [UInt8](repeating: 0, count: Int(length))
    let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
      var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
      return encode(&cursor)
    }
    guard written == length else { return nil }
    return out
  }

  /// Runs an OpenSSL `d2i_*` decoder over all of `der`; `nil` unless it consumed every byte.
  private static func decodeDER(
    _ der: [UInt8], _ decode: (UnsafeMutablePointer<UnsafePointer<UInt8>?>, Int) -> OpaquePointer?,
    free: (OpaquePointer) -> Void
  ) -> OpaquePointer? {
    guard !der.isEmpty else { return nil }
    return der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
      guard let base = buffer.baseAddress else { return nil }
      var cursor: UnsafePointer<UInt8>? = base
      guard let object = decode(&cursor, buffer.count) else { return nil }
      guard cursor == base + buffer.count else {
        free(object)
        return nil
      }
      return object
    }
  }

  // MARK: P-256 keys

  /// Whether `key` is an EC key on P-256.
  static func isP256(_ key: EVPKey) -> Bool {
    guard EVP_PKEY_get_base_id(key.pointer) == EVP_PKEY_EC else { return false }
    var name = [CChar](repeating: 0, count: 64)
    var length = 0
    guard EVP_PKEY_get_group_name(key.pointer, &name, name.count, &length) == 1 else {
      _ = drainErrors()
      return false
    }
    let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return group == "prime256v1" || group == "P-256"
  }

  /// A private key from PKCS#8 or SEC1 DER.
  static func privateKey(der: [UInt8]) throws(AppStoreCryptoError) -> EVPKey {
    guard
      let pointer = decodeDER(der, { d2i_AutoPrivateKey(nil, $0, $1) }, free: { EVP_PKEY_free($0) })
    else { throw failure("not a DER private key") }
    return EVPKey(taking: pointer)
  }

  /// The PKCS#8 `PrivateKeyInfo` DER of `key`.
  static func pkcs8DER(_ key: EVPKey) -> [UInt8] {
    guard let info = EVP_PKEY2PKCS8(key.pointer) else {
      preconditionFailure("EVP_PKEY2PKCS8: \(drainErrors())")
    }
    defer { PKCS8_PRIV_KEY_INFO_free(info) }
    guard let der = encodeDER({ i2d_PKCS8_PRIV_KEY_INFO(info, $0) }) else {
      preconditionFailure("i2d_PKCS8_PRIV_KEY_INFO: \(drainErrors())")
    }
    return der
  }

  /// A public key from SubjectPublicKeyInfo DER.
  static func publicKey(spki der: [UInt8]) throws(AppStoreCryptoError) -> EVPKey {
    guard let pointer = decodeDER(der, { d2i_PUBKEY(nil, $0, $1) }, free: { EVP_PKEY_free($0) })
    else { throw failure("not a DER SubjectPublicKeyInfo") }
    return EVPKey(taking: pointer)
  }

  /// The SubjectPublicKeyInfo DER of `key` (public part only).
  static func spkiDER(_ key: EVPKey) -> [UInt8] {
    guard let der = encodeDER({ i2d_PUBKEY(key.pointer, $0) }) else {
      preconditionFailure("i2d_PUBKEY: \(drainErrors())")
    }
    return der
  }

  /// A fresh P-256 key pair.
  static func generateP256() -> EVPKey {
    guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else {
      preconditionFailure("EVP_PKEY_CTX_new_id")
    }
    defer { EVP_PKEY_CTX_free(context) }
    var key: OpaquePointer?
    guard EVP_PKEY_keygen_init(context) == 1,
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1,
      EVP_PKEY_keygen(context, &key) == 1, let key
    else { preconditionFailure("P-256 key generation failed: \(drainErrors())") }
    return EVPKey(taking: key)
  }

  /// An ECDSA-SHA256 signature of `message` in ASN.1 DER.
  static func signDER(_ message: [UInt8], key: EVPKey) throws(AppStoreCryptoError) -> [UInt8] {
    guard let context = EVP_MD_CTX_new() else { throw failure("EVP_MD_CTX_new") }
    defer { EVP_MD_CTX_free(context) }
    guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key.pointer) == 1 else {
      throw failure("EVP_DigestSignInit")
    }
    var signature = [UInt8](repeating: 0, count: Int(EVP_PKEY_get_size(key.pointer)))
    var length = signature.count
    let ok = message.withUnsafeBufferPointer { input in
      signature.withUnsafeMutableBufferPointer { out in
        EVP_DigestSign(context, out.baseAddress, &length, input.baseAddress, input.count)
      }
    }
    guard ok == 1, length <= signature.count else { throw failure("EVP_DigestSign") }
    return Array(signature.prefix(length))
  }

  /// Whether `signature` (DER) is a valid ECDSA-SHA256 signature of `message` under `key`.
  static func verifyDER(_ signature: [UInt8], message: [UInt8], key: EVPKey) -> Bool {
    guard let context = EVP_MD_CTX_new() else { return false }
    defer { EVP_MD_CTX_free(context) }
    guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key.pointer) == 1 else {
      _ = drainErrors()
      return false
    }
    let ok = message.withUnsafeBufferPointer { input in
      signature.withUnsafeBufferPointer { sig in
        EVP_DigestVerify(context, sig.baseAddress, sig.count, input.baseAddress, input.count)
      }
    }
    if ok != 1 { _ = drainErrors() }
    return ok == 1
  }

  /// DER `ECDSA-Sig-Value` to JOSE's fixed-width r||s (RFC 7518 §3.4), `width` bytes each.
  static func rawSignature(fromDER der: [UInt8], width: Int = 32) -> [UInt8]? {
    guard
      let signature = decodeDER(der, { d2i_ECDSA_SIG(nil, $0, $1) }, free: { ECDSA_SIG_free($0) })
    else {
      _ = drainErrors()
      return nil
    }
    defer { ECDSA_SIG_free(signature) }
    var r: OpaquePointer?
    var s: OpaquePointer?
    ECDSA_SIG_get0(signature, &r, &s)
    guard let r, let s else { return nil }
    var out = [UInt8](repeating: 0, count: 2 * width)
    let ok = out.withUnsafeMutableBufferPointer { buffer -> Bool in
      guard let base = buffer.baseAddress else { return false }
      return BN_bn2binpad(r, base, Int32(width)) == Int32(width)
        && BN_bn2binpad(s, base + width, Int32(width)) == Int32(width)
    }
    return ok ? out : nil
  }

  /// JOSE's r||s to DER `ECDSA-Sig-Value`.
  static func derSignature(fromRaw raw: [UInt8]) -> [UInt8]? {
    guard raw.count % 2 == 0, !raw.isEmpty else { return nil }
    let half = Int32(raw.count / 2)
    guard let signature = ECDSA_SIG_new() else { return nil }
    defer { ECDSA_SIG_free(signature) }
    let set = raw.withUnsafeBufferPointer { buffer -> Bool in
      guard let base = buffer.baseAddress,
        let r = BN_bin2bn(base, half, nil)
      else { return false }
      guard let s = BN_bin2bn(base + Int(half), half, nil) else {
        BN_free(r)
        return false
      }
      guard ECDSA_SIG_set0(signature, r, s) == 1 else {
        BN_free(r)
        BN_free(s)
        return false
      }
      return true
    }
    guard set else { return nil }
    return encodeDER { i2d_ECDSA_SIG(signature, $0) }
  }

  // MARK: Certificates

  static func certificate(der: [UInt8]) throws(AppStoreCryptoError) -> X509Object {
    guard let pointer = decodeDER(der, { d2i_X509(nil, $0, $1) }, free: { X509_free($0) })
    else { throw failure("not a DER X.509 certificate") }
    return X509Object(taking: pointer)
  }

  static func der(of certificate: X509Object) -> [UInt8] {
    guard let der = encodeDER({ i2d_X509(certificate.pointer, $0) }) else {
      preconditionFailure("i2d_X509: \(drainErrors())")
    }
    return der
  }

  /// notBefore and notAfter, in milliseconds since 1970.
  static func validity(of certificate: X509Object) throws(AppStoreCryptoError) -> (
    notBefore: Int64, notAfter: Int64
  ) {
    func milliseconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
      guard let time else { return nil }
      var parts = tm()
      guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
      return Int64(timegm(&parts)) * 1000
    }
    guard let notBefore = milliseconds(X509_get0_notBefore(certificate.pointer)),
      let notAfter = milliseconds(X509_get0_notAfter(certificate.pointer))
    else { throw failure("certificate has an unreadable validity period") }
    return (notBefore, notAfter)
  }

  /// The certificate's public key.
  static func publicKey(of certificate: X509Object) throws(AppStoreCryptoError) -> EVPKey {
    guard let key = X509_get_pubkey(certificate.pointer) else {
      throw failure("certificate public key")
    }
    return EVPKey(taking: key)
  }

  /// Whether the certificate carries an extension with the dotted `oid`.
  static func hasExtension(_ certificate: X509Object, oid: String) -> Bool {
    guard let object = OBJ_txt2obj(oid, 1) else {
      _ = drainErrors()
      return false
    }
    defer { ASN1_OBJECT_free(object) }
    return X509_get_ext_by_OBJ(certificate.pointer, object, -1) >= 0
  }

  /// The subject's distinguished name in OpenSSL's one-line form (`/CN=…/O=…`).
  static func subject(of certificate: X509Object) -> String {
    guard let name = X509_get_subject_name(certificate.pointer) else { return "" }
    var buffer = [CChar](repeating: 0, count: 512)
    guard X509_NAME_oneline(name, &buffer, Int32(buffer.count)) != nil else { return "" }
    return String(
      decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// Builds and signs a certificate.
  /// - Parameters:
  ///   - issuer: the issuer's certificate, or `nil` for a self-signed one (`issuerKey` == `subjectKey`).
  static func makeCertificate(
    commonName: String, organization: String?, subjectKey: EVPKey, issuer: X509Object?,
    issuerKey: EVPKey,
    notBeforeSeconds: Int64, notAfterSeconds: Int64, extensions: [CertificateExtension]
  ) throws(AppStoreCryptoError) -> [UInt8] {
    guard let certificate = X509_new() else { throw failure("X509_new") }
    defer { X509_free(certificate) }
    guard X509_set_version(certificate, 2) == 1 else { throw failure("X509_set_version") }

    // A positive 127-bit random serial (RFC 5280 §4.1.2.2: at most 20 octets, positive).
    var serial = SecureRandom.bytes(16)
    serial[0] &= 0x7f
    serial[0] |= 0x01
    let serialOK = serial.withUnsafeBufferPointer { buffer -> Bool in
      guard let number = BN_bin2bn(buffer.baseAddress, Int32(buffer.count), nil) else {
        return false
      }
      defer { BN_free(number) }
      return BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate)) != nil
    }
    guard serialOK else { throw failure("certificate serial number") }

    guard ASN1_TIME_set(X509_getm_notBefore(certificate), time_t(notBeforeSeconds)) != nil,
      ASN1_TIME_set(X509_getm_notAfter(certificate), time_t(notAfterSeconds)) != nil
    else { throw failure("certificate validity") }

    guard let name = X509_NAME_new() else { throw failure("X509_NAME_new") }
    defer { X509_NAME_free(name) }
    var entries = [("CN", commonName)]
    if let organization { entries.append(("O", organization)) }
    for (field, value) in entries {
      let bytes = Array(value.utf8)
      guard
        X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0)
          == 1
      else {
        throw failure("certificate name \(field)")
      }
    }
    guard X509_set_subject_name(certificate, name) == 1,
      X509_set_issuer_name(certificate, issuer.map { X509_get_subject_name($0.pointer) } ?? name)
        == 1,
      X509_set_pubkey(certificate, subjectKey.pointer) == 1
    else { throw failure("certificate subject, issuer or key") }

    var context = X509V3_CTX()
    X509V3_set_ctx(&context, issuer?.pointer ?? certificate, certificate, nil, nil, 0)
    for item in extensions {
      let ext: OpaquePointer?
      switch item {
      case .standard(let nid, let value):
        ext = X509V3_EXT_conf_nid(nil, &context, nid, value)
      case .nullMarker(let oid):
        ext = nullMarkerExtension(oid: oid)
      }
      guard let ext else { throw failure("certificate extension \(item)") }
      defer { X509_EXTENSION_free(ext) }
      guard X509_add_ext(certificate, ext, -1) == 1 else { throw failure("X509_add_ext") }
    }
    withExtendedLifetime(issuer) {}
    guard X509_sign(certificate, issuerKey.pointer, EVP_sha256()) > 0 else {
      throw failure("X509_sign")
    }
    guard let der = encodeDER({ i2d_X509(certificate, $0) }) else { throw failure("i2d_X509") }
    return der
  }

  /// A non-critical extension `oid` whose extnValue holds DER NULL.
  private static func nullMarkerExtension(oid: String) -> OpaquePointer? {
    guard let object = OBJ_txt2obj(oid, 1) else { return nil }
    defer { ASN1_OBJECT_free(object) }
    guard let value = ASN1_OCTET_STRING_new() else { return nil }
    defer { ASN1_OCTET_STRING_free(value) }
    let null: [UInt8] = [0x05, 0x00]
    guard ASN1_OCTET_STRING_set(value, null, Int32(null.count)) == 1 else { return nil }
    return X509_EXTENSION_create_by_OBJ(nil, object, 0, value)
  }

  /// Verifies `leaf` through `intermediates` (untrusted) to one of `trustedRoots`, at `time`
  /// (seconds since 1970), with OpenSSL's RFC 5280 path validation. When `anchor` is given, the
  /// path must end at exactly that certificate (not another trusted root with the same name).
  static func verifyChain(
    leaf: X509Object, intermediates: [X509Object], trustedRoots: [X509Object],
    anchor: X509Object? = nil,
    atTime seconds: Int64
  ) -> ChainVerdict {
    guard let store = X509_STORE_new() else { return .invalid("X509_STORE_new: \(drainErrors())") }
    defer { X509_STORE_free(store) }
    for root in trustedRoots where X509_STORE_add_cert(store, root.pointer) != 1 {
      return .invalid("X509_STORE_add_cert: \(drainErrors())")
    }
    guard let untrusted = OPENSSL_sk_new_null() else { return .invalid("OPENSSL_sk_new_null") }
    defer { OPENSSL_sk_free(untrusted) }  // frees the stack only: the certificates stay owned by Swift
    for intermediate in intermediates
    where OPENSSL_sk_push(untrusted, UnsafeRawPointer(intermediate.pointer)) <= 0 {
      return .invalid("OPENSSL_sk_push")
    }
    guard let context = X509_STORE_CTX_new() else { return .invalid("X509_STORE_CTX_new") }
    defer { X509_STORE_CTX_free(context) }
    guard X509_STORE_CTX_init(context, store, leaf.pointer, untrusted) == 1 else {
      return .invalid("X509_STORE_CTX_init: \(drainErrors())")
    }
    X509_STORE_CTX_set_time(context, 0, time_t(seconds))
    let result = withExtendedLifetime((leaf, intermediates, trustedRoots)) {
      X509_verify_cert(context)
    }
    guard result == 1 else {
      let code = X509_STORE_CTX_get_error(context)
      let depth = X509_STORE_CTX_get_error_depth(context)
      let reason = String(cString: X509_verify_cert_error_string(Int(code)))
      _ = drainErrors()
      let message = "\(reason) (depth \(depth))"
      switch code {
      // The field errors: OpenSSL cannot compare a validity field with the time, which for a
      // certificate that parsed means a time beyond what it compares (a signedDate in year
      // 5,500,000, found by fuzzing): not valid at that time either.
      case X509_V_ERR_CERT_HAS_EXPIRED, X509_V_ERR_CERT_NOT_YET_VALID,
        X509_V_ERR_ERROR_IN_CERT_NOT_BEFORE_FIELD, X509_V_ERR_ERROR_IN_CERT_NOT_AFTER_FIELD:
        return .notValidAtTime(message)
      default: return .invalid(message)
      }
    }
    guard let chain = X509_STORE_CTX_get0_chain(context) else {
      return .invalid("no verified chain")
    }
    let length = Int(OPENSSL_sk_num(chain))
    if let anchor {
      guard length > 0, let top = OPENSSL_sk_value(chain, Int32(length - 1)),
        X509_cmp(OpaquePointer(top), anchor.pointer) == 0
      else { return .invalid("the verified path does not end at the chain's own root") }
    }
    return .valid(length: length)
  }
}
