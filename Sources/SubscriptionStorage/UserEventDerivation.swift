// The domain's event derivation (`EventDerivation`) as every store calls it, in the transaction of
// the write that changed a user's data or of the transition scheduler's batch.
import SubscriptionDomain

/// Through when a user's events are logged and when the next change by time alone is due: the
/// bookkeeping each deriving commit stores beside the events (one row per user).
package struct EventSchedule: Sendable, Hashable {
  /// The instant through which the user's changes by time alone are logged (the last deriving
  /// write's or scheduler run's time).
  package var loggedThroughMs: Int64
  /// The next change by time alone (``EventDerivation/nextTransitionMs(history:catalog:afterMs:)``);
  /// `nil`: none will happen to the stored data.
  package var nextTransitionMs: Int64?

  /// Creates a schedule.
  package init(loggedThroughMs: Int64, nextTransitionMs: Int64?) {
    self.loggedThroughMs = loggedThroughMs
    self.nextTransitionMs = nextTransitionMs
  }
}

/// Derives the events of one user's write or due transitions, and the user's new schedule.
package enum UserEventDerivation {
  /// Event ids are SHA-256 based (docs/architecture.md "Events": deterministic, never of the
  /// detection).
  static let derivation = EventDerivation(digest: { SHA256.hash($0) })

  /// The events a write adds (from `before` to `after`, at `atMs`, the events' detection time) and
  /// the user's schedule after it. `schedule` is the user's stored one (`nil`: none yet).
  package static func write(
    user: UserKey, catalog: Catalog, before: UserPurchaseState, after: UserPurchaseState,
    atMs: Int64, schedule: EventSchedule?
  ) -> (events: [SubscriptionEvent], schedule: EventSchedule) {
    let through = max(atMs, schedule?.loggedThroughMs ?? atMs)
    let derived = derivation.write(
      subject: user.eventSubject, before: before.purchaseHistory, after: after.purchaseHistory, catalog: catalog,
      throughMs: atMs, loggedThroughMs: schedule?.loggedThroughMs, detectedMs: atMs, nextAfterMs: through)
    return (derived.events, EventSchedule(loggedThroughMs: through, nextTransitionMs: derived.nextTransitionMs))
  }

  /// The changes by time alone of the user's unchanged data due since the schedule's
  /// ``EventSchedule/loggedThroughMs`` through `atMs` (the scheduler's run), and the schedule after.
  package static func transitions(
    user: UserKey, catalog: Catalog, state: UserPurchaseState, atMs: Int64, schedule: EventSchedule
  ) -> (events: [SubscriptionEvent], schedule: EventSchedule) {
    let history = state.purchaseHistory
    let events = derivation.transitionEvents(
      subject: user.eventSubject, history: history, catalog: catalog,
      afterMs: schedule.loggedThroughMs, throughMs: atMs, detectedMs: atMs)
    return (events, next(history, catalog, atMs: atMs, schedule: schedule))
  }

  private static func next(
    _ history: PurchaseHistory, _ catalog: Catalog, atMs: Int64, schedule: EventSchedule?
  ) -> EventSchedule {
    let through = max(atMs, schedule?.loggedThroughMs ?? atMs)
    return EventSchedule(
      loggedThroughMs: through,
      nextTransitionMs: EventDerivation.nextTransitionMs(
        history: history, catalog: catalog, afterMs: through))
  }
}

extension UserKey {
  /// The derivation's name for the user.
  var eventSubject: EventSubject {
    EventSubject(appId: appId, environment: environment, userId: userId)
  }
}

extension UserPurchaseState {
  /// The derivation's view of the stored data (order does not matter to it): one copy per
  /// transaction id, each merged by the write that stored it, so the derivation does not merge
  /// them again.
  var purchaseHistory: PurchaseHistory {
    PurchaseHistory(
      mergedTransactions: Array(transactions.values),
      renewals: renewalInfos.values.compactMap(\.renewalInfo))
  }
}
