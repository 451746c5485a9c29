import SubscriptionStorage

extension InMemoryStore {
  /// See ``RetentionRuleStore/putRetentionRules(appId:rules:)``.
  public func putRetentionRules(appId: String, rules: StoredRetentionRules) async throws(StoreError) {
    try StoreValidation.validate(retentionRules: rules)
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      s.retentionRules[appId] = rules
    }
  }

  /// See ``RetentionRuleStore/retentionRules(appId:)``.
  public func retentionRules(appId: String) async throws(StoreError) -> StoredRetentionRules? {
    state.withLock { $0.retentionRules[appId] }
  }
}
