import RPCCore
import SubstatusWire

// MARK: AdminService: retention rules (docs/architecture.md "Retention Messaging")

extension SubstatusService {
  // Temporary, for the "retention proto:" commit only (so branch retention-apple can build on the
  // messages): the next commits of branch retention-service replace these three with the rules'
  // store, validation and matcher.

  public func putRetentionRules(_ request: Substatus_V1_PutRetentionRulesRequest, _ context: ServerContext) async throws -> Substatus_V1_PutRetentionRulesResponse {
    _ = try await app(request.appID, context)
    throw RPCError(code: .unimplemented, message: "PutRetentionRules is not built yet")
  }

  public func getRetentionRules(_ request: Substatus_V1_GetRetentionRulesRequest, _ context: ServerContext) async throws -> Substatus_V1_GetRetentionRulesResponse {
    _ = try await app(request.appID, context)
    throw RPCError(code: .unimplemented, message: "GetRetentionRules is not built yet")
  }

  public func testRetentionRules(_ request: Substatus_V1_TestRetentionRulesRequest, _ context: ServerContext) async throws -> Substatus_V1_TestRetentionRulesResponse {
    _ = try await app(request.appID, context)
    throw RPCError(code: .unimplemented, message: "TestRetentionRules is not built yet")
  }
}
