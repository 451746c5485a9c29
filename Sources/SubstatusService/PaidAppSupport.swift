// A paid app turned subscription (docs/architecture.md rule 24): the app's policy names an
// entitlement that users whose Apple Account got the app before a cutoff have, from the
// AppTransaction SubmitAppTransaction stored (its original purchase date and version).
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire

extension PaidAppEntitlement {
  /// Reads SetPolicy's `paid_app_entitlement_id` and `paid_app_before`: `nil` when the id is empty
  /// (and so must the cutoff be); INVALID_ARGUMENT naming the field otherwise.
  init?(wire: Substatus_V1_EligibilityPolicy) throws(RPCError) {
    if wire.paidAppEntitlementID.isEmpty {
      guard wire.paidAppBefore.isEmpty else {
        throw invalidArgument("policy.paid_app_entitlement_id", "required with paid_app_before")
      }
      return nil
    }
    guard wire.paidAppEntitlementID.utf8.count <= 64, DisplayText.problem(in: wire.paidAppEntitlementID) == nil else {
      throw invalidArgument("policy.paid_app_entitlement_id", "must be an entitlement id of at most 64 bytes")
    }
    guard let cutoff = PaidAppEntitlement.cutoff(parsing: wire.paidAppBefore) else {
      throw invalidArgument(
        "policy.paid_app_before", "must be a day (YYYY-MM-DD) or a version (numbers separated by dots, such as 2.0)")
    }
    self.init(entitlementId: wire.paidAppEntitlementID, before: cutoff)
  }
}

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
    let accounts: any AppAccountStore = store
    let user = UserKey(appId: app.app.appId, environment: environment, userId: userId)
    guard let link = try await stored({ () throws(StoreError) in try await accounts.appAccount(of: user) }),
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
