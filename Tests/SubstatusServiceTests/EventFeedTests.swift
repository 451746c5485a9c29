import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import Synchronization
import Testing
@testable import SubstatusService

/// The WatchEvents streams of one app share one read of the log (``EventFeed``).
@Suite struct EventFeedTests {
  /// The in-memory store's log, counting the reads of events.
  final class CountingLog: EventLogStore {
    let store: InMemoryStore
    let reads = Atomic<Int>(0)

    init(_ store: InMemoryStore) { self.store = store }

    func events(appId: String, query: EventQuery, afterSequence: Int64, limit: Int) async throws(StoreError)
      -> [LoggedEvent]
    {
      reads.add(1, ordering: .relaxed)
      return try await store.events(appId: appId, query: query, afterSequence: afterSequence, limit: limit)
    }

    func lastEventSequence() async throws(StoreError) -> Int64 { try await store.lastEventSequence() }

    func eventCount(appId: String, afterSequence: Int64, throughSequence: Int64) async throws(StoreError) -> Int {
      try await store.eventCount(appId: appId, afterSequence: afterSequence, throughSequence: throughSequence)
    }

    func appendDueTransitionEvents(atMs: Int64, limit: Int) async throws(StoreError) -> [LoggedEvent] {
      try await store.appendDueTransitionEvents(atMs: atMs, limit: limit)
    }

    func nextTransitionDueMs() async throws(StoreError) -> Int64? { try await store.nextTransitionDueMs() }
  }

