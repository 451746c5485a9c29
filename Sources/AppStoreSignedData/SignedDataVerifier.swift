// Verification of Apple's signed data (apple-domain §2.5), following the checks of
// apple/app-store-server-library-swift's ChainVerifier and SignedDataVerifier:
//   1. compact JWS, `alg` ES256, `x5c` of exactly three certificates;
//   2. the x5c root is (byte for byte) one of the trusted roots, and leaf → intermediate → root is a
//      valid RFC 5280 path at the payload's `signedDate` (OpenSSL X509_verify_cert);
//   3. Apple's marker extensions on the intermediate and the leaf;
//   4. the ES256 signature with the leaf's key;
//   5. app checks: bundleId, environment (only Sandbox and Production are signed by Apple), and for
//      Production notifications the appAppleId.
// Unlike Apple's library, Xcode and LocalTesting data is refused rather than passed unverified.
import SubscriptionDomain
import SubstatusJSON

/// A JWS whose signature and certificate chain verified against trusted roots (no app checks yet).
/// Only verification creates one.
public struct VerifiedSignedData: Sendable, Hashable {
  /// The payload, parsed (a JSON object).
  public let payload: JSONValue
  /// The payload bytes exactly as signed.
  public let payloadBytes: [UInt8]
  /// The payload's `signedDate` (ms since 1970): the time the chain was validated at.
  public let signedDate: Int64
  /// The `x5c` chain: leaf, intermediate, root.
  public let certificateChain: [X509Certificate]

  /// Where the payload says it comes from: top-level fields for a transaction or renewal info; for
  /// a notification, its `data`, else its `summary`, else its `appData` (`RESCIND_CONSENT`), else
  /// its `externalPurchaseToken` (as Apple's library reads them).
  public var origin: SignedDataOrigin { SignedDataOrigin(payload: payload) }
}

/// The app and environment a signed payload names.
public struct SignedDataOrigin: Sendable, Hashable {
  /// `bundleId`, when present.
  public var bundleId: String?
  /// `appAppleId`, when present (notifications).
  public var appAppleId: Int64?
  /// Apple's `environment` text, when present (`Sandbox`, `Production`, `Xcode`, `LocalTesting`).
  public var rawEnvironment: String?

  /// The environment when it is one Apple signs (Sandbox or Production).
  public var environment: Environment? {
    switch rawEnvironment {
    case "Sandbox": .sandbox
    case "Production": .production
    default: nil
    }
  }

  /// An origin from its parts.
  public init(bundleId: String?, appAppleId: Int64?, rawEnvironment: String?) {
    self.bundleId = bundleId
    self.appAppleId = appAppleId
    self.rawEnvironment = rawEnvironment
  }

  init(payload: JSONValue) {
    func read(_ object: JSONValue) -> SignedDataOrigin {
      SignedDataOrigin(
        bundleId: object["bundleId"]?.stringValue, appAppleId: object["appAppleId"]?.int64Value,
        rawEnvironment: object["environment"]?.stringValue)
    }
    if let data = payload["data"], data.objectValue != nil {
      self = read(data)
    } else if let summary = payload["summary"], summary.objectValue != nil {
      self = read(summary)
    } else if let appData = payload["appData"], appData.objectValue != nil {
      self = read(appData)
    } else if let token = payload["externalPurchaseToken"], token.objectValue != nil {
      self = read(token)
      let sandbox = token["externalPurchaseId"]?.stringValue?.hasPrefix("SANDBOX") == true
      rawEnvironment = sandbox ? "Sandbox" : "Production"
    } else {
      self = read(payload)
    }
  }
}

