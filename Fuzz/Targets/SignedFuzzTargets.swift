import AppStoreSignedData
import HTTPServer
import SubscriptionDomain
import SubstatusJSON

// MARK: App Store signed data (`FuzzTarget.signed`)

extension FuzzTargets {
  /// The verifiers of the `signed` target: the fixed test root, the fuzz app, each environment.
  static let signedVerifiers: [SignedDataVerifier] = [Environment.sandbox, .production].map {
    SignedDataVerifier(
      trustedRoots: [SignedDataFuzzSetup.root], bundleId: SignedDataFuzzSetup.bundleId,
      appAppleId: SignedDataFuzzSetup.appAppleId, environment: $0)
  }

  /// The payload the header mode signs: a valid sandbox transaction of the fuzz app.
  static let fixedTransactionPayload = Array(
    #"{"transactionId":"2000000000000001","originalTransactionId":"2000000000000001","bundleId":"com.example.fuzz","productId":"premium.monthly","purchaseDate":1735689600000,"originalPurchaseDate":1735689600000,"expiresDate":1738368000000,"quantity":1,"type":"Auto-Renewable Subscription","inAppOwnershipType":"PURCHASED","signedDate":1735689600000,"environment":"Sandbox","transactionReason":"PURCHASE","storefront":"USA","storefrontId":"143441","price":9990,"currency":"USD"}"#
      .utf8)

  /// The first byte picks the mode (`% 8`) and the verifier's environment (bit 3); the rest is:
  /// 0-2: a compact JWS, decoded as a transaction, renewal info, notification;
  /// 3-5: the payload JSON of a JWS signed by the fixed test identity, decoded likewise;
  /// 6: the header JSON of a JWS over a fixed valid transaction, signed by the test identity;
  /// 7: a payload signed by the test identity and checked against Apple's root only.
  static func signed(_ input: [UInt8]) -> String? {
    guard let first = input.first else { return nil }
    let rest = Array(input.dropFirst())
    let verifier = signedVerifiers[Int(first >> 3) & 1]
    let mode = Int(first % 8)
    switch mode {
    case 0...2:
      return signedDecode(String(decoding: rest, as: UTF8.self), kind: mode, verifier, ours: false)
    case 3...5:
      guard let jws = try? SignedDataFuzzSetup.identity.signedJWS(payload: rest) else {
        return "the test identity could not sign \(rest.count) bytes"
      }
      return signedDecode(jws, kind: mode - 3, verifier, ours: true)
    case 6:
      let signingInput = Base64URL.encode(rest) + "." + Base64URL.encode(fixedTransactionPayload)
      guard
        let signature = try? SignedDataFuzzSetup.identity.key.signature(
          for: Array(signingInput.utf8))
      else { return "the test identity could not sign" }
      return signedDecode(
        signingInput + "." + Base64URL.encode(signature), kind: 0, verifier, ours: false)
    default:
      guard let jws = try? SignedDataFuzzSetup.identity.signedJWS(payload: rest) else {
        return "the test identity could not sign \(rest.count) bytes"
      }
      do {
        let verified = try SignedDataVerifier.verifySignature(jws, trustedRoots: [.appleRootCAG3])
        return "a JWS signed by the test CA verified against Apple's root: \(verified.signedDate)"
      } catch {
        // An empty payload is an empty segment: malformed before the chain is looked at.
        guard error == .untrustedRoot || (rest.isEmpty && error == .malformed("the payload segment is empty"))
        else {
          return "a JWS signed by the test CA against Apple's root: \(error), not untrustedRoot"
        }
        return nil
      }
    }
  }

