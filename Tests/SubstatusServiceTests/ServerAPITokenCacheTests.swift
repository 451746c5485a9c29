import AppStoreSignedData
import SubscriptionStorage
import SubstatusClock
import Testing

@testable import SubstatusService

@Suite("App Store Server API token cache")
struct ServerAPITokenCacheTests {
  /// An authorizer for a fresh key.
  private func authorizer() throws -> InAppPurchaseKeyAuthorizer {
    let key = ES256PrivateKey.generate()
    return try InAppPurchaseKeyAuthorizer(
      key: InAppPurchaseKey(
        keyId: "ABCDEFGHIJ", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyPEM: key.pkcs8PEM,
        publicKeyPEM: key.publicKey.pem, publicKeyFingerprint: "sha256:test", setMs: 0),
      bundleId: "com.example.app")
  }

  @Test("a token is reused until a minute before its 10-minute lifetime ends, then signed anew")
  func reusedUntilAMinuteBeforeExpiry() throws {
    let clock = ManualClock()
    let signer = try authorizer()
    let first = try signer.bearerToken(nowMs: clock.wallMs)
    clock.advance(by: .seconds(539))
    #expect(try signer.bearerToken(nowMs: clock.wallMs) == first)
    clock.advance(by: .seconds(1))
    let second = try signer.bearerToken(nowMs: clock.wallMs)
    #expect(second != first)
    clock.advance(by: .seconds(60))
    #expect(try signer.bearerToken(nowMs: clock.wallMs) == second)
  }

  @Test("a clock set back before the token's issue time gets a new token")
  func clockSetBack() throws {
    let clock = ManualClock()
    let signer = try authorizer()
    clock.advance(by: .seconds(60))
    let issued = try signer.bearerToken(nowMs: clock.wallMs)
    #expect(try signer.bearerToken(nowMs: clock.wallMs - 1_000) != issued)
  }
}