/// Verifies and decodes the signed data of one app in one environment: notifications
/// (`signedPayload`), transactions (`signedTransactionInfo`, StoreKit 2 `jwsRepresentation`) and
/// renewal info (`signedRenewalInfo`).
///
/// ```swift
/// let verifier = SignedDataVerifier(bundleId: "com.example.app", appAppleId: 1234567890, environment: .production)
/// let notification = try verifier.verifyAndDecodeNotification(signedPayload)
/// ```
///
/// Every failure is a ``SignedDataVerificationError``: a verdict on the data, never transient.
/// Thread-safe and cheap to copy.
public struct SignedDataVerifier: Sendable {
  /// The roots a chain may end at.
  public let trustedRoots: [X509Certificate]
  /// The app's bundle id.
  public let bundleId: String
  /// The app's Apple id, required to accept Production notifications.
  public let appAppleId: Int64?
  /// The environment this verifier accepts.
  public let environment: Environment

  /// A verifier for one app in one environment.
  /// - Parameters:
  ///   - trustedRoots: the roots chains must end at; Apple Root CA - G3 by default. A test CA's
  ///     root belongs here only in tests or against the simulator.
  ///   - bundleId: the app's bundle id.
  ///   - appAppleId: the app's Apple id. With `environment` Production and no `appAppleId`, every
  ///     notification is refused with ``SignedDataVerificationError/wrongAppAppleId`` (Apple's library
  ///     refuses that configuration outright).
  ///   - environment: Sandbox or Production.
  public init(
    trustedRoots: [X509Certificate] = [.appleRootCAG3], bundleId: String, appAppleId: Int64?,
    environment: Environment
  ) {
    self.trustedRoots = trustedRoots
    self.bundleId = bundleId
    self.appAppleId = appAppleId
    self.environment = environment
  }

  // MARK: Decoding with app checks

  /// Verifies a notification's `signedPayload` and decodes its `ResponseBodyV2DecodedPayload`.
  /// The chain is validated at the notification's own `signedDate`; the nested
  /// `signedTransactionInfo` / `signedRenewalInfo` are NOT verified here (use
  /// ``verifyAndDecodeTransaction(_:)`` and ``verifyAndDecodeRenewalInfo(_:)``).
  /// - Throws: ``SignedDataVerificationError``; `wrongBundleId`, `wrongAppAppleId` (Production
  ///   only) and `wrongEnvironment` / `unsupportedEnvironment` after a valid signature.
  public func verifyAndDecodeNotification(_ signedPayload: String)
    throws(SignedDataVerificationError)
    -> NotificationV2
  {
    try decodeNotification(verified: verify(signedPayload))
  }

  /// Verifies a `signedTransactionInfo` (or a StoreKit 2 transaction's JWS) and decodes it.
  /// - Throws: ``SignedDataVerificationError``; `wrongBundleId` and `wrongEnvironment` /
  ///   `unsupportedEnvironment` after a valid signature.
  public func verifyAndDecodeTransaction(_ signedTransaction: String)
    throws(SignedDataVerificationError)
    -> Transaction
  {
    try decodeTransaction(verified: verify(signedTransaction))
  }

  /// Verifies a `signedRenewalInfo` and decodes it. As in Apple's library only the environment is
  /// checked (renewal info carries no bundleId).
  /// - Throws: ``SignedDataVerificationError``.
  public func verifyAndDecodeRenewalInfo(_ signedRenewalInfo: String)
    throws(SignedDataVerificationError)
    -> RenewalInfo
  {
    try decodeRenewalInfo(verified: verify(signedRenewalInfo))
  }

  /// Applies the app checks of ``verifyAndDecodeNotification(_:)`` to data verified already (e.g. by
  /// ``verifySignature(_:trustedRoots:)`` to find the app first).
  /// - Throws: ``SignedDataVerificationError``.
  public func decodeNotification(verified: VerifiedSignedData) throws(SignedDataVerificationError)
    -> NotificationV2
  {
    let notification: NotificationV2
    do { notification = try NotificationV2(json: verified.payload) } catch {
      throw .malformed("notification payload: \(error)")
    }
    let origin = verified.origin
    guard origin.bundleId == bundleId else {
      throw .wrongBundleId(expected: bundleId, found: origin.bundleId)
    }
    if environment == .production {
      guard let appAppleId, origin.appAppleId == appAppleId else { throw .wrongAppAppleId }
    }
    try checkEnvironment(origin.rawEnvironment)
    return notification
  }

