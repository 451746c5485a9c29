import RPCCore
import SubstatusWire

extension SubstatusClient {
  /// Links a user to the Apple Account behind their device: the app's signed `AppTransaction`
  /// (`IngestService.SubmitAppTransaction`). With the app's In-App Purchase key the server then
  /// fetches and stores that account's whole history, and answers an introductory offer it never
  /// used with `NEW_CUSTOMER_VERIFIED`. Idempotent.
  ///
  /// ```swift
  /// let linked = try await ingest.submitAppTransaction(appID: app, userID: "u1", signedAppTransaction: jws)
  /// print(linked.appTransactionID, linked.historyVerified)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - userID: The user.
  ///   - signedAppTransaction: StoreKit's `AppTransaction.shared` `jwsRepresentation`.
  ///   - options: Deadline and metadata.
  /// - Returns: The account, whether Apple's history of it is stored, and the user's status.
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming `signed_app_transaction` when it fails
  ///   verification, `FAILED_PRECONDITION` when Apple refuses the key, `UNAVAILABLE` when Apple
  ///   cannot answer now).
  public func submitAppTransaction(
    appID: String, userID: String, signedAppTransaction: String,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_SubmitAppTransactionResponse {
    var request = Substatus_V1_SubmitAppTransactionRequest()
    request.appID = appID
    request.userID = userID
    request.signedAppTransaction = signedAppTransaction
    return try await service(
      Substatus_V1_IngestService.Client.self, options: options
    ).submitAppTransaction(request)
  }
}
