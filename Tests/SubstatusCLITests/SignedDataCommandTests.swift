import Foundation
import RPCCore
import SubstatusClientTestKit
import SubstatusWire
import Testing

/// `app set-iap-key`, the key lines of `app show`, `offer sign-promo` and `offer sign-intro`
/// against a fake server.
@Suite("CLI: In-App Purchase key and offer signatures")
struct SignedDataCommandTests {
  static let keyInfo = message(Substatus_V1_InAppPurchaseKeyInfo.self) {
    $0.keyID = "2X9R4HXF34"
    $0.issuerID = "57246542-96fe-1a63-e053-0824d011072a"
    $0.publicKeyFingerprint = "sha256:0123456789abcdef"
    $0.publicKeyPem = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
    $0.setMs = newYear2026
  }

  private func router(_ log: CallLog) -> RPCRouter {
    var router = fakeAPIRouter(log: log)
    router.fake(Substatus_V1_AdminService.setInAppPurchaseKey, log: log) { request, _ in
      var app = Canned.app1
      app.appID = request.appID
      app.inAppPurchaseKey = Self.keyInfo
      return message { $0.app = app }
    }
    router.fake(Substatus_V1_AdminService.getApp, log: log) { request, _ in
      var app = Canned.app1
      app.appID = request.appID
      if request.appID == "app_key" { app.inAppPurchaseKey = Self.keyInfo }
      return message { $0.app = app }
    }
    router.fake(Substatus_V1_EligibilityService.signPromotionalOffer, log: log) { request, _ in
      guard request.offerID != "denied" else {
        throw RPCError(code: .failedPrecondition, message: "user \"u\" is not eligible: ELIGIBILITY_REASON_NEVER_SUBSCRIBED")
      }
      return message {
        $0.productID = request.productID
        $0.offerID = request.offerID
        $0.keyID = "2X9R4HXF34"
        $0.nonce = request.nonce.isEmpty ? "11111111-2222-3333-4444-555555555555" : request.nonce
        $0.timestampMs = newYear2026
        $0.signature = "MEUCIQ=="
        $0.compactJws = "eyJh.eyJi.c2ln"
        $0.reason = .lapsedSubscriber
      }
    }
    router.fake(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, log: log) { request, _ in
      message {
        $0.productID = request.productID
        $0.keyID = "2X9R4HXF34"
        $0.nonce = "11111111-2222-3333-4444-555555555555"
        $0.issuedAtMs = newYear2026
        $0.compactJws = "eyJh.eyJp.c2ln"
        $0.reason = .newCustomer
      }
    }
    return router
  }

  private func run(_ arguments: [String], stdin: [UInt8] = []) async throws -> (CLIRun, CallLog) {
    let log = CallLog()
    let run = try await withFakeServer(router(log)) { transport in
      await runCLI(arguments, stdin: stdin, transport: transport)
    }
    return (run, log)
  }

  @Test("set-iap-key reads the .p8 from --key-file or stdin, sends the ids, prints the fingerprint, never the key")
  func setKey() async throws {
    let pem = String(decoding: try fixtureBytes("iap-key.p8"), as: UTF8.self)
    let body = pem.split(separator: "\n")[1]
    let base = ["app", "set-iap-key", "app_1", "--issuer-id", Self.keyInfo.issuerID, "--key-id", "2X9R4HXF34"]
    let (fromFile, fileLog) = try await run(base + ["--key-file", fixture("iap-key.p8")])
    let (fromStdin, stdinLog) = try await run(base, stdin: Array(pem.utf8))
    for (output, log) in [(fromFile, fileLog), (fromStdin, stdinLog)] {
      #expect(output.status == 0, "\(output.stderr)")
      let call = try #require(log.all.last)
      let sent = try Substatus_V1_SetInAppPurchaseKeyRequest(serializedBytes: call.request)
      #expect(sent.appID == "app_1")
      #expect(sent.issuerID == Self.keyInfo.issuerID)
      #expect(sent.keyID == "2X9R4HXF34")
      #expect(sent.privateKeyPem == pem)
      #expect(output.stdout.contains("sha256:0123456789abcdef"))
      #expect(output.stdout.contains("2X9R4HXF34"))
      #expect(!output.stdout.contains(body) && !output.stderr.contains(body))
    }
    let (json, _) = try await run(base + ["--key-file", fixture("iap-key.p8"), "--json"])
    let decoded = try Substatus_V1_SetInAppPurchaseKeyResponse(jsonString: json.stdout)
    #expect(decoded.app?.inAppPurchaseKey == Self.keyInfo)
  }

