import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubscriptionStorageTesting
import StoreContractTesting
import Testing

/// The Store implementations the contract suite runs against.
enum StoreKind: String, CaseIterable, CustomTestStringConvertible {
  case inMemory
  case sqliteFile
  /// SQLite with a history cache so small that entries are evicted all the time.
  case sqliteTinyHistoryCache

  var testDescription: String { rawValue }
}

/// A temporary directory removed at the end of a test.
final class TemporaryDirectory: Sendable {
  let path: String

  init() {
    path =
      FileManager.default.temporaryDirectory
      .appendingPathComponent("substatus-storage-\(UUID().uuidString)").path
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  }

  func file(_ name: String) -> String { path + "/" + name }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A fixed master keyring for tests.
let testKeyring = MasterKeyring(current: try! MasterKey(bytes: [UInt8](repeating: 0x42, count: 32)))

/// Runs `body` with a fresh, empty store of `kind`, closing and deleting it afterwards.
func withStore<T>(
  _ kind: StoreKind, _ body: (any Store) async throws -> T
) async throws -> T {
  switch kind {
  case .inMemory:
    return try await body(InMemoryStore())
  case .sqliteFile, .sqliteTinyHistoryCache:
    let dir = TemporaryDirectory()
    let store = try SQLiteStore(
      configuration: .init(
        path: dir.file("store.sqlite"), keyring: testKeyring, readerCount: 2,
        historyCacheBytes: kind == .sqliteTinyHistoryCache ? 64 << 10 : 32 << 20))
    defer { store.close() }
    return try await body(store)
  }
}
