import SubscriptionDomain

extension AppStoreServerAPIClient {
  /// Send Consumption Information (V2, App Store Server API 1.19):
  /// `PUT /inApps/v2/transactions/consumption/{transactionId}` with a ConsumptionRequest body;
  /// Apple answers `202 Accepted` with no body
  /// (https://developer.apple.com/documentation/appstoreserverapi/send-consumption-information).
  /// Retries, the rate limit and `Retry-After` are ``call(_:_:_:query:body:authorizer:nowMs:)``'s.
  /// - Parameters:
  ///   - transactionId: the transaction of the `CONSUMPTION_REQUEST`.
  ///   - body: the body (``SubscriptionDomain/ConsumptionInformation/json``).
  /// - Throws: ``AppStoreServerAPIError``: `rejected` when Apple refused the body (a 400 such as
  ///   4000035 InvalidCustomerConsentedError), `unavailable` after the bounded retries.
  public func sendConsumptionInformation(
    transactionId: String, body: ConsumptionInformation, environment: SubscriptionDomain.Environment,
    authorizer: any AppStoreServerAPIAuthorizer, nowMs: Int64
  ) async throws(AppStoreServerAPIError) {
    guard !transactionId.isEmpty, transactionId.utf8.count <= 64,
      transactionId.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D })
    else {
      throw AppStoreServerAPIError(code: .rejected, message: "transaction id \"\(transactionId.prefix(64))\" is not a valid id")
    }
    _ = try await call(
      "PUT", environment, "/inApps/v2/transactions/consumption/\(transactionId)", query: [],
      body: Array(body.json.utf8), authorizer: authorizer, nowMs: nowMs)
  }
}
