import AppStoreSignedData
import Foundation
import SubstatusJSON
import Testing

/// Issue 17's stories for docs/architecture.md rules 13 and 14, told through the `substatus` CLI
/// against a real substatusd (SQLite file, real gRPC) that trusts a test root given with
/// `--apple-root-ca`.
@Suite(.serialized) struct MergeStoriesEndToEndTests {
  /// The daemon, its CLI, and an app with one monthly subscription in group "pro".
  struct Setup {
    let daemon: RunningDaemon
    let directory: URL
    let identity: SigningIdentity
    let admin: String
    let appID: String
    static let bundleID = "com.example.merge"

    /// Runs `substatus WORDS... --addr … --key … --json` and decodes what it printed.
    func cli(_ words: [String]) async throws -> JSONValue {
      let (status, out, err) = try await run(
        try builtExecutable("substatus"), words + ["--addr", daemon.grpc, "--key", admin, "--json"])
      try #require(status == 0, "substatus \(words.joined(separator: " ")) failed: \(err)")
      return try JSONValue(parsing: Array(out.utf8))
    }

    /// Writes `body` to a file of the test directory and returns its path.
    func file(_ name: String, _ body: JSONValue) throws -> String {
      let path = directory.appendingPathComponent(name).path
      try Data(body.serializedBytes()).write(to: URL(fileURLWithPath: path))
      return path
    }

    /// The "pro" group's state and the entitled products of `user`, as `substatus status` prints them.
    func status(_ user: String, asOf: Int64? = nil) async throws -> (String?, [String]) {
      let answer = try await cli(["status", appID, user] + (asOf.map { ["--as-of", String($0)] } ?? []))
      let group = answer["groups"]?.arrayValue?.first { $0["subscriptionGroupId"]?.stringValue == "pro" }
      let entitled = answer["entitlements"]?.arrayValue?.compactMap { $0["productId"]?.stringValue } ?? []
      return (group?["state"]?.stringValue, entitled)
    }
  }