  @Test("set-iap-key: an empty key or a missing --issuer-id is a usage error, not a call")
  func setKeyUsage() async throws {
    let (empty, emptyLog) = try await run(
      ["app", "set-iap-key", "app_1", "--issuer-id", "x", "--key-id", "y"], stdin: Array(" \n".utf8))
    #expect(empty.status == 2)
    #expect(empty.stderr.hasPrefix("substatus app set-iap-key: the In-App Purchase key is empty\n"))
    #expect(emptyLog.count == 0)
    let (missing, missingLog) = try await run(["app", "set-iap-key", "app_1", "--key-id", "y"], stdin: Array("k".utf8))
    #expect(missing.status == 2)
    #expect(missing.stderr.contains("--issuer-id"))
    #expect(missingLog.count == 0)
  }

  @Test("app show prints the key id, issuer and fingerprint, or that no key is set")
  func show() async throws {
    let (withKey, _) = try await run(["app", "show", "app_key"])
    #expect(withKey.status == 0)
    #expect(withKey.stdout.contains("in-app purchase key           2X9R4HXF34\n"))
    #expect(withKey.stdout.contains("issuer id                     57246542-96fe-1a63-e053-0824d011072a\n"))
    #expect(withKey.stdout.contains("key fingerprint               sha256:0123456789abcdef\n"))
    let (without, _) = try await run(["app", "show", "app_1"])
    #expect(without.stdout.contains("in-app purchase key           not set\n"))
  }

  @Test("offer sign-promo sends every argument and flag and prints the signature fields")
  func signPromo() async throws {
    let (output, log) = try await run([
      "offer", "sign-promo", "app_1", "user-42", "pro.monthly", "pro.retain",
      "--app-account-token", "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE", "--nonce",
      "0f0e0d0c-0b0a-0908-0706-050403020100", "--transaction-id", "2000", "--environment", "sandbox",
    ])
    #expect(output.status == 0, "\(output.stderr)")
    let sent = try Substatus_V1_SignPromotionalOfferRequest(serializedBytes: try #require(log.all.last).request)
    #expect(sent.appID == "app_1" && sent.userID == "user-42")
    #expect(sent.productID == "pro.monthly" && sent.offerID == "pro.retain")
    #expect(sent.appAccountToken == "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE")
    #expect(sent.nonce == "0f0e0d0c-0b0a-0908-0706-050403020100")
    #expect(sent.transactionID == "2000")
    #expect(sent.environment == .sandbox)
    for text in ["LAPSED_SUBSCRIBER", "0f0e0d0c-0b0a-0908-0706-050403020100", "MEUCIQ==", "eyJh.eyJi.c2ln", String(newYear2026)] {
      #expect(output.stdout.contains(text), "\(text)")
    }
    let (json, _) = try await run(["offer", "sign-promo", "app_1", "u", "p", "o", "--json"])
    let decoded = try Substatus_V1_SignPromotionalOfferResponse(jsonString: json.stdout)
    #expect(decoded.compactJws == "eyJh.eyJi.c2ln" && decoded.reason == .lapsedSubscriber)
  }

  @Test("offer sign-promo: a refusal exits non-zero naming the status")
  func signPromoRefused() async throws {
    let (output, _) = try await run(["offer", "sign-promo", "app_1", "u", "p", "denied"])
    #expect(output.status != 0)
    #expect(output.stderr.contains("FAILED_PRECONDITION"))
  }

  @Test("offer sign-intro sends the transaction id, nonce and environment and prints the JWS")
  func signIntro() async throws {
    let (output, log) = try await run([
      "offer", "sign-intro", "app_1", "user-42", "pro.monthly", "--transaction-id", "2000", "--nonce",
      "0f0e0d0c-0b0a-0908-0706-050403020100",
    ])
    #expect(output.status == 0, "\(output.stderr)")
    let sent = try Substatus_V1_SignIntroductoryOfferEligibilityRequest(
      serializedBytes: try #require(log.all.last).request)
    #expect(sent.appID == "app_1" && sent.userID == "user-42" && sent.productID == "pro.monthly")
    #expect(sent.transactionID == "2000" && sent.nonce == "0f0e0d0c-0b0a-0908-0706-050403020100")
    #expect(sent.environment == .unspecified)
    #expect(output.stdout.contains("eyJh.eyJp.c2ln") && output.stdout.contains("NEW_CUSTOMER"))
    let (json, _) = try await run(["offer", "sign-intro", "app_1", "u", "p", "--json"])
    #expect(try Substatus_V1_SignIntroductoryOfferEligibilityResponse(jsonString: json.stdout).issuedAtMs == newYear2026)
  }
}
