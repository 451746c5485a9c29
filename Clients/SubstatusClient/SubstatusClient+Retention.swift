public import RPCCore
public import SubstatusWire

// MARK: - Retention rules (issue 35): what the retention endpoint answers Apple

extension SubstatusClient {
  /// Replaces the app's retention rules (`AdminService.PutRetentionRules`). Idempotent (the same
  /// rules replace the same rules).
  ///
  /// ```swift
  /// let rules = try Substatus_V1_RetentionRules(jsonString: #"{"defaultMessageIdentifier":"…","rules":[]}"#)
  /// _ = try await admin.putRetentionRules(appID: app, rules: rules)
  /// ```
  ///
  /// - Parameters:
  ///   - appID: The app.
  ///   - rules: The rules, at most 200.
  ///   - options: Deadline and metadata.
  /// - Returns: The stored rules (with `updatedMs`).
  /// - Throws: `RPCError` (`INVALID_ARGUMENT` naming the bad rule: `rules[2] (ruleId "x")`).
  public func putRetentionRules(
    appID: String, rules: Substatus_V1_RetentionRules, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_PutRetentionRulesResponse {
    var request = Substatus_V1_PutRetentionRulesRequest()
    request.appID = appID
    request.rules = rules
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).putRetentionRules(request)
  }

  /// The app's retention rules (`AdminService.GetRetentionRules`). Idempotent.
  /// - Throws: `RPCError` (`NOT_FOUND` for an app without rules).
  public func getRetentionRules(
    appID: String, options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_GetRetentionRulesResponse {
    var request = Substatus_V1_GetRetentionRulesRequest()
    request.appID = appID
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).getRetentionRules(request)
  }

  /// What the retention endpoint would answer for the user now, and which rule decided
  /// (`AdminService.TestRetentionRules`). Idempotent.
  /// - Parameters:
  ///   - productID: The product of Apple's request; empty: the user's current subscription.
  public func testRetentionRules(
    appID: String, userID: String, productID: String = "", environment: Substatus_V1_Environment = .unspecified,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Substatus_V1_TestRetentionRulesResponse {
    var request = Substatus_V1_TestRetentionRulesRequest()
    request.appID = appID
    request.userID = userID
    request.productID = productID
    request.environment = environment
    return try await service(
      Substatus_V1_AdminService.Client.self, options: options
    ).testRetentionRules(request)
  }
}
