import SubscriptionDomain
import SubscriptionStorage
import Testing

/// The behaviour of every store's event log (``EventLogStore``), run against each store like
/// ``StoreContract``:
///
/// ```swift
/// @Test(arguments: EventLogContract.Case.allCases)
/// func eventLog(_ test: EventLogContract.Case) async throws {
///   try await withMyStore { store in try await EventLogContract.run(test, store) }
/// }
/// ```
///
/// The log's own rules (sequences, deduplication, filters, paging, erasure) are checked with
/// hand-built events appended through the stores' internal append path (`EventLogAppending`); what
/// writes of purchase data log is checked through `ingest` and notifications.
package enum EventLogContract {
  /// A store with its event log and the internal append path.
  package typealias Subject = any Store & EventLogStore & EventLogAppending

  /// One behaviour; each runs against a fresh, empty store.
  package enum Case: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// appended events come back in log order with increasing sequences, per app
    case appendAndRead
    /// an event id already logged is never appended again
    case deduplication
    /// filters: user in both environments, types, environment, occurrence range
    case filters
    /// reads page after a sequence without gaps or repeats; limits are clamped
    case paging
    /// erasing users removes their events; sequences are never reused
    case erasure
    /// concurrent appends: a reader following the log sees every event once, in order
    case concurrentFollower
    /// writes of purchase data log their events in the same commit, each once, detected at the write's time
    case writesLogEvents
    /// changes by time alone are logged by the transition scheduler once, when due, and the schedule follows
    case transitionsByTime
    /// the scheduler takes at most `limit` users per call, most overdue first, and resumes where it stopped
    case transitionBatches
    /// erasing a user removes its schedule: the scheduler never comes back for it
    case transitionErasure

    /// What the case checks, as test output shows it.
    package var testDescription: String {
      switch self {
      case .appendAndRead: "appended events come back in log order with increasing sequences, per app"
      case .deduplication: "an event id already logged is never appended again"
      case .filters: "filters: user in both environments, types, environment, occurrence range"
      case .paging: "reads page after a sequence without gaps or repeats; limits are clamped"
      case .erasure: "erasing users removes their events; sequences are never reused"
      case .concurrentFollower: "concurrent appends: a reader following the log sees every event once, in order"
      case .writesLogEvents: "writes of purchase data log their events in the same commit, each once, detected at the write's time"
      case .transitionsByTime: "changes by time alone are logged by the transition scheduler once, when due, and the schedule follows"
      case .transitionBatches: "the scheduler takes at most `limit` users per call, most overdue first, and resumes where it stopped"
      case .transitionErasure: "erasing a user removes its schedule: the scheduler never comes back for it"
      }
    }
  }

  /// Runs one case against `store`, which must be fresh and empty.
  package static func run(_ test: Case, _ store: Subject) async throws {
    switch test {
    case .appendAndRead: try await appendAndRead(store)
    case .deduplication: try await deduplication(store)
    case .filters: try await filters(store)
    case .paging: try await paging(store)
    case .erasure: try await erasure(store)
    case .concurrentFollower: try await concurrentFollower(store)
    case .writesLogEvents: try await writesLogEvents(store)
    case .transitionsByTime: try await transitionsByTime(store)
    case .transitionBatches: try await transitionBatches(store)
    case .transitionErasure: try await transitionErasure(store)
    }
  }

  /// A hand-built event of app a1's user `user` in production unless given.
  package static func event(
    _ id: String, user: String = "u1", app: String = "a1", environment: Environment = .production,
    type: SubscriptionEventType = .renewed, occurred: Int64 = 100
  ) -> SubscriptionEvent {
    SubscriptionEvent(
      eventId: id, appId: app, userId: user, environment: environment, type: type,
      occurredMs: occurred, detectedMs: occurred + 1, subscriptionGroupId: "g1",
      productId: "monthly", transactionId: "t-\(id)", originalTransactionId: "o1",
      stateBefore: .active, stateAfter: .active, offer: SubscriptionEventOffer.none,
      priceMilliunits: 9_990, currency: "EUR")
  }

  /// Every event of the app after `after` matching `query`, read in pages of `size`.
  package static func readAll(
    _ store: Subject, app: String = "a1", query: EventQuery = EventQuery(), after: Int64 = 0,
    size: Int = 1000
  ) async throws -> [LoggedEvent] {
    var out: [LoggedEvent] = []
    var cursor = after
    while true {
      let page = try await store.events(appId: app, query: query, afterSequence: cursor, limit: size)
      out += page
      guard let last = page.last, page.count == size else { return out }
      cursor = last.sequence
    }
  }

  /// appended events come back in log order with increasing sequences, per app
  static func appendAndRead(_ store: Subject) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    #expect(try await store.lastEventSequence() == 0)
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 10).isEmpty)

    var everyField = event("e1")
    everyField.offerId = "offer-1"
    everyField.expirationReason = "voluntary"
    everyField.previousProductId = "weekly"
    everyField.previousUserId = "u0"
    let first = try await store.appendEvents([everyField, event("e2", type: .billingIssue)])
    let second = try await store.appendEvents([event("x1", app: "a2"), event("e3", type: .expired)])
    #expect(first.map(\.event) == [everyField, event("e2", type: .billingIssue)])
    let sequences = (first + second).map(\.sequence)
    #expect(sequences == sequences.sorted() && Set(sequences).count == 4 && sequences[0] > 0)
    #expect(try await store.lastEventSequence() == sequences.last)

    let a1 = try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 10)
    #expect(a1 == [first[0], first[1], second[1]])
    #expect(try await store.events(appId: "a2", query: EventQuery(), afterSequence: 0, limit: 10) == [second[0]])
    // A minimal event (no optional field) round-trips too.
    let bare = SubscriptionEvent(
      eventId: "bare", appId: "a1", userId: "u1", environment: .sandbox, type: .oneTimePurchased,
      occurredMs: -5, detectedMs: 7)
    let logged = try await store.appendEvents([bare])
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: second[1].sequence, limit: 10) == logged)

    await expectStoreError(.notFound) {
      try await store.events(appId: "zz", query: EventQuery(), afterSequence: 0, limit: 10)
    }
    await expectStoreError(.notFound) { try await store.appendEvents([event("z", app: "zz")]) }
  }

  /// an event id already logged is never appended again
  static func deduplication(_ store: Subject) async throws {
    try await Fixture.seed(store)
    let first = try await store.appendEvents([event("e1"), event("e2"), event("e1")])
    #expect(first.map(\.event.eventId) == ["e1", "e2"])
    let last = try await store.lastEventSequence()
    // The same ids again, even with other contents (a later detection): nothing appended.
    var later = event("e2")
    later.detectedMs = 99_999
    #expect(try await store.appendEvents([event("e1"), later]).isEmpty)
    #expect(try await store.lastEventSequence() == last)
    let again = try await store.appendEvents([event("e2"), event("e3")])
    #expect(again.map(\.event.eventId) == ["e3"])
    #expect(again[0].sequence > last)
    #expect(try await readAll(store).map(\.event.eventId) == ["e1", "e2", "e3"])
    #expect(try await readAll(store)[1].event == event("e2"))
  }

  /// filters: user in both environments, types, environment, occurrence range
  static func filters(_ store: Subject) async throws {
    try await Fixture.seed(store)
    _ = try await store.appendEvents([
      event("1", user: "u1", type: .subscriptionStarted, occurred: 10),
      event("2", user: "u2", type: .subscriptionStarted, occurred: 20),
      event("3", user: "u1", environment: .sandbox, type: .renewed, occurred: 30),
      event("4", user: "u2", type: .expired, occurred: 40),
      event("5", user: "u1", type: .expired, occurred: 50),
      event("6", user: "u10", type: .renewed, occurred: 60),
    ])
    func ids(_ query: EventQuery) async throws -> [String] {
      try await readAll(store, query: query).map(\.event.eventId)
    }
    #expect(try await ids(EventQuery()) == ["1", "2", "3", "4", "5", "6"])
    #expect(try await ids(EventQuery(userId: "u1")) == ["1", "3", "5"])
    #expect(try await ids(EventQuery(userId: "u1", environment: .production)) == ["1", "5"])
    #expect(try await ids(EventQuery(userId: "nobody")) == [])
    #expect(try await ids(EventQuery(types: [.expired])) == ["4", "5"])
    #expect(try await ids(EventQuery(types: [.expired, .renewed])) == ["3", "4", "5", "6"])
    #expect(try await ids(EventQuery(environment: .sandbox)) == ["3"])
    #expect(try await ids(EventQuery(occurredFromMs: 20, occurredBeforeMs: 50)) == ["2", "3", "4"])
    #expect(try await ids(EventQuery(occurredBeforeMs: 10)) == [])
    #expect(
      try await ids(EventQuery(userId: "u2", types: [.expired], environment: .production, occurredFromMs: 40)) == ["4"])
    // Filters apply before the limit: a page holds up to `limit` matching events.
    let page = try await store.events(appId: "a1", query: EventQuery(types: [.expired]), afterSequence: 0, limit: 1)
    #expect(page.map(\.event.eventId) == ["4"])
    let next = try await store.events(
      appId: "a1", query: EventQuery(types: [.expired]), afterSequence: page[0].sequence, limit: 1)
    #expect(next.map(\.event.eventId) == ["5"])
  }

  /// reads page after a sequence without gaps or repeats; limits are clamped
  static func paging(_ store: Subject) async throws {
    try await Fixture.seed(store)
    _ = try await store.appendEvents((0..<25).map { event("e\($0)", occurred: Int64($0)) })
    let all = try await readAll(store, size: 7)
    #expect(all.map(\.event.eventId) == (0..<25).map { "e\($0)" })
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 0).count == 1)
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: -3).count == 1)
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 5_000).count == 25)
    let tail = try await store.events(appId: "a1", query: EventQuery(), afterSequence: all[20].sequence, limit: 100)
    #expect(tail == Array(all[21...]))
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: all[24].sequence, limit: 100).isEmpty)
    _ = try await store.appendEvents([event("late")])
    try #require(try await readAll(store, size: 1000).count == 26)
    // A second store call with more than 1000 matching events is clamped to 1000.
    _ = try await store.appendEvents((0..<1_001).map { event("bulk\($0)") })
    #expect(try await store.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 2_000).count == 1000)
  }

  /// erasing users removes their events; sequences are never reused
  static func erasure(_ store: Subject) async throws {
    try await Fixture.seed(store)
    try await store.createApp(Fixture.app("a2"))
    _ = try await store.appendEvents([
      event("1", user: "gone"), event("2", user: "kept"), event("3", user: "gone", environment: .sandbox),
      event("4", user: "gone", app: "a2"),
    ])
    let last = try await store.appendEvents([event("5", user: "gone")])
    let end = last[0].sequence
    #expect(try await store.eventCount(appId: "a1", afterSequence: 0, throughSequence: end) == 4)
    _ = try await store.deleteUsers(appId: "a1", userIds: ["gone"])
    // The count of a range tells a copy of it that an erasure came.
    #expect(try await store.eventCount(appId: "a1", afterSequence: 0, throughSequence: end) == 1)
    #expect(try await store.eventCount(appId: "a2", afterSequence: 0, throughSequence: end) == 1)
    #expect(try await store.eventCount(appId: "a1", afterSequence: end, throughSequence: end + 10) == 0)
    #expect(try await readAll(store).map(\.event.eventId) == ["2"])
    #expect(try await readAll(store, query: EventQuery(userId: "gone")).isEmpty)
    // The same id in another app is another user.
    #expect(try await readAll(store, app: "a2").map(\.event.eventId) == ["4"])
    // The numbers of the erased events are not handed out again; the erased ids can come back.
    let fresh = try await store.appendEvents([event("1", user: "gone"), event("6")])
    #expect(fresh.map(\.event.eventId) == ["1", "6"])
    #expect(fresh.allSatisfy { $0.sequence > last[0].sequence })
  }

  /// concurrent appends: a reader following the log sees every event once, in order
  static func concurrentFollower(_ store: Subject) async throws {
    try await Fixture.seed(store)
    let writers = 4
    let perWriter = 30
    let total = writers * perWriter
    try await withThrowingTaskGroup(of: Void.self) { group in
      for w in 0..<writers {
        group.addTask {
          for i in 0..<perWriter {
            _ = try await store.appendEvents([event("w\(w)-\(i)", user: "u\(w)")])
          }
        }
      }
      var seen: [LoggedEvent] = []
      var cursor: Int64 = 0
      var idleRounds = 0
      while seen.count < total, idleRounds < 10_000 {
        let page = try await store.events(appId: "a1", query: EventQuery(), afterSequence: cursor, limit: 17)
        if page.isEmpty {
          idleRounds += 1
          await Task.yield()
          continue
        }
        seen += page
        cursor = page.last!.sequence
      }
      try await group.waitForAll()
      seen += try await readAll(store, after: cursor)
      #expect(seen.count == total)
      #expect(Set(seen.map(\.event.eventId)).count == total)
      #expect(seen.map(\.sequence) == seen.map(\.sequence).sorted())
      // Each writer's events in its own order.
      for w in 0..<writers {
        #expect(
          seen.map(\.event.eventId).filter { $0.hasPrefix("w\(w)-") }
            == (0..<perWriter).map { "w\(w)-\($0)" })
      }
    }
  }
}
