// What every store does the same way when it keeps the event log (``EventLogStore``): one user's
// purchase data as a write sees it (before the write, and after as the write goes), the filters of
// an ``EventQuery``, the page size, and the catalogs the derivation reads. The stores differ only in
// where rows live.
import SubscriptionDomain
import Synchronization

/// One user's stored purchase data as a write sees it: read once before the write (the "before"
/// the event derivation compares with), then updated as the write's merge decisions are made (the
/// "after"), so neither needs a second read.
package struct UserPurchaseState: Sendable, Hashable {
  /// Stored transactions by transaction id.
  package var transactions: [String: Transaction] = [:]
  /// Per original transaction id: the stored renewal info, or its removal by a snapshot.
  package var renewalInfos: [String: RenewalInfoVersion] = [:]

  /// An empty state (a user never seen).
  package init() {}

  /// The history reads return for this state: transactions in purchase order (then by id),
  /// present renewal infos by original transaction id.
  package func history(of user: UserKey) -> UserHistory {
    UserHistory(
      user: user,
      transactions: transactions.values.sorted {
        ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId)
      },
      renewalInfos: renewalInfos.values.compactMap(\.renewalInfo).sorted {
        $0.originalTransactionId < $1.originalTransactionId
      })
  }

  /// Applies the domain's merge to one incoming transaction (rules 13, 14; see ``Store``): the
  /// copy that wins, with the price either copy carries (``Transaction/merging(_:)``: a newer
  /// verifyReceipt copy keeps a StoreKit 2 copy's price).
  /// - Returns: the version now stored and the one it replaces (`nil`: it is new), or `nil` when
  ///   the stored version stays as it is.
  package mutating func merge(_ t: Transaction) -> (stored: Transaction, replaced: Transaction?)? {
    guard let old = transactions[t.transactionId] else {
      transactions[t.transactionId] = t
      return (t, nil)
    }
    if old == t { return nil }
    let merged = old.merging(t)
    if merged == old { return nil }
    transactions[t.transactionId] = merged
    return (merged, old)
  }

  /// Applies the domain's merge to one incoming renewal info or removal.
  /// - Returns: the stored version it replaces (`.some(nil)`: there was none), or `nil` when the
  ///   stored version stays.
  package mutating func merge(_ version: RenewalInfoVersion) -> RenewalInfoVersion?? {
    let old = renewalInfos[version.originalTransactionId]
    if let old, !version.supersedes(old) { return nil }
    renewalInfos[version.originalTransactionId] = version
    return .some(old)
  }
}

/// The parts of the event log every store shares.
package enum EventLogRules {
  /// A read's page size: `limit` clamped to 1...1000.
  package static func pageSize(_ limit: Int) -> Int { min(max(limit, 1), 1000) }

  /// Whether `event` passes `query`'s filters (the app is matched by the caller).
  package static func matches(_ event: SubscriptionEvent, _ query: EventQuery) -> Bool {
    if let userId = query.userId, event.userId != userId { return false }
    if !query.types.isEmpty, !query.types.contains(event.type) { return false }
    if let environment = query.environment, event.environment != environment { return false }
    if let from = query.occurredFromMs, event.occurredMs < from { return false }
    if let before = query.occurredBeforeMs, event.occurredMs >= before { return false }
    return true
  }
}

/// Appends hand-built events to a store's log the way a deriving write does: in one commit, each
/// id once, in the order given. Package-internal: the contract suite checks the log's own rules
/// (sequences, deduplication, filters, paging, erasure) with it; the service writes the log only
/// through purchase-data writes and ``EventLogStore/appendDueTransitionEvents(atMs:limit:)``.
package protocol EventLogAppending {
  /// Appends the events whose ids are not logged yet.
  /// - Returns: the events appended, with their sequences.
  /// - Throws: `notFound` for an unknown app.
  func appendEvents(_ events: [SubscriptionEvent]) async throws(StoreError) -> [LoggedEvent]
}

/// The catalogs the event derivation reads in a write's transaction, built once per version of the
/// stored products: a write reads the app's product payloads (an index range, no decoding), or the
/// store's version number of them, and reuses the catalog built from the same bytes or version.
/// Always what the transaction sees, whichever instance or method changed the products.
package final class EventCatalogCache: Sendable {
  /// What a catalog was built from: its products' bytes, or a store's version number of them.
  private enum Source: Equatable, Sendable {
    case payloads([[UInt8]])
    case version(Int64)
  }
  private struct Entry: Sendable {
    var source: Source
    var catalog: Catalog
  }
  private let entries = Mutex<[String: Entry]>([:])

  /// An empty cache.
  package init() {}

  /// The catalog of `appId` made of `payloads` (the JSON of its products, in product id order).
  /// - Throws: `corrupt` when a payload cannot be decoded.
  package func catalog(appId: String, payloads: [[UInt8]]) throws(StoreError) -> Catalog {
    try catalog(appId: appId, source: .payloads(payloads)) { () throws(StoreError) in payloads }
  }

  /// The catalog of `appId` at `version`, a number the store changes in the same transaction as
  /// any change of the app's products (so equal versions mean equal products, whichever instance
  /// wrote them): `payloads` (as for ``catalog(appId:payloads:)``) is read only for a version this
  /// cache has not built.
  /// - Throws: `corrupt` when a payload cannot be decoded; what `payloads` throws.
  package func catalog(
    appId: String, version: Int64, payloads: () throws(StoreError) -> [[UInt8]]
  ) throws(StoreError) -> Catalog {
    try catalog(appId: appId, source: .version(version), payloads: payloads)
  }

  private func catalog(
    appId: String, source: Source, payloads: () throws(StoreError) -> [[UInt8]]
  ) throws(StoreError) -> Catalog {
    if let entry = entries.withLock({ $0[appId] }), entry.source == source { return entry.catalog }
    let bytes = try payloads()
    var products: [Product] = []
    products.reserveCapacity(bytes.count)
    for p in bytes { products.append(try PayloadCodec.decodeJSON(Product.self, p)) }
    let catalog = Catalog(products: products)
    entries.withLock { $0[appId] = Entry(source: source, catalog: catalog) }
    return catalog
  }
}
