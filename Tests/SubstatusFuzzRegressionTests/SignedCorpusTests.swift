import AppStoreSignedData
import Foundation
import SubstatusFuzzTargets
import Testing

/// The signed-data seeds of `Fuzz/Corpus/signed` reach the verdicts their names promise: every
/// valid kind verifies and every refusal of `SignedDataVerificationError` is seeded, so the corpus
/// starts the fuzzer on each branch of the verifier (and a changed test CA or seed script shows here).
@Suite struct SignedCorpusTests {
  /// A seed's verdict: `"ok"` or the error's case name.
  static func verdict(_ seed: String) throws -> String {
    let url = packageRoot.appendingPathComponent("Fuzz/Corpus/signed/\(seed)")
    let input = try [UInt8](Data(contentsOf: url))
    let first = try #require(input.first)
    let rest = Array(input.dropFirst())
    let mode = Int(first % 8)
    let verifier = SignedDataVerifier(
      trustedRoots: [SignedDataFuzzSetup.root], bundleId: SignedDataFuzzSetup.bundleId,
      appAppleId: SignedDataFuzzSetup.appAppleId, environment: first & 8 == 0 ? .sandbox : .production)
    let jws =
      mode < 3
      ? String(decoding: rest, as: UTF8.self) : try SignedDataFuzzSetup.identity.signedJWS(payload: rest)
    do throws(SignedDataVerificationError) {
      switch mode % 3 {
      case 0: _ = try verifier.verifyAndDecodeTransaction(jws)
      case 1: _ = try verifier.verifyAndDecodeRenewalInfo(jws)
      default: _ = try verifier.verifyAndDecodeNotification(jws)
      }
      return "ok"
    } catch {
      return switch error {
      case .malformed: "malformed"
      case .unsupportedAlgorithm: "unsupportedAlgorithm"
      case .invalidCertificateChain: "invalidCertificateChain"
      case .untrustedRoot: "untrustedRoot"
      case .missingAppleMarkerOID: "missingAppleMarkerOID"
      case .certificateNotValidAtSignedDate: "certificateNotValidAtSignedDate"
      case .invalidSignature: "invalidSignature"
      case .wrongBundleId: "wrongBundleId"
      case .wrongAppAppleId: "wrongAppAppleId"
      case .wrongEnvironment: "wrongEnvironment"
      case .unsupportedEnvironment: "unsupportedEnvironment"
      }
    }
  }

  @Test(arguments: [
    ("seed-jws-transaction", "ok"), ("seed-jws-transaction-production", "ok"),
    ("seed-jws-renewal", "ok"), ("seed-jws-renewal-production", "ok"),
    ("seed-jws-notification", "ok"), ("seed-jws-notification-production", "ok"),
    ("seed-payload-notification-summary", "ok"), ("seed-payload-notification-test", "ok"),
    ("seed-payload-notification-external-purchase", "ok"),
    ("seed-jws-invalid-signature", "invalidSignature"), ("seed-jws-wrong-key", "invalidSignature"),
    ("seed-jws-alg-hs256", "unsupportedAlgorithm"), ("seed-jws-alg-missing", "unsupportedAlgorithm"),
    ("seed-jws-x5c-two", "invalidCertificateChain"), ("seed-jws-x5c-missing", "invalidCertificateChain"),
    ("seed-jws-x5c-garbage", "invalidCertificateChain"),
    ("seed-jws-chain-swapped", "invalidCertificateChain"),
    ("seed-jws-leaf-issued-by-leaf", "invalidCertificateChain"),
    ("seed-jws-untrusted-root", "untrustedRoot"), ("seed-jws-apple-sandbox-transaction", "untrustedRoot"),
    ("seed-jws-leaf-without-marker", "missingAppleMarkerOID"),
    ("seed-jws-intermediate-without-marker", "missingAppleMarkerOID"),
    ("seed-jws-leaf-expired", "certificateNotValidAtSignedDate"),
    ("seed-payload-transaction-signed-2019", "certificateNotValidAtSignedDate"),
    ("seed-payload-transaction-signed-2050", "certificateNotValidAtSignedDate"),
    ("seed-payload-transaction-wrong-bundle", "wrongBundleId"),
    ("seed-payload-apple-sandbox-transaction", "wrongBundleId"),
    ("seed-payload-notification-wrong-app-apple-id", "wrongAppAppleId"),
    ("seed-jws-transaction-wrong-environment", "wrongEnvironment"),
    ("seed-payload-transaction-xcode", "unsupportedEnvironment"),
    ("seed-payload-transaction-no-signed-date", "malformed"), ("seed-payload-not-object", "malformed"),
    ("seed-jws-two-segments", "malformed"), ("seed-jws-padded", "malformed"),
    ("seed-jws-header-array", "malformed"), ("seed-payload-transaction-truncated", "malformed"),
  ])
  func seedReachesItsVerdict(_ seed: String, _ expected: String) throws {
    #expect(try Self.verdict(seed) == expected)
  }
}
