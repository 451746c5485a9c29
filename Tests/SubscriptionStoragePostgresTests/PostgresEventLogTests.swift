import Foundation
import Synchronization
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// The event log contract (``EventLogContract``) against PostgreSQL, each case on its own database.
@Suite("PostgreSQL event log contract")
struct PostgresEventLogContractTests {
  @Test(arguments: EventLogContract.Case.allCases)
  func eventLog(_ test: EventLogContract.Case) async throws {
    try await withPostgresStore { store in try await EventLogContract.run(test, store) }
  }
}

/// The event log with several instances on one database.
@Suite("PostgreSQL event log across instances")
struct PostgresEventLogInstanceTests {
  private func open(_ url: String) throws -> PostgresStore {
    try PostgresStore(configuration: .init(url: url, keyring: testKeyring, poolSize: 3))
  }

  /// Two instances append in many concurrent transactions (several events each, so a transaction
  /// stays open a while after taking its numbers) while a third follows the log from its cursor, as
  /// WatchEvents does: it must see every event exactly once and in increasing order. Without the
  /// advisory lock a transaction that took lower numbers could commit after the reader had moved
  /// past a higher one, and the reader would never see them.
  @Test(.timeLimit(.minutes(1)))
  func aReaderFollowingTheLogMissesNothingWhileTwoInstancesWrite() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let writers = [try open(url), try open(url)]
    let reader = try open(url)
    defer {
      for s in writers { s.close() }
      reader.close()
    }
    try await Fixture.seed(writers[0])
    let tasksPerWriter = 3
    let rounds = 25
    let perTransaction = 8
    let total = writers.count * tasksPerWriter * rounds * perTransaction
    let writersDone = Atomic<Bool>(false)
    let writing = Task {
      defer { writersDone.store(true, ordering: .releasing) }
      try await withThrowingTaskGroup(of: Void.self) { group in
        for (w, store) in writers.enumerated() {
          for t in 0..<tasksPerWriter {
            group.addTask {
              for r in 0..<rounds {
                let events = (0..<perTransaction).map {
                  EventLogContract.event("w\(w)-\(t)-\(r)-\($0)", user: "u\(w)-\(t)-\($0)")
                }
                _ = try await store.appendEvents(events)
              }
            }
          }
        }
        try await group.waitForAll()
      }
    }
    // Follow from the cursor, as WatchEvents does, until the writers are done and nothing is left.
    var seen: [LoggedEvent] = []
    var cursor: Int64 = 0
    while true {
      let finished = writersDone.load(ordering: .acquiring)
      let page = try await reader.events(appId: "a1", query: EventQuery(), afterSequence: cursor, limit: 1000)
      if let last = page.last {
        seen += page
        cursor = last.sequence
      } else if finished {
        break
      } else {
        try await Task.sleep(for: .milliseconds(1))
      }
    }
    try await writing.value
    #expect(seen.count == total, "the follower missed \(total - seen.count) events")
    #expect(Set(seen.map(\.event.eventId)).count == seen.count)
    #expect(seen.map(\.sequence) == seen.map(\.sequence).sorted())
    #expect(try await reader.lastEventSequence() == seen.last?.sequence)
  }

  /// The race the advisory lock closes, step by step: a transaction takes its sequence and stays
  /// open; another instance appends meanwhile; a reader follows the log. The second append must
  /// not become visible with a higher number while the first is still open (it waits for the
  /// lock), so the reader, which continues after the last sequence it saw, sees both in order.
  @Test(.timeLimit(.minutes(1)))
  func anOpenTransactionsEventIsNotOvertakenByALaterCommit() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let other = try open(url)
    let reader = try open(url)
    defer {
      other.close()
      reader.close()
    }
    try await Fixture.seed(reader)
    let slow = try await blocking { () throws -> PGConnection in
      let db = try PGConnection(conninfo: url)
      try db.execute("BEGIN")
      let key = try PostgresStore.userKey(db, Fixture.user("u1"))
      _ = try PostgresStore.appendEvents(db, [PendingEvents(key: key, events: [EventLogContract.event("first")])])
      return db
    }
    let second = Task { try await other.appendEvents([EventLogContract.event("second", user: "u2")]) }
    // Until the second append either waits for the lock or is visible.
    let observer = try await blocking { try PGConnection(conninfo: url) }
    var seen: [LoggedEvent] = []
    while seen.isEmpty {
      seen = try await reader.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 10)
      let waiting = try await blocking {
        try observer.first("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")?.int(0) ?? 0
      }
      if waiting > 0 { break }
    }
    let cursor = seen.last?.sequence ?? 0
    try await blocking { try slow.execute("COMMIT") }
    _ = try await second.value
    seen += try await EventLogContract.readAll(reader, after: cursor)
    #expect(seen.map(\.event.eventId) == ["first", "second"])
  }

  /// Two instances run the transition scheduler at once: each due user is processed by one of
  /// them (the appended events are disjoint and together complete), and an instance started
  /// afterwards finds nothing left to do.
  @Test(.timeLimit(.minutes(1)))
  func instancesClaimEachDueUserOnceAndANewInstanceFindsNothingLeft() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    defer {
      a.close()
      b.close()
    }
    try await Fixture.seed(a)
    try await a.putProducts(
      appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")])
    let users = 24
    for n in 0..<users {
      let t = Fixture.transaction("t\(n)", purchase: 1_000, expires: 10_000 + Int64(n), signed: 1_000)
      let off = RenewalInfo(
        originalTransactionId: "t\(n)", productId: "monthly", autoRenewStatus: .off, environment: .production,
        signedDate: 1_000)
      _ = try await (n % 2 == 0 ? a : b).ingest(
        [UserPurchases(user: Fixture.user("u\(n)"), transactions: [t], renewalInfos: [off])], atMs: 2_000)
    }
    let runs = try await withThrowingTaskGroup(of: [LoggedEvent].self) { group in
      for store in [a, b, a, b] {
        group.addTask {
          var appended: [LoggedEvent] = []
          while true {
            let batch = try await store.appendDueTransitionEvents(atMs: 50_000, limit: 2)
            if batch.isEmpty { return appended }
            appended += batch
          }
        }
      }
      return try await group.reduce(into: [[LoggedEvent]]()) { $0.append($1) }
    }
    let all = runs.flatMap { $0 }
    #expect(all.count == users)
    #expect(Set(all.map(\.event.userId)).count == users)
    #expect(all.allSatisfy { $0.event.type == .expired && $0.event.detectedMs == 50_000 })
    let restarted = try open(url)
    defer { restarted.close() }
    #expect(try await restarted.appendDueTransitionEvents(atMs: 60_000, limit: 100).isEmpty)
    #expect(try await restarted.nextTransitionDueMs() == nil)
    #expect(try await EventLogContract.readAll(restarted, query: EventQuery(types: [.expired])).count == users)
  }
}
