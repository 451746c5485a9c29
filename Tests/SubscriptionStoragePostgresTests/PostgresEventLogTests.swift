import Foundation
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
      var seen: [LoggedEvent] = []
      var cursor: Int64 = 0
      let deadline = Date().addingTimeInterval(40)
      while seen.count < total, Date() < deadline {
        let page = try await reader.events(
          appId: "a1", query: EventQuery(), afterSequence: cursor, limit: 50)
        if let last = page.last {
          seen += page
          cursor = last.sequence
        } else {
          try await Task.sleep(for: .milliseconds(1))
        }
      }
      try await group.waitForAll()
      #expect(seen.count == total, "the follower missed \(total - seen.count) events")
      #expect(Set(seen.map(\.event.eventId)).count == seen.count)
      #expect(seen.map(\.sequence) == seen.map(\.sequence).sorted())
      #expect(try await reader.lastEventSequence() == seen.last?.sequence)
    }
  }
}
