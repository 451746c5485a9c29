import SubscriptionDomain
import SubstatusJSON
import Testing

@testable import AppStoreSignedData

/// The device's signed `AppTransaction` (JWSAppTransactionDecodedPayload), checked as Apple's
/// SignedDataVerifier.verifyAndDecodeAppTransaction does: chain and signature, bundle id, the
/// app's Apple id in Production, the environment from `receiptType`.
@Suite("AppTransaction verification")
struct AppTransactionVerificationTests {
  static func payload(
    bundleId: String = VerifierFixtures.bundleId, appAppleId: Int64? = VerifierFixtures.appAppleId,
    receiptType: String? = "Sandbox", appTransactionId: String? = "704289572311810221"
  ) -> JSONValue {
    var object: JSONObject = [
      "bundleId": .string(bundleId), "applicationVersion": .string("2.1"),
      "originalApplicationVersion": .string("1.4"), "originalPurchaseDate": .integer(1_600_000_000_000),
      "receiptCreationDate": .integer(VerifierFixtures.signedDate), "signedDate": .integer(VerifierFixtures.signedDate),
      "originalPlatform": .string("iOS"),
    ]
    if let appAppleId { object.append("appAppleId", .integer(appAppleId)) }
    if let receiptType { object.append("receiptType", .string(receiptType)) }
    if let appTransactionId { object.append("appTransactionId", .string(appTransactionId)) }
    return .object(object)
  }

  @Test("a valid app transaction decodes with its Apple Account, original date and version")
  func valid() throws {
    let fixtures = VerifierFixtures.shared
    let jws = try fixtures.identity.signedJWS(payload: Self.payload())
    let decoded = try fixtures.verifier(environment: .sandbox).verifyAndDecodeAppTransaction(jws)
    #expect(decoded.appTransactionId == "704289572311810221")
    #expect(decoded.environment == .sandbox)
    #expect(decoded.originalPurchaseDate == 1_600_000_000_000)
    #expect(decoded.originalApplicationVersion == "1.4")
    #expect(decoded.applicationVersion == "2.1")
    let verified = try fixtures.verifier().verify(jws)
    #expect(verified.appTransactionEnvironment == .sandbox)
    let production = try fixtures.identity.signedJWS(payload: Self.payload(receiptType: "Production"))
    #expect(try fixtures.verifier(environment: .production).verifyAndDecodeAppTransaction(production).environment == .production)
  }

  enum Case: String, CaseIterable, Sendable {
    case otherBundle, otherAppAppleIdInProduction, noAppAppleIdInProduction, otherEnvironment, xcode, noReceiptType,
      noAppTransactionId, untrustedRoot
  }

  @Test("each app check refuses what Apple's verifier refuses", arguments: Case.allCases)
  func refused(_ c: Case) throws {
    let fixtures = VerifierFixtures.shared
    var environment = Environment.sandbox
    let payload: JSONValue
    switch c {
    case .otherBundle: payload = Self.payload(bundleId: "com.other.app")
    case .otherAppAppleIdInProduction:
      environment = .production
      payload = Self.payload(appAppleId: 42, receiptType: "Production")
    case .noAppAppleIdInProduction:
      environment = .production
      payload = Self.payload(appAppleId: nil, receiptType: "Production")
    case .otherEnvironment: payload = Self.payload(receiptType: "Production")
    case .xcode: payload = Self.payload(receiptType: "Xcode")
    case .noReceiptType: payload = Self.payload(receiptType: nil)
    case .noAppTransactionId: payload = Self.payload(appTransactionId: nil)
    case .untrustedRoot: payload = Self.payload()
    }
    let signer = c == .untrustedRoot ? try fixtures.otherCA.issueSigningIdentity() : fixtures.identity
    let jws = try signer.signedJWS(payload: payload)
    #expect {
      try fixtures.verifier(environment: environment).verifyAndDecodeAppTransaction(jws)
    } throws: { error in
      guard let error = error as? SignedDataVerificationError else { return false }
      switch (c, error) {
      case (.otherBundle, .wrongBundleId), (.otherAppAppleIdInProduction, .wrongAppAppleId),
        (.noAppAppleIdInProduction, .wrongAppAppleId), (.otherEnvironment, .wrongEnvironment),
        (.xcode, .unsupportedEnvironment), (.noReceiptType, .wrongEnvironment), (.noAppTransactionId, .malformed),
        (.untrustedRoot, .untrustedRoot):
        return true
      default: return false
      }
    }
  }
}
