import SubstatusJSON

/// Why signed data from Apple (or claiming to be) was refused. Every case is a verdict on the data
/// itself, never transient: retrying the same input gives the same answer, so callers must not retry
/// and should answer "invalid argument" / "unauthenticated", not "unavailable".
public enum SignedDataVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
  /// Not a compact JWS, or a segment, the header or the payload does not decode; the detail says where.
  case malformed(String)
  /// The header's `alg` is not `ES256` (the value found).
  case unsupportedAlgorithm(String)
  /// The `x5c` chain is not three certificates, a certificate does not parse, or path validation
  /// failed for a reason other than time (bad signature, not a CA, …).
  case invalidCertificateChain(String)
  /// The chain's root is not one of the trusted roots.
  case untrustedRoot
  /// The intermediate lacks Apple's WWDR marker (1.2.840.113635.100.6.2.1) or the leaf lacks the
  /// receipt-signing marker (1.2.840.113635.100.6.11.1); the associated value is the missing OID.
  case missingAppleMarkerOID(String)
  /// A certificate of the chain was not valid at the payload's `signedDate`.
  case certificateNotValidAtSignedDate
  /// The ES256 signature does not verify with the leaf certificate's key.
  case invalidSignature
  /// The payload is for another app.
  case wrongBundleId(expected: String, found: String?)
  /// The notification's `appAppleId` is not the app's (checked for Production).
  case wrongAppAppleId
  /// The payload's environment is not the verifier's.
  case wrongEnvironment(expected: String, found: String?)
  /// The payload's environment is one Apple does not sign (`Xcode`, `LocalTesting`) or unknown.
  case unsupportedEnvironment(String)

  /// A one-line explanation.
  public var description: String {
    switch self {
    case .malformed(let detail): "malformed signed data: \(detail)"
    case .unsupportedAlgorithm(let alg):
      "unsupported JWS algorithm \(ErrorText.quoted(alg)) (only ES256 is accepted)"
    case .invalidCertificateChain(let detail): "invalid certificate chain: \(detail)"
    case .untrustedRoot: "the certificate chain does not end at a trusted root"
    case .missingAppleMarkerOID(let oid):
      "a certificate of the chain lacks Apple's marker extension \(oid)"
    case .certificateNotValidAtSignedDate:
      "a certificate of the chain was not valid at the signed date"
    case .invalidSignature: "the JWS signature does not verify"
    case .wrongBundleId(let expected, let found):
      "bundleId \(found.map { ErrorText.quoted($0) } ?? "missing"), expected \"\(expected)\""
    case .wrongAppAppleId: "appAppleId does not match the app"
    case .wrongEnvironment(let expected, let found):
      "environment \(found.map { ErrorText.quoted($0) } ?? "missing"), expected \"\(expected)\""
    case .unsupportedEnvironment(let environment):
      "environment \(ErrorText.quoted(environment)) is not signed by Apple"
    }
  }
}
