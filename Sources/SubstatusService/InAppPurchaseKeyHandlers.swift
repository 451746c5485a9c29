import AppStoreSignedData
import Foundation
import RPCCore
import SubscriptionStorage
import SubstatusServiceCore
import SubstatusWire

// MARK: AdminService.SetInAppPurchaseKey

extension SubstatusService {
  public func setInAppPurchaseKey(_ request: Substatus_V1_SetInAppPurchaseKeyRequest, _ context: ServerContext) async throws -> Substatus_V1_SetInAppPurchaseKeyResponse {
    let cached = try await app(request.appID, context)
    guard isUUID(request.issuerID) else {
      throw invalidArgument("issuer_id", "must be a UUID (the issuer id shown in App Store Connect)")
    }
    guard InAppPurchaseKeyValidation.isKeyID(request.keyID) else {
      throw invalidArgument("key_id", "must be 10 uppercase letters and digits (the key id shown in App Store Connect)")
    }
    let privateKey = try InAppPurchaseKeyValidation.privateKey(request.privateKeyPem)
    let publicKey = privateKey.publicKey
    let key = InAppPurchaseKey(
      keyId: request.keyID, issuerId: request.issuerID, privateKeyPEM: request.privateKeyPem,
      publicKeyPEM: publicKey.pem, publicKeyFingerprint: InAppPurchaseKeyValidation.fingerprint(publicKey),
      setMs: environment.now())
    try await stored { () throws(StoreError) in try await catalogStore.setInAppPurchaseKey(appId: request.appID, key: key) }
    invalidateApp(request.appID)
    await audit(
      context, tenant: cached.app.tenantId, action: "SetInAppPurchaseKey", resource: "apps/\(request.appID)",
      details: "key \(key.keyId), issuer \(key.issuerId), \(key.publicKeyFingerprint)")
    var app = cached.app
    app.inAppPurchaseKey = key.info
    var response = Substatus_V1_SetInAppPurchaseKeyResponse()
    response.app = app.wire
    return response
  }

  /// The app's In-App Purchase key, parsed for signing; FAILED_PRECONDITION when none is set.
  /// Parsing a `.p8` costs more than the ES256 signature it makes (OpenSSL's decoder), so the
  /// parsed key is kept per app while the app's cached record (``loadApp(_:)``) names the same key
  /// (id, issuer, public key fingerprint and time set): a key set on this instance is used at once,
  /// one set on another instance once this instance's app cache has read it (within
  /// `cacheTTLMilliseconds`), as for the catalog and policy.
  func signingKey(_ cached: CachedApp) async throws(RPCError) -> (InAppPurchaseKey, ES256PrivateKey) {
    let appId = cached.app.appId
    if let info = cached.app.inAppPurchaseKey, let hit = signingKeys.withLock({ $0[appId] }),
      hit.identity == CachedSigningKey.Identity(info)
    {
      return (hit.key, hit.privateKey)
    }
    guard let key = try await stored({ () throws(StoreError) in try await catalogStore.inAppPurchaseKey(appId: appId) }) else {
      throw RPCError(
        code: .failedPrecondition,
        message: "app \(ErrorText.quoted(appId)) has no In-App Purchase key: set one with AdminService.SetInAppPurchaseKey")
    }
    let privateKey: ES256PrivateKey
    do {
      privateKey = try ES256PrivateKey(pkcs8PEM: key.privateKeyPEM)
    } catch {
      // It parsed when it was set; the store handed back something else.
      throw RPCError(code: .internal, message: "the stored In-App Purchase key of app \(ErrorText.quoted(appId)) does not parse")
    }
    signingKeys.withLock { $0[appId] = CachedSigningKey(key: key, privateKey: privateKey) }
    return (key, privateKey)
  }
}

/// An app's In-App Purchase key parsed for signing (``SubstatusService/signingKey(_:)``).
struct CachedSigningKey: Sendable {
  /// What names a key: an app record whose key info has another identity has another key.
  struct Identity: Hashable, Sendable {
    var keyId: String
    var issuerId: String
    var publicKeyFingerprint: String
    var setMs: Int64

    init(_ info: InAppPurchaseKeyInfo) {
      (keyId, issuerId, publicKeyFingerprint, setMs) = (info.keyId, info.issuerId, info.publicKeyFingerprint, info.setMs)
    }

    init(_ key: InAppPurchaseKey) {
      (keyId, issuerId, publicKeyFingerprint, setMs) = (key.keyId, key.issuerId, key.publicKeyFingerprint, key.setMs)
    }
  }

  var identity: Identity
  var key: InAppPurchaseKey
  var privateKey: ES256PrivateKey

  init(key: InAppPurchaseKey, privateKey: ES256PrivateKey) {
    (identity, self.key, self.privateKey) = (Identity(key), key, privateKey)
  }
}

/// The checks SetInAppPurchaseKey makes, and the key's fingerprint.
enum InAppPurchaseKeyValidation {
  /// Whether `text` is an App Store Connect key id: 10 uppercase ASCII letters and digits.
  static func isKeyID(_ text: String) -> Bool {
    text.utf8.count == 10
      && text.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
  }

  /// The P-256 key of a `.p8` file: a PEM `PRIVATE KEY` (PKCS#8) block.
  /// - Throws: INVALID_ARGUMENT naming `private_key_pem`; the message never quotes the input.
  static func privateKey(_ pem: String) throws(RPCError) -> ES256PrivateKey {
    guard !pem.isEmpty else { throw invalidArgument("private_key_pem", "must not be empty") }
    guard pem.utf8.count <= 16 * 1024 else { throw invalidArgument("private_key_pem", "longer than 16 KiB") }
    guard pem.contains("-----BEGIN PRIVATE KEY-----") else {
      throw invalidArgument("private_key_pem", "must be a PKCS#8 PEM (\"-----BEGIN PRIVATE KEY-----\"), the .p8 file from App Store Connect")
    }
    do {
      return try ES256PrivateKey(pkcs8PEM: pem)
    } catch {
      throw invalidArgument("private_key_pem", "not a PKCS#8 PEM of a P-256 private key")
    }
  }

  /// `sha256:` and the first 16 hexadecimal digits of the SHA-256 of the key's DER
  /// SubjectPublicKeyInfo.
  static func fingerprint(_ key: ES256PublicKey) -> String {
    "sha256:" + Hex.encode(SHA256.hash(key.spkiDER).prefix(8))
  }
}

extension InAppPurchaseKeyInfo {
  var wire: Substatus_V1_InAppPurchaseKeyInfo {
    var k = Substatus_V1_InAppPurchaseKeyInfo()
    k.keyID = keyId
    k.issuerID = issuerId
    k.publicKeyFingerprint = publicKeyFingerprint
    k.publicKeyPem = publicKeyPEM
    k.setMs = setMs
    return k
  }
}
