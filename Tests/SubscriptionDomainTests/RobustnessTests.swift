import SubstatusJSON
import Testing

@testable import SubscriptionDomain

/// Shuffles every array of objects (transactions, renewal infos) and the members of every object,
/// recursively: that order means nothing. Arrays of strings (`eligibleWinBackOfferIds`, best first)
/// keep their order.
func shuffled(_ value: JSONValue, using rng: inout SeededGenerator) -> JSONValue {
  switch value {
  case .array(let elements):
    let inner = elements.map { shuffled($0, using: &rng) }
    return .array(elements.allSatisfy { $0.objectValue != nil } ? inner.shuffled(using: &rng) : inner)
  case .object(let object):
    let members = object.members.map { (key: $0.key, value: shuffled($0.value, using: &rng)) }
    return .object(JSONObject(members.shuffled(using: &rng)))
  default:
    return value
  }
}

let parserFixtures = [
  "verify_receipt_multi_group.json", "verify_receipt_sandbox_typed.json",
  "notification_v1_revoke.json", "notification_v1_refund.json",
  "v2_transaction_family_revoke.json", "v2_transaction_trial.json", "v2_renewal_grace.json",
  "v2_notification_did_fail_to_renew.json",
]

/// Runs the parser that fits a fixture; returns a comparable summary of the result.
func parseFixture(_ name: String, _ bytes: [UInt8]) throws(AppleDataError) -> String {
  if name.hasPrefix("verify_receipt") {
    return String(describing: try VerifyReceiptResponse(parsing: bytes))
  } else if name.hasPrefix("notification_v1") {
    let n = try NotificationV1(parsing: bytes)
    return "\(n.transactions) \(n.pendingRenewalInfo) \(n.rawNotificationType)"
  } else if name.hasPrefix("v2_transaction") {
    return String(describing: try Transaction(jwsTransactionPayload: bytes))
  } else if name.hasPrefix("v2_renewal") {
    return String(describing: try RenewalInfo(jwsRenewalInfoPayload: bytes))
  } else {
    return String(describing: try NotificationV2(parsing: bytes))
  }
}

@Suite("Robustness")
struct RobustnessTests {
  @Test("array and member order mean nothing (rule 1)", arguments: parserFixtures)
  func orderMeansNothing(name: String) throws {
    let bytes = try Fixture.bytes(name)
    let reference = try parseFixture(name, bytes)
    var rng = SeededGenerator(seed: 2024)
    for _ in 0..<20 {
      let value = shuffled(try JSONValue(parsing: bytes), using: &rng)
      #expect(try parseFixture(name, value.serializedBytes()) == reference)
    }
  }

  @Test("mutated input gets a precise error or a result, never a crash", arguments: parserFixtures)
  func mutations(name: String) throws {
    let original = try Fixture.bytes(name)
    var rng = SeededGenerator(seed: UInt64(original.count))
    let alphabet = Array(#"{}[]",:0123456789-.eE truefalsnul\"#.utf8)
    var rejected = 0
    for _ in 0..<150 {
      var bytes = original
      for _ in 0..<Int.random(in: 1...4, using: &rng) {
        let at = Int.random(in: 0..<bytes.count, using: &rng)
        switch Int.random(in: 0..<3, using: &rng) {
        case 0: bytes[at] = alphabet.randomElement(using: &rng)!
        case 1: bytes.remove(at: at)
        default: bytes.insert(alphabet.randomElement(using: &rng)!, at: at)
        }
      }
      do {
        _ = try parseFixture(name, bytes)
      } catch {
        rejected += 1
        #expect(!error.message.isEmpty)
        #expect([.invalidJSON, .invalidValue, .missingField, .verifyReceiptStatus].contains(error.code))
      }
    }
    #expect(rejected > 0)
  }

  @Test("rule 11: the same history replayed at successive instants")
  func timeline() {
    let history = [
      tx("1", "premium.monthly", jan1, jan1 + 7 * day, trial: true),
      tx("2", "premium.monthly", jan1 + 7 * day, utc(2024, 2, 8), otx: "1"),
    ]
    let renewals = [renewal("1", "premium.monthly", retry: true, grace: utc(2024, 2, 24))]
    let timeline: [(Int64, SubscriptionState, EligibilityReason)] = [
      (jan1 - 1, .neverSubscribed, .newCustomer),
      (jan1, .active, .introAlreadyUsed),
      (jan1 + 7 * day, .active, .introAlreadyUsed),
      (utc(2024, 2, 8), .gracePeriod, .introAlreadyUsed),
      (utc(2024, 2, 24), .billingRetry, .introAlreadyUsed),
    ]
    for (time, state, reason) in timeline {
      let evaluation = evaluate(history, renewals, at: time)
      #expect(evaluation.status(ofGroup: Group.premium)?.state == state, "at \(time)")
      #expect(evaluation.eligibility(for: "premium.yearly").introductory.reason == reason)
      #expect(evaluation.time == time)
    }
    // Without the renewal info (Apple stopped retrying): expired after the last period.
    #expect(evaluate(history, at: utc(2024, 2, 8)).status(ofGroup: Group.premium)?.state == .expired)
  }
}