  @Test func theStreamsOfAnAppShareOneReadOfTheLogAndEachTakesWhatItsFiltersPass() async throws {
    let store = InMemoryStore()
    try await Fixture.seed(store)
    let log = CountingLog(store)
    let (feed, signal) = (EventFeed(), EventSignal())
    let start = try await store.lastEventSequence()
    for _ in 0..<10 { feed.join(appId: "a1", at: start) }
    let events = try await WebhookContract.addEvents(store, users: ["u1", "u2", "u1"])
    signal.signal()
    let seen = signal.generation

    let pages = try await withThrowingTaskGroup(of: EventFeed.Page?.self) { group in
      for _ in 0..<10 {
        group.addTask {
          try await feed.read(
            appId: "a1", query: EventQuery(), after: start, limit: 100, seen: seen, signal: signal, store: log)
        }
      }
      return try await group.reduce(into: []) { $0.append($1) }
    }
    #expect(pages.count == 10)
    for page in pages {
      #expect(page?.entries.map(\.event) == events.map(\.event))
      #expect(page?.entries.map { $0.message.event?.eventID ?? "" } == events.map(\.event.eventId))
    }
    #expect(log.reads.load(ordering: .relaxed) == 1, "ten streams, one read")

    // A user's stream: only that user's events, and the position read through, with no new read.
    let u1 = try await feed.read(
      appId: "a1", query: EventQuery(userId: "u1"), after: start, limit: 100, seen: seen, signal: signal, store: log)
    #expect(u1?.entries.map(\.event.userId) == ["u1", "u1"])
    #expect(u1?.through == events.last?.sequence)
    // The limit: the first events only.
    let first = try await feed.read(
      appId: "a1", query: EventQuery(), after: start, limit: 1, seen: seen, signal: signal, store: log)
    #expect(first?.entries.map(\.sequence) == [events[0].sequence])
    #expect(log.reads.load(ordering: .relaxed) == 1)

    // New events and a signal: one more read for everyone.
    let more = try await WebhookContract.addEvents(store, users: ["u3"])
    signal.signal()
    let next = try await feed.read(
      appId: "a1", query: EventQuery(), after: events.last!.sequence, limit: 100, seen: signal.generation,
      signal: signal, store: log)
    #expect(next?.entries.map(\.event) == more.map(\.event))
    #expect(log.reads.load(ordering: .relaxed) == 2)

    // Behind the feed's start: the stream reads the store itself.
    #expect(
      try await feed.read(
        appId: "a1", query: EventQuery(), after: start - 1, limit: 100, seen: seen, signal: signal, store: log) == nil)
    // The last stream leaving drops the feed.
    for _ in 0..<10 { feed.leave(appId: "a1") }
    #expect(
      try await feed.read(appId: "a1", query: EventQuery(), after: start, limit: 100, seen: seen, signal: signal, store: log)
        == nil)
  }

  @Test func theFeedKeepsAWindowAndAStreamBehindItGetsNothingFromIt() async throws {
    let store = InMemoryStore()
    try await Fixture.seed(store)
    let log = CountingLog(store)
    let (feed, signal) = (EventFeed(), EventSignal())
    let start = try await store.lastEventSequence()
    feed.join(appId: "a1", at: start)
    _ = try await WebhookContract.addEvents(store, users: (0..<(EventFeed.window + 10)).map { "u\($0)" })
    var events: [LoggedEvent] = []
    while true {
      let page = try await store.events(
        appId: "a1", query: EventQuery(), afterSequence: events.last?.sequence ?? start, limit: 1000)
      events += page
      if page.count < 1000 { break }
    }
    #expect(events.count == EventFeed.window + 10)
    signal.signal()
    let newest = try await feed.read(
      appId: "a1", query: EventQuery(), after: events[9].sequence, limit: EventFeed.window, seen: signal.generation,
      signal: signal, store: log)
    #expect(newest?.entries.map(\.event) == events.suffix(EventFeed.window).map(\.event))
    // From the middle of the window: the bisection finds the next one.
    let middle = try await feed.read(
      appId: "a1", query: EventQuery(), after: events[1000].sequence, limit: 2, seen: signal.generation,
      signal: signal, store: log)
    #expect(middle?.entries.map(\.sequence) == [events[1001].sequence, events[1002].sequence])
    // The ten oldest fell out of the window: a stream before them reads the store.
    #expect(
      try await feed.read(
        appId: "a1", query: EventQuery(), after: events[8].sequence, limit: 1000, seen: signal.generation,
        signal: signal, store: log) == nil)
  }

  /// How an erasure reaches the feed: who erased (this instance, which tells the feed; another
  /// instance sharing the database, which does not) and what reads next (a new stream's first
  /// read; an open stream's read after a signal).
  enum ErasureCase: String, CaseIterable, CustomTestStringConvertible {
    case hereThenNewStream, elsewhereThenNewStream, elsewhereThenSignal
    var testDescription: String { rawValue }
  }

  @Test(arguments: ErasureCase.allCases)
  func anErasedUsersEventsLeaveTheFeed(_ test: ErasureCase) async throws {
    let store = InMemoryStore()
    try await Fixture.seed(store)
    let log = CountingLog(store)
    let (feed, signal) = (EventFeed(), EventSignal())
    let start = try await store.lastEventSequence()
    feed.join(appId: "a1", at: start)
    let events = try await WebhookContract.addEvents(store, users: ["gone", "kept"])
    signal.signal()
    let all = try await feed.read(
      appId: "a1", query: EventQuery(), after: start, limit: 100, seen: signal.generation, signal: signal, store: log)
    #expect(all?.entries.map(\.event.userId) == events.map(\.event.userId))

    _ = try await store.deleteUsers(appId: "a1", userIds: ["gone"])
    if test == .hereThenNewStream { feed.forget(appId: "a1") }
    if test == .elsewhereThenSignal { signal.signal() }
    feed.join(appId: "a1", at: start)
    let page = try await feed.read(
      appId: "a1", query: EventQuery(), after: start, limit: 100, seen: signal.generation, signal: signal, store: log,
      first: test != .elsewhereThenSignal)
    // The window no longer holds the erased events: the stream reads the store (nil), which
    // has none of them.
    #expect(page.map { $0.entries.contains { $0.event.userId == "gone" } } != true)
    #expect(page == nil || page?.entries.isEmpty == true)
    let stored = try await store.events(appId: "a1", query: EventQuery(), afterSequence: start, limit: 100)
    #expect(!stored.contains { $0.event.userId == "gone" })
    // What comes next is shared again.
    let more = try await WebhookContract.addEvents(store, users: ["new"])
    signal.signal()
    let next = try await feed.read(
      appId: "a1", query: EventQuery(), after: events.last!.sequence, limit: 100, seen: signal.generation,
      signal: signal, store: log)
    #expect(next?.entries.map(\.event) == more.map(\.event))
  }
}
