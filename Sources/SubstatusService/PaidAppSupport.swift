// A paid app turned subscription (docs/architecture.md rule 24): the app's policy names an
// entitlement that users whose Apple Account got the app before a cutoff have, from the
// AppTransaction SubmitAppTransaction stored (its original purchase date and version).
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire

extension SubstatusService {
  /// Grants the app's paid-app entitlement (when its policy names one) to a user whose stored
  /// Apple Account got the app before the cutoff: that named entitlement is active with no end
  /// from the account's original purchase date on, whatever the purchases say. The store is read
  /// only when the policy names one that `named` carries.
  func grantingPaidApp(
    _ named: [Substatus_V1_NamedEntitlement], userId: String, environment: SubscriptionDomain.Environment,
    app: CachedApp, at time: Int64
  ) async throws(RPCError) -> [Substatus_V1_NamedEntitlement] {
    guard let paid = app.app.policy.paidAppEntitlement,
      let index = named.firstIndex(where: { $0.entitlementID == paid.entitlementId }),
      !named[index].active
    else { return named }
    let user = UserKey(appId: app.app.appId, environment: environment, userId: userId)
    guard let link = try await stored({ () throws(StoreError) in try await appAccountStore.appAccount(of: user) }),
      paid.grants(originalPurchaseDate: link.originalPurchaseDate, originalApplicationVersion: link.originalApplicationVersion),
      (link.originalPurchaseDate ?? .min) <= time
    else { return named }
    var out = named
    out[index].active = true
    out[index].state = .active
    out[index].expiresMs = 0
    out[index].willRenew = false
    out[index].productID = ""
    out[index].transactionID = link.appTransactionId
    return out
  }
}
