// Per-user summaries in the stores (docs/evaluation-cache.md "Per-user summaries"): one row per user, written in the
// commit of every write that changes the user's data or ownership, read by the service in place
// of the history while it holds, and rewritten by the service after a fallback only when no write
// came in between (compare-and-set on the row's stamp).
import SubscriptionDomain
import Synchronization

/// A user's stored summary (``PurchaseStore/summaries(appId:environment:userIds:)``).
public struct StoredSummary: Sendable, Hashable {
  /// The stamp of the write that stored the user's data last: a random number drawn by each
  /// write (a read-path rewrite keeps it). A rewrite names the stamp it read
  /// (``SummaryRewrite/expectedStamp``) and is refused when another write came since.
  public var stamp: Int64
  /// The stored bytes with their header read, each section decoded only when a read asks for it;
  /// `nil` when the header cannot be read (another format version): the reader falls back to the
  /// history and rewrites it.
  public var encoded: UserSummary.Encoded?

  /// The whole summary (every section decoded); `nil` when the stored bytes cannot be decoded.
  public var summary: UserSummary? { try? encoded?.decoded() }

  /// A stored summary as a store reads it.
  public init(stamp: Int64, encoded: UserSummary.Encoded?) {
    self.stamp = stamp
    self.encoded = encoded
  }

  /// A stored summary of a decoded one (tests).
  public init(stamp: Int64, summary: UserSummary?) {
    self.init(stamp: stamp, encoded: summary.flatMap { try? UserSummary.Encoded($0.encoded()) })
  }
}

/// A summary the read path computed from the history after a fallback, to store if no write
/// changed the user's data since it was read (``PurchaseStore/rewriteSummaries(appId:environment:_:)``).
public struct SummaryRewrite: Sendable, Hashable {
  /// The user.
  public var userId: String
  /// The ``StoredSummary/stamp`` read before the history was; `nil`: no summary was stored, and
  /// the rewrite then stores one only while there is none and the user still has data (an erasure
  /// in between wins).
  public var expectedStamp: Int64?
  /// The summary computed from the history read after the stamp.
  public var summary: UserSummary

  /// Creates a rewrite.
  public init(userId: String, expectedStamp: Int64?, summary: UserSummary) {
    self.userId = userId
    self.expectedStamp = expectedStamp
    self.summary = summary
  }
}

/// What every store computes for a user in a write's commit.
package enum UserSummaryRows {
  /// A new write's stamp (``StoredSummary/stamp``): random, so a rewrite cannot mistake a later
  /// write (or a user erased and created again) for the one it read.
  package static func newStamp() -> Int64 { Int64.random(in: 1...Int64.max) }

  /// The summary of a user's stored data at the write's instant, with its ownership gaps, for the
  /// app's catalog and policy as the commit reads them.
  package static func summary(
    of state: UserPurchaseState, gaps: [OwnershipGap], catalog: Catalog, policy: EligibilityPolicy,
    atMs: Int64
  ) -> UserSummary {
    UserSummary(
      transactions: Array(state.transactions.values), renewals: state.renewalInfos.values.compactMap(\.renewalInfo),
      gaps: gaps, catalog: catalog, policy: policy, at: atMs)
  }

  /// A stored row's bytes with their header read (``StoredSummary/encoded``); `nil` for bytes
  /// this build cannot read.
  package static func decode(_ bytes: [UInt8]) -> UserSummary.Encoded? {
    try? UserSummary.Encoded(bytes)
  }
}

/// The apps' policies as the SQL stores' commits read them (their JSON), decoded once per app and
/// JSON: each write's summary needs the whole policy, and decoding it for every commit costs.
package final class PolicyCache: Sendable {
  private let entries = Mutex<[String: (json: [UInt8], policy: EligibilityPolicy)]>([:])

  /// An empty cache.
  package init() {}

  /// The policy of `appId` stored as `json`.
  /// - Throws: `corrupt` when the JSON cannot be decoded.
  package func policy(appId: String, json: [UInt8]) throws(StoreError) -> EligibilityPolicy {
    if let entry = entries.withLock({ $0[appId] }), entry.json == json { return entry.policy }
    let policy = try PayloadCodec.decodeJSON(EligibilityPolicy.self, json)
    entries.withLock { $0[appId] = (json, policy) }
    return policy
  }
}
