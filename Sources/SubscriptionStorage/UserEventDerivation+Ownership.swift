// The event derivation under purchase sharing: a user's events follow the history the user owns
// (``SubscriptionDomain/OwnershipGap``), not the raw rows, and each transfer gives both users an
// `OWNERSHIP_TRANSFERRED` event in the commit that made it. An app whose policy never left SHARE
// has no gaps: nothing here runs for it.
import SubscriptionDomain

extension UserPurchaseState {
  /// The original transactions of the state's transactions and renewal infos.
  var originalTransactionIds: Set<String> {
    Set(transactions.values.lazy.map(\.originalTransactionId)).union(renewalInfos.keys)
  }

  /// The state as a user with `gaps` owns it at `time`: without the transactions and renewal infos
  /// of the original transactions a gap covers then.
  package func owned(gaps: [OwnershipGap], at time: Int64) -> UserPurchaseState {
    let disowned = OwnershipGap.disowned(by: gaps, at: time)
    if disowned.isEmpty { return self }
    var out = self
    out.transactions = transactions.filter { !disowned.contains($0.value.originalTransactionId) }
    out.renewalInfos = renewalInfos.filter { !disowned.contains($0.key) }
    return out
  }
}

extension UserEventDerivation {
  /// ``write(user:catalog:before:after:atMs:schedule:)`` for a user with ownership gaps (read in
  /// the commit before and after purchase sharing settled the write): derived from what the user
  /// owns at `atMs` before and after. A purchase the write brings into what the user owns (restored
  /// from another user, or taken back) has no events of the instants another user owned it: those
  /// were that user's. New facts about a purchase the user already owned are the user's events
  /// whenever Apple dates them (a refund notified after a transfer, dated a little before it by
  /// Apple's clock, is the new owner's).
  package static func write(
    user: UserKey, catalog: Catalog, before: UserPurchaseState, after: UserPurchaseState,
    atMs: Int64, schedule: EventSchedule?, gapsBefore: [OwnershipGap], gapsAfter: [OwnershipGap]
  ) -> (events: [SubscriptionEvent], schedule: EventSchedule) {
    if gapsBefore.isEmpty && gapsAfter.isEmpty {
      return write(user: user, catalog: catalog, before: before, after: after, atMs: atMs, schedule: schedule)
    }
    let owned = (before: before.owned(gaps: gapsBefore, at: atMs), after: after.owned(gaps: gapsAfter, at: atMs))
    var derived = write(
      user: user, catalog: catalog, before: owned.before, after: owned.after, atMs: atMs, schedule: schedule)
    let newlyOwned = owned.after.originalTransactionIds.subtracting(owned.before.originalTransactionIds)
    derived.events = OwnershipGap.ownedEvents(
      derived.events, gaps: gapsAfter.filter { newlyOwned.contains($0.originalTransactionId) })
    return derived
  }

  /// ``transitions(user:catalog:state:atMs:schedule:)`` for a user with ownership `gaps`.
  package static func transitions(
    user: UserKey, catalog: Catalog, state: UserPurchaseState, atMs: Int64, schedule: EventSchedule,
    gaps: [OwnershipGap]
  ) -> (events: [SubscriptionEvent], schedule: EventSchedule) {
    if gaps.isEmpty { return transitions(user: user, catalog: catalog, state: state, atMs: atMs, schedule: schedule) }
    var derived = transitions(
      user: user, catalog: catalog, state: state.owned(gaps: gaps, at: atMs), atMs: atMs, schedule: schedule)
    derived.events = OwnershipGap.ownedEvents(derived.events, gaps: gaps)
    return derived
  }

  /// The events of one user of a transfer, in the commit that made it (after the new owner's data
  /// is written and the gaps are settled): the changes by time alone of what the user owns that
  /// are due since its schedule, then its `OWNERSHIP_TRANSFERRED`; and the user's schedule after
  /// (the previous owner's next transition no longer follows the purchase it lost).
  package static func transfer(
    _ transfer: OwnershipTransfer, user: UserKey, catalog: Catalog, state: UserPurchaseState,
    gaps: [OwnershipGap], schedule: EventSchedule?
  ) -> (events: [SubscriptionEvent], schedule: EventSchedule) {
    let at = transfer.atMs
    var derived = transitions(
      user: user, catalog: catalog, state: state, atMs: at,
      schedule: schedule ?? EventSchedule(loggedThroughMs: at, nextTransitionMs: nil), gaps: gaps)
    // What the user owns at the transfer, with the moved purchase's data in either case.
    let otid = transfer.originalTransactionId
    let history = state.owned(gaps: gaps.filter { $0.originalTransactionId != otid }, at: at)
    derived.events.append(
      derivation.ownershipTransferred(
        subject: user.eventSubject,
        change: OwnershipChange(
          originalTransactionId: otid, previousUserId: transfer.previousUserId, newUserId: transfer.newUserId,
          atMs: at),
        history: history.purchaseHistory, catalog: catalog, detectedMs: at))
    return derived
  }
}

/// What the `OWNERSHIP_TRANSFERRED` events read and write in a store's commit, for one app and
/// environment (each store implements it beside its ``OwnershipLedger``).
package protocol OwnershipEventLog {
  /// The user's stored purchase data.
  mutating func purchaseState(of userId: String) throws(StoreError) -> UserPurchaseState
  /// The user's ownership gaps (``PurchaseStore/ownershipGaps(appId:environment:userIds:)``), as the
  /// commit has them so far.
  mutating func gaps(of userId: String) throws(StoreError) -> [OwnershipGap]
  /// The user's event schedule; `nil`: none yet.
  mutating func schedule(of userId: String) throws(StoreError) -> EventSchedule?
  /// Stores the user's schedule.
  mutating func saveSchedule(_ schedule: EventSchedule, of userId: String) throws(StoreError)
  /// Appends the events whose ids are not logged yet, in order (now, or at the commit's end).
  mutating func append(_ events: [SubscriptionEvent], of userId: String) throws(StoreError)
}

extension PurchaseOwnership {
  /// Logs the events of `transfers` (made by one update, in its commit, after its data is written):
  /// each transfer's previous owner, then its new owner (``UserEventDerivation/transfer(_:user:catalog:state:gaps:schedule:)``).
  package static func logTransferEvents<Log: OwnershipEventLog>(
    _ transfers: some Collection<OwnershipTransfer>, catalog: Catalog, log: inout Log
  ) throws(StoreError) {
    for transfer in transfers {
      for userId in [transfer.previousUserId, transfer.newUserId] {
        let user = UserKey(appId: transfer.appId, environment: transfer.environment, userId: userId)
        let derived = UserEventDerivation.transfer(
          transfer, user: user, catalog: catalog, state: try log.purchaseState(of: userId),
          gaps: try log.gaps(of: userId), schedule: try log.schedule(of: userId))
        try log.saveSchedule(derived.schedule, of: userId)
        try log.append(derived.events, of: userId)
      }
    }
  }
}
