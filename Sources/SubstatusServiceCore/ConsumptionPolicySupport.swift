// The app's consumption policy on the wire (docs/architecture.md rule 27): SetPolicy's
// `policy.consumption_policy`, validated naming the bad field.
import RPCCore
import SubscriptionDomain
import SubstatusWire

extension ConsumptionPolicy {
  /// The wire message.
  var wire: Substatus_V1_ConsumptionPolicy {
    var w = Substatus_V1_ConsumptionPolicy()
    w.customerConsented = customerConsented
    w.sampleContentProvided = sampleContentProvided
    w.deliveryStatus = deliveryStatus.wire
    w.refundPreference = refundPreference?.wire ?? .unspecified
    return w
  }

  /// Reads SetPolicy's `policy.consumption_policy`.
  /// - Throws: INVALID_ARGUMENT naming `policy.consumption_policy.delivery_status` (unset or
  ///   unknown) or `policy.consumption_policy.refund_preference` (unknown).
  init(wire: Substatus_V1_ConsumptionPolicy) throws(RPCError) {
    let field = "policy.consumption_policy"
    let status: ConsumptionDeliveryStatus
    switch wire.deliveryStatus {
    case .delivered: status = .delivered
    case .undeliveredQualityIssue: status = .undeliveredQualityIssue
    case .undeliveredWrongItem: status = .undeliveredWrongItem
    case .undeliveredServerOutage: status = .undeliveredServerOutage
    case .undeliveredOther: status = .undeliveredOther
    case .unspecified:
      throw invalidArgument(
        "\(field).delivery_status", "required: Apple's deliveryStatus (CONSUMPTION_DELIVERY_STATUS_DELIVERED, ...)")
    case .UNRECOGNIZED(let v): throw invalidArgument("\(field).delivery_status", "unknown value \(v)")
    }
    let preference: RefundPreference?
    switch wire.refundPreference {
    case .unspecified: preference = nil
    case .decline: preference = .decline
    case .grantFull: preference = .grantFull
    case .grantProrated: preference = .grantProrated
    case .UNRECOGNIZED(let v): throw invalidArgument("\(field).refund_preference", "unknown value \(v)")
    }
    self.init(
      customerConsented: wire.customerConsented, sampleContentProvided: wire.sampleContentProvided,
      deliveryStatus: status, refundPreference: preference)
  }
}

extension ConsumptionDeliveryStatus {
  var wire: Substatus_V1_ConsumptionDeliveryStatus {
    switch self {
    case .delivered: .delivered
    case .undeliveredQualityIssue: .undeliveredQualityIssue
    case .undeliveredWrongItem: .undeliveredWrongItem
    case .undeliveredServerOutage: .undeliveredServerOutage
    case .undeliveredOther: .undeliveredOther
    }
  }
}

extension SubscriptionDomain.RefundPreference {
  var wire: Substatus_V1_RefundPreference {
    switch self {
    case .decline: .decline
    case .grantFull: .grantFull
    case .grantProrated: .grantProrated
    }
  }
}
