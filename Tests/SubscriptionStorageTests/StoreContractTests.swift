import SubscriptionStorage
import StoreContractTesting
import Testing

/// The shared contract suite (``StoreContract``) against the in-memory and SQLite stores.
@Suite("Store contract")
struct StoreContractTests {
  @Test(arguments: StoreKind.allCases, StoreContract.Case.allCases)
  func contract(kind: StoreKind, test: StoreContract.Case) async throws {
    try await withStore(kind) { store in try await StoreContract.run(test, store) }
  }
}
