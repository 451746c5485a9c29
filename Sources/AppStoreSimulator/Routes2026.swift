import Foundation
import HTTPServer
import SubstatusJSON

extension AppStoreSimulator {
  /// Control routes for what the App Store added in 2025-2026: the app download
  /// (`AppTransaction`), assigned access, `RESCIND_CONSENT`, External Purchase tokens, any other
  /// V2 notification type, consumption answers and the Server API rate limiter.
  func addControlRoutes2026(_ router: inout HTTPRouter) {
    let prefix = "/control/apps/{bundle_id}/users/{user_id}"

    // The customer downloads (or updates) the app; answers the signed AppTransaction the device
    // would hand the app (`AppTransaction.shared`).
    router.add("POST", prefix + "/app-download") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let version = try body.optionalString("version")
      let originalVersion = try body.optionalString("original_version")
      let original = try body.optionalInt("original_purchase_ms")
      let preorder = try body.optionalInt("preorder_ms")
      do throws(SimError) {
        let (result, _) = try mutate { state throws(SimError) -> JSONValue in
          _ = try state.downloadApp(
            bundleID: bundleID, userID: userID, version: version, originalVersion: originalVersion,
            originalPurchaseMs: original, preorderMs: preorder)
          return try appTransactionJSON(state, bundleID: bundleID, userID: userID)
        }
        return jsonResponse(result, status: 201)
      } catch { throw error.http }
    }
    router.add("GET", prefix + "/app-transaction") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      do throws(SimError) {
        let (result, _) = try mutate { state throws(SimError) -> JSONValue in
          _ = try state.app(bundleID)
          _ = try state.user(userID)
          return try appTransactionJSON(state, bundleID: bundleID, userID: userID)
        }
        return jsonResponse(result)
      } catch { throw error.http }
    }

    router.add("POST", prefix + "/assign") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let productID = try JSONBody(request).string("product_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.assign(bundleID: bundleID, userID: userID, productID: productID)
      }
    }
    router.add("POST", prefix + "/unassign") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let groupID = try JSONBody(request).string("group_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.unassign(bundleID: bundleID, userID: userID, groupID: groupID)
      }
    }
    router.add("POST", prefix + "/commitment-renewal-plan") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let groupID = try body.string("group_id")
      let plan = try body.string("billing_plan")
      guard plan == "MONTHLY" || plan == "BILLED_UPFRONT" else {
        throw HTTPError.badRequest("field 'billing_plan' must be MONTHLY or BILLED_UPFRONT")
      }
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.setCommitmentRenewalPlan(bundleID: bundleID, userID: userID, groupID: groupID, plan: plan)
        return []
      }
    }
    router.add("POST", prefix + "/rescind-consent") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        try state.rescindConsent(bundleID: bundleID, userID: userID)
        return []
      }
    }
    // Extend a Subscription Renewal Date, as the App Store Server API's (which needs the app's
    // In-App Purchase key): the customer's subscription of `group_id` ends `days` (1...90) later
    // and Apple sends RENEWAL_EXTENDED
    // (https://developer.apple.com/documentation/appstoreserverapi/extend-a-subscription-renewal-date).
    router.add("POST", prefix + "/extend-renewal") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let groupID = try body.string("group_id")
      guard let days = try body.optionalInt("days"), (1...90).contains(days) else {
        throw HTTPError.badRequest("field 'days' must be 1...90 (extendByDays)")
      }
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        let id = try state.requireOwnSubscription(bundleID, userID, group: groupID).originalTransactionID
        do throws(ServerAPIError) {
          return [try state.extendRenewal(originalTransactionID: id, days: Int(days)).transactionID]
        } catch {
          throw SimError(status: error.httpStatus, message: error.errorMessage)
        }
      }
    }
    // Any V2 notification type about the customer's transaction (the newest of `group_id`, or
    // `transaction_id`): for the types whose state the simulator does not model (the Advanced
    // Commerce API's METADATA_UPDATE, MIGRATION, PRICE_CHANGE; RENEWAL_EXTENSION/FAILURE).
    router.add("POST", prefix + "/notify") { [self] request in
      let (bundleID, userID) = (
        request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!
      )
      let body = try JSONBody(request)
      let type = try body.string("notification_type")
      guard type.utf8.count <= 64, type.allSatisfy({ $0.isASCII && ($0.isUppercase || $0 == "_") }) else {
        throw HTTPError.badRequest("field 'notification_type' must be an upper-case type like MIGRATION")
      }
      let subtype = try body.optionalString("subtype")
      let transactionID = try body.optionalString("transaction_id")
      let groupID = try body.optionalString("group_id")
      return try operation(bundleID: bundleID, userID: userID) { state throws(SimError) in
        _ = try state.app(bundleID)
        let user = try state.user(userID)
        let id: String
        if let transactionID {
          id = transactionID
        } else if let groupID {
          id = try state.requireOwnSubscription(bundleID, userID, group: groupID).latestTransactionID
        } else {
          throw .badRequest("a notification needs 'transaction_id' or 'group_id'")
        }
        guard let transaction = state.transactions[id], transaction.bundleID == bundleID,
          transaction.userID == userID
        else { throw .notFound("transaction '\(id)' is not in the receipt of '\(userID)'") }
        state.pendingEvents.append(
          NotificationEvent(
            kind: .custom(type: type, subtype: subtype), bundleID: bundleID, userID: userID,
            environment: user.environment,
            originalTransactionID: state.subscriptions[transaction.originalTransactionID] != nil
              ? transaction.originalTransactionID : nil,
            atMs: state.now, transactionID: id))
        return []
      }
    }

    router.add("POST", "/control/apps/{bundle_id}/external-purchase-tokens") { [self] request in
      let bundleID = request.pathParameters["bundle_id"]!
      let body = try JSONBody(request)
      let subtype = try body.optionalString("subtype") ?? "CREATED"
      guard ["UNREPORTED", "CREATED", "ACTIVE_TOKEN_REMINDER"].contains(subtype) else {
        throw HTTPError.badRequest("field 'subtype' must be UNREPORTED, CREATED or ACTIVE_TOKEN_REMINDER")
      }
      let environment: StoreEnvironment
      switch try body.optionalString("environment") ?? "production" {
      case "production": environment = .production
      case "sandbox": environment = .sandbox
      default: throw HTTPError.badRequest("field 'environment' must be 'production' or 'sandbox'")
      }
      let given = try body.optionalString("external_purchase_id")
      do throws(SimError) {
        let (id, _) = try mutate { state throws(SimError) in
          try state.externalPurchaseToken(
            bundleID: bundleID, environment: environment, subtype: subtype, externalPurchaseID: given)
        }
        return jsonResponse(.object(["external_purchase_id": .string(id)]), status: 201)
      } catch { throw error.http }
    }

    router.add("GET", "/control/consumption-answers") { [self] request in
      let bundleID = request.query("bundle_id")
      let answers = consumptionAnswers.withLock { $0 }.filter { bundleID == nil || $0.bundleID == bundleID }
      return jsonResponse(.object(["answers": .array(answers.map(\.json))]))
    }

    router.add("GET", "/control/server-api/rate-limit") { [self] _ in
      let limiter = rateLimiter.withLock { $0 }
      var object = JSONObject()
      for environment in [StoreEnvironment.production, .sandbox] {
        object.append(
          environment.rawValue,
          .object([
            "admitted": .integer(Int64(limiter.admitted[environment] ?? 0)),
            "limited": .integer(Int64(limiter.limited[environment] ?? 0)),
          ]))
      }
      return jsonResponse(.object(object))
    }
    router.add("DELETE", "/control/server-api/rate-limit") { [self] _ in
      rateLimiter.withLock { $0.reset() }
      return jsonResponse(.object(["reset": .bool(true)]))
    }
  }

  private func appTransactionJSON(_ state: SimulatorState, bundleID: String, userID: String)
    throws(SimError) -> JSONValue
  {
    guard let app = state.apps[bundleID],
      let payload = state.appTransactionPayload(bundleID: bundleID, userID: userID, signedDate: state.now)
    else { throw .notFound("user '\(userID)' has not downloaded '\(bundleID)'") }
    return .object([
      "app_transaction_id": payload["appTransactionId"] ?? .null,
      "signed_app_transaction": .string(signing.sign(payload, mode: app.signing ?? .valid)),
      "app_transaction": payload,
    ])
  }
}
