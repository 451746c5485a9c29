import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

/// Rule 14's property through the domain's merge alone, on many more generated cases than the
/// store contract runs (`StoreContract.Case.copyPermutations` runs the same cases on every store).
@Suite("Copy permutations (rules 13, 14)")
struct CopyPermutationTests {
  @Test("any order of the same copies merges to one history and one evaluation", arguments: 0..<300)
  func permutations(seed: Int) {
    let generated = CopyPermutationCase(seed: UInt64(seed))
    let expected = CopyPermutationCase.merged(generated.updates)
    let evaluation = generated.evaluate(expected.transactions, expected.renewalInfos)
    for (n, order) in generated.permutations(6).enumerated() {
      let merged = CopyPermutationCase.merged(order)
      #expect(merged.transactions == expected.transactions, "\(generated), order \(n)")
      #expect(merged.renewalInfos == expected.renewalInfos, "\(generated), order \(n)")
      #expect(generated.evaluate(merged.transactions, merged.renewalInfos) == evaluation, "\(generated), order \(n)")
    }
    // A revocation is never lost: each stored copy is revoked exactly when its newest copies are.
    let revoked = generated.expectedRevoked()
    #expect(Dictionary(uniqueKeysWithValues: expected.transactions.map { ($0.transactionId, $0.revocationDate != nil) }) == revoked, "\(generated)")
  }

  @Test("the generator covers every source, refunds, reversals, upgrades, family sharing and removals")
  func coverage() {
    let cases = (0..<300).map { CopyPermutationCase(seed: UInt64($0)) }
    let copies = cases.flatMap(\.updates)
    let transactions = copies.flatMap(\.transactions)
    #expect(transactions.contains { $0.signedDate != nil && $0.revocationDate != nil })
    #expect(transactions.contains { $0.asOfDate != nil && $0.revocationDate != nil && $0.notificationType == "REFUND" })
    #expect(transactions.contains { $0.signedDate == nil && $0.asOfDate == nil })
    #expect(transactions.contains { $0.isUpgraded })
    #expect(transactions.contains { $0.ownership == .familyShared && $0.revocationType == .familyRevoke })
    #expect(copies.contains { $0.renewalInfoVersions.contains { $0.renewalInfo == nil } })
    // Reversals: a transaction revoked in an older copy and not in a newer one.
    #expect(cases.contains { c in
      let byId = Dictionary(grouping: c.updates.flatMap(\.transactions), by: \.transactionId)
      return byId.values.contains { copies in
        let revoked = copies.filter { $0.revocationDate != nil }.compactMap { $0.signedDate ?? $0.asOfDate }
        let clean = copies.filter { $0.revocationDate == nil }.compactMap { $0.signedDate ?? $0.asOfDate }
        return (revoked.min().map { r in clean.contains { $0 > r } }) ?? false
      }
    })
    // Ties between sources on the clock.
    #expect(cases.contains { c in
      let clocks = c.updates.compactMap { $0.transactions.first.flatMap { $0.signedDate ?? $0.asOfDate } }
      return Set(clocks).count < clocks.count
    })
  }
}
