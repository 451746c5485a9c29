import AppStoreSignedData
import Foundation
import HTTPServer
import RPCCore
import SubscriptionStorageSQLite
import SubstatusJSON
import SubstatusWire
import Testing
@testable import SubstatusService

/// Test "Apple": a root the service trusts and a signing chain under it.
struct TestApple: Sendable {
  static let bundleID = "com.example.app"
  static let appleAppID: Int64 = 1_234_567_890
  static let t0: Int64 = 1_711_324_800_000  // TestWorld's clock
  static let day: Int64 = 86_400_000

  let ca: TestCertificateAuthority
  let identity: SigningIdentity

  init(options: TestCertificateAuthority.SigningIdentityOptions = .init()) throws {
    ca = try TestCertificateAuthority.make()
    identity = try ca.issueSigningIdentity(options: options)
  }

  /// Another identity under the same root.
  func identity(_ options: TestCertificateAuthority.SigningIdentityOptions) throws -> SigningIdentity {
    try ca.issueSigningIdentity(options: options)
  }

  static func transaction(
    id: String, original: String? = nil, product: String = "premium.monthly", environment: String = "Sandbox",
    bundleID: String = TestApple.bundleID, purchase: Int64 = t0 - day, expires: Int64 = t0 + 29 * day,
    revocation: Int64? = nil
  ) -> JSONValue {
    var o: JSONObject = [
      "transactionId": .string(id), "originalTransactionId": .string(original ?? id), "bundleId": .string(bundleID),
      "productId": .string(product), "subscriptionGroupIdentifier": .string("20001001"),
      "purchaseDate": .integer(purchase), "originalPurchaseDate": .integer(purchase), "expiresDate": .integer(expires),
      "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
      "signedDate": .integer(t0 - 1000), "environment": .string(environment), "transactionReason": .string("PURCHASE"),
    ]
    if let revocation {
      o.append("revocationDate", .integer(revocation))
      o.append("revocationReason", .integer(0))
    }
    return .object(o)
  }

  static func renewalInfo(original: String, environment: String = "Sandbox", autoRenew: Bool = true) -> JSONValue {
    .object([
      "originalTransactionId": .string(original), "productId": .string("premium.monthly"),
      "autoRenewProductId": .string("premium.monthly"), "autoRenewStatus": .integer(autoRenew ? 1 : 0),
      "signedDate": .integer(t0 - 1000), "environment": .string(environment), "renewalDate": .integer(t0 + 29 * day),
    ])
  }

  static func notification(
    _ type: String, subtype: String? = nil, uuid: String = UUID().uuidString.lowercased(), environment: String = "Sandbox",
    appAppleID: Int64 = appleAppID, bundleID: String = TestApple.bundleID, signedTransaction: String? = nil,
    signedRenewal: String? = nil, status: Int? = nil
  ) -> JSONValue {
    var data: JSONObject = [
      "appAppleId": .integer(appAppleID), "bundleId": .string(bundleID), "bundleVersion": .string("1"),
      "environment": .string(environment),
    ]
    if let signedTransaction { data.append("signedTransactionInfo", .string(signedTransaction)) }
    if let signedRenewal { data.append("signedRenewalInfo", .string(signedRenewal)) }
    if let status { data.append("status", .integer(status)) }
    var o: JSONObject = [
      "notificationType": .string(type), "notificationUUID": .string(uuid), "version": .string("2.0"),
      "signedDate": .integer(t0 - 500), "data": .object(data),
    ]
    if let subtype { o.append("subtype", .string(subtype)) }
    return .object(o)
  }

  func sign(_ payload: JSONValue) throws -> String { try identity.signedJWS(payload: payload) }
}

extension Harness {
  func submitSigned(_ app: String, _ user: String, key: String, transactions: [String], renewals: [String] = []) async throws
    -> Substatus_V1_SubmitSignedTransactionsResponse
  {
    var request = Substatus_V1_SubmitSignedTransactionsRequest()
    request.appID = app
    request.userID = user
    request.signedTransactions = transactions
    request.signedRenewalInfos = renewals
    return try await call(Substatus_V1_IngestService.submitSignedTransactions, request, key: key)
  }

  func status(_ app: String, _ user: String, key: String, environment: Substatus_V1_Environment = .sandbox) async throws
    -> Substatus_V1_GroupStatus?
  {
    var request = Substatus_V1_GetStatusRequest()
    request.appID = app
    request.userID = user
    request.environment = environment
    return try await call(Substatus_V1_StatusService.getStatus, request, key: key).groups.first { $0.subscriptionGroupID == "20001001" }
  }

