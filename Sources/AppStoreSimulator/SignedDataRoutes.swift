import AppStoreSignedData
import Foundation
import HTTPServer
import SubstatusJSON

extension AppStoreSimulator {
  /// Control routes for signed data: the root CA, In-App Purchase keys, a user's signed
  /// transactions, notification drops and Server API faults.
  func addSignedDataControlRoutes(_ router: inout HTTPRouter) {
    router.add("GET", "/control/root-ca.pem") { [self] _ in
      HTTPResponse(
        status: 200, headers: ["Content-Type": "application/x-pem-file"],
        body: Array(rootCertificatePEM.utf8))
    }

    router.add("POST", "/control/apps/{bundle_id}/api-keys") { [self] request in
      let bundleID = request.pathParameters["bundle_id"]!
      let body = try JSONBody(request)
      let key = InAppPurchaseKey(
        issuerID: try body.string("issuer_id"), keyID: try body.string("key_id"),
        publicKeyPEM: try body.string("public_key_pem"))
      do {
        _ = try ES256PublicKey(pem: key.publicKeyPEM)
      } catch {
        throw HTTPError.badRequest("field 'public_key_pem' is not a P-256 public key PEM: \(error)")
      }
      try state.withLock { state throws(HTTPError) in
        guard var app = state.apps[bundleID] else {
          throw .notFound("app '\(bundleID)' is not registered")
        }
        var keys = app.apiKeys ?? []
        keys.removeAll { $0.keyID == key.keyID }
        keys.append(key)
        app.apiKeys = keys
        state.apps[bundleID] = app
      }
      return jsonResponse(
        .object([
          "bundle_id": .string(bundleID), "issuer_id": .string(key.issuerID),
          "key_id": .string(key.keyID),
        ]),
        status: 201)
    }
    router.add("GET", "/control/apps/{bundle_id}/api-keys") { [self] request in
      let bundleID = request.pathParameters["bundle_id"]!
      guard let app = state.withLock({ $0.apps[bundleID] }) else {
        throw HTTPError.notFound("app '\(bundleID)' is not registered")
      }
      return jsonResponse(
        .object([
          "api_keys": .array(
            (app.apiKeys ?? []).map {
              .object(["issuer_id": .string($0.issuerID), "key_id": .string($0.keyID)])
            })
        ]))
    }
    router.add("DELETE", "/control/apps/{bundle_id}/api-keys/{key_id}") { [self] request in
      let bundleID = request.pathParameters["bundle_id"]!
      let keyID = request.pathParameters["key_id"]!
      try state.withLock { state throws(HTTPError) in
        guard var app = state.apps[bundleID] else {
          throw .notFound("app '\(bundleID)' is not registered")
        }
        guard app.apiKeys?.contains(where: { $0.keyID == keyID }) == true else {
          throw .notFound("app '\(bundleID)' has no key '\(keyID)'")
        }
        app.apiKeys?.removeAll { $0.keyID == keyID }
        state.apps[bundleID] = app
      }
      return jsonResponse(.object(["deleted": .string(keyID)]))
    }

    // What StoreKit 2 hands the app: every transaction (`Transaction.all`) and the renewal info
    // of each subscription, signed; plus the decoded payloads for reading in tests.
    router.add("GET", "/control/apps/{bundle_id}/users/{user_id}/signed-transactions") {
      [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      _ = try? mutate { _ throws(SimError) in }
      return try state.withLock { state throws(HTTPError) -> HTTPResponse in
        guard let app = state.apps[bundleID] else {
          throw .notFound("app '\(bundleID)' is not registered")
        }
        guard let user = state.users[userID], !user.deleted else {
          throw .notFound("user '\(userID)' does not exist")
        }
        let now = state.now
        let mode = app.signing ?? .valid
        let transactions = state.receiptTransactions(bundleID, userID).sorted { $0.seq < $1.seq }
          .map { state.transactionPayload($0, signedDate: now) }
        let renewals = state.subscriptions.values
          .filter { $0.bundleID == bundleID && $0.userID == userID }
          .sorted { $0.originalTransactionID < $1.originalTransactionID }
          .map { state.renewalInfoPayload($0, signedDate: now) }
        var object = JSONObject()
        object.append("environment", .string(user.environment.receiptValue))
        object.append(
          "app_transaction_id",
          state.appTransactionID(bundleID, userID).map { .string($0) } ?? .null)
        object.append(
          "signed_transactions", .array(transactions.map { .string(signing.sign($0, mode: mode)) }))
        object.append(
          "signed_renewal_info", .array(renewals.map { .string(signing.sign($0, mode: mode)) }))
        object.append("transactions", .array(transactions))
        object.append("renewal_info", .array(renewals))
        return jsonResponse(.object(object))
      }
    }

    router.add("GET", "/control/notifications/drop") { [self] _ in
      jsonResponse(.object(["drop": .array(dropRules.withLock { $0.map(\.json) })]))
    }
    router.add("DELETE", "/control/notifications/drop") { [self] _ in
      dropRules.withLock { $0.removeAll() }
      return jsonResponse(.object(["drop": .array([])]))
    }
    router.add("POST", "/control/notifications/drop") { [self] request in
      let body = try JSONBody(request)
      let count = try body.optionalInt("count").map(Int.init)
      if let count, count < 1 { throw HTTPError.badRequest("field 'count' must be >= 1") }
      let rule = DropRule(
        bundleID: try body.optionalString("bundle_id"), userID: try body.optionalString("user_id"),
        notificationType: try body.optionalString("notification_type"), remaining: count)
      dropRules.withLock { $0.append(rule) }
      return jsonResponse(rule.json, status: 201)
    }

    router.add("GET", "/control/server-api/faults") { [self] _ in
      jsonResponse(.object(["faults": .array(serverAPIFaults.withLock { $0.map(\.json) })]))
    }
    router.add("DELETE", "/control/server-api/faults") { [self] _ in
      serverAPIFaults.withLock { $0.removeAll() }
      return jsonResponse(.object(["faults": .array([])]))
    }
    router.add("POST", "/control/server-api/faults") { [self] request in
      let body = try JSONBody(request)
      var environment: StoreEnvironment?
      if let text = try body.optionalString("environment") {
        guard let parsed = StoreEnvironment(rawValue: text.lowercased()) else {
          throw HTTPError.badRequest("field 'environment' must be 'production' or 'sandbox'")
        }
        environment = parsed
      }
      let httpStatus = try body.optionalInt("http_status").map(Int.init)
      if let httpStatus, !(400...599).contains(httpStatus) {
        throw HTTPError.badRequest("field 'http_status' must be 400...599")
      }
      let latency = Int(try body.optionalInt("latency_ms") ?? 0)
      guard (0...60_000).contains(latency) else {
        throw HTTPError.badRequest("field 'latency_ms' must be 0...60000")
      }
      guard httpStatus != nil || latency > 0 else {
        throw HTTPError.badRequest("a fault needs 'http_status' or 'latency_ms'")
      }
      let count = try body.optionalInt("count").map(Int.init)
      if let count, count < 1 { throw HTTPError.badRequest("field 'count' must be >= 1") }
      let rule = ServerAPIFault(
        environment: environment, latencyMs: latency, httpStatus: httpStatus,
        errorCode: try body.optionalInt("error_code"), remaining: count)
      serverAPIFaults.withLock { $0.append(rule) }
      return jsonResponse(rule.json, status: 201)
    }
  }
}
