// Purchase sharing in the stores: who owns an original transaction that several users of an app
// submitted (docs/architecture.md "Access model"). The rules live here once; each store only
// reads and writes its rows through an ``OwnershipLedger`` inside the ingest's own commit.
import SubscriptionDomain

/// One change of owner of an original transaction: under ``SubscriptionDomain/PurchaseSharing/transfer``
/// a submission by `newUserId` took it from `previousUserId` (one record per previous owner).
/// Stores keep every transfer in the commit of the submission that made it; it is what an
/// `OWNERSHIP_TRANSFERRED` event is derived from. Erasing either user erases the record.
public struct OwnershipTransfer: Sendable, Hashable, Codable {
  /// The app.
  public var appId: String
  /// The environment of the original transaction.
  public var environment: Environment
  /// The original transaction that changed owner.
  public var originalTransactionId: String
  /// Who lost it.
  public var previousUserId: String
  /// Who has it since ``atMs``.
  public var newUserId: String
  /// The instant of the submission (the server's clock at ingest).
  public var atMs: Int64

  /// Creates a record.
  public init(
    appId: String, environment: Environment, originalTransactionId: String, previousUserId: String,
    newUserId: String, atMs: Int64
  ) {
    self.appId = appId
    self.environment = environment
    self.originalTransactionId = originalTransactionId
    self.previousUserId = previousUserId
    self.newUserId = newUserId
    self.atMs = atMs
  }
}

/// An original transaction of an update that was not stored for its user because another user
/// owns it: a submission under ``SubscriptionDomain/PurchaseSharing/keepFirst``, or a write that is
/// not a submission (which never changes owners) under a policy other than SHARE.
public struct OwnershipRefusal: Sendable, Hashable {
  /// The user whose update it was.
  public var user: UserKey
  /// The original transaction refused: none of its transactions and renewal infos was stored.
  public var originalTransactionId: String

  /// Creates a refusal.
  public init(user: UserKey, originalTransactionId: String) {
    self.user = user
    self.originalTransactionId = originalTransactionId
  }
}

/// What a store's ingest commit reads and writes of ownership, for one app and environment. The
/// store implements it over its own tables, in the same transaction as the purchase data.
package protocol OwnershipLedger {
  /// The users whose stored transactions hold `originalTransactionId` (owners or not).
  mutating func holders(of originalTransactionId: String) throws(StoreError) -> Set<String>
  /// The users whose gap on `originalTransactionId` is open (they lost it and own it no more).
  mutating func usersWithOpenGap(on originalTransactionId: String) throws(StoreError) -> Set<String>
  /// Records a gap of `userId` (``SubscriptionDomain/OwnershipGap``).
  mutating func insertGap(userId: String, _ gap: OwnershipGap) throws(StoreError)
  /// Closes `userId`'s open gap on `originalTransactionId` at `atMs` (they own it again).
  mutating func closeGap(userId: String, originalTransactionId: String, atMs: Int64) throws(StoreError)
  /// Records a transfer.
  mutating func recordTransfer(_ transfer: OwnershipTransfer) throws(StoreError)
}

/// An app's purchase sharing as an ingest commit reads it (each SQL store reads it from its `apps`
/// row in the commit).
package struct OwnershipPolicy: Sendable {
  /// The app's policy.
  package var sharing: PurchaseSharing
  /// Whether the policy was ever other than SHARE (``AppRecord/ownershipTracked``).
  package var tracked: Bool

  /// Creates a policy.
  package init(sharing: PurchaseSharing, tracked: Bool) {
    self.sharing = sharing
    self.tracked = tracked
  }

  /// Whether the app has ownership rows to read (its policy left SHARE at some time).
  package var needsLedger: Bool { tracked || sharing != .share }
}

/// The purchase sharing rules a store applies to each update of an ingest, in its commit.
public enum PurchaseOwnership {
  /// The pseudo-user that holds what Apple's notifications brought for an original transaction no
  /// user has submitted yet (so nothing is lost). It is never an owner: the rules ignore it.
  public static func unclaimedUserId(originalTransactionId: String) -> String {
    "apple:\(originalTransactionId)"
  }