  /// POSTs a V2 notification body to the HTTP endpoint; returns the status and the JSON answer.
  func notify(_ app: String, signedPayload: String) async -> (Int, JSONValue?) {
    let body = JSONValue.object(["signedPayload": .string(signedPayload)]).serializedBytes()
    let response = await service.httpRouter().respond(
      to: HTTPRequest(method: "POST", path: "/v1/apps/\(app)/apple/notifications", body: body))
    return (response.status, try? JSONValue(parsing: response.body))
  }
}

@Suite struct SubmitSignedTransactionsTests {
  @Test func validSignedDataIsStoredAndStatusReturned() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let t = try apple.sign(TestApple.transaction(id: "2000"))
      let r = try apple.sign(TestApple.renewalInfo(original: "2000", autoRenew: false))
      let first = try await h.submitSigned(app, "alice", key: admin, transactions: [t], renewals: [r])
      #expect(first.environment == .sandbox)
      #expect(first.transactionResults.map(\.transactionID) == ["2000"])
      #expect(first.transactionResults.map(\.outcome) == [.created])
      #expect(first.renewalInfoResults.map(\.originalTransactionID) == ["2000"])
      #expect(first.renewalInfoResults.map(\.outcome) == [.created])
      let group = try #require(first.groups.first { $0.subscriptionGroupID == "20001001" })
      #expect(group.state == .active)
      #expect(group.productID == "premium.monthly")
      #expect(!group.autoRenewEnabled)
      #expect(first.asOfMs == TestApple.t0)
      // Idempotent: the same data again changes nothing.
      let again = try await h.submitSigned(app, "alice", key: admin, transactions: [t], renewals: [r])
      #expect(again.transactionResults.map(\.outcome) == [.unchanged])
      #expect(again.renewalInfoResults.map(\.outcome) == [.unchanged])
      // Stored under the sandbox, as GetStatus shows.
      #expect(try await h.status(app, "alice", key: admin)?.state == .active)
      #expect(try await h.status(app, "alice", key: admin, environment: .production)?.state == .neverSubscribed)
    }
  }

  /// How each kind of bad signed data is refused: per item, the others stored.
  enum BadItem: String, CaseIterable, Sendable {
    case tamperedSignature, foreignAlgorithm, untrustedRoot, noWWDRMarker, noLeafMarker, leafExpiredAtSignedDate,
      intermediateNotCA, otherBundle, xcodeEnvironment, notAJWS, notATransaction
  }

  static let expectedReason: [BadItem: SignedDataRejection] = [
    .tamperedSignature: .invalidSignature, .foreignAlgorithm: .invalidSignature, .untrustedRoot: .untrustedChain,
    .noWWDRMarker: .untrustedChain, .noLeafMarker: .untrustedChain, .leafExpiredAtSignedDate: .untrustedChain,
    .intermediateNotCA: .untrustedChain, .otherBundle: .wrongApp, .xcodeEnvironment: .wrongEnvironment,
    .notAJWS: .malformed, .notATransaction: .malformed,
  ]

  static func make(_ bad: BadItem, _ apple: TestApple) throws -> String {
    let payload = TestApple.transaction(id: "bad-1")
    var options = TestCertificateAuthority.SigningIdentityOptions()
    switch bad {
    case .tamperedSignature:
      var parts = try apple.sign(payload).split(separator: ".").map(String.init)
      var signature = Array(parts[2])
      signature[10] = signature[10] == "A" ? "B" : "A"
      parts[2] = String(signature)
      return parts.joined(separator: ".")
    case .foreignAlgorithm:
      // A valid ES256 JWS whose header claims another algorithm.
      var header = apple.identity.header.objectValue ?? [:]
      header["alg"] = .string("ES384")
      let parts = try apple.sign(payload).split(separator: ".")
      return Base64URL.encode(JSONValue.object(header).serializedBytes()) + "." + parts[1] + "." + parts[2]
    case .untrustedRoot: return try TestApple().sign(payload)
    case .noWWDRMarker: options.intermediateHasWWDRMarker = false
    case .noLeafMarker: options.leafHasReceiptSigningMarker = false
    case .leafExpiredAtSignedDate: options.leafNotAfter = TestApple.t0 - 10 * TestApple.day
    case .intermediateNotCA: options.intermediateIsCA = false
    case .otherBundle: return try apple.sign(TestApple.transaction(id: "bad-1", bundleID: "com.other.app"))
    case .xcodeEnvironment: return try apple.sign(TestApple.transaction(id: "bad-1", environment: "Xcode"))
    case .notAJWS: return "eyJhbGciOiJFUzI1NiJ9.not-base64!.sig"
    case .notATransaction:
      return try apple.sign(.object(["transactionId": .string("bad-1"), "bundleId": .string(TestApple.bundleID), "environment": .string("Sandbox"), "signedDate": .integer(TestApple.t0)]))
    }
    return try apple.identity(options).signedJWS(payload: payload)
  }

  @Test(arguments: BadItem.allCases)
  func eachVerificationFailureHasItsReason(_ bad: BadItem) async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let good = try apple.sign(TestApple.transaction(id: "good-1"))
      let response = try await h.submitSigned(app, "bob", key: admin, transactions: [good, try Self.make(bad, apple)])
      #expect(response.transactionResults.map(\.outcome) == [.created, .rejected])
      let error = try #require(response.transactionResults[1].error)
      #expect(error.code == 3)
      #expect(error.field == "signed_transactions[1]")
      let reason = try #require(Self.expectedReason[bad])
      #expect(error.message.hasPrefix(reason.rawValue + ": "), "\(bad): \(error.message)")
      if bad != .notAJWS { #expect(response.transactionResults[1].transactionID == "bad-1") }
      // The good one is stored.
      #expect(response.groups.first { $0.subscriptionGroupID == "20001001" }?.state == .active)
      #expect(h.world.lines.withLock { $0.joined() }.contains("signed data rejected"))
    }
  }

  @Test func oneEnvironmentPerCall() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let bad = try apple.sign(TestApple.transaction(id: "x", environment: "Production", bundleID: "com.other.app"))
      let production = try apple.sign(TestApple.transaction(id: "p1", environment: "Production"))
      let sandbox = try apple.sign(TestApple.transaction(id: "s1"))
      let sandboxRenewal = try apple.sign(TestApple.renewalInfo(original: "s1"))
      // The first *valid* item (p1, production) fixes the environment; the sandbox ones are refused.
      let response = try await h.submitSigned(app, "carol", key: admin, transactions: [bad, production, sandbox], renewals: [sandboxRenewal])
      #expect(response.environment == .production)
      #expect(response.transactionResults.map(\.outcome) == [.rejected, .created, .rejected])
      #expect(response.transactionResults[0].error?.message.hasPrefix("WRONG_APP: ") == true)
      #expect(response.transactionResults[2].error?.message.hasPrefix("WRONG_ENVIRONMENT: ") == true)
      #expect(response.renewalInfoResults.map(\.outcome) == [.rejected])
      #expect(response.renewalInfoResults[0].error?.field == "signed_renewal_infos[0]")
      #expect(response.renewalInfoResults[0].error?.message.hasPrefix("WRONG_ENVIRONMENT: ") == true)
      #expect(try await h.status(app, "carol", key: admin, environment: .production)?.state == .active)
      #expect(try await h.status(app, "carol", key: admin, environment: .sandbox)?.state == .neverSubscribed)
    }
  }

  @Test func nothingValidAnswersUnspecifiedEnvironment() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let response = try await h.submitSigned(app, "dave", key: admin, transactions: ["a.b.c"], renewals: ["x"])
      #expect(response.environment == .unspecified)
      #expect(response.transactionResults.map(\.outcome) == [.rejected])
      #expect(response.renewalInfoResults.map(\.outcome) == [.rejected])
      #expect(response.groups.allSatisfy { $0.state == .neverSubscribed })
    }
  }

  @Test func appleRootIsTheDefault() async throws {
    // Without configured roots, data signed by any other root is refused.
    let apple = try TestApple()
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let response = try await h.submitSigned(app, "erin", key: admin, transactions: [try apple.sign(TestApple.transaction(id: "1"))])
      #expect(response.transactionResults.first?.error?.message.hasPrefix("UNTRUSTED_CHAIN: ") == true)
    }
  }

  @Test func callErrors() async throws {
    try await withService(limits: { var l = ServiceLimits(); l.maxImportItems = 3; return l }()) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      await expectStatus(.invalidArgument, "both empty") { _ = try await h.submitSigned(app, "u", key: admin, transactions: []) }
      await expectStatus(.invalidArgument, "no user") { _ = try await h.submitSigned(app, "", key: admin, transactions: ["a.b.c"]) }
      await expectStatus(.resourceExhausted, "too many") {
        _ = try await h.submitSigned(app, "u", key: admin, transactions: Array(repeating: "a.b.c", count: 4))
      }
      await expectStatus(.notFound, "unknown app") { _ = try await h.submitSigned("app_none", "u", key: admin, transactions: ["a.b.c"]) }
    }
  }
}

