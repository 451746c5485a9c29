import AppStoreSignedData
import Foundation
import SubstatusJSON
import Synchronization

/// How an app's signed data is signed: with the simulator's valid chain, or with a deliberately
/// broken one so that a verifier's rejections can be tested.
enum SigningMode: String, Sendable, Codable, CaseIterable {
  /// Leaf (receipt-signing OID) ← intermediate (WWDR OID, CA) ← the simulator's root.
  case valid
  /// The leaf lacks Apple's receipt-signing OID `1.2.840.113635.100.6.11.1`.
  case leafWithoutOID = "leaf_without_oid"
  /// The intermediate lacks Apple's WWDR OID `1.2.840.113635.100.6.2.1`.
  case intermediateWithoutOID = "intermediate_without_oid"
  /// The intermediate is not a CA (`basicConstraints CA:FALSE`).
  case intermediateNotCA = "intermediate_not_ca"
  /// The leaf expired at the end of 2021.
  case expiredLeaf = "expired_leaf"
  /// A chain to another root, which nobody trusts.
  case untrustedRoot = "untrusted_root"
  /// The valid chain, but the signature is made with another key than the leaf's.
  case wrongKey = "wrong_key"
}

/// The App Store's signing, simulated: a test root CA (made at start or loaded from
/// `--ca-dir`) and the signing identities it issues, one per ``SigningMode``, made on first use.
final class SimulatorSigning: Sendable {
  let authority: TestCertificateAuthority
  private let identities = Mutex<[SigningMode: SigningIdentity]>([:])

  init(authority: TestCertificateAuthority) {
    self.authority = authority
  }

  /// The root certificate as PEM: what a verifier must trust.
  var rootPEM: String { authority.root.pem }

  /// A compact JWS of `payload` with `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
  func sign(_ payload: JSONValue, mode: SigningMode = .valid) -> String {
    // Signing with a key we made cannot fail short of libcrypto running out of memory.
    (try? identity(mode).signedJWS(payload: payload)) ?? ""
  }

  func identity(_ mode: SigningMode) throws(AppStoreCryptoError) -> SigningIdentity {
    if let identity = identities.withLock({ $0[mode] }) { return identity }
    var options = TestCertificateAuthority.SigningIdentityOptions()
    var issuer = authority
    switch mode {
    case .valid, .wrongKey: break
    case .leafWithoutOID: options.leafHasReceiptSigningMarker = false
    case .intermediateWithoutOID: options.intermediateHasWWDRMarker = false
    case .intermediateNotCA: options.intermediateIsCA = false
    case .expiredLeaf: options.leafNotAfter = 1_640_995_199_000  // 2021-12-31T23:59:59Z
    case .untrustedRoot:
      issuer = try TestCertificateAuthority.make(commonName: "Untrusted Test Root CA")
    }
    var identity = try issuer.issueSigningIdentity(options: options)
    if mode == .wrongKey {
      identity = SigningIdentity(key: ES256PrivateKey.generate(), chain: identity.chain)
    }
    let made = identity
    return identities.withLock { identities in
      if let existing = identities[mode] { return existing }
      identities[mode] = made
      return made
    }
  }

  /// Loads the CA from `directory` (`root-ca.pem`, `root-ca-key.pem`) if both exist, else makes
  /// one and saves it there (the directory is created if needed).
  /// - Throws: ``HTTPServerError``-style messages as ``SigningSetupError``.
  static func authority(directory: String?) throws(SigningSetupError) -> TestCertificateAuthority {
    guard let directory else {
      do { return try TestCertificateAuthority.make(commonName: "appstore-sim Test Root CA") } catch
      {
        throw SigningSetupError(message: "cannot make the test root CA: \(error)")
      }
    }
    let base = URL(fileURLWithPath: directory)
    let certificate = base.appendingPathComponent("root-ca.pem")
    let key = base.appendingPathComponent("root-ca-key.pem")
    let manager = FileManager.default
    if manager.fileExists(atPath: certificate.path) && manager.fileExists(atPath: key.path) {
      do {
        let rootPEM = try String(contentsOf: certificate, encoding: .utf8)
        let keyPEM = try String(contentsOf: key, encoding: .utf8)
        return try TestCertificateAuthority(rootPEM: rootPEM, keyPEM: keyPEM)
      } catch {
        throw SigningSetupError(message: "cannot load the CA from '\(directory)': \(error)")
      }
    }
    do {
      let authority = try TestCertificateAuthority.make(commonName: "appstore-sim Test Root CA")
      try manager.createDirectory(at: base, withIntermediateDirectories: true)
      try Data(authority.root.pem.utf8).write(to: certificate, options: .atomic)
      try Data(authority.rootKeyPEM.utf8).write(to: key, options: .atomic)
      try manager.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key.path)
      return authority
    } catch {
      throw SigningSetupError(message: "cannot create the CA in '\(directory)': \(error)")
    }
  }
}

/// The CA could not be made, loaded or saved.
struct SigningSetupError: Error, Sendable {
  var message: String
}

/// Checks the ES256 JWTs that authorize App Store Server API requests, as Apple does: the
/// signature with the In-App Purchase key named by `kid`, `iss` its issuer, `aud`
/// `appstoreconnect-v1`, `bid` the app, `exp` in the future and at most 60 minutes ahead.
/// `iat` is optional (Apple's own App Store Server Libraries send none); when present it must
/// not lie in the future and the token must live at most 60 minutes from it.
enum ServerAPIAuthorization {
  /// The longest a token may live: Apple rejects tokens whose `exp` is more than 60 minutes away.
  static let maximumLifetimeSeconds: Int64 = 3600
  /// Clock skew tolerated between the client and the simulator.
  static let clockSkewSeconds: Int64 = 60

  /// The app and key a valid token names; nil for anything Apple answers 401 to.
  static func authorize(
    header value: String?, apps: [String: App], nowSeconds: Int64
  ) -> (app: App, key: InAppPurchaseKey)? {
    guard let value, value.hasPrefix("Bearer ") else { return nil }
    let token = String(value.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
    guard token.utf8.count <= 8192, let jws = try? JWS.CompactJWS(parsing: token) else {
      return nil
    }
    guard jws.header["alg"]?.stringValue == "ES256", let kid = jws.header["kid"]?.stringValue,
      let claims = try? JSONValue(parsing: jws.payload), claims.objectValue != nil,
      claims["aud"]?.stringValue == "appstoreconnect-v1",
      let bundleID = claims["bid"]?.stringValue, let issuer = claims["iss"]?.stringValue,
      let exp = claims["exp"]?.int64Value, let app = apps[bundleID],
      let key = app.apiKeys?.first(where: { $0.keyID == kid && $0.issuerID == issuer })
    else { return nil }
    // Apple rejects tokens that expired, or that live more than 60 minutes; allow a little skew.
    guard exp > nowSeconds, exp <= nowSeconds + maximumLifetimeSeconds + clockSkewSeconds else {
      return nil
    }
    if let iatClaim = claims["iat"] {
      guard let iat = iatClaim.int64Value, iat <= nowSeconds + clockSkewSeconds,
        exp - iat <= maximumLifetimeSeconds
      else { return nil }
    }
    guard let publicKey = try? ES256PublicKey(pem: key.publicKeyPEM),
      publicKey.isValidSignature(jws.signature, for: jws.signingInput)
    else { return nil }
    return (app, key)
  }
}