  /// Applies the app checks of ``verifyAndDecodeTransaction(_:)`` to data verified already.
  /// - Throws: ``SignedDataVerificationError``.
  public func decodeTransaction(verified: VerifiedSignedData) throws(SignedDataVerificationError)
    -> Transaction
  {
    let transaction: Transaction
    do { transaction = try Transaction(jwsTransactionPayload: verified.payload) } catch {
      throw .malformed("transaction payload: \(error)")
    }
    guard transaction.bundleId == bundleId else {
      throw .wrongBundleId(expected: bundleId, found: transaction.bundleId)
    }
    try checkEnvironment(verified.payload["environment"]?.stringValue)
    return transaction
  }

  /// Applies the app checks of ``verifyAndDecodeRenewalInfo(_:)`` to data verified already.
  /// - Throws: ``SignedDataVerificationError``.
  public func decodeRenewalInfo(verified: VerifiedSignedData) throws(SignedDataVerificationError)
    -> RenewalInfo
  {
    let renewalInfo: RenewalInfo
    do { renewalInfo = try RenewalInfo(jwsRenewalInfoPayload: verified.payload) } catch {
      throw .malformed("renewal info payload: \(error)")
    }
    try checkEnvironment(verified.payload["environment"]?.stringValue)
    return renewalInfo
  }

  func checkEnvironment(_ raw: String?) throws(SignedDataVerificationError) {
    guard let raw else { throw .wrongEnvironment(expected: environment.rawValue, found: nil) }
    guard
      let found = SignedDataOrigin(bundleId: nil, appAppleId: nil, rawEnvironment: raw).environment
    else {
      throw .unsupportedEnvironment(raw)
    }
    guard found == environment else {
      throw .wrongEnvironment(expected: environment.rawValue, found: raw)
    }
  }

  // MARK: Signature and chain

  /// Verifies the signature and certificate chain of `jws` against this verifier's roots, without
  /// app checks.
  /// - Throws: ``SignedDataVerificationError`` (never an app check).
  public func verify(_ jws: String) throws(SignedDataVerificationError) -> VerifiedSignedData {
    try Self.verifySignature(jws, trustedRoots: trustedRoots)
  }

  /// Verifies the signature and certificate chain of `jws` without any app check, so that a service
  /// receiving data for several apps and environments can read ``VerifiedSignedData/origin`` and
  /// pick the app's verifier (then ``decodeNotification(verified:)`` and friends).
  /// - Parameters:
  ///   - jws: a compact JWS from Apple.
  ///   - trustedRoots: the roots chains may end at (Apple Root CA - G3 by default).
  /// - Throws: ``SignedDataVerificationError``: `malformed`, `unsupportedAlgorithm`,
  ///   `invalidCertificateChain`, `untrustedRoot`, `certificateNotValidAtSignedDate`,
  ///   `missingAppleMarkerOID`, `invalidSignature`.
  public static func verifySignature(
    _ jws: String, trustedRoots: [X509Certificate] = [.appleRootCAG3]
  )
    throws(SignedDataVerificationError) -> VerifiedSignedData
  {
    let parsed = try JWS.CompactJWS(parsing: jws)
    guard let alg = parsed.header["alg"]?.stringValue else {
      throw .unsupportedAlgorithm("(missing)")
    }
    guard alg == "ES256" else { throw .unsupportedAlgorithm(alg) }
    let x5c = try x5cStrings(parsed.header["x5c"])
    let cache = VerifiedChainCache.shared
    let cached = cache.entry(for: x5c)
    let chain: [X509Certificate]
    if let cached { chain = cached.chain } else { chain = try certificates(x5c: x5c) }
    guard trustedRoots.contains(chain[2]) else { throw .untrustedRoot }

    // The payload must be a JSON object with a signedDate before the chain can be validated at it.
    let payload: JSONValue
    do { payload = try JSONValue(parsing: parsed.payload) } catch {
      throw .malformed("the payload is not JSON: \(error)")
    }
    guard payload.objectValue != nil else { throw .malformed("the payload is not a JSON object") }
    guard let signedDate = payload["signedDate"]?.int64Value else {
      throw .malformed("the payload has no integer signedDate")
    }
    // Floor division: a negative signedDate must not round towards the future.
    let seconds = signedDate >= 0 ? signedDate / 1000 : -((-(signedDate + 1)) / 1000) - 1  // no overflow at Int64.min

    let leafKey: ES256PublicKey
    if let cached, cached.isValid(atSeconds: seconds) {
      leafKey = cached.leafKey
    } else {
      leafKey = try validate(chain: chain, trustedRoots: trustedRoots, atSeconds: seconds)
      cache.insert(
        VerifiedChainCache.Entry(
          chain: chain, leafKey: leafKey, notBefore: chain.map { $0.notBefore / 1000 }.max() ?? 0,
          notAfter: chain.map { $0.notAfter / 1000 }.min() ?? 0),
        for: x5c)
    }
    guard leafKey.isValidSignature(parsed.signature, for: parsed.signingInput) else {
      throw .invalidSignature
    }
    return VerifiedSignedData(
      payload: payload, payloadBytes: parsed.payload, signedDate: signedDate,
      certificateChain: chain)
  }