@Suite struct NotificationV2Tests {
  @Test func purchaseRefundAndDuplicates() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      // The user is known by a first signed transaction (the app sent it after the purchase).
      let first = try apple.sign(TestApple.transaction(id: "7000", purchase: TestApple.t0 - 40 * TestApple.day, expires: TestApple.t0 - 10 * TestApple.day))
      _ = try await h.submitSigned(app, "alice", key: admin, transactions: [first])
      #expect(try await h.status(app, "alice", key: admin)?.state == .expired)

      // DID_RENEW: verified, routed to alice by the original transaction id, applied.
      let renewal = try apple.sign(TestApple.transaction(id: "7001", original: "7000", purchase: TestApple.t0 - 10 * TestApple.day, expires: TestApple.t0 + 20 * TestApple.day))
      let renewalInfo = try apple.sign(TestApple.renewalInfo(original: "7000"))
      let uuid = UUID().uuidString.lowercased()
      let renewed = try apple.sign(TestApple.notification("DID_RENEW", uuid: uuid, signedTransaction: renewal, signedRenewal: renewalInfo, status: 1))
      let (status, body) = await h.notify(app, signedPayload: renewed)
      #expect(status == 200)
      #expect(body?["status"]?.stringValue == "applied")
      let active = try #require(try await h.status(app, "alice", key: admin))
      #expect(active.state == .active)
      #expect(active.autoRenewEnabled)
      #expect(active.expiresMs == TestApple.t0 + 20 * TestApple.day)

