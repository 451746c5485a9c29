import SubscriptionDomain
import SubscriptionStorage

/// The in-memory event log: events in sequence order, the ids already logged, and each user's next
/// transition by time. Changed only under the store's lock, with the purchase data that caused it.
struct InMemoryEventLog {
  /// Logged events, in sequence order.
  var events: [LoggedEvent] = []
  /// The ids of ``events`` (deduplication).
  var ids: Set<String> = []
  /// The last sequence handed out (never reused, erasure included).
  var lastSequence: Int64 = 0
  /// Each user's schedule: through when its events are logged, its next transition by time.
  var schedules: [UserKey: EventSchedule] = [:]

  /// Appends the events whose ids are not logged yet, in the order given.
  mutating func append(_ new: [SubscriptionEvent]) -> [LoggedEvent] {
    var appended: [LoggedEvent] = []
    for event in new where ids.insert(event.eventId).inserted {
      lastSequence += 1
      appended.append(LoggedEvent(sequence: lastSequence, event: event))
    }
    events += appended
    return appended
  }

  /// The app's events after `afterSequence` matching `query`, at most `limit`.
  func read(appId: String, query: EventQuery, afterSequence: Int64, limit: Int) -> [LoggedEvent] {
    // Binary search for the first event after `afterSequence` (events are in sequence order).
    var (low, high) = (0, events.count)
    while low < high {
      let mid = (low + high) / 2
      if events[mid].sequence > afterSequence { high = mid } else { low = mid + 1 }
    }
    var out: [LoggedEvent] = []
    for logged in events[low...] where logged.event.appId == appId {
      guard EventLogRules.matches(logged.event, query) else { continue }
      out.append(logged)
      if out.count == limit { break }
    }
    return out
  }

  /// Forgets the user's events (their ids too: the same data ingested afresh logs them again) and
  /// schedule.
  mutating func erase(_ user: UserKey) {
    func isUsers(_ e: SubscriptionEvent) -> Bool {
      e.appId == user.appId && e.environment == user.environment && e.userId == user.userId
    }
    for logged in events where isUsers(logged.event) { ids.remove(logged.event.eventId) }
    events.removeAll { isUsers($0.event) }
    schedules[user] = nil
  }
}

extension InMemoryStore {
  /// See ``EventLogStore/events(appId:query:afterSequence:limit:)``.
  public func events(appId: String, query: EventQuery, afterSequence: Int64, limit: Int)
    async throws(StoreError) -> [LoggedEvent]
  {
    try withState { (s: inout State) throws(StoreError) in
      guard s.apps[appId] != nil else { throw StoreError.notFound("app", appId) }
      return s.eventLog.read(
        appId: appId, query: query, afterSequence: afterSequence,
        limit: EventLogRules.pageSize(limit))
    }
  }

  /// See ``EventLogStore/lastEventSequence()``.
  public func lastEventSequence() async throws(StoreError) -> Int64 {
    state.withLock { $0.eventLog.lastSequence }
  }

  /// See ``EventLogStore/eventCount(appId:afterSequence:throughSequence:)``.
  public func eventCount(appId: String, afterSequence: Int64, throughSequence: Int64) async throws(StoreError) -> Int {
    state.withLock { s in
      s.eventLog.events.count {
        $0.event.appId == appId && $0.sequence > afterSequence && $0.sequence <= throughSequence
      }
    }
  }

  /// See ``EventLogStore/appendDueTransitionEvents(atMs:limit:)``: one locked step.
  public func appendDueTransitionEvents(atMs: Int64, limit: Int) async throws(StoreError)
    -> [LoggedEvent]
  {
    state.withLock { s in
      let due = s.eventLog.schedules.compactMap { user, schedule in
        schedule.nextTransitionMs.flatMap { $0 <= atMs ? (user, schedule, $0) : nil }
      }.sorted {
        ($0.2, $0.0.appId, $0.0.environment.rawValue, $0.0.userId)
          < ($1.2, $1.0.appId, $1.0.environment.rawValue, $1.0.userId)
      }.prefix(EventLogRules.pageSize(limit))
      var appended: [LoggedEvent] = []
      for (user, schedule, _) in due {
        let derived = UserEventDerivation.transitions(
          user: user, catalog: Self.catalog(user.appId, s), state: s.users[user] ?? UserPurchaseState(),
          atMs: atMs, schedule: schedule, gaps: s.gaps[user] ?? [])
        s.eventLog.schedules[user] = derived.schedule
        appended += s.eventLog.append(derived.events)
        // Time changed the user's answers: its summary is refreshed here, not by the next read.
        Self.storeSummary(of: user, atMs: atMs, in: &s)
      }
      return appended
    }
  }

  /// See ``EventLogStore/nextTransitionDueMs()``.
  public func nextTransitionDueMs() async throws(StoreError) -> Int64? {
    state.withLock { $0.eventLog.schedules.values.compactMap(\.nextTransitionMs).min() }
  }

  /// The app's catalog, as a write reads it.
  static func catalog(_ appId: String, _ s: State) -> Catalog {
    Catalog(products: (s.products[appId] ?? [:]).values.sorted { $0.productId < $1.productId })
  }

  /// Derives the user's events from `before` to `after` at `atMs` (of what the user owns, under
  /// its ownership gaps before the write and in the state), appends the new ones and records the user's schedule, in the
  /// caller's locked step.
  static func logEvents(
    of user: UserKey, before: UserPurchaseState, after: UserPurchaseState, atMs: Int64,
    gapsBefore: [OwnershipGap], in s: inout State
  ) -> [LoggedEvent] {
    let derived = UserEventDerivation.write(
      user: user, catalog: catalog(user.appId, s), before: before, after: after, atMs: atMs,
      schedule: s.eventLog.schedules[user], gapsBefore: gapsBefore, gapsAfter: s.gaps[user] ?? [])
    s.eventLog.schedules[user] = derived.schedule
    return s.eventLog.append(derived.events)
  }
}

extension InMemoryStore: EventLogAppending {
  /// See ``EventLogAppending/appendEvents(_:)``.
  package func appendEvents(_ events: [SubscriptionEvent]) async throws(StoreError) -> [LoggedEvent] {
    try withState { (s: inout State) throws(StoreError) in
      for e in events where s.apps[e.appId] == nil { throw StoreError.notFound("app", e.appId) }
      return s.eventLog.append(events)
    }
  }
}