  /// Path validation of leaf → intermediate → root at `seconds`, then Apple's marker extensions;
  /// returns the leaf's key.
  private static func validate(
    chain: [X509Certificate], trustedRoots: [X509Certificate], atSeconds seconds: Int64
  )
    throws(SignedDataVerificationError) -> ES256PublicKey
  {
    let (leaf, intermediate, root) = (chain[0], chain[1], chain[2])
    switch LibCrypto.verifyChain(
      leaf: leaf.object, intermediates: [intermediate.object],
      trustedRoots: trustedRoots.map(\.object),
      anchor: root.object, atTime: seconds)
    {
    case .valid(let length):
      guard length == 3 else {
        throw .invalidCertificateChain("the verified path has \(length) certificates, not 3")
      }
    case .notValidAtTime: throw .certificateNotValidAtSignedDate
    case .invalid(let reason): throw .invalidCertificateChain(reason)
    }
    guard intermediate.hasExtension(oid: AppleCertificateOID.wwdrIntermediate) else {
      throw .missingAppleMarkerOID(AppleCertificateOID.wwdrIntermediate)
    }
    guard leaf.hasExtension(oid: AppleCertificateOID.receiptSigningLeaf) else {
      throw .missingAppleMarkerOID(AppleCertificateOID.receiptSigningLeaf)
    }
    do { return try leaf.es256PublicKey() } catch {
      throw .invalidCertificateChain("the leaf key is not a P-256 key")
    }
  }

  /// The three base64 strings of an `x5c` header value.
  private static func x5cStrings(_ x5c: JSONValue?) throws(SignedDataVerificationError) -> [String]
  {
    guard let x5c else { throw .invalidCertificateChain("the header has no x5c") }
    guard let items = x5c.arrayValue else { throw .invalidCertificateChain("x5c is not an array") }
    guard items.count == 3 else {
      throw .invalidCertificateChain("x5c has \(items.count) certificates; Apple's chains have 3")
    }
    var strings: [String] = []
    for (index, item) in items.enumerated() {
      guard let text = item.stringValue else {
        throw .invalidCertificateChain("x5c[\(index)] is not a base64 string")
      }
      strings.append(text)
    }
    return strings
  }

  /// The certificates of an `x5c` header value's strings.
  private static func certificates(x5c: [String]) throws(SignedDataVerificationError)
    -> [X509Certificate]
  {
    var chain: [X509Certificate] = []
    for (index, text) in x5c.enumerated() {
      guard let der = Base64Codec.decodeStandard(text) else {
        throw .invalidCertificateChain("x5c[\(index)] is not a base64 string")
      }
      do { chain.append(try X509Certificate(der: der)) } catch {
        throw .invalidCertificateChain("x5c[\(index)] is not a DER certificate")
      }
    }
    return chain
  }
}