      // The same UUID again (Apple's retry): answered 200, applied once.
      let (again, againBody) = await h.notify(app, signedPayload: renewed)
      #expect(again == 200)
      #expect(againBody?["status"]?.stringValue == "duplicate")
      // Another UUID with a refund of the renewal: REVOKED.
      let refunded = try apple.sign(TestApple.transaction(
        id: "7001", original: "7000", purchase: TestApple.t0 - 10 * TestApple.day, expires: TestApple.t0 + 20 * TestApple.day,
        revocation: TestApple.t0 - 1000))
      let refund = try apple.sign(TestApple.notification("REFUND", signedTransaction: refunded, status: 5))
      #expect(await h.notify(app, signedPayload: refund).0 == 200)
      #expect(try await h.status(app, "alice", key: admin)?.state == .revoked)
      // A stale duplicate of the renewal does not undo the refund.
      #expect(await h.notify(app, signedPayload: renewed).1?["status"]?.stringValue == "duplicate")
      #expect(try await h.status(app, "alice", key: admin)?.state == .revoked)

      let metrics = h.service.metrics.prometheusText()
      #expect(metrics.contains("outcome=\"applied\"} 2"), "\(metrics)")
      #expect(metrics.contains("outcome=\"duplicate\"} 2"), "\(metrics)")
      let log = h.world.lines.withLock { $0.joined(separator: "\n") }
      #expect(log.contains("\"type\":\"DID_RENEW\""))
      #expect(!log.contains(String(renewed.prefix(60))), "the log holds no payload")
    }
  }

  @Test func unknownOriginalTransactionGoesToThePseudoUser() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      let t = try apple.sign(TestApple.transaction(id: "8000", environment: "Production"))
      let n = try apple.sign(TestApple.notification("SUBSCRIBED", subtype: "INITIAL_BUY", environment: "Production", signedTransaction: t))
      #expect(await h.notify(app, signedPayload: n).0 == 200)
      #expect(try await h.status(app, "apple:8000", key: admin, environment: .production)?.state == .active)
    }
  }

  @Test func testAndSummaryNotificationsAreRecordedAndAnswered() async throws {
    let apple = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (_, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      let test = try apple.sign(TestApple.notification("TEST"))
      #expect(await h.notify(app, signedPayload: test).1?["status"]?.stringValue == "applied")
      #expect(await h.notify(app, signedPayload: test).1?["status"]?.stringValue == "duplicate")
      let summary = try apple.sign(.object([
        "notificationType": .string("RENEWAL_EXTENSION"), "subtype": .string("SUMMARY"),
        "notificationUUID": .string(UUID().uuidString), "version": .string("2.0"), "signedDate": .integer(TestApple.t0),
        "summary": .object([
          "requestIdentifier": .string("r1"), "environment": .string("Sandbox"), "appAppleId": .integer(TestApple.appleAppID),
          "bundleId": .string(TestApple.bundleID), "productId": .string("premium.monthly"), "succeededCount": .integer(3),
          "failedCount": .integer(0),
        ]),
      ]))
      let (status, body) = await h.notify(app, signedPayload: summary)
      #expect(status == 200, "\(String(describing: body))")
      #expect(body?["status"]?.stringValue == "applied")
    }
  }

  /// Verification failures are permanent: a 4xx whose JSON body names the reason; nothing stored.
  @Test func refusedNotifications() async throws {
    let apple = try TestApple()
    let stranger = try TestApple()
    try await withService(appleRootCertificates: [apple.ca.root]) { h in
      let (admin, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      let (_, noAppleID) = try await h.makeTenantWithApp(name: "other", bundleID: TestApple.bundleID)
      let t = try apple.sign(TestApple.transaction(id: "9000", environment: "Production"))
      let cases: [(String, String, String, Int, SignedDataRejection)] = [
        ("untrusted root", app, try stranger.sign(TestApple.notification("SUBSCRIBED", environment: "Production", signedTransaction: t)), 401, .untrustedChain),
        ("appAppleId mismatch", app, try apple.sign(TestApple.notification("SUBSCRIBED", environment: "Production", appAppleID: 42, signedTransaction: t)), 400, .wrongApp),
        ("app without apple_app_id", noAppleID, try apple.sign(TestApple.notification("SUBSCRIBED", environment: "Production", signedTransaction: t)), 400, .wrongApp),
        ("other bundle", app, try apple.sign(TestApple.notification("TEST", bundleID: "com.other.app")), 400, .wrongApp),
        ("nested transaction untrusted", app, try apple.sign(TestApple.notification("SUBSCRIBED", environment: "Production", signedTransaction: try stranger.sign(TestApple.transaction(id: "9000", environment: "Production")))), 401, .untrustedChain),
        ("nested transaction of the other environment", app, try apple.sign(TestApple.notification("SUBSCRIBED", signedTransaction: t)), 400, .wrongEnvironment),
        ("not a JWS", app, "x.y.z", 400, .malformed),
      ]
      for (what, target, payload, expectedStatus, reason) in cases {
        let (status, body) = await h.notify(target, signedPayload: payload)
        #expect(status == expectedStatus, "\(what)")
        #expect(body?["error"]?["reason"]?.stringValue == reason.rawValue, "\(what): \(String(describing: body))")
      }
      #expect(try await h.status(app, "apple:9000", key: admin, environment: .production)?.state == .neverSubscribed)
      // Not signed at all / not a string.
      let response = await h.service.httpRouter().respond(
        to: HTTPRequest(method: "POST", path: "/v1/apps/\(app)/apple/notifications", body: Array(#"{"signedPayload": 7}"#.utf8)))
      #expect(response.status == 400)
      #expect(await h.notify("app_none", signedPayload: "x.y.z").0 == 404)
      #expect(h.service.metrics.prometheusText().contains("outcome=\"untrusted_chain\"} 2"))
    }
  }

  /// A store that cannot answer: 503, so that Apple retries; nothing is recorded as seen.
  @Test func storeUnavailableAnswers503() async throws {
    let apple = try TestApple()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("v2-503-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = try SQLiteStore(configuration: .dataDirectory(directory.path, keyring: nil))
    try await withService(appleRootCertificates: [apple.ca.root], store: store) { h in
      let (_, app) = try await h.makeTenantWithApp(appleAppID: TestApple.appleAppID)
      store.close()
      let t = try apple.sign(TestApple.transaction(id: "6000"))
      let (status, body) = await h.notify(app, signedPayload: try apple.sign(TestApple.notification("SUBSCRIBED", signedTransaction: t)))
      #expect(status == 503, "\(String(describing: body))")
      #expect(h.service.metrics.prometheusText().contains("outcome=\"store_error\"} 1"))
    }
  }
}