  private func withSetup(_ body: (Setup) async throws -> Void) async throws {
    let ca = try TestCertificateAuthority.make()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("merge-e2e-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let roots = directory.appendingPathComponent("roots.pem").path
    try ca.root.pem.write(toFile: roots, atomically: true, encoding: .utf8)
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", roots])
    let client = try DaemonClient(daemon)
    let (admin, appID) = try await client.makeApp(
      operatorKey: daemon.operatorKey, bundleID: Setup.bundleID, appleAppID: 123_456_789)
    client.transport.close()
    let setup = Setup(
      daemon: daemon, directory: directory, identity: try ca.issueSigningIdentity(), admin: admin, appID: appID)
    do {
      try await body(setup)
    } catch {
      _ = await daemon.stop()
      throw error
    }
    let (exitStatus, _) = await daemon.stop()
    #expect(exitStatus == 0)
  }

  /// A verifyReceipt response body (status 0) with one auto-renewable transaction of "pro.monthly".
  private func receiptBody(
    transactionId: String, originalTransactionId: String, purchase: Int64, expires: Int64, requestDate: Int64,
    cancellation: Int64? = nil, pendingRenewal: [JSONValue]
  ) -> JSONValue {
    var element: JSONObject = [
      "quantity": .string("1"), "product_id": .string("pro.monthly"), "transaction_id": .string(transactionId),
      "original_transaction_id": .string(originalTransactionId), "purchase_date_ms": .string(String(purchase)),
      "original_purchase_date_ms": .string(String(purchase)), "expires_date_ms": .string(String(expires)),
      "is_trial_period": .string("false"), "in_app_ownership_type": .string("PURCHASED"),
      "subscription_group_identifier": .string("pro"),
    ]
    if let cancellation {
      element.append("cancellation_date_ms", .string(String(cancellation)))
      element.append("cancellation_reason", .string("0"))
    }
    return .object([
      "status": .integer(0), "environment": .string("Production"),
      "receipt": .object([
        "bundle_id": .string(Setup.bundleID), "request_date_ms": .string(String(requestDate)),
        "in_app": .array([.object(element)]),
      ]),
      "latest_receipt_info": .array([.object(element)]),
      "pending_renewal_info": .array(pendingRenewal),
    ])
  }

  @Test("refund lost: a StoreKit 2 transaction, then a newer verifyReceipt body with cancellation_date, in both orders")
  func refundAcrossSources() async throws {
    try await withSetup { setup in
      let now = Int64(Date().timeIntervalSince1970 * 1000)
      let (hour, day): (Int64, Int64) = (3_600_000, 86_400_000)
      // The StoreKit 2 copy, signed two hours ago: active, not revoked.
      let signed = try setup.identity.signedJWS(
        payload: .object([
          "transactionId": .string("7001"), "originalTransactionId": .string("7001"),
          "bundleId": .string(Setup.bundleID), "productId": .string("pro.monthly"),
          "subscriptionGroupIdentifier": .string("pro"), "purchaseDate": .integer(now - day),
          "originalPurchaseDate": .integer(now - day), "expiresDate": .integer(now + 29 * day),
          "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
          "signedDate": .integer(now - 2 * hour), "environment": .string("Production"),
        ]))
      let signedFile = try setup.file("signed.json", .object(["signedTransactions": .array([.string(signed)])]))
      // The verifyReceipt body Apple answered an hour ago: the same transaction, refunded.
      let refunded = try setup.file(
        "refunded.json",
        receiptBody(
          transactionId: "7001", originalTransactionId: "7001", purchase: now - day, expires: now + 29 * day,
          requestDate: now - hour, cancellation: now - 90 * 60_000, pendingRenewal: []))
      // StoreKit 2 first, then the receipt.
      let submitted = try await setup.cli(["signed", "submit", setup.appID, "ann", "--file", signedFile])
      #expect(submitted["groups"]?.arrayValue?.first?["state"]?.stringValue == "SUBSCRIPTION_STATE_ACTIVE")
      _ = try await setup.cli(["receipt", "import", setup.appID, "ann", "--file", refunded])
      let (annState, annEntitled) = try await setup.status("ann")
      #expect(annState == "SUBSCRIPTION_STATE_REVOKED")
      #expect(annEntitled.isEmpty)
      // The receipt first, then StoreKit 2: the same answer.
      _ = try await setup.cli(["receipt", "import", setup.appID, "bob", "--file", refunded])
      _ = try await setup.cli(["signed", "submit", setup.appID, "bob", "--file", signedFile])
      let (bobState, bobEntitled) = try await setup.status("bob")
      #expect(bobState == "SUBSCRIPTION_STATE_REVOKED")
      #expect(bobEntitled.isEmpty)
      // Both histories hold the same copy of the transaction.
      let annHistory = try await setup.cli(["history", setup.appID, "ann"])
      let bobHistory = try await setup.cli(["history", setup.appID, "bob"])
      #expect(annHistory["transactions"] == bobHistory["transactions"])
      #expect(annHistory["transactions"]?.arrayValue?.first?["revocationDateMs"] != nil)
    }
  }

  @Test(
    "field by field: a StoreKit 2 refund with its price, revocation type and app account token, then a newer verifyReceipt body without them, in both orders"
  )
  func fieldsKeptAcrossSources() async throws {
    try await withSetup { setup in
      let now = Int64(Date().timeIntervalSince1970 * 1000)
      let (hour, day): (Int64, Int64) = (3_600_000, 86_400_000)
      let token = "5b0d6f2e-7a1c-4e3b-9d2a-8c4f1e6b3a70"
      // The StoreKit 2 copy of the refund, signed two hours ago: Apple's price, type and token.
      let signed = try setup.identity.signedJWS(
        payload: .object([
          "transactionId": .string("7101"), "originalTransactionId": .string("7101"),
          "bundleId": .string(Setup.bundleID), "productId": .string("pro.monthly"),
          "subscriptionGroupIdentifier": .string("pro"), "purchaseDate": .integer(now - day),
          "originalPurchaseDate": .integer(now - day), "expiresDate": .integer(now + 29 * day),
          "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
          "revocationDate": .integer(now - 3 * hour), "revocationReason": .integer(0),
          "revocationType": .string("REFUND_PRORATED"), "appAccountToken": .string(token),
          "price": .integer(9_990), "currency": .string("EUR"),
          "signedDate": .integer(now - 2 * hour), "environment": .string("Production"),
        ]))
      let signedFile = try setup.file("signed-fields.json", .object(["signedTransactions": .array([.string(signed)])]))
      // The verifyReceipt body Apple answered an hour ago: the same refund, none of the three.
      let receipt = try setup.file(
        "receipt-fields.json",
        receiptBody(
          transactionId: "7101", originalTransactionId: "7101", purchase: now - day, expires: now + 29 * day,
          requestDate: now - hour, cancellation: now - 3 * hour, pendingRenewal: []))
      for (user, files) in [("ann", [signedFile, receipt]), ("bob", [receipt, signedFile])] {
        for file in files {
          let kind = file == receipt ? ["receipt", "import"] : ["signed", "submit"]
          _ = try await setup.cli(kind + [setup.appID, user, "--file", file])
        }
        let history = try await setup.cli(["history", setup.appID, user])
        let t = try #require(history["transactions"]?.arrayValue?.first, "\(user): \(history)")
        #expect(t["priceMilliunits"]?.stringValue == "9990" || t["priceMilliunits"]?.int64Value == 9_990, "\(user): \(t)")
        #expect(t["currency"]?.stringValue == "EUR", "\(user): \(t)")
        #expect(t["revocationType"]?.stringValue == "REVOCATION_TYPE_REFUND_PRORATED", "\(user): \(t)")
        #expect(t["appAccountToken"]?.stringValue == token, "\(user): \(t)")
        // The receipt's copy is the one kept (newer on Apple's clock): it has no signed date.
        #expect(t["signedDateMs"] == nil, "\(user): \(t)")
      }
    }
  }

  @Test("cancelled during grace: a later import of the same receipt without pending_renewal_info ends the grace")
  func cancelledDuringGrace() async throws {
    try await withSetup { setup in
      let day: Int64 = 86_400_000
      let may13: Int64 = 1_715_558_400_000  // 2024-05-13, when the period ended
      let may29 = may13 + 16 * day  // the billing grace period's end
      let may20 = may13 + 7 * day  // when the user is asked about
      let inGrace: JSONValue = .object([
        "original_transaction_id": .string("8001"), "product_id": .string("pro.monthly"),
        "auto_renew_product_id": .string("pro.monthly"), "auto_renew_status": .string("1"),
        "is_in_billing_retry_period": .string("1"), "grace_period_expires_date_ms": .string(String(may29)),
        "expiration_intent": .string("2"),
      ])
      let first = try setup.file(
        "grace.json",
        receiptBody(
          transactionId: "8002", originalTransactionId: "8001", purchase: may13 - 30 * day, expires: may13,
          requestDate: may13 + day, pendingRenewal: [inGrace]))
      _ = try await setup.cli(["receipt", "import", setup.appID, "cat", "--file", first])
      let (graceState, graceEntitled) = try await setup.status("cat", asOf: may20)
      #expect(graceState == "SUBSCRIPTION_STATE_GRACE_PERIOD")
      #expect(graceEntitled == ["pro.monthly"])
      // The customer cancels during grace: Apple's next answer has no pending_renewal_info.
      let cancelled = try setup.file(
        "cancelled.json",
        receiptBody(
          transactionId: "8002", originalTransactionId: "8001", purchase: may13 - 30 * day, expires: may13,
          requestDate: may13 + 3 * day, pendingRenewal: []))
      _ = try await setup.cli(["receipt", "import", setup.appID, "cat", "--file", cancelled])
      let (state, entitled) = try await setup.status("cat", asOf: may20)
      #expect(state == "SUBSCRIPTION_STATE_EXPIRED")
      #expect(entitled.isEmpty)
      // The older body imported again does not bring the grace period back.
      _ = try await setup.cli(["receipt", "import", setup.appID, "cat", "--file", first])
      #expect(try await setup.status("cat", asOf: may20).0 == "SUBSCRIPTION_STATE_EXPIRED")
    }
  }
}
