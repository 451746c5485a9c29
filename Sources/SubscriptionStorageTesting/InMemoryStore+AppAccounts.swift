import SubscriptionDomain
import SubscriptionStorage

extension InMemoryStore {
  /// See ``AppAccountStore/saveAppAccount(_:)``.
  public func saveAppAccount(_ link: AppAccountLink) async throws(StoreError) {
    try StoreValidation.validate(link)
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[link.user.appId] != nil else { throw StoreError.notFound("app", link.user.appId) }
      s.appAccounts[link.user] = link
    }
  }

  /// See ``AppAccountStore/appAccounts(appId:environment:userIds:)``.
  public func appAccounts(appId: String, environment: Environment, userIds: [String]) async throws(StoreError)
    -> [String: AppAccountLink]
  {
    state.withLock { s in
      var out: [String: AppAccountLink] = [:]
      for userId in userIds {
        if let link = s.appAccounts[UserKey(appId: appId, environment: environment, userId: userId)] {
          out[userId] = link
        }
      }
      return out
    }
  }
}