  /// Settles who owns the original transactions of one user's update and returns those not to
  /// store for the user, with the transfers made.
  ///
  /// - A submission (`submittedMs` set) follows `sharing`: SHARE gives the user the original
  ///   transaction (again, if they had lost it); TRANSFER takes it from its other owners at
  ///   `submittedMs` (a user who had no copy of it did not own it before); KEEP_FIRST refuses it
  ///   when another user owns it.
  /// - Any other write (a notification, a background refresh) changes no owner: its data is
  ///   stored for a user who holds the original transaction, and for one who does not only under
  ///   SHARE or when nobody owns it.
  /// - An app whose policy never left SHARE (`tracked` false) has no ownership rows: nothing is
  ///   read, nothing refused.
  ///
  /// - Parameters:
  ///   - user: whose update it is.
  ///   - originalTransactionIds: the original transactions of its transactions and renewal infos.
  ///   - submittedMs: the instant of a submission (the server's clock); `nil` for other writes.
  ///   - sharing: the app's policy at the commit.
  ///   - tracked: whether the app's policy was ever other than SHARE (``AppRecord/ownershipTracked``).
  ///   - ledger: the store's rows, in the commit.
  ///   - assigned: the original transactions of the update whose ownership is `ASSIGNED` (rule 23:
  ///     an organization's assignment is never moved between app users, so TRANSFER keeps it with
  ///     its first owner, as KEEP_FIRST does).
  package static func settle<Ledger: OwnershipLedger>(
    user: UserKey, originalTransactionIds: Set<String>, submittedMs: Int64?,
    sharing: PurchaseSharing, tracked: Bool, ledger: inout Ledger, assigned: Set<String> = []
  ) throws(StoreError) -> (refused: [String], transfers: [OwnershipTransfer]) {
    guard tracked || sharing != .share else { return ([], []) }
    var refused: [String] = []
    var transfers: [OwnershipTransfer] = []
    for otid in originalTransactionIds.sorted() {
      let unclaimed = unclaimedUserId(originalTransactionId: otid)
      if user.userId == unclaimed { continue }
      var holders = try ledger.holders(of: otid)
      holders.remove(unclaimed)
      let lost = try ledger.usersWithOpenGap(on: otid)
      let holds = holders.contains(user.userId)
      let hasLost = lost.contains(user.userId)
      let others = holders.subtracting(lost).subtracting([user.userId])
      guard let at = submittedMs else {
        if !holds && sharing != .share && !others.isEmpty { refused.append(otid) }
        continue
      }
      switch assigned.contains(otid) && sharing == .transfer ? .keepFirst : sharing {
      case .share:
        if hasLost { try ledger.closeGap(userId: user.userId, originalTransactionId: otid, atMs: at) }
      case .transfer:
        for previous in others.sorted() {
          try ledger.insertGap(
            userId: previous, OwnershipGap(originalTransactionId: otid, fromMs: at, untilMs: nil))
          let transfer = OwnershipTransfer(
            appId: user.appId, environment: user.environment, originalTransactionId: otid,
            previousUserId: previous, newUserId: user.userId, atMs: at)
          try ledger.recordTransfer(transfer)
          transfers.append(transfer)
        }
        if hasLost {
          try ledger.closeGap(userId: user.userId, originalTransactionId: otid, atMs: at)
        } else if !holds && !others.isEmpty {
          try ledger.insertGap(
            userId: user.userId, OwnershipGap(originalTransactionId: otid, fromMs: nil, untilMs: at))
        }
      case .keepFirst:
        if holds && !hasLost { continue }
        if !others.isEmpty {
          refused.append(otid)
        } else if hasLost {
          try ledger.closeGap(userId: user.userId, originalTransactionId: otid, atMs: at)
        }
      }
    }
    return (refused, transfers)
  }

  /// Applies purchase sharing to one encoded update in a SQL store's commit (``settle(user:originalTransactionIds:submittedMs:sharing:tracked:ledger:)``)
  /// and returns what to store; refusals and transfers go to `summary`.
  ///
  /// - Parameters:
  ///   - update: the update as submitted.
  ///   - policy: its app's policy, read in the commit (`nil`: the app is not in the batch's policies).
  ///   - summary: the ingest's summary.
  ///   - ledger: the store's ledger for the update's app and environment (read only when the
  ///     policy needs it).
  package static func settle<Ledger: OwnershipLedger>(
    _ update: EncodedPurchases, policy: OwnershipPolicy?, summary: inout IngestSummary,
    ledger: inout Ledger
  ) throws(StoreError) -> EncodedPurchases {
    guard let policy, policy.needsLedger else { return update }
    let (refused, transfers) = try settle(
      user: update.user, originalTransactionIds: update.originalTransactionIds,
      submittedMs: update.submittedMs, sharing: policy.sharing, tracked: policy.tracked, ledger: &ledger,
      assigned: update.assignedOriginalTransactionIds)
    summary.transfers += transfers
    summary.refused += refused.map { OwnershipRefusal(user: update.user, originalTransactionId: $0) }
    return update.removing(originalTransactionIds: refused)
  }
}
