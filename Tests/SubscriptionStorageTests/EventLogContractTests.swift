import StoreContractTesting
import SubscriptionStorage
import Testing

/// The event log contract (``EventLogContract``) against the in-memory and SQLite stores.
@Suite("Event log contract")
struct EventLogContractTests {
  @Test(arguments: StoreKind.allCases, EventLogContract.Case.allCases)
  func eventLog(kind: StoreKind, test: EventLogContract.Case) async throws {
    try await withStore(kind) { store in
      try await EventLogContract.run(test, try #require(store as? EventLogContract.Subject))
    }
  }
}