  /// Verifies and decodes `jws` twice (the second time through the chain cache) and checks that
  /// the verdicts are equal; an accepted JWS's payload re-signed by the test identity decodes to the
  /// same value (decoding depends on the payload only); with `ours`, the signature and chain of a
  /// JWS signed by the test identity are never what is refused.
  static func signedDecode(_ jws: String, kind: Int, _ verifier: SignedDataVerifier, ours: Bool)
    -> String?
  {
    func decode(_ jws: String) -> Result<String, SignedDataVerificationError> {
      do throws(SignedDataVerificationError) {
        switch kind {
        case 0: return .success("\(try verifier.verifyAndDecodeTransaction(jws))")
        case 1: return .success("\(try verifier.verifyAndDecodeRenewalInfo(jws))")
        default: return .success("\(try verifier.verifyAndDecodeNotification(jws))")
        }
      } catch {
        return .failure(error)
      }
    }
    let first = decode(jws)
    let second = decode(jws)
    guard first == second else {
      return "verifying the same JWS twice gave \(first) then \(second)"
    }
    let signature = Result { () throws(SignedDataVerificationError) in try verifier.verify(jws) }
    switch (first, signature) {
    case (.failure(let error), _):
      if ours {
        switch error {
        case .unsupportedAlgorithm, .invalidCertificateChain, .untrustedRoot,
          .missingAppleMarkerOID, .invalidSignature:
          return "a JWS signed by the test identity was refused for its signature: \(error)"
        default: break
        }
      }
      return nil
    case (.success, .failure(let error)):
      return "decoding accepted a JWS whose signature check fails: \(error)"
    case (.success(let decoded), .success(let verified)):
      guard let again = try? SignedDataFuzzSetup.identity.signedJWS(payload: verified.payloadBytes)
      else { return "the test identity could not re-sign an accepted payload" }
      let resigned = decode(again)
      guard resigned == first else {
        return "an accepted payload, re-signed, decodes differently: \(decoded) vs \(resigned)"
      }
      return nil
    }
  }
}

// MARK: V2 notifications (`FuzzTarget.notificationv2`)

extension FuzzTargets {
  /// The first byte picks (`% 4`) what the rest is: 0: the HTTP body itself; 1: the payload JSON of a
  /// `signedPayload` signed by the test identity; 2 and 3: the payload JSON of a
  /// `signedTransactionInfo` / `signedRenewalInfo` signed by the test identity, inside a signed
  /// sandbox DID_RENEW notification of the fuzz app. Every answer must be 200, 400, 401 or 404, and
  /// what the test identity signed is refused with 401 only for a `signedDate` outside its chain's
  /// validity (or, in mode 1, for nested signed data the fuzzer wrote).
  static func notificationV2(_ input: [UInt8]) -> String? {
    guard let first = input.first else { return nil }
    let rest = Array(input.dropFirst())
    let world = NotificationWorld.shared(.v2)
    let identity = SignedDataFuzzSetup.identity
    let body: [UInt8]
    switch first % 4 {
    case 0:
      return post(rest, to: world)
    case 1:
      guard let jws = try? identity.signedJWS(payload: rest) else { return "could not sign" }
      body = Array(#"{"signedPayload":"\#(jws)"}"#.utf8)
    default:
      guard let inner = try? identity.signedJWS(payload: rest) else { return "could not sign" }
      // A notificationUUID per input, so that a new input is not answered as a duplicate.
      var hash: UInt64 = 0xcbf2_9ce4_8422_2325
      for byte in input { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
      let field = first % 4 == 2 ? "signedTransactionInfo" : "signedRenewalInfo"
      let payload =
        #"{"notificationType":"DID_RENEW","notificationUUID":"fuzz-\#(hash)","version":"2.0","signedDate":1735689600000,"data":{"bundleId":"\#(SignedDataFuzzSetup.bundleId)","appAppleId":\#(SignedDataFuzzSetup.appAppleId),"environment":"Sandbox","\#(field)":"\#(inner)"}}"#
      guard let jws = try? identity.signedJWS(payload: Array(payload.utf8)) else {
        return "could not sign"
      }
      body = Array(#"{"signedPayload":"\#(jws)"}"#.utf8)
    }
    let request = HTTPRequest(
      method: "POST", path: "/v1/apps/\(world.appID)/apple/notifications", body: body)
    let response = blocking { await world.router.respond(to: request) }
    switch response.status {
    case 200, 400, 404: return nil
    case 401:
      let message = (try? JSONValue(parsing: response.body))?["error"]?["message"]?.stringValue
      if message == SignedDataVerificationError.certificateNotValidAtSignedDate.description {
        return nil
      }
      // In mode 1 the fuzzed payload may carry nested signed data of its own, which need not verify.
      if first % 4 == 1, let data = (try? JSONValue(parsing: rest))?["data"],
        data["signedTransactionInfo"] != nil || data["signedRenewalInfo"] != nil
      {
        return nil
      }
      return "a notification signed by the test identity answered 401: \(message ?? "")"
    default:
      return
        "notification answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self))"
    }
  }
}
