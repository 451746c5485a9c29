// Part of SetPolicy's wire mapping (WireMapping.swift): a paid app turned subscription (docs/architecture.md rule 24).
import RPCCore
import SubscriptionDomain
import SubstatusWire

extension PaidAppEntitlement {
  /// Reads SetPolicy's `paid_app_entitlement_id` and `paid_app_before`: `nil` when the id is empty
  /// (and so must the cutoff be); INVALID_ARGUMENT naming the field otherwise.
  package init?(wire: Substatus_V1_EligibilityPolicy) throws(RPCError) {
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
