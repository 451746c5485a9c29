import Foundation
import HTTPServer
import SubstatusJSON

extension AppStoreSimulator {
  /// Control routes of the Retention Messaging API's App Store side: one realtime request for a
  /// subscriber (recorded with Apple's verdict), the requests sent, and Apple's performance test.
  func addRetentionRoutes(_ router: inout HTTPRouter) {
    // The subscriber opens the cancel page of their subscription (of `group_id`, or
    // `original_transaction_id`): the App Store asks the app's Get Retention Message endpoint.
    router.add("POST", "/control/apps/{bundle_id}/users/{user_id}/retention-request") { [self] request in
      let (bundleID, userID) = (request.pathParameters["bundle_id"]!, request.pathParameters["user_id"]!)
      let body = try JSONBody(request)
      let threshold = try thresholdMs(body)
      let groupID = try body.optionalString("group_id")
      let originalTransactionID = try body.optionalString("original_transaction_id")
      let locale = try body.optionalString("user_locale") ?? "en-US"
      let target = try url(body)
      let prepared: PreparedRetentionRequest
      do throws(SimError) {
        prepared = try prepareRetentionRequest(
          bundleID: bundleID, userID: userID, groupID: groupID,
          originalTransactionID: originalTransactionID, locale: locale, url: target)
      } catch { throw error.http }
      let exchange = await sendRetentionRequest(prepared, thresholdMs: threshold)
      retentionExchanges.withLock { $0.append(exchange) }
      return jsonResponse(exchange.json)
    }

    router.add("GET", "/control/retention-requests") { [self] request in
      let bundleID = request.query("bundle_id")
      let userID = request.query("user_id")
      let exchanges = retentionExchanges.withLock { $0 }.filter {
        (bundleID == nil || $0.bundleID == bundleID) && (userID == nil || $0.userID == userID)
      }
      return jsonResponse(.object(["requests": .array(exchanges.map(\.json))]))
    }

    // Apple's Initiate Performance Test, run at once: answers the result (Get Performance Test
    // Results' body) when the last request has been answered or has timed out.
    router.add("POST", "/control/apps/{bundle_id}/retention-performance-test") { [self] request in
      let bundleID = request.pathParameters["bundle_id"]!
      let body = try JSONBody(request)
      let total = try body.optionalInt("total_requests") ?? 100
      guard (1...Int64(RetentionMessaging.maxTotalRequests)).contains(total) else {
        throw HTTPError.badRequest(
          "field 'total_requests' must be 1...\(RetentionMessaging.maxTotalRequests)")
      }
      let concurrent = try body.optionalInt("max_concurrent_requests") ?? 10
      guard (1...Int64(RetentionMessaging.maxConcurrentRequests)).contains(concurrent) else {
        throw HTTPError.badRequest(
          "field 'max_concurrent_requests' must be 1...\(RetentionMessaging.maxConcurrentRequests)")
      }
      let successRate = try body.optionalInt("success_rate_threshold") ?? 95
      guard (0...100).contains(successRate) else {
        throw HTTPError.badRequest("field 'success_rate_threshold' must be 0...100 (percent)")
      }
      var originalTransactionIDs = try body.optionalString("original_transaction_id").map { [$0] } ?? []
      if let value = body.object["original_transaction_ids"], !value.isNull {
        guard let array = value.arrayValue, !array.isEmpty, array.allSatisfy({ $0.stringValue != nil }) else {
          throw HTTPError.badRequest("field 'original_transaction_ids' must be a non-empty array of strings")
        }
        originalTransactionIDs += array.compactMap(\.stringValue)
      }
      let userID = try body.optionalString("user_id")
      let groupID = try body.optionalString("group_id")
      guard !originalTransactionIDs.isEmpty || (userID != nil && groupID != nil) else {
        throw HTTPError.badRequest("a performance test needs 'original_transaction_id', or 'user_id' and 'group_id'")
      }
      let target = try url(body)
      let threshold = try thresholdMs(body)
      do throws(SimError) {
        let result = try await runRetentionPerformanceTest(
          bundleID: bundleID, userID: userID, groupID: groupID, originalTransactionIDs: originalTransactionIDs,
          url: target, totalRequests: Int(total), maxConcurrent: Int(concurrent),
          thresholdMs: threshold, successRateThreshold: Int(successRate))
        return jsonResponse(result)
      } catch { throw error.http }
    }

    router.add("GET", "/control/retention-performance-tests/{request_id}") { [self] request in
      let id = request.pathParameters["request_id"]!
      guard let result = retentionPerformanceTests.withLock({ $0[id] }) else {
        throw HTTPError(status: 404, message: "no performance test '\(id)'")
      }
      return jsonResponse(result)
    }
  }

  private func thresholdMs(_ body: JSONBody) throws(HTTPError) -> Int64 {
    let threshold = try body.optionalInt("response_time_threshold_ms")
      ?? RetentionMessaging.defaultResponseTimeThresholdMs
    guard (1...60_000).contains(threshold) else {
      throw .badRequest("field 'response_time_threshold_ms' must be 1...60000")
    }
    return threshold
  }

  private func url(_ body: JSONBody) throws(HTTPError) -> String? {
    guard let url = try body.optionalString("url") else { return nil }
    guard let parsed = URL(string: url), parsed.scheme == "http" || parsed.scheme == "https",
      parsed.host != nil
    else { throw .badRequest("field 'url' must be an http(s) URL") }
    return url
  }
}
